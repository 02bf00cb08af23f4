"""Reads and writes at a traced position: `dynamic-slice`, `dynamic-update-slice` and `at-set`.

The start of a `dynamic-slice` or `dynamic-update-slice` may be the trip or
any integer scalar computed in the graph; the sizes are static, so the
result's shape is known at lint time. JAX's rule (`lax.dynamic_slice`,
`lax.dynamic_update_slice`) clamps each start into `0 ... axis - size`, so
the window always fits; a start that is a compile-time constant outside that
range is reported here (E-SHAPE-003) rather than silently moved. `at-set` is
`x.at[i, j ...].set(value)`: negative indices count from the end, an
out-of-range index's update is dropped (JAX's default for `at[...].set`).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..types import ShapeType, TensorType, TupleType, is_int, promote
from .base import RuleError, _show, broadcast_shapes, op


def _scalars(call, i: int, what: str) -> list[TensorType]:
    """Argument `i` as a vector of integer tensors (`[0 pos 0]`, or `[0 2 0]` when constant)."""
    t = call.args[i]
    if isinstance(t, ShapeType):
        return [TensorType((), "i32", True, d) for d in t.dims]
    if not isinstance(t, TupleType):
        raise RuleError("E-TYPE-001", f"`{call.op}` needs {what} as a vector like `[0 pos]`, got {t.show()}", i)
    out = []
    for item in t.items:
        if not isinstance(item, TensorType) or not is_int(item.dtype):
            raise RuleError("E-TYPE-002", f"`{call.op}`: {what} must be integers, got "
                            f"{item.show()}", i, help="cast it with `(cast pos :i32)`")
        out.append(item)
    return out


def _starts(call, i: int, x: TensorType, sizes: tuple[int, ...]) -> tuple:
    """The start indices (argument `i`), one integer scalar per axis of `x`, each constant one
    checked against JAX's clamping range 0 ... axis - size; `static["starts"]` holds the
    constants (None for a traced start)."""
    starts = _scalars(call, i, "the start indices")
    if len(starts) != x.rank:
        raise RuleError("E-SHAPE-005", f"`{call.op}` needs one start index per axis of {_show(x.shape)} "
                        f"({x.rank}), got {len(starts)}", i)
    for k, s in enumerate(starts):
        if s.shape != ():
            raise RuleError("E-SHAPE-005", f"`{call.op}`: start index {k} must be a scalar, got {s.show()}", i)
        if s.value is not None and not 0 <= s.value <= x.shape[k] - sizes[k]:
            raise RuleError("E-SHAPE-003", f"`{call.op}`: start {s.value} on axis {k} puts a window of "
                            f"{sizes[k]} outside the axis of size {x.shape[k]} (starts 0 to "
                            f"{x.shape[k] - sizes[k]})", i,
                            help="JAX would clamp it into that range and read or write somewhere else; "
                                 "give a start inside it")
    call.static["starts"] = tuple(s.value for s in starts)
    return tuple(starts)


@op("dynamic-slice", "(dynamic-slice x [start ...] [size ...])", "the window of static sizes at traced starts "
    "(lax.dynamic_slice: each start clamped into 0 ... axis - size)", args=(3, 3),
    example="(dynamic-slice x [(cast n :i32) 1] [1 2])", family="shape")
def _dynamic_slice(call):
    x = call.tensor(0)
    sizes = call.sizes(2)
    if len(sizes) != x.rank:
        raise RuleError("E-SHAPE-005", f"`dynamic-slice` needs one size per axis of {_show(x.shape)}, got "
                        f"{_show(sizes)}", 2)
    big = [k for k in range(x.rank) if sizes[k] > x.shape[k]]
    if big:
        k = big[0]
        raise RuleError("E-SHAPE-003", f"`dynamic-slice`: size {sizes[k]} on axis {k} is larger than the axis "
                        f"of {_show(x.shape)}", 2)
    _starts(call, 1, x, sizes)
    call.static["sizes"] = sizes
    return TensorType(sizes, x.dtype, x.weak)


@op("dynamic-update-slice", "(dynamic-update-slice x update [start ...])", "x with `update` written at traced "
    "starts (lax.dynamic_update_slice: each start clamped into 0 ... axis - size); only the update's entries move",
    args=(3, 3), example="(dynamic-update-slice x (ones [1 3]) [(cast n :i32) 0])", family="shape")
def _dynamic_update_slice(call):
    x, u = call.tensor(0), call.tensor(1)
    if u.rank != x.rank or any(a > b for a, b in zip(u.shape, x.shape)):
        raise RuleError("E-SHAPE-005", f"`dynamic-update-slice`: the update {_show(u.shape)} must have the rank of "
                        f"x {_show(x.shape)} and fit inside it", 1)
    if u.dtype != x.dtype and not u.weak:
        raise RuleError("E-TYPE-002", f"`dynamic-update-slice`: the update is {u.show()}, x is {x.show()}; "
                        "they need one dtype", 1, help=f"cast the update: `(cast update :{x.dtype})`")
    _starts(call, 2, x, u.shape)
    call.static["dtype"] = x.dtype
    return TensorType(x.shape, x.dtype, x.weak)


@op("at-set", "(at-set x [index ...] value)", "x with the entries at the indices set to value "
    "(x.at[i, j].set(v): indices broadcast together, negative ones from the end, out-of-range updates dropped)",
    args=(3, 3), example="(at-set x [j (cast n :i32)] 5.0)", family="shape")
def _at_set(call):
    x = call.tensor(0)
    idx = _scalars(call, 1, "the indices")
    if not idx or len(idx) > x.rank:
        raise RuleError("E-SHAPE-005", f"`at-set` needs 1 to {x.rank} indices for x {_show(x.shape)}, got "
                        f"{len(idx)}", 1)
    lead = broadcast_shapes([t.shape for t in idx], "at-set", 1)
    for k, t in enumerate(idx):
        if t.value is not None and not -x.shape[k] <= t.value < x.shape[k]:
            raise RuleError("E-SHAPE-003", f"`at-set`: index {t.value} is outside axis {k} of {_show(x.shape)} "
                            f"(-{x.shape[k]} to {x.shape[k] - 1})", 1, help="JAX would drop this update")
    target = lead + x.shape[len(idx):]
    v = call.tensor(2)
    got = broadcast_shapes([v.shape, target], "at-set", 2)
    if got != target:
        raise RuleError("E-SHAPE-001", f"`at-set`: the value {_show(v.shape)} does not broadcast to the indexed "
                        f"entries {_show(target)}", 2)
    if promote((x.dtype, x.weak), (v.dtype, v.weak))[0] != x.dtype:
        raise RuleError("E-TYPE-002", f"`at-set`: the value is {v.show()}, x is {x.show()}; writing it would "
                        "change x's dtype", 2, help=f"cast the value: `(cast value :{x.dtype})`")
    call.static.update(dtype=x.dtype, index_dtypes=tuple(t.dtype for t in idx))
    return TensorType(x.shape, x.dtype, x.weak)
