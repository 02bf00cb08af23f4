"""Shapes, indexing and construction: reshape, transpose, concat, slices, gathers, fills, `axis-size`.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..types import ShapeType, TensorType, TupleType, is_int, promote, scalar
from .base import RuleError, _show, broadcast_shapes, op


@op("reshape", "(reshape x [shape])", "the same entries in a new shape; one size may be -1", args=(2, 2),
    example="(reshape x [3 -1])", family="shape")
def _reshape(call):
    x = call.tensor(0)
    dims = list(call.shape_arg(1))
    if dims.count(-1) > 1:
        raise RuleError("E-SHAPE-004", "`reshape` takes at most one -1", 1)
    known = 1
    for d in dims:
        if d != -1:
            known *= d
    if -1 in dims:
        if known == 0 or x.size % known:
            raise RuleError("E-SHAPE-004", f"`reshape` cannot fit {x.size} entries of {_show(x.shape)} into {_show(dims)}", 1)
        dims[dims.index(-1)] = x.size // known
    elif known != x.size:
        raise RuleError("E-SHAPE-004", f"`reshape` of {_show(x.shape)} ({x.size} entries) to {_show(dims)} "
                        f"({known} entries) changes the size", 1)
    call.static["shape"] = tuple(dims)
    return TensorType(tuple(dims), x.dtype, x.weak)


@op("transpose", "(transpose x [perm])", "permute the axes (default: reverse them)", args=(1, 2),
    example="(transpose x [1 0])", family="shape")
def _transpose(call):
    x = call.tensor(0)
    perm = tuple(range(x.rank))[::-1] if len(call.args) < 2 else tuple(call.axis(x.rank, a, 1) for a in call.shape_arg(1))
    if sorted(perm) != list(range(x.rank)):
        raise RuleError("E-SHAPE-003", f"`transpose` needs a permutation of the {x.rank} axes, got {_show(perm)}", 1)
    call.static["perm"] = perm
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype, x.weak)


def _tensor_list(call) -> list[TensorType]:
    t = call.args[0]
    if isinstance(t, TupleType):
        items = list(t.items)
    elif isinstance(t, ShapeType):
        items = [scalar("i32", d, True) for d in t.dims]
    else:
        raise RuleError("E-TYPE-001", f"`{call.op}` needs a vector of tensors like `[a b]`, got {t.show()}", 0)
    out = []
    for t in items:
        if not isinstance(t, TensorType):
            raise RuleError("E-TYPE-001", f"`{call.op}` needs tensors, got {t.show()}", 0)
        out.append(t)
    if not out:
        raise RuleError("E-FORM-003", f"`{call.op}` needs at least one tensor", 0)
    return out


@op("concat", "(concat [a b ...] :axis 0)", "join tensors along an existing axis", args=(1, 1), kwargs=("axis",),
    example="(concat [x p] :axis 1)", family="shape")
def _concat(call):
    ts = _tensor_list(call)
    rank = ts[0].rank
    ax = call.axis(rank, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    for t in ts[1:]:
        if t.rank != rank or any(a != b for k, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if k != ax):
            raise RuleError("E-SHAPE-005", f"`concat` along axis {ax}: {_show(ts[0].shape)} and {_show(t.shape)} "
                            f"differ on another axis", 0)
    dt = (ts[0].dtype, ts[0].weak)
    for t in ts[1:]:
        dt = promote(dt, (t.dtype, t.weak))
    shape = list(ts[0].shape)
    shape[ax] = sum(t.shape[ax] for t in ts)
    call.static.update(axis=ax, dtype=dt[0])
    return TensorType(tuple(shape), dt[0], dt[1])


@op("stack", "(stack [a b ...] :axis 0)", "join same-shaped tensors along a new axis", args=(1, 1), kwargs=("axis",),
    example="(stack [x p] :axis 1)", family="shape")
def _stack(call):
    ts = _tensor_list(call)
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise RuleError("E-SHAPE-005", f"`stack`: {_show(ts[0].shape)} and {_show(t.shape)} differ", 0)
    ax = call.axis(ts[0].rank + 1, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    dt = (ts[0].dtype, ts[0].weak)
    for t in ts[1:]:
        dt = promote(dt, (t.dtype, t.weak))
    shape = list(ts[0].shape)
    shape.insert(ax, len(ts))
    call.static.update(axis=ax, dtype=dt[0])
    return TensorType(tuple(shape), dt[0], dt[1])


@op("expand-dims", "(expand-dims x :axis 0)", "insert an axis of size 1", kwargs=("axis",),
    example="(expand-dims x :axis 1)", family="shape")
def _expand(call):
    x = call.tensor(0)
    ax = call.axis(x.rank + 1, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    shape = list(x.shape)
    shape.insert(ax, 1)
    call.static["axis"] = ax
    return TensorType(tuple(shape), x.dtype, x.weak)


@op("squeeze", "(squeeze x :axes [..])", "remove axes of size 1 (default: all of them)", kwargs=("axes",),
    example="(squeeze (expand-dims x :axis 0) :axes [0])", family="shape")
def _squeeze(call):
    x = call.tensor(0)
    axes = call.axes_kw(x.rank)
    if axes is None:
        axes = tuple(k for k, d in enumerate(x.shape) if d == 1)
    for a in axes:
        if x.shape[a] != 1:
            raise RuleError("E-SHAPE-005", f"`squeeze`: axis {a} of {_show(x.shape)} has size {x.shape[a]}, not 1", "axes")
    call.static["axes"] = axes
    return TensorType(tuple(d for k, d in enumerate(x.shape) if k not in axes), x.dtype, x.weak)


@op("broadcast-to", "(broadcast-to x [shape])", "broadcast to a larger shape", args=(2, 2),
    example="(broadcast-to v [2 3])", family="shape")
def _broadcast_to(call):
    x = call.tensor(0)
    dims = call.sizes(1)
    out = broadcast_shapes([x.shape, dims], "broadcast-to", 1)
    if out != tuple(dims):
        raise RuleError("E-SHAPE-001", f"`broadcast-to`: {_show(x.shape)} does not broadcast to {_show(dims)}", 1)
    call.static["shape"] = tuple(dims)
    return TensorType(tuple(dims), x.dtype, x.weak)


@op("slice", "(slice x :axis 0 :start 0 :end n)", "entries start..end-1 along one axis (static bounds)",
    kwargs=("axis", "start", "end"), example="(slice x :axis 1 :start 1 :end 3)", family="shape")
def _slice(call):
    x = call.tensor(0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    n = x.shape[ax]
    start = call.const_int("start") if "start" in call.kwargs else 0
    end = call.const_int("end") if "end" in call.kwargs else n
    start, end = (start + n if start < 0 else start), (end + n if end < 0 else end)
    if not 0 <= start <= end <= n:
        raise RuleError("E-SHAPE-003", f"`slice` {start}..{end} is outside axis {ax} of size {n}", "start")
    call.static.update(axis=ax, start=start, end=end)
    shape = list(x.shape)
    shape[ax] = end - start
    return TensorType(tuple(shape), x.dtype, x.weak)


def _index_tensor(call, i) -> TensorType:
    t = call.args[i]
    if isinstance(t, ShapeType):
        call.static["indices"] = t.dims
        return TensorType((len(t.dims),), "i32")
    t = call.tensor(i)
    if not is_int(t.dtype):
        raise RuleError("E-TYPE-002", f"`{call.op}` needs integer indices, got {t.show()}", i,
                        help="cast them with `(cast idx :i32)`")
    return t


@op("take", "(take x indices :axis 0)", "gather entries of x along `:axis` (default 0, not flattened)", args=(2, 2),
    kwargs=("axis",), example="(take x j :axis 1)", family="shape")
def _take(call):
    x = call.tensor(0)
    idx = _index_tensor(call, 1)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", "`take` needs at least one axis, got a scalar", 0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    bad = [i for i in call.static.get("indices", ()) if not 0 <= i < x.shape[ax]]
    if bad:
        raise RuleError("E-SHAPE-003", f"`take`: index {bad[0]} is outside axis {ax} of {_show(x.shape)} "
                        f"(0 to {x.shape[ax] - 1})", 1)
    call.static["axis"] = ax
    return TensorType(x.shape[:ax] + idx.shape + x.shape[ax + 1:], x.dtype, x.weak)


@op("take-along-axis", "(take-along-axis x indices :axis -1)", "gather with indices shaped like x (numpy take_along_axis)",
    args=(2, 2), kwargs=("axis",), example="(take-along-axis x (argsort x) :axis 1)", family="shape")
def _take_along(call):
    x, idx = call.tensor(0), _index_tensor(call, 1)
    if idx.rank != x.rank:
        raise RuleError("E-SHAPE-005", f"`take-along-axis`: indices {_show(idx.shape)} and x {_show(x.shape)} "
                        "need the same rank", 1)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    shape = []
    for k, (a, b) in enumerate(zip(x.shape, idx.shape)):
        if k == ax:
            shape.append(b)
        else:
            shape.append(broadcast_shapes([(a,), (b,)], "take-along-axis", 1)[0])
    call.static["axis"] = ax
    return TensorType(tuple(shape), x.dtype, x.weak)


@op("one-hot", "(one-hot indices n :dtype :f32)", "one-hot vectors of length n along a new last axis", args=(2, 2),
    kwargs=("dtype",), example="(one-hot j 4)", family="shape")
def _one_hot(call):
    idx = call.tensor(0)
    if not is_int(idx.dtype):
        raise RuleError("E-TYPE-002", f"`one-hot` needs integer indices, got {idx.show()}", 0)
    n = call.const_int(1)
    if n < 1:
        raise RuleError("E-SHAPE-004", f"`one-hot` needs 1 or more classes, got {n}", 1)
    dt = call.dtype_arg("dtype", "f32")
    call.static.update(n=n, dtype=dt)
    return TensorType(idx.shape + (n,), dt)


@op("iota", "(iota [shape] :axis 0 :dtype :i32)", "each entry's index along `:axis`", args=(1, 1),
    kwargs=("axis", "dtype"), example="(iota [2 3] :axis 1)", family="shape")
def _iota(call):
    dims = call.sizes(0)
    ax = call.axis(len(dims), call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    dt = call.dtype_arg("dtype", "i32")
    if dt == "bool":   # lax.broadcasted_iota refuses bool
        raise RuleError("E-TYPE-002", "`iota` counts in numbers; `:dtype` cannot be `:bool`", "dtype",
                        help="compare the count instead, e.g. `(= (iota [4]) 0)`")
    call.static.update(shape=dims, axis=ax, dtype=dt)
    return TensorType(dims, dt)


def _dtype_once(call, i: int):
    """A dtype given both as argument `i` and as `:dtype` is a mistake (JAX: "multiple values for 'dtype'")."""
    if len(call.args) > i and "dtype" in call.kwargs:
        raise RuleError("E-NAME-002", f"`{call.op}`: the dtype is given twice, as an argument and as `:dtype`", "dtype")


def _fill(call, value):
    dims = call.sizes(0)
    _dtype_once(call, 1)
    dt = call.dtype_arg(1, None) if len(call.args) > 1 else call.dtype_arg("dtype", "f32")
    call.static.update(shape=dims, dtype=dt, value=value)
    return TensorType(dims, dt)


op("zeros", "(zeros [shape] :dtype)", "a tensor of zeros (dtype default f32)", args=(1, 2), kwargs=("dtype",),
   example="(zeros [2 3] :bf16)", family="shape")(lambda call: _fill(call, 0))
op("ones", "(ones [shape] :dtype)", "a tensor of ones (dtype default f32)", args=(1, 2), kwargs=("dtype",),
   example="(ones [2 3] :i32)", family="shape")(lambda call: _fill(call, 1))


@op("full", "(full [shape] value :dtype)", "a tensor filled with a scalar value", args=(2, 3), kwargs=("dtype",),
    example="(full [2 3] s)", family="shape")
def _full(call):
    dims = call.sizes(0)
    v = call.tensor(1)
    if v.shape != ():
        raise RuleError("E-SHAPE-005", f"`full` needs a scalar value, got {v.show()}", 1)
    _dtype_once(call, 2)
    dt = call.dtype_arg(2, None) if len(call.args) > 2 else call.dtype_arg("dtype", v.dtype)
    call.static.update(shape=dims, dtype=dt)
    return TensorType(dims, dt)


@op("axis-size", "(axis-size x axis)", "the size of one axis of x, as a compile-time integer (weakly typed, like a literal)",
    args=(2, 2), example="(axis-size x -1)", family="shape")
def _dim(call):
    x = call.tensor(0)
    ax = call.axis(x.rank, call.const_int(1), 1)
    call.static["value"] = x.shape[ax]
    return scalar("i32", x.shape[ax], weak=True)


@op("size", "(size x)", "the number of entries of x, as an i64 constant", example="(size x)", family="shape")
def _size(call):
    x = call.tensor(0)
    call.static["value"] = x.size
    return scalar("i64", x.size)
