"""The open documents and their analyses.

`DocumentStore` holds the text of every open document, applying
`didOpen`/`didChange`/`didClose` itself (full or incremental changes,
positions through `lsp.convert`), so that one line-break rule and one
position codec serve the whole server. Each change makes a new `Document`
with a new `serial`, a number no other version of any document has: an
analysis is keyed by it, and a result is only ever used (or published) for
the serial it was computed from.

Each open document keeps a `CheckCache`, so that checking a version reuses
what checking the one before found for the forms an edit did not touch
(the result is the same as a check from scratch).

Imports `sexpgpu_lang` and `lsp.convert`; never JAX.
"""
from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import unquote, urlparse

from lsprotocol import types

from sexpgpu_lang import CheckResult, SourceText, ide
from sexpgpu_lang.check import CheckCache, Facts, check
from sexpgpu_lang.check.pretrained import LOCAL
from sexpgpu_lang.syntax import ParseResult, parse

from .convert import PositionMap, apply_change

_serials = itertools.count(1)
log = logging.getLogger("sexpgpu.lsp")


def uri_to_path(uri: str) -> str:
    """The file-system path of a `file:` URI (used to resolve a loader's
    relative paths); any other URI is returned as it is."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return uri
    path = unquote(parsed.path)
    if len(path) > 2 and path[0] == "/" and path[2] == ":":  # file:///c:/x on Windows
        path = path[1:]
    return path


@dataclass(frozen=True)
class Document:
    """One version of an open document. `version` is the client's; `serial` ours."""

    uri: str
    version: int | None
    text: str
    serial: int = field(default_factory=lambda: next(_serials))

    def positions(self, encoding: str) -> PositionMap:
        """The position map of this text in `encoding` (built once per encoding)."""
        cache = self.__dict__.setdefault("_positions", {})
        pm = cache.get(encoding)
        if pm is None:
            pm = cache[encoding] = PositionMap(self.text, encoding)
        return pm


@dataclass(frozen=True)
class Analysis:
    """A document version and the front end's result for it; `index`, for
    the editor queries, is built on first use (publishing needs none).
    `failure` says why the front end failed on this text (a bug in it: the
    result is then empty), else None."""

    document: Document
    result: CheckResult
    failure: str | None = None

    @cached_property
    def index(self) -> ide.Index:
        """The query index of the result."""
        return ide.index(self.result)


def analyze_document(doc: Document, cache: CheckCache | None = None) -> Analysis:
    """Check a document's text with the front end, as `sexpgpu lint --read-files`
    does where a `:pretrained` checkpoint is on this machine (a `file:`
    document's, relative to it: headers only, each read again only once its
    file changes), but without building the IR (no editor feature reads
    it), reusing `cache` (kept from the document's earlier versions) when
    given. Never raises:
    should the front end fail (it must not, for any text), the analysis is
    empty and says why in `failure`, and the error is logged."""
    path = uri_to_path(doc.uri)
    local = LOCAL if urlparse(doc.uri).scheme == "file" else False
    try:
        return Analysis(doc, check(parse(SourceText(doc.text, path)), local, cache=cache, build_ir=False))
    except Exception as exc:  # RecursionError included: a bug in the front end, not in the file
        log.error("the front end failed on %s", doc.uri, exc_info=exc)
        src = SourceText(doc.text, path)
        empty = CheckResult(src, ParseResult(src, (), (), ()), [], Facts(), None)
        return Analysis(doc, empty, f"{type(exc).__name__}: {exc}")


class DocumentStore:
    """The open documents by URI, the latest analysis of each, and the checks running.

    Texts change only on the event loop's thread; analyses are computed on a
    worker thread (`start`) or on the loop's (`analysis`), and a version is
    never checked twice at once: a request that needs a version being checked
    waits for that check.
    """

    def __init__(self):
        self._docs: dict[str, Document] = {}
        self._analyses: dict[str, Analysis] = {}
        self._running: dict[int, Future] = {}
        self._caches: dict[str, CheckCache] = {}
        self._lock = threading.Lock()
        #: Called (from the thread that checked) after each check; `lsp.server.main` sets it.
        self.on_checked = None

    def open(self, item: types.TextDocumentItem) -> Document:
        """Start tracking a document (LSP 3.17, "DidOpenTextDocument")."""
        doc = Document(item.uri, item.version, item.text)
        self._docs[item.uri] = doc
        return doc

    def change(self, params: types.DidChangeTextDocumentParams, encoding: str) -> Document | None:
        """Apply the changes in order (LSP 3.17, "DidChangeTextDocument"); None for a document not open."""
        doc = self._docs.get(params.text_document.uri)
        if doc is None:
            return None
        text = doc.text
        for i, change in enumerate(params.content_changes):
            # The first change is in the positions of the text published last: its map is made already.
            text = apply_change(text, change, encoding, doc.positions(encoding) if i == 0 else None)
        doc = Document(doc.uri, params.text_document.version, text)
        self._docs[doc.uri] = doc
        return doc

    def close(self, uri: str) -> None:
        """Stop tracking a document and drop its analysis."""
        self._docs.pop(uri, None)
        with self._lock:
            self._analyses.pop(uri, None)
            self._caches.pop(uri, None)

    def uris(self) -> list[str]:
        """The open documents' URIs."""
        return list(self._docs)

    def get(self, uri: str) -> Document | None:
        """The latest version of an open document."""
        return self._docs.get(uri)

    def is_latest(self, doc: Document) -> bool:
        """True when `doc` is still the open document's latest version."""
        cur = self._docs.get(doc.uri)
        return cur is not None and cur.serial == doc.serial

    def analysis(self, uri: str) -> Analysis | None:
        """The analysis of the latest version of `uri`, computed now if needed;
        None when the document is not open."""
        doc = self._docs.get(uri)
        if doc is None:
            return None
        with self._lock:
            cached = self._analyses.get(uri)
            running = self._running.get(doc.serial)
        if cached is not None and cached.document.serial == doc.serial:
            return cached
        if running is not None:
            return running.result()
        return self.remember(analyze_document(doc, self.cache(uri)))

    def cache(self, uri: str) -> CheckCache:
        """The check cache of a document (made on first use; dropped when it closes)."""
        with self._lock:
            cache = self._caches.get(uri)
            if cache is None:
                cache = self._caches[uri] = CheckCache()
            return cache

    def start(self, doc: Document, executor: Executor) -> Future:
        """Check `doc` on `executor` (or join the check of it already running)."""
        with self._lock:
            running = self._running.get(doc.serial)
            if running is None:
                running = self._running[doc.serial] = executor.submit(self._check, doc)
        return running

    def _check(self, doc: Document) -> Analysis:
        try:
            return self.remember(analyze_document(doc, self.cache(doc.uri)))
        finally:
            with self._lock:
                self._running.pop(doc.serial, None)

    def remember(self, analysis: Analysis) -> Analysis:
        """Keep an analysis if its document is still the latest version (from any thread)."""
        with self._lock:
            if self.is_latest(analysis.document):
                self._analyses[analysis.document.uri] = analysis
        if self.on_checked is not None:
            self.on_checked()
        return analysis
