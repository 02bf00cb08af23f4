"""Positions end to end: the encoding each client negotiates, on a line with
accents, an emoji and tabs, in a file with CRLF line endings.

Three real clients, one server each: Neovim 0.11's capabilities (it offers
UTF-8 first, and pulls diagnostics), Emacs 29's (UTF-32, push), and a
client that offers nothing (UTF-16, LSP's default, push), the last one
through the `sexpgpu lsp` command itself.
"""
from __future__ import annotations

import sys

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from helpers import fixture_text
from lsp_client import client_fixture, position, published

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

URI = "file:///work/positions.sx"
LINE = '(def label "café 😀\t→")\t(def big (* vocub dim))'
TEXT = fixture_text().replace("(def dim 64)\n", "(def dim 64)\n" + LINE + "\n").replace("\n", "\r\n")

utf8_client = client_fixture(client_capabilities("neovim@v0.11.0"))
utf32_client = client_fixture(client_capabilities("emacs@v29.1"))
utf16_client = client_fixture(types.ClientCapabilities(), [sys.executable, "-m", "sexpgpu_cli.main", "lsp"])


@pytest.fixture(params=["utf-8", "utf-32", "utf-16"])
def client(request) -> LanguageClient:
    return request.getfixturevalue(request.param.replace("-", "") + "_client")


async def diagnostics(client: LanguageClient, uri: str, version: int):
    """Pulled when the client pulls (the server then publishes nothing), else published."""
    if client.pulls:
        report = await client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri)))
        return report.items
    return (await published(client, uri, version)).diagnostics


async def test_ranges_hover_and_edits_in_the_negotiated_encoding(client: LanguageClient):
    enc = client.encoding
    assert enc == {"utf-8": "utf-8", "utf-32": "utf-32"}.get(enc, "utf-16")
    uri = URI.replace(".sx", f"-{enc}.sx")
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="sexpgpu", version=1, text=TEXT)))
    doc = types.TextDocumentIdentifier(uri=uri)

    [d] = await diagnostics(client, uri, 1)
    assert d.code == "E-NAME-001"
    start = position(TEXT, "vocub", 0, enc)
    assert d.range == types.Range(start=start, end=position(TEXT, "vocub", 5, enc))
    assert start.character == {"utf-8": 41, "utf-16": 36, "utf-32": 35}[enc]

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc, position=position(TEXT, "dim))", 1, enc)))
    assert "dim: [] i32" in hover.contents.value
    assert hover.range.start == position(TEXT, "dim))", 0, enc)

    [fix] = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc, range=d.range, context=types.CodeActionContext(diagnostics=[d])))
    [edit] = fix.edit.changes[uri]
    assert edit.range == d.range and edit.new_text == "vocab"

    # the fix, sent as an incremental change in the client's units, leaves a clean file
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(range=edit.range, text=edit.new_text)]))
    assert list(await diagnostics(client, uri, 2)) == []

    # a line break typed at the end of the emoji line (between CR and LF) stays one line break
    end_of_line = position(TEXT, "dim))\r\n", 5, enc)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=3),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=end_of_line, end=end_of_line), text="\r\n(def more (+ dim 1))")]))
    assert list(await diagnostics(client, uri, 3)) == []
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc, position=types.Position(line=end_of_line.line + 1, character=6)))
    assert "more: [] i32" in hover.contents.value
    if client.pulls:  # a client that pulls is not sent diagnostics as well
        assert [p for p in client.published if p.uri == uri] == []
