"""A `def` folded from arithmetic is a constant wherever it is used as a value.

`(def two (* 2 1))` checks to an integer constant (check/keywords.integer_constant); its uses
must lower as that literal, as `(def two 2)` does: in the generator's phases, in prepare (a
counter), in objective, and inside a model's `:apply`. The runtime binds no top-level name, so
a use left as a variable fails at trace time (it was a `KeyError` traceback).
"""
from __future__ import annotations

import json

import pytest

from helpers import fixture_text, program_of, run, variant
from sexpgpu_lang import ir

DEFS = "(def vocab 16)\n(def seq 8)\n(def dim 64)\n(def two (* 2 1))\n(def half-seq (/ seq 2))\n(def nine (+ vocab -7))\n"

#: Each kind of use: the fixture's text, and the same with a folded def in it.
USES = {
    "objective": ("(mean (cross-entropy logits (getf inputs :target)))",
                  "(* (/ (cast two :f32) 2.0) (mean (cross-entropy logits (getf inputs :target))))"),
    "counter": ("(counter :tokens (size (field batch :sample)))",
                "(counter :tokens (* nine (size (field batch :sample))))"),
    "generator step": ("(at (+ (cast trip :i32) 2))", "(at (+ (cast trip :i32) two))"),
    "generator finish": ("(list :sample row", "(list :sample (+ row (* 0 half-seq))"),
    "model apply": ("(h (relu (matmul (+ here start next) (getf self :hidden))))",
                    "(h (relu (* (cast (- two 1) :f32) (matmul (+ here start next) (getf self :hidden)))))"),
}


def folded(use: str) -> str:
    """The fixture with the folded defs and one use of them."""
    return variant(*USES[use], variant("(def vocab 16)\n(def seq 8)\n(def dim 64)\n", DEFS))


def phase_bodies(prog: ir.Program):
    g = prog.generate
    return [p.body for p in (prog.prepare, prog.objective, g.init, g.step, g.finish) if p is not None]


def test_a_folded_def_is_no_variable_in_the_ir():
    prog = program_of(folded("objective"))
    found = [e for body in phase_bodies(prog) for e in ir.walk(body)]
    assert not [e for e in found if isinstance(e, ir.Var) and e.name in ("two", "half-seq", "nine")]
    assert any(isinstance(e, ir.Const) and e.value == 2 and not isinstance(e.value, bool) for e in found)


def metrics(run_dir):
    return [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("use", sorted(USES))
def test_a_folded_def_used_as_a_value_trains(tmp_path, use):
    run(folded(use), tmp_path / "run", 2)
    assert [r["step"] for r in metrics(tmp_path / "run")][-1] == 2


@pytest.mark.slow
def test_the_folded_def_gives_the_literals_bits(tmp_path):
    # `two` where the fixture says 2: the same run, bit for bit.
    run(fixture_text(), tmp_path / "literal", 3)
    run(folded("generator step"), tmp_path / "folded", 3)
    keep = ("step", "loss", "generation-accuracy")
    rows = lambda d: [{k: r[k] for k in keep if k in r} for r in metrics(d)]
    assert rows(tmp_path / "literal") == rows(tmp_path / "folded")
    assert rows(tmp_path / "literal")[0]["loss"]
