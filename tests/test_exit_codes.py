"""One exit-status rule for every command (docs/cli.md, "Exit status"): 1 for a mistake in a run file
or in what it names (its diagnostics, `lint --read-files`' included; its data not as declared; a traced
setting out of range; a run that fails), 2 for a mistake on the command line, as typer's own usage
errors (an unknown option, a bad option value, a file or run dir named there that cannot be read, an output that cannot be written), 0 for success.
In process (typer's CliRunner); `run`'s runtime is replaced by one raising each kind of error."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from helpers import SMALL
from sexpgpu_cli.main import app


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def files(tmp_path):
    clean = tmp_path / "clean.sx"
    clean.write_text(SMALL, encoding="utf-8")
    broken = tmp_path / "broken.sx"
    broken.write_text(SMALL.replace("(model lm)", "(model nothing)"), encoding="utf-8")
    data = tmp_path / "data.sx"
    data.write_text(SMALL.replace("(stride-rows :vocab vocab :seq seq)", '(tokens "none.bin" :dtype :uint16 :seq seq)')
                    .replace(":fields (:row [seq] :i32 :stride [1] :i32)", ":fields (:row [seq] :i32 :stride [seq] :i32)"),
                    encoding="utf-8")
    return clean, broken, data, tmp_path / "missing.sx"


def test_lint(files):
    clean, broken, data, missing = files
    assert invoke("lint", clean).exit_code == 0
    assert invoke("lint", broken).exit_code == 1                  # the file's errors
    assert invoke("lint", data).exit_code == 0                    # (no file read)
    assert invoke("lint", "--read-files", data).exit_code == 1    # what it names: a token file not there
    assert invoke("lint", missing).exit_code == 2                 # the command line names no file
    assert invoke("lint", "--format", "xml", clean).exit_code == 2
    assert invoke("lint", "--no-such-option", clean).exit_code == 2
    assert invoke("lint").exit_code == 2


def test_explain(files):
    clean, broken, _, missing = files
    assert invoke("explain", clean).exit_code == 0
    assert invoke("explain", broken).exit_code == 1
    assert invoke("explain", missing).exit_code == 2
    assert invoke("explain", "--target", "gpu", clean).exit_code == 2
    assert invoke("explain", "--memory-budget", "lots", clean).exit_code == 2


def test_run_before_the_runtime(files, tmp_path):
    _, broken, data, missing = files
    assert invoke("run", broken, "--run-dir", tmp_path / "r").exit_code == 1
    assert invoke("run", data, "--run-dir", tmp_path / "r").exit_code == 1     # caught by its check, as lint --read-files
    assert invoke("run", missing).exit_code == 2
    assert invoke("run", "--steps", "0", broken).exit_code == 2


def raising(error):
    def train(program, opts, on_trip=None):
        raise error
    return train


def test_run_s_runtime_errors(files, tmp_path, monkeypatch):
    import sexpgpu_runtime as runtime   # the surface, which the command calls
    from sexpgpu_runtime import BadDraw, BadValue, DataError, OptionError, RunError
    clean = files[0]
    cases = [(DataError("loader `train`: no file none.bin"), 1),
             (BadDraw(3, "r.sx:4:5", 2, -0.5), 1),
             (BadValue(2, "`loss`", float("nan")), 1),
             (RunError("the disk is full"), 1),
             (OptionError("--resume continues the run and --overwrite starts it over"), 2)]
    for error, status in cases:
        monkeypatch.setattr(runtime, "train", raising(error))
        r = invoke("run", clean, "--run-dir", tmp_path / "r", "--no-progress")
        assert r.exit_code == status, (type(error).__name__, r.output)
        assert r.output.strip().splitlines()[-1] == f"sexpgpu: error: {error}"
    monkeypatch.setattr(runtime, "train", raising(DataError("x")))
    assert invoke("run", clean, "--max-shard-size", "lots").exit_code == 2


def test_plot_and_samples(tmp_path):
    """A run dir named on the command line that is not there, or a plot output that cannot be written: 2;
    what the run dir holds (no metrics.jsonl or samples.jsonl, a corrupt row): 1."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert invoke("plot", tmp_path / "no-such-dir").exit_code == 2
    assert invoke("samples", tmp_path / "no-such-dir").exit_code == 2
    assert invoke("plot", run_dir).exit_code == 1                 # no metrics.jsonl in it
    assert invoke("samples", run_dir).exit_code == 1              # no samples.jsonl in it
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n', encoding="utf-8")
    (run_dir / "samples.jsonl").write_text("garbage\n", encoding="utf-8")
    assert invoke("samples", run_dir).exit_code == 1              # a corrupt row
    r = invoke("plot", run_dir, "-o", tmp_path / "no-such-dir" / "x.png")
    assert r.exit_code == 2, r.output                             # an output that cannot be written
    assert r.output.strip().startswith(f"sexpgpu: error: cannot write {tmp_path / 'no-such-dir' / 'x.png'}: ")
    assert invoke("plot", run_dir, "-o", tmp_path / "x.png").exit_code == 0
