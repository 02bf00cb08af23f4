"""Two `sexpgpu run` processes racing for one run dir: one trains, the other is refused in one line
naming the holder, writing nothing (a tester's pair both trained: steps logged twice, a torn row, a
FileNotFoundError on a checkpoint the other removed)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import SMALL, variant

pytestmark = pytest.mark.slow

SEXPGPU = [sys.executable, "-m", "sexpgpu_cli.main"]
STEPS = 300
TEXT = variant(":steps 10", f":steps {STEPS} :log (:every 1) :checkpoint (:every 2 :keep 2)", SMALL)


def steps_of(d: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]


def start(*args) -> subprocess.Popen:
    return subprocess.Popen(SEXPGPU + ["run", *map(str, args), "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(proc: subprocess.Popen, prefix: str) -> list[str]:
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith(prefix):
            return lines
    raise AssertionError("".join(lines))


def refused_line(err: str, d: Path, holder: int) -> None:
    lines = err.splitlines()
    assert "Traceback" not in err, err
    assert lines[-1].startswith(f"sexpgpu: error: {d} is in use by another run: pid {holder} on host "), err
    assert lines[-1].endswith("or give another --run-dir"), err
    assert not [x for x in lines if x.startswith(("step ", "sexpgpu: training on", "sexpgpu: resuming"))], err


def test_a_second_run_a_resume_and_an_overwrite_of_a_running_dir_are_refused(tmp_path):
    f, d = tmp_path / "small.sx", tmp_path / "run"
    f.write_text(TEXT)
    first = start(f, "--run-dir", d)
    try:
        wait_for(first, "step 5/")
        for extra in ([], ["--resume"], ["--overwrite"]):
            other = subprocess.run(SEXPGPU + ["run", str(f), "--run-dir", str(d), "--no-progress", *extra],
                                   capture_output=True, text=True, timeout=300)
            assert other.returncode == 1, (extra, other.stderr)
            refused_line(other.stderr, d, first.pid)
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 130
    saved = steps_of(d)
    assert saved == list(range(1, len(saved) + 1))   # the holder's rows alone, once each, none torn
    resumed = subprocess.run(SEXPGPU + ["run", str(f), "--run-dir", str(d), "--resume", "--no-progress"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert steps_of(d) == list(range(1, STEPS + 1))


def test_two_runs_started_at_once_train_once(tmp_path):
    f, d = tmp_path / "small.sx", tmp_path / "run"
    f.write_text(TEXT)
    a, b = start(f, "--run-dir", d), start(f, "--run-dir", d)
    try:
        outs = {p.pid: p.communicate(timeout=600)[1] for p in (a, b)}
    finally:
        a.kill()
        b.kill()
    codes = sorted((p.returncode, p.pid) for p in (a, b))
    if [c for c, _ in codes] == [0, 0]:   # the loser reached the dir only once the winner had finished
        assert any(f"the run in {d} finished at step {STEPS} of {STEPS}: nothing was changed" in e
                   for e in outs.values()), outs
    else:
        assert [c for c, _ in codes] == [0, 1], outs
        (_, winner), (_, loser) = codes
        err = outs[loser]
        assert "Traceback" not in err and len([x for x in err.splitlines() if x.startswith("sexpgpu: error")]) == 1, err
        if "is in use by another run" in err:
            refused_line(err, d, winner)
        else:   # (the loser reached the dir once the winner had checkpoints but had not finished)
            assert "already holds checkpoints of this run" in err, err
    assert steps_of(d) == list(range(1, STEPS + 1))
