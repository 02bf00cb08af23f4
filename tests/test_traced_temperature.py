"""A generator's traced `categorical` temperature that is negative or not finite stops the run at
that step: one line naming the step, the draw, the trip and the fix, exit 2, the checkpoints
before it kept and nothing of it saved. The check is one more output of the trip graph, read with
the step's other records (never per trip); a fine traced temperature trains bit for bit as
without the check, and constant temperatures are not checked at run time at all."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from helpers import fixture_text, program_of, variant
from test_until import UNTIL

pytestmark = pytest.mark.slow


SEXPGPU = str(Path(sys.executable).with_name("sexpgpu"))

#: The fixture's student (two microbatches stacked) samples instead of taking the argmax.
GREEDY = "(argmax (model row))"


def sampled(temperature: str, text: str | None = None) -> str:
    """The fixture (or `text`) with its greedy guess a `categorical` at `temperature`."""
    return variant(GREEDY, f"(categorical (model row) :salt 1 :temperature {temperature})", text)


def unstacked(text: str) -> str:
    return variant(":stack 2", ":stack 1", text)


def place_of(text: str) -> tuple[int, int]:
    """1-based line and column of the `(categorical` of `text`."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if "(categorical" in line)
    return i + 1, lines[i].index("(categorical") + 1


def train_of(text: str, steps: int, run_dir: Path, **kw):
    from sexpgpu_runtime import RunOptions, train
    return train(program_of(text, str(run_dir / "run.sx")), RunOptions(steps=steps, run_dir=run_dir, quiet=True), **kw)


def flat(tree):
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(tree)}


def test_a_negative_traced_temperature_stops_the_run_at_its_step(tmp_path):
    """1.5 - `:step`: 1.5 at step 1, 0.5 at step 2, -0.5 at step 3 (the context's `:step` counts
    from 0); stacked, logged and checkpointed every step."""
    text = sampled("(- 1.5 (cast (getf ctx :step) :f32))")
    text = variant(":log (:every 50))", ":log (:every 1)\n     :checkpoint (:every 1))", text)
    path = tmp_path / "hot.sx"
    path.write_text(text, encoding="utf-8")
    run_dir = tmp_path / "run"
    proc = subprocess.run([SEXPGPU, "run", str(path), "--steps", "5", "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sexpgpu: error:")]
    line, col = place_of(text)
    assert errors == [f"sexpgpu: error: step 3: the `:temperature` of the `categorical` at {path}:{line}:{col} is "
                      "-0.5 at trip 0 of the generator; it must be finite and 0 or more (0 is the argmax), so "
                      "compute it so that it stays in range, e.g. `(maximum t 0.0)`; the last good checkpoint is "
                      f"step 2 in {run_dir / 'checkpoints'}"], proc.stderr
    # the steps before it were saved and logged; nothing of step 3 or later was
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()) == ["1", "2"]
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]


def test_a_nan_temperature_is_named_with_its_trip_read_with_the_steps_records(tmp_path):
    """sqrt(3.5 - trip * `:step`) is first NaN at trip 4 of step 2; logged every 50 steps (and at
    steps 1 and 3, the first and last) and never checkpointed, the record is read at the end:
    every trip of the 3 steps (two groups of one microbatch each) was queued without waiting."""
    from sexpgpu_runtime import BadDraw
    text = unstacked(sampled("(sqrt (- 3.5 (* (cast trip :f32) (cast (getf ctx :step) :f32))))"))
    seen = []
    with pytest.raises(BadDraw) as err:
        train_of(text, 3, tmp_path, on_trip=lambda step, trip: seen.append((step, trip)))
    e = err.value
    assert (e.step, e.trip, e.pass_name) == (2, 4, None) and math.isnan(e.value)
    line, col = place_of(text)
    assert e.where == f"{tmp_path / 'run.sx'}:{line}:{col}"
    assert "is nan at trip 4 of the generator" in str(e) and "no checkpoint was saved" in str(e)
    assert seen == [(s, t) for s in range(3) for group in range(2) for t in range(6)]


def test_a_negative_temperature_with_until(tmp_path):
    """With `:until` (every row done after trip 1, the flag read 3 trips late): 0.5 - `:step` is
    -0.5 at step 2, named at its first trip."""
    from sexpgpu_runtime import BadDraw
    text = sampled("(- 0.5 (cast (getf ctx :step) :f32))", UNTIL)
    seen = []
    with pytest.raises(BadDraw) as err:
        train_of(text, 3, tmp_path, on_trip=lambda step, trip: seen.append((step, trip)))
    assert (err.value.step, err.value.trip, err.value.value) == (2, 0, -0.5)
    assert seen == [(s, t) for s in range(3) for t in range(4)]   # `:until` still ends the trips early


def test_a_fine_traced_temperature_trains_bit_for_bit_as_without_the_check(tmp_path, monkeypatch):
    import sexpgpu_runtime.lowering.generator_graphs as graphs
    text = sampled("(+ 0.25 (cast (getf ctx :step) :f32))")
    assert len(graphs.traced_temperatures(program_of(text).generate)) == 1   # the first run is checked
    checked = train_of(text, 2, tmp_path / "checked")
    monkeypatch.setattr(graphs, "traced_temperatures", lambda gen: ())
    plain = train_of(text, 2, tmp_path / "plain")
    a, b = flat(checked.trainable), flat(plain.trainable)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert checked.traces == plain.traces   # each graph traced once, checked or not


def test_only_traced_temperatures_are_checked():
    """A constant temperature (0 included), an argmax: no site, so the trip graph is the one it was
    (the five arguments; its output the state). A traced one: one site, at the draw."""
    from sexpgpu_runtime.lowering.draw_check import draw_like, traced_temperatures
    from sexpgpu_runtime.lowering.graphs import Graphs
    from sexpgpu_runtime.weights.optim import make_optimizer
    from sexpgpu_runtime.lowering.xla_report import _params, _rows, _tree
    for text in (fixture_text(), sampled("0.7"), sampled("0")):
        prog = program_of(text)
        assert traced_temperatures(prog.generate) == ()
    traced = sampled("(cast (getf ctx :step) :f32)")
    prog = program_of(traced)
    sites = traced_temperatures(prog.generate)
    assert len(sites) == 1 and prog.line_col(sites[0][1]) == place_of(traced)
    const = program_of(sampled("0.7"))
    for p, extra in ((const, ()), (prog, (draw_like(),))):
        g = Graphs(p, make_optimizer(p.run.optimizer))
        tr, fr = _params(p)
        args = (tr, fr, _tree(p.generate.state, 1), jax.ShapeDtypeStruct((), "int64"), _rows(1)) + extra
        out = g.gen_step_1.lower(*args).out_info
        if extra:
            out, record = out
            assert [str(r.dtype) for r in record] == ["int64", "int64", "int32", "float32"]
        assert set(out) == set(p.generate.state.keys)


def test_a_pass_names_itself(tmp_path):
    """1 - 2 `:pass`: 1 in training, -1 in the pass after step 2, which the error names."""
    from sexpgpu_runtime import BadDraw
    text = unstacked(sampled("(- 1.0 (* 2.0 (cast (getf ctx :pass) :f32)))"))
    text = variant("(run :loader train", "(pass check :loader train :every 2 :batches 1)\n\n(run :loader train", text)
    with pytest.raises(BadDraw) as err:
        train_of(text, 3, tmp_path)
    assert (err.value.step, err.value.trip, err.value.value, err.value.pass_name) == (2, 0, -1.0, "check")
    assert "is -1.0 at trip 0 of pass `check`'s generator" in str(err.value)


def test_a_checked_trip_graph_compiles_for_xla_report_and_the_differential():
    """`sexpgpu explain --xla` and the differential's runtime check lower the checked trip graph,
    stacked too, with its record: no graph fails and every phase has the checker's types."""
    from tests.differential.runtime_check import phase_runtime
    from sexpgpu_runtime.lowering.xla_report import compile_graphs
    prog = program_of(sampled("(cast (getf ctx :step) :f32)"))
    assert [k for k, v in compile_graphs(prog, 2).items() if "error" in v] == []
    assert phase_runtime(prog) is None


def test_after_a_resume_the_error_names_the_last_good_checkpoint(tmp_path):
    """1.5 - `:step` is -0.5 at step 3: a first run of 2 steps (checkpointed every step), then a
    resume to 4 stops at step 3 with the same line as a run that was never resumed."""
    from sexpgpu_runtime import BadDraw, RunOptions, train
    text = sampled("(- 1.5 (cast (getf ctx :step) :f32))")
    text = variant(":log (:every 50))", ":log (:every 50)\n     :checkpoint (:every 1))", text)
    prog = program_of(text, str(tmp_path / "run.sx"))
    run_dir = tmp_path / "run"
    train(prog, RunOptions(steps=2, run_dir=run_dir, quiet=True))
    with pytest.raises(BadDraw) as err:
        train(prog, RunOptions(steps=4, run_dir=run_dir, quiet=True, resume=True))
    assert err.value.step == 3
    assert str(err.value).endswith(f"`(maximum t 0.0)`; the last good checkpoint is step 2 in {run_dir / 'checkpoints'}")
