"""Differential truth: the checker against JAX on random compositions of the registry's ops
(benchmarks/differential.py runs thousands; this runs a few hundred).

Each disagreement the benchmark found is kept here as a regression case,
now fixed: the checker rejects what JAX cannot run, and every accepted
program's types are JAX's.
"""
from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import sexpgpu_runtime  # noqa: F401,E402  (enables x64)
from differential import expr, lower, random_env  # noqa: E402

from sexpgpu_lang.check import check_expression  # noqa: E402
from sexpgpu_lang.types import TensorType  # noqa: E402

#: The disagreements the benchmark found, each fixed: the checker now rejects the first four
#: kinds (as JAX does), and a literal given to an op lowers with the dtype its rule gives it.
REJECTED = {
    "softmax-of-a-scalar": ("(log-softmax a)", {"a": TensorType((), "f32")}, "E-SHAPE-003"),
    "negative-size": ("(iota [2 -1 4] :dtype :i32)", {}, "E-SHAPE-004"),
    "negative-size-zeros": ("(zeros [2 2 -1] :dtype :i32)", {}, "E-SHAPE-004"),
    "uniform-integer-dtype": ("(uniform [2 3] :dtype :i32 :salt 3)", {}, "E-TYPE-002"),
}
LOWERED = {
    "literal-to-shape-op": ("(expand-dims 2)", ((1,), "i32")),
    "literal-to-stop-gradient": ("(stop-gradient -1.5)", ((), "f32")),
    "literal-to-reduction": ("(sum -2)", ((), "i32")),
}


@pytest.mark.parametrize("kind", sorted(REJECTED))
def test_checker_rejects_what_jax_cannot_run(kind):
    text, env, code = REJECTED[kind]
    _, diags = check_expression(text, env)
    assert [d.code for d in diags if d.is_error] == [code]


@pytest.mark.parametrize("kind", sorted(LOWERED))
def test_a_literal_lowers_with_its_rule_dtype(kind):
    text, (shape, dtype) = LOWERED[kind]
    e, diags = check_expression(text, {})
    assert not diags and (e.type.shape, e.type.dtype) == (shape, dtype)
    assert lower(e, {}) is None          # no disagreement: JAX gives exactly the rule's type


def test_random_programs_agree():
    rng = random.Random(20261129)
    accepted, bad = 0, []
    for _ in range(400):
        env = random_env(rng)
        text = expr(rng, env, 3, top=True)
        e, diags = check_expression(text, env)
        if e is None or any(d.is_error for d in diags):
            continue
        accepted += 1
        why = lower(e, env)
        if why is not None:
            bad.append((text, env, why))
    assert accepted > 100
    assert not bad, "\n".join(f"{t}  with {env}: {why}" for t, env, why in bad)
