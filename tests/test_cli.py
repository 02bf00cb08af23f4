"""The `sexpgpu` command as a user runs it: formats, exit status, no traceback, no JAX in lint."""
import json
import subprocess
import sys

import pytest

from helpers import FIXTURE, modules_after, sexpgpu_program, variant, write_case

SEXPGPU = [sys.executable, "-m", "sexpgpu_cli.main"]


def sx(*args, cwd=None):
    return subprocess.run(SEXPGPU + list(args), capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture
def drift(tmp_path):
    p = tmp_path / "drift.sx"
    p.write_text(variant("(list :row (where (= column at) guess row)", "(list :row (cast (where (= column at) guess row) :f32)"))
    return p


def test_clean_file_exits_0(tmp_path):
    r = sx("lint", str(FIXTURE))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""
    assert "no problems" in r.stderr


def test_text_format_is_compiler_style(drift):
    r = sx("lint", str(drift))
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{drift}:42:24: error[E-GEN-002]: `:step` returns `:row` as `[64 8] f32`")
    assert lines[2].startswith("42 |") and "(cast (where" in lines[2]
    caret = lines[3]
    assert caret.index("^") == lines[2].index("(cast")
    assert any("= note:" in l and ":33:" in l and "`:init` made `:row` here" in l for l in lines)


def test_json_format(drift):
    r = sx("lint", "--format", "json", str(drift), str(FIXTURE))
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert isinstance(data, list) and len(data) == 1
    d = data[0]
    assert {k: d[k] for k in ("file", "code", "severity", "line", "column", "end_line")} == \
        {"file": str(drift), "code": "E-GEN-002", "severity": "error", "line": 42, "column": 24, "end_line": 42}
    assert d["end_column"] > d["column"]
    assert d["related"] == [{"file": str(drift), "line": 33, "column": 17, "message": "`:init` made `:row` here"}]


def test_sarif_format(drift, tmp_path):
    out = tmp_path / "report.sarif"
    r = sx("lint", "--format", "sarif", "--output", str(out), str(drift))
    assert r.returncode == 1
    log = json.loads(out.read_text())
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    assert run["tool"]["driver"]["name"] == "sexpgpu"
    assert [rule["id"] for rule in run["tool"]["driver"]["rules"]] == ["E-GEN-002"]
    res = run["results"][0]
    assert res["ruleId"] == "E-GEN-002" and res["level"] == "error"
    assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == 42
    assert res["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 33


def test_warnings_alone_exit_0(tmp_path):
    r = sx("lint", str(write_case("warn-unsalted-draw.sx", tmp_path)))
    assert r.returncode == 0
    assert "warning[W-RAND-001]" in r.stdout


def test_missing_file_is_one_line_exit_2(tmp_path):
    r = sx("lint", str(tmp_path / "nope.sx"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"sexpgpu: error: cannot read {tmp_path / 'nope.sx'}: no such file"]
    assert "Traceback" not in r.stderr


def test_binary_file_is_one_line_exit_2(tmp_path):
    p = tmp_path / "bin.sx"
    p.write_bytes(b"\xff\xfe\x00(run")
    r = sx("lint", str(p))
    assert r.returncode == 2 and "not UTF-8" in r.stderr and "Traceback" not in r.stderr


def test_usage_error_exits_2():
    r = sx("lint", "--format", "yaml", str(FIXTURE))
    assert r.returncode == 2


def test_lint_does_not_import_jax():
    mods = modules_after("from typer.testing import CliRunner\n"
                         "from sexpgpu_cli.main import app\n"
                         f"r = CliRunner().invoke(app, ['lint', {str(FIXTURE)!r}])\n"
                         "assert r.exit_code == 0, r.output\n")
    bad = sorted(m for m in mods if m == "jax" or m.startswith(("jax.", "jaxlib", "optax")))
    assert not bad, bad


def test_front_end_never_imports_jax():
    # every module of the front end, its subpackages' too
    mods = modules_after("import pkgutil, sexpgpu_lang, sexpgpu_lang.check, sexpgpu_lang.render\n"
                         "for m in pkgutil.walk_packages(sexpgpu_lang.__path__, 'sexpgpu_lang.'):\n"
                         "    __import__(m.name)\n")
    assert "jax" not in mods


@pytest.mark.slow
def test_run_refuses_a_file_with_errors(drift):
    r = sx("run", str(drift))
    assert r.returncode == 1
    assert "error[E-GEN-002]" in r.stdout
    assert "fix them before running" in r.stderr


@pytest.mark.slow
def test_run_writes_metrics_to_the_default_run_dir(tmp_path):
    r = sx("run", str(FIXTURE), "--steps", "3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in (tmp_path / "runs" / "tiny-generate" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 3 and "generation-accuracy" in rows[-1]


# -- help reads like a usual command line --------------------------------------------------------------


def help_of(*args):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("command, usage", [((), "sexpgpu [OPTIONS] COMMAND [ARGS]..."),
                                            (("lint",), "sexpgpu lint [OPTIONS] FILE|DIR..."),
                                            (("run",), "sexpgpu run [OPTIONS] FILE"),
                                            (("explain",), "sexpgpu explain [OPTIONS] FILE"),
                                            (("plot",), "sexpgpu plot [OPTIONS] RUN_DIR"),
                                            (("lsp",), "sexpgpu lsp [OPTIONS]")])
def test_help_shows_metavars_and_flags_without_a_type(command, usage):
    text = help_of(*command)
    assert next(l for l in text.splitlines() if "Usage:" in l).strip() == f"Usage: {usage}"
    assert "<bool>" not in text and "{" not in text, text
    flags = [l for l in text.splitlines() for f in ("--help", "--resume", "--overwrite", "--xla") if f" {f} " in l]
    assert flags, text
    for line in flags:    # the flag's row goes straight from the flag(s) to the help text
        assert not line.strip("│ ").split("  ")[-1].startswith("<"), line
        assert not any(w.startswith("<") for w in line.split()[1:4]), line


def test_version_is_an_option_and_a_command():
    for args in (("--version",), ("version",)):
        r = sx(*args)
        assert r.returncode == 0 and r.stdout.strip() == "sexpgpu 0.1.0", (args, r.stdout, r.stderr)
    assert "--version" in help_of()


@pytest.mark.parametrize("command", [(), ("samples",), ("plot",), ("run",), ("lint",), ("tokenizer",)])
def test_help_names_no_source_file(command):
    text = help_of(*command)
    assert ".py" not in text and "sexpgpu_" not in text, text


def test_explain_offers_exactly_the_formats_it_prints():
    assert "<text|json>" in help_of("explain") and "sarif" not in help_of("explain")
    r = sx("explain", "--format", "sarif", str(FIXTURE))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = sx("explain", "--format", "json", str(FIXTURE))
    assert r.returncode == 0 and json.loads(r.stdout)


# -- lint DIR ------------------------------------------------------------------------------------------


def test_lint_a_directory_checks_every_run_file_below_it(tmp_path, drift):
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "clean.sx").write_text(FIXTURE.read_text())
    (tmp_path / "deep" / "notes.txt").write_text("not a run file")
    r = sx("lint", "--format", "json", str(tmp_path))
    assert r.returncode == 1, r.stderr
    assert {d["file"] for d in json.loads(r.stdout)} == {str(drift)}
    r = sx("lint", str(tmp_path / "deep"))
    assert r.returncode == 0 and r.stderr.strip() == "1 file checked: no problems"
    (tmp_path / "empty").mkdir()
    r = sx("lint", str(tmp_path / "empty"))
    assert (r.returncode, r.stderr.strip()) == (2, f"sexpgpu: error: no run files (*.sx) under {tmp_path / 'empty'}")


# -- sexpgpu run: mistakes found before training -------------------------------------------------------


@pytest.mark.slow
def test_run_refuses_options_that_cannot_work_before_training(tmp_path):
    cases = [
        (["--export", "/nonexistent/x.safetensors"], 2, "sexpgpu: error: cannot write /nonexistent/x.safetensors: "
                                                        "there is no directory /nonexistent"),
        (["--diagnostics", "nope"], 2, "sexpgpu: error: no diagnostic named `nope`; the file reports none "
                                       "(a `(diagnostic :name value)` in `objective` makes one)"),
        (["--resume", "--overwrite"], 2, "sexpgpu: error: --resume continues the run in the run dir and --overwrite "
                                         "starts it over; give one"),
    ]
    for args, code, line in cases:
        r = sx("run", str(FIXTURE), "--steps", "1", "--run-dir", str(tmp_path / "out"), *args, cwd=tmp_path)
        assert (r.returncode, r.stderr.strip()) == (code, line), r.stderr
        assert not (tmp_path / "out" / "metrics.jsonl").exists()
    (tmp_path / "afile").write_text("notes")
    r = sx("run", str(FIXTURE), "--steps", "1", "--run-dir", str(tmp_path / "afile"))
    assert (r.returncode, r.stderr.strip()) == (1, f"sexpgpu: error: cannot use {tmp_path / 'afile'} as the run dir: "
                                                   "it is a file, not a directory")


@pytest.mark.slow
def test_run_into_an_earlier_runs_dir_needs_overwrite(tmp_path):
    d = str(tmp_path / "out")
    assert sx("run", str(FIXTURE), "--steps", "1", "--run-dir", d, "--no-progress").returncode == 0
    r = sx("run", str(FIXTURE), "--steps", "1", "--run-dir", d, "--no-progress")   # the same command again
    assert r.returncode == 0 and r.stderr.strip().splitlines() == [
        f"sexpgpu: the run in {d} finished at step 1 of 1: nothing was changed; its metrics are in "
        f"{d}/metrics.jsonl. Pass --overwrite to train it again"], r.stderr
    r = sx("run", str(FIXTURE), "--steps", "2", "--run-dir", d, "--no-progress")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"sexpgpu: error: {d} already holds the metrics.jsonl of an earlier run (and no checkpoint to resume from); "
        "pass --overwrite to start over, or give another --run-dir"]
    r = sx("run", str(FIXTURE), "--steps", "2", "--run-dir", d, "--no-progress", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert [json.loads(l)["step"] for l in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.mark.slow
def test_usage_mistakes_are_one_line_exit_2():
    exe = sexpgpu_program()
    assert exe, "the `sexpgpu` command is not installed (pip install -e . in the venv)"
    for args in (["run", str(FIXTURE), "--steps", "0"], ["lint", "-f", "xml", str(FIXTURE)], ["run"], ["nosuch"]):
        r = subprocess.run([exe, *args], capture_output=True, text=True)
        assert r.returncode == 2, args
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sexpgpu: error: ") and "--help" in lines[0], r.stderr


def test_a_byte_order_mark_and_control_characters(tmp_path):
    p = tmp_path / "bom.sx"
    p.write_text("\ufeff" + FIXTURE.read_text(), encoding="utf-8")
    assert sx("lint", str(p)).returncode == 0
    p.write_text(FIXTURE.read_text().replace("(def seq 8)", "(def seq 8)\x01"))
    r = sx("lint", "--format", "json", str(p))
    assert [d["message"] for d in json.loads(r.stdout)] == ["unexpected character `U+0001`"]


def test_lint_counts_notes_apart_from_problems(tmp_path):
    """Information (W-RAND-003) is printed and counted as a note, not hidden under "no problems"."""
    f = tmp_path / "notes.sx"
    f.write_text(FIXTURE.read_text().replace("(argmax (model row))", "(categorical (model row) :salt (getf ctx :step))"))
    r = sx("lint", str(f))
    assert r.returncode == 0 and "information[W-RAND-003]" in r.stdout, r.stdout
    assert r.stderr.strip() == "1 file checked: no problems, 1 note"
    from sexpgpu_lang.render import summary
    assert (summary(0, 0), summary(1, 2, 3), summary(0, 1, 1)) == ("no problems", "1 error, 2 warnings, 3 notes",
                                                                   "1 warning, 1 note")
