"""Completion: what may be typed at an offset (operations and forms at a call's head, keywords,
context, state and batch keys, dtypes, the names in scope), from the text-context scanner.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

from ..check import CTX_KEYS, BatchType, CtxType, stdlib_docs
from ..name_mapping import OPS as MAPPING_OP_SIGNATURES, stdlib_names
from ..ops import INITIALIZERS, REGISTRY
from ..source import Span
from ..types import DTYPES, FunctionType, ModelType, PlistType, SelfType
from .describe import model_params
from .index import Index
from ..language import FORM_KEYWORDS, INITIALIZER_KEYWORDS, KEYWORD_DOCS, KEYWORD_VALUES, OPTIMIZERS, PLIST_KEYWORDS, SOURCES, SPECIAL_FORMS, TOP_FORMS
from .results import Completion, Completions
from .text import NUMBER_START, Frame, Item, frame_head, key_before, scan


def completions(ix: Index, offset: int) -> Completions | None:
    """What may be typed at `offset`: operations and forms at a call's head,
    the keywords each form and operation takes, context keys in `(getf ctx`,
    state keys in `(getf state`, batch fields (loader fields and generated
    names) in `(field batch`, dtypes, and the names in scope. None inside a
    string or a comment."""
    ctx = scan(ix.text, offset)
    if ctx is None:
        return None
    frames, prefix, pstart = ctx
    span = Span(pstart, offset)
    if prefix and NUMBER_START.match(prefix):
        return Completions(span, ())
    if not frames:
        return Completions(span, ())
    items = _complete(ix, frames, prefix, offset)
    seen, unique = set(), []
    for it in items:
        if it.label not in seen:
            seen.add(it.label)
            unique.append(it)
    return Completions(span, tuple(unique))


def _kw(name: str, kind: str = "property", detail: str = "", doc: str = "") -> Completion:
    return Completion(f":{name}", kind, detail, doc, f":{name}")


def _complete(ix: Index, frames: list[Frame], prefix: str, offset: int) -> list[Completion]:
    k = len(frames) - 1
    fr = frames[k]
    args = fr.items
    key = key_before(frames, k)
    if fr.bracket == "[" and k >= 1 and key in ("text", "values") and key_before(frames, k - 1) == "samples":
        used = {a.text[1:] for a in args if a.text.startswith(":")}
        return [_kw(n, "field", d) for n, d in ix.facts.sample_names.items() if n not in used]
    if fr.bracket == "[":
        return [] if prefix.startswith(":") else _values(ix, offset)
    mapping = _pretrained_completions(ix, frames, k, args, prefix)
    if mapping is not None:
        return mapping
    if not args:
        if prefix.startswith(":"):
            return _data_keys(key, args)
        return _heads(ix, frames, offset)
    head = frame_head(frames, k)
    if head is None:
        return _data_keys(key, args) if args[0].text.startswith(":") else _values(ix, offset)
    prev = args[-1].text
    used = {a.text[1:] for a in args[1:] if a.text.startswith(":")}
    if prev.startswith(":") and len(args) > 1 and prev[1:] in KEYWORD_VALUES and (not prefix or prefix.startswith(":")):
        return [_kw(v, "enumMember", "dtype" if prev == ":dtype" else prev) for v in KEYWORD_VALUES[prev[1:]]]
    if head in ("getf", "field") and len(args) == 2:
        return _keys_of(ix, head, args[1], offset)
    if head == "cast" and len(args) == 2 or head in ("zeros", "ones") and len(args) == 2 \
            or head == "full" and len(args) == 3:
        return [_kw(d, "enumMember", "dtype") for d in DTYPES]
    entries = ix.facts.entries.get(head)
    if entries and len(args) == 1 and prefix.startswith(":"):   # `(teacher :|`: its entry points
        return [_kw(key, "method", call, f"entry point of model `{head}`") for key, call in entries.items()]
    keywords = _form_keywords(ix, frames, k, head)
    if prefix.startswith(":") or (keywords and not prefix and _expects_key(head, args, keywords)):
        out = [_kw(w, "property", f"keyword of `{head}`", KEYWORD_DOCS.get((head, w), "")) for w in keywords
               if w not in used]
        if head == "list" and ix.phase_at(offset) == "generate.step":
            out += [_kw(s, "field", d.detail) for s, d in ix.facts.state_keys.items() if s not in used]
        if not out and prefix.startswith(":") and head in REGISTRY:
            out = [_kw(d, "enumMember", "dtype") for d in DTYPES]
        return out
    return _values(ix, offset)


#: The operations of a mapping's source (docs/checkpoints.md "Name mappings"), each taking a source first.
MAPPING_OPS = tuple(MAPPING_OP_SIGNATURES)


def _pretrained_completions(ix: Index, frames: list[Frame], k: int, args: list[Item],
                            prefix: str) -> list[Completion] | None:
    """In a `defmodel`'s `:pretrained (:path ... :names |`: the standard library's
    mappings; in a mapping `(:names (:param "tensor" ...`: the model's parameter
    paths not mapped yet as keys, and as sources the checkpoint's tensor names
    (once its headers were read: a checkpoint on this machine). None elsewhere."""
    top = frames[0].items if frames else []
    if not (len(top) > 1 and top[0].text == "defmodel"):
        return None
    model = top[1].text
    if key_before(frames, k) == "pretrained" and args and args[-1].text == ":names" and len(args) % 2 == 1:
        return [_kw(n, "enumMember", "standard-library mapping", f"the checkpoint's names as `{n}` writes them")
                for n in stdlib_names()]
    in_op = k >= 2 and frame_head(frames, k) in MAPPING_OPS and len(args) == 1   # `(transpose |`
    m = k - 1 if in_op else k
    if not (m >= 1 and key_before(frames, m) == "names" and key_before(frames, m - 1) == "pretrained"):
        return None
    seen = ix.facts.checkpoints.get(model)
    if seen is None:
        return []
    if not in_op and len(args) % 2 == 0:   # a key: a parameter path
        used = {a.text[1:] for a in args[::2] if a.text.startswith(":")}
        return [_kw(p, "field", f"parameter of `{model}`") for p in seen.params if p not in used]
    if seen.header is None or prefix.startswith(":"):
        return []
    return [Completion(f'"{t}"', "value", f"[{' '.join(map(str, shape))}] {dtype}", f"in `{seen.rel}`", f'"{t}"')
            for t, (shape, dtype, _) in sorted(seen.header.items())]


def _expects_key(head: str, args: list[Item], keywords: tuple[str, ...]) -> bool:
    """True when the next item is a keyword: right after the head (and the
    name, for a named form), or after a complete `:key value` pair."""
    if len(args) == (2 if head in ("loader", "defmodel", "pass") else 1):
        return head in FORM_KEYWORDS
    if args[-1].text.startswith(":"):
        return False
    kws = [i for i, a in enumerate(args) if a.text[1:] in keywords and a.text.startswith(":")]
    return bool(kws) and kws[-1] == len(args) - 2


def _form_keywords(ix: Index, frames: list[Frame], k: int, head: str) -> tuple[str, ...]:
    key = key_before(frames, k)
    if key == "params" or (k >= 2 and key_before(frames, k - 1) == "params"):
        if head in INITIALIZER_KEYWORDS:
            return INITIALIZER_KEYWORDS[head]
        if head == "repeat":
            return FORM_KEYWORDS["repeat"]
    if k == 0 and head in FORM_KEYWORDS:
        return FORM_KEYWORDS[head]
    if head == "stage":
        return FORM_KEYWORDS["stage"]
    if key == "source" and head in SOURCES:
        return SOURCES[head]
    if key == "optimizer" and head in OPTIMIZERS:
        return OPTIMIZERS[head]
    if head in REGISTRY:
        return REGISTRY[head].kwargs
    return ()


def _data_keys(key: str | None, args: list[Item]) -> list[Completion]:
    used = {a.text[1:] for a in args if a.text.startswith(":")}
    if key in PLIST_KEYWORDS:
        return [_kw(w, "property", f"`:{key}` setting") for w in PLIST_KEYWORDS[key] if w not in used]
    if key == "fields" and len(args) % 3 == 2:
        return [_kw(d, "enumMember", "dtype") for d in DTYPES]
    return []


def _heads(ix: Index, frames: list[Frame], offset: int) -> list[Completion]:
    k = len(frames) - 1
    if k == 0:
        return [Completion(n, "keyword", sig, doc, n) for n, (sig, doc) in TOP_FORMS.items()]
    key = key_before(frames, k)
    if key == "source":
        return [Completion(n, "function", "loader source") for n in SOURCES]
    if key == "optimizer":
        return [Completion(n, "function", "optimizer", ", ".join(f":{a}" for a in OPTIMIZERS[n])) for n in OPTIMIZERS]
    if k >= 1 and key_before(frames, k - 1) == "params":
        out = [Completion(n, "constructor", sig, doc, n) for n, (sig, doc) in INITIALIZERS.items()]
        return out + [Completion(d.name, "class", "sub-model") for d in ix.defs.values() if d.kind == "model"]
    if frame_head(frames, k - 1) == "curriculum":
        return [Completion("stage", "keyword", "(stage :loader l :records n)")]
    out = [Completion(n, "keyword", sig, doc, n) for n, (sig, doc) in SPECIAL_FORMS.items()]
    out += [Completion(n, "function", s.signature, s.doc, n) for n, s in REGISTRY.items()]
    out += [Completion(n, "function", sig, doc, n) for n, (sig, doc) in stdlib_docs().items()]
    for name, d in ix.visible(offset).items():
        if d.kind in ("model", "model-binding", "function") or isinstance(ix.type_at(d.span), (ModelType, FunctionType)):
            out.append(Completion(name, "class" if d.kind.startswith("model") else "function", d.detail, "", name))
    return out


def _values(ix: Index, offset: int) -> list[Completion]:
    out = []
    for name, d in ix.visible(offset).items():
        kind = {"def": "constant", "loader": "module", "model": "class", "model-binding": "class",
                "function": "function"}.get(d.kind, "variable")
        t = ix.type_at(d.span)
        out.append(Completion(name, kind, t.show() if t is not None else d.detail, "", name))
    out += [Completion(v, "keyword", "bool" if v != "nil" else "nil", "", v) for v in ("true", "false", "nil")]
    return out


def _keys_of(ix: Index, head: str, obj: Item, offset: int) -> list[Completion]:
    """The keys `(getf obj :` or `(field obj :` may read."""
    t = ix.type_at(Span(obj.start, obj.end))
    if t is None:
        d = ix.visible(offset).get(obj.text)
        t = ix.type_at(d.span) if d is not None else None
    if isinstance(t, SelfType):
        return [_kw(p.split()[0][1:], "field", p) for p in model_params(ix, t.model)]
    if isinstance(t, BatchType):
        out = []
        for k, v in t.entries:
            gen = k in t.generated
            out.append(_kw(k, "field", f"{v.show()} " + ("generated by `:finish`" if gen else f"field of `{t.loader}`")))
        return out
    if isinstance(t, CtxType):
        return [_kw(k, "field", f"{v.show()} " + ("counter" if k in ix.facts.counters else "context"))
                for k, v in t.entries]
    if isinstance(t, PlistType):
        state = obj.text == "state" and ix.facts.state_keys
        return [_kw(k, "field", f"{v.show()}" + (" state" if state else "")) for k, v in t.entries]
    # Unknown type (the file does not check yet): fall back on the names the parameter usually has.
    if obj.text == "ctx":
        phase = ix.phase_at(offset)
        out = [_kw(k, "field", f"{v.show()} context") for k, v in CTX_KEYS.items()]
        if phase == "objective":
            out += [_kw(c, "field", "[] f32 counter") for c in ix.facts.counters]
        return out
    if obj.text == "state":
        return [_kw(k, "field", d.detail) for k, d in ix.facts.state_keys.items()]
    if head == "field":
        out = [_kw(f, "field", f"field of `{ld}`") for ld, fs in ix.facts.loader_fields.items() for f in fs]
        return out + [_kw(g, "field", d.detail) for g, d in ix.facts.generated.items()]
    return []
