"""`sexpgpu run --resume` from the command line (issue fixck): past a checkpoint whose data files
are cut short, stderr has one readable warning for it and nothing of orbax's or asyncio's
(tracebacks, `Exception ignored in: <coroutine ...>`, `... exception was never retrieved`);
a resume into a run dir that does not exist creates nothing before it refuses."""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("orbax.checkpoint")

from helpers import variant  # noqa: E402

pytestmark = pytest.mark.slow


SEXPGPU = str(Path(sys.executable).with_name("sexpgpu"))
TEXT = variant(":log (:every 50))", ":log (:every 50)\n     :checkpoint (:every 5 :keep 3))")


def sexpgpu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SEXPGPU, "run", *args], capture_output=True, text=True, timeout=600)


def test_a_resume_past_a_truncated_checkpoint_prints_one_warning_and_nothing_else(tmp_path):
    path = tmp_path / "tiny.sx"
    path.write_text(TEXT, encoding="utf-8")
    run_dir = tmp_path / "run"
    first = sexpgpu(str(path), "--steps", "10", "--run-dir", str(run_dir))
    assert first.returncode == 0, first.stderr
    ckpt = run_dir / "checkpoints"
    files = [p for p in (ckpt / "10" / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    assert files
    for f in files:
        f.write_bytes(f.read_bytes()[:50])
    proc = sexpgpu(str(path), "--resume", "--steps", "11", "--run-dir", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    ours = [line for line in lines if line.startswith("sexpgpu: ")]
    assert ours[:3] == [
        f"sexpgpu: warning: checkpoint step 10 in {ckpt} is corrupt: its array data cannot be read (a data file "
        "cut short or corrupt); skipping it (moved to 10.corrupt)",
        "sexpgpu: resuming from checkpoint step 5, the newest that verifies",
        f"sexpgpu: resuming from step 5 of 11 (checkpoint {ckpt / '5'})"], proc.stderr
    assert ours[3].startswith("sexpgpu: training on "), proc.stderr
    assert ours[4:] == [f"sexpgpu: dropped 1 row of {run_dir / 'metrics.jsonl'} (step 10), logged after checkpoint "
                        "step 5 by the earlier run; it is trained and logged again"], proc.stderr
    others = [line for line in lines if not line.startswith(("sexpgpu: ", "step ", "trained "))]
    assert others == [], proc.stderr
    assert (ckpt / "10.corrupt").is_dir() and sorted(p.name for p in ckpt.iterdir() if p.name.isdigit()) == ["10", "11", "5"]


def test_the_leftovers_of_a_failed_read_are_dropped_and_nothing_else(monkeypatch):
    """The hook a failed read installs drops the read error's copies that orbax's abandoned
    reads raise when finalized, and hands every other unraisable exception on."""
    from sexpgpu_runtime.run import checkpoint
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    checkpoint._contain_read_leftovers()
    try:
        raise ValueError('OUT_OF_RANGE: Error reading "trainable.w/0" in OCDBT database')
    except ValueError as cause:
        try:
            raise Exception("Encountered error while reading array index: (slice(0, 4, 1),).") from cause
        except Exception as e:
            read = e
    other = RuntimeError("a real error")
    for e in (read, other):
        sys.unraisablehook(types.SimpleNamespace(exc_value=e, object=None))
    assert [u.exc_value for u in seen] == [other]


def test_a_resume_into_a_run_dir_that_does_not_exist_creates_nothing(tmp_path):
    path = tmp_path / "tiny.sx"
    path.write_text(TEXT, encoding="utf-8")
    new = tmp_path / "new"
    proc = sexpgpu(str(path), "--resume", "--run-dir", str(new))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"sexpgpu: error: nothing to resume: no complete checkpoint in {new / 'checkpoints'}; run without --resume "
        "to start at step 0"], proc.stderr
    assert not new.exists()
