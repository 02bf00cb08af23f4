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

A loader's `:vocab` is a range too (`loader_ranges`): its token-id fields
hold 0 ... `:vocab` - 1, marked `DECLARED` (the file says those ends
occur); a batch or plist has a dict of its entries' ranges, so they reach
`prepare`, `objective` and, through a model call's arguments, the model's
body (an embedding lookup).

`trip_form(e, lookup)` gives `(a, b)` where `e` is `a * trip + b` at every
trip of `:step` (the trip, and constants added, subtracted or multiplied).
`check_window` reports a start of `dynamic-slice` or `dynamic-update-slice`
(or an index of `at-set`) that provably leaves its axis (W-SHAPE-002): on a
trip it names where it can (from its trip form), or anywhere its range
proves it. JAX moves such a start back inside the axis (an `at-set` drops
the update), so every late trip reads or overwrites the axis's last
window, silently.

`zero_divisor` reports a `/` or `mod` whose divisor is a constant zero (E-TYPE-006): a literal,
a `def`, or constants that fold to 0.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from typing import Callable

from .. import ir
from ..diagnostics import warning
from ..syntax import Num, Sym
from ..types import ERROR, ShapeType, TensorType, is_int
from .context import CheckContext

#: (a, b): the value is a * trip + b at every trip of `:step`.
TripForm = tuple[int, int]

#: (lo, hi, exact): every element in lo..hi; with `exact`, lo and hi both occur: True where
#: computed, `DECLARED` where the file says so (a loader's `:vocab`, a constant of a `where`),
#: "lo" or "hi" where only that end is known to occur (`lo_occurs`, `hi_occurs`).
Range = tuple[int, int, "bool | str"]
DECLARED = "declared"

#: The ops whose argument indexes an axis: op -> (the argument, what it is called).
INDEXED = {"take": (1, "indices"), "take-along-axis": (1, "indices"), "one-hot": (0, "indices"),
           "cross-entropy": (1, "labels")}


def value_range(e: ir.Expr, lookup: Callable[[str], Range | None], env: dict | None = None) -> Range | dict | None:
    """The range of integer expression `e` (None when nothing is known); `lookup` gives a
    binding's range by name, `env` the names bound inside `e` (a `let*` in it). A plist or a
    batch (a `list`, a phase's `batch` or `inputs`) has a dict of its entries' ranges, so that
    `getf` and `field` read them."""
    env = env or {}
    if isinstance(e, ir.Var):
        return env[e.name] if e.name in env else lookup(e.name)
    if isinstance(e, ir.Let):
        inner = dict(env)
        for name, v in zip(e.names, e.values):
            inner[name] = value_range(v, lookup, inner)
        return value_range(e.body[-1], lookup, inner) if e.body else None
    if isinstance(e, ir.Seq):
        return value_range(e.body[-1], lookup, env) if e.body else None
    if isinstance(e, ir.Plist):
        return {k: r for k, v in zip(e.keys, e.values) if (r := value_range(v, lookup, env)) is not None}
    if isinstance(e, ir.GetF):
        obj = value_range(e.obj, lookup, env) if e.obj is not None else None
        r = obj.get(e.key) if isinstance(obj, dict) else None
        return r if isinstance(r, tuple) and _int_tensor(e.type) else None
    if not _int_tensor(e.type):
        return None
    if isinstance(e, ir.Const):
        v = e.value
        return (int(v), int(v), True) if isinstance(v, (int, bool)) else None
    if not isinstance(e, ir.Op):
        return None
    if e.name == "stack" and len(e.args) == 1 and isinstance(e.args[0].type, ShapeType) and e.args[0].type.dims:
        dims = e.args[0].type.dims   # a vector of constants, `(stack [2 7])`: its ends occur
        return (min(dims), max(dims), True)
    args = [r if isinstance(r := value_range(a, lookup, env), tuple) else None for a in e.args]
    return _op_range(e, args)


def lo_occurs(r: Range) -> bool:
    """Whether some element is `r`'s low end."""
    return r[2] in (True, DECLARED, "lo")


def hi_occurs(r: Range) -> bool:
    """Whether some element is `r`'s high end."""
    return r[2] in (True, DECLARED, "hi")


def _int_tensor(t) -> bool:
    return isinstance(t, TensorType) and (is_int(t.dtype) or t.dtype == "bool")


def loader_ranges(loader: ir.LoaderIR) -> dict[str, Range]:
    """The declared range of each field of `loader` that holds token ids: `0 ... :vocab - 1`,
    marked `DECLARED` (the loader says its ids reach the vocabulary's ends): every field of
    `tokens` and `text-tokens`, `:row` of `stride-rows`."""
    kind, args = loader.source
    vocab = args.get("vocab")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        return {}
    ids = {"tokens": None, "text-tokens": None, "stride-rows": ("row",)}
    if kind not in ids:
        return {}
    names = ids[kind]
    return {n: (0, vocab - 1, DECLARED) for n, _shape, dtype in loader.fields
            if (names is None or n in names) and is_int(dtype)}


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
    if name in ("argmax", "argmin", "categorical"):   # (a draw from V logits is an id 0 to V - 1 too)
        x = e.args[0].type
        ax = st.get("axis", -1)
        return (0, x.shape[ax] - 1, False) if isinstance(x, TensorType) and x.shape else None
    if name in ("cast", "stop-gradient", "broadcast-to", "reshape", "expand-dims", "squeeze", "transpose"):
        return args[0] if args else None
    if name in ("slice", "take", "take-along-axis"):   # a part of declared ids still spans them
        return (args[0][0], args[0][1], DECLARED if args[0][2] == DECLARED else False) if args and args[0] else None
    if name == "where" and len(args) == 3 and args[1] and args[2]:
        # a constant branch is written to occur (a padding or an ignore label), as a declared end does
        lo, hi = min(args[1][0], args[2][0]), max(args[1][1], args[2][1])
        const = [a for a in args[1:] if a[0] == a[1] and a[2] in (True, DECLARED)]
        lows = {a[0] for a in const} | {a[0] for a in args[1:] if a[2] in (DECLARED, "lo")}
        highs = {a[1] for a in const} | {a[1] for a in args[1:] if a[2] in (DECLARED, "hi")}
        return (lo, hi, {(True, True): DECLARED, (True, False): "lo", (False, True): "hi"}.get(
            (lo in lows, hi in highs), False))
    args = [a if a is None or a[2] in (True, False, DECLARED) else (a[0], a[1], False) for a in args]
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
    if not isinstance(r, tuple) or n is None:
        return
    lo, hi, exact = r
    fix = "check the vocabulary or size they are made for"
    below, above = lo_occurs(r) and lo < 0, hi_occurs(r) and hi >= n
    if lo >= n or hi < 0:
        seen = f"are {lo}" if lo == hi else f"are all from {lo} to {hi}"
    elif below or above:
        seen = "reach " + " and ".join(str(v) for v, bad in ((lo, below), (hi, above)) if bad)
        if above and exact == DECLARED:
            seen += " (as a loader's `:vocab` declares)" if not below else ""
            fix = (f"make the table {hi + 1} long, as the loader's `:vocab`, or the loader's `:vocab` "
                   f"{n}, the table's size" if lo >= 0 else fix)
    else:
        return
    if op.name == "cross-entropy" and (lo < 0 and (lo_occurs(r) or hi < 0)):
        fix = ("`cross-entropy` has no ignored label (Hugging Face's -100 is read as a class): give the "
               "positions to leave out any label in range and multiply their loss by 0 (a mask) before the mean")
    ctx.report(warning("W-SHAPE-001", op.args[i].span,
                       f"the {what} {seen}, outside {axis} (0 to {n - 1})",
                       help=f"keep the {what} from 0 to {n - 1}: JAX does not fail on one outside, it gives a wrong "
                            f"value silently; {fix}"))


def trip_form(e: ir.Expr, lookup: Callable[[str], TripForm | None], env: dict | None = None) -> TripForm | None:
    """`(a, b)` when integer expression `e` is `a * trip + b` at every trip of `:step` (a
    constant is `(0, c)`); `lookup` gives a binding's form by name (the trip is `(1, 0)`),
    `env` the names bound inside `e`. None when it is not known to be one."""
    env = env or {}
    t = e.type
    if not (isinstance(t, TensorType) and is_int(t.dtype)):
        return None
    if isinstance(e, ir.Const):
        return (0, int(e.value)) if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if isinstance(e, ir.Var):
        return env[e.name] if e.name in env else lookup(e.name)
    if isinstance(e, ir.Let):
        inner = dict(env)
        for name, v in zip(e.names, e.values):
            inner[name] = trip_form(v, lookup, inner)
        return trip_form(e.body[-1], lookup, inner) if e.body else None
    if isinstance(e, ir.Seq):
        return trip_form(e.body[-1], lookup, env) if e.body else None
    if not isinstance(e, ir.Op):
        return None
    if e.name in ("cast", "stop-gradient", "reshape", "expand-dims", "squeeze", "broadcast-to"):
        return trip_form(e.args[0], lookup, env) if e.args else None
    args = [trip_form(a, lookup, env) for a in e.args]
    if not args or any(a is None for a in args):
        return None
    if e.name == "+":
        return (sum(a for a, _ in args), sum(b for _, b in args))
    if e.name == "-":
        if len(args) == 1:
            return (-args[0][0], -args[0][1])
        (a1, b1), (a2, b2) = args
        return (a1 - a2, b1 - b2)
    if e.name == "*" and len(args) == 2:
        (a1, b1), (a2, b2) = args
        if a1 == 0:
            return (b1 * a2, b1 * b2)
        if a2 == 0:
            return (a1 * b2, b1 * b2)
    return None


#: The ops that read or write a window at traced starts: op -> (the starts' argument, what it does).
WINDOWED = {"dynamic-slice": (1, "reads"), "dynamic-update-slice": (2, "writes"), "at-set": (1, "writes")}


def check_window(ctx: CheckContext, op: ir.Op, lookup: Callable[[str], Range | None],
                 forms: Callable[[str], TripForm | None], trips: int | None) -> None:
    """W-SHAPE-002 for each traced start of `op` (a `WINDOWED` op) that provably leaves its axis:
    on a trip of `:step` (`trips` of them; from the start's `trip_form`, `forms` giving each
    name's), or wherever its range (`value_range`) proves it. A constant start is the op
    rule's (E-SHAPE-003)."""
    i, does = WINDOWED[op.name]
    x = op.args[0].type if op.args else None
    starts = op.args[i] if len(op.args) > i else None
    if not isinstance(x, TensorType) or not isinstance(starts, ir.Vector):
        return
    if op.name == "dynamic-slice":
        sizes = tuple(op.static.get("sizes", ()))
    elif op.name == "dynamic-update-slice":
        u = op.args[1].type
        sizes = u.shape if isinstance(u, TensorType) else ()
    else:
        sizes = (1,) * len(starts.items)
    for k, s in enumerate(starts.items):
        if k >= len(sizes) or k >= x.rank or (isinstance(s.type, TensorType) and s.type.value is not None):
            continue
        n, size = x.shape[k], sizes[k]
        lo_ok, hi_ok = (-n, n - 1) if op.name == "at-set" else (0, n - size)
        r = value_range(s, lookup)
        _window_start(ctx, op, does, s, k, n, size, lo_ok, hi_ok, r if isinstance(r, tuple) else None,
                      trip_form(s, forms), trips)


def _window_start(ctx, op, does, s, k, n, size, lo_ok, hi_ok, r, form, trips) -> None:
    x = op.args[0].type
    axis = f"axis {k} of {x.show()}"
    fits = (f"an index fits only from {lo_ok} to {hi_ok}" if op.name == "at-set" else
            f"a window of {size} fits only at starts {lo_ok} to {hi_ok}")
    start = "index" if op.name == "at-set" else "start"
    past = "past the end of" if r is None or r[1] > hi_ok else "before the start of"
    trip_part = ""
    if form is not None and form[0] != 0 and trips:
        a, b = form
        bad = _bad_trips(a, b, lo_ok, hi_ok, trips)
        if not bad:
            return
        first, last = bad[0], bad[-1]
        v = a * first + b
        past = "past the end of" if v > hi_ok else "before the start of"
        trip_part = f"trip {first}" if first == last else f"trips {first} to {last}"
        message = (f"`{op.name}` {does} {past} {axis} on trip {first} (of trips 0 to {trips - 1}): this {start} "
                   f"is {v} there, and {fits}")
        fix = (f"with `:trips {first}` every trip fits; or make the axis longer" if 0 < first and last == trips - 1
               else f"make the {start} fit the axis on every trip, or make the axis longer")
    elif r is not None:
        lo, hi, exact = r
        if lo > hi_ok or hi < lo_ok:
            seen = f"is {lo}" if lo == hi else f"is from {lo} to {hi}"
        elif hi_occurs(r) and hi > hi_ok:
            seen, past = f"reaches {hi}", "past the end of"
        elif lo_occurs(r) and lo < lo_ok:
            seen, past = f"reaches {lo}", "before the start of"
        else:
            return
        message = f"`{op.name}` {does} {past} {axis}: this {start} {seen}, and {fits}"
        fix = f"keep the {start} inside the axis, or make the axis longer"
    else:
        return
    one = not trip_part or " to " not in trip_part   # one trip (or no trip named) takes the singular verb
    who = trip_part or "it"
    if op.name == "at-set":
        effect = f"JAX drops an update outside the axis, so {who} {'writes' if one else 'write'} nothing"
    else:
        moved = hi_ok if past == "past the end of" else lo_ok
        where = f"position {moved}" if size == 1 else f"positions {moved} to {moved + size - 1}"
        verb = ("overwrites" if one else "overwrite") if does == "writes" else ("reads" if one else "read")
        effect = f"JAX moves the start back to {moved}, so {who} {verb} {where} instead, silently"
    ctx.report(warning("W-SHAPE-002", s.span, message, help=f"{effect}; {fix}"))


def _bad_trips(a: int, b: int, lo_ok: int, hi_ok: int, trips: int) -> list[int]:
    """The first and last trip of the first run of trips t in 0 ... trips-1 where a * t + b is
    outside lo_ok ... hi_ok ([] when none is): the value is monotonic in t, so each side of
    the range is left by a prefix or a suffix of the trips."""
    def side(t):
        v = a * t + b
        return -1 if v < lo_ok else 1 if v > hi_ok else 0

    def last_of(t0, want):   # the last t >= t0 with side(t) == want, given side(t0) == want
        lo, hi = t0, trips - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if side(mid) == want else (lo, mid - 1)
        return lo
    if side(0) != 0:
        return [0, last_of(0, side(0))]
    end = side(trips - 1)
    if end == 0:
        return []
    lo, hi = 0, trips - 1    # the first trip of the suffix
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if side(mid) == end else (mid + 1, hi)
    return [lo, trips - 1]


#: The ops whose second operand divides (E-TYPE-006 when it is a constant zero).
DIVIDING = ("/", "mod")


def zero_divisor(ctx: CheckContext, op: str, nodes: list, args: list):
    """E-TYPE-006 at the divisor of a `/` or `mod` (`op`; `nodes` the call's positional syntax
    nodes, `args` their typed IR) that is a constant zero, returning ERROR; None otherwise."""
    divisor = args[1].type if op in DIVIDING and len(args) == 2 else None
    if type(divisor) is not TensorType or type(divisor.value) not in (int, float) or divisor.value != 0:
        return None
    at = nodes[1]
    what = (f"`{at.name}`, which is 0" if isinstance(at, Sym) else f"`{at.value!r}`" if isinstance(at, Num)
            else "an expression that is always 0")
    ctx.err("E-TYPE-006", at.span, f"`{op}` by {what}: every element becomes "
            + ("inf or NaN" if op == "/" else "NaN (or 0 for integers)"),
            help="divide by a value that is not zero; a temperature is a positive number (greedy choice is `argmax`)")
    return ERROR
