"""The lexer's stored pattern (`sexpgpu_lang/_lexer_table.py`) is lark's pattern for grammar.lark.

Parsing uses the stored copy so that it never imports lark; these tests fail when
grammar.lark or lark changed without the copy being written again with
`python -c "from sexpgpu_lang.syntax import write_lexer_table; write_lexer_table()"`.
"""
from __future__ import annotations

from pathlib import Path

from helpers import FIXTURE, modules_after
from sexpgpu_lang import _lexer_table, syntax
from sexpgpu_lang.source import SourceText

REGENERATE = 'run: python -c "from sexpgpu_lang.syntax import write_lexer_table; write_lexer_table()"'


def test_the_stored_grammar_is_grammar_lark():
    assert _lexer_table.GRAMMAR == syntax._GRAMMAR.read_text(), REGENERATE


def test_the_stored_pattern_is_larks():
    pattern = syntax.lark_pattern()
    assert pattern is not None
    assert (_lexer_table.PATTERN, _lexer_table.FLAGS) == (pattern.pattern, int(pattern.flags)), REGENERATE


def test_written_again_it_is_the_same_file(tmp_path):
    out = syntax.write_lexer_table(tmp_path / "table.py")
    assert out.read_text(encoding="utf-8") == Path(_lexer_table.__file__).read_text(encoding="utf-8"), REGENERATE


def test_checking_a_clean_file_imports_no_lark():
    mods = modules_after("from sexpgpu_lang import analyze_file\n"
                         f"res = analyze_file({str(FIXTURE)!r})\n"
                         "assert not res.diagnostics, res.diagnostics\n")
    assert "lark" not in mods


def test_a_bad_character_is_still_reported_by_larks_lexer():
    res = syntax.parse(SourceText("(def x 1)\n(def y \x01)\n"))
    assert [(d.code, d.span.start, d.message) for d in res.diagnostics] == [
        ("E-SYNTAX-003", 17, "unexpected character `U+0001`")]
    assert [f.span.start for f in res.forms] == [0, 10]


def test_the_pattern_lexes_as_larks_own_lexer():
    # `lark_pattern` is built from lark's public terminals in its lexer's order; lark's own lexer
    # (`Lark.lex`) must cut and name the same tokens, ties between terminals included.
    text = ('(def x 1) (f 1.5 -2 +3 .5 1e3 -1.5E-2 1. :kw :a-b sym-bol +x -y x1 "s \\" t" [1 2])\n'
            '; a comment\n(g "" :k ::k a:b 1x x.y) \ufeff[]')
    larks = [(t.type, str(t)) for t in syntax._lark().lex(text, dont_ignore=True)]
    pattern, ours, pos = syntax.lark_pattern(), [], 0
    while pos < len(text):
        m = pattern.match(text, pos)
        assert m is not None, text[pos:]
        ours.append((m.lastgroup, m.group(0)))
        pos = m.end()
    assert ours == larks
    assert {kind for kind, _ in ours} >= {"FLOAT", "INT", "KEYWORD", "SYMBOL", "STRING", "COMMENT", "WS", "LPAR",
                                         "LBRACK"}
