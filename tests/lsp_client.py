"""Helpers for the end-to-end language-server tests (pytest-lsp, a real client over stdio).

`client_fixture(capabilities)` is the module-scoped fixture every such test
module uses: one server, one `recording_client()`, initialised with a
client's capabilities. `recording_client()` is pytest-lsp's test client
that also keeps every `publishDiagnostics` it receives, in order, so a test
can check that no result for an older version arrives after a newer one.
`Doc` is a document the test edits, kept in step with the server: it sends
`didOpen` and incremental `didChange`s, and applies the edits the server
answers with.
"""
from __future__ import annotations

import asyncio
import sys

import pytest_lsp
from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

#: The server as editors start it through Python: `python -m lsp` (the same as `sexpgpu lsp`).
SERVER = [sys.executable, "-m", "lsp"]
#: How long to wait for a published result, in seconds.
WAIT_S = 30.0


def recording_client() -> LanguageClient:
    """pytest-lsp's client, keeping every published diagnostics notification in `client.published`."""
    client = LanguageClient(converter_factory=default_converter)
    client.published = []  # type: ignore[attr-defined]

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams):
        client.diagnostics[params.uri] = params.diagnostics
        client.published.append(params)  # type: ignore[attr-defined]

    features = dict(DEFAULT_CLIENT_FEATURES)
    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = publish
    register_lsp_features(client, features)
    return client


def client_fixture(capabilities: types.ClientCapabilities, command: list[str] = SERVER):
    """A module-scoped fixture: the server `command` starts, driven by a `recording_client()`
    initialised with `capabilities` and shut down after the module. The client keeps what
    `initialize` answered (`client.server_capabilities`), the negotiated position encoding
    (`client.encoding`) and whether it pulls diagnostics (`client.pulls`). Assign it to the
    name the tests ask for (`client = client_fixture(...)`)."""
    @pytest_lsp.fixture(config=ClientServerConfig(server_command=command, client_factory=recording_client),
                        scope="module")
    async def client(lsp_client: LanguageClient):
        result = await lsp_client.initialize_session(types.InitializeParams(capabilities=capabilities))
        lsp_client.server_capabilities = result.capabilities  # type: ignore[attr-defined]
        lsp_client.encoding = result.capabilities.position_encoding  # type: ignore[attr-defined]
        lsp_client.pulls = (capabilities.text_document is not None  # type: ignore[attr-defined]
                            and capabilities.text_document.diagnostic is not None)
        yield
        await lsp_client.shutdown_session()
    return client


async def published(client: LanguageClient, uri: str, version: int | None = None,
                    after: int = 0) -> types.PublishDiagnosticsParams:
    """The first diagnostics published for `uri` (and `version`, when given) at
    index `after` or later of `client.published`; fails after WAIT_S."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        for p in client.published[after:]:  # type: ignore[attr-defined]
            if p.uri == uri and (version is None or p.version == version):
                return p
        if asyncio.get_running_loop().time() > deadline:
            got = [(p.uri, p.version) for p in client.published]  # type: ignore[attr-defined]
            raise AssertionError(f"no diagnostics for {uri} version {version}; got {got}")
        await asyncio.sleep(0.01)


def position(text: str, needle: str, delta: int = 0, encoding: str = "utf-16") -> types.Position:
    """The LSP position of `needle`'s first occurrence (plus `delta` code points), in
    `encoding` units; lines end at `\n` or `\r\n`."""
    offset = text.index(needle) + delta
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    before = text[start:offset]
    if encoding == "utf-8":
        units = len(before.encode("utf-8"))
    elif encoding == "utf-32":
        units = len(before)
    else:
        units = len(before.encode("utf-16-le")) // 2
    return types.Position(line=line, character=units)


def offset_of(text: str, pos: types.Position) -> int:
    """The code-point offset of a UTF-16 position in `\\n`-separated text."""
    lines = text.split("\n")
    start = sum(len(line) + 1 for line in lines[:pos.line])
    line = lines[pos.line] if pos.line < len(lines) else ""
    units, i = 0, 0
    while i < len(line) and units < pos.character:
        units += 2 if ord(line[i]) > 0xFFFF else 1
        i += 1
    return start + i


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply TextEdits (UTF-16 positions, `\\n` lines) to `text`."""
    spans = sorted(((offset_of(text, e.range.start), offset_of(text, e.range.end), e.new_text) for e in edits),
                   reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


class Doc:
    """A document open in the server, edited by the test."""

    def __init__(self, client: LanguageClient, uri: str, text: str):
        self.client, self.uri, self.text, self.version = client, uri, text, 1
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="sexpgpu", version=1, text=text)))

    @property
    def id(self) -> types.TextDocumentIdentifier:
        return types.TextDocumentIdentifier(uri=self.uri)

    def at(self, needle: str, delta: int = 0) -> types.Position:
        """The position of `needle` (plus `delta`) in the current text."""
        return position(self.text, needle, delta)

    def change(self, old: str, new: str) -> int:
        """Send an incremental change replacing the first `old` with `new`; return the new version."""
        start = self.text.index(old)
        rng = types.Range(start=position(self.text, old), end=position(self.text, old, len(old)))
        return self.edit([types.TextEdit(range=rng, new_text=new)], _local=(start, start + len(old), new))

    def edit(self, edits: list[types.TextEdit], _local=None) -> int:
        """Send TextEdits (as the server gave them) as one incremental change each; return the new version."""
        changes = []
        text = self.text
        for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
            changes.append(types.TextDocumentContentChangePartial(range=e.range, text=e.new_text))
            text = apply_edits(text, [e])
        self.text = text
        self.version += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            content_changes=changes))
        return self.version

    def close(self) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=self.id))
