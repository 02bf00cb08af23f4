"""A run dir held by one run at a time: an `fcntl.flock` on `RUN_DIR/.sexpgpu-lock`; a checkpoint
dir outside the run dir (an absolute `:checkpoint (:dir ...)`, one that two run dirs may share) is
held the same way, by its own `.sexpgpu-lock` (start.py).

`hold_run_dir` takes the lock before the run writes anything in the dir (start.py): a second
`sexpgpu run` of the dir, fresh, `--resume` or `--overwrite`, is refused with `RunDirInUse`,
one line naming the holder (its pid, host, start time and command, which the holder writes in
the lock file once it has the lock). The lock belongs to the open file, so the kernel releases
it when the holder exits however it exits (SIGKILL included): a killed run never leaves the dir
held, and its stale lock file is taken over by the next run. `RunDirLock.release` removes the
file, then drops the lock; a process that opened the file before it was removed and gets the
lock after finds the file gone (another inode, or none, at the path) and opens it again, so
two runs never hold two inodes of one path.

Readers (`sexpgpu samples`, `plot`) take no lock: they only read. In a multi-process run process
0 alone takes the lock, and its answer is every process's (start.py). Plain os and fcntl:
nothing here imports JAX.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils

from ..errors import RunDirInUse, RunError

#: The lock file's name in the run dir.
LOCK_NAME = ".sexpgpu-lock"


def holder_record(command: list[str] | None = None) -> dict:
    """What a holder writes in the lock file: its pid, host, start time (local ISO 8601, to the
    second) and command line."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join(command if command is not None else [Path(sys.argv[0]).name, *sys.argv[1:]])}


def describe_holder(text: str) -> str:
    """The holder, as the refusal names it, from the lock file's `text` (a holder that has not yet
    written it, or a record that does not read, is "another process")."""
    try:
        rec = json.loads(text)
        pid, host, since = int(rec["pid"]), str(rec["host"]), str(rec["since"])
    except (ValueError, KeyError, TypeError):
        return "another process (it has not yet said which)"
    command = rec.get("command")
    shown = f" (`{str(command)[:200]}`)" if command else ""
    return f"pid {pid} on host {host}, since {since}{shown}"


class RunDirLock:
    """The lock on one run dir, held from `hold_run_dir` until `release` (or the process's end)."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent; never raises)."""
        if self.fd is None:
            return
        try:
            same = os.stat(self.path)
            mine = os.fstat(self.fd)
            if (same.st_dev, same.st_ino) == (mine.st_dev, mine.st_ino):
                os.unlink(self.path)
        except OSError:
            pass
        try:
            os.close(self.fd)   # (closing the file drops its flock)
        except OSError:
            pass
        self.fd = None


#: The last words of a refusal: another dir to give, by what the dir is.
OTHER = {"run dir": "give another --run-dir", "checkpoint dir": "give another `:checkpoint (:dir ...)`"}


def _refusal(run_dir: Path, fd: int, what: str = "run dir") -> RunDirInUse:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", errors="replace")
    except OSError:
        text = ""
    name = f"{run_dir}" if what == "run dir" else f"the {what} {run_dir}"
    return RunDirInUse(f"{name} is in use by another run: {describe_holder(text)}; nothing was written. "
                       "Wait for it to finish or stop it (a run that was killed frees the dir by itself), "
                       f"or {OTHER[what]}", describe_holder(text))


def hold_run_dir(run_dir: Path, command: list[str] | None = None, what: str = "run dir") -> RunDirLock | None:
    """Take the lock on `run_dir` (which must exist), writing this process's `holder_record` in it
    (`command`: the command line it names, default `sys.argv`). `what` is the dir's role in the
    refusal ("run dir", or "checkpoint dir" for a `:checkpoint :dir` outside the run dir).

    Raises RunDirInUse, having changed nothing, when another process holds it. None where the
    file system offers no locks (ENOLCK, EOPNOTSUPP): the run goes on unlocked. Any other
    OSError is the caller's to report (the dir cannot be written).
    """
    path = Path(run_dir) / LOCK_NAME
    for _ in range(100):   # (a retry only when the file was removed between the open and the lock)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            err = _refusal(run_dir, fd, what)
            os.close(fd)
            raise err
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                return None
            raise
        try:
            now, mine = os.stat(path), os.fstat(fd)
            current = (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)
        except FileNotFoundError:
            current = False
        if not current:      # the holder released (and removed) it between our open and our lock
            os.close(fd)
            continue
        data = (json.dumps(holder_record(command)) + "\n").encode("utf-8")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError:
            pass   # (a full disk: the lock holds all the same; a refused run names "another process")
        return RunDirLock(path, fd)
    raise OSError(errno.EAGAIN, f"the lock file {path} kept being replaced")


def hold_run_dir_everywhere(run_dir: Path, what: str = "run dir") -> RunDirLock | None:
    """`hold_run_dir` on process 0, its answer broadcast to every process of a multi-process run
    (`what`: the dir's role, as `hold_run_dir` takes it).

    Raises RunDirInUse (naming the holder) on every process when another run holds `run_dir`,
    and RunError when the lock file cannot be written. The dir must exist.
    """
    lock, refused = None, None
    if jax.process_index() == 0:
        try:
            lock = hold_run_dir(run_dir, what=what)
        except RunDirInUse as e:
            refused = e
        except OSError as e:
            raise RunError(f"cannot write to {what} {run_dir}: {e.strerror or e}")
    if jax.process_count() > 1:
        held = int(multihost_utils.broadcast_one_to_all(np.int32(refused is not None)))
        if held and refused is None:
            refused = RunDirInUse(f"{run_dir} is in use by another run (process 0 of this run "
                                  "says so, naming it); nothing was written", "another run")
    if refused is not None:
        raise refused
    return lock
