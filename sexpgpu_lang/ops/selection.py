"""Selection: sorting and `top-k`.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..types import PlistType, TensorType
from .base import RuleError, _show, op


def _sortish(call, index: bool):
    x = call.tensor(0)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", f"`{call.op}` needs at least one axis", 0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    desc = call.const_bool("descending", False)
    call.static.update(axis=ax, descending=desc)
    return TensorType(x.shape, "i32" if index else x.dtype)


op("sort", "(sort x :axis -1 :descending false)", "sorted along `:axis`", kwargs=("axis", "descending"),
   example="(sort x)", family="selection")(lambda call: _sortish(call, False))
op("argsort", "(argsort x :axis -1 :descending false)", "indices that sort x along `:axis`, as i32",
   kwargs=("axis", "descending"), example="(argsort x :axis 0)", family="selection")(lambda call: _sortish(call, True))


@op("top-k", "(top-k x k)", "the k largest entries along the last axis: the plist `:values :indices`", args=(2, 2),
    example="(top-k x 2)", family="selection")
def _top_k(call):
    x = call.tensor(0)
    k = call.const_int(1)
    if x.rank == 0 or not 0 < k <= x.shape[-1]:
        raise RuleError("E-SHAPE-003", f"`top-k`: k = {k} needs 1 <= k <= the last axis size of {_show(x.shape)}", 1)
    call.static["k"] = k
    shape = x.shape[:-1] + (k,)
    return PlistType((("values", TensorType(shape, x.dtype)), ("indices", TensorType(shape, "i32"))))
