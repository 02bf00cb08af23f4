"""Every registry op: JAX's result shape and dtype equal the rule's (docs/dev/design.md#types).

The rule runs in sexpgpu_lang (no JAX); the lowering in sexpgpu_runtime
traces the same IR with real arrays under jax_enable_x64. The evaluator
itself also compares every op's result with its IR type at trace time;
here we assert it directly, op by op, on each op's `example`.
"""
import numpy as np
import pytest

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax.numpy as jnp

from helpers import evaluate_expression
from sexpgpu_lang.ops import EXAMPLE_ENV, REGISTRY
from sexpgpu_lang.types import PlistType, TensorType
from sexpgpu_runtime.dtypes import jdt, name_of
from sexpgpu_runtime.lowering.lowering import LOWERINGS


def sample(t: TensorType, seed: int):
    rng = np.random.default_rng(seed)
    if t.dtype == "bool":
        return jnp.asarray(rng.random(t.shape) > 0.5)
    if t.dtype in ("i32", "i64"):
        return jnp.asarray(rng.integers(0, 2, t.shape), dtype=jdt(t.dtype))
    return jnp.asarray(rng.random(t.shape) + 0.1, dtype=jdt(t.dtype))


def test_registry_and_lowerings_have_the_same_ops():
    assert set(REGISTRY) == set(LOWERINGS)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_jax_agrees_with_rule(name):
    spec = REGISTRY[name]
    assert spec.example, f"{name} has no example"
    env = {k: sample(t, i) for i, (k, t) in enumerate(EXAMPLE_ENV.items())}
    rule, out, _ = evaluate_expression(spec.example, env, types=EXAMPLE_ENV)
    if isinstance(rule, PlistType):
        for k, t in rule.entries:
            assert (tuple(out[k].shape), name_of(out[k].dtype)) == (t.shape, t.dtype), k
    else:
        assert isinstance(rule, TensorType)
        assert (tuple(jnp.shape(out)), name_of(jnp.asarray(out).dtype)) == (rule.shape, rule.dtype)


@pytest.mark.parametrize("text,shape,dtype", [
    ("(+ (cast n :i32) 2)", (), "i32"),        # the trip cast to i32 plus a literal stays i32
    ("(+ i 0.5)", (2, 3), "f32"),               # weak float with i32: f32, not x64's f64
    ("(sum i)", (), "i32"),                     # x64 would give i64
    ("(argmax x)", (2,), "i32"),                # x64 would give i64
    ("(mean i :axes [1] :keepdims true)", (2, 1), "f32"),
    ("(* n 65536)", (), "i64"),
    ("(+ h 1.0)", (2, 3), "bf16"),              # weak float keeps bf16
])
def test_dtype_rules_where_jax_defaults_differ(text, shape, dtype):
    env = {k: sample(t, 1) for k, t in EXAMPLE_ENV.items()}
    rule, out, _ = evaluate_expression(text, env, types=EXAMPLE_ENV, clean=True)
    assert (rule.shape, rule.dtype) == (shape, dtype)
    assert (out.shape, name_of(out.dtype)) == (shape, dtype)
