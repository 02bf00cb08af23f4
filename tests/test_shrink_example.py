"""scripts/shrink_example.py: a fixture variant shrinks to a smaller file that gives the same
diagnostics, with its markers written again, and whose twin (the mistake undone) is clean."""
from __future__ import annotations

import importlib.util

from helpers import ROOT, check, fixture_text, variant

spec = importlib.util.spec_from_file_location("shrink_example", ROOT / "scripts" / "shrink_example.py")
shrink_example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shrink_example)


def test_a_fixture_variant_shrinks_to_its_mistake(tmp_path):
    body = fixture_text().split("\n\n", 1)[1]
    text = ";; E-NAME-001: `modle` is not defined.\n\n" + variant("(argmax (model row))", "(argmax (modle row))", body)
    path = tmp_path / "typo.sx"
    path.write_text(text)
    out = shrink_example.shrink(path)
    assert out.startswith(";; E-NAME-001: `modle` is not defined.\n")
    assert out.count("\n") < text.count("\n") - 15
    res = check(out, str(path))                   # the markers it wrote are the diagnostics
    assert [d.code for d in res.diagnostics] == ["E-NAME-001"]
    fixed = shrink_example.unmarked(out).replace("(modle row)", "(model row)")
    assert check(fixed, str(path)).diagnostics == []


def test_a_file_with_no_twin_keeps_its_diagnostics(tmp_path):
    text = ";; W: two mistakes.\n\n(def vocab 16)\n(def vocab 8)\n(def unused (+ vocab \"x\"))\n(def seq 8)\n"
    path = tmp_path / "two.sx"
    path.write_text(text)
    want = shrink_example.signature(text, str(path))
    assert {code for code, *_ in want} == {"E-FORM-001", "E-NAME-002", "E-TYPE-001"}
    out = shrink_example.shrink(path)
    assert "(def seq 8)" not in out and "(def vocab 8)" in out
    assert shrink_example.signature(shrink_example.unmarked(out), str(path)) == want
    check(out, str(path))


def test_markers_in_the_first_columns_name_their_column():
    text = "(def dim 64\n"
    out = shrink_example.with_markers(text, "m.sx")
    assert out.splitlines()[1].endswith("(from column 1)")
    check(out, "m.sx")
