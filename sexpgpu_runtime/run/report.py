"""What a run shows and logs: the terminal (a rich progress bar, or plain lines), metrics.jsonl, TensorBoard.

`Reporter` is handed one row per logged step by the loop (train.py) and
knows nothing of how the row was computed; `keep_rows_up_to` trims the
rows an interrupted process logged past its last checkpoint, so a resumed
run has one row per step. Each metrics.jsonl row is written whole or not
at all (`RowFile`): a full disk is one RunError and the file keeps only
whole rows. It must not import train.py.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import jax

from ..errors import RunError
from .tensorboard import TensorBoardLog


class Reporter:
    """Metrics to the terminal (a rich progress bar on a terminal, plain lines otherwise), metrics.jsonl,
    and TensorBoard event files when `tensorboard` is set.

    A resumed run (`start` > 0) appends to metrics.jsonl after dropping the rows
    an interrupted process logged past `start`, and purges them from
    TensorBoard, so each step has one row. In a multi-process run process 0
    alone writes and prints (the losses are global, every process has them).
    """

    def __init__(self, run_dir: Path, total: int, progress: bool, quiet: bool, name: str, start: int = 0,
                 append: bool = False, tensorboard: bool = False):
        self.path = run_dir / "metrics.jsonl"
        self.fh = None
        self.dropped: list[int] = []   # the steps of the rows a resume dropped (`keep_rows_up_to`)
        if jax.process_index() != 0:
            quiet, progress, tensorboard = True, False, False
        try:
            if append and jax.process_index() == 0:
                self.dropped = keep_rows_up_to(self.path, start)
            if jax.process_index() == 0:
                self.fh = RowFile(self.path, append)
        except OSError as e:
            raise RunError(f"cannot write {self.path}: {e.strerror or e}")
        self.total, self.quiet, self.start, self.done = total, quiet, start, start
        self.bar = None
        self.tb = None
        if tensorboard:
            self.tb = TensorBoardLog(run_dir, purge_step=start + 1 if append else None)
        self.t0 = time.perf_counter()
        if progress and not quiet:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn(f"[bold]{name}"), BarColumn(), TextColumn("step"), MofNCompleteColumn(),
                                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} steps/s"),
                                TextColumn("ETA"), TimeRemainingColumn(), transient=False)
            self.task = self.bar.add_task("train", total=total, completed=start, loss="-", rate="-")
            self.bar.start()

    def _rate(self, done: int) -> float:
        elapsed = time.perf_counter() - self.t0
        return (done - self.start) / elapsed if elapsed > 0 else 0.0

    def advance(self, done: int):
        """A step was queued: move the bar only."""
        self.done = done
        if self.bar is not None:
            self.bar.update(self.task, completed=done)

    def log(self, row: dict, done: int):
        """A logged step: one metrics.jsonl row, TensorBoard scalars, the bar or one plain line."""
        try:
            if self.fh is not None:
                self.fh.write_row(json.dumps(row) + "\n")
            if self.tb is not None:
                self.tb.log(row)
        except OSError as e:
            raise RunError(f"cannot write the metrics of step {row.get('step')} in {self.path.parent}: {e.strerror or e}")
        rate = self._rate(done)
        if self.bar is not None:   # the bar may be ahead of the row: rows are written once the device has the step
            self.bar.update(self.task, completed=max(done, self.done), loss=f"{row.get('loss', float('nan')):.4f}",
                            rate=f"{rate:.1f}")
        elif not self.quiet:
            parts = [f"step {row['step']}/{self.total}"] + [f"{k} {v:.4g}" for k, v in row.items() if k != "step"]
            print("  ".join(parts) + f"  {rate:.1f} steps/s", file=sys.stderr, flush=True)

    def close(self):
        """Stop the progress bar and close metrics.jsonl and TensorBoard's files (a RunError when
        TensorBoard cannot write its last events, the disk being full say; metrics.jsonl holds
        nothing unwritten)."""
        if self.bar is not None:
            self.bar.stop()
        if self.fh is not None:
            self.fh.close()
            self.fh = None
        if self.tb is not None:
            tb, self.tb = self.tb, None
            try:
                tb.close()
            except OSError as e:
                raise RunError(f"cannot write the TensorBoard events in {self.path.parent}: {e.strerror or e}")


class RowFile:
    """metrics.jsonl opened for whole rows: each `write_row` goes to the file in unbuffered
    writes, and one that fails part way (ENOSPC, EIO) is cut off again (`ftruncate` to where the
    row began) before the OSError is raised, so the file never ends in a torn row and nothing is
    left in a buffer for `close` to fail on."""

    def __init__(self, path: Path, append: bool):
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        self.fd = os.open(path, flags, 0o644)
        self.end = os.lseek(self.fd, 0, os.SEEK_END)

    def write_row(self, line: str) -> None:
        """Write `line` whole, or raise OSError leaving the file as it was."""
        data = line.encode("utf-8")
        done = 0
        try:
            while done < len(data):
                done += os.write(self.fd, data[done:])
        except OSError:
            if done:
                try:
                    os.ftruncate(self.fd, self.end)
                except OSError:
                    pass   # (the next `keep_rows_up_to` drops a torn last row)
            raise
        self.end += done

    def close(self) -> None:
        """Close the file (everything is already written)."""
        os.close(self.fd)


def keep_rows_up_to(path: Path, step: int) -> list[int]:
    """Drop the metrics.jsonl rows past `step` (logged by a process that stopped before its next
    checkpoint), and a torn line; return the steps of the rows dropped (none: the file is left as it is).

    Rewritten through a temporary file and a rename, so a kill here loses nothing.
    """
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    kept, dropped, torn = [], [], bool(text) and not text.endswith("\n")   # a row without its end is torn
    for line in text.splitlines():
        try:
            at = json.loads(line)["step"]
            keep = at <= step
        except (ValueError, KeyError, TypeError):
            torn = True
            continue
        if keep:
            kept.append(line)
        else:
            dropped.append(at)
    if not dropped and not torn:
        return []
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
    tmp.replace(path)
    return dropped
