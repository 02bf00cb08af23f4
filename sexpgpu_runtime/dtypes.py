"""SexpGPU dtype names to JAX dtypes, and the check of a traced value against its IR type."""
from __future__ import annotations

import jax.numpy as jnp

from sexpgpu_lang.types import PlistType, TensorType, Type

JAX_DTYPES = {"bool": jnp.bool_, "i32": jnp.int32, "i64": jnp.int64, "f16": jnp.float16,
              "bf16": jnp.bfloat16, "f32": jnp.float32}
NAMES = {jnp.dtype(v): k for k, v in JAX_DTYPES.items()}


def jdt(name: str):
    """The JAX dtype for a SexpGPU dtype name (`i32` -> int32)."""
    return JAX_DTYPES[name]


def name_of(dtype) -> str:
    """The SexpGPU name of a JAX/NumPy dtype, or its own name when SexpGPU has none (f64...)."""
    return NAMES.get(jnp.dtype(dtype), str(jnp.dtype(dtype)))


def mismatch(value, t: Type) -> str | None:
    """Why a traced value does not have IR type `t` (shape and dtype), or None when it does."""
    if isinstance(t, TensorType):
        shape = tuple(getattr(value, "shape", ()))
        dtype = name_of(getattr(value, "dtype", jnp.asarray(value).dtype))
        if shape != t.shape or dtype != t.dtype:
            return f"JAX gave [{' '.join(map(str, shape))}] {dtype}, the rule says {t.strong().show()}"
        return None
    if isinstance(t, PlistType) and isinstance(value, dict):
        for k, sub in t.entries:
            why = mismatch(value.get(k), sub) if k in value else f"missing :{k}"
            if why:
                return f":{k}: {why}"
    return None
