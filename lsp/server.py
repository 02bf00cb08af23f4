"""The SexpGPU language server: pygls 2.x over stdio, on the sexpgpu_lang front end.

`main()` serves on stdin/stdout (`sexpgpu lsp`, `python -m lsp`).
`build_server()` makes a server with every feature registered; the
handlers live in one module per group of features, each with `register(server)`:

* `diagnostics`: document sync (open, incremental change, close),
  published and pulled diagnostics;
* `navigation`: definition, references, highlight, rename, symbols,
  folding ranges;
* `information`: hover, signature help, inlay hints, semantic tokens;
* `editing`: completion, formatting, code actions (quick fixes).

A handler on an open document is written once, after `lsp.handlers`'s
preamble (the latest analysis, position to offset, the guard).

Document text lives in our own `DocumentStore` (not pygls's workspace):
`SexpProtocol` hands `didOpen`/`didChange`/`didClose` straight to our
handlers, so one module (`lsp/convert.py`) converts every position.

Never imports JAX.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCRequestMessage
from pygls.protocol.language_server import LanguageServerProtocol, lsp_method

from .config import ServerConfig
from .convert import UTF16, to_lsp_diagnostics
from .documents import Analysis, DocumentStore
from .guard import InvalidParams, quiet_protocol_log, report

VERSION = "0.1.0"
#: The interpreter's thread switch interval in the server (`sys.setswitchinterval`), in seconds.
SWITCH_INTERVAL_S = 0.001


@dataclass(frozen=True)
class UnparsedRequest:
    """A request whose params do not parse as its method's (JSON-RPC 2.0: answered
    with error -32602, "Invalid params", under its own id, so no client waits)."""

    id: int | str
    method: str
    reason: str
    jsonrpc: str = "2.0"


def _reason(exc: BaseException) -> str:
    """What did not parse, in one line (cattrs's paths where it says, `$.position.line`)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    try:
        from cattrs import transform_error
        return "; ".join(transform_error(cause)) or str(cause)
    except Exception:
        return str(cause) or type(cause).__name__


#: The method an unparsed request is dispatched as (`SexpProtocol.structure_message`): never sent by a client.
INVALID_PARAMS = "sexpgpu/invalidParams"


class SexpProtocol(LanguageServerProtocol):
    """pygls's protocol, except that text-document sync is left to the server's
    `DocumentStore`: pygls's workspace splits lines with `str.splitlines`,
    which breaks at more characters than LSP's `\\n`, `\\r\\n` and `\\r`;
    and a request whose params do not parse is answered with JSON-RPC's
    -32602 under its id (pygls only shows a message and never answers it)."""

    def structure_message(self, data: dict):
        """pygls's deserialisation; a request that fails it becomes an `UnparsedRequest`."""
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "method" in data and isinstance(data.get("id"), (int, str)) and not isinstance(data["id"], bool):
                # a request of our own method, whose handler answers -32602 under the request's id
                unparsed = UnparsedRequest(data["id"], str(data["method"]), _reason(exc))
                return JsonRPCRequestMessage(id=data["id"], method=INVALID_PARAMS, params=unparsed, jsonrpc="2.0")
            raise

    @lsp_method(INVALID_PARAMS)
    def sexpgpu_invalid_params(self, params: UnparsedRequest):
        """A request whose params did not parse: JSON-RPC's -32602 under its id, raised from a handler
        so that pygls answers it through its public path (a request's error is no window message)."""
        raise InvalidParams(f"invalid params for {params.method}: {params.reason}")

    def _user(self, method: str, params):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        yield from self._user(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        yield from self._user(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        yield from self._user(types.TEXT_DOCUMENT_DID_CLOSE, params)


class SexpServer(LanguageServer):
    """The server: open documents, settings, the diagnostics scheduler and the query threads.

    Three kinds of thread: the event loop's (pygls: reads messages, answers
    `$/cancelRequest`, applies edits, publishes), one check worker (the
    `DocumentStore`'s: one check at a time, cancelled when its version is
    superseded), and `queries`, the threads a request's answer is computed
    on (`lsp.handlers`), so that neither a check nor a long answer holds up
    the loop."""

    def __init__(self):
        super().__init__("sexpgpu", VERSION, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=SexpProtocol)
        self.store = DocumentStore()
        self.config = ServerConfig()
        self.queries = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sexpgpu-query")
        self._pushing: dict[str, asyncio.Task] = {}

    @property
    def encoding(self) -> str:
        """The position encoding negotiated at `initialize` (UTF-16 before it)."""
        try:
            return self.workspace.position_encoding or UTF16
        except RuntimeError:
            return UTF16

    async def off_loop(self, fn, *args):
        """`fn(*args)` on a query thread, awaited (a cancelled request stops waiting for it)."""
        return await asyncio.get_running_loop().run_in_executor(self.queries, fn, *args)

    # -- published diagnostics ---------------------------------------------------
    def diagnose_later(self, uri: str) -> None:
        """Check the latest version of `uri` on the worker and publish its diagnostics
        unless a newer version arrived meanwhile: then check that one instead. A
        newer version cancels the check of an older one (`DocumentStore.change`), so a
        burst of edits costs a check of the last version and the part of each
        earlier one done before the next edit; an older version's diagnostics
        are never published after a newer one's."""
        if not self.config.push or uri in self._pushing:
            return
        self._pushing[uri] = asyncio.get_running_loop().create_task(self._diagnose(uri))

    async def _diagnose(self, uri: str) -> None:
        try:
            while True:
                doc = self.store.get(uri)
                if doc is None:
                    return
                done = self.store.finished(uri)
                analysis = done if done is not None and done.document.serial == doc.serial else \
                    await asyncio.shield(asyncio.wrap_future(self.store.start(doc)))
                if analysis is not None and self.store.is_latest(doc):
                    self.publish(analysis)
                    return
        except Exception as exc:
            report(self, "diagnostics", exc)
        finally:
            # No await between the last version check and this: a change that
            # arrives later finds no task and starts one.
            self._pushing.pop(uri, None)

    def publish(self, analysis: Analysis) -> None:
        """Publish an analysis's diagnostics (LSP 3.17, "PublishDiagnostics")."""
        doc = analysis.document
        pm = doc.positions(self.encoding)
        diags = to_lsp_diagnostics(pm, doc.uri, analysis.result.diagnostics, analysis.failure,
                                   *self.config.diagnostic_style(pulled=False))
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=doc.uri, diagnostics=diags, version=doc.version))

    def clear(self, uri: str) -> None:
        """Publish no diagnostics for `uri` (after it closes)."""
        if self.config.push:
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


class QuietCollector:
    """When the server collects reference cycles: not while the user types.

    Python's automatic full collection walks every live object (the parser's
    and the checker's caches and the latest analysis: some 10^5 objects, 50 to
    100 ms on a 2,000-line file) every dozen or so checks, which was most of
    the edit-to-diagnostics p99. After each check `checked` freezes what is
    alive (`gc.freeze`: automatic collections then walk only what is newer);
    the full collection runs once no check has finished for `idle_s`
    seconds, or after `every` checks without such a pause. A check leaves no
    cycles of its own (the checker breaks them), so little waits for it.
    """

    def __init__(self, idle_s: float = 1.0, every: int = 100):
        self.idle_s, self.every = idle_s, every
        self._pending = 0
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def checked(self) -> None:
        """After a check (any thread): freeze what is alive; collect after `every` checks."""
        with self._lock:
            gc.freeze()
            self._pending += 1
            self._last = time.monotonic()
            if self._pending >= self.every:
                self._collect()

    def _collect(self) -> None:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._pending = 0

    def start(self) -> None:
        """Collect in a daemon thread whenever the checks pause for `idle_s`."""
        def idle():
            while not self._stop.wait(self.idle_s / 2):
                with self._lock:
                    if self._pending and time.monotonic() - self._last >= self.idle_s:
                        self._collect()
        threading.Thread(target=idle, name="sexpgpu-gc", daemon=True).start()

    def stop(self) -> None:
        """Stop the thread `start` started."""
        self._stop.set()


def build_server() -> SexpServer:
    """A server with every feature registered."""
    from . import diagnostics, editing, information, navigation

    server = SexpServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: SexpServer, params: types.InitializeParams) -> None:
        try:
            ls.config = ServerConfig.from_initialize(params)
        except Exception as exc:
            report(ls, "initialize", exc)

    for module in (diagnostics, navigation, information, editing):
        module.register(server)
    return server


def main() -> None:
    """Serve on stdin and stdout until the client exits; logs go to stderr."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="sexpgpu-lsp %(levelname)s %(message)s")
    quiet_protocol_log()
    # The check worker holds the interpreter while it computes; a thread that waits for it (the
    # loop, a query) gets it within the switch interval, 5 ms by default, at each of the dozen
    # hand-overs a request takes. 1 ms keeps a request's answer near its own cost during a check.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    server = build_server()
    collector = QuietCollector()
    server.store.on_checked = collector.checked
    collector.start()
    server.start_io()
