"""Mistakes JAX runs without a word, reported by the checker.

- W-SHAPE-001: an index or label provably outside the axis it indexes (`check/ranges.py`);
  the ranges the checker proves are compared with the values NumPy computes.
- W-RAND-003 (information): a draw inside `:step` whose salt is the same at every trip.
- W-GEN-001 (a hint): under `:precision :bf16`, a state entry `:init` makes `f32`, with its bytes.
"""
from __future__ import annotations

import numpy as np
import pytest

from helpers import check
from runfile import RunFile
from sexpgpu_lang import Severity, analyze, ir
from sexpgpu_lang.check.ranges import value_range

FIXTURE = RunFile.fixture()


def with_labels(labels: str) -> RunFile:
    """The fixture whose objective's cross-entropy reads `labels`."""
    return FIXTURE.set("objective (cross-entropy", f"(cross-entropy logits {labels})")


def with_embedded(indices: str) -> RunFile:
    """The fixture whose student embeds `indices` (its `here` binding)."""
    return FIXTURE.set("defmodel student (here", f"(here (take (getf self :embed) {indices}))")


def shown(text: str):
    return list(analyze(text, "case.sx").diagnostics)


# --------------------------------------------------------------------------- W-SHAPE-001


@pytest.mark.parametrize("labels,message", [
    ("(full [64 seq] vocab)", "the labels are 16, outside the 16 classes of the logits' last axis (0 to 15)"),
    ("(+ (mod (getf inputs :target) vocab) vocab)",
     "the labels are all from 16 to 31, outside the 16 classes of the logits' last axis (0 to 15)"),
    ("(- (iota [64 seq] :axis 1) 1)", "the labels reach -1, outside the 16 classes of the logits' last axis (0 to 15)"),
])
def test_labels_outside_the_vocabulary(labels, message):
    [d] = check(with_labels(labels).mark("objective (cross-entropy", labels, "W-SHAPE-001")).diagnostics
    assert d.message == message


@pytest.mark.parametrize("indices", [
    "(+ (iota [64 seq] :axis 1) 9)",        # positions 9 to 16 of a 16-row table
    "(* (iota [64 seq] :axis 1) 3)",        # 0 to 21
    "(full [64 seq] 16)",
])
def test_indices_past_the_table(indices):
    [d] = check(with_embedded(indices).mark("defmodel student (here", indices, "W-SHAPE-001")).diagnostics
    assert "outside axis 0 of `take`'s [16 64] f32 (0 to 15)" in d.message


def test_a_let_bound_or_function_argument_index_is_followed():
    src = with_embedded("(* pos 2)").edit("defmodel student :apply", "(let* (", "(let* ((pos (+ (iota [64 seq] :axis 1) 1))\n")
    check(src.mark("defmodel student (here", "(* pos 2)", "W-SHAPE-001"))
    src = FIXTURE.add("(def at-table (lambda (t i) (take t i)))", before="defmodel student").set(
        "defmodel student (here", "(here (at-table (getf self :embed) (+ (iota [64 seq] :axis 1) 9)))")
    [d] = shown(src)
    assert d.code == "W-SHAPE-001"


@pytest.mark.parametrize("labels", [
    "(getf inputs :target)",                          # nothing known
    "(mod (+ (getf inputs :target) 1) vocab)",        # 0 to 15 at most
    "(+ (mod (getf inputs :target) vocab) 1)",        # 1 to 16, but 16 may never occur: not proven
    "(where (< (getf inputs :target) 8) (getf inputs :target) 0)",
    "(iota [64 seq] :axis 1)",                        # 0 to 7
    "(full [64 seq] 15)",
])
def test_labels_not_proven_outside_are_not_reported(labels):
    check(with_labels(labels))


def test_one_hot_indices_past_its_classes():
    src = FIXTURE.set("defgenerate :finish (list :correct", "(mean (one-hot (+ (iota [64 1] :axis 0) 1) 64) :axes [1] :keepdims true)")
    [d] = shown(src)
    assert d.code == "W-SHAPE-001" and "outside the 64 classes of `one-hot` (0 to 63)" in d.message


EXPRS = ["(+ (iota [4 6] :axis 1) 3)", "(* (- (iota [4 6] :axis 0) 2) -3)", "(mod (+ (iota [4 6] :axis 1) 2) 5)",
         "(full [4 6] 7)", "(minimum (iota [4 6] :axis 1) 3)", "(+ (argmax (zeros [4 6 5]) :axis -1) 1)",
         "(where (> (iota [4 6] :axis 0) 1) (iota [4 6] :axis 1) 9)", "(+ (iota [4 6] :axis 0) (iota [4 6] :axis 1))"]
NUMPY = [lambda r, c: c + 3, lambda r, c: (r - 2) * -3, lambda r, c: np.mod(c + 2, 5), lambda r, c: np.full((4, 6), 7),
         lambda r, c: np.minimum(c, 3), None, lambda r, c: np.where(r > 1, c, 9), lambda r, c: r + c]


@pytest.mark.parametrize("expr,reference", list(zip(EXPRS, NUMPY)))
def test_a_proven_range_holds_the_values_numpy_computes(expr, reference):
    src = FIXTURE.set("defgenerate :step (list :stride", f"(+ (getf state :stride) (* 0 (sum {expr})))")
    res = analyze(src, "case.sx")
    assert not res.diagnostics, [d.message for d in res.diagnostics]
    step = res.program.generate.step
    [e] = [n for n in ir.walk(step.body) if isinstance(n, ir.Op) and n.name == "sum"
           and src[n.args[0].span.start:n.args[0].span.end] == expr]
    lo, hi, exact = value_range(e.args[0], lambda name: None)
    if reference is None:    # argmax of [4 6 5] plus 1: 1 to 5, not exact
        assert (lo, hi, exact) == (1, 5, False)
        return
    r, c = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    want = reference(r, c)
    assert lo <= want.min() and want.max() <= hi
    if exact:
        assert (lo, hi) == (want.min(), want.max())


# --------------------------------------------------------------------------- W-RAND-003


def test_a_salt_the_same_at_every_trip_is_information():
    draw = "(categorical (model row) :salt (getf ctx :step))"
    src = FIXTURE.set("defgenerate :step (argmax", draw)
    [d] = check(src.mark("defgenerate :step (categorical :salt", "(getf ctx :step)", "W-RAND-003")).diagnostics
    assert d.severity == Severity.INFORMATION
    assert d.message == "this salt is the same at every trip of `:step`, so `categorical` draws the same bits at every trip"
    assert d.help.endswith("`:salt (+ (* (getf ctx :step) 65536) trip)`")


@pytest.mark.parametrize("salt", [
    "(+ (* (getf ctx :step) 65536) trip)",      # the trip itself
    "(+ at (getf ctx :step))",                  # a binding computed from the trip
    "(sum row)",                                # the state
])
def test_a_salt_that_changes_between_trips_is_not_reported(salt):
    check(FIXTURE.set("defgenerate :step (argmax", f"(categorical (model row) :salt {salt})"))


def test_a_draw_outside_step_or_inside_a_model_is_not_judged():
    # :init runs once per step: a step salt is right there
    check(FIXTURE.set("defgenerate :init (list :stride",
                      "(+ (field batch :stride) (cast (bernoulli (full [64 1] 0.0) :salt (getf ctx :step)) :i32))"))
    # inside a model the salt comes from its argument, whatever that is at each trip
    # (frozen: a trainable model read only by the generator would be W-MODEL-002)
    src = FIXTURE.set("model", "(model pair)").add(
        "(defmodel sampler\n  :frozen true\n  :params (:embed (normal [vocab vocab] :std 0.1))\n"
        "  :apply (lambda (self row salt) (categorical (take (getf self :embed) row) :salt salt)))\n\n"
        "(defmodel pair\n  :params (:student student :sampler sampler)\n"
        "  :apply (lambda (self row) (student row)))", before="model")
    check(src.set("defgenerate :step (argmax", "(sampler row (getf ctx :step))"))


# --------------------------------------------------------------------------- W-GEN-001

BF16 = FIXTURE.set("run :precision", ":bf16")


def with_cache(text: RunFile, made: str, kept: str) -> RunFile:
    """`text` whose generator's state holds `:cache`, made in `:init` by `made` and kept by `:step` as `kept`."""
    return text.set("defgenerate :init (list :cache", made).set("defgenerate :step (list :cache", kept)


@pytest.mark.parametrize("made,help_fix", [
    ("(zeros [64 seq vocab])", "`(zeros [64 8 16] :bf16)`"),
    ("(cast (zeros [64 seq vocab] :bf16) :f32)", "`(cast ... :bf16)`"),
    ("(full [64 seq vocab] 0.5)", "`(full [64 8 16] ... :bf16)`"),
])
def test_an_f32_state_entry_under_bf16_is_a_hint_with_its_bytes(made, help_fix):
    src = with_cache(BF16, made, "(cast (model row) :f32)")
    [d] = check(src.mark("defgenerate :init", made, "W-GEN-001")).diagnostics
    assert d.severity == Severity.HINT
    nbytes = 64 * 8 * 16 * 4
    assert d.message == (f"the state entry `:cache` is `[64 8 16] f32` under `:precision :bf16`: "
                         f"{nbytes // 1024} KiB a microbatch, twice its {nbytes // 2048} KiB in bf16")
    assert help_fix in d.help


def test_a_bf16_or_computed_f32_state_or_an_f32_run_gives_no_hint():
    check(with_cache(BF16, "(zeros [64 seq vocab] :bf16)", "(cast (model row) :bf16)"))
    check(with_cache(FIXTURE, "(zeros [64 seq vocab])", "(model row)"))
    # an f32 entry computed from the batch, not made with zeros or a cast
    check(BF16.set("defgenerate :init (list :score", "(mean (cast (field batch :row) :f32) :axes [1])")
          .set("defgenerate :step (list :score", "(getf state :score)"))
