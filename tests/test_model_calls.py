"""A model called twice with different constants computes each call with its own.

A model's body is checked once per distinct argument types and reused for later calls with the
same (check/infer.call_model). A constant argument's value is part of its type (`[0 pos]` of a
constant `pos` checks to a constant shape, a constant `:temperature` to a static one), so two
calls that differ only in a constant must not share a body: they did, and `(lm :at 4)` and
`(lm :at 5)` then both read column 4.
"""
from __future__ import annotations

import pytest

import json

import numpy as np

from helpers import SMALL, program_of, run, variant

ENTRY = variant(
    "  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))",
    "  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out)))\n"
    "  :entries (:at (lambda (self pos) (sum (dynamic-slice (getf self :out) [0 pos] [32 1])))\n"
    "            :scaled (lambda (self s) (sum (* s (getf self :out))))\n"
    "            :draw (lambda (self row temp) (categorical (matmul (take (getf self :embed) row) (getf self :out))\n"
    "                                                       :salt 7 :temperature temp))))",
    SMALL)

OBJECTIVE = "(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))))"


def with_objective(metrics: str) -> str:
    return variant(OBJECTIVE, "(objective (lambda (inputs ctx)\n"
                   f"  {metrics}\n"
                   "  (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))))", ENTRY)


def first_row(text: str, tmp_path) -> dict:
    run(text, tmp_path, 1)
    return json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])


@pytest.mark.slow
def test_calls_with_other_constant_positions_read_their_own_columns(tmp_path):
    text = with_objective("(metric :a (lm :at 4)) (metric :b (lm :at 5)) (metric :c (lm :at 4))")
    row = first_row(text, tmp_path / "both")
    # Each alone, so no body is shared: the same draws (the parameters' places are unchanged).
    alone = first_row(with_objective("(metric :a (lm :at 5)) (metric :b (lm :at 4))"), tmp_path / "alone")
    assert row["a"] != row["b"]
    assert row["a"] == row["c"] == alone["b"]
    assert row["b"] == alone["a"]


@pytest.mark.slow
def test_calls_with_other_constant_floats_scale_by_their_own(tmp_path):
    row = first_row(with_objective("(metric :a (lm :scaled 1.0)) (metric :b (lm :scaled 3.0))"), tmp_path)
    np.testing.assert_allclose(row["b"], 3.0 * row["a"], rtol=1e-5)


@pytest.mark.slow
def test_calls_with_other_constant_temperatures_draw_by_their_own(tmp_path):
    # temperature 0 is the argmax, a static choice made from the constant: a later call at 100
    # must still sample
    ids = lambda call: f"(mean (cast {call} :f32))"
    row = first_row(with_objective(f"(metric :greedy {ids('(lm :draw (getf inputs :x) 0.0)')})"
                                   f" (metric :hot {ids('(lm :draw (getf inputs :x) 100.0)')})"
                                   f" (metric :argmax {ids('(argmax (model (getf inputs :x)))')})"), tmp_path)
    assert row["greedy"] == row["argmax"]
    assert row["hot"] != row["greedy"]


def test_the_checked_program_has_both_bodies():
    prog = program_of(with_objective("(metric :a (lm :at 4)) (metric :b (lm :at 5))"))
    from sexpgpu_lang import ir
    shapes = {e.value for e in ir.walk(prog.objective.body) if isinstance(e, ir.Const) and isinstance(e.value, tuple)}
    assert {(0, 4), (0, 5)} <= shapes
