"""Signature help: the signature of the call around an offset and the parameter being written.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

import re

from ..check import Definition, stdlib_docs
from ..ops import INITIALIZERS, REGISTRY
from ..syntax import ListNode, Sym, keyword_value
from .index import Index
from ..language import (FORM_KEYWORDS, INITIALIZER_KEYWORDS, OPTIMIZERS, REPEAT_ENTRY, SOURCES, SPECIAL_FORMS,
                        TOP_FORMS)
from .results import Signature
from .text import Frame, Item, frame_head, key_before, scan

_SIG_TOKEN = re.compile(r'\[[^\]]*\]|\((?:[^()]|\([^()]*\))*\)|"[^"]*"|[^\s()\[\]]+')


def _signature_for(ix: Index, frames: list[Frame], k: int, head: str, offset: int) -> tuple[str, str, tuple[str, ...]] | None:
    key = key_before(frames, k)
    if k >= 1 and key_before(frames, k - 1) == "params" and head in INITIALIZERS:
        sig, doc = INITIALIZERS[head]
        return sig, doc, INITIALIZER_KEYWORDS[head]
    if k >= 1 and key_before(frames, k - 1) == "params" and head == "repeat":
        sig, doc = REPEAT_ENTRY
        return sig, doc, FORM_KEYWORDS["repeat"]
    if key == "optimizer" and head in OPTIMIZERS:
        return f"({head} " + " ".join(f":{a} x" for a in OPTIMIZERS[head]) + ")", "optimizer", OPTIMIZERS[head]
    if key == "source" and head in SOURCES:
        return f"({head} " + " ".join(f":{a} x" for a in SOURCES[head]) + ")", "loader source", SOURCES[head]
    d = ix.visible(offset).get(head)
    if k >= 1 and d is not None and d.kind == "model-binding":  # (model row): the model `(model name)` binds
        name = d.detail.split()[-1]
        bound = next((m for m in ix.defs.values() if m.kind == "model" and m.name == name), None)
        return f"({head} {' '.join(_model_params(ix, bound))})", f"the model `{name}`", ()
    if d is not None and d.kind == "model":
        return f"({head} {' '.join(_model_params(ix, d))})", "model", ()
    if d is not None and d.kind == "function":
        form = ix.node(d.form_span)
        lam = form.items[2] if isinstance(form, ListNode) and len(form.items) == 3 else None
        params = [p.name for p in lam.items[1].items if isinstance(p, Sym)] \
            if isinstance(lam, ListNode) and len(lam.items) > 1 and isinstance(lam.items[1], ListNode) else []
        return f"({head} {' '.join(params)})", "function", ()
    if k == 0 and head in TOP_FORMS:
        sig, doc = TOP_FORMS[head]
        return sig, doc, FORM_KEYWORDS.get(head, ())
    if head in SPECIAL_FORMS:
        sig, doc = SPECIAL_FORMS[head]
        return sig, doc, ()
    if head in REGISTRY:
        spec = REGISTRY[head]
        return spec.signature, spec.doc, spec.kwargs
    if head in stdlib_docs():
        sig, doc = stdlib_docs()[head]
        return sig, doc, ()
    return None


def _model_params(ix: Index, d: Definition | None) -> list[str]:
    """The call parameters of a `defmodel`: its `:apply` lambda's, without `self`."""
    lam = _apply_lambda(ix, d) if d is not None else None
    return [p.name for p in lam.items[1].items if isinstance(p, Sym)][1:] if lam is not None else ["x"]


def _apply_lambda(ix: Index, d: Definition) -> ListNode | None:
    form = ix.node(d.form_span)
    lam = keyword_value(form, "apply", 2) if isinstance(form, ListNode) else None
    if isinstance(lam, ListNode) and len(lam.items) > 1 and isinstance(lam.items[1], ListNode):
        return lam
    return None


def _sig_params(label: str, kwargs: tuple[str, ...]) -> list[tuple[int, int, str | None]]:
    """The parameters of a signature label: (start, end, keyword or None); a
    keyword the form takes and its value make one parameter (`:axis 0`)."""
    inner_start = label.find(" ")
    if not label.startswith("(") or inner_start < 0:
        return []
    toks = [(m.start(), m.end(), m.group()) for m in _SIG_TOKEN.finditer(label, inner_start, len(label) - 1)]
    out, i = [], 0
    while i < len(toks):
        s, e, t = toks[i]
        if t.startswith(":") and t[1:] in kwargs and i + 1 < len(toks) and toks[i + 1][2][1:] not in kwargs:
            out.append((s, toks[i + 1][1], t[1:]))
            i += 2
        else:
            out.append((s, e, None))
            i += 1
    return out


def signature_help(ix: Index, offset: int) -> Signature | None:
    """The signature of the call around `offset` and the parameter being
    written: positional arguments by count, a keyword argument by its
    keyword. Inside a nested list or vector, the argument it is. None
    outside a call, or inside a string or a comment."""
    ctx = scan(ix.text, offset)
    if ctx is None:
        return None
    frames, prefix, _ = ctx
    for k in range(len(frames) - 1, -1, -1):
        head = frame_head(frames, k)
        if head is None:
            continue
        found = _signature_for(ix, frames, k, head, offset)
        if found is None:
            continue
        label, doc, kwargs = found
        params = _sig_params(label, kwargs)
        typing = prefix if k == len(frames) - 1 else ""
        active = _active_param(label, params, frames[k].items[1:], typing, kwargs)
        return Signature(label, doc, tuple((s, e) for s, e, _ in params), active)
    return None


def _active_param(label: str, params, items: list[Item], prefix: str, kwargs) -> int | None:
    """The parameter the cursor is at, after the complete `items` and with `prefix` typed."""
    pos, pending = 0, None
    i = 0
    while i < len(items):
        t = items[i].text
        if t.startswith(":") and t[1:] in kwargs:
            if i + 1 < len(items):
                i += 2
                continue
            pending = t[1:]
            i += 1
            continue
        pos += 1
        i += 1
    if pending is not None:
        return next((j for j, p in enumerate(params) if p[2] == pending), None)
    if prefix.startswith(":"):
        hit = next((j for j, p in enumerate(params) if p[2] and p[2].startswith(prefix[1:])), None)
        if hit is not None:
            return hit
    positional = [j for j, p in enumerate(params) if p[2] is None]
    if pos < len(positional):
        return positional[pos]
    if positional and label[params[positional[-1]][0]:params[positional[-1]][1]] == "...":
        return positional[-1]
    return None
