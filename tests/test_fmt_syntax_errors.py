"""`sexpgpu fmt` on a file with a syntax error, in each mode: the error placed as `lint` places it, the
file untouched, status 2, and a last line that counts it as not formatted (a tester found "0 files
already formatted")."""
from __future__ import annotations

import pytest

from sexpgpu_cli.fmt import format_files, summary
from sexpgpu_lang import analyze

BROKEN = {"unclosed.sx": "(def a 1)\n(def b (+ 1 2)\n", "stray.sx": "(def a 1))\n", "string.sx": '(def s "abc)\n',
          "mismatched.sx": "(def v [1 2)\n"}


def lint_place(path, text: str) -> str:
    """`FILE:LINE:COL` of the first syntax error, as `sexpgpu lint` prints it."""
    res = analyze(text, str(path))
    d = next(d for d in res.diagnostics if d.code.startswith("E-SYNTAX"))
    line, col = res.source.line_col(d.span.start)
    return f"{path}:{line + 1}:{col + 1}: "


@pytest.mark.parametrize("mode, flags", [("write", []), ("check", ["--check"]), ("diff", ["--diff"])])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_syntax_error_is_reported_and_the_file_untouched_in_every_mode(tmp_path, name, mode, flags):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    path = tmp_path / name
    path.write_bytes(BROKEN[name].encode())
    r = CliRunner().invoke(app, ["fmt", *flags, str(path)])
    assert r.exit_code == 2, r.output
    err = r.stderr.splitlines()
    assert err[0].startswith(f"sexpgpu: error: {lint_place(path, BROKEN[name])}not formatted: ")
    assert err[0].endswith(f"; fix it first (`sexpgpu lint {path}`)") and "[E-SYNTAX-" in err[0]
    assert err[-1] == "1 file not formatted" and r.stdout == ""
    assert path.read_bytes() == BROKEN[name].encode()


def test_the_summary_counts_each_kind_of_file(tmp_path):
    for name, text in {**BROKEN, "ugly.sx": "(def a   1)\n", "fine.sx": "(def a 1)\n"}.items():
        (tmp_path / name).write_text(text)
    got = format_files([tmp_path], "check")
    assert (len(got.changed), len(got.unchanged), len(got.failed), got.exit_code("check")) == (1, 1, 4, 2)
    assert summary(got, "check") == "1 file would be reformatted, 4 files not formatted, 1 file left unchanged"
    assert summary(format_files([tmp_path / "fine.sx", tmp_path / "stray.sx"]), "write") == \
        "1 file not formatted, 1 file already formatted"
    (tmp_path / "empty").mkdir()
    nothing = format_files([tmp_path / "empty"])
    assert (nothing.errors, summary(nothing, "write"), nothing.exit_code("write")) == \
        ([f"no run files (*.sx) under {tmp_path / 'empty'}"], "no file formatted", 2)
