"""The values an integer tensor can hold, where the checker can prove them, and W-SHAPE-001.

`value_range(e, lookup)` gives `(lo, hi, exact)` for an integer expression
of the typed IR: every element lies in `lo..hi`, and with `exact` some
element is `lo` and some is `hi` (a constant, `full`, `iota`, and those
shifted or scaled by a constant). `check_index` reports an index or label
that is provably outside the axis it indexes (W-SHAPE-001, a warning: the
program still lowers): every value
outside it, or an exact end outside it. JAX does not fail on such an index
(`take` fills or clamps, `one-hot` gives a row of zeros, `cross-entropy`
reads past the logits), so the mistake would otherwise be silent.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from typing import Callable

from .. import ir
from ..diagnostics import warning
from ..types import TensorType, is_int
from .context import CheckContext

#: (lo, hi, exact): every element in lo..hi; with `exact`, lo and hi both occur.
Range = tuple[int, int, bool]

#: The ops whose argument indexes an axis: op -> (the argument, what it is called).
INDEXED = {"take": (1, "indices"), "take-along-axis": (1, "indices"), "one-hot": (0, "indices"),
           "cross-entropy": (1, "labels")}


def value_range(e: ir.Expr, lookup: Callable[[str], Range | None], env: dict | None = None) -> Range | None:
    """The range of integer expression `e` (None when nothing is known); `lookup` gives a
    binding's range by name, `env` the names bound inside `e` (a `let*` in it)."""
    env = env or {}
    t = e.type
    if not (isinstance(t, TensorType) and (is_int(t.dtype) or t.dtype == "bool")):
        return None
    if isinstance(e, ir.Const):
        v = e.value
        return (int(v), int(v), True) if isinstance(v, (int, bool)) else None
    if isinstance(e, ir.Var):
        return env[e.name] if e.name in env else lookup(e.name)
    if isinstance(e, ir.Let):
        inner = dict(env)
        for name, v in zip(e.names, e.values):
            inner[name] = value_range(v, lookup, inner)
        return value_range(e.body[-1], lookup, inner) if e.body else None
    if isinstance(e, ir.Seq):
        return value_range(e.body[-1], lookup, env) if e.body else None
    if not isinstance(e, ir.Op):
        return None
    args = [value_range(a, lookup, env) for a in e.args]
    return _op_range(e, args)


def _op_range(e: ir.Op, args: list[Range | None]) -> Range | None:
    name, st = e.name, e.static
    if name in ("zeros", "ones"):
        v = 0 if name == "zeros" else 1
        return (v, v, True) if _size(st.get("shape", ())) else None
    if name == "full":
        return args[1] if len(args) > 1 and _size(st.get("shape", ())) else None
    if name == "iota":
        dims, ax = st.get("shape", ()), st.get("axis", 0)
        return (0, dims[ax] - 1, True) if dims and _size(dims) else None
    if name in ("argmax", "argmin"):
        x = e.args[0].type
        ax = st.get("axis", -1)
        return (0, x.shape[ax] - 1, False) if isinstance(x, TensorType) and x.shape else None
    if name in ("cast", "stop-gradient", "broadcast-to", "reshape", "expand-dims", "squeeze", "transpose"):
        return args[0] if args else None
    if name in ("slice", "take", "take-along-axis"):
        return (args[0][0], args[0][1], False) if args and args[0] else None
    if name == "where" and len(args) == 3 and args[1] and args[2]:
        return (min(args[1][0], args[2][0]), max(args[1][1], args[2][1]), False)
    if name == "mod" and len(args) == 2 and args[1] and args[1][0] == args[1][1] > 0:
        a, n = args[0], args[1][0]   # (JAX's `mod` takes the divisor's sign)
        return a if a is not None and 0 <= a[0] and a[1] < n else (0, n - 1, False)
    if any(a is None for a in args) or not args:
        return None
    if name == "+":
        lo, hi = sum(a[0] for a in args), sum(a[1] for a in args)
        return (lo, hi, sum(1 for a in args if a[0] != a[1] or not a[2]) <= 1 and all(a[2] for a in args))
    if name == "-":
        if len(args) == 1:
            return (-args[0][1], -args[0][0], args[0][2])
        a, b = args
        return (a[0] - b[1], a[1] - b[0], a[2] and b[2] and b[0] == b[1])
    if name == "*" and len(args) == 2:
        a, b = args
        if b[0] == b[1] and b[2]:
            a, b = b, a
        if a[0] == a[1] and a[2]:   # a constant times a range keeps its ends
            c = a[0]
            return (b[0] * c, b[1] * c, b[2]) if c >= 0 else (b[1] * c, b[0] * c, b[2])
        corners = [x * y for x in a[:2] for y in b[:2]]
        return (min(corners), max(corners), False)
    if name in ("minimum", "maximum") and len(args) == 2:
        f = min if name == "minimum" else max
        return (f(args[0][0], args[1][0]), f(args[0][1], args[1][1]), False)
    return None


def _size(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def check_index(ctx: CheckContext, op: ir.Op, lookup: Callable[[str], Range | None]) -> None:
    """W-SHAPE-001 when the index or label argument of `op` (an `INDEXED` op) is provably
    outside the axis it indexes."""
    i, what = INDEXED[op.name]
    if len(op.args) <= i:
        return
    if op.name == "one-hot":
        n = op.static.get("n")
        axis = f"the {n} classes of `one-hot`"
    else:
        x = op.args[0].type
        if not isinstance(x, TensorType) or not x.shape:
            return
        ax = -1 if op.name == "cross-entropy" else op.static.get("axis", 0)
        n = x.shape[ax]
        axis = (f"the {n} classes of the logits' last axis" if op.name == "cross-entropy" else
                f"axis {ax % len(x.shape)} of `{op.name}`'s {x.show()}")
    r = value_range(op.args[i], lookup)
    if r is None or n is None:
        return
    lo, hi, exact = r
    if lo >= n or hi < 0:
        seen = f"are {lo}" if lo == hi else f"are all from {lo} to {hi}"
    elif exact and hi >= n:
        seen = f"reach {hi}"
    elif exact and lo < 0:
        seen = f"reach {lo}"
    else:
        return
    ctx.report(warning("W-SHAPE-001", op.args[i].span,
                       f"the {what} {seen}, outside {axis} (0 to {n - 1})",
                       help=f"keep the {what} from 0 to {n - 1}: JAX does not fail on one outside, it gives a wrong "
                            "value silently; check the vocabulary or size they are made for"))
