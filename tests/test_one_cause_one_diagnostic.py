"""One cause, one diagnostic, for the mistakes that repeat themselves: a run of one bad character
(1,000 NULs) is one E-SYNTAX-003 over the run with its count, as rustc says "character appears N
more times"; brackets nested past the limit, or a call whose head is a call whose head is not a
name (`(((...)))`), are one diagnostic, not one per level."""
from __future__ import annotations

from helpers import ERRORS_DOC, SMALL, check
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


def test_an_unbound_callee_of_a_call_is_one_diagnostic():
    # `f` is not defined: that is the cause; the call of its (error) value is not E-TYPE-004 too.
    check(SMALL + """\
(def x ((f 1)))
;;       ^ E-NAME-001
(def y ((f ((g 2) (h 3))) 4))
;;       ^ E-NAME-001
;;           ^ E-NAME-001
;;                 ^ E-NAME-001
""")


def test_nested_unbound_callees_are_one_diagnostic_each():
    got = diags(SMALL + "(def x " + "((f " * 30 + ")" * 60 + ")\n")
    assert [c for c, _, _ in got] == ["E-NAME-001"] * 30   # one per `f`, none per level


def test_an_unclosed_list_of_lists_at_the_end_is_only_its_syntax_error():
    # `((a` is a list: not E-FORM-004 ("a top-level form must be a list"), only never closed.
    check(SMALL + """\
((a
;;^ E-SYNTAX-001 (from column 1)
""")
    check(SMALL + """\
((((
;;^ E-SYNTAX-001 (from column 1)
""")


def test_an_undefined_name_is_reported_at_each_use_and_a_bad_def_once():
    # docs/errors.md's preamble states both rules; this is its behaviour.
    check(SMALL + """\
(def dimm 64)
(def a (+ dim 1))
;;        ^^^ E-NAME-001
(def b (* dim 2))
;;        ^^^ E-NAME-001
(def c (foo 1))
;;      ^^^ E-NAME-001
(def d (+ c 1))
(def e (* c c))
""")
    preamble = " ".join(ERRORS_DOC.read_text().split("\n## ", 1)[0].split())
    assert "A name that nothing defines is reported at each place that uses it" in preamble
    assert "not reported again at every" not in preamble


def test_one_bad_character_apart_is_capped_per_form():
    # NULs apart: the first MAX_SAME_CHARACTER places one by one, the rest summed in one more at
    # the first of them; the count starts again at the next form (a `(` in column 1).
    from sexpgpu_lang.syntax import MAX_SAME_CHARACTER as N
    line = "(def x 1 " + "\0 " * (N + 3) + ")"
    marks = "".join(f";;{' ' * (7 + 2 * k)}^ E-SYNTAX-003\n" for k in range(N + 1))
    check(SMALL + line + "\n" + marks + """\
(def y 2 \0 \0 )
;;       ^ E-SYNTAX-003
;;         ^ E-SYNTAX-003
""")
    got = diags(SMALL + line + "\n")
    assert [m for _, _, m in got] == ["unexpected character `U+0000`"] * N + [
        "unexpected character `U+0000`, and 2 more after it before the next form"]
    got = diags(SMALL + "\0 " * 1000 + "\n")
    assert len(got) == N + 1 and got[-1][2] == "unexpected character `U+0000`, and 989 more after it before the next form"
    # runs still count as one place each, and another character has its own count
    got = diags(SMALL + "(def z 1 " + "\0\0 " * N + "\x01 \0\0\0 )\n")
    assert [(at, m) for _, at, m in got][-3:] == [
        ("\0\0", "unexpected character `U+0000` (2 in a row)"), ("\x01", "unexpected character `U+0001`"),
        ("\0", "unexpected character `U+0000`, and 2 more after it before the next form")]
