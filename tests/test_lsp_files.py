"""What the language server reads for a file is bounded (issue 35, item 3): a run file whose `:tokenizer`
names a FIFO or /dev/zero gets one diagnostic saying what the path is, promptly, and the server goes
on answering; a file nested 100,000 deep and gpt2.sx with 8,000 NULs get their diagnostics. A real
client (pytest-lsp) over stdio; every wait is bounded (`published`: 30 s), so a server that blocks
fails the test instead of hanging it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from lsp_client import Doc, client_fixture, published

client = client_fixture(client_capabilities("neovim@v0.7.0"))
ROOT = Path(__file__).resolve().parents[1]
CASE = (ROOT / "tests" / "cases-files" / "warn-loader-001-tokenizer-larger-than-vocab.sx").read_text()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_fifo_or_dev_zero_tokenizer_is_a_diagnostic_and_the_server_goes_on(client: LanguageClient, tmp_path):
    os.mkfifo(tmp_path / "tok.json")
    for k, (path, what) in enumerate([(str(tmp_path / "tok.json"), "a named pipe (FIFO)"),
                                      ("/dev/zero", "a character device")]):
        doc = Doc(client, (tmp_path / f"run{k}.sx").as_uri(), CASE.replace("data/tokenizer-24.json", path))
        got = (await published(client, doc.uri, 1)).diagnostics
        # (the help follows the message for a client that is not known to show related information)
        assert [(d.code, d.message.split("\nhelp: ")[0]) for d in got] == [
            ("E-LOADER-001", f"`text-tokens`'s tokenizer `{path}` is {what}, not a regular file; nothing is read from it")]
        hover = await client.text_document_hover_async(types.HoverParams(text_document=doc.id, position=doc.at("vocab vocab", 7)))
        assert hover is not None and "vocab" in str(hover.contents)
        doc.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_file_nested_100000_deep_gets_its_diagnostics(client: LanguageClient, tmp_path):
    doc = Doc(client, (tmp_path / "deep.sx").as_uri(), "(def x " + "(" * 100_000 + ")" * 100_001 + "\n")
    codes = [d.code for d in (await published(client, doc.uri, 1)).diagnostics]
    assert "E-SYNTAX-005" in codes
    doc.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_gpt2_with_8000_nuls_gets_its_diagnostics(client: LanguageClient, tmp_path):
    text = (ROOT / "examples" / "gpt2.sx").read_text()
    at = text.index("(defmodel")
    doc = Doc(client, (tmp_path / "gpt2.sx").as_uri(), text[:at] + "\x00" * 8000 + text[at:])
    got = (await published(client, doc.uri, 1)).diagnostics
    nuls = [d for d in got if d.code == "E-SYNTAX-003"]
    assert len(nuls) == 1 and nuls[0].message.startswith("unexpected character `U+0000` (8,000 in a row)"), nuls
    assert (nuls[0].range.end.character - nuls[0].range.start.character == 8000
            or nuls[0].range.end.line > nuls[0].range.start.line)   # the whole run
    doc.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_reward_s_python_file_is_read_never_imported(client: LanguageClient, tmp_path):
    """`:reward`'s file is parsed with `ast` (a misspelt function is E-REWARD-002) and never imported:
    its import would write IMPORTED beside it (tests/test_rewards.py checks lint and explain)."""
    from test_rewards import BOOBY_TRAP, small_text
    (tmp_path / "arith_reward.py").write_text(BOOBY_TRAP)
    text = small_text().set("defgenerate :reward :function", '"scor"')
    doc = Doc(client, (tmp_path / "run.sx").as_uri(), text)
    got = (await published(client, doc.uri, 1)).diagnostics
    assert [(d.code, d.message.split("\nhelp: ")[0]) for d in got] == [
        ("E-REWARD-002", "arith_reward.py defines no top-level `scor`; did you mean `score`?")]
    hover = await client.text_document_hover_async(types.HoverParams(text_document=doc.id,
                                                                     position=doc.at("(field b :reward)", 9)))
    assert hover is not None and "reward" in str(hover.contents)
    assert not (tmp_path / "IMPORTED").exists()
    doc.close()
