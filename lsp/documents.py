"""The open documents and their analyses.

`DocumentStore` holds the text of every open document, applying
`didOpen`/`didChange`/`didClose` itself (full or incremental changes,
positions through `lsp.convert`), so that one line-break rule and one
position codec serve the whole server. Each change makes a new `Document`
with a new `serial`, a number no other version of any document has: an
analysis is keyed by it; it is published only while its version is the
latest, and a request answered from an older version's analysis maps its
positions across the text that changed (`lsp.handlers`, `convert.Drift`).

Each open document keeps a `CheckCache`, so that checking a version reuses
what checking the one before found for the forms an edit did not touch
(the result is the same as a check from scratch).

Imports `sexpgpu_lang` and `lsp.convert`; never JAX.
"""
from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

from lsprotocol import types

from sexpgpu_lang import CheckResult, SourceText, ide, kept
from sexpgpu_lang.cancel import CancelToken, Cancelled
from sexpgpu_lang.check import CheckCache, Facts, check
from sexpgpu_lang.check.pretrained import LOCAL
from sexpgpu_lang.syntax import ParseResult, parse

from .convert import PositionMap, apply_change

_serials = itertools.count(1)
#: A document at least this long (characters) gets its query index built on the worker right after
#: its check: building one takes about 15 ms per 100,000 characters, which a request would otherwise
#: wait for; a shorter one's is built by the first request that needs it (most edits get none).
EAGER_INDEX_CHARS = 500_000
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
    the editor queries, is built on first use (publishing needs none), once
    (a lock keeps two threads from building it twice). `failure` says why
    the front end failed on this text (a bug in it: the result is then
    empty), else None."""

    document: Document
    result: CheckResult
    failure: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def index(self) -> ide.Index:
        """The query index of the result."""
        got = self.__dict__.get("_index")
        if got is None:
            with self._lock:
                got = self.__dict__.get("_index")
                if got is None:
                    got = self.__dict__["_index"] = ide.index(self.result)
        return got

    @property
    def indexed(self) -> bool:
        """Whether `index` is built already."""
        return "_index" in self.__dict__


def analyze_document(doc: Document, cache: CheckCache | None = None, cancel: CancelToken | None = None) -> Analysis:
    """Check a document's text with the front end, as `sexpgpu lint --read-files`
    does where a `:pretrained` checkpoint is on this machine (a `file:`
    document's, relative to it: headers only, each read again only once its
    file changes), but without building the IR (no editor feature reads
    it), reusing `cache` (kept from the document's earlier versions) when
    given. Raises `Cancelled` once `cancel` is cancelled, and nothing else:
    should the front end fail (it must not, for any text), the analysis is
    empty and says why in `failure`, and the error is logged."""
    path = uri_to_path(doc.uri)
    local = LOCAL if urlparse(doc.uri).scheme == "file" else False
    try:
        parsed = parse(SourceText(doc.text, path), cancel)
        return Analysis(doc, check(parsed, local, cache=cache, build_ir=False, cancel=cancel))
    except Exception as exc:  # RecursionError included: a bug in the front end, not in the file
        log.error("the front end failed on %s", doc.uri, exc_info=exc)
        src = SourceText(doc.text, path)
        empty = CheckResult(src, ParseResult(src, (), (), ()), [], Facts(), None)
        return Analysis(doc, empty, f"{type(exc).__name__}: {exc}")


class _Check:
    """A check in flight: the version, its future (the analysis, or None when it was cancelled) and its token."""

    __slots__ = ("doc", "future", "token")

    def __init__(self, doc: Document, future: Future, token: CancelToken):
        self.doc, self.future, self.token = doc, future, token


class DocumentStore:
    """The open documents by URI, the newest finished analysis of each, and the check in flight of each.

    Texts change only on the event loop's thread. Analyses are computed on
    one worker thread (`start`), one check at a time: a version is never
    checked twice at once (a second `start` of it joins the first), and a
    newer version (`change`, or `start` of it) cancels the check of an older
    one in flight (its future gives None): no check runs for a version
    nobody will see. `finished` is the newest analysis that ran to its end,
    of any version: requests answer from it while the latest version is
    being checked. Each check reads files through `sexpgpu_lang.kept`
    as its document (`kept.reading(uri)`), so closing a document drops what
    only it read.
    """

    def __init__(self, executor: Executor | None = None):
        self._docs: dict[str, Document] = {}
        self._finished: dict[str, Analysis] = {}
        self._checks: dict[str, _Check] = {}
        self._caches: dict[str, CheckCache] = {}
        self._lock = threading.Lock()
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="sexpgpu-check")
        #: Called (from the thread that checked) after each check; `lsp.server.main` sets it.
        self.on_checked = None

    def open(self, item: types.TextDocumentItem) -> Document:
        """Start tracking a document (LSP 3.17, "DidOpenTextDocument")."""
        doc = Document(item.uri, item.version, item.text)
        self._docs[item.uri] = doc
        self._supersede(doc)
        return doc

    def change(self, params: types.DidChangeTextDocumentParams, encoding: str) -> Document | None:
        """Apply the changes in order (LSP 3.17, "DidChangeTextDocument"); None for a document not
        open. A check of an older version in flight is cancelled."""
        doc = self._docs.get(params.text_document.uri)
        if doc is None:
            return None
        text = doc.text
        for i, change in enumerate(params.content_changes):
            # The first change is in the positions of the text published last: its map is made already.
            text = apply_change(text, change, encoding, doc.positions(encoding) if i == 0 else None)
        doc = Document(doc.uri, params.text_document.version, text)
        self._docs[doc.uri] = doc
        self._supersede(doc)
        return doc

    def close(self, uri: str) -> None:
        """Stop tracking a document: cancel its check, drop its analysis, its check cache and what
        only it read of other files (`kept.forget_reader`)."""
        self._docs.pop(uri, None)
        with self._lock:
            self._finished.pop(uri, None)
            self._caches.pop(uri, None)
            running = self._checks.pop(uri, None)
        if running is not None:
            running.token.cancel()
        kept.forget_reader(uri)

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

    def finished(self, uri: str) -> Analysis | None:
        """The newest analysis of `uri` that ran to its end (of its latest version or an older one), or None."""
        with self._lock:
            return self._finished.get(uri)

    def analysis(self, uri: str) -> Analysis | None:
        """The analysis of the latest version of `uri`, waiting for its check (blocking: for tests and
        scripts; the server's handlers await `start`); None when the document is not open."""
        while True:
            doc = self._docs.get(uri)
            if doc is None:
                return None
            done = self.finished(uri)
            if done is not None and done.document.serial == doc.serial:
                return done
            got = self.start(doc).result()
            if got is not None:
                return got

    def cache(self, uri: str) -> CheckCache:
        """The check cache of a document (made on first use; dropped when it closes)."""
        with self._lock:
            cache = self._caches.get(uri)
            if cache is None:
                cache = self._caches[uri] = CheckCache()
            return cache

    def start(self, doc: Document) -> Future:
        """Check `doc` on the worker (or join the check of it in flight), cancelling the check of an
        older version of the document in flight. The future gives the analysis, or None when the
        check was cancelled (a newer version, or the document closed)."""
        with self._lock:
            running = self._checks.get(doc.uri)
            if running is not None and running.doc.serial == doc.serial:
                return running.future
            if running is not None:
                running.token.cancel()
            token = CancelToken()
            future = self.executor.submit(self._run, doc, token)
            self._checks[doc.uri] = _Check(doc, future, token)
            return future

    def _supersede(self, doc: Document) -> None:
        """Cancel the check in flight of an older version of `doc`'s document."""
        with self._lock:
            running = self._checks.get(doc.uri)
        if running is not None and running.doc.serial != doc.serial:
            running.token.cancel()

    def _run(self, doc: Document, token: CancelToken) -> Analysis | None:
        try:
            if token.cancelled or not self.is_latest(doc):
                return None
            with kept.reading(doc.uri):
                analysis = analyze_document(doc, self.cache(doc.uri), token)
        except Cancelled:
            return None
        finally:
            with self._lock:
                running = self._checks.get(doc.uri)
                if running is not None and running.doc.serial == doc.serial:
                    del self._checks[doc.uri]
            if doc.uri not in self._docs:   # closed meanwhile: what it read is no one's
                kept.forget_reader(doc.uri)
        self.remember(analysis)
        if len(doc.text) >= EAGER_INDEX_CHARS and self.finished(doc.uri) is analysis:
            # Build the query index next on the worker, unless a newer version comes first: a request
            # then finds it made (on a large file it would otherwise wait for it).
            self.executor.submit(self._index, analysis)
        return analysis

    def _index(self, analysis: Analysis) -> None:
        if self.finished(analysis.document.uri) is analysis and self.is_latest(analysis.document):
            try:
                analysis.index
            except Exception as exc:   # the request that needs it reports it
                log.debug("building the index of %s failed: %s", analysis.document.uri, exc)

    def remember(self, analysis: Analysis) -> Analysis:
        """Keep an analysis if it is newer than the one kept and its document is open (from any thread)."""
        with self._lock:
            doc = analysis.document
            kept_now = self._finished.get(doc.uri)
            if doc.uri in self._docs and (kept_now is None or kept_now.document.serial < doc.serial):
                self._finished[doc.uri] = analysis
        if self.on_checked is not None:
            self.on_checked()
        return analysis
