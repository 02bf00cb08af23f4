"""The server's settings: one explicit object, read once at `initialize`.

`initializationOptions` (LSP 3.17, "Initialize Request") may hold:

* `diagnostics`: `"push"` (publish on open and every change), `"pull"`
  (answer `textDocument/diagnostic` only), `"both"`, or `"auto"` (the
  default): pull when the client says it pulls (`textDocument.diagnostic`
  in its capabilities), else push. The server answers pull requests in
  every mode; `auto` keeps a client that does both from showing each
  diagnostic twice.
* `formatWidth`: the formatter's column limit (default 120).

From the client's capabilities (LSP 3.17, "Client Capabilities"): whether
it shows Markdown in hovers (`hover.contentFormat`), in completion
documentation (`completionItem.documentationFormat`) and in signature help
(`signatureHelp.signatureInformation.documentationFormat`), else the server
sends plain text (a client that names no format there gets plain text:
eglot 1.9 names none for completion and signature help); and whether it shows a diagnostic's `relatedInformation`
(`publishDiagnostics.relatedInformation` for published diagnostics,
`diagnostic.relatedInformation` for pulled ones, or, where a 3.17 client
does not say, the same as for published ones). A diagnostic's help goes in
its `relatedInformation` only for a client known to show it there (VS Code
and the editors built on it, by `clientInfo.name`); every other client gets
it as a last line of the message, where every client shows it (Neovim
declares `relatedInformation` but shows only the message).

Imports only lsprotocol.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lsprotocol import types

MODES = ("auto", "push", "pull", "both")

#: `clientInfo.name`s of the clients known to show a diagnostic's `relatedInformation`:
#: VS Code's client sends its `env.appName` ("Visual Studio Code", "Code - OSS",
#: "VSCodium", "code-server", "Visual Studio Code - Insiders").
SHOWS_RELATED = re.compile(r"\bcode\b|vscodium", re.I)


@dataclass(frozen=True)
class ServerConfig:
    """`push`: publish diagnostics on open and change; `format_width`: the
    formatter's column limit; `hover_markdown`, `completion_markdown`,
    `signature_markdown`: the client shows Markdown there; `related_pushed`, `related_pulled`: it
    declares the `relatedInformation` of published or pulled diagnostics;
    `help_related`: it is known to show that related information (else a
    diagnostic's help ends its message). The defaults (before `initialize`)
    are the richest answers."""

    push: bool = True
    format_width: int = 120
    hover_markdown: bool = True
    completion_markdown: bool = True
    signature_markdown: bool = True
    related_pushed: bool = True
    related_pulled: bool = True
    help_related: bool = True

    @classmethod
    def from_initialize(cls, params: types.InitializeParams) -> "ServerConfig":
        """Read the client's capabilities and `initializationOptions`; bad values fall back to the defaults."""
        opts = params.initialization_options if isinstance(params.initialization_options, dict) else {}
        mode = opts.get("diagnostics", "auto")
        mode = mode if mode in MODES else "auto"
        td = params.capabilities.text_document if params.capabilities else None
        client_pulls = td is not None and td.diagnostic is not None
        push = mode in ("push", "both") or (mode == "auto" and not client_pulls)
        width = opts.get("formatWidth", 120)
        width = width if isinstance(width, int) and not isinstance(width, bool) and 20 <= width <= 400 else 120
        pushed = bool(getattr(getattr(td, "publish_diagnostics", None), "related_information", False))
        # LSP 3.17's pull capabilities have no `relatedInformation` (3.18 adds it): a client
        # that does not say takes it as it does for published diagnostics (VS Code does).
        pulled = getattr(getattr(td, "diagnostic", None), "related_information", None)
        hover = getattr(td, "hover", None)
        item = getattr(getattr(td, "completion", None), "completion_item", None)
        signature = getattr(getattr(td, "signature_help", None), "signature_information", None)
        return cls(push=push, format_width=width,
                   hover_markdown=_prefers_markdown(getattr(hover, "content_format", None)),
                   completion_markdown=_prefers_markdown(getattr(item, "documentation_format", None)),
                   signature_markdown=_prefers_markdown(getattr(signature, "documentation_format", None)),
                   related_pushed=pushed,
                   related_pulled=pushed if pulled is None else bool(pulled),
                   help_related=bool(SHOWS_RELATED.search(_client_name(params))))

    def diagnostic_style(self, pulled: bool) -> tuple[bool, bool]:
        """For published (`pulled` False) or pulled diagnostics: (send
        `relatedInformation`, put the help in the message instead of there)."""
        related = self.related_pulled if pulled else self.related_pushed
        return related, not (related and self.help_related)


def _client_name(params: types.InitializeParams) -> str:
    """The client's `clientInfo.name` (LSP 3.15), or "" when it sends none."""
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name if isinstance(name, str) else ""


def _prefers_markdown(formats) -> bool:
    """The client's formats, most preferred first (LSP 3.17, "MarkupContent"):
    Markdown when it names Markdown before plain text or alone; a client that
    names none gets plain text, which every client shows as it is."""
    if not formats:
        return False
    return types.MarkupKind.Markdown in formats and (
        types.MarkupKind.PlainText not in formats
        or formats.index(types.MarkupKind.Markdown) < formats.index(types.MarkupKind.PlainText))
