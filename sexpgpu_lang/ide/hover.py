"""Hover: what the node under the cursor is, its inferred type and, for a call or a form, the
operation's or form's signature and one-line doc.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

import re

from ..check import BatchType, CtxType, stdlib_docs
from ..ops import INITIALIZERS, REGISTRY
from ..syntax import Kw, ListNode, Node, Num, Str, Sym, keyword_value
from ..types import DTYPES, ErrorType, PlistType, TensorType, Type
from .checkpoint import checkpoint_hover, param_lines
from .describe import code_block, describe, show_type
from .index import Index
from ..language import (CONTEXT_DOCS, KEYWORD_DOCS, OPTIMIZERS, REPEAT_ENTRY, SCHEDULE_DOCS, SCHEDULES, SOURCES, SPECIAL_FORMS,
                        TOP_FORMS)
from .results import HoverInfo


#: What the `*` of a weak type (`[] i32*`) means, added to a hover that shows one.
WEAK_NOTE = ("`*`: weakly typed (a literal, or made from literals only): it takes the dtype of the "
             "value it meets, as JAX's weak types do")
_WEAK_SHOWN = re.compile(r"\] [a-z]+[0-9]*\*")  # a weak tensor type as `TensorType.show` writes it


def hover(ix: Index, offset: int) -> HoverInfo | None:
    """What the node at `offset` is: its inferred type and, for a call or a
    form, the operation's or form's signature and one-line doc; a weak type
    (`[] i32*`) is followed by what its `*` means."""
    info = _hover(ix, offset)
    if info is not None and _WEAK_SHOWN.search(info.markdown):
        return HoverInfo(info.span, f"{info.markdown}\n\n{WEAK_NOTE}")
    return info


def _hover(ix: Index, offset: int) -> HoverInfo | None:
    node = ix.node_at(offset)
    if node is None:
        return None
    parent = ix.parent(node)
    t = ix.type_at(node)
    if isinstance(node, Sym):
        if isinstance(parent, ListNode) and parent.items and parent.items[0] is node:
            return HoverInfo(node.span, _hover_call(ix, parent, node))
        d = ix.definition_at(offset)
        if d is not None:
            return HoverInfo(node.span, describe(ix, d, t))
        if t is not None:
            return HoverInfo(node.span, code_block(f"{node.name}: {show_type(t)}"))
        return None
    if isinstance(node, (Kw, Str)) and isinstance(parent, ListNode) and parent.head == "checkpoint-config":
        shown = _config_read(ix, parent, offset)   # its path or key: what the `def` binds, and from where
        if shown is not None:
            return HoverInfo(node.span, shown)
    if isinstance(node, Kw):
        return _hover_keyword(ix, node, parent, t)
    if isinstance(node, Str) and (shown := checkpoint_hover(ix, node)) is not None:
        return HoverInfo(node.span, shown)
    if isinstance(node, (Num, Str)):
        return HoverInfo(node.span, code_block(show_type(t))) if t is not None else None
    if isinstance(node, ListNode) and node.head:
        return HoverInfo(node.span, _hover_call(ix, node, node.items[0]))
    if t is not None:
        return HoverInfo(node.span, code_block(show_type(t)))
    return None


def _config_read(ix: Index, call: ListNode, offset: int) -> str | None:
    """Hover on the path or key of `(def NAME (checkpoint-config "dir" :key))`: the `def`'s own hover
    (its value, the config.json key and file it came from), or None outside such a `def`."""
    form = ix.parent(call)
    if not (isinstance(form, ListNode) and form.head == "def" and len(form.items) == 3
            and isinstance(form.items[1], Sym) and form.items[2] is call):
        return None
    d = ix.definition_at(form.items[1].span.start)
    return describe(ix, d, ix.type_at(form.items[1])) if d is not None else None


def _hover_call(ix: Index, call: ListNode, head: Node) -> str:
    name = call.head or ""
    out_t = ix.type_at(call)
    arrow = f"\n→ {show_type(out_t)}" if out_t is not None and not isinstance(out_t, ErrorType) else ""
    d = ix.definition_at(head.span.start)
    if d is not None and d.kind not in ("model-binding",):
        return describe(ix, d, ix.type_at(head))
    if ix.parent(call) is None and name in TOP_FORMS:
        sig, doc = TOP_FORMS[name]
        return code_block(sig) + f"\n\n{doc}"
    if d is not None:  # (model x): the model `model` binds
        model = d.detail.split()[-1]
        return code_block(f"(model ...) = ({model} ...){arrow}") + "\n\n" + TOP_FORMS["model"][1]
    if name in SPECIAL_FORMS:
        sig, doc = SPECIAL_FORMS[name]
        return code_block(sig + arrow) + f"\n\n{doc}"
    if name in SCHEDULES and _in_optimizer(ix, call):
        settings = " ".join(f":{k} ..." for k in SCHEDULES[name])
        return code_block(f"({name} {settings})") + f"\n\nlearning-rate schedule: {SCHEDULE_DOCS[name]}"
    if name == "repeat" and _in_params(ix, call):
        sig, doc = REPEAT_ENTRY
        return code_block(sig) + f"\n\n{doc}"
    if name in INITIALIZERS and _in_params(ix, call):
        sig, doc = INITIALIZERS[name]
        return code_block(sig + arrow) + f"\n\nparameter initialiser: {doc}"
    if name in REGISTRY:
        spec = REGISTRY[name]
        return code_block(spec.signature + arrow) + f"\n\n{spec.doc}"
    if name in stdlib_docs() and not any(d.name == name for d in ix.defs.values()):
        sig, doc = stdlib_docs()[name]
        return code_block(sig + arrow) + f"\n\n{doc}"
    if name in OPTIMIZERS:
        return code_block(f"({name} " + " ".join(f":{k} ..." for k in OPTIMIZERS[name]) + ")") + "\n\noptimizer"
    if name in SOURCES:
        return code_block(f"({name} " + " ".join(f":{k} ..." for k in SOURCES[name]) + ")") + "\n\nloader source"
    if out_t is not None:
        return code_block(show_type(out_t))
    return code_block(f"({name} ...)")


def _in_optimizer(ix: Index, node: Node) -> bool:
    """True where `node` is a setting's value inside an optimizer call (`:lr (cosine-decay ...)`)."""
    p = ix.parent(node)
    return isinstance(p, ListNode) and p.head in OPTIMIZERS


def _in_params(ix: Index, node: Node) -> bool:
    """True inside a `defmodel`'s `:params` plist."""
    p = ix.parent(node)
    if not isinstance(p, ListNode):
        return False
    gp = ix.parent(p)
    return isinstance(gp, ListNode) and gp.head == "defmodel" and keyword_value(gp, "params", 2) is p


def _hover_keyword(ix: Index, node: Kw, parent: Node | None, t: Type | None) -> HoverInfo | None:
    d = ix.definition_at(node.span.start)
    if d is not None and d.kind in ("param", "state-key", "generated", "reward", "field", "entry"):
        doc = {"state-key": "state key, made by `:init`", "generated": "generated name, made by `:finish`",
               "reward": "generated name: the rewards of the Python function `:reward` names, which `sexpgpu run` "
                         "calls on the host after `:finish` (never imported by the editor)",
               "param": "model parameter", "field": "loader field",
               "entry": "model entry point, over the model's parameters"}[d.kind]
        loaded = param_lines(ix, d) if d.kind == "param" else None
        return HoverInfo(node.span, code_block(d.detail) + f"\n\n{doc}" + (f"\n\n{loaded}" if loaded else ""))
    shown = checkpoint_hover(ix, node)
    if shown is not None:
        return HoverInfo(node.span, shown)
    entries = ix.facts.entries.get(parent.head) if isinstance(parent, ListNode) and parent.head else None
    if entries and node.name in entries and len(parent.items) > 1 and parent.items[1] is node:
        # an entry of a model made in one form (its definition is in the expansion, not the file)
        return HoverInfo(node.span, code_block(entries[node.name]) + "\n\nmodel entry point, over the model's parameters")
    if isinstance(parent, ListNode):
        head = parent.head
        idx = next((i for i, it in enumerate(parent.items) if it is node), -1)
        if head in ("getf", "field") and idx == 2:
            pt = ix.type_at(parent)
            obj = ix.type_at(parent.items[1])
            where = "the context" if isinstance(obj, CtxType) else "the batch" if isinstance(obj, BatchType) else "the plist"
            if pt is not None:
                doc = f": {CONTEXT_DOCS[node.name]}" if isinstance(obj, CtxType) and node.name in CONTEXT_DOCS else ""
                return HoverInfo(node.span, code_block(f":{node.name} {show_type(pt)}") + f"\n\nkey of {where}{doc}")
        if head in REGISTRY and node.name in REGISTRY[head].kwargs:
            vt = ix.type_at(parent.items[idx + 1]) if idx + 1 < len(parent.items) else None
            return HoverInfo(node.span, code_block(f":{node.name} {show_type(vt) if vt else ''}".rstrip())
                             + f"\n\nkeyword of `{head}`: {REGISTRY[head].signature}")
        if (head, node.name) in KEYWORD_DOCS:
            vt = ix.type_at(parent.items[idx + 1]) if idx + 1 < len(parent.items) else None
            shown = f" {show_type(vt)}" if isinstance(vt, (TensorType, PlistType)) else ""
            return HoverInfo(node.span, code_block(f":{node.name}{shown}") + f"\n\n{KEYWORD_DOCS[(head, node.name)]}")
    if node.name in DTYPES:
        return HoverInfo(node.span, code_block(f":{node.name}") + f"\n\ndtype `{node.name}`")
    if t is not None and not isinstance(t, (ErrorType,)) and not t.show().endswith("keyword"):
        return HoverInfo(node.span, code_block(f":{node.name} {show_type(t)}"))
    return None
