"""`--resume` of a stopped run and of a finished one: the stopped one goes on from its newest checkpoint
saying from which step, metrics.jsonl holds each step once; the finished one says so in one line and
changes no byte of the run dir (a tester found it restarted from the stop checkpoint and cut the rows)."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import SMALL, run, signal_at_line, variant
from sexpgpu_runtime import RunFinished

pytestmark = pytest.mark.slow


SEXPGPU = [sys.executable, "-m", "sexpgpu_cli.main"]
STEPS = 40
#: Every step logged; no `:checkpoint`, so a checkpoint is written only when a signal stops the run.
NO_CHECKPOINT = variant(":steps 10", f":steps {STEPS} :log (:every 1)", SMALL)


def steps_of(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file under the run dir (metrics, checkpoints, events), by its relative path, with its bytes."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def sx(*args) -> subprocess.CompletedProcess:
    return subprocess.run(SEXPGPU + [str(a) for a in args], capture_output=True, text=True, timeout=300)


def test_a_sigint_then_resume_goes_on_from_the_stop_and_a_second_resume_changes_nothing(tmp_path):
    f, d = tmp_path / "small.sx", tmp_path / "out"
    f.write_text(NO_CHECKPOINT)
    p = subprocess.Popen(SEXPGPU + ["run", str(f), "--run-dir", str(d), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = signal_at_line(p, "step 12/", (signal.SIGINT,))
    assert p.returncode == 130, err
    saved = steps_of(d)[-1]                      # the last completed step, the one the stop saved
    assert steps_of(d) == list(range(1, saved + 1))

    resumed = sx("run", f, "--resume", "--run-dir", d, "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stderr.splitlines()
    assert f"sexpgpu: resuming from step {saved} of {STEPS} (checkpoint {d / 'checkpoints' / str(saved)})" in lines
    assert not [line for line in lines if "dropped" in line]   # nothing was logged past the checkpoint
    assert lines[-1].startswith(f"trained steps {saved + 1}-{STEPS} in ")
    assert steps_of(d) == list(range(1, STEPS + 1))

    # Finished: no checkpoint at step 40 (the file has no `:checkpoint`), only the stop's. Nothing restarts.
    before = snapshot(d)
    again = sx("run", f, "--resume", "--run-dir", d, "--no-progress")
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines()[-1] == (
        f"sexpgpu: the run in {d} finished at step {STEPS} of {STEPS}: nothing to resume, nothing was changed; "
        f"to train it longer, resume with `--steps N` above {STEPS} (it trains again from checkpoint step {saved}, "
        f"the newest: the run saved none at step {STEPS})")
    assert "resuming" not in again.stderr and "training on" not in again.stderr
    fewer = sx("run", f, "--resume", "--run-dir", d, "--steps", 20, "--no-progress")   # cut the rows past 20 before
    assert fewer.returncode == 0, fewer.stderr
    assert fewer.stderr.splitlines()[-1].startswith(
        f"sexpgpu: the run in {d} has trained {STEPS} steps, more than the 20 asked for: nothing to resume")
    assert snapshot(d) == before


def test_a_finished_run_with_checkpoints_and_tensorboard_is_left_byte_for_byte(tmp_path):
    text = variant(":steps 10", ":steps 10 :log (:every 1 :tensorboard true) :checkpoint (:every 4 :keep 2)", SMALL)
    run(text, tmp_path, 10)
    before = snapshot(tmp_path)
    assert "checkpoints/10/meta/metadata" in before and any("tfevents" in k for k in before)
    with pytest.raises(RunFinished) as e:
        run(text, tmp_path, 10, resume=True)
    assert (e.value.step, e.value.total) == (10, 10)
    assert str(e.value) == (f"the run in {tmp_path} finished at step 10 of 10: nothing to resume, nothing was "
                            "changed; to train it longer, resume with `--steps N` above 10")
    assert snapshot(tmp_path) == before                # no events file, no row, no checkpoint
    longer = run(text, tmp_path, 12, resume=True)   # what the line says to do
    assert longer.start == 10 and steps_of(tmp_path) == list(range(1, 13))


def test_a_finished_run_that_saved_no_checkpoint_says_how_to_start_over(tmp_path):
    run(NO_CHECKPOINT, tmp_path, 5)
    before = snapshot(tmp_path)
    with pytest.raises(RunFinished, match=r"finished at step 5 of 5: nothing to resume, nothing was changed; it "
                                          r"saved no checkpoint, so to train it longer start it over with "
                                          r"`--overwrite` and more `--steps`$"):
        run(NO_CHECKPOINT, tmp_path, 5, resume=True)
    assert snapshot(tmp_path) == before


def test_a_resume_from_a_checkpoint_older_than_the_last_row_drops_only_the_later_rows_and_says_so(tmp_path, capsys):
    text = variant(":steps 10", ":steps 12 :log (:every 1) :checkpoint (:every 5)", SMALL)
    uninterrupted = tmp_path / "full"
    run(text, uninterrupted, 12)
    # A process killed after logging step 8 leaves the checkpoint of step 5 and rows 1-8.
    d = tmp_path / "killed"
    run(text, d, 8)
    rows = (uninterrupted / "metrics.jsonl").read_text().splitlines(True)
    (d / "metrics.jsonl").write_text("".join(rows[:8]))
    shutil.rmtree(d / "checkpoints" / "8")
    capsys.readouterr()
    run(text, d, 12, resume=True, quiet=False)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"sexpgpu: resuming from step 5 of 12 (checkpoint {d / 'checkpoints' / '5'})"
    assert (f"sexpgpu: dropped 3 rows of {d / 'metrics.jsonl'} (steps 6-8), logged after checkpoint step 5 by the "
            "earlier run; they are trained and logged again") in err
    assert steps_of(d) == list(range(1, 13))
    assert (d / "metrics.jsonl").read_bytes() == (uninterrupted / "metrics.jsonl").read_bytes()


def test_a_resume_whose_metrics_jsonl_is_gone_says_the_earlier_rows_are_not_in_it(tmp_path, capsys):
    text = variant(":steps 10", ":steps 12 :log (:every 1) :checkpoint (:every 5)", SMALL)
    run(text, tmp_path, 5)
    (tmp_path / "metrics.jsonl").unlink()
    capsys.readouterr()
    run(text, tmp_path, 7, resume=True, quiet=False)
    err = capsys.readouterr().err.splitlines()
    assert err[2] == (f"sexpgpu: warning: {tmp_path / 'metrics.jsonl'} is missing, so it will hold the rows after step 5 "
                      "only (those of steps up to it were logged by the earlier run); put it back before resuming to "
                      "keep them")
    assert steps_of(tmp_path) == [6, 7]
    capsys.readouterr()
    run(text, tmp_path, 8, resume=True, quiet=False)                               # the file is there again: no warning
    assert not [line for line in capsys.readouterr().err.splitlines() if "warning" in line]


def test_a_longer_resume_of_a_run_that_saved_no_checkpoint_says_to_start_over(tmp_path):
    from sexpgpu_runtime import RunError
    run(NO_CHECKPOINT, tmp_path, 3)
    before = snapshot(tmp_path)
    with pytest.raises(RunError) as e:
        run(NO_CHECKPOINT, tmp_path, 5, resume=True)
    assert str(e.value) == (f"nothing to resume: no complete checkpoint in {tmp_path / 'checkpoints'}; pass "
                            "--overwrite instead of --resume to start over at step 0 (metrics.jsonl holds the rows "
                            "of a run that saved no checkpoint)")
    assert snapshot(tmp_path) == before
