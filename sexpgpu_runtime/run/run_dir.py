"""The run dir's upkeep: made and proven writable, its checkpoints opened, an earlier run's files cleared.

A run dir holds metrics.jsonl, TensorBoard's event files and, by default,
the checkpoint dir. What a run does with a dir an earlier run used (refuse,
resume, or clear with `--overwrite`) is decided in start.py; here are the
steps it takes. Errors are RunErrors.
"""
from __future__ import annotations

import os
from pathlib import Path

import jax

from sexpgpu_lang import ir

from .checkpoint import Checkpoints
from .checkpoint_meta import Identity
from .checkpoint_policy import checkpoint_spec
from ..errors import CheckpointError, FileInTheWay, PathProblem, RunError
from .options import RunOptions
from ..paths import make_writable_dir
from .resume import last_logged_step


def prepare_run_dir(run_dir: Path) -> None:
    """Create the run dir and prove it writable, before anything trains."""
    try:
        make_writable_dir(run_dir, jax.process_index())
    except FileInTheWay as e:
        raise RunError(f"cannot use {run_dir} as the run dir: {e}")
    except PathProblem as e:
        raise RunError(f"cannot write to run dir {run_dir}: {e}")


def outermost_missing(path: Path) -> Path | None:
    """The outermost of `path` and its parents that does not exist (what `prepare_run_dir` will make
    for it), or None when `path` exists."""
    path = Path(os.path.abspath(path))
    if path.exists():
        return None
    while not path.parent.exists() and path.parent != path:
        path = path.parent
    return path


def remove_made(run_dir: Path, made: Path | None) -> None:
    """Remove the run dir `prepare_run_dir` made, and the parents it made with it (`made`, from
    `outermost_missing`), where they are still empty: a run that failed before it wrote anything
    leaves no empty folders behind. Process 0 alone; anything not empty is left."""
    if made is None or jax.process_index() != 0:
        return
    path = Path(os.path.abspath(run_dir))
    while True:
        try:
            path.rmdir()
        except OSError:
            return
        if path == made:
            return
        path = path.parent


def open_checkpoints(program: ir.Program, options: RunOptions, pretrained: dict[str, str] | None = None) -> Checkpoints:
    """The run's checkpoint dir, created and proven writable (RunError otherwise); `pretrained`: the
    SHA-256 of each `:pretrained` file by path (weights.pretrained.content_hashes), which each
    checkpoint records."""
    try:
        spec = checkpoint_spec(program.run.checkpoint, options.run_dir)
        identity = Identity(program.identity, program.run.seed, (program.identity_apart_from_steps, program.run.steps))
        return Checkpoints(spec, identity, program.path, pretrained)
    except CheckpointError as e:
        raise RunError(str(e))


def nothing_to_resume(checkpoints: Path, metrics: Path, cut_short: list[int] = (), every: int | None = None,
                      failed: dict[int, str] | None = None) -> str:
    """The message of a resume that finds no complete checkpoint in `checkpoints`; `cut_short`: the
    steps whose writes were left unfinished (a process killed while writing, Checkpoints.cut_short);
    `failed`: the steps whose writes failed, with why (a full disk: Checkpoints.failed), told as
    such. With neither on disk (killed before orbax made its folder), a metrics.jsonl that logged
    a step at or past `:checkpoint :every` (`every`) tells the same as a cut-short write: that
    checkpoint was begun."""
    if failed and (not cut_short or max(failed) >= max(cut_short)):
        last = max(failed)
        start = (f"pass --overwrite instead of --resume to start over at step 0 (metrics.jsonl holds the rows of "
                 f"a run none of whose checkpoints was completed)" if has_rows(metrics)
                 else "run without --resume to start at step 0")
        return (f"nothing to resume: no complete checkpoint in {checkpoints} (the write of step {last} failed: "
                f"{failed[last]}); {start}")
    if not cut_short and every:
        logged = last_logged_step(metrics)
        if logged is not None and logged >= every:
            cut_short = [logged // every * every]
    saved = "none of whose checkpoints was completed" if cut_short else "that saved no checkpoint"
    start = (f"pass --overwrite instead of --resume to start over at step 0 (metrics.jsonl holds the rows of "
             f"a run {saved})" if has_rows(metrics) else "run without --resume to start at step 0")
    why = (f" (the write of step {max(cut_short)} was cut short: its process was killed while writing it)"
           if cut_short else "")
    return f"nothing to resume: no complete checkpoint in {checkpoints}{why}; {start}"


def has_rows(metrics: Path) -> bool:
    """Whether an earlier run logged to this metrics.jsonl (an empty file, left by a run that failed
    before its first logged step, holds nothing to keep)."""
    try:
        return metrics.is_file() and metrics.stat().st_size > 0
    except OSError:
        return False


def clear_run_dir(run_dir: Path, store: Checkpoints) -> None:
    """What `--overwrite` removes before a fresh start: every checkpoint in the checkpoint dir,
    metrics.jsonl (and a torn rewrite of it), samples.jsonl, and the TensorBoard event files in the
    run dir. Nothing else in either dir is touched."""
    store.delete_all()
    if jax.process_index() != 0:   # process 0 writes the metrics (Reporter) and removes them
        return
    for p in [run_dir / "metrics.jsonl", run_dir / "metrics.jsonl.tmp", run_dir / "samples.jsonl",
              *run_dir.glob("events.out.tfevents.*")]:
        try:
            p.unlink(missing_ok=True)
        except OSError as e:
            raise RunError(f"cannot remove {p} for --overwrite: {e.strerror or e}")
