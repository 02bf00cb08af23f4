"""The standard library's arguments checked at the call, as an op's are.

A standard-library function (prelude.sx) is inlined for its argument types,
so a mistake in its arguments used to show, if at all, as an error deep in
its body ("`reshape` cannot fit ...") or not at all (a float position is
arithmetic like any other). `check_stdlib_call` checks what each function's
comment says it takes, at the argument that breaks it, before the body is
inlined:

- positions integer: `rotary`'s and `llama-block`'s `positions` ([T] or
  [B T], against x's T and B), the cached layers' `pos` (an integer scalar,
  or [B] against x's, q's or the cache's batch) (E-TYPE-002, E-SHAPE-005);
- end-of-sequence ids: `eos-hit`'s and `stop-rows`' `eos` an integer id or
  a vector of them (`(stack [2 7])`; a bare `[2 7]` is a shape), and an id
  past the tokens' vocabulary (the ids `argmax` over V logits can give, or a
  loader's `:vocab`) one line: it could never stop a row (E-SHAPE-005);
- a decoding trip's rows [B S] integer and its column `at` an integer
  scalar or [B] of the rows' batch: `row-token`'s, `decode-trip`'s,
  `cached-trip`'s and `decode-logits`' (its `start`); `sample-trip`'s rows
  and its `at` an integer scalar; `prefill-prompts`' prompt [B P] integer
  and its mask (E-TYPE-002, E-SHAPE-005); `repeat-prompts`' width a
  constant of at least the prompt's columns (E-TYPE-003, E-SHAPE-005);
- a padding or completion mask [B T], of any dtype (bool, integer 0/1 or float
  weights: one rule, `_mask_fits`): `padded-positions`', `left-padded-start`'s,
  `prefill-prompts`', the completion losses' and the post-training functions'
  `mask` (E-SHAPE-005); `stop-rows`' bool, the mask it writes (E-TYPE-002);
- rotary's head width even: `rotary`'s x [B T N H], `llama-block`'s and
  `llama-block-cached`'s wq [D N H] (E-SHAPE-004);
- a cache in its layout and long enough: `llama-block-cached`'s and
  `transformer-block-cached`'s caches against `wk`, and the prefill's
  positions against the cache's length (E-SHAPE-005);
- an embedding table the right way round: `embedding`'s table [V D] when
  its ids provably reach past V but not past D (a loader's `:vocab`,
  `ranges`) is transposed (E-SHAPE-005);
- the post-training functions' tensors in their layouts: the completion
  mask [B T] (E-SHAPE-005), per-token values
  [B T] and logits [B T V] on the mask's [B T], per-row values (rewards,
  advantages) [B] (E-SHAPE-005), `token-log-probs`' tokens integer, and a
  group size a constant integer that divides the rows, of 2 or more for
  `group-advantages` (a group of one makes every advantage 0) (E-TYPE-003,
  E-SHAPE-005).

The numbers beside the tensors (GRPO's and GKD's `beta`, the clip range) and
`repeat-prompts`' fill are `stdlib_settings.py`'s.

A function's call with the wrong number of arguments is `arity_error`'s
(E-FORM-003, with the signature; at the first keyword that names a
parameter, since the arguments are positional).

A call that fails one is reported once, there, and typed ERROR: nothing in
its body is reported after it. Imports nothing outside `sexpgpu_lang`;
never JAX.
"""
from __future__ import annotations

from typing import Callable

from .. import ir
from ..diagnostics import warning
from ..syntax import Kw, ListNode, Sym
from ..types import ShapeType, TensorType, Type, is_float, is_int
from .context import CheckContext
from .ranges import DECLARED, hi_occurs, lo_occurs
from .stdlib_settings import settings_fit

#: function -> {parameter: what it must be}: "positions" (an integer tensor, [T] or [B T] of x), "pos"
#: (an integer scalar or [B]), "heads" (the last axis even: a tensor of heads of width H), "table"
#: ([V D], checked against the ids), "cache" ([B S K H] with wk's K and H, and x's T positions
#: fitting S), "mask" ([B T]; `_mask_fits`), "eos" (an id or a vector of ids, within the tokens'),
#: "row" (the [B S] integer rows a generator writes), "column" (an integer scalar: the column a trip writes).
RULES: dict[str, dict[str, str]] = {
    "rotary": {"x": "heads", "positions": "positions"},
    "rotary-freq": {"x": "heads", "positions": "positions"},
    "llama-block": {"positions": "positions", "wq": "heads"},
    "llama-block-freq": {"positions": "positions", "wq": "heads"},
    "qwen2-block": {"positions": "positions", "wq": "heads"},
    "llama-block-cached": {"pos": "pos", "wq": "heads", "k-cache": "cache", "v-cache": "cache"},
    "llama-block-freq-cached": {"pos": "pos", "wq": "heads"},
    "qwen2-block-cached": {"pos": "pos", "wq": "heads"},
    "qwen3-block": {"positions": "positions", "wq": "heads"},
    "qwen3-block-cached": {"pos": "pos", "wq": "heads"},
    "olmo2-block": {"positions": "positions", "wq": "heads"},
    "olmo2-block-cached": {"pos": "pos", "wq": "heads"},
    "gpt2-block-cached": {"pos": "pos"},
    "transformer-block-cached": {"pos": "pos", "k-cache": "cache", "v-cache": "cache"},
    "cache-write": {"pos": "pos"},
    "cached-attention": {"pos": "pos"},
    "learned-positions": {"pos": "pos"},
    "row-positions": {"pos": "pos"},
    "row-token": {"row": "row", "at": "pos"},
    "decode-trip": {"row": "row", "at": "pos"},
    "sample-trip": {"row": "row", "at": "column"},
    "prefill-prompts": {"prompt": "row", "mask": "mask"},
    "cached-trip": {"at": "pos"},
    "decode-logits": {"row": "row", "start": "pos"},
    "padded-positions": {"mask": "mask"},
    "left-padded-start": {"mask": "mask"},
    "padded-causal-mask": {"positions": "positions"},
    "gpt2-block-padded": {"positions": "positions"},
    "transformer-block-padded": {"positions": "positions"},
    "completion-cross-entropy": {"mask": "mask"},
    "completion-log-prob": {"mask": "mask"},
    "row-completion-mask": {"mask": "mask"},
    "stop-rows": {"mask": "mask", "eos": "eos"},
    "eos-hit": {"eos": "eos"},
    "embedding": {"table": "table"},
}

#: the argument whose axis 0 is the batch a `[B]` pos must match, by function
_BATCH_OF = {"cache-write": "cache", "cached-attention": "q", "row-token": "row", "decode-trip": "row",
             "decode-logits": "row"}

#: The post-training functions' tensors: "mask" [B T] (`_mask_fits`), "bt" a value per token [B T],
#: "btv" logits [B T V], "b" a value per row [B], "tokens" [B T] integer, "group" a constant
#: integer dividing the rows; each B and T is the mask's (the rows' `b` where there is no mask).
_POLICY = {"log-p": "bt", "old-log-p": "bt", "advantages": "b", "mask": "mask"}
LAYOUTS: dict[str, dict[str, str]] = {
    "repeat-rows": {"x": "bt", "n": "group"},
    "top-k-rows": {"scores": "b", "k": "group"},
    "token-mean": {"x": "bt", "mask": "mask"},
    "sequence-mean": {"x": "bt", "mask": "mask"},
    "constant-mean": {"x": "bt", "mask": "mask"},
    "token-log-probs": {"logits": "btv", "tokens": "tokens", "mask": "mask"},
    "token-entropy": {"logits": "btv", "mask": "mask"},
    "forward-kl": {"student-logits": "btv", "teacher-logits": "btv", "mask": "mask"},
    "reverse-kl": {"student-logits": "btv", "teacher-logits": "btv", "mask": "mask"},
    "generalized-jsd": {"student-logits": "btv", "teacher-logits": "btv", "mask": "mask"},
    "group-advantages": {"rewards": "b", "group": "group"},
    "group-advantages-unscaled": {"rewards": "b", "group": "group"},
    "clipped-surrogate": _POLICY,
    "grpo-loss": _POLICY,
    "bnpo-loss": _POLICY,
    "dr-grpo-loss": _POLICY,
    "kl-k1": {"log-p": "bt", "ref-log-p": "bt", "mask": "mask"},
    "kl-k2": {"log-p": "bt", "ref-log-p": "bt", "mask": "mask"},
    "kl-k3": {"log-p": "bt", "ref-log-p": "bt", "mask": "mask"},
    "completion-metrics": {"logits": "btv", "mask": "mask"},
    "grpo-metrics": {"rewards": "b", "logits": "btv", "ref-log-p": "bt", **_POLICY},
    "repeat-prompts": {"prompt": "bt", "n": "group"},
    "gkd-objective": {"student-logits": "btv", "teacher-logits": "btv", "mask": "mask"},
    "grpo-objective": {"logits": "btv", "ref-logits": "btv", "row": "tokens", "mask": "mask", "rewards": "b",
                       "advantages": "b"},
}


def arity_error(ctx: CheckContext, node: ListNode, params: list[str]) -> Type:
    """E-FORM-003 for a call of a function (`def`'d or the standard library's) whose arguments, `node`'s
    items after the head, are not `params`' count, with the signature; its ERROR type. A keyword that
    names a parameter, `(gkd-objective s t :beta 0.5 :mask m)`, is the mistake said at it: a function's
    arguments are positional (a keyword that names none may be a value, `:f32`)."""
    name = node.items[0].name if isinstance(node.items[0], Sym) else "this function"
    signature, n = f"`({name} {' '.join(params)})`", len(params)
    count = f"{n} argument{'' if n == 1 else 's'}"
    kw = next((a for a in node.items[1:] if isinstance(a, Kw) and a.name in params), None)
    if kw is not None:
        return ctx.err("E-FORM-003", kw.span, f"`{name}` takes its {count} by position, not by keyword: {signature}, "
                       f"got `:{kw.name}`", help=f"drop the keywords and give the arguments in this order: {signature}")
    return ctx.err("E-FORM-003", node.span, f"`{name}` takes {count} {signature}, got {len(node.items) - 1}")


def check_stdlib_call(ctx: CheckContext, fn: str, params: list[str], args: list[ir.Expr],
                      ranges: Callable[[ir.Expr], object],
                      forms: Callable[[ir.Expr], object] | None = None, span=None) -> bool:
    """Check the arguments `args` of standard-library function `fn` (its parameters `params`)
    against `RULES` (and the post-training functions' `LAYOUTS`); `ranges(e)` gives an argument's
    `ranges.value_range`, `forms(e)` its `ranges.trip_form`. Reports the first that breaks one (at that
    argument) and returns False; True when all hold. A cached layer's `pos` that provably writes past its
    cache on a trip is W-SHAPE-002 at the call (`span`), which still holds. The settings beside the
    tensors (a KL weight, a clip range, a fill) are `stdlib_settings.settings_fit`'s."""
    if fn in LAYOUTS:
        by_name = dict(zip(params, args))
        return _layouts_fit(ctx, fn, by_name) and settings_fit(ctx, fn, by_name)
    rules = RULES.get(fn)
    if not rules:
        return True
    by_name = dict(zip(params, args))
    pos = by_name.get("pos")
    if forms is not None and span is not None and isinstance(pos, ir.Expr) and isinstance(pos.type, TensorType) \
            and is_int(pos.type.dtype):
        _writes_past_cache(ctx, fn, by_name, ranges, forms, span)
    for p, rule in rules.items():
        a = by_name.get(p)
        t = a.type if a is not None else None
        if rule == "eos" and a is not None and not _eos_fits(ctx, fn, p, a, by_name, ranges):
            return False
        if not isinstance(t, TensorType):
            continue
        if rule in ("positions", "pos") and not is_int(t.dtype):
            what = "an integer position" if rule == "pos" else "integer positions"
            ctx.err("E-TYPE-002", a.span, f"`{fn}`'s `{p}` must be {what}, got {t.show()}",
                    help=f"positions count tokens: cast them, `(cast {p} :i32)`, or build them with `iota` "
                         f"(an integer); a {t.dtype} position rotates or writes by a fraction, silently")
            return False
        if rule == "pos" and not _pos_fits(ctx, fn, p, a, by_name):
            return False
        if rule == "column" and (t.shape != () or not is_int(t.dtype)):
            ctx.err("E-TYPE-002" if t.shape == () else "E-SHAPE-005", a.span, f"`{fn}`'s `{p}` is the column every "
                    f"row writes, an integer scalar; got {t.show()}",
                    help="give the trip's column, e.g. `(+ (cast trip :i32) prompt)`; a column per row [B] "
                         "needs a cache and `cached-trip`")
            return False
        if rule == "positions" and not _positions_fit(ctx, fn, p, a, by_name):
            return False
        if rule == "mask" and not _mask_fits(ctx, fn, p, a):
            return False
        if rule == "row" and (len(t.shape) != 2 or not is_int(t.dtype)):
            ctx.err("E-TYPE-002" if len(t.shape) == 2 else "E-SHAPE-005", a.span, f"`{fn}`'s `{p}` is the rows a "
                    f"generator writes, [B S] token ids (an integer); got {t.show()}",
                    help="keep the rows in the generator's state as ids, e.g. `(field batch :x)` of an `:i32` field")
            return False
        if rule == "heads" and t.shape and t.shape[-1] % 2:
            what = "x [B T N H]" if p == "x" else "wq [D N H]"
            ctx.err("E-SHAPE-004", a.span, f"rotary embeddings need an even head width: `{fn}`'s {what} has "
                    f"H = {t.shape[-1]}", help="rotary turns the two halves of each head into each other's "
                    "pairs; make the head width even (the width divided by the heads)")
            return False
        if rule == "cache" and not _cache_fits(ctx, fn, p, a, by_name):
            return False
        if rule == "table" and len(t.shape) == 2:
            ids = by_name.get("ids")
            r = ranges(ids) if ids is not None else None
            rows, cols = t.shape
            if isinstance(r, tuple) and hi_occurs(r) and rows <= r[1] == cols - 1:   # ids of a vocabulary of cols
                said = " (as a loader's `:vocab` declares)" if r[2] == DECLARED else ""
                ctx.err("E-SHAPE-005", a.span, f"the embedding table is {t.show()}, but the ids reach {r[1]}{said}: "
                        f"it looks transposed (`embedding` takes table [V D], one row per id)",
                        help=f"declare it [{cols} {rows}] (vocabulary first), or pass `(transpose table)`; if it is "
                             f"the right way round, the ids need {r[1] + 1} rows: make the table and the ids' "
                             "vocabulary one size")
                return False
    return True


def _eos_fits(ctx: CheckContext, fn: str, p: str, a: ir.Expr, by_name: dict, ranges) -> bool:
    """End-of-sequence ids: an integer id or vector of ids (E-TYPE-001, E-TYPE-002), none past the
    ids the tokens can hold (`ranges` of `tokens`/`token`: `argmax` or `categorical` over V logits, a loader's
    `:vocab`), which is E-SHAPE-005 at the id, in one line."""
    t = a.type
    if isinstance(t, ShapeType):
        dims = t.show().removesuffix(" shape")
        written = ctx.src.text[a.span.start:a.span.end]
        ctx.err("E-TYPE-001", a.span, f"`{fn}`'s `{p}` takes the end-of-sequence ids as a tensor, got the shape "
                f"{dims}", help=f"make the ids a vector tensor: `(stack {written if written.isprintable() and '(' not in written else dims})`")
        return False
    if not isinstance(t, TensorType):
        return True
    if not is_int(t.dtype) or len(t.shape) > 1:
        ctx.err("E-TYPE-002", a.span, f"`{fn}`'s `{p}` is an end-of-sequence id or a vector of ids (integers), "
                f"got {t.show()}", help="give the tokenizer's or config.json's `eos_token_id`")
        return False
    ids = _constant_ids(a)
    if not ids:   # a name bound to constant ids: their ends, where they provably occur
        known = ranges(a)
        ids = ([known[1]] if hi_occurs(known) else []) + ([known[0]] if known[0] < 0 and lo_occurs(known) else []) \
            if isinstance(known, tuple) else []
    tok = by_name.get("tokens", by_name.get("token"))
    r = ranges(tok) if isinstance(tok, ir.Expr) else None
    if ids and isinstance(r, tuple):
        past = [i for i in ids if i > r[1] or i < 0]
        if past:
            where = "past the vocabulary" if past[0] > r[1] else "negative"
            ctx.err("E-SHAPE-005", a.span, f"end-of-sequence id {past[0]} is {where}: the tokens are 0 "
                    f"to {r[1]}, so it would never stop a row",
                    help=f"give an id below {r[1] + 1} (the checkpoint's `eos_token_id`, or the tokenizer's)")
            return False
    return True


def _constant_ids(e: ir.Expr) -> list[int]:
    """The ids of a constant integer, or of `(stack [i j ...])`; [] when they are computed."""
    if isinstance(e.type, TensorType) and isinstance(e.type.value, int) and not isinstance(e.type.value, bool):
        return [e.type.value]
    if isinstance(e, ir.Op) and e.name == "stack" and len(e.args) == 1 and isinstance(e.args[0].type, ShapeType):
        return list(e.args[0].type.dims)
    return []


def _writes_past_cache(ctx: CheckContext, fn: str, by_name: dict, ranges, forms, span) -> None:
    """W-SHAPE-002 at the call: the cache [B S ...] of `fn` is written at pos ... pos+T-1 (T the new
    entries' or x's axis 1), and on a trip of `:step` (pos's trip form) or anywhere (its range) that
    passes S - 1; `cache-write` drops such an entry (JAX's at[...].set), so the row loses it."""
    cache = by_name.get("cache", by_name.get("k-cache"))
    new = by_name.get("new", by_name.get("x", by_name.get("q")))
    pos = by_name["pos"]
    if not all(isinstance(a, ir.Expr) and isinstance(a.type, TensorType) for a in (cache, new, pos)) \
            or len(cache.type.shape) != 4 or len(new.type.shape) < 2 or pos.type.value is not None:
        return
    n, size = cache.type.shape[1], new.type.shape[1]
    last = n - size
    form, r, trips = forms(pos), ranges(pos), ctx.trips
    where = ""
    if isinstance(form, tuple) and form[0] > 0 and trips:
        a, b = form
        bad = [t for t in range(trips) if a * t + b > last]
        if not bad:
            return
        first, v = bad[0], a * bad[0] + b
        where = f" on trip {first} (of trips 0 to {trips - 1}): this position is {v} there"
        fix = (f"with `:trips {first}` every trip fits; or make the cache longer" if first > 0
               else "make the cache longer")
        who = f"trip {first}" if first == trips - 1 else f"trips {first} to {trips - 1}"
    elif isinstance(r, tuple) and r[0] > last:
        where, fix, who = f": this position is {r[0]} or more", "make the cache longer", "it"
    else:
        return
    ctx.report(warning("W-SHAPE-002", span, f"`{fn}` writes past the end of axis 1 of the cache "
                       f"{cache.type.show()}{where}, and {size} new position{'s fit' if size > 1 else ' fits'} only "
                       f"at positions 0 to {last}",
                       help=f"an entry past the cache is dropped (JAX's at[...].set), so {who} write nothing "
                            f"and no later query sees them; {fix}"))


def _batch(fn: str, by_name: dict) -> int | None:
    """The batch size B of `fn`'s call: axis 0 of x, q or the cache, where it is known."""
    a = by_name.get(_BATCH_OF.get(fn, "x"))
    t = a.type if isinstance(a, ir.Expr) else None
    return t.shape[0] if isinstance(t, TensorType) and t.shape else None


def _pos_fits(ctx: CheckContext, fn: str, p: str, a: ir.Expr, by_name: dict) -> bool:
    """`pos`, the position of the first new column: an integer scalar or [B] (one per row, B the
    call's batch); anything else is E-SHAPE-005 at the argument."""
    t, b = a.type, _batch(fn, by_name)
    if t.shape == () or (len(t.shape) == 1 and (b is None or t.shape[0] in (b, 1))):
        return True
    per_row = f"[{b}]" if b is not None else "[B]"
    ctx.err("E-SHAPE-005", a.span, f"`{fn}`'s `{p}` is the position of the first new column: an integer scalar, "
            f"or {per_row} one per row; got {t.show()}",
            help="give each row's position of its first new token (a left-padded prompt's is its length minus "
                 "the prompt's width: `left-padded-start`); per-token positions [B T] go to `rotary`")
    return False


def _positions_fit(ctx: CheckContext, fn: str, p: str, a: ir.Expr, by_name: dict) -> bool:
    """`positions` of x [B T ...]: [T] or [B T] (B may be 1); E-SHAPE-005 at the argument."""
    t, x = a.type, by_name.get("x")
    xt = x.type if isinstance(x, ir.Expr) else None
    if not (isinstance(xt, TensorType) and len(xt.shape) >= 2):
        return True
    b, n = xt.shape[0], xt.shape[1]
    if t.shape in ((n,), (b, n), (1, n)):
        return True
    ctx.err("E-SHAPE-005", a.span, f"`{fn}`'s `{p}` must be [{n}] or [{b} {n}] (one per token of x "
            f"{xt.show()}, per row or for every row); got {t.show()}",
            help="`(iota [T])` for a row from position 0, `(padded-positions mask)` for a padded batch")
    return False


def _mask_fits(ctx: CheckContext, fn: str, p: str, a: ir.Expr) -> bool:
    """A mask, padding or completion: [B T] of any dtype (E-SHAPE-005). The one rule of every
    standard-library function that takes a mask: true, or nonzero, at the tokens it keeps. A function
    that reduces over the tokens casts it to f32, so a float mask weighs each token; one that selects
    tokens keeps the nonzero ones (TRL's masks are integer 0/1 tensors, a comparison's is bool).
    `stop-rows`' mask, which it writes, is bool (E-TYPE-002)."""
    t = a.type
    if fn == "stop-rows" and t.dtype != "bool":
        ctx.err("E-TYPE-002", a.span, f"`{fn}`'s `{p}` is the completion mask it writes a token's entry into, "
                f"bool; got {t.show()}", help="start it false, e.g. `(< (zeros [B C] :dtype :i32) 0)`, and keep "
                f"the `:mask` each trip returns; or compare: `(!= {p} 0)`")
        return False
    if len(t.shape) != 2:
        ctx.err("E-SHAPE-005", a.span, f"`{fn}`'s `{p}` is a mask [B T], one entry per token of each row; "
                f"got {t.show()}", help="give the mask of the whole batch, [B T]")
        return False
    return True


def _cache_fits(ctx: CheckContext, fn: str, p: str, cache: ir.Expr, by_name: dict) -> bool:
    """A cached layer's cache `p` ([B S K H], K and H from `wk` [D K H]) in that layout, and long
    enough for the positions of `x` [B T D]: E-SHAPE-005 at the cache, naming the layout."""
    t, wk, x = cache.type, by_name.get("wk"), by_name.get("x")
    if not (isinstance(wk, ir.Expr) and isinstance(wk.type, TensorType) and len(wk.type.shape) == 3
            and len(t.shape) == 4):
        return True
    k, h = wk.type.shape[1:]
    layout = "[B S K H]" if fn == "llama-block-cached" else "[B S H K]"
    if t.shape[2:] != (k, h):
        swapped = t.shape[1] == k and t.shape[2] != k
        ctx.err("E-SHAPE-005", cache.span, f"`{fn}`'s `{p}` is {t.show()}, but its layout is {layout}: batch, "
                f"positions, {k} key-value head{'' if k == 1 else 's'} of width {h} (wk's last two axes)"
                + ("; its axes 1 and 2 look swapped" if swapped else ""),
                help=f"make it [{t.shape[0]} {t.shape[2] if swapped else 'S'} {k} {h}]" + (
                    " (swap axes 1 and 2 where it is made)" if swapped else ""))
        return False
    if isinstance(x, ir.Expr) and isinstance(x.type, TensorType) and len(x.type.shape) == 3 \
            and x.type.shape[1] > t.shape[1]:
        ctx.err("E-SHAPE-005", x.span, f"`{fn}` writes the {x.type.shape[1]} positions of x {x.type.show()} into "
                f"`{p}`, which holds {t.shape[1]} ({t.show()})",
                help="make the cache at least as long as the prompt and every position decoded after it, or "
                     "prefill fewer positions")
        return False
    return True


#: the functions whose group compares its rows with each other: a group of one row is refused
_GROUPS = ("group-advantages", "group-advantages-unscaled")

_LAYOUT_WORDS = {"mask": "the completion mask [B T]", "bt": "a value per token [B T]", "btv": "logits [B T V]",
                 "b": "a value per row [B]", "tokens": "token ids [B T]"}


def _layouts_fit(ctx: CheckContext, fn: str, by_name: dict) -> bool:
    """A post-training function's arguments in `LAYOUTS[fn]`'s layouts, B and T the mask's (or the
    first per-row value's B): the first that breaks one reported at it, False; True when all fit."""
    rules = LAYOUTS[fn]
    typed = {p: a for p, a in by_name.items() if p in rules and isinstance(a.type, TensorType)}
    mask = typed.get("mask")
    bt = mask.type.shape if mask is not None and len(mask.type.shape) == 2 else None
    rows = bt[0] if bt is not None else next((a.type.shape[0] for p, a in typed.items()
                                               if rules[p] == "b" and len(a.type.shape) == 1), None)
    if fn == "top-k-rows":
        return _top_k_rows_fit(ctx, by_name)
    if fn == "repeat-prompts" and not _width_fits(ctx, by_name):
        return False
    for p, a in typed.items():
        rule, t = rules[p], a.type
        rank = {"mask": 2, "bt": 2, "btv": 3, "b": 1, "tokens": 2}.get(rule)
        if rule == "group":
            least = 2 if fn in _GROUPS else 1
            if t.shape != () or not isinstance(t.value, int) or isinstance(t.value, bool) or t.value < least:
                alone = (": a group of one row has nothing to compare with, so every advantage is 0 and the "
                         "policy's gradient too (TRL refuses `num_generations` below 2)") if least == 2 \
                    and t.shape == () and t.value == 1 else ""
                ctx.err("E-TYPE-003", a.span, f"`{fn}`'s `{p}` is a count of rows, a constant integer of {least} or "
                        f"more; got {1 if alone else t.show()}{alone}",
                        help="give the number of answers per prompt, e.g. `(def group 8)`")
                return False
            if rows is not None and rows % t.value:
                ctx.err("E-SHAPE-005", a.span, f"`{fn}` groups the {rows} rows by {t.value}, which does not divide "
                        f"them", help=f"make the rows a multiple of the group: prompts times {t.value}")
                return False
            continue
        if rule == "mask" and not _mask_fits(ctx, fn, p, a):
            return False
        if rule == "tokens" and not is_int(t.dtype):
            ctx.err("E-TYPE-002", a.span, f"`{fn}`'s `{p}` are token ids, integers; got {t.show()}",
                    help="pass the sampled tokens (an integer tensor), not their logits or probabilities")
            return False
        want = None
        if len(t.shape) != rank:
            want = _LAYOUT_WORDS[rule]
        elif rule in ("bt", "btv", "tokens") and bt is not None and t.shape[:2] != bt:
            want = f"{_LAYOUT_WORDS[rule]} on the mask's [{bt[0]} {bt[1]}]"
        elif rule == "b" and rows is not None and t.shape[0] != rows:
            want = f"{_LAYOUT_WORDS[rule]} for the {rows} rows"
        if want is not None:
            ctx.err("E-SHAPE-005", a.span, f"`{fn}`'s `{p}` is {t.show()}, but it takes {want}",
                    help="the completion's columns line up with the mask's: slice or shift the tensor to them "
                         "(the logits at column t score the token at column t)" if rule != "b" else
                         "give one value per row (reduce over the columns first)")
            return False
    return True


def _width_fits(ctx: CheckContext, by_name: dict) -> bool:
    """`repeat-prompts`' width a constant integer, at least the prompt's P columns (E-TYPE-003,
    E-SHAPE-005)."""
    prompt, width = by_name["prompt"], by_name["width"]
    if not (isinstance(prompt.type, TensorType) and isinstance(width.type, TensorType)) or len(prompt.type.shape) != 2:
        return True
    wt, p = width.type, prompt.type.shape[1]
    if wt.shape != () or not isinstance(wt.value, int) or isinstance(wt.value, bool):
        ctx.err("E-TYPE-003", width.span, f"`repeat-prompts`' `width` is the row's columns, a constant integer; got "
                f"{wt.show()}", help="give the prompt's columns and the completion's, e.g. `(def seq 12)`")
        return False
    if wt.value < p:
        ctx.err("E-SHAPE-005", width.span, f"`repeat-prompts`' `width` is {wt.value}, fewer than the prompt's {p} "
                f"columns ({prompt.type.show()})", help=f"make it {p} plus the columns the trips write")
        return False
    return True


def _top_k_rows_fit(ctx: CheckContext, by_name: dict) -> bool:
    """`top-k-rows`' scores [B] for x's B rows and k a constant from 1 to B (E-SHAPE-005, E-TYPE-003)."""
    x, scores, k = by_name["x"], by_name["scores"], by_name["k"]
    if not all(isinstance(a.type, TensorType) for a in (x, scores, k)):
        return True
    if len(scores.type.shape) != 1 or not x.type.shape or scores.type.shape[0] != x.type.shape[0]:
        ctx.err("E-SHAPE-005", scores.span, f"`top-k-rows`' `scores` is {scores.type.show()}, but it takes one score "
                f"per row of x {x.type.show()}", help="reduce the scores to one per row first, e.g. `(mean s :axes [1])`")
        return False
    kt = k.type
    if kt.shape != () or not isinstance(kt.value, int) or isinstance(kt.value, bool) or not 1 <= kt.value <= x.type.shape[0]:
        ctx.err("E-TYPE-003", k.span, f"`top-k-rows`' `k` is how many rows to keep, a constant integer from 1 to "
                f"{x.type.shape[0]}; got {kt.show() if not isinstance(kt.value, int) else kt.value}",
                help="keep at most the rows there are")
        return False
    return True
