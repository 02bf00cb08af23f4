"""Conversion: `cast` and `stop-gradient`.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..types import TensorType
from .base import op


@op("cast", "(cast x :dtype)", "convert to a dtype", args=(2, 2), example="(cast x :bf16)")
def _cast(call):
    x = call.tensor(0)
    dt = call.dtype_arg(1)
    call.static["dtype"] = dt
    return TensorType(x.shape, dt)


@op("stop-gradient", "(stop-gradient x)", "x, with no gradient flowing back through it", example="(stop-gradient x)")
def _stop(call):
    return call.tensor(0).strong() if call.tensor(0).value is None else call.tensor(0)
