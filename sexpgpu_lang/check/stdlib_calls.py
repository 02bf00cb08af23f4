"""The sampling functions' and the objectives' arguments checked at the call, in the user's words.

`check_sampling_call` runs before `stdlib_args.check_stdlib_call`'s rules and before the body of
`sample-trip`, `prefill-prompts`, `cached-trip`, `decode-logits`, `repeat-prompts`,
`gkd-objective`, `grpo-objective` and the divergences is inlined, so a wrong argument is one
diagnostic at it, not an error deep in the body at the whole call:

- a model argument (`MODELS`) names a model with the entry the function calls (`:apply` for
  `sample-trip`, `:decode` for the cached ones): E-TYPE-004 at a value that is no model (a number,
  a lambda, a loader), E-NAME-004 at a model without the entry;
- a tensor argument (`TENSORS`) is a tensor (E-TYPE-001 at a model or a string), a number
  argument (`NUMBERS`: salt, temperature) a scalar number (E-TYPE-001, E-SHAPE-005), a
  constant temperature 0 or more (E-RAND-001); `repeat-prompts`' prompt [B P] (E-SHAPE-005);
  `cached-trip`'s state the plist `prefill-prompts` makes (E-TYPE-001, E-NAME-004);
- sizes that must agree across arguments, compared at the call and naming both (E-SHAPE-005): the
  vocabularies of the student's and the teacher's logits (the policy's and the reference's), the
  batch of a cache and of the prompt or row, a cache's positions and the row's width (a cache at
  most as long as the prompt leaves no column for the trips), `grpo-objective`'s mask and logits
  against its row [B S];
- the trips against the row (W-SHAPE-002): `cached-trip`'s column `at`, `a * trip + b` on the
  generator's trips, past the row's last column on a trip: that trip writes nothing;
- left padding (W-LOADER-003): a `prefill-prompts` prompt or mask, or a `left-padded-start` mask,
  that is `(field batch :name)` (or a `cast` of one) of a loader whose `:pad-side` is not `:left`:
  the trips would decode after the padding.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from .. import ir
from ..diagnostics import warning
from ..types import FunctionType, LoaderType, ModelType, PlistType, StringType, TensorType, Type, is_float, is_int
from .context import CheckContext

#: function -> (its model parameter, the entry it calls)
MODELS = {"sample-trip": ("m", "apply"), "prefill-prompts": ("m", "decode"), "cached-trip": ("m", "decode"),
          "decode-logits": ("m", "decode")}

#: function -> its parameters that must be tensors, with what each is (in the docs' words)
TENSORS = {
    "gkd-objective": {"student-logits": "logits [B S V]", "teacher-logits": "logits [B S V]",
                      "mask": "the completion mask [B S]"},
    "grpo-objective": {"logits": "logits [B S V]", "ref-logits": "logits [B S V]", "row": "token ids [B S]",
                       "mask": "the completion mask [B S]", "rewards": "a value per row [B]",
                       "advantages": "a value per row [B]"},
    "forward-kl": {"student-logits": "logits [B T V]", "teacher-logits": "logits [B T V]"},
    "reverse-kl": {"student-logits": "logits [B T V]", "teacher-logits": "logits [B T V]"},
    "generalized-jsd": {"student-logits": "logits [B T V]", "teacher-logits": "logits [B T V]"},
    "repeat-prompts": {"prompt": "prompts [B P]"},
    "prefill-prompts": {"prompt": "prompts [B P]", "mask": "their padding mask [B P]", "cache": "a cache [B S K H]"},
    "decode-logits": {"row": "rows [B S]", "cache": "a cache [B S K H]"},
    "sample-trip": {"row": "rows [B S]"},
}

#: function -> its parameters that are numbers (a scalar); the objectives' beta and clip range are
#: checked with their ranges by `stdlib_settings` (`RANGES`)
NUMBERS = {"sample-trip": ("salt", "temperature"), "cached-trip": ("salt", "temperature")}

#: function -> (the student's or policy's logits, the teacher's or reference's): one vocabulary
_VOCAB = {"gkd-objective": ("student-logits", "teacher-logits"), "forward-kl": ("student-logits", "teacher-logits"),
          "reverse-kl": ("student-logits", "teacher-logits"),
          "generalized-jsd": ("student-logits", "teacher-logits"), "grpo-objective": ("logits", "ref-logits")}


def said(ctx: CheckContext, a: ir.Expr) -> str:
    """An argument's value in the user's words: `the number 0` for a constant scalar written as a
    number, `` `vocab`, the number 18 `` for a name of one, else its type (`[32 64] f32`, `model ref`)."""
    t = a.type
    if isinstance(t, TensorType) and t.shape == () and t.value is not None and not isinstance(t.value, bool):
        text = ctx.src.text[a.span.start:a.span.end] if ctx.redirect is None else ""
        number = f"the number {t.value:g}" if isinstance(t.value, float) else f"the number {t.value}"
        return number if not text or text == str(t.value) or not text[0].isalpha() else f"`{text}`, {number}"
    if isinstance(t, FunctionType):
        return "a function (a `lambda`)"
    return t.show()


def check_sampling_call(ctx: CheckContext, fn: str, by_name: dict, forms, span) -> bool:
    """Check standard-library function `fn`'s arguments `by_name` (parameter -> IR) as the module
    docstring says; `forms(e)` is `ranges.trip_form`. Reports the first that breaks one at it and
    returns False (the call is ERROR); True when all hold (a W-SHAPE-002 or W-LOADER-003 still holds)."""
    if ctx.redirect is not None:   # a call inside another library function: its caller's arguments were checked
        return True
    if fn in MODELS and not _model_fits(ctx, fn, *MODELS[fn], by_name):
        return False
    for p, what in TENSORS.get(fn, {}).items():
        a = by_name.get(p)
        if a is not None and not isinstance(a.type, TensorType) and not _error(a.type):
            call = f"; call it: `({a.type.name} x)` gives its logits" if isinstance(a.type, ModelType) else ""
            ctx.err("E-TYPE-001", a.span, f"`{fn}`'s `{p}` is {what}, a tensor; got {said(ctx, a)}",
                    help=f"pass the tensor itself{call}")
            return False
    for p in NUMBERS.get(fn, ()):
        a = by_name.get(p)
        if a is not None and not _number_fits(ctx, fn, p, a):
            return False
    if fn == "repeat-prompts" and not _prompts_fit(ctx, by_name):
        return False
    if fn in _VOCAB and not _vocabularies_agree(ctx, fn, *_VOCAB[fn], by_name):
        return False
    if fn == "grpo-objective" and not _on_the_row(ctx, by_name):
        return False
    if fn == "prefill-prompts" and not _prefill_fits(ctx, by_name):
        return False
    if fn == "left-padded-start":   # the cached layers' `pos` of a left-padded prompt
        _left_padded(ctx, fn, by_name["mask"])
    if fn == "decode-logits" and not _cache_holds_row(ctx, fn, by_name["cache"], by_name["row"]):
        return False
    if fn == "cached-trip" and not _state_fits(ctx, by_name, forms):
        return False
    return True


def _error(t: Type) -> bool:
    return type(t).__name__ == "ErrorType"


def _model_fits(ctx: CheckContext, fn: str, p: str, entry: str, by_name: dict) -> bool:
    """`fn`'s model argument `p` names a model with `entry` (E-TYPE-004, E-NAME-004 at it)."""
    a = by_name.get(p)
    t = a.type if a is not None else None
    if t is None or _error(t):
        return True
    want = "whose `:apply` gives logits [B S V]" if entry == "apply" else "with a `:decode` entry"
    if not isinstance(t, ModelType):
        fix = ("pass the model's name itself (`policy`, not a `lambda` that calls it)" if isinstance(t, FunctionType)
               else "pass the name of a `defmodel` (`model`, `policy`, or a model they reach)")
        ctx.err("E-TYPE-004", a.span, f"`{fn}`'s `{p}` is the model it calls, a model {want}; got {said(ctx, a)}, "
                "which is not a model", help=fix)
        return False
    entries = ctx.models.get(t.name, {}).get("entries")
    if entry != "apply" and entries is not None and entry not in entries:
        known = ", ".join(f"`:{k}`" for k in entries)
        ctx.err("E-NAME-004", a.span, f"`{fn}` calls `({t.name} :{entry} ...)`, but model `{t.name}` has no entry "
                f"`:{entry}`" + (f" (its entries: {known})" if known else ""),
                help=f"pass a model {want} (tokens [B T], pos, k, v -> (:logits [B T V] :k :v)), or give "
                     f"`{t.name}` one: `:entries (:decode (lambda (self x pos k v) ...))`")
        return False
    return True


def _number_fits(ctx: CheckContext, fn: str, p: str, a: ir.Expr) -> bool:
    """A number argument: a scalar number (E-TYPE-001, E-SHAPE-005); a constant temperature 0 or
    more (E-RAND-001)."""
    t = a.type
    if _error(t):
        return True
    if not isinstance(t, TensorType) or t.dtype == "bool":
        fix = f"write the number without quotes: `{t.value}`" if isinstance(t, StringType) and hasattr(t, "value") \
            else "give a number, e.g. `0.5`"
        ctx.err("E-TYPE-001", a.span, f"`{fn}`'s `{p}` is a number; got {said(ctx, a)}", help=fix)
        return False
    if t.shape != ():
        ctx.err("E-SHAPE-005", a.span, f"`{fn}`'s `{p}` is a number, one for every row; got {t.show()}",
                help="give a scalar (a `def`, or a number written out)")
        return False
    if p == "temperature" and isinstance(t.value, (int, float)) and not isinstance(t.value, bool) and t.value < 0:
        ctx.err("E-RAND-001", a.span, f"`{fn}`'s `temperature` is {t.value:g}; it must be 0 or more (0 takes the "
                "argmax)", help="softmax(logits / temperature) divides by it: give 1 to sample from the model's "
                "distribution, less to sharpen it, 0 for greedy decoding")
        return False
    return True


def _prompts_fit(ctx: CheckContext, by_name: dict) -> bool:
    """`repeat-prompts`' prompt [B P] (E-SHAPE-005)."""
    a = by_name["prompt"]
    if isinstance(a.type, TensorType) and len(a.type.shape) != 2:
        ctx.err("E-SHAPE-005", a.span, f"`repeat-prompts`' `prompt` is the prompts [B P], one row per prompt; got "
                f"{a.type.show()}", help="pass the loader's prompt field (`(field batch :prompt)`, a `[P]` field "
                "is [B P] in the batch), not one column or one row of it")
        return False
    return True


def _logits(a) -> tuple | None:
    t = a.type if a is not None else None
    return t.shape if isinstance(t, TensorType) and len(t.shape) == 3 else None


def _vocabularies_agree(ctx: CheckContext, fn: str, first: str, second: str, by_name: dict) -> bool:
    """The two logits' vocabularies (axis 2) one size: E-SHAPE-005 at the second, naming both."""
    s, t = _logits(by_name.get(first)), _logits(by_name.get(second))
    if s is None or t is None or s[2] == t[2]:
        return True
    a = by_name[second]
    ctx.err("E-SHAPE-005", a.span, f"`{fn}`'s `{second}` {a.type.show()} are over a vocabulary of {t[2]}, "
            f"`{first}` {by_name[first].type.show()} over {s[2]}: the two distributions must be over one vocabulary",
            help="give both models one vocabulary (their output layers' widths); logits cut with `slice` compare "
                 "other tokens than the model's")
    return False


def _on_the_row(ctx: CheckContext, by_name: dict) -> bool:
    """`grpo-objective`'s mask [B S] and logits [B S V] on its row [B S] (E-SHAPE-005 at them)."""
    row = by_name["row"]
    if not (isinstance(row.type, TensorType) and len(row.type.shape) == 2):
        return True
    bs = row.type.shape
    for p in ("mask", "logits", "ref-logits"):
        a = by_name[p]
        t = a.type
        if isinstance(t, TensorType) and len(t.shape) == (2 if p == "mask" else 3) and t.shape[:2] != bs:
            what = "the mask over the whole row (true at the completion's tokens)" if p == "mask" else \
                "the logits over each whole row (the function shifts them by one column itself)"
            ctx.err("E-SHAPE-005", a.span, f"`grpo-objective`'s `{p}` is {t.show()}, but the row is {row.type.show()}: "
                    f"it takes {what}, [{bs[0]} {bs[1]}{'' if p == 'mask' else ' V'}]",
                    help="pass it unshifted and uncut, as wide as the row")
            return False
    return True


def _cache_of(a) -> tuple | None:
    t = a.type if a is not None else None
    return t.shape if isinstance(t, TensorType) and len(t.shape) == 4 else None


def _prefill_fits(ctx: CheckContext, by_name: dict) -> bool:
    """`prefill-prompts`' cache [B S K H] of the prompt's batch B, its S (the row's width) more than the
    prompt's P columns (E-SHAPE-005 at the cache); the prompt and mask left-padded (W-LOADER-003)."""
    prompt, cache = by_name["prompt"], by_name["cache"]
    c = _cache_of(cache)
    pt = prompt.type
    if c is not None and isinstance(pt, TensorType) and len(pt.shape) == 2:
        b, p = pt.shape
        if c[0] != b:
            ctx.err("E-SHAPE-005", cache.span, f"`prefill-prompts`' `cache` {cache.type.show()} holds {c[0]} rows, but "
                    f"the prompt {pt.show()} has {b}: the cache is [B S K H], one row per prompt",
                    help=f"make the cache [{b} {c[1]} {c[2]} {c[3]}]")
            return False
        if c[1] <= p:
            ctx.err("E-SHAPE-005", cache.span, f"`prefill-prompts`' `cache` {cache.type.show()} is {c[1]} positions "
                    f"long, and its length is the row's width: the prompt's {p} columns leave "
                    f"{'no column' if c[1] == p else 'fewer than none'} for the trips to write",
                    help=f"make the cache's axis 1 the prompt's {p} columns plus the trips' (`seq`), e.g. "
                         f"[{c[0]} {p} + trips {c[2]} {c[3]}]")
            return False
    for p in ("prompt", "mask"):
        _left_padded(ctx, "prefill-prompts", by_name[p])
    return True


def _cache_holds_row(ctx: CheckContext, fn: str, cache: ir.Expr, row: ir.Expr) -> bool:
    """A cache [B S K H] of the row's batch B and at least its S columns (E-SHAPE-005 at the cache)."""
    c, rt = _cache_of(cache), row.type
    if c is None or not (isinstance(rt, TensorType) and len(rt.shape) == 2):
        return True
    b, s = rt.shape
    if c[0] != b or c[1] < s:
        what = f"holds {c[0]} rows, but the row has {b}" if c[0] != b else \
            f"is {c[1]} positions long, but the row is {s} columns wide"
        ctx.err("E-SHAPE-005", cache.span, f"`{fn}`'s cache {cache.type.show()} {what} ({rt.show()}): the cache holds "
                "every position of every row", help=f"make it [{b} {s} {c[2]} {c[3]}]")
        return False
    return True


def _state_fits(ctx: CheckContext, by_name: dict, forms) -> bool:
    """`cached-trip`'s state `prefill-prompts`' plist (E-TYPE-001, E-NAME-004), its caches holding the
    row (E-SHAPE-005); its `at` past the row on a trip is W-SHAPE-002 at `at`."""
    state = by_name["state"]
    t = state.type
    if _error(t):
        return True
    if not isinstance(t, PlistType):
        ctx.err("E-TYPE-001", state.span, f"`cached-trip`'s `state` is the plist `prefill-prompts` makes (:row [B S] "
                f":start [B] :k :v); got {said(ctx, state)}", help="pass the generator's whole state")
        return False
    missing = [k for k in ("row", "start", "k", "v") if t.get(k) is None]
    if missing:
        ctx.err("E-NAME-004", state.span, f"`cached-trip`'s `state` has no `:{missing[0]}`: it takes the plist "
                f"`prefill-prompts` makes (:row [B S] :start [B] :k :v); got {t.show()}",
                help="pass the generator's whole state, or keep every key `prefill-prompts` gave")
        return False
    row, k = t.get("row"), t.get("k")
    if isinstance(row, TensorType) and len(row.shape) == 2 and isinstance(k, TensorType) and len(k.shape) == 4 \
            and (k.shape[0] != row.shape[0] or k.shape[1] < row.shape[1]):
        ctx.err("E-SHAPE-005", state.span, f"`cached-trip`'s `state` has the cache :k {k.show()}, which does not hold "
                f"its :row {row.show()}: the cache is [B S K H] of the row's B and S",
                help="make the state with `prefill-prompts`, whose cache's length is the row's width")
        return False
    at = by_name["at"]
    if isinstance(row, TensorType) and len(row.shape) == 2 and ctx.trips:
        _trips_fit(ctx, at, forms(at), row.shape[1], row.show())
    return True


def _trips_fit(ctx: CheckContext, at: ir.Expr, form, width: int, shown: str) -> None:
    """W-SHAPE-002 at `at` when `a * trip + b` passes the row's last column on a trip of `:step`."""
    if not (isinstance(form, tuple) and form[0] > 0):
        return
    a, b = form
    bad = [t for t in range(ctx.trips) if a * t + b > width - 1]
    if not bad:
        return
    first = bad[0]
    fix = f"with `:trips {first}` every trip writes a column" if first > 0 else "start the trips at a column of the row"
    who = f"trip {first}" if first == ctx.trips - 1 else f"trips {first} to {ctx.trips - 1}"
    ctx.report(warning("W-SHAPE-002", at.span, f"`cached-trip` writes past the end of the row {shown} on trip {first} "
                       f"(of trips 0 to {ctx.trips - 1}): its column `at` is {a * first + b} there, and the row's "
                       f"columns are 0 to {width - 1}",
                       help=f"a column past the row (and its cache) is not written, so {who} write nothing; {fix}, "
                            "or make the row and its cache wider"))


def _left_padded(ctx: CheckContext, fn: str, a: ir.Expr) -> None:
    """W-LOADER-003 at `a` when it is `(field batch :name)` (or a `cast` of one) of a loader whose
    `:pad-side` is not `:left`: the prompts end in padding and the trips write after it."""
    at = a.span
    while isinstance(a, ir.Op) and a.name == "cast" and a.args:
        a = a.args[0]
    if not (isinstance(a, ir.GetF) and a.obj is not None):
        return
    t = a.obj.type
    name = getattr(t, "loader", None)
    loader = ctx.loaders.get(name) if isinstance(name, str) else None
    if loader is None or a.key in getattr(t, "generated", ()):
        return
    kind, args = loader.source
    if kind not in ("jsonl", "parquet"):
        return
    side = args.get("pad-side") or "right"
    if side == "left":
        return
    ctx.report(warning("W-LOADER-003", at, f"`:{a.key}` of loader `{name}` is padded on the {side} (its "
                       f"`:pad-side`), but `{fn}` takes left-padded prompts (the trips decode after each prompt's "
                       "last column): a row whose prompt is shorter than the field would continue its padding",
                       help=f"give loader `{name}`'s source `:pad-side :left`, so that each prompt ends at the last "
                            "column"))
