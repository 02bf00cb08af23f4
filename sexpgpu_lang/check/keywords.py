"""The keyword arguments of forms and their compile-time values.

`keyword_args` reads a form's `:key value` pairs (an unknown key is
E-NAME-003 and read as its near miss); `const_int`, `const_value`,
`const_keyword` and `config_plist` read a setting's compile-time value,
reporting why when it is not one; `const_int` and `shape_in_range` also
report a count or size outside what the runtime can hold (`MAX_SIZE`,
`MAX_HOST_CALLS`, `MAX_SEED`), with the limit in the message;
`integer_constant` folds a `def`'s arithmetic on integers exactly
(E-TYPE-005 for a division that is not); `remat_policy` reads a `:remat` value.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import math

from .. import ir
from ..language import REMAT_POLICIES
from ..syntax import Kw, ListNode, Node, Str, Sym, VecNode
from ..types import ERROR, ErrorType, KeywordType, ShapeType, StringType, TensorType, is_int, promote, scalar
from .context import CheckContext, listed, near_miss
from .infer import MAX_SIZE, infer   # MAX_SIZE: also the largest step count (optax's `count` is i32)


def keyword_args(ctx: CheckContext, node: ListNode, start: int, allowed, what: str) -> dict[str, tuple[Kw, Node]]:
    """The `:key value` pairs of a form from item `start`; unknown keys are E-NAME-003 (read as their near miss)."""
    out: dict[str, tuple[Kw, Node]] = {}
    items = node.items[start:]
    present = {it.name for it in items if isinstance(it, Kw)}
    i = 0
    while i < len(items):
        k = items[i]
        if not isinstance(k, Kw):
            ctx.err("E-FORM-002", k.span, f"`{what}` takes keyword arguments here; this is not a keyword",
                    help="write `:name value` pairs")
            i += 1
            continue
        if i + 1 >= len(items):
            ctx.err("E-FORM-002", k.span, f"`:{k.name}` of `{what}` has no value")
            break
        if allowed is not None and k.name not in allowed:
            hint = near_miss(k.name, allowed)
            ctx.err("E-NAME-003", k.span, f"`{what}` has no keyword `:{k.name}`"
                    + (f"; did you mean `:{hint}`?" if hint else ""),
                    help="it takes " + ", ".join(f"`:{a}`" for a in allowed),
                    data={"replace": f":{hint}"} if hint else None)
            if hint is not None and hint not in present:
                # Read it as the keyword it most likely is: the form is still checked,
                # and not also reported as missing `:hint` (E-FORM-005).
                out[hint] = (k, items[i + 1])
                present.add(hint)
        elif k.name in out:
            ctx.err("E-NAME-002", k.span, f"`:{k.name}` is given twice")
        else:
            out[k.name] = (k, items[i + 1])
        i += 2
    return out


def const_keyword(ctx: CheckContext, kws: dict, key: str, choices: tuple[str, ...], help: str | None = None) -> str:
    """The keyword a setting `:key` names, one of `choices` (the first is the default, taken when the
    setting is absent); anything else is E-FORM-002 naming the choices, and gives the default."""
    if key not in kws:
        return choices[0]
    node = kws[key][1]
    if isinstance(node, Kw) and node.name in choices:
        return node.name
    unknown_choice(ctx, node, key, choices, help and f"it is {listed([f'`:{c}`' for c in choices])}; {help}")
    return choices[0]


def _written_name(node: Node) -> str | None:
    """The name a keyword, symbol or string value spells (what a near miss is looked for), else None."""
    return node.name if isinstance(node, (Kw, Sym)) else node.value if isinstance(node, Str) else None


def unknown_choice(ctx: CheckContext, node: Node, key: str, choices: tuple[str, ...], help: str | None = None,
                   hint: str | None = None, noun: str = "value") -> None:
    """E-FORM-002 for a setting `:key` whose value `node` is none of the keywords `choices`: the value
    as written, the nearest choice (`hint`, else `near_miss`'s; a quick fix replaces the value with
    it), and `help` (else the choices listed)."""
    given = ctx.src.text[node.span.start:node.span.end]
    name = _written_name(node)
    hint = hint or (near_miss(name, choices) if name else None)
    what = f"`:{key}` has no {noun} `{given}`" if isinstance(node, Kw) else f"`:{key}` takes a keyword, not `{given}`"
    ctx.err("E-FORM-002", node.span, what + (f"; did you mean `:{hint}`?" if hint else ""),
            help=help or f"it is {listed([f'`:{c}`' for c in choices])}",
            data={"replace": f":{hint}"} if hint else None)


#: The most calls one step makes from the host loop (`:trips` of the generator, `:microbatches`):
#: each is a dispatch from Python (tens of microseconds at least), and the generator keeps one
#: device array per trip, so a count beyond this could not finish a step in any useful time.
MAX_HOST_CALLS = 2**20
#: The most layers one `(repeat block N)` stacks: far beyond any language model's depth (GPT-3 has
#: 96), and `explain` traces every layer, so its cost grows with N.
MAX_LAYERS = 4096
#: `:seed`'s largest value: `jax.random.key` and numpy's generators take a 64-bit signed seed.
MAX_SEED = 2**63 - 1


def const_int(ctx: CheckContext, node: Node, what: str, minimum: int | None = None, code="E-TYPE-003",
              maximum: int | None = None, why: str = "") -> int | None:
    """A compile-time integer from `minimum` to `maximum` (either None: unbounded), or None after
    reporting why not; `why` (e.g. `: XLA's sizes are 32-bit`) ends the message of one too large."""
    t = infer(ctx, node, ctx.globals).type
    if isinstance(t, ErrorType):
        return None
    if isinstance(t, TensorType) and isinstance(t.value, int) and not isinstance(t.value, bool):
        if minimum is not None and t.value < minimum:
            ctx.err(code, node.span, f"{what} must be {minimum} or more, got {t.value}")
            return None
        if maximum is not None and t.value > maximum:
            ctx.err(code, node.span, f"{what} must be at most {maximum}, got {t.value}{why}")
            return None
        return t.value
    ctx.err(code, node.span, f"{what} must be a compile-time integer, got {t.show()}")
    return None


def shape_in_range(ctx: CheckContext, node: Node, dims: tuple[int, ...], what: str) -> bool:
    """True when every size of `dims` (the shape `node` gives) is from 0 to MAX_SIZE, else
    False after reporting the first that is not (E-SHAPE-004, JAX's and XLA's own limits: a
    negative size is refused by `broadcast_in_dim`, a size past 32 bits by XLA)."""
    for d in dims:
        if d < 0 or d > MAX_SIZE:
            shown = "[" + " ".join(map(str, dims)) + "]"
            limit = "0 or more" if d < 0 else f"at most {MAX_SIZE} (XLA's sizes are 32-bit)"
            ctx.err("E-SHAPE-004", node.span, f"{what}: a size must be {limit}, got {d} in {shown}",
                    help="check the `def` that gives this size")
            return False
    return True


def const_value(ctx: CheckContext, node: Node):
    """A compile-time constant's Python value (number, string, keyword name, shape), or None after reporting."""
    t = infer(ctx, node, ctx.globals).type
    if isinstance(t, TensorType) and t.value is not None:
        return t.value
    if isinstance(t, StringType):
        return t.value
    if isinstance(t, KeywordType):
        return t.name
    if isinstance(t, ShapeType):
        return t.dims
    if isinstance(t, ErrorType):
        return None
    ctx.err("E-TYPE-003", node.span, f"this must be a compile-time constant, got {t.show()}")
    return None


def config_plist(ctx: CheckContext, node: Node, kinds: dict[str, str], what: str) -> dict:
    """A data plist like `(:every 50 :tensorboard true)`. `kinds` maps each allowed key to
    `count` (an integer of 1 or more), `bool`, `string` or `names` (a vector of keywords, given
    as a tuple of names); a value of another kind is E-TYPE-003 and left out."""
    if not isinstance(node, ListNode) or (node.items and not isinstance(node.items[0], Kw)):
        ctx.err("E-FORM-002", node.span, f"`{what}` takes a plist like `(:every 50)`")
        return {}
    out = {}
    for k, (kw, v) in keyword_args(ctx, node, 0, tuple(kinds), what).items():
        if kinds[k] == "count":
            val = const_int(ctx, v, f"`:{k}` of `{what}`", 1)
        elif kinds[k] == "names":
            val = None
            if isinstance(v, VecNode) and all(isinstance(i, Kw) for i in v.items):
                val = tuple(i.name for i in v.items)
            else:
                ctx.err("E-TYPE-003", v.span, f"`:{k}` of `{what}` takes a vector of names like `[:loss :reward]`")
        else:
            val = const_value(ctx, v)
            ok = isinstance(val, bool) if kinds[k] == "bool" else isinstance(val, str)
            if val is not None and not ok:
                ctx.err("E-TYPE-003", v.span, f"`:{k}` of `{what}` must be "
                        + ("`true` or `false`" if kinds[k] == "bool" else "a string"))
                val = None
        if val is not None:
            out[k] = val
    return out


#: The integer arithmetic a `def` folds exactly (`integer_constant`).
_EXACT = {"+": lambda *v: sum(v), "-": lambda a, b=None: -a if b is None else a - b, "*": lambda *v: math.prod(v),
          "mod": lambda a, b: a % b}


def integer_constant(ctx: CheckContext, e: ir.Expr) -> ir.Expr:
    """A `def`'s value `e` with its integer arithmetic folded exactly: where `e` divides with `/`
    and every leaf is an integer constant (a literal, another integer `def`, a `size`), `+ - * / mod` are
    computed on Python integers and the result is an integer constant of the operands' promoted
    dtype (`(def head-width (/ width heads))` is usable in a shape). A `/` that is not exact is
    E-TYPE-005 at that call, and the value is ERROR (so its uses are not reported again). Any other
    value, and a division by zero, is `e` unchanged: elsewhere `/` stays true division (integers
    give f32, as in JAX)."""
    leaves: list[TensorType] = []
    divides = []

    def arithmetic(x) -> bool:
        return isinstance(x, ir.Op) and (x.name in _EXACT or x.name == "/")

    def collect(x) -> bool:
        if arithmetic(x):
            divides.extend([x] if x.name == "/" else [])
            return all(collect(a) for a in x.args)
        t = x.type
        if isinstance(t, TensorType) and t.shape == () and is_int(t.dtype) and isinstance(t.value, int) \
                and not isinstance(t.value, bool):
            leaves.append(t)
            return True
        return False

    if not collect(e) or not divides:
        return e

    def value(x) -> int | None:
        if not arithmetic(x):
            return x.type.value
        vals = [value(a) for a in x.args]
        if None in vals:
            return None
        if x.name in ("/", "mod") and vals[1] == 0:
            return None
        if x.name != "/":
            return _EXACT[x.name](*vals)
        a, b = vals
        if a % b:
            ctx.err("E-TYPE-005", x.span, f"`/` of the integers {a} and {b} is not exact ({a} = {b} * {a // b} + {a % b}): "
                    "a `def` of integers stays an integer", help=f"make {a} a multiple of {b}, or divide floats for a "
                    f"float, e.g. `(/ {a}.0 {b})`")
            raise _Inexact
        return a // b

    try:
        v = value(e)
    except _Inexact:
        return ir.Const(ERROR, e.span)
    if v is None:
        return e
    dt = (leaves[0].dtype, leaves[0].weak)
    for t in leaves[1:]:
        dt = promote(dt, (t.dtype, t.weak))
    t = scalar(dt[0], v, dt[1])
    return ir.Const(t, e.span, v)


class _Inexact(Exception):
    """A `/` of integers that is not exact, already reported (E-TYPE-005)."""


def remat_policy(ctx: CheckContext, node: Node) -> str | None:
    """A `:remat` value: one of `REMAT_POLICIES`, else E-FORM-002 echoing it with the nearest policy
    (`unknown_choice`; and None). A policy is also found by its first word, in any order
    (`:save-nothing`, `:save-dots`: `:nothing-saveable`, `:dots-saveable`)."""
    if isinstance(node, Kw) and node.name in REMAT_POLICIES:
        return node.name
    name = _written_name(node) or ""
    named = [p for p in REMAT_POLICIES if p.split("-")[0] in set(name.replace("_", "-").split("-"))]
    unknown_choice(ctx, node, "remat", REMAT_POLICIES, noun="policy",
                   help="it is `:nothing-saveable` (recomputes everything in the backward pass), `:dots-saveable` "
                        "(keeps matmul outputs) or `:everything-saveable` (keeps all: no remat)",
                   hint=near_miss(name, REMAT_POLICIES) or (named[0] if len(named) == 1 else None))
    return None
