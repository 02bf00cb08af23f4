"""Where a run writes: directories and output files proven usable before anything trains.

A path that cannot work (a file where a directory must be, a missing or
read-only directory, a directory where a file must go) is one line naming
the path and the reason, found before training rather than after it.

Plain os and pathlib: nothing here imports JAX or the rest of the runtime.
"""
from __future__ import annotations

from pathlib import Path


class PathProblem(Exception):
    """A path that cannot be written, for a reason the user can act on (one line)."""


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


