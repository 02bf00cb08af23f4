"""The test tiers. `pytest -m "not slow"` is the everyday loop; the `slow` marker (pyproject.toml's
`markers`) holds what takes seconds a test: training runs and comparisons with XLA's compiled
graphs, `sexpgpu run` and other processes that start JAX, real editors and LSP clients, fuzz and
random-edit sequences (a property test bounded to a few seconds may stay, as the incremental
check's in tests/test_check_incremental.py). A quick process (`sexpgpu lint`, `fmt`, `explain`,
`python -c`) may stay.

One part of that is checked here: a test that starts `sexpgpu run` or a real editor must be marked.

The check is Python's `subprocess.Popen` audit event (`sys.addaudithook`, PEP 578): while a test
without the marker is set up, run or torn down, a process that `spawned_kind` names is refused
before it starts, with a `SlowTierError` that says which test and how to mark it. A whole file is
marked with `pytestmark = pytest.mark.slow`, one test with `@pytest.mark.slow`. Only the test's
own process is watched: what a started process starts in turn is not seen.
"""
from __future__ import annotations

import os
import sys
import tempfile

import pytest

# No test reads or writes the user's compilation cache (sexpgpu_runtime/run/compile_cache.py); a
# process a test starts inherits this. A test of the cache gives its own directory.
os.environ["SEXPGPU_COMPILE_CACHE"] = "off"
# Nor its directory of built native code: the compiled trip loop's look in C
# (sexpgpu_runtime/lowering/trip_look.py) is built into one of this session's.
os.environ["SEXPGPU_FFI_CACHE"] = tempfile.mkdtemp(prefix="sexpgpu-ffi-")

#: Programs that are a real editor or its parts (Neovim, Emacs, code-server and the browser it
#: is driven in, Node.js that runs them).
EDITORS = frozenset({"nvim", "emacs", "code-server", "chromium", "node"})


class SlowTierError(RuntimeError):
    """A test outside the `slow` tier started a process that belongs to it."""


def spawned_kind(argv) -> str | None:
    """What `argv` (a `Popen` argument list, or one command string) starts when it is one the
    `slow` tier holds: "`sexpgpu run`" (the `sexpgpu` program, `python -m sexpgpu_cli...`, or a
    `python -c` that calls `sexpgpu_cli`, with `run` as its subcommand) or "the editor NAME"
    (a program in `EDITORS`); None otherwise."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = os.fsdecode(argv).split()
    args = [os.fsdecode(a) for a in argv]
    for i, arg in enumerate(args):
        name = os.path.basename(arg)
        if name in EDITORS:
            return f"the editor {name}"
        cli = (name == "sexpgpu"
               or (i > 0 and args[i - 1] == "-m" and arg.split(".")[0] == "sexpgpu_cli")
               or (i > 0 and args[i - 1] == "-c" and "sexpgpu_cli" in arg))
        if cli:
            return "`sexpgpu run`" if args[i + 1:i + 2] == ["run"] else None
    return None


_fast_test: list[str] = []   # the node id of the test now running outside the slow tier, if any


def _audit(event: str, args: tuple) -> None:
    if event != "subprocess.Popen" or not _fast_test:
        return
    kind = spawned_kind(args[1] if args[1] is not None else args[0])
    if kind:
        raise SlowTierError(f"{_fast_test[0]} starts {kind} but is not marked slow: add "
                            "`@pytest.mark.slow` to it (or `pytestmark = pytest.mark.slow` to its file)")


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Refuse `slow` processes while an unmarked test (with its fixtures) runs."""
    if item.get_closest_marker("slow") is None:
        _fast_test.append(item.nodeid)
    try:
        return (yield)
    finally:
        _fast_test.clear()
