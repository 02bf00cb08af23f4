"""Reductions (`sum` ... `logsumexp`, `argmax`, `argmin`) and the running sum `cumsum`: a sum keeps its
input dtype (docs/dev/design.md#types).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..types import TensorType, is_float
from .base import RuleError, _show, op


def _reduce(call, *, out_dtype=None, float_only=False):
    x = call.tensor(0)
    axes = call.axes_kw(x.rank)
    keep = call.const_bool("keepdims", False)
    axes = tuple(range(x.rank)) if axes is None else axes
    shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape)) if keep else \
        tuple(d for k, d in enumerate(x.shape) if k not in axes)
    if call.op in ("max", "min") and any(x.shape[k] == 0 for k in axes):   # JAX: "zero-size array ... has no identity"
        raise RuleError("E-SHAPE-004", f"`{call.op}` over an axis of size 0 has no value ({_show(x.shape)})", 0)
    dtype = out_dtype or x.dtype
    if dtype == "bool" and call.op in ("sum", "prod"):
        dtype = "i32"
    if float_only and not is_float(dtype):
        dtype = "f32"
    call.static.update(axes=axes, keepdims=keep, dtype=dtype)
    return TensorType(shape, dtype)


for _name, _doc, _kw in (("sum", "sum over `:axes` (default all); keeps the dtype (bool gives i32)", {}),
                         ("prod", "product over `:axes` (default all); keeps the dtype", {}),
                         ("max", "maximum over `:axes` (default all)", {}),
                         ("min", "minimum over `:axes` (default all)", {}),
                         ("mean", "mean over `:axes` (default all); integers give f32", {"float_only": True}),
                         ("logsumexp", "log of the sum of exponentials over `:axes`; integers give f32", {"float_only": True})):
    op(_name, f"({_name} x :axes [..] :keepdims false)", _doc, kwargs=("axes", "keepdims"), family="reduction",
       example=f"({_name} i :axes [1])")((lambda kw: lambda call: _reduce(call, **kw))(_kw))


def _arg_reduce(call):
    x = call.tensor(0)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", f"`{call.op}` needs at least one axis, got a scalar", 0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    if x.shape[ax] == 0:   # JAX: "attempt to get argmax of an empty sequence"
        raise RuleError("E-SHAPE-004", f"`{call.op}` along axis {ax} of {_show(x.shape)}, of size 0, has no index", 0)
    keep = call.const_bool("keepdims", False)
    shape = tuple(1 if k == ax else d for k, d in enumerate(x.shape)) if keep else \
        tuple(d for k, d in enumerate(x.shape) if k != ax)
    call.static.update(axis=ax, keepdims=keep)
    return TensorType(shape, "i32")


op("argmax", "(argmax x :axis -1 :keepdims false)",
   "index of the largest entry along `:axis` (default the last), as i32",
   kwargs=("axis", "keepdims"), example="(argmax x)", family="reduction")(_arg_reduce)
op("argmin", "(argmin x :axis -1 :keepdims false)",
   "index of the smallest entry along `:axis` (default the last), as i32",
   kwargs=("axis", "keepdims"), example="(argmin l :axis 0)", family="reduction")(_arg_reduce)


@op("cumsum", "(cumsum x :axis -1)", "running sum along `:axis` (default the last), the shape of x; keeps the "
    "dtype as `sum` does (bool gives i32)", kwargs=("axis",), example="(cumsum i :axis 1)", family="reduction")
def _cumsum(call):
    """`jnp.cumsum` along one axis, keeping the input dtype (docs/dev/design.md#types: the reduction rule:
    i32 stays i32, bool counts in i32, where `jnp.cumsum` under x64 gives i64); the lowering passes
    the dtype explicitly. A scalar has no axis (E-SHAPE-003)."""
    x = call.tensor(0)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", "`cumsum` runs along an axis; a scalar has none", 0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    dtype = "i32" if x.dtype == "bool" else x.dtype
    call.static.update(axis=ax, dtype=dtype)
    return TensorType(x.shape, dtype)
