"""`lsp/convert.py`: offsets to LSP positions and back in each encoding, and the LSP records."""
from __future__ import annotations

import pytest
from lsprotocol import types

from lsp.convert import UTF8, UTF16, UTF32, PositionMap, apply_change, to_lsp_diagnostic, to_lsp_semantic_tokens
from sexpgpu_lang import analyze, ide
from sexpgpu_lang.source import SourceText

TEXT = 'ab\r\n"é😀\t→" x\rlast\n\x0cform feed\u2028same line\n'


def pos(line, character):
    return types.Position(line=line, character=character)


@pytest.mark.parametrize("encoding", [UTF8, UTF16, UTF32])
def test_round_trip_and_agreement_with_the_front_end(encoding):
    pm = PositionMap(TEXT, encoding)
    src = SourceText(TEXT)
    for offset in range(len(TEXT) + 1):
        p = pm.position(offset)
        line, col = src.line_col(offset)
        assert p.line == line  # one line-break rule: \n, \r\n, \r and nothing else
        if TEXT[offset - 1:offset + 1] != "\r\n":
            assert pm.offset(p) == offset


def test_units_of_each_encoding():
    x_at = TEXT.index("x")
    assert PositionMap(TEXT, UTF32).position(x_at) == pos(1, 7)
    assert PositionMap(TEXT, UTF16).position(x_at) == pos(1, 8)   # the emoji is two units
    assert PositionMap(TEXT, UTF8).position(x_at) == pos(1, 13)   # é 2, emoji 4, arrow 3
    assert PositionMap(TEXT, "latin-1").encoding == UTF16  # unknown: LSP's default


def test_positions_out_of_range_clamp():
    pm = PositionMap(TEXT, UTF16)
    assert pm.offset(pos(0, 99)) == 2                      # past the line's end: the line's end
    assert pm.offset(pos(99, 0)) == len(TEXT)              # past the last line: the end
    assert pm.offset(pos(1, 3)) == TEXT.index("😀")        # inside the surrogate pair: the character's start
    assert pm.position(TEXT.index("\r\n") + 1) == pos(0, 2)  # between CR and LF: the line's end


def test_apply_change():
    rng = types.Range(start=pos(1, 2), end=pos(1, 4))      # the emoji, in UTF-16 units
    change = types.TextDocumentContentChangePartial(range=rng, text="!")
    assert apply_change(TEXT, change, UTF16) == TEXT.replace("😀", "!")
    assert apply_change(TEXT, types.TextDocumentContentChangeWholeDocument(text="new"), UTF16) == "new"


def test_diagnostic_record():
    text = "(def a 1)\n(def b (+ a c))\n"
    res = analyze(text)
    pm = PositionMap(text)
    lsp = [to_lsp_diagnostic(pm, "file:///x.sx", d) for d in res.diagnostics]
    unbound = next(d for d in lsp if d.code == "E-NAME-001")
    assert unbound.range == types.Range(start=pos(1, 12), end=pos(1, 13))
    assert unbound.code_description.href.endswith("docs/errors.md#e-name-001")
    assert unbound.source == "sexpgpu" and unbound.severity == types.DiagnosticSeverity.Error


def test_semantic_token_lengths_in_units():
    text = '(def s "😀")\n(def t 1)\n'
    ix = ide.index(analyze(text))
    data = to_lsp_semantic_tokens(PositionMap(text, UTF16), ide.semantic_tokens(ix)).data
    tokens = [data[i:i + 5] for i in range(0, len(data), 5)]
    string = tokens[2]
    assert string[:3] == [0, 2, 4]                          # `"😀"` is 4 UTF-16 units
    assert tokens[3][:2] == [1, 1]                          # next line, relative line and absolute start
