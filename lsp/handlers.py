"""The preamble every feature handler on an open document shares.

A request names a document (`params.text_document`) and often a position or
a range in it. `on_document(empty)` decorates a handler
`(ls, params, doc: DocumentRequest)`: it finds the latest analysis of the
document (answering `empty()` when the document is not open), gives the
handler the position map in the negotiated encoding, the offset of
`params.position` and the span of `params.range`, answers `empty()` for a
handler's None, and is `guarded(empty)` (a bug is logged, not raised).
`with_document(empty)` is the same preamble without the guard, for a
handler that answers some errors to the client (rename).

Imports `lsp.documents`, `lsp.convert` and `lsp.guard`; never JAX.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from sexpgpu_lang import ide
from sexpgpu_lang.source import Span

from .convert import PositionMap
from .documents import Analysis
from .guard import guarded


@dataclass(frozen=True)
class DocumentRequest:
    """A request on an open document: its latest analysis, the position map of
    that text in the negotiated encoding, and the request's parameters."""

    analysis: Analysis
    positions: PositionMap
    params: object

    @property
    def index(self) -> ide.Index:
        """The query index of the analysis (what `sexpgpu_lang.ide` asks)."""
        return self.analysis.index

    @property
    def uri(self) -> str:
        return self.analysis.document.uri

    @property
    def offset(self) -> int:
        """The code-point offset of `params.position`."""
        return self.positions.offset(self.params.position)

    @property
    def span(self) -> Span:
        """The code-point span of `params.range`."""
        return self.positions.span(self.params.range)


def with_document(empty=lambda: None):
    """Decorate a handler `(ls, params, doc: DocumentRequest)` into `(ls, params)`:
    `empty()` when the document is not open or the handler returns None."""
    def deco(fn):
        @functools.wraps(fn)
        def handler(ls, params):
            analysis = ls.analysis(params.text_document.uri)
            if analysis is None:
                return empty()
            found = fn(ls, params, DocumentRequest(analysis, analysis.document.positions(ls.encoding), params))
            return empty() if found is None else found
        return handler
    return deco


def on_document(empty=lambda: None):
    """`with_document(empty)`, guarded: an exception is logged and answered with `empty()`."""
    def deco(fn):
        return guarded(empty)(with_document(empty)(fn))
    return deco
