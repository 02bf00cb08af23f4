"""Navigation: go to definition, find references, document highlights.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

from ..source import Span
from .index import Index
from .results import Ref, Target


def definition(ix: Index, offset: int) -> list[Target]:
    """Where the name at `offset` is defined: a def, loader, model, binding,
    model parameter, loader field, the state key `:init` made, or the name
    `:finish` generated. Empty when it is built in or unknown."""
    d = ix.definition_at(offset)
    if d is None:
        return []
    full = Span(min(d.span.start, d.form_span.start), max(d.span.end, d.form_span.end))
    return [Target(d.span, full)]


def references(ix: Index, offset: int, include_declaration: bool = True) -> list[Ref]:
    """Every occurrence of the name at `offset`, sorted by position."""
    d = ix.definition_at(offset)
    if d is None:
        return []
    refs = ix.refs.get(d.span, {})
    return [Ref(s, w) for s, w in sorted(refs.items(), key=lambda x: x[0].start)
            if include_declaration or s != d.span]


def highlights(ix: Index, offset: int) -> list[Ref]:
    """The occurrences to highlight for the name at `offset` (LSP `documentHighlight`)."""
    return references(ix, offset, True)
