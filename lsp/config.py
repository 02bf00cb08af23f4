"""The server's settings: one explicit object, read once at `initialize`.

`initializationOptions` (LSP 3.17, "Initialize Request") may hold:

* `diagnostics`: `"push"` (publish on open and every change), `"pull"`
  (answer `textDocument/diagnostic` only), `"both"`, or `"auto"` (the
  default): pull when the client says it pulls (`textDocument.diagnostic`
  in its capabilities), else push. The server answers pull requests in
  every mode; `auto` keeps a client that does both from showing each
  diagnostic twice.
* `formatWidth`: the formatter's column limit (default 80).

Imports only lsprotocol.
"""
from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types

MODES = ("auto", "push", "pull", "both")


@dataclass(frozen=True)
class ServerConfig:
    """`push`: publish diagnostics on open and change; `format_width`: the formatter's column limit."""

    push: bool = True
    format_width: int = 80

    @classmethod
    def from_initialize(cls, params: types.InitializeParams) -> "ServerConfig":
        """Read the client's capabilities and `initializationOptions`; bad values fall back to the defaults."""
        opts = params.initialization_options if isinstance(params.initialization_options, dict) else {}
        mode = opts.get("diagnostics", "auto")
        mode = mode if mode in MODES else "auto"
        td = params.capabilities.text_document if params.capabilities else None
        client_pulls = td is not None and td.diagnostic is not None
        push = mode in ("push", "both") or (mode == "auto" and not client_pulls)
        width = opts.get("formatWidth", 80)
        width = width if isinstance(width, int) and not isinstance(width, bool) and 20 <= width <= 400 else 80
        return cls(push=push, format_width=width)
