"""Differential truth: the checker against JAX on random compositions of the registry's ops
(benchmarks/differential.py runs thousands; this runs a few hundred).

Each disagreement the benchmark found is kept here as a regression case,
asserting today's behaviour: the checker accepts a program the runtime
cannot lower, or infers a type JAX does not give. FIXME (issue 8): each
`KNOWN` kind is a bug in a rule of `sexpgpu_lang/ops.py` (or in its
lowering); when one is fixed, its case here fails and moves to the
agreeing side.
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

#: Kind -> (a program, its names, what JAX says). All accepted by the checker today.
KNOWN = {
    # FIXME: softmax / log-softmax of a rank-0 tensor: the rule accepts it, JAX has no axis to normalise over
    "softmax-of-a-scalar": ("(log-softmax a)", {"a": TensorType((), "f32")}, r"axis \d+ is out of bounds"),
    # FIXME: a negative size in a shape vector of a creation op: accepted, JAX refuses the shape
    "negative-size": ("(iota [2 -1 4] :dtype :i32)", {}, r"must have every element be nonnegative"),
    "negative-size-zeros": ("(zeros [2 2 -1] :dtype :i32)", {}, r"must have every element be nonnegative"),
    # FIXME: `uniform` with an integer `:dtype`: accepted, jax.random.uniform takes float dtypes only
    "uniform-integer-dtype": ("(uniform [2 3] :dtype :i32 :salt 3)", {}, r"must be a float dtype"),
    # FIXME: a bare literal as the tensor of a shape op: the rule types it [] i32 / f32, the lowering
    # gets a Python number that x64 JAX makes i64 / f64 (or has no dtype at all)
    "literal-to-shape-op": ("(expand-dims 2)", {}, r"JAX gave \[1\] i64, the rule says \[1\] i32"),
    "literal-to-stop-gradient": ("(stop-gradient -1.5)", {}, r"JAX gave \[\] float64, the rule says \[\] f32"),
    "literal-to-reduction": ("(sum -2)", {}, r"has no attribute 'dtype'"),
}


@pytest.mark.parametrize("kind", sorted(KNOWN))
def test_known_disagreement_today(kind):
    text, env, jax_says = KNOWN[kind]
    e, diags = check_expression(text, env)
    assert e is not None and not [d for d in diags if d.is_error], [d.message for d in diags]   # accepted
    why = lower(e, env)
    assert why is not None and re.search(jax_says, why), why


def known_kind(why: str) -> bool:
    return any(re.search(pattern, why) for _, _, pattern in KNOWN.values()) or \
        re.search(r"JAX gave \[[\d ]*\] (i64|float64), the rule says \[[\d ]*\] (i32|f32)", why) is not None or \
        "require non-empty reduced dimension" in why   # a negative size reaching argmin / argmax


def test_random_programs_agree_but_for_the_known_kinds():
    rng = random.Random(20261129)
    accepted, new = 0, []
    for _ in range(400):
        env = random_env(rng)
        text = expr(rng, env, 3, top=True)
        e, diags = check_expression(text, env)
        if e is None or any(d.is_error for d in diags):
            continue
        accepted += 1
        why = lower(e, env)
        if why is not None and not known_kind(why):
            new.append((text, env, why))
    assert accepted > 100
    assert not new, "\n".join(f"{t}  with {env}: {why}" for t, env, why in new)
