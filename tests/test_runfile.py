"""tests/runfile.py's `RunFile`: each change lands at the form it names, and a place that is not
there (or is there twice) fails instead of changing something else."""
from __future__ import annotations

import re

import pytest

from helpers import SMALL, check, fixture_text
from runfile import RunFile

FIXTURE = RunFile.fixture()


def test_places_name_forms_keywords_and_lists():
    assert FIXTURE.text_of("def seq") == "(def seq 8)"
    assert FIXTURE.text_of("run :log :every") == "50"
    assert FIXTURE.text_of("defgenerate :step (argmax") == "(argmax (model row))"
    assert FIXTURE.text_of("defmodel student :params :out") == "(normal [dim vocab] :std 0.1)"
    assert FIXTURE.text_of("loader train :source :vocab") == "vocab"
    assert FIXTURE == fixture_text() and RunFile.small() == SMALL


def test_set_replaces_a_value_or_adds_the_keyword_aligned():
    text = FIXTURE.set("run :stack", "1").set("run :diagnostics", "[:nope]").set("run :log :every", "5")
    assert text.text_of("run :stack") == "1" and text.text_of("run :log") == "(:every 5)"
    assert text.text_of("run").endswith(":log (:every 5)\n     :diagnostics [:nope])")
    assert RunFile.small().set("run :seed", "3").text_of("run") == \
        "(run :loader train :steps 10 :optimizer (sgd :lr 0.1) :seed 3)"
    check(FIXTURE.set("defgenerate :init (list :extra", "(field batch :row)")
          .set("defgenerate :step (list :extra", "(getf state :extra)"))


def test_drop_add_insert_and_edit():
    assert "microbatches" not in FIXTURE.drop("run :microbatches")
    dropped = FIXTURE.drop("prepare")
    assert "(prepare" not in dropped and "\n\n(objective" in dropped
    added = FIXTURE.add("(def extra 3)", before="defmodel student")
    assert "(def dim 64)\n\n(loader" in added and "(def extra 3)\n\n(defmodel student" in added
    assert FIXTURE.add("(pass now :loader train :every 1)").endswith(":log (:every 50))\n\n(pass now :loader train :every 1)\n")
    inserted = FIXTURE.insert("defgenerate :step (guess", "(extra 1)")
    assert "                             :keepdims true))\n                 (extra 1))" in inserted
    assert FIXTURE.edit("objective", "(metric :loss loss)", "(metric :l loss)").count("(metric :l loss)") == 1


@pytest.mark.parametrize("change,says", [
    (lambda: FIXTURE.set("defmodel teacher :frozen", "true"), "0 forms named 'defmodel teacher'"),
    (lambda: FIXTURE.set("objective (metric", "(metric :x 1)"), "2 lists headed by 'metric'"),
    (lambda: FIXTURE.text_of("run :nope :every"), "no :nope in 'run :nope :every'"),
    (lambda: FIXTURE.edit("defgenerate :step", "(getf state", "(getf stat"), "occurs 2 times"),
    (lambda: FIXTURE.edit("run", ":nothing", ":x"), "occurs 0 times"),
    (lambda: FIXTURE.drop("run :nope"), "no :nope"),
])
def test_a_place_that_is_not_there_once_fails(change, says):
    with pytest.raises(AssertionError, match=re.escape(says)):
        change()


def test_mark_puts_a_marker_under_the_snippet_in_its_place():
    text = FIXTURE.set("defgenerate :step (argmax", "(argmx (model row))").mark("defgenerate :step", "argmx", "E-NAME-001")
    [d] = check(text).diagnostics
    assert d.code == "E-NAME-001"
    # a range in column 1 or 2 is marked `(from column N)`
    text = RunFile.small().set("model", "(model nope)").mark("model", "(model nope)", "E-NAME-001")
    assert ";; ^^^^^^^^^^^^ E-NAME-001 (from column 1)" in text
