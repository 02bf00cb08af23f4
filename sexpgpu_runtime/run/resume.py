"""What `--resume` decides before anything trains, and the lines it prints.

A run that has already trained its steps is left exactly as it is: no
checkpoint restored, no metrics.jsonl row dropped or written, no event file
made (`refuse_finished` raises RunFinished, one line: the step it finished
at and how to train longer). Whether it finished is read from two places,
since a run without `:checkpoint` saves none at its end: the newest
checkpoint of this run (its JSON item) and the last whole row of
metrics.jsonl (the last step is always logged, loop.py). A resume
that goes on says the step it resumes from (`resuming_line`), and the rows
an interrupted process logged past that checkpoint, which it drops
(`dropped_line`).

In a multi-process run process 0 alone writes metrics.jsonl, so its last
row is what every process decides on. It must not import train.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np

from .checkpoint import Checkpoints
from ..errors import RunError, RunFinished


def last_logged_step(path: Path) -> int | None:
    """The largest `step` of metrics.jsonl's whole rows (a torn or foreign line is skipped), or None
    when the file is absent, unreadable or has no row."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    last = None
    for line in text.splitlines():
        try:
            step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(step, int) and not isinstance(step, bool):
            last = step if last is None else max(last, step)
    return last


def _everywhere(value: int | None) -> int | None:
    """Process 0's `value` on every process (the one that reads metrics.jsonl decides)."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils
    got = int(multihost_utils.broadcast_one_to_all(np.int64(-1 if value is None else value)))
    return None if got < 0 else got


def export_written(export: Path, metrics: Path) -> bool:
    """Whether `export` (a `--export` path: a safetensors file, or a directory in the Hugging Face
    layout or PEFT's, `--export-adapter`) holds the complete export of the run's last step, written after the last row of `metrics`
    (the export is written after its checkpoint, whose row comes first; one older than the rows is an
    earlier run's). A file is published whole (a temporary file renamed), so one that is there is
    complete; a directory is complete when its manifest says so and every file it lists is there
    (weights/export_files.py `is_complete`: the tokenizer and config.json too), so a cut export is
    not. False when it is absent."""
    from ..weights.export_files import is_complete
    export = Path(export)
    try:
        rows = metrics.stat().st_mtime_ns
    except OSError:
        rows = None
    if export.is_dir():
        at = is_complete(export)
    else:
        try:
            at = export.stat().st_mtime_ns if export.is_file() else None
        except OSError:
            at = None
    return at is not None and (rows is None or at >= rows)


def refuse_finished(store: Checkpoints | None, metrics: Path, run_dir: Path, total: int,
                    every: int | None = None, export: Path | None = None, again: bool = False) -> None:
    """RunFinished when the run in `run_dir` has trained `total` steps or more already and what it
    leaves at its end is there: by its newest checkpoint or by the last row of `metrics` (`store`
    None: no checkpoint dir, by the rows alone). A run with `:checkpoint` (`every`) has finished
    only when its checkpoint of step `total` or later is complete, and one given `--export`
    (`export`) only when that export was written whole (`export_written`): a run whose last checkpoint
    or export could not be written (a full disk, a kill while writing) is resumed, to write them. A
    finished run whose export is missing and that saved no checkpoint to write it from is a RunError
    (one line: why nothing can be written, and how to get the export).
    Nothing when the newest checkpoint is another run's (start.py then refuses it). Reads only;
    writes nothing.

    `again`: the run was started again without `--resume` or `--overwrite` (a second `sexpgpu run
    FILE`): the same decision, in words that say where the results are and how to train again."""
    newest = store.newest_meta() if store is not None else None
    if newest is not None and not store.provenance.is_ours(newest[1]):
        return   # another run's dir, whatever its metrics say: start.py refuses it, naming both
    saved = newest[0] if newest is not None else None
    logged = _everywhere(last_logged_step(metrics) if jax.process_index() == 0 else None)
    done = max(s for s in (saved, logged, -1) if s is not None)
    if done < total:
        return
    if every is not None and (saved is None or saved < total):
        return   # its last checkpoint is missing: the resume trains from the newest one and writes it
    if export is not None and not _everywhere(
            int(export_written(export, metrics)) if jax.process_index() == 0 else None):
        if saved is not None:
            return   # its export is missing: the resume restores the last checkpoint and writes it
        raise RunError(f"cannot write the export {export}: the run in {run_dir} has trained {done} steps but saved no "
                       "checkpoint to export from; to get the export, start it over with `--overwrite --export "
                       f"{export}`; nothing was changed")
    if done == total:
        what = f"the run in {run_dir} finished at step {done} of {done}"
    else:
        what = f"the run in {run_dir} has trained {done} steps, more than the {total} asked for"
    if saved is None:
        how = "it saved no checkpoint, so to train it longer start it over with `--overwrite` and more `--steps`"
    else:
        how = f"to train it longer, resume with `--steps N` above {done}"
        if saved < done:
            how += f" (it trains again from checkpoint step {saved}, the newest: the run saved none at step {done})"
    if again:
        where = f"its metrics are in {metrics}" + ("" if saved is None else f", its checkpoints in {store.spec.dir}")
        if export is not None:
            where += f", its export in {export}"
        longer = "" if saved is None else f", or `--resume --steps N` above {done} to train it longer"
        raise RunFinished(f"{what}: nothing was changed; {where}. Pass --overwrite to train it again{longer}",
                          done, total)
    raise RunFinished(f"{what}: nothing to resume, nothing was changed; {how}", done, total)


def resuming_line(step: int, total: int, ckpt_dir: Path, cut_short: list[int] = (),
                  failed: dict[int, str] | None = None) -> str:
    """`sexpgpu: resuming from step K of N (checkpoint DIR/K)`, and the newest step after K whose
    checkpoint's write failed (`failed`: step to reason, a full disk say) or was cut short
    (`cut_short`: a process killed while writing it), if any."""
    later = [s for s in cut_short if s > step]
    failed_later = {s: why for s, why in (failed or {}).items() if s > step}
    if failed_later and (not later or max(failed_later) >= max(later)):
        last = max(failed_later)
        why = f"; the checkpoint of step {last} could not be written ({failed_later[last]})"
    else:
        why = (f"; the checkpoint of step {max(later)} was cut short (its process was killed while writing it)"
               if later else "")
    return f"sexpgpu: resuming from step {step} of {total} (checkpoint {ckpt_dir / str(step)}){why}"


def dropped_line(dropped: list[int], step: int, path: Path, again: str = "trained and logged again") -> str:
    """The line saying which rows of `path` (metrics.jsonl, or samples.jsonl with `again` "sampled
    again") a resume from checkpoint `step` dropped (`dropped`: their steps)."""
    span = f"step {dropped[0]}" if len(dropped) == 1 else f"steps {dropped[0]}-{dropped[-1]}"
    rows, they = ("row", "it is") if len(dropped) == 1 else ("rows", "they are")
    return (f"sexpgpu: dropped {len(dropped)} {rows} of {path} ({span}), logged after checkpoint step {step} by the "
            f"earlier run; {they} {again}")


def missing_rows_line(metrics: Path, step: int) -> str | None:
    """The warning of a resume from checkpoint `step` (> 0) whose metrics.jsonl is gone: the rows up to
    `step` are not there, and the resumed run's start a new file. None when the file is there."""
    if step == 0 or metrics.exists():
        return None
    return (f"sexpgpu: warning: {metrics} is missing, so it will hold the rows after step {step} only (those of "
            "steps up to it were logged by the earlier run); put it back before resuming to keep them")
