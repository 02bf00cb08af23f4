"""The preamble every feature handler on an open document shares: which analysis answers, and where.

A request names a document (`params.text_document`) and often a position or
a range in it, in the version the document has when the request arrives.
`on_document(empty, fresh)` decorates a handler `(ls, params, doc:
DocumentRequest)` into pygls's async handler `(ls, params)`, which

1. finds the analysis to answer from (`answering_analysis`), without ever
   blocking the event loop: the version's own when its check has finished;
   else, for a handler that may answer from an older version (`fresh`
   False: hover, signature help, completion, definition, references,
   highlights), the check of this version for at most `STALE_WAIT_S` when
   the newest finished analysis (of an older version) can answer at the
   request's position, else `FRESH_WAIT_S`, then that analysis (as
   rust-analyzer and pyright answer from the last snapshot); a `fresh` handler (rename, code
   actions, symbols, folding, semantic tokens, inlay hints: whole-document
   answers or edits) waits for its version's check, and gets LSP's
   `ContentModified` should a newer version supersede it meanwhile;
2. computes the answer on a query thread (`SexpServer.off_loop`), so the
   loop goes on answering other requests and `$/cancelRequest` (which
   cancels the waiting task: pygls answers `RequestCancelled`);
3. gives the handler the position map: the version's own, or, for an
   older version's analysis, a `convert.DriftedPositions` that maps the
   request's positions into that text and the answer's ranges back (a
   position inside the text that changed since gets `empty()`: nothing
   there was analysed);
4. answers `empty()` for a handler's None, and is guarded (a bug is logged,
   not raised; `with_document` is the same preamble without the guard, for
   a handler that answers some errors to the client: rename).

Imports `lsp.documents`, `lsp.convert` and `lsp.guard`; never JAX.
"""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

from sexpgpu_lang import ide
from sexpgpu_lang.source import Span

from .convert import Drift, DriftedPositions, EditedRegion, PositionMap
from .documents import Analysis, Document
from .guard import ContentModified, guarded

#: How long a request that may answer from an older version waits for the check of its own, in
#: seconds: `FRESH_WAIT_S` when the older version's analysis cannot answer it (none has finished, or
#: the position lies in the text edited since: completion as the user types), else `STALE_WAIT_S`.
FRESH_WAIT_S = 0.3
STALE_WAIT_S = 0.1


@dataclass(frozen=True)
class DocumentRequest:
    """A request on an open document: the analysis it is answered from, the position map (the
    request's version's, or a `DriftedPositions` when the analysis is of another version), and the
    request's parameters."""

    analysis: Analysis
    positions: PositionMap | DriftedPositions
    params: object

    @property
    def index(self) -> ide.Index:
        """The query index of the analysis (what `sexpgpu_lang.ide` asks)."""
        return self.analysis.index

    @property
    def uri(self) -> str:
        return self.analysis.document.uri

    @property
    def stale(self) -> bool:
        """Whether the answer comes from an older (or newer) version's analysis."""
        return isinstance(self.positions, DriftedPositions)

    @property
    def offset(self) -> int:
        """The code-point offset of `params.position` in the analysis's text."""
        return self.positions.offset(self.params.position)

    @property
    def span(self) -> Span:
        """The code-point span of `params.range` in the analysis's text."""
        return self.positions.span(self.params.range)


async def answering_analysis(ls, uri: str, fresh: bool, position=None) -> tuple[Document, Analysis] | None:
    """(the request's version of `uri`, the analysis to answer from), or None when the document is
    not open or no check of it has finished (nor, for `fresh`, of this version). See the module's
    docstring; raises `ContentModified` for a `fresh` request whose version was superseded.
    `position`, the request's, decides how long a request that is not `fresh` waits."""
    store = ls.store
    doc = store.get(uri)
    if doc is None:
        return None
    done = store.finished(uri)
    if done is not None and done.document.serial == doc.serial:
        return doc, done
    # (shielded: a cancelled request must not cancel a check that others wait for)
    future = asyncio.shield(asyncio.wrap_future(store.start(doc)))
    if fresh:
        analysis = await future
        if analysis is None:
            raise ContentModified(f"{uri} changed while this request waited for its check")
        return doc, analysis
    wait = FRESH_WAIT_S
    if done is not None and position is not None and await ls.off_loop(_answers_at, ls, doc, done, position):
        wait = STALE_WAIT_S
    try:
        analysis = await asyncio.wait_for(future, wait)
    except asyncio.TimeoutError:
        analysis = None
    if analysis is None:
        analysis = store.finished(uri)
    return None if analysis is None else (doc, analysis)


def _answers_at(ls, doc: Document, analysis: Analysis, position) -> bool:
    """Whether `analysis` (of another version) can answer at `position` of `doc`: outside the text
    edited between them."""
    offset = doc.positions(ls.encoding).offset(position)
    return Drift(analysis.document.text, doc.text).to_old(offset) is not None


def _request(ls, doc: Document, analysis: Analysis, params) -> DocumentRequest:
    pm = doc.positions(ls.encoding)
    if analysis.document.serial != doc.serial:
        pm = DriftedPositions(pm, Drift(analysis.document.text, doc.text))
    return DocumentRequest(analysis, pm, params)


def with_document(empty=lambda: None, fresh: bool = False):
    """Decorate a handler `(ls, params, doc: DocumentRequest)` into pygls's async `(ls, params)`:
    `empty()` when the document is not open, no analysis can answer, the position lies in text
    edited since the analysis, or the handler returns None. The handler runs on a query thread."""
    def deco(fn):
        def run(ls, params, doc, analysis):
            try:
                found = fn(ls, params, _request(ls, doc, analysis, params))
            except EditedRegion:
                return empty()
            return empty() if found is None else found

        @functools.wraps(fn)
        async def handler(ls, params):
            got = await answering_analysis(ls, params.text_document.uri, fresh, getattr(params, "position", None))
            if got is None:
                return empty()
            return await ls.off_loop(run, ls, params, *got)
        return handler
    return deco


def on_document(empty=lambda: None, fresh: bool = False):
    """`with_document(empty, fresh)`, guarded: an exception is logged and answered with `empty()`."""
    def deco(fn):
        return guarded(empty)(with_document(empty, fresh)(fn))
    return deco
