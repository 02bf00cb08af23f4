"""Linear algebra (`matmul`, `einsum`) and network ops (softmax, cross-entropy).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import re

from ..types import StringType, TensorType, is_float, is_int, promote
from .base import RuleError, _show, broadcast_shapes, op


@op("matmul", "(matmul a b)", "matrix product with numpy's batching and broadcasting rules", args=(2, 2),
    example="(matmul x y)", family="linalg")
def _matmul(call):
    a, b = call.tensor(0), call.tensor(1)
    if a.rank == 0 or b.rank == 0:
        raise RuleError("E-SHAPE-002", f"`matmul` needs tensors of rank 1 or more, got {a.show()} and {b.show()}")
    ash = (1,) + a.shape if a.rank == 1 else a.shape
    bsh = b.shape + (1,) if b.rank == 1 else b.shape
    if ash[-1] != bsh[-2]:
        raise RuleError("E-SHAPE-002", f"`matmul` of {_show(a.shape)} and {_show(b.shape)}: the inner sizes "
                        f"{ash[-1]} and {bsh[-2]} differ", None,
                        help="the last axis of the first operand must equal the second-to-last of the second")
    batch = broadcast_shapes([ash[:-2], bsh[:-2]], "matmul")
    shape = batch + (ash[-2], bsh[-1])
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    dt = promote((a.dtype, a.weak), (b.dtype, b.weak))
    call.static["dtype"] = dt[0]
    return TensorType(shape, dt[0])


_EINSUM = re.compile(r"^([a-zA-Z,]*)->([a-zA-Z]*)$")


@op("einsum", '(einsum "ij,jk->ik" a b ...)', "Einstein summation with an explicit output", args=(2, None),
    example='(einsum "ij,jk->ik" x y)', family="linalg")
def _einsum(call):
    spec = call.args[0]
    if not isinstance(spec, StringType):
        raise RuleError("E-TYPE-003", "`einsum` needs a subscripts string like \"ij,jk->ik\" first", 0)
    if "." in spec.value:   # JAX reads `...` as the axes not named; the language names every axis
        raise RuleError("E-FORM-002", f"`einsum` subscripts {spec.value!r}: name every axis with a letter (no `...`)", 0)
    m = _EINSUM.match(spec.value.replace(" ", ""))
    if not m:
        raise RuleError("E-FORM-002", f"`einsum` subscripts {spec.value!r} need an explicit `->` output", 0)
    if len(set(m.group(2))) != len(m.group(2)):   # JAX: "appeared more than once in the output"
        raise RuleError("E-FORM-002", f"`einsum` output {m.group(2)!r} names an axis twice", 0)
    ins = m.group(1).split(",")
    ts = [call.tensor(i + 1) for i in range(len(call.args) - 1)]
    if len(ins) != len(ts):
        raise RuleError("E-FORM-003", f"`einsum` subscripts name {len(ins)} operands, got {len(ts)}", 0)
    sizes: dict[str, int] = {}
    for k, (sub, t) in enumerate(zip(ins, ts)):
        if len(sub) != t.rank:
            raise RuleError("E-SHAPE-005", f"`einsum` operand {k + 1} is {_show(t.shape)}, but {sub!r} names {len(sub)} axes", k + 1)
        for c, d in zip(sub, t.shape):
            if sizes.setdefault(c, d) != d:
                raise RuleError("E-SHAPE-005", f"`einsum`: axis {c!r} has sizes {sizes[c]} and {d}", k + 1)
    for c in m.group(2):
        if c not in sizes:
            raise RuleError("E-FORM-002", f"`einsum` output axis {c!r} is not an input axis", 0)
    dt = (ts[0].dtype, ts[0].weak)
    for t in ts[1:]:
        dt = promote(dt, (t.dtype, t.weak))
    call.static.update(subscripts=spec.value.replace(" ", ""), dtype=dt[0])
    return TensorType(tuple(sizes[c] for c in m.group(2)), dt[0])


def _softmaxish(call):
    x = call.tensor(0)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", f"`{call.op}` normalises along an axis; a scalar has none", 0)
    if x.dtype == "bool":
        raise RuleError("E-TYPE-002", f"`{call.op}` needs numbers, got bool", 0,
                        help="cast the operand with `(cast x :f32)`")
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    dt = x.dtype if is_float(x.dtype) else "f32"
    call.static.update(axis=ax, dtype=dt)
    return TensorType(x.shape, dt)


op("softmax", "(softmax x :axis -1)", "softmax along `:axis`; integers give f32", kwargs=("axis",),
   example="(softmax x)", family="network")(_softmaxish)
op("log-softmax", "(log-softmax x :axis -1)", "log of softmax along `:axis`; integers give f32", kwargs=("axis",),
   example="(log-softmax h)", family="network")(_softmaxish)


@op("cross-entropy", "(cross-entropy logits labels)", "per-position cross-entropy of float logits [... V] and "
    "integer labels [...], computed and returned in f32", args=(2, 2), example="(cross-entropy x j)", family="network")
def _xent(call):
    lg, lb = call.tensor(0), call.tensor(1)
    if not is_float(lg.dtype):
        raise RuleError("E-TYPE-002", f"`cross-entropy` needs float logits, got {lg.show()}", 0)
    if not is_int(lb.dtype):
        raise RuleError("E-TYPE-002", f"`cross-entropy` needs integer labels, got {lb.show()}", 1,
                        help="labels are class indices; cast them with `(cast labels :i32)`")
    if lg.rank == 0 or lg.shape[:-1] != lb.shape:
        raise RuleError("E-SHAPE-005", f"`cross-entropy`: logits {_show(lg.shape)} need labels "
                        f"{_show(lg.shape[:-1])}, got {_show(lb.shape)}", 1)
    return TensorType(lb.shape, "f32")


@op("dot-product-attention", "(dot-product-attention query key value :causal false :mask m :scale s)",
    "scaled dot-product attention, JAX's layout: query [B T N H], key and value [B S K H] (K divides N: "
    "grouped-query heads), an optional bool `:mask` broadcasting to [B N T S], `:scale` default 1/sqrt(H); "
    "gives [B T N H] without the [B N T S] scores as a value", args=(3, 3), kwargs=("causal", "mask", "scale"),
    example="(dot-product-attention q kv kv :causal true)", family="network")
def _attention(call):
    """The rule of `jax.nn.dot_product_attention` (jax/_src/nn/functions.py): query, key and value
    of rank 4 and one float dtype (E-TYPE-002 otherwise); key and value of one shape, the batch and
    the head width H of the query equal to theirs, and the query's heads a multiple of theirs
    (E-SHAPE-005, quoting both shapes); `:mask` a bool tensor of rank 4 or less broadcasting to
    [B N T S] (E-TYPE-002, E-SHAPE-001); `:causal` true or false; `:scale` a compile-time number."""
    q, k, v = (call.tensor(i) for i in range(3))
    for i, t in enumerate((q, k, v)):
        if t.rank != 4:
            raise RuleError("E-SHAPE-005", f"`dot-product-attention`: {('query', 'key', 'value')[i]} must be "
                            f"[batch positions heads width], got {_show(t.shape)}", i)
        if not is_float(t.dtype):
            raise RuleError("E-TYPE-002", f"`dot-product-attention` needs float tensors, got {t.show()}", i)
    for i, t in ((1, k), (2, v)):
        if t.dtype != q.dtype:
            raise RuleError("E-TYPE-002", f"`dot-product-attention`: query {q.show()} and "
                            f"{('key', 'value')[i - 1]} {t.show()} need one dtype", i,
                            help="cast them to one dtype, e.g. `(cast key :bf16)`")
    if v.shape != k.shape:
        raise RuleError("E-SHAPE-005", f"`dot-product-attention`: key {_show(k.shape)} and value {_show(v.shape)} "
                        "differ", 2)
    b, t_len, n, h = q.shape
    if (k.shape[0], k.shape[3]) != (b, h):
        raise RuleError("E-SHAPE-005", f"`dot-product-attention`: query {_show(q.shape)} and key {_show(k.shape)} "
                        "need the same batch (axis 0) and head width (axis 3)", 1)
    s_len, kh = k.shape[1], k.shape[2]
    if kh == 0 or n % kh:
        raise RuleError("E-SHAPE-005", f"`dot-product-attention`: the query's {n} heads ({_show(q.shape)}) are not "
                        f"a multiple of the key's {kh} ({_show(k.shape)})", 1,
                        help="grouped-query attention shares each key head among N / K query heads")
    if "mask" in call.kwargs:
        m = call.tensor("mask")
        if m.dtype != "bool":
            raise RuleError("E-TYPE-002", f"`:mask` of `dot-product-attention` must be bool, got {m.show()}", "mask",
                            help="true where a query position may attend to a key position, e.g. `(>= i j)`")
        full = (b, n, t_len, s_len)
        if m.rank > 4 or broadcast_shapes([m.shape, full], "dot-product-attention", "mask") != full:
            raise RuleError("E-SHAPE-001", f"`:mask` of `dot-product-attention` is {_show(m.shape)}; it must "
                            f"broadcast to [B N T S] = {_show(full)}", "mask")
    scale = call.const_float("scale", 1.0 / h ** 0.5 if h else 1.0)
    call.static.update(causal=call.const_bool("causal", False), scale=scale)
    return TensorType(q.shape, q.dtype)
