"""Every generated file the project commits is what its generator writes today.

Each generator has a `--check` mode that exits 1 when its committed output is stale; the
everyday `pytest` runs all of them here, so a stale file cannot land unnoticed:

| file | generator |
|---|---|
| `vscode-extension/syntaxes/sexpgpu.tmLanguage.json` | `vscode-extension/scripts/gen-grammar.py` |
| `docs/ops.md` | `scripts/gen_ops_doc.py` |
| `docs/errors.md` | `scripts/gen_errors_doc.py` (from `sexpgpu_lang/diagnostic_docs/`) |
| `sexpgpu_lang/_lexer_table.py` | `sexpgpu_lang.syntax.write_lexer_table` (tests/test_lexer_table.py compares it with lark's pattern too) |
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from helpers import ROOT

GENERATORS = {
    "vscode-extension/syntaxes/sexpgpu.tmLanguage.json": [sys.executable, "vscode-extension/scripts/gen-grammar.py", "--check"],
    "docs/ops.md": [sys.executable, "scripts/gen_ops_doc.py", "--check"],
    "docs/errors.md": [sys.executable, "scripts/gen_errors_doc.py", "--check"],
}


@pytest.mark.parametrize("path", sorted(GENERATORS))
def test_the_committed_file_is_its_generators_output(path):
    proc = subprocess.run(GENERATORS[path], cwd=ROOT, capture_output=True, text=True, timeout=300)
    regenerate = " ".join(GENERATORS[path][1:-1])
    assert proc.returncode == 0, f"{path} is stale: run `python {regenerate}` and commit it\n{proc.stdout}{proc.stderr}"


def test_the_lexer_table_is_written_again_the_same(tmp_path):
    from sexpgpu_lang import _lexer_table, syntax
    out = syntax.write_lexer_table(tmp_path / "table.py")
    assert out.read_text(encoding="utf-8") == (ROOT / "sexpgpu_lang" / "_lexer_table.py").read_text(encoding="utf-8"), \
        'sexpgpu_lang/_lexer_table.py is stale: run python -c "from sexpgpu_lang.syntax import write_lexer_table; write_lexer_table()"'
    assert _lexer_table.GRAMMAR == (ROOT / "sexpgpu_lang" / "grammar.lark").read_text()


def test_a_stale_grammar_is_caught(tmp_path):
    # The check must be able to fail: the committed grammar with one operation's name dropped.
    grammar = ROOT / "vscode-extension" / "syntaxes" / "sexpgpu.tmLanguage.json"
    text = grammar.read_text(encoding="utf-8")
    dropped = "dynamic\\\\-update\\\\-slice|"
    assert dropped in text, "the grammar no longer spells dynamic-update-slice this way: update the test"
    stale = text.replace(dropped, "", 1)
    copy = tmp_path / "ext"
    (copy / "scripts").mkdir(parents=True)
    (copy / "syntaxes").mkdir()
    (copy / "scripts" / "gen-grammar.py").write_text(
        (ROOT / "vscode-extension" / "scripts" / "gen-grammar.py").read_text(encoding="utf-8")
        .replace("sys.path.insert(0, str(EXTENSION.parent))", f"sys.path.insert(0, {str(ROOT)!r})"), encoding="utf-8")
    (copy / "syntaxes" / "sexpgpu.tmLanguage.json").write_text(stale, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(copy / "scripts" / "gen-grammar.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stale" in proc.stdout + proc.stderr


def test_a_stale_errors_page_is_caught(tmp_path, monkeypatch):
    # The check must be able to fail: the committed page with one record's fix reworded by hand.
    spec = importlib.util.spec_from_file_location("gen_errors_doc", ROOT / "scripts" / "gen_errors_doc.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = tmp_path / "errors.md"
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    monkeypatch.setattr(gen, "PAGE", page)
    page.write_text(text, encoding="utf-8")
    assert gen.main(["--check"]) == 0
    edited = text.replace("**Fix:** delete the extra closer.", "**Fix:** delete the closer.", 1)
    assert edited != text, "E-SYNTAX-002's fix no longer reads this way: update the test"
    page.write_text(edited, encoding="utf-8")
    assert gen.main(["--check"]) == 1
