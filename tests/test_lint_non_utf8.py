"""`sexpgpu lint DIR` with a file that is not UTF-8: that file is one
E-SYNTAX-003 diagnostic at its first bad byte, and every other file is still checked; a named file
that cannot be read is one line (its bad byte's value and line:col) and the others are still
reported."""
import json
import subprocess
import sys

SEXPGPU = [sys.executable, "-m", "sexpgpu_cli.main"]


def sx(*args):
    return subprocess.run(SEXPGPU + list(args), capture_output=True, text=True, timeout=300)


def test_a_non_utf8_file_in_a_dir_is_a_diagnostic_and_the_others_are_checked(tmp_path):
    (tmp_path / "a-binary.sx").write_bytes(b"(def x 1)\n\xff\xfe(run")
    (tmp_path / "b-broken.sx").write_text("(def y 1\n", encoding="utf-8")
    r = sx("lint", "--format", "json", str(tmp_path))
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    got = {(d["file"].rsplit("/", 1)[-1], d["code"], d["line"], d["column"]) for d in json.loads(r.stdout)}
    assert ("a-binary.sx", "E-SYNTAX-003", 2, 1) in got      # the byte 0xff
    assert ("b-broken.sx", "E-SYNTAX-001", 1, 1) in got      # the other file's real error
    binary = [d for d in json.loads(r.stdout) if d["file"].endswith("a-binary.sx")]
    assert len(binary) == 1 and "not UTF-8 text: byte 0xff at 2:1 (invalid start byte)" in binary[0]["message"]


def test_text_format_shows_the_file_and_counts_it(tmp_path):
    (tmp_path / "bin.sx").write_bytes(b"\xff(run)")
    (tmp_path / "ok.sx").write_text("(def y 1)\n", encoding="utf-8")
    r = sx("lint", str(tmp_path))
    assert r.returncode == 1
    assert r.stdout.startswith(f"{tmp_path / 'bin.sx'}:1:1: error[E-SYNTAX-003]: this file is not UTF-8 text")
    assert "2 files checked" in r.stderr


def test_a_named_non_utf8_file_is_still_an_io_error(tmp_path):
    p = tmp_path / "bin.sx"
    p.write_bytes(b"\xff(run)")
    r = sx("lint", str(p))
    assert r.returncode == 2 and r.stderr.startswith(f"sexpgpu: error: cannot read {p}: not UTF-8 text")


def test_lint_file_in_process(tmp_path):
    """`sexpgpu_lang.lint.lint_file`, which `lint` calls for each file: a file under a DIR that is
    not UTF-8 is one E-SYNTAX-003 (a `NotUtf8`); named itself it is the UnicodeDecodeError."""
    import pytest
    from sexpgpu_lang.lint import NotUtf8, lint_file
    p = tmp_path / "bin.sx"
    p.write_bytes(b"(def x 1)\n\xff(run)")
    res = lint_file(str(p), True)
    assert isinstance(res, NotUtf8) and res.has_errors
    assert [(d.code, res.source.line_col(d.span.start)) for d in res.diagnostics] == [("E-SYNTAX-003", (1, 0))]
    with pytest.raises(UnicodeDecodeError):
        lint_file(str(p), False)
    with pytest.raises(FileNotFoundError):
        lint_file(str(tmp_path / "missing.sx"), True)
    ok = tmp_path / "ok.sx"
    ok.write_text("(def y 1)\n", encoding="utf-8")
    assert [d.code for d in lint_file(str(ok), True).diagnostics] == [d.code for d in lint_file(str(ok), False).diagnostics] == ["E-FORM-001"]


def test_a_bad_byte_is_placed_by_line_and_column_with_its_value(tmp_path):
    from sexpgpu_lang.lint import bad_utf8, bad_utf8_text
    data = "(def x 1)\n(def \u00e9t".encode() + b"\xff 2)"
    assert bad_utf8(data) == (2, 8, 0xFF, "invalid start byte")   # 1-based; `é` is one column
    assert bad_utf8_text(data) == "byte 0xff at 2:8 (invalid start byte)"
    assert bad_utf8(b"(def x 1)") is None
    p = tmp_path / "bin.sx"
    p.write_bytes(data)
    want = f"cannot read {p}: not UTF-8 text: byte 0xff at 2:8 (invalid start byte); save it as UTF-8"
    for command in ("lint", "fmt"):
        r = sx(command, str(p))
        assert r.returncode == 2 and want in r.stderr, (command, r.stderr)


def test_lint_reports_every_file_it_can_read_and_names_those_it_cannot(tmp_path):
    bad = tmp_path / "bad.sx"
    bad.write_text("(def y 1\n", encoding="utf-8")
    binary = tmp_path / "bin.sx"
    binary.write_bytes(b"\xff(run)")
    missing = tmp_path / "missing.sx"
    r = sx("lint", str(bad), str(missing), str(binary))
    assert r.returncode == 2   # the worst: a file named that cannot be read
    assert r.stdout.startswith(f"{bad}:1:1: error[E-SYNTAX-001]")
    assert f"sexpgpu: error: cannot read {missing}: no such file" in r.stderr
    assert f"sexpgpu: error: cannot read {binary}: not UTF-8 text" in r.stderr
    assert "1 file checked: 1 error; 2 could not be read" in r.stderr
    r = sx("lint", "--format", "json", str(missing), str(bad))
    assert r.returncode == 2 and [d["code"] for d in json.loads(r.stdout)] == ["E-SYNTAX-001"]
