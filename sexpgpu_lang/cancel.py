"""Cancelling a check that a newer version of its document superseded.

The language server checks a document on a worker thread; when the user
edits it again, the check of the older version is of no use. It passes a
`CancelToken` to `syntax.parse` and `check.check`, and cancels it on the
next edit: the parse looks at it every 256 pieces of text or top-level
forms, the checker before each top-level form of each phase, and both stop
there with `Cancelled`. A check stopped so leaves its document's
`CheckCache` as it was plus what it added (every entry is verified on use),
and nothing else behind.

Imports nothing; never JAX.
"""
from __future__ import annotations


class Cancelled(BaseException):
    """The check was cancelled (`CancelToken.check`). A BaseException, as asyncio's
    `CancelledError` is, so that no `except Exception` on the way turns it into a result."""


class CancelToken:
    """Set once by `cancel` (from any thread); read by the check between its forms."""

    __slots__ = ("cancelled",)

    def __init__(self):
        self.cancelled = False

    def cancel(self) -> None:
        """Ask the check to stop at its next look."""
        self.cancelled = True

    def check(self) -> None:
        """Raise `Cancelled` once `cancel` was called."""
        if self.cancelled:
            raise Cancelled()
