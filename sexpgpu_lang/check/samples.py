"""`run`'s `:samples`: the tensors of the batch worth reading as text, checked once the generator is.

`top_samples(ctx, train, gen, prepare, objective)` reads `(run ... :samples (:every 10 :rows 4 :text
[:answer] :values [:reward] :prompt 2 :tokenizer "tokenizer.json"))` after the phases are checked,
since the names it may show are, in this order: the batch's as `prepare` sees it (the training
loader's fields and the generator's names), then the entries `prepare` returns, then the names the
top-level `let*` of `prepare` and then of `objective` binds (`ir.top_bindings`). Every name shown
gets its type noted for hover. It decides every E-SAMPLE code:

- E-SAMPLE-001: a name none of those provides;
- E-SAMPLE-002: a `:text` tensor that is not integer (a tokenizer decodes token ids);
- E-SAMPLE-003: a setting that does not fit its tensor (a name bound to no tensor, `:text` not `[B]` or `[B T]`, a `:prompt`
  not shorter than a text row, `:rows` more than a tensor's rows, no name to show at all).

The result is `ctx.run_ir` with an `ir.SamplesIR` (docs/metrics.md "Samples"). Imports nothing
outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import dataclasses
import os

from .. import ir
from ..diagnostics import warning
from ..language import PLIST_KEYWORDS
from ..syntax import Kw, ListNode, VecNode
from ..types import ErrorType, TensorType, is_int
from .context import CheckContext, near_miss
from .keywords import const_int, const_value, keyword_args
from .loader_sources import loader_vocab, tokenizer_file

#: The defaults of `:every` and `:rows`.
DEFAULT_EVERY, DEFAULT_ROWS = 10, 4
#: The most rows a `:samples` may ask for: each is a line in the terminal and a row in samples.jsonl.
MAX_ROWS = 64

#: How completion describes where a `:samples` name comes from (`sample_sources`' places).
_SOURCE_WORDS = {"batch": "of the batch", "inputs": "that `prepare` returns", "prepare": "bound in `prepare`",
                 "objective": "bound in `objective`"}

#: Loader sources whose `:tokenizer` decodes the run's token rows.
TOKENIZED_SOURCES = ("text-tokens", "jsonl", "parquet")


def _names(ctx: CheckContext, node, what: str) -> list[Kw]:
    if isinstance(node, VecNode) and all(isinstance(i, Kw) for i in node.items):
        return list(node.items)
    ctx.err("E-FORM-002", node.span, f"`{what}` of `:samples` takes a vector of batch names like `[:answer]`")
    return []


def decoding(train: ir.LoaderIR, written: str | None, run_path: str) -> tuple:
    """How `:text` rows become text (`ir.SamplesIR.decode`): the `:tokenizer` written in `:samples`
    (relative to the run file), else the training loader's `:tokenizer` (relative to its file), else
    bytes for `text-bytes`, else the ids."""
    if written is not None:
        return ("tokenizer", written, os.path.dirname(os.path.abspath(run_path)) if run_path else ".")
    kind, args = train.source
    if kind in TOKENIZED_SOURCES and args.get("tokenizer"):
        return ("tokenizer", str(args["tokenizer"]), train.base_dir)
    if kind == "text-bytes":
        return ("bytes",)
    return ("ids",)


def sample_sources(train: ir.LoaderIR, gen: ir.GenerateIR | None, prepare: ir.Phase | None,
                   objective: ir.Phase | None) -> dict[str, tuple[object, str]]:
    """Every name `:samples` may show -> (its type, where it comes from: `batch`, `inputs` (an entry
    `prepare` returns), `prepare` or `objective` (a name bound by the phase's top-level `let*`)); the
    first source that has a name gives it (the batch, then `prepare`'s result, then the bindings)."""
    out: dict[str, tuple[object, str]] = {}

    def add(entries, where):
        for n, t in entries:
            out.setdefault(n, (t, where))
    add(train.batch_type().entries, "batch")
    if gen is not None:
        add(gen.out.entries, "batch")
    if prepare is not None and hasattr(prepare.out, "entries"):
        add(prepare.out.entries, "inputs")
    for where, ph in (("prepare", prepare), ("objective", objective)):
        add(((n, e.type) for n, e in ir.top_bindings(ph).items()), where)
    return out


def top_samples(ctx: CheckContext, train: ir.LoaderIR | None, gen: ir.GenerateIR | None,
                prepare: ir.Phase | None = None, objective: ir.Phase | None = None) -> None:
    """Check `run`'s `:samples` against what it may show (`sample_sources`: the batch, what `prepare`
    returns, the names the top-level `let*` of `prepare` and `objective` binds) and put its
    `ir.SamplesIR` into `ctx.run_ir`."""
    forms = ctx.forms.get("run", [])
    if not forms or train is None:
        return
    run_form = forms[0]
    items = run_form.items
    node = next((items[i + 1] for i in range(1, len(items) - 1)
                 if isinstance(items[i], Kw) and items[i].name == "samples"), None)
    if node is None:
        return
    if not isinstance(node, ListNode) or (node.items and not isinstance(node.items[0], Kw)):
        ctx.err("E-FORM-002", node.span, "`:samples` takes a plist like `(:every 10 :rows 4 :text [:answer])`")
        return
    sources = sample_sources(train, gen, prepare, objective)
    ctx.facts.sample_names = {n: f"{t.show()} {_SOURCE_WORDS[where]}" for n, (t, where) in sources.items()}
    kws = keyword_args(ctx, node, 0, tuple(PLIST_KEYWORDS["samples"]), ":samples")
    every = const_int(ctx, kws["every"][1], "`:every` of `:samples`", 1) if "every" in kws else DEFAULT_EVERY
    rows = (const_int(ctx, kws["rows"][1], "`:rows` of `:samples`", 1, code="E-SAMPLE-003", maximum=MAX_ROWS,
                      why=" (each row is a line in the terminal)") if "rows" in kws else DEFAULT_ROWS)
    prompt = const_int(ctx, kws["prompt"][1], "`:prompt` of `:samples`", 1) if "prompt" in kws else None
    written = None
    if "tokenizer" in kws:
        v = const_value(ctx, kws["tokenizer"][1])
        if v is not None and not isinstance(v, str):
            ctx.err("E-TYPE-003", kws["tokenizer"][1].span, "`:tokenizer` of `:samples` must be a string: "
                    "the path of a tokenizer.json")
        elif v is not None:
            written = v
            samples_tokenizer(ctx, v, kws["tokenizer"][1].span, train)
    known = {n: t for n, (t, _) in sources.items()}
    broken = any(ph is None and ctx.forms.get(name) for name, ph in (("prepare", prepare), ("objective", objective)))
    ok = every is not None and rows is not None and ("prompt" not in kws or prompt is not None)
    chosen: dict[str, list] = {"text": [], "values": []}
    for key in ("text", "values"):
        if key not in kws:
            continue
        for kw in _names(ctx, kws[key][1], f":{key}"):
            t = known.get(kw.name)
            if t is None and broken:   # a phase that failed to check: its names are unknown, not missing
                ok = False
                continue
            if t is None:
                hint = near_miss(kw.name, known)
                ctx.err("E-SAMPLE-001", kw.span,
                        f"no `:{kw.name}` to sample: neither loader `{train.name}`, the generator, what "
                        "`prepare` returns nor the top-level `let*` of `prepare` or `objective` provides it"
                        + (f"; did you mean `:{hint}`?" if hint else ""),
                        help="name a loader field, a name the generator's `:finish` returns, an entry "
                             "`prepare` returns or a name the top-level `let*` of `prepare` or `objective` "
                             "binds: " + ", ".join(f"`:{n}`" for n in known),
                        data={"replace": f":{hint}"} if hint else None)
                ok = False
                continue
            ctx.note_type(kw, t)
            if sources[kw.name][1] == "batch" and kw.name in ctx.facts.generated:   # a use: rename, references
                ctx.facts.uses.append((kw.span, ctx.facts.generated[kw.name]))
            if not isinstance(t, TensorType):
                if not isinstance(t, ErrorType):   # (a binding that failed to check is reported already)
                    ctx.err("E-SAMPLE-003", kw.span, f"`:{kw.name}` is {t.show()}, not a tensor: `:samples` "
                            "shows tensors", help="name a tensor, or bind one in the `let*`")
                ok = False
                continue
            if key == "text" and not is_int(t.dtype):
                ctx.err("E-SAMPLE-002", kw.span, f"`:{kw.name}` is {t.show()}, not token ids: a tokenizer decodes "
                        "integer tensors", help=f"show it with `:values [:{kw.name}]`, or name the integer tokens "
                        "(the ids an `argmax` or `categorical` gave)")
                ok = False
                continue
            if key == "text" and len(t.shape) not in (1, 2):
                ctx.err("E-SAMPLE-003", kw.span, f"`:{kw.name}` is {t.show()}: a `:text` tensor is `[B T]` (a row "
                        "of tokens per record) or `[B]` (one token per record)",
                        help="reshape it to `[B T]` in the generator's `:finish`")
                ok = False
                continue
            if key == "text" and prompt is not None and len(t.shape) == 2 and prompt >= t.shape[1]:
                ctx.err("E-SAMPLE-003", kws["prompt"][1].span, f"`:prompt {prompt}` leaves no completion in "
                        f"`:{kw.name}`, whose rows have {t.shape[1]} tokens",
                        help=f"give the prompt's length, less than {t.shape[1]}")
                ok = False
                continue
            if "rows" in kws and rows is not None and t.shape and rows > t.shape[0]:   # (the default: as many as there are)
                ctx.err("E-SAMPLE-003", kws["rows"][1].span, f"`:rows {rows}` is more than the {t.shape[0]} rows "
                        f"of `:{kw.name}` ({t.show()})", help=f"ask for at most {t.shape[0]} rows")
                ok = False
                continue
            chosen[key].append((kw.name, t.shape, t.dtype))
    if "text" not in kws and "values" not in kws:
        ctx.err("E-SAMPLE-003", node.span, "`:samples` shows nothing: name the tensors to show with `:text` "
                "(token rows) or `:values` (numbers)", help="e.g. `(:every 10 :text [:answer] :values [:reward])`")
        ok = False
    if not ok or ctx.run_ir is None:
        return
    masks = text_masks(chosen["text"], known)
    computed = tuple((n, sources[n][1]) for key in ("text", "values") for n, _, _ in chosen[key]
                     if sources[n][1] != "batch")
    computed += tuple((m, sources[m][1]) for _, m in masks if sources[m][1] != "batch" and
                      (m, sources[m][1]) not in computed)
    spec = ir.SamplesIR(every, rows, tuple(chosen["text"]), tuple(chosen["values"]),
                        decoding(train, written, ctx.src.path), prompt, computed, masks)
    ctx.run_ir = dataclasses.replace(ctx.run_ir, samples=spec)


def text_masks(text: list, known: dict) -> tuple[tuple[str, str], ...]:
    """(name, `name-mask`) for each `:text` tensor [B T] whose `NAME-mask` is provided with its shape,
    bool or integer: a loader's padding mask (`prompt-mask`) or a generator's completion mask
    (`completion-mask`); the samples then show only the ids where it is true."""
    out = []
    for name, shape, _ in text:
        m = known.get(f"{name}-mask")
        if len(shape) == 2 and isinstance(m, TensorType) and m.shape == shape and (m.dtype == "bool" or is_int(m.dtype)):
            out.append((name, f"{name}-mask"))
    return tuple(out)


def samples_tokenizer(ctx: CheckContext, rel: str, at, train: ir.LoaderIR) -> None:
    """`:samples :tokenizer` (with `read_files`): read as `run` reads it (E-LOADER-001, through the
    loaders' own check), and W-SAMPLE-001 when its vocabulary differs from the ids the training
    loader's rows hold (its tokenizer's, or its `:vocab`): the rows would be decoded through
    another table."""
    size = tokenizer_file(ctx, ":samples", rel, at)
    if not isinstance(size, int) or isinstance(size, bool):
        return
    model = loader_vocab(ctx, train)
    if model is not None and model != size:
        ctx.report(warning("W-SAMPLE-001", at, f"`:samples` tokenizer `{rel}` has {size} ids, but loader "
                           f"`{train.name}`'s rows hold {model}: the sampled rows would be decoded through "
                           "another vocabulary", help="give `:samples` the tokenizer the training data was "
                           "tokenized with, or leave `:tokenizer` out to use the loader's"))
