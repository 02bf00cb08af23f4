"""The canonical layout (`sexpgpu_lang.format`): idempotent, keeps every form and comment."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ROOT, fixture_text
from sexpgpu_lang.check import identity
from sexpgpu_lang.format import Layout, format_range, format_text
from sexpgpu_lang.source import SourceText
from sexpgpu_lang.syntax import parse

CASES = sorted((ROOT / "tests" / "cases").glob("*.sx")) + sorted((ROOT / "tests" / "cases-files").glob("*.sx"))
EXAMPLES = sorted((ROOT / "examples").glob("*.sx"))


def comments(text: str) -> list[str]:
    return [text[c.start:c.end].rstrip() for c in parse(SourceText(text)).comments]


def same_program(a: str, b: str) -> bool:
    return identity(parse(SourceText(a))) == identity(parse(SourceText(b)))


@pytest.mark.parametrize("path", [Path("tests/fixtures/tiny-generate.sx"), *CASES, *EXAMPLES], ids=lambda p: p.name)
def test_idempotent_and_faithful(path):
    text = path.read_text() if path.is_absolute() else fixture_text()
    out = format_text(text)
    if out is None:
        assert parse(SourceText(text)).diagnostics  # only a file with a syntax error is refused
        return
    assert format_text(out) == out
    assert same_program(text, out)
    assert comments(out) == comments(text)
    assert out.endswith("\n") and not out.endswith("\n\n")
    assert all(len(line) <= Layout().width or line.lstrip().startswith(";") for line in out.splitlines())


def test_the_layout():
    text = """(defgenerate :trips 6 :init (lambda (batch ctx) (list :row (field batch :row) :stride (field batch :stride)))
  :step (lambda (state trip ctx) (let* ((row (getf state :row)) (at (+ (cast trip :i32) 2))) (list :row (where (= (iota [1 8] :axis 1) at) 0 row) :stride (getf state :stride)))))
(prepare (lambda (batch ctx) (counter :tokens (size (field batch :sample))) (list :input (field batch :sample) :target (field batch :label))))
(run :loader train :steps 1500 :microbatches 2 :stack 2 :seed 0 :precision :f32 :optimizer (adam :lr 3e-3) :log (:every 50))
"""
    assert format_text(text, Layout(80)) == """(defgenerate :trips 6
  :init (lambda (batch ctx)
          (list :row (field batch :row) :stride (field batch :stride)))
  :step (lambda (state trip ctx)
          (let* ((row (getf state :row))
                 (at (+ (cast trip :i32) 2)))
            (list :row (where (= (iota [1 8] :axis 1) at) 0 row)
                  :stride (getf state :stride)))))
(prepare (lambda (batch ctx)
  (counter :tokens (size (field batch :sample)))
  (list :input (field batch :sample) :target (field batch :label))))
(run :loader train
     :steps 1500
     :microbatches 2
     :stack 2
     :seed 0
     :precision :f32
     :optimizer (adam :lr 3e-3)
     :log (:every 50))
"""


def test_comments_stay_where_they_were():
    text = """;; header


(def a 1)   ; after a
(defmodel m ; the model
  ;; before params
  :params (:w (normal [4 4] :std 0.1) ; after w
           ;; after the last parameter
           )
  :apply (lambda (self x) (matmul x (getf self :w))))
"""
    out = format_text(text)
    assert out == """;; header

(def a 1)   ; after a
(defmodel m ; the model
  ;; before params
  :params (:w (normal [4 4] :std 0.1) ; after w
           ;; after the last parameter
           )
  :apply (lambda (self x) (matmul x (getf self :w))))
"""
    assert format_text(out) == out


def test_loader_fields_break_into_triples():
    text = "(loader train :source (stride-rows :vocab vocab :seq seq) :batch 64 :fields (:row [seq] :i32 :stride [1] :i32 :a-longer-field-name [seq] :i32 :and-another-one [seq] :i32))\n"
    assert format_text(text, Layout(80)) == """(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 64
  :fields (:row [seq] :i32
           :stride [1] :i32
           :a-longer-field-name [seq] :i32
           :and-another-one [seq] :i32))
"""


def test_line_endings_and_width():
    text = "(def a 1)\r\n\r\n(def b (+ a a a a a a))\r\n"
    assert format_text(text) == text
    narrow = format_text(text, Layout(width=12))
    assert narrow == "(def a 1)\r\n\r\n(def b\r\n  (+ a\r\n     a\r\n     a\r\n     a\r\n     a\r\n     a))\r\n"
    assert format_text(narrow, Layout(width=12)) == narrow


def test_syntax_errors_are_not_formatted():
    assert format_text("(def a (+ 1 2)\n(def b 3)\n") is None
    assert format_range("(def a (+ 1 2)\n", 0, 3) is None


def test_empty_and_comment_only():
    assert format_text("") == ""
    assert format_text("  \n\n") == ""
    assert format_text(";; only\n\n\n;; comments") == ";; only\n\n;; comments\n"


def test_range_formats_the_forms_it_touches():
    text = "(def a   1)\n\n(def   b 2)\n(def c    3)\n"
    start = text.index("b")
    where, new = format_range(text, start, start + 1)
    assert text[where.start:where.end] == "(def   b 2)" and new == "(def b 2)"
    where, new = format_range(text, 0, len(text))
    assert text[:where.start] + new + text[where.end:] == format_text(text)
    assert format_range(text, len(text), len(text)) is None


@pytest.mark.parametrize("path", [Path("tests/fixtures/tiny-generate.sx"), *EXAMPLES], ids=lambda p: p.name)
def test_the_examples_are_left_as_they_are_written(path):
    text = path.read_text() if path.is_absolute() else fixture_text()
    assert format_text(text) == text


def test_a_form_the_text_breaks_keeps_its_breaks():
    # the user's grouping of pairs and arguments stays; the indentation follows the rules
    text = """(defmodel m
  :params (:a-gain (ones [4]) :a-bias (zeros [4])
     :w (normal [4 4] :std 0.1))
  :apply (lambda (self x)
    (f x (getf self :a-gain) (getf self :a-bias)
       (getf self :w))))
(list :row 1
      :stride 2)
"""
    assert format_text(text) == """(defmodel m
  :params (:a-gain (ones [4]) :a-bias (zeros [4])
           :w (normal [4 4] :std 0.1))
  :apply (lambda (self x)
           (f x (getf self :a-gain) (getf self :a-bias)
              (getf self :w))))
(list :row 1
      :stride 2)
"""
    # a grouping that no longer fits the width moves its last unit to the next line
    narrow = format_text(text, Layout(width=48))
    assert "           :a-bias (zeros [4])\n" in narrow and format_text(narrow, Layout(width=48)) == narrow


def test_loader_fields_one_a_line_even_when_they_fit():
    text = "(loader train :source (stride-rows :vocab 4 :seq 8) :batch 4 :fields (:row [8] :i32 :stride [1] :i32))\n"
    assert format_text(text) == """(loader train
  :source (stride-rows :vocab 4 :seq 8)
  :batch 4
  :fields (:row [8] :i32
           :stride [1] :i32))
"""


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_comments_inside_an_otherwise_empty_list_or_vector(eol):
    text = eol.join(["(def a [ ; nothing yet", "])", "(list", "  ;; on a line of its own", "  )", ""])
    out = format_text(text)
    assert comments(out) == ["; nothing yet", ";; on a line of its own"]
    assert out == eol.join(["(def a [ ; nothing yet", "        ])", "(list", "  ;; on a line of its own", "  )", ""])
    assert format_text(out) == out


def test_a_column_of_trailing_comments_stays_aligned():
    text = "(def layers 4)              ; 22 in TinyLlama\n(def width (/ 2048 16))     ; 128\n(def  seq 64)\t; tab\n"
    assert format_text(text) == "(def layers 4)              ; 22 in TinyLlama\n(def width (/ 2048 16))     ; 128\n(def seq 64) ; tab\n"


@pytest.mark.parametrize("old", [
    "(def vocab   16)\n\n\n\n(def seq\n 8)\n(def dim (* vocab\n    seq))\n",
    "(def a 1)\r\n(def   b 2)\r\n; c\r\n",
    "(def a 1)",
    "",
])
def test_minimal_edits_are_the_changed_lines(old):
    from sexpgpu_lang.format import minimal_edits
    new = format_text(old)
    edits = minimal_edits(old, new)
    text = old
    for span, replacement in reversed(edits):
        text = text[:span.start] + replacement + text[span.end:]
    assert text == new
    lines = old.splitlines(keepends=True)
    starts = {sum(len(l) for l in lines[:i]) for i in range(len(lines) + 1)}
    assert all(span.start in starts and span.end in starts for span, _ in edits), edits
    if set(old.splitlines(keepends=True)) & set(new.splitlines(keepends=True)):  # a line the layout keeps is not sent
        assert sum(len(t) for _, t in edits) < len(new)


def test_minimal_edits_never_send_what_may_not_be_sent():
    from sexpgpu_lang.format import minimal_edits
    no_nul = lambda s: "\x00" not in s  # noqa: E731
    old = "(def a (list 1\n ; x\x00y\n 2))\n"
    new = "(def a (list 1\n             ; x\x00y\n             2))\n"
    edits = minimal_edits(old, new, no_nul)
    assert edits and all(no_nul(t) for _, t in edits)
    text = old
    for span, replacement in reversed(edits):
        text = text[:span.start] + replacement + text[span.end:]
    assert text == new
    # a NUL the new text adds cannot be sent: those lines stay as they are
    assert minimal_edits("a\nb\n", "a\nb\x00\n", no_nul) == []
