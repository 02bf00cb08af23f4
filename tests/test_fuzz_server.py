"""Fuzzing the language server through a real client (pytest-lsp over stdio, `python -m lsp`).

Random sequences of opens, incremental edits (random ranges replaced with
pieces of run files, brackets, odd Unicode), closes and requests at random
positions, sent without waiting for diagnostics in between. Afterwards:
the server is alive, every request got an answer (none timed out, none
failed), no handler logged an internal error, and the last diagnostics
published for each open document are those of its last version.
"""
from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from pygls.exceptions import JsonRpcException
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from lsp_client import Doc, client_fixture, position, published
from lsp.documents import LOCAL, uri_to_path
from sexpgpu_lang import analyze
from test_fuzz_front_end import TOKENS, seeds

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

#: Seconds one request may take before the test calls it unanswered.
ANSWER_S = 20.0
#: Inserted text: no `\r` or other line breaks LSP does not count (the test's own copy of
#: the text must agree with the server's), no lone surrogates (not valid JSON text).
PIECES = TOKENS + ["(", ")", "[", "]", "\n", "  ", "é", "\U0001F600", "\u0301", "\t", "\ufeff", "x" * 30, ""]

_uris = (f"file:///work/fuzz-{i}.sx" for i in itertools.count())


client = client_fixture(client_capabilities("neovim@v0.7.0"))


def clean_text(text: str) -> str:
    """`text` with the line breaks LSP and `Doc` might count differently made plain `\\n`."""
    for ch in ("\r\n", "\r", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85"):
        text = text.replace(ch, "\n")
    return text


def random_edit(rng: random.Random, doc: Doc) -> int:
    """Replace a random range of `doc` (often empty, sometimes long) with random text."""
    n = len(doc.text)
    a = rng.randint(0, n)
    b = min(n, a + rng.choice([0, 0, 1, 2, 5, 30, 400]))
    if rng.random() < 0.3:
        s = rng.choice(seeds())
        i = rng.randint(0, len(s))
        new = clean_text(s[i:i + rng.randint(1, 200)])
    else:
        new = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 4)))
    rng_ = types.Range(start=position(doc.text, "", a), end=position(doc.text, "", b))
    return doc.edit([types.TextEdit(range=rng_, new_text=new)])


def requests(client: LanguageClient, doc: Doc, pos: types.Position, span: types.Range):
    """Every request the server answers, at `pos` (or over `span`)."""
    tid = doc.id
    opts = types.FormattingOptions(tab_size=2, insert_spaces=True)
    return [
        client.text_document_hover_async(types.HoverParams(text_document=tid, position=pos)),
        client.text_document_completion_async(types.CompletionParams(text_document=tid, position=pos)),
        client.text_document_signature_help_async(types.SignatureHelpParams(text_document=tid, position=pos)),
        client.text_document_definition_async(types.DefinitionParams(text_document=tid, position=pos)),
        client.text_document_references_async(types.ReferenceParams(
            text_document=tid, position=pos, context=types.ReferenceContext(include_declaration=True))),
        client.text_document_document_highlight_async(types.DocumentHighlightParams(text_document=tid, position=pos)),
        client.text_document_prepare_rename_async(types.PrepareRenameParams(text_document=tid, position=pos)),
        client.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=tid)),
        client.text_document_folding_range_async(types.FoldingRangeParams(text_document=tid)),
        client.text_document_semantic_tokens_full_async(types.SemanticTokensParams(text_document=tid)),
        client.text_document_inlay_hint_async(types.InlayHintParams(text_document=tid, range=span)),
        client.text_document_formatting_async(types.DocumentFormattingParams(text_document=tid, options=opts)),
        client.text_document_range_formatting_async(types.DocumentRangeFormattingParams(
            text_document=tid, range=span, options=opts)),
        client.text_document_code_action_async(types.CodeActionParams(
            text_document=tid, range=span, context=types.CodeActionContext(diagnostics=[]))),
        client.text_document_diagnostic_async(types.DocumentDiagnosticParams(text_document=tid)),
    ]


async def answered(futures) -> None:
    """Wait for every request; an error answer or a timeout fails the test, but LSP's
    `ContentModified` (3.17, "Implementation Considerations"): a request that needs its own
    version's check (symbols, folding, semantic tokens, code actions ...) whose document a later
    edit changed is answered so, as the specification allows."""
    for fut in futures:
        try:
            await asyncio.wait_for(fut, ANSWER_S)
        except JsonRpcException as e:
            if e.code != types.LSPErrorCodes.ContentModified:
                raise AssertionError(f"a request was not answered: {type(e).__name__}: {e}") from e
        except Exception as e:
            raise AssertionError(f"a request was not answered: {type(e).__name__}: {e}") from e


@pytest.mark.parametrize("seed", range(6))
async def test_random_opens_edits_closes_and_requests(client: LanguageClient, seed: int):
    rng = random.Random(seed)
    texts = [clean_text(t) for t in seeds()]
    open_docs: list[Doc] = []
    closed: list[str] = []
    pending = []
    for _ in range(80):
        roll = rng.random()
        if not open_docs or roll < 0.08:
            open_docs.append(Doc(client, next(_uris), rng.choice(texts)))
        elif roll < 0.13 and len(open_docs) > 1:
            doc = open_docs.pop(rng.randrange(len(open_docs)))
            doc.close()
            closed.append(doc.uri)
        elif roll < 0.75:
            doc = rng.choice(open_docs)
            for _ in range(rng.randint(1, 5)):
                random_edit(rng, doc)
        else:
            doc = rng.choice(open_docs)
            a, b = sorted((rng.randint(0, len(doc.text)), rng.randint(0, len(doc.text))))
            pos = position(doc.text, "", a)
            span = types.Range(start=pos, end=position(doc.text, "", b))
            pending += [asyncio.ensure_future(c) for c in requests(client, doc, pos, span)]
            await asyncio.sleep(0)   # let them go out now, between this edit and the next
    await answered(pending)
    for doc in open_docs:
        got = await published(client, doc.uri, doc.version)
        want = analyze(doc.text, uri_to_path(doc.uri), LOCAL, build_ir=False)   # as the server reads a file: URI
        assert sorted(d.code for d in got.diagnostics) == sorted(d.code for d in want.diagnostics), doc.text
        last = [p for p in client.published if p.uri == doc.uri][-1]  # type: ignore[attr-defined]
        assert last.version == doc.version
    errors = [m.message for m in client.log_messages if "internal error" in m.message]
    assert not errors, errors[:3]
    # still alive and answering
    assert await asyncio.wait_for(client.text_document_document_symbol_async(
        types.DocumentSymbolParams(text_document=open_docs[0].id)), ANSWER_S) is not None
    for doc in open_docs:
        doc.close()
