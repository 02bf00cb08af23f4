"""The guard around every request and notification handler, and what the server logs.

A bug in one editor feature must not take the server down (docs/dev/style.md,
"Layers that know little of each other"): `guarded(default)` logs the
exception (to stderr and, as `window/logMessage`, to the client) and
answers `default()`, the feature's empty result.

`Refused` is a request the server declines on purpose (a name that cannot
be renamed), `ContentModified` one whose version a newer one superseded
before its answer was ready: the client gets the error, the log a line at
INFO.
`ProtocolLogFilter` gives pygls's own log lines about ordinary protocol
events the level they deserve: a refusal, a `$/cancelRequest` for a request
already answered (LSP 3.17, "Cancellation Support": the server may have
replied already) and a notification the server does not handle
(`didSave`, `didChangeConfiguration`: LSP 3.17 lets a server ignore them)
are INFO, without a traceback; a message whose params do not parse is one
WARNING line (the request is answered with -32602). Editors show a server's stderr as errors
(Neovim's lsp.log), so only what is wrong goes there at WARNING or above.

Imports only the standard library, lsprotocol and pygls's exception type.
"""
from __future__ import annotations

import functools
import inspect
import logging
import traceback

from lsprotocol import types
from pygls.exceptions import JsonRpcException

log = logging.getLogger("sexpgpu.lsp")


class Refused(JsonRpcException):
    """A request declined on purpose, answered with LSP's `RequestFailed` and `message` (shown to the user)."""

    def __init__(self, message: str):
        super().__init__(message, code=int(types.LSPErrorCodes.RequestFailed))


class ContentModified(JsonRpcException):
    """A request whose answer needs its version's check, when a newer version superseded it first:
    LSP's `ContentModified` (-32801: the client asks again, or drops it, and shows nothing)."""

    def __init__(self, message: str):
        super().__init__(message, code=int(types.LSPErrorCodes.ContentModified))


class InvalidParams(JsonRpcException):
    """A request whose params did not parse, answered with JSON-RPC's -32602 ("Invalid params") under
    its id; logged as one line, like a refusal."""

    def __init__(self, message: str):
        super().__init__(message, code=-32602)


#: pygls's log lines (their format strings) about ordinary protocol events.
_ORDINARY = ("Cancel notification for unknown message id", "Ignoring notification for unknown method")
#: pygls's log line (with a traceback) for a message whose params do not parse.
_UNPARSED = "Unable to deserialize message"


class ProtocolLogFilter(logging.Filter):
    """On pygls's loggers: a `Refused` request and the `_ORDINARY` events become
    INFO records without a traceback (a refusal reads `request refused: ...`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (Refused, InvalidParams, ContentModified)):
            what = {Refused: "request refused: %s", InvalidParams: "invalid params: %s",
                    ContentModified: "content modified: %s"}[type(exc)]
            record.msg, record.args, record.exc_info, record.exc_text = what, (exc.message,), None, None
        elif isinstance(record.msg, str) and record.msg.startswith(_UNPARSED):
            # The client's mistake, answered with -32602 (a request) or dropped: one line, no traceback.
            record.msg, record.args = "a message from the client did not parse (a request is answered -32602)", ()
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        elif not isinstance(record.msg, str) or not record.msg.startswith(_ORDINARY):
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        return record.levelno >= logging.getLogger().getEffectiveLevel()


def quiet_protocol_log() -> None:
    """Install `ProtocolLogFilter` on pygls's protocol logger (once; `lsp.server.main`)."""
    logger = logging.getLogger("pygls.protocol.json_rpc")
    if not any(isinstance(f, ProtocolLogFilter) for f in logger.filters):
        logger.addFilter(ProtocolLogFilter())


def report(ls, what: str, exc: BaseException) -> None:
    """Log an internal error in `what` to stderr and to the client's log."""
    log.error("internal error in %s", what, exc_info=exc)
    try:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        ls.window_log_message(types.LogMessageParams(type=types.MessageType.Error,
                                                     message=f"sexpgpu: internal error in {what}: {detail}"))
    except Exception:  # the client may be gone; the log line above is enough
        pass


def guarded(default=lambda: None):
    """Decorate a handler `(ls, params)`, plain or async: on an exception, log it and return
    `default()`. `ContentModified` and a cancellation (asyncio's, a BaseException) go to pygls,
    which answers them as errors of the request."""
    def deco(fn):
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_handler(ls, params):
                try:
                    return await fn(ls, params)
                except ContentModified:
                    raise
                except Exception as exc:
                    report(ls, fn.__name__, exc)
                    return default()
            return async_handler

        @functools.wraps(fn)
        def handler(ls, params):
            try:
                return fn(ls, params)
            except Exception as exc:
                report(ls, fn.__name__, exc)
                return default()
        return handler
    return deco
