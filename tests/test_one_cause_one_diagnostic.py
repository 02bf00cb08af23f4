"""One cause, one diagnostic, for the mistakes that repeat themselves: a run of one bad character
(1,000 NULs) is one E-SYNTAX-003 over the run with its count, as rustc says "character appears N
more times"; brackets nested past the limit, or a call whose head is a call whose head is not a
name (`(((...)))`), are one diagnostic, not one per level."""
from __future__ import annotations

from helpers import SMALL
from sexpgpu_lang import analyze


def diags(text: str):
    res = analyze(text, "one.sx", build_ir=False)
    return [(d.code, text[d.span.start:d.span.end], d.message) for d in res.diagnostics]


def test_a_run_of_nuls_is_one_diagnostic_over_the_run():
    got = diags(SMALL + "\0" * 1000 + "\n")
    assert got == [("E-SYNTAX-003", "\0" * 1000, "unexpected character `U+0000` (1,000 in a row)")]


def test_one_bad_character_and_runs_of_two_kinds():
    assert diags(SMALL + "\0\n") == [("E-SYNTAX-003", "\0", "unexpected character `U+0000`")]
    got = diags(SMALL + "\0\0\x01\x01\x01 \0\n")
    assert [(c, at) for c, at, _ in got] == [("E-SYNTAX-003", "\0\0"), ("E-SYNTAX-003", "\x01\x01\x01"),
                                             ("E-SYNTAX-003", "\0")]


def test_deep_brackets_are_one_diagnostic():
    got = diags(SMALL + "(def x " + "(" * 3000 + ")" * 3000 + ")\n")
    assert [c for c, _, _ in got] == ["E-SYNTAX-005"]
    got = diags(SMALL + "(def x " + "(" * 50 + "1" + ")" * 50 + ")\n")
    assert [(c, at) for c, at, _ in got] == [("E-TYPE-004", "1")]


def test_a_call_of_something_that_is_no_name_is_still_said_once_each():
    got = diags(SMALL + "(def x ((1 2) 3))\n")
    assert [(c, at) for c, at, _ in got] == [("E-TYPE-004", "1")]
    got = diags(SMALL + "(def x ((+ 1 2) 3))\n")   # a call that checks, not a name
    assert [(c, at) for c, at, _ in got] == [("E-TYPE-004", "(+ 1 2)")]
