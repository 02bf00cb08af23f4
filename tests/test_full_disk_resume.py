"""A disk that fills while a run writes: one RunError line, nothing torn, and the run resumable to
the very end. A full disk at the last step (its checkpoint, or its export) is resumed to write
them, not called finished; a resume after a failed write says why it failed rather than blame a
kill. ENOSPC is simulated where the write is made (orbax's save, the export's file, a
metrics.jsonl row), as tests/test_report_full_disk.py does for the rows."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("jax")

from helpers import SMALL, run, variant  # noqa: E402
from sexpgpu_runtime import RunError, RunFinished  # noqa: E402
from sexpgpu_runtime.run import report  # noqa: E402
from sexpgpu_runtime.run.checkpoint import FAILED_NOTE  # noqa: E402

pytestmark = pytest.mark.slow

TEXT = variant(":steps 10", ":steps 10 :log (:every 1) :checkpoint (:every 3 :keep 2)", SMALL)
ENOSPC = os.strerror(errno.ENOSPC)


def full_at_checkpoint(monkeypatch, step: int) -> None:
    """Orbax's save of `step` fails as on a full disk, leaving its temporary directory behind."""
    import orbax.checkpoint as ocp
    real = ocp.CheckpointManager.save

    def save(self, s, *a, **k):
        if s == step:
            (Path(str(self.directory)) / f"{s}.orbax-checkpoint-tmp-7").mkdir()
            raise OSError(errno.ENOSPC, ENOSPC)
        return real(self, s, *a, **k)
    monkeypatch.setattr(ocp.CheckpointManager, "save", save)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("ref") / "run"
    run(TEXT, d, 10, export=d.parent / "ref.safetensors")
    return d


def test_a_full_disk_at_the_last_checkpoint_is_resumed_to_write_it_and_the_export(tmp_path, monkeypatch, capsys,
                                                                                    reference):
    d, export = tmp_path / "run", tmp_path / "x.safetensors"
    full_at_checkpoint(monkeypatch, 10)
    with pytest.raises(RunError) as e:
        run(TEXT, d, 10, export=export)
    assert str(e.value) == (f"cannot write checkpoint step 10 to {d / 'checkpoints'}: {ENOSPC}; the newest complete "
                            "checkpoint is step 9")
    assert sorted(p.name for p in (d / "checkpoints").iterdir()) == [FAILED_NOTE, "6", "9"]   # nothing torn left
    assert not export.exists()
    monkeypatch.undo()
    capsys.readouterr()
    resumed = run(TEXT, d, 10, export=export, resume=True, quiet=False)   # not "finished": its checkpoint and export are missing
    assert resumed.start == 9
    assert [x for x in capsys.readouterr().err.splitlines() if "resuming" in x] == [
        f"sexpgpu: resuming from step 9 of 10 (checkpoint {d / 'checkpoints' / '9'}); the checkpoint of step 10 "
        f"could not be written ({ENOSPC})"]
    assert (d / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
    assert export.read_bytes() == (reference.parent / "ref.safetensors").read_bytes()
    assert (d / "checkpoints" / "10").is_dir()
    with pytest.raises(RunFinished):
        run(TEXT, d, 10, export=export, resume=True)


def test_a_full_disk_at_the_export_is_resumed_to_write_it(tmp_path, monkeypatch, reference):
    import safetensors.numpy
    d, export = tmp_path / "run", tmp_path / "x.safetensors"

    def save_file(*a, **k):
        raise OSError(errno.ENOSPC, ENOSPC)
    monkeypatch.setattr(safetensors.numpy, "save_file", save_file)
    with pytest.raises(RunError, match=f"^cannot write {export}: {ENOSPC}$"):
        run(TEXT, d, 10, export=export)
    monkeypatch.undo()
    with pytest.raises(RunFinished):                 # without --export, the run has finished
        run(TEXT, d, 10, resume=True)
    again = run(TEXT, d, 10, export=export, resume=True)       # its last checkpoint restored, no step trained
    assert again.start == 10 and again.history == []
    assert export.read_bytes() == (reference.parent / "ref.safetensors").read_bytes()
    assert (d / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
    with pytest.raises(RunFinished):
        run(TEXT, d, 10, export=export, resume=True)
    old = (d / "metrics.jsonl").stat().st_mtime_ns - 10**9
    os.utime(export, ns=(old, old))                  # an export older than the run's rows is an earlier run's
    assert run(TEXT, d, 10, export=export, resume=True).start == 10


def test_a_resume_after_a_failed_first_checkpoint_says_it_failed_not_that_it_was_killed(tmp_path, monkeypatch):
    d = tmp_path / "run"
    full_at_checkpoint(monkeypatch, 3)
    with pytest.raises(RunError, match=f"^cannot write checkpoint step 3 to {d / 'checkpoints'}: {ENOSPC}$"):
        run(TEXT, d, 10)
    monkeypatch.undo()
    with pytest.raises(RunError) as e:
        run(TEXT, d, 10, resume=True)
    assert str(e.value) == (f"nothing to resume: no complete checkpoint in {d / 'checkpoints'} (the write of step 3 "
                            f"failed: {ENOSPC}); pass --overwrite instead of --resume to start over at step 0 "
                            "(metrics.jsonl holds the rows of a run none of whose checkpoints was completed)")
    assert "killed" not in str(e.value)
    run(TEXT, d, 10, overwrite=True)                            # --overwrite clears the note with the rest
    assert not (d / "checkpoints" / FAILED_NOTE).exists()


def test_a_full_disk_at_the_metrics_of_step_8_resumes_from_step_6(tmp_path, monkeypatch, reference):
    d = tmp_path / "run"
    real, full = os.write, []

    def write(fd, data):
        if full:
            raise OSError(errno.ENOSPC, ENOSPC)
        if bytes(data).startswith(b'{"step": 8,'):
            full.append(True)                         # part of the row reaches the disk, then it is full
            return real(fd, bytes(data[:5]))
        return real(fd, data)
    monkeypatch.setattr(report.os, "write", write)
    with pytest.raises(RunError, match=f"^cannot write the metrics of step 8 in {d}: {ENOSPC}$"):
        run(TEXT, d, 10)
    monkeypatch.undo()
    assert [json.loads(x)["step"] for x in (d / "metrics.jsonl").read_text().splitlines()] == list(range(1, 8))
    assert run(TEXT, d, 10, resume=True).start == 6
    assert (d / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
