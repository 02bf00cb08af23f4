"""Lexer recovery is linear: after a character that starts no token the
lexer resumes right after it instead of lexing the whole text again.

The work is counted, not timed: every match the lexer's pattern yields is counted with
the characters it covers (benchmarks/reliability.py times it). The tokens, comments and
diagnostics stay exactly those of lark's lexer run again on the text with each bad
character blanked out, the recovery the lexer used before.
"""
from __future__ import annotations

import random
import re

from sexpgpu_lang import syntax
from sexpgpu_lang.source import SourceText

CLEAN = ("(defmodel student\n  :params {w [64 64] b [64]}\n  (+ (matmul x w) b)) ; a comment\n"
         "(def width 64)\n(run :steps 10 :seed 0 :name \"trial\")\n")


class _Counting:
    """A compiled pattern whose `finditer` counts the matches it yields and the characters they cover."""

    def __init__(self, pattern: re.Pattern):
        self.pattern = pattern
        self.matches = 0
        self.chars = 0

    def finditer(self, text, pos=0):
        for m in self.pattern.finditer(text, pos):
            self.matches += 1
            self.chars += m.end() - m.start()
            yield m


def _counted_lex(text: str, monkeypatch) -> tuple[_Counting, list]:
    counter = _Counting(syntax._scanner()[0])
    monkeypatch.setattr(syntax, "_scanner", lambda: (counter,))
    diags: list = []
    syntax._lex(text, diags)
    monkeypatch.undo()
    return counter, diags


def _with_nuls(size: int, nuls: int, seed: int = 0) -> str:
    text = (CLEAN * (size // len(CLEAN) + 1))[:size]
    rng = random.Random(seed)
    chars = list(text)
    for i in rng.sample(range(len(chars)), nuls):
        chars[i] = "\x00"
    return "".join(chars)


def test_a_thousand_nuls_in_100_kb_are_scanned_about_once(monkeypatch):
    text = _with_nuls(100_000, 1000)
    counter, diags = _counted_lex(text, monkeypatch)
    assert sum(d.code == "E-SYNTAX-003" for d in diags) > 900   # (some land in comments)
    # Each character is covered by at most one match that is kept, plus at most one match
    # found (and dropped) past each bad character; lexing again per bad character would
    # cover about 1000 x 100,000 characters.
    assert counter.chars <= 2 * len(text)


def test_the_work_grows_linearly_with_the_size(monkeypatch):
    small, _ = _counted_lex(_with_nuls(20_000, 200), monkeypatch)
    large, _ = _counted_lex(_with_nuls(100_000, 1000), monkeypatch)
    # Five times the text and five times the bad characters: about five times the work
    # (it was twenty-five times).
    assert large.chars <= 6 * small.chars
    assert large.matches <= 6 * small.matches


def _lark_reference(text: str):
    """The old recovery: lark's lexer over the whole text, again after each bad character
    (blanked out) or unterminated string (closed in place, or blanked when it cannot be)."""
    from lark.exceptions import UnexpectedCharacters
    lark = syntax._lark()
    masked, diags = text, []
    while True:
        try:
            toks = [(t.type, str(t), t.start_pos, t.line, t.column, t.end_pos)
                    for t in lark.lex(masked, dont_ignore=True)]
            return toks, diags
        except UnexpectedCharacters as e:
            pos = e.pos_in_stream
            if masked[pos] == '"':
                end = masked.find("\n", pos)
                end = len(masked) if end < 0 else end
                while end > pos + 1 and masked[end - 1] == "\r":
                    end -= 1
                diags.append((pos, end))
                if end - pos >= 2 and masked[end - 2] != "\\":
                    masked = masked[:end - 1] + '"' + masked[end:]
                else:
                    masked = masked[:pos] + " " * (end - pos) + masked[end:]
            else:
                diags.append((pos, pos + 1))
                masked = masked[:pos] + " " + masked[pos + 1:]


def _runs_merged(text: str, spans: list) -> list:
    """`spans` (the reference's, one per bad character) with each run of one bad character merged
    into one span, as the front end reports such a run: one diagnostic."""
    out: list = []
    for s, e in spans:
        if out and e == s + 1 and out[-1][1] == s and text[out[-1][0]] == text[s] != '"' \
                and all(text[i] == text[s] for i in range(*out[-1])):
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def test_recovery_gives_larks_tokens_on_random_texts():
    rng = random.Random(23)
    alphabet = list("()[] \n\t\r:;\"\\ab0912.+-e") + ["\x00", "\x01", "\u2028", "\x7f", "\ufeff", ","]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60)))
        diags: list = []
        tokens, comments = syntax._lex(text, diags)
        want, want_diags = _lark_reference(text)
        got = [(t.type, t.value, t.start_pos, t.line, t.column, t.end_pos) for t in tokens]
        kept = [w for w in want if w[0] not in ("WS", "COMMENT")]
        # `_glued_numbers` then drops atoms glued to a number (reported apart): compare the rest.
        assert [g for g in got] == [w for w in kept if any(w[2] == g[2] for g in got)], repr(text)
        assert [(c.start, c.end) for c in comments] == [(w[2], w[5]) for w in want if w[0] == "COMMENT"], repr(text)
        bad = [(d.span.start, d.span.end) for d in diags if "not a number" not in d.message]
        assert bad == _runs_merged(text, want_diags), repr(text)


def test_an_unterminated_string_is_closed_at_its_line_end():
    res = syntax.parse(SourceText('(def a "abc\n(def b 1)\n'))
    assert [(d.code, d.span.start, d.span.end) for d in res.diagnostics] == [("E-SYNTAX-003", 7, 11)]
    assert [f.span.start for f in res.forms] == [0, 12]


class _CountingSearch:
    """A compiled pattern whose `finditer` counts the searches started and the characters
    each passes over (from where it starts, or the last match it yielded, to the end of the
    next match, or of the text when none is left): the search through a run of bad
    characters is work a count of the matches alone does not see."""

    def __init__(self, pattern: re.Pattern):
        self.pattern = pattern
        self.searches = 0
        self.searched = 0

    def finditer(self, text, pos=0):
        self.searches += 1
        last = pos
        for m in self.pattern.finditer(text, pos):
            self.searched += m.end() - last
            last = m.end()
            yield m
        self.searched += len(text) - last


def _searched(text: str, monkeypatch) -> tuple[_CountingSearch, list]:
    counter = _CountingSearch(syntax._scanner()[0])
    monkeypatch.setattr(syntax, "_scanner", lambda: (counter,))
    diags: list = []
    syntax._lex(text, diags)
    monkeypatch.undo()
    return counter, diags


def test_a_run_of_bad_characters_is_searched_through_once(monkeypatch):
    # Issue 35, item 10: a run of 8,000 NULs took 35 s, each NUL starting a new search that
    # passed over the rest of the run. Now the characters before the match a search finds
    # are reported from that one search.
    for where in ("middle", "end"):
        counts = {}
        for k in (1000, 8000):
            run = "\x00" * k
            text = CLEAN + run + CLEAN if where == "middle" else CLEAN + run
            counter, diags = _searched(text, monkeypatch)
            bad = [(d.span.start, d.span.end, d.message) for d in diags if d.code == "E-SYNTAX-003"]
            assert bad == [(len(CLEAN), len(CLEAN) + k, f"unexpected character `U+0000` ({k:,} in a row)")]
            assert counter.searched <= 2 * len(text), (where, k, counter.searched)
            counts[k] = counter.searches
        # The number of searches does not grow with the run's length.
        assert counts[8000] == counts[1000], (where, counts)


def test_bad_characters_before_an_unterminated_string_and_after_it(monkeypatch):
    # A `"` inside a run of bad characters: the run before it is reported as one, the string
    # is closed at its line's end, and lexing goes on on the next line.
    text = '(a)\x00\x00"xy\x00\n\x01(b)'
    counter, diags = _searched(text, monkeypatch)
    assert [(d.span.start, d.span.end) for d in diags] == [(3, 5), (5, 9), (10, 11)]
    tokens, _ = syntax._lex(text, [])
    assert [(t.type, t.value) for t in tokens] == [("LPAR", "("), ("SYMBOL", "a"), ("RPAR", ")"),
                                                   ("STRING", '"xy"'), ("LPAR", "("), ("SYMBOL", "b"),
                                                   ("RPAR", ")")]
