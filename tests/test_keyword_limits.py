"""Every size, count and seed has a range at lint time: files that used
to lint clean and then crash `sexpgpu run` (or never end) are errors naming the limit."""
from __future__ import annotations

import pytest

from helpers import ROOT, SMALL, check, fixture_text
from sexpgpu_lang import analyze
from sexpgpu_lang.check.keywords import MAX_HOST_CALLS, MAX_SEED, MAX_SIZE

TINY = fixture_text()


def lint(old: str, new: str):
    assert old in TINY
    res = analyze(TINY.replace(old, new, 1))
    return [(d.code, d.message) for d in res.diagnostics if d.is_error]


@pytest.mark.parametrize("old,new,code,message", [
    ("(def seq 8)", "(def seq 18446744073709551616)", "E-SHAPE-004",
     "field `:row`: a size must be at most 2147483647 (XLA's sizes are 32-bit), got 18446744073709551616 in [18446744073709551616]"),
    ("(def dim 64)", "(def dim -1)", "E-SHAPE-004", "`normal`: a size must be 0 or more, got -1 in [16 -1]"),
    ("(def dim 64)", f"(def dim {MAX_SIZE + 1})", "E-SHAPE-004",
     f"`normal`: a size must be at most {MAX_SIZE} (XLA's sizes are 32-bit), got {MAX_SIZE + 1} in [16 {MAX_SIZE + 1}]"),
    (":seed 0", ":seed 9223372036854775808", "E-TYPE-003",
     "`:seed` must be at most 9223372036854775807, got 9223372036854775808 (JAX's and numpy's seeds are 64-bit signed integers)"),
    (":microbatches 2", ":microbatches 18446744073709551616", "E-TYPE-003",
     f"`:microbatches` must be at most {MAX_HOST_CALLS}, got 18446744073709551616 (each is a call from the host loop in every step)"),
    (":trips 6", ":trips 2147483647", "E-GEN-005", f"`:trips` must be an integer from 1 to {MAX_HOST_CALLS}, got 2147483647"),
    (":steps 1500", f":steps {MAX_SIZE + 1}", "E-TYPE-003",
     f"`:steps` must be at most {MAX_SIZE}, got {MAX_SIZE + 1} (the optimizer's step counter is a 32-bit integer)"),
    (":batch 64", f":batch {2**40}", "E-TYPE-003",
     f"`:batch` must be at most {MAX_SIZE}, got {2**40} (XLA's sizes are 32-bit)"),
])
def test_out_of_range_is_an_error_naming_the_limit(old, new, code, message):
    assert (code, message) in lint(old, new)


@pytest.mark.parametrize("old,new", [
    (":seed 0", f":seed {MAX_SEED}"),
    (":trips 6", f":trips {MAX_HOST_CALLS}"),
    (":microbatches 2", f":microbatches {MAX_HOST_CALLS}"),
    (":steps 1500", f":steps {MAX_SIZE}"),
    ("(def dim 64)", "(def dim 0)"),
])
def test_the_limits_themselves_are_accepted(old, new):
    assert lint(old, new) == []


def test_the_largest_seed_is_one_jax_and_numpy_take():
    jax = pytest.importorskip("jax")
    import numpy as np
    from sexpgpu_runtime.data.loaders import _seed_words
    jax.random.key(MAX_SEED)
    np.random.default_rng(_seed_words(MAX_SEED, "train", 0))
    with pytest.raises(OverflowError):
        jax.random.key(MAX_SEED + 1)


def test_run_refuses_parameters_that_could_never_fit():
    pytest.importorskip("jax")
    from sexpgpu_runtime.devices.device import fit_verdict
    program = analyze(TINY.replace("(def dim 64)", "(def dim 2000000000)")).program
    assert program is not None
    why = fit_verdict(program, 80 * 2**30, "H100 memory")
    assert why is not None and why.startswith("the parameters and optimizer state take ")
    assert "more than the 80.0 GiB of H100 memory: the run could never fit" in why
    # The tiny model fits (tests/test_memory_fit.py: the activations, the host memory, the run itself).
    assert fit_verdict(analyze(TINY).program, 80 * 2**30, "H100 memory") is None


def test_a_size_an_op_makes_past_32_bits_is_reported_where_it_is_made():
    # Not only literal sizes: the shape every op infers (here 65536 * 65536 entries in one axis).
    objective = "(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))))\n"
    assert objective in SMALL
    check(SMALL.replace(objective, "") + """\
(def wide 65536)
(objective (lambda (inputs ctx)
  (+ (sum (reshape (zeros [wide wide]) [-1]))
;;        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ E-SHAPE-004
     (sum (reshape (zeros [wide 2]) [-1]))
     (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y))))))
""")


def test_a_folded_integer_def_past_i32_is_e_type_002():
    # `(* prompts group)` with group 134217728 is 2**31: an i32 cannot hold it (one diagnostic,
    # at the `def` that folds it; its uses are not reported again).
    text = SMALL.replace("(def seq 8)\n", "(def seq 8)\n(def prompts 16)\n(def group 134217728)\n"
                         "(def rows (* prompts group))\n")
    text = text.replace("(objective (lambda (inputs ctx) (mean", "(objective (lambda (inputs ctx) (+ (cast rows :f32) (mean")
    text = text.replace("(getf inputs :y)))))", "(getf inputs :y))))))")
    res = analyze(text, "grpo.sx")
    got = [(d.code, res.source.text[d.span.start:d.span.end], d.message) for d in res.diagnostics]
    assert got == [("E-TYPE-002", "(* prompts group)",
                    "`*` gives 2147483648, which does not fit in i32, its dtype")]
    check(SMALL + """\
(def a 65536)
(def big (* a a))
;;       ^^^^^^^ E-TYPE-002
(def fits (+ (* 32767 65536) 65535))
(def lowest (* -32768 65536))
(def low (- (* -32768 65536) 1))
;;       ^^^^^^^^^^^^^^^^^^^^^^ E-TYPE-002
""")
