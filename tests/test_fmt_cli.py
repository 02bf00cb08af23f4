"""`sexpgpu fmt FILE|DIR... [--check] [--diff]`: the server's formatter on the
command line, run as a program on copies of every example and case file."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from helpers import ROOT, sexpgpu_program
from sexpgpu_lang.source import SourceText
from sexpgpu_lang.syntax import parse

SEXPGPU = [sexpgpu_program()] if sexpgpu_program() else [sys.executable, "-c", "from sexpgpu_cli.main import main; main()"]
SOURCES = ("examples", "tests/cases", "tests/cases-files", "tests/fixtures", "sexpgpu_lang/diagnostic_docs")


def sx(*args, cwd=None):
    return subprocess.run(SEXPGPU + ["fmt", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


def comments(data: bytes) -> list[str]:
    text = data.decode()
    return [text[c.start:c.end].rstrip() for c in parse(SourceText(text)).comments]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """Copies of every example and case file (and each example with CRLF line ends)."""
    root = tmp_path_factory.mktemp("fmt")
    for name in SOURCES:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("*.png", "data"))
    crlf = root / "crlf"
    crlf.mkdir()
    for p in sorted((ROOT / "examples").glob("*.sx")):
        (crlf / p.name).write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    return root


@pytest.mark.slow
def test_every_example_and_case_file(tree):
    files = sorted(tree.rglob("*.sx"))
    before = {p: p.read_bytes() for p in files}
    check = sx("--check", tree)
    would = {tree / line.removeprefix("would reformat ").removeprefix(str(tree) + "/")
             for line in check.stdout.splitlines()}
    refused = [line for line in check.stderr.splitlines() if line.startswith("sexpgpu: error:")]
    assert check.returncode == 2 and refused and all("not formatted" in line and "E-SYNTAX" in line for line in refused)
    assert all(p.read_bytes() == before[p] for p in files)  # --check writes nothing
    # the examples and the fixture are left as they are written, with either line ending
    assert not [p for p in would if p.parent.name in ("examples", "crlf", "fixtures")]
    first = sx(tree)
    assert first.returncode == 2 and f"{len(would)} file" in first.stderr
    after = {p: p.read_bytes() for p in files}
    assert {p for p in files if after[p] != before[p]} == {p.resolve() for p in would}
    for p in files:
        if after[p] != before[p]:
            assert comments(after[p]) == comments(before[p]), p
            assert (b"\r\n" in after[p]) == (b"\r\n" in before[p]), p
    again = sx(tree)  # idempotent
    assert again.returncode == 2 and "already formatted" in again.stderr
    assert all(p.read_bytes() == after[p] for p in files)


def test_check_and_diff_exit_1_when_a_file_would_change(tmp_path):
    f = tmp_path / "a.sx"
    f.write_bytes(b";; keep me\r\n(def a   1) ; and me\r\n(def b [ ; nothing yet\r\n])\r\n")
    check = sx("--check", f)
    assert check.returncode == 1 and check.stdout == f"would reformat {f}\n"
    diff = sx("--diff", f)
    assert diff.returncode == 1 and "-(def a   1) ; and me\n+(def a 1) ; and me\n" in diff.stdout
    assert f.read_bytes().startswith(b";; keep me\r\n(def a   1)")
    done = sx(f)
    assert done.returncode == 0 and "1 file reformatted" in done.stderr
    assert f.read_bytes() == b";; keep me\r\n(def a 1) ; and me\r\n(def b [ ; nothing yet\r\n        ])\r\n"
    assert sx("--check", f).returncode == 0


def test_a_file_that_cannot_be_formatted_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.sx"
    bad.write_text("(def a (+ 1 2)\n")
    got = sx(bad, tmp_path / "missing.sx")
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert f"sexpgpu: error: {bad}:1:1: not formatted:" in got.stderr and "[E-SYNTAX-001]" in got.stderr
    assert f"cannot read {tmp_path / 'missing.sx'}: no such file" in got.stderr
    assert bad.read_text() == "(def a (+ 1 2)\n"
