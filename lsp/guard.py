"""The guard around every request and notification handler.

A bug in one editor feature must not take the server down (STYLE.md,
"Layers that know little of each other"): `guarded(default)` logs the
exception (to stderr and, as `window/logMessage`, to the client) and
answers `default()`, the feature's empty result.

Imports only the standard library and lsprotocol.
"""
from __future__ import annotations

import functools
import logging
import traceback

from lsprotocol import types

log = logging.getLogger("sexpgpu.lsp")


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
    """Decorate a handler `(ls, params)`: on an exception, log it and return `default()`."""
    def deco(fn):
        @functools.wraps(fn)
        def handler(ls, params):
            try:
                return fn(ls, params)
            except Exception as exc:
                report(ls, fn.__name__, exc)
                return default()
        return handler
    return deco
