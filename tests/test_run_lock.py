"""The run dir's lock (run/run_lock.py): one holder at a time, the second refused in one line naming
the holder (pid, host, since when) before anything is written, a killed holder's lock freed by the
kernel, `--overwrite` never clearing a held dir, and readers (`samples`, `plot`) unaffected."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

from helpers import SMALL, program_of, variant  # noqa: E402
from sexpgpu_runtime import RunDirInUse, RunError, RunOptions  # noqa: E402
from sexpgpu_runtime.run.run_lock import LOCK_NAME, describe_holder, hold_run_dir  # noqa: E402
from sexpgpu_runtime import train  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    first = hold_run_dir(tmp_path, command=["sexpgpu", "run", "a.sx"])
    try:
        with pytest.raises(RunDirInUse) as e:
            hold_run_dir(tmp_path)   # another open of the file: flock refuses it, in this process as in another
        record = json.loads((tmp_path / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        holder = f"pid {os.getpid()} on host {socket.gethostname()}, since {record['since']} (`sexpgpu run a.sx`)"
        assert e.value.holder == holder
        assert str(e.value) == (f"{tmp_path} is in use by another run: {holder}; nothing was written. Wait for it to "
                                "finish or stop it (a run that was killed frees the dir by itself), or give "
                                "another --run-dir")
        assert "\n" not in str(e.value)
    finally:
        first.release()
    assert not (tmp_path / LOCK_NAME).exists()    # released: the file is gone, and the dir is free
    again = hold_run_dir(tmp_path)
    again.release()
    again.release()                               # (idempotent)


def test_a_holder_that_has_not_written_its_record_is_another_process():
    assert describe_holder("") == "another process (it has not yet said which)"
    assert describe_holder('{"pid": "x"}') == "another process (it has not yet said which)"


HOLD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from sexpgpu_runtime.run.run_lock import hold_run_dir
lock = hold_run_dir(sys.argv[2], command=["holder"])
print("held", flush=True)
time.sleep(600)
"""


def test_a_killed_holder_leaves_the_dir_free(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(ROOT), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "held\n"
        with pytest.raises(RunDirInUse, match=f"pid {p.pid} on host .*\\(`holder`\\)"):
            hold_run_dir(tmp_path)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        p.kill()
        p.wait()
    assert (tmp_path / LOCK_NAME).exists()        # its file is left, stale: the lock went with the process
    lock = hold_run_dir(tmp_path, command=["next"])
    try:
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    finally:
        lock.release()


def test_a_lock_file_removed_under_a_waiting_opener_is_not_held_twice(tmp_path, monkeypatch):
    """A process that opened the lock file just before its holder released (removed) it must not take
    the removed inode's lock while a third process holds the new file's."""
    import sexpgpu_runtime.run.run_lock as run_lock
    first = hold_run_dir(tmp_path)
    real_flock, seen = run_lock.fcntl.flock, []

    def flock(fd, op):
        if not seen:          # between this open and its lock: the holder lets go, a third run takes the dir
            seen.append(fd)
            first.release()
            seen.append(hold_run_dir(tmp_path))
        return real_flock(fd, op)
    monkeypatch.setattr(run_lock.fcntl, "flock", flock)
    with pytest.raises(RunDirInUse):
        hold_run_dir(tmp_path)
    seen[1].release()


TEXT = variant(":steps 10", ":steps 4 :log (:every 1)", SMALL)


@pytest.mark.slow
def test_a_run_into_a_held_dir_writes_nothing_and_overwrite_clears_nothing(tmp_path):
    d = tmp_path / "run"
    train(program_of(TEXT, str(tmp_path / "a.sx")), RunOptions(steps=4, run_dir=d, quiet=True))
    holder = hold_run_dir(d, command=["sexpgpu", "run", "a.sx"])
    try:
        before = files(d)
        for kw in ({}, {"resume": True}, {"overwrite": True}):
            with pytest.raises(RunDirInUse, match=f"^{d} is in use by another run: pid {os.getpid()} "):
                train(program_of(TEXT, str(tmp_path / "a.sx")), RunOptions(steps=6, run_dir=d, quiet=True, **kw))
            assert files(d) == before, kw
        fresh = tmp_path / "fresh"             # a dir that is free is made and used as before
        train(program_of(TEXT, str(tmp_path / "a.sx")), RunOptions(steps=2, run_dir=fresh, quiet=True))
        assert not (fresh / LOCK_NAME).exists()
    finally:
        holder.release()
    with pytest.raises(RunError, match="already holds the metrics.jsonl of an earlier run"):   # free again
        train(program_of(TEXT, str(tmp_path / "a.sx")), RunOptions(steps=6, run_dir=d, quiet=True))
    assert not (d / LOCK_NAME).exists()


@pytest.mark.slow
def test_a_run_that_fails_to_start_lets_the_dir_go_and_removes_what_it_made(tmp_path):
    bad = variant("(stride-rows :vocab vocab :seq seq)", '(npz "missing.npz")', TEXT)
    d = tmp_path / "new" / "run"
    with pytest.raises(RunError):
        train(program_of(bad, str(tmp_path / "a.sx")), RunOptions(steps=2, run_dir=d, quiet=True))
    assert not (tmp_path / "new").exists()       # the lock file went with the folders the run made


@pytest.mark.slow
def test_samples_and_plot_read_a_held_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 3.0 - s / 10}) + "\n" for s in (1, 2, 3)))
    (d / "samples.jsonl").write_text(json.dumps({"step": 1, "pass": "train", "row": 0, "fields": {"sample": [1, 2]}}) + "\n")
    lock = hold_run_dir(d)
    try:
        for cmd in (["plot", str(d), "-o", str(tmp_path / "m.png")], ["samples", str(d)]):
            got = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", *cmd], capture_output=True, text=True,
                                 timeout=120, cwd=ROOT)
            assert got.returncode == 0, (cmd, got.stderr)
            assert "in use" not in got.stderr
    finally:
        lock.release()


def test_a_checkpoint_dir_outside_the_run_dir_is_held_too(tmp_path):
    from sexpgpu_runtime.run.start import RunStart
    shared = tmp_path / "abs" / "shared"
    text = variant(":log (:every 1)", f':log (:every 1) :checkpoint (:every 2 :dir "{shared}")', TEXT)
    program = program_of(text, str(tmp_path / "a.sx"))
    first = RunStart(program, RunOptions(steps=4, run_dir=tmp_path / "a", quiet=True))
    first.prepare()
    try:
        assert (shared / LOCK_NAME).exists() and (tmp_path / "a" / LOCK_NAME).exists()
        second = RunStart(program, RunOptions(steps=4, run_dir=tmp_path / "b", quiet=True))
        with pytest.raises(RunDirInUse) as e:
            second.prepare()
        assert str(e.value).startswith(f"the checkpoint dir {shared} is in use by another run: pid {os.getpid()} on "
                                       f"host {socket.gethostname()}, since ")
        assert str(e.value).endswith("or give another `:checkpoint (:dir ...)`") and "\n" not in str(e.value)
        assert not (tmp_path / "b").exists()   # refused before anything was left behind
    finally:
        first.release()
    assert not (shared / LOCK_NAME).exists()
    again = RunStart(program, RunOptions(steps=4, run_dir=tmp_path / "b", quiet=True))
    again.prepare()
    again.release()
    inside = RunStart(program_of(TEXT, str(tmp_path / "a.sx")), RunOptions(steps=4, run_dir=tmp_path / "c", quiet=True))
    inside.prepare()   # the default dir lies in the run dir: its lock holds it
    assert inside.checkpoint_lock is None
    inside.release()
