"""The server checks off its request thread, and a newer edit supersedes an older check.

End to end over stdio (pytest-lsp, Neovim 0.7's capabilities: diagnostics are published). A
"big" version is the fixture followed by `BIG_DEFS` `def`s (near the token cap's order: its check
takes seconds, against `lsp.handlers.FRESH_WAIT_S` of waiting). The tests assert the order of
events the client sees (answers against published diagnostics), never a time.

In-process, the parts: a check cancelled between its forms leaves the document's `CheckCache`
giving what a cold check gives, and the store's check of a version a newer one superseded gives
no analysis.
"""
from __future__ import annotations

import asyncio
import itertools

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient, client_capabilities

from helpers import fixture_text
from lsp.diagnostics import MEMORY_USAGE
from lsp_client import Doc, client_fixture, published
from sexpgpu_lang import SourceText, analyze
from sexpgpu_lang.cancel import CancelToken, Cancelled
from sexpgpu_lang.check import CheckCache, check
from sexpgpu_lang.syntax import parse

#: The end-to-end tests share one server (the module-scoped fixture) and its event loop.
on_module_loop = pytest.mark.asyncio(loop_scope="module")

_uris = (f"file:///work/async-{i}.sx" for i in itertools.count())

#: `def`s appended to make a version whose check takes seconds (5 tokens each, 30% of TOKEN_LIMIT).
BIG_DEFS = 24_000
BIG_TAIL = "".join(f"(def pad{i} {i})\n" for i in range(BIG_DEFS))

client = client_fixture(client_capabilities("neovim@v0.7.0"))


def mine(client: LanguageClient, uri: str, after: int) -> list[types.PublishDiagnosticsParams]:
    return [p for p in client.published[after:] if p.uri == uri]  # type: ignore[attr-defined]


async def opened_and_checked(client: LanguageClient) -> Doc:
    doc = Doc(client, next(_uris), fixture_text())
    assert (await published(client, doc.uri, 1)).diagnostics == ()
    return doc


@on_module_loop
async def test_hover_and_completion_during_a_long_check_answer_from_the_last_one(client: LanguageClient):
    doc = await opened_and_checked(client)
    first = len(client.published)  # type: ignore[attr-defined]
    big = doc.change("(model student)\n", "(model student)\n" + BIG_TAIL)   # a check of seconds starts
    hover, completion, signature = await asyncio.gather(   # sent at once
        client.text_document_hover_async(types.HoverParams(text_document=doc.id, position=doc.at("(def dim", 5))),
        client.text_document_completion_async(types.CompletionParams(
            text_document=doc.id, position=doc.at("(getf state :stride)", 13))),
        client.text_document_signature_help_async(types.SignatureHelpParams(
            text_document=doc.id, position=doc.at("[0] :axis 1)"))))
    assert mine(client, doc.uri, first) == [], "the answers came after the long check's diagnostics"
    # Answered from the check of version 1, whose text before the edit is the same: right ranges.
    assert "dim" in hover.contents.value and hover.range.start == doc.at("(def dim", 5)
    assert {":row", ":stride"} <= {i.label for i in completion.items} and completion.is_incomplete
    assert signature.signatures[signature.active_signature].label == "(take x indices :axis 0)"
    got = await published(client, doc.uri, big)
    assert got.diagnostics == () and [p.version for p in mine(client, doc.uri, first)] == [big]
    doc.close()


@on_module_loop
async def test_a_position_in_the_text_edited_since_the_last_check_gets_an_empty_answer(client: LanguageClient):
    doc = await opened_and_checked(client)
    first = len(client.published)  # type: ignore[attr-defined]
    big = doc.change("(model student)\n", "(model student)\n" + BIG_TAIL)
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc.id, position=doc.at("(def pad7 7)", 6)))
    assert hover is None and mine(client, doc.uri, first) == []
    await published(client, doc.uri, big)
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc.id, position=doc.at("(def pad7 7)", 6)))
    assert "pad7" in hover.contents.value   # from its own check, once finished
    doc.close()


@on_module_loop
async def test_a_request_waiting_for_a_long_check_is_cancelled_at_once(client: LanguageClient):
    doc = await opened_and_checked(client)
    first = len(client.published)  # type: ignore[attr-defined]
    big = doc.change("(model student)\n", "(model student)\n" + BIG_TAIL)
    # Symbols are of the whole document: the request waits for its version's check.
    symbols = asyncio.ensure_future(client.protocol.send_request_async(   # (pytest-lsp sends when the task runs)
        types.TEXT_DOCUMENT_DOCUMENT_SYMBOL, types.DocumentSymbolParams(text_document=doc.id), msg_id="symbols-1"))
    await client.protocol.send_request_async(MEMORY_USAGE, {})   # the server has read the request (in order)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="symbols-1"))
    with pytest.raises(JsonRpcException) as raised:
        await symbols
    assert raised.value.code == types.LSPErrorCodes.RequestCancelled
    assert mine(client, doc.uri, first) == [], "the cancellation was answered after the check"
    await published(client, doc.uri, big)
    doc.close()


@on_module_loop
async def test_a_newer_edit_supersedes_the_check_of_an_older_version(client: LanguageClient):
    doc = await opened_and_checked(client)
    first = len(client.published)  # type: ignore[attr-defined]
    v2 = doc.change("(model student)\n", "(model student)\n" + BIG_TAIL)
    symbols = asyncio.ensure_future(client.text_document_document_symbol_async(
        types.DocumentSymbolParams(text_document=doc.id)))
    await client.protocol.send_request_async(MEMORY_USAGE, {})   # the server has read the request
    v3 = doc.change("(def pad0 0)", "(def pad0 oops)")     # while version 2 is being checked
    with pytest.raises(JsonRpcException) as raised:          # version 2's answer will never be
        await symbols
    assert raised.value.code == types.LSPErrorCodes.ContentModified
    got = await published(client, doc.uri, v3)
    assert [d.code for d in got.diagnostics] == ["E-NAME-001"]
    # Version 2's check was cancelled: its diagnostics never arrive, before or after version 3's.
    assert [p.version for p in mine(client, doc.uri, first)] == [v3]
    assert v2 < v3
    again = await client.text_document_hover_async(types.HoverParams(text_document=doc.id,
                                                                      position=doc.at("(def pad0", 5)))
    assert "pad0" in again.contents.value
    assert [p.version for p in mine(client, doc.uri, first)] == [v3]
    doc.close()


# --------------------------------------------------------------------------- in process

class _CancelAfter(CancelToken):
    """A token that cancels itself at its `n`th look."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def check(self) -> None:
        self.n -= 1
        if self.n <= 0:
            self.cancel()
        super().check()


def test_a_cancelled_check_leaves_a_cache_that_gives_the_cold_result():
    text = fixture_text() + "".join(f"(def pad{i} (+ {i} 1))\n" for i in range(600))
    broken = text.replace("(argmax (model row))", "(argmx (model row))")
    cache = CheckCache()
    check(parse(SourceText(text, "a.sx")), cache=cache, build_ir=False)
    for n in (1, 2, 3, 5, 8):
        with pytest.raises(Cancelled):
            check(parse(SourceText(broken, "a.sx")), cache=cache, build_ir=False, cancel=_CancelAfter(n))
    warm = check(parse(SourceText(broken, "a.sx")), cache=cache, build_ir=False)
    cold = analyze(broken, "a.sx", build_ir=False)
    assert [(d.code, d.span) for d in warm.diagnostics] == [(d.code, d.span) for d in cold.diagnostics]
    assert [d.code for d in warm.diagnostics] == ["E-NAME-001"]


def test_a_parse_stops_between_pieces_once_cancelled():
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        parse(SourceText(BIG_TAIL, "a.sx"), token)
    assert parse(SourceText("(def a 1)\n", "a.sx"), CancelToken()).forms


def test_the_store_cancels_the_check_of_a_superseded_version():
    from lsp.documents import DocumentStore
    from lsp.convert import UTF16
    store = DocumentStore()
    doc = store.open(types.TextDocumentItem(uri="file:///big.sx", language_id="sexpgpu", version=1,
                                            text=fixture_text() + BIG_TAIL))
    old = store.start(doc)
    change = types.TextDocumentContentChangeWholeDocument(text=fixture_text())
    new = store.change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=doc.uri, version=2), content_changes=[change]), UTF16)
    assert old.result() is None, "the check of version 1 ran to its end after version 2 arrived"
    latest = store.start(new).result()
    assert latest.document is new and store.finished(doc.uri) is latest
    assert store.start(new) is not None and store.analysis(doc.uri) is latest
