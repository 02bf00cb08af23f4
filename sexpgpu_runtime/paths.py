"""Where a run writes: directories and output files proven usable before anything trains.

A path that cannot work (a file where a directory must be, a missing or
read-only directory, a directory where a file must go) is one line naming
the path and the reason, found before training rather than after it.

Plain os and pathlib: nothing here imports JAX or the rest of the runtime.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import FileInTheWay, PathProblem


def file_in_the_way(path: Path) -> Path | None:
    """`path` itself, or its nearest existing ancestor, when that is not a directory; else None.

    `--run-dir notes.txt/run` cannot be made because notes.txt is a file:
    this names notes.txt, where the OS says only "Not a directory".
    """
    p = Path(path)
    while True:
        if p.exists():
            return None if p.is_dir() else p
        if p.parent == p:
            return None
        p = p.parent


def not_a_dir_reason(path: Path) -> str | None:
    """Why `path` cannot be (or become) a directory because of a file in the way, or None."""
    blocker = file_in_the_way(path)
    if blocker is None:
        return None
    if blocker == Path(path):
        return "it is a file, not a directory"
    return f"{blocker} is a file, not a directory"


def make_writable_dir(path: Path, process: int) -> None:
    """Create the directory `path` (and its parents) and prove it writable, before anything trains:
    a file `.write-test.<process>.<pid>` is written in it and removed (one name per process, since
    several processes may share the directory, and two runs may race to make it).

    Raises FileInTheWay when a file is where the directory must be, PathProblem when the OS refuses;
    the message of either is the reason alone (`it is a file, not a directory`, `Permission denied`),
    for the caller to say which directory it is.
    """
    path = Path(path)
    why = not_a_dir_reason(path)
    if why is not None:
        raise FileInTheWay(why)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test.{process}.{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise PathProblem(e.strerror or str(e))


def check_output_file(path: Path) -> None:
    """Raise PathProblem unless a file can be written at `path`: not a directory, in an existing,
    writable directory. Probed by creating (and removing) a temporary file beside it."""
    path = Path(path)
    if path.is_dir():
        raise PathProblem(f"cannot write {path}: it is a directory")
    parent = path.parent
    blocker = file_in_the_way(parent)
    if blocker is not None:
        raise PathProblem(f"cannot write {path}: {blocker} is a file, not a directory")
    if not parent.is_dir():
        raise PathProblem(f"cannot write {path}: there is no directory {parent}")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise PathProblem(f"cannot write {path}: {e.strerror or e}")


def umask() -> int:
    """The process's umask (read from /proc where there is one, so no other thread sees it change)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish(tmp: Path, path: Path) -> None:
    """Give a finished temporary file the permissions a new file gets (0666 less the umask: 0644
    usually; writers such as safetensors make 0600 files), then rename it to `path` atomically."""
    os.chmod(tmp, 0o666 & ~umask())
    os.replace(tmp, path)
