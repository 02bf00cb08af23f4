"""Inlay hints: the type after each `let*` binding's name and after each key a generator phase returns.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

from ..source import Span
from ..syntax import ListNode, Sym, plist_pairs
from ..types import TensorType
from .index import Index
from .results import InlayHint


def inlay_hints(ix: Index, span: Span | None = None) -> list[InlayHint]:
    """The type after every `let*` binding's name, after each state key
    `:init` makes and `:step` returns, and after each name `:finish`
    generates; only those inside `span` when given."""
    out: list[InlayHint] = []
    for node in ix.nodes.values():
        if isinstance(node, ListNode) and node.head == "let*" and len(node.items) > 1 and isinstance(node.items[1], ListNode):
            for b in node.items[1].items:
                if isinstance(b, ListNode) and len(b.items) == 2 and isinstance(b.items[0], Sym):
                    t = ix.type_at(b.items[0])
                    if t is not None:
                        out.append(InlayHint(b.items[0].span.end, ": " + t.show()))
    for phase in ("generate.init", "generate.step", "generate.finish"):
        res = ix.phase_result(phase)
        if res is None:
            continue
        for k, v in plist_pairs(res):
            t = ix.type_at(v)
            if isinstance(t, TensorType):
                out.append(InlayHint(k.span.end, ": " + t.strong().show()))
    if span is not None:
        out = [h for h in out if span.start <= h.offset <= span.end]
    return sorted(out, key=lambda h: h.offset)
