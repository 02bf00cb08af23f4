"""The `model` axis' split of each traced value: which axes of a value one device holds a share of, for
the memory per device of a tensor-parallel run (docs/sharding.md).

A simplified form of GSPMD's sharding propagation (what XLA does with the parameters' shardings,
sexpgpu_runtime/devices/sharding.py): a parameter is split where sexpgpu_lang.mesh.model_dim splits it, and
each op's value keeps the split of its operands where the op keeps their axes apart: an elementwise op,
a softmax, a norm's reductions over other axes, a reshape that keeps the split axis the major one of its
group, a transpose, a slice or take along another axis. A contraction over a split axis (the attention's
output projection over its heads, the MLP's down projection over its width) is whole after XLA's
all-reduce; so is a reduction over a split axis (the cross-entropy of logits split by vocabulary) and a
value no rule here follows. A split is a tuple of axes, major first, that the `model` axis splits
together (one axis mostly; two when a reshape splits a split axis into a size below the axis' and the
rest, the query heads grouped by fewer KV heads); () is whole on every device.

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

import math

from ..ops import REGISTRY

Split = tuple[int, ...]

#: Reductions over `static["axes"]` (all of them when None) and `static["keepdims"]`.
_REDUCE = ("sum", "prod", "max", "min", "mean", "logsumexp")
#: Ops along one axis, `static["axis"]`, whose value keeps its operand's shape (a split elsewhere kept).
_ALONG = ("cumsum", "softmax", "log-softmax", "sort", "argsort")
#: Values made from nothing split: constants, draws, index tables.
_FRESH = ("iota", "zeros", "ones", "full", "one-hot", "uniform", "normal", "bernoulli", "categorical", "arg",
          "sample", "axis-size", "size")


def regroup(shape_in: tuple[int, ...], split: Split, shape_out: tuple[int, ...], ways: int) -> Split:
    """`split` of a value of `shape_in` reshaped to `shape_out`: the axes of `shape_out` that hold the same
    contiguous share, when the split axes' group starts where an output axis does and that axis (with
    the next, when it is smaller than `ways`) divides by `ways`; () otherwise (XLA moves data)."""
    if not split:
        return ()
    before = math.prod(shape_in[:split[0]])
    out: list[int] = []
    b = 0
    while b < len(shape_out) and math.prod(shape_out[:b]) < before:
        b += 1
    while b < len(shape_out) and shape_out[b] == 1:
        b += 1
    if b >= len(shape_out) or math.prod(shape_out[:b]) != before:
        return ()
    m = ways
    while b < len(shape_out) and m > 1:
        size = shape_out[b]
        if size % m == 0:
            out.append(b)
            m = 1
        elif m % size == 0:
            out.append(b)
            m //= size
        else:
            return ()
        b += 1
    return tuple(out) if m == 1 else ()


def letters(split: Split, names: str) -> str:
    """The einsum letters of a split's axes."""
    return "".join(names[a] for a in split)


def by_letters(split_letters: str, names: str) -> Split:
    """The axes of a value with letters `names` that `split_letters` name; () when one is missing."""
    if not split_letters or any(c not in names for c in split_letters):
        return ()
    return tuple(names.index(c) for c in split_letters)


def contraction(operands: list[tuple[str, Split]], out: str) -> Split:
    """The split of a contraction's value with letters `out`, from its operands' (letters, split): the
    first operand's split letters that all stay in the output; () when none does (a split letter summed
    over: XLA all-reduces the partial sums, whole on every device)."""
    for names, split in operands:
        if split:
            ls = letters(split, names)
            if all(c in out for c in ls):
                return by_letters(ls, out)
    return ()


def _broadcast(out: tuple[int, ...], ins: list) -> Split:
    """An elementwise op's split: the first operand's, its axes aligned from the last as broadcasting
    aligns them, where the operand has the output's size on them."""
    for shape, split in ins:
        if not split:
            continue
        off = len(out) - len(shape)
        axes = tuple(a + off for a in split)
        if off >= 0 and all(out[b] == shape[a] for a, b in zip(split, axes)):
            return axes
    return ()


def _drop(split: Split, gone: set[int], keep: bool) -> Split:
    """A split after the axes `gone` are reduced (kept as size 1 when `keep`); () when a split axis goes."""
    if any(a in gone for a in split):
        return ()
    return split if keep else tuple(a - sum(g < a for g in gone) for a in split)


def propagate(op: str, shape: tuple[int, ...], ins: list[tuple[tuple[int, ...], Split]], static: dict,
              ways: int) -> Split:
    """The split of the value `op` makes, of `shape`, from its operands' (shape, split) and the op's static
    settings (the registry's rule sets them: axes, perm, shape ...) on a `model` axis of `ways` devices."""
    if op in _FRESH or not any(s for _, s in ins):
        return ()
    first_shape, first = ins[0]
    if op == "einsum" and "subscripts" in static and "natural" not in static:
        from .cost import einsum_operands
        lhs, rhs, out = einsum_operands(static["subscripts"])
        return contraction(list(zip((lhs, rhs), (s for _, s in ins))), out)
    if op == "matmul" and len(ins) == 2 and len(first_shape) >= 2 and len(ins[1][0]) >= 2:
        (xs, x), (ys, y) = ins
        r = len(shape)
        if x and xs and x[-1] != len(xs) - 1:   # not the contracted axis
            return tuple(a + r - len(xs) for a in x)
        if y and y[-1] == len(ys) - 1:
            return (r - 1,)
        return ()
    fam = REGISTRY[op].family if op in REGISTRY else None
    if fam == "tensor" or op in ("broadcast-to", "stop-gradient"):
        return _broadcast(shape, ins)
    if op in _REDUCE:
        axes = static.get("axes")
        gone = set(range(len(first_shape))) if axes is None else {a % max(len(first_shape), 1) for a in axes}
        return _drop(first, gone, bool(static.get("keepdims")))
    if op in ("argmax", "argmin"):
        return _drop(first, {static.get("axis", -1) % len(first_shape)}, bool(static.get("keepdims")))
    if op in _ALONG:
        return first if shape == first_shape else ()
    if op == "cross-entropy":
        return ()   # a reduction over the classes: a split of the logits' other axes is rare; whole
    if op == "reshape":
        return regroup(first_shape, first, shape, ways)
    if op == "transpose":
        perm = static.get("perm") or ()
        return tuple(perm.index(a) for a in first) if first and all(a in perm for a in first) else ()
    if op == "expand-dims":
        ax = static.get("axis", 0)
        return tuple(a + 1 if a >= ax else a for a in first)
    if op == "squeeze":
        return _drop(first, set(static.get("axes") or ()), False)
    if op in ("slice", "take-along-axis", "top-k"):
        ax = static.get("axis", len(first_shape) - 1) % max(len(first_shape), 1)
        return () if ax in first else first
    if op == "take":
        ax = static.get("axis", 0) % max(len(first_shape), 1)
        if not first or ax in first:
            return ()
        extra = len(shape) - len(first_shape)
        return tuple(a if a < ax else a + extra for a in first)
    if op == "dynamic-slice":
        return first if all(shape[a] == first_shape[a] for a in first) else ()
    if op in ("concat", "stack"):
        for s, split in ins:
            if split and len(s) == len(shape) and all(shape[a] == s[a] for a in split):
                return split
            if split and len(s) + 1 == len(shape) and op == "stack":
                ax = static.get("axis", 0)
                return tuple(a + 1 if a >= ax else a for a in split)
        return ()
    if op in ("dynamic-update-slice", "at-set"):
        if first:
            return first
        for s, split in ins[1:]:   # an update split as the whole would be (a cache written by split keys)
            if split and len(s) == len(shape) and all(s[a] == shape[a] for a in split):
                return split
        return ()
    return first if shape == first_shape else ()


def spec(split: Split, rank: int, data_axis: int | None = None) -> str:
    """A PartitionSpec as JAX prints it, `model` at the split's first axis and `data` at `data_axis`:
    `P('data', None, 'model')`."""
    parts = ["None"] * rank
    if data_axis is not None:
        parts[data_axis] = "'data'"
    if split:
        parts[split[0]] = "'model'"
    while parts and parts[-1] == "None":
        parts.pop()
    return "P(" + ", ".join(parts) + ")"
