"""What a run shows and logs: the terminal (a rich progress bar, or plain lines), metrics.jsonl, TensorBoard.

`Reporter` is told by the loop (loop.py) when each step ends (`ended`) and
handed one row per logged step, and knows nothing of how the row was
computed; `Throughput` is the steady rate it shows (steps/s and tokens/s,
the first step's compilation and the passes' and saves' time left out);
`keep_rows_up_to` trims the
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
import numpy as np

from ..errors import RunError
from .tensorboard import TensorBoardLog

#: The loader sources whose records are token rows: their steps count tokens (`batch_tokens`).
TOKEN_SOURCES = frozenset({"stride-rows", "text-bytes", "tokens", "text-tokens", "jsonl", "parquet"})


def batch_tokens(batch: dict, stacked: bool) -> int:
    """The tokens of one batch of token rows: the entries of its largest integer field of a row per
    record (`[B T]`, stacked `[S B T]`), so a window and its shifted target (`:tokens`, `:next`) count
    once; 0 when it has none. Reads shapes and dtypes only (never waits for the device)."""
    rank = 3 if stacked else 2
    sizes = [int(np.prod(v.shape)) for v in batch.values()
             if getattr(v, "ndim", 0) >= rank and np.issubdtype(np.dtype(v.dtype), np.integer)]
    return max(sizes, default=0)


#: The shortest time per step a rate is computed over (seconds): a window shorter than this for its
#: steps is no real measurement (clocks a few ticks apart), and no rate is shown until there is one.
MIN_STEP_SECONDS = 1e-6


class Throughput:
    """The steady rate of a run: steps/s and tokens/s from the end of its first step (`start` + 1,
    which holds the compilation, and in a resumed run the restore) to the end of the last step
    reported, less the time `pause` was told of (passes, checkpoint saves) in that window. `clock` gives seconds
    (`time.perf_counter`).

    A pause counts only from the end of the last step reported before it ended: time before that is
    a counted step's compute (a pass or a save first waits for the queued steps), and time before the
    first step ended (the compilation) is never in the window. So the window is never negative, and
    `rates` gives None until it is a real one (`MIN_STEP_SECONDS` per step counted)."""

    def __init__(self, start: int, clock=time.perf_counter):
        self.start, self.clock = start, clock
        self.since: float | None = None   # when the first step ended
        self.steps = 0
        self.tokens: int | None = 0
        self.paused = 0.0                 # paused time inside the window (before `last`)
        self.pending = 0.0                # paused time since `last`: in the window once a step ends
        self.last: float | None = None    # when the last step counted ended

    def ended(self, done: int, tokens: int | None = None) -> None:
        """Step `done` ended now, its batches holding `tokens` tokens (None: not token rows)."""
        now = self.clock()
        if self.since is None:
            self.since = now
            return
        self.steps += 1
        self.paused, self.pending = self.paused + self.pending, 0.0
        self.tokens = None if tokens is None or self.tokens is None else self.tokens + tokens
        self.last = now

    def pause(self, seconds: float) -> None:
        """The `seconds` up to now (a pass, a save) are left out of the rate: the part of them after
        the last step reported ended (see the class docstring)."""
        if self.since is None:
            return
        now = self.clock()
        counted_to = self.since if self.last is None else self.last
        self.pending += max(0.0, now - max(now - seconds, counted_to))

    def rates(self) -> tuple[float | None, float | None]:
        """(steps/s, tokens/s): None until a step after the first has ended over a real window
        (`MIN_STEP_SECONDS` per step); tokens/s None without tokens."""
        if not self.steps or self.last is None:
            return None, None
        seconds = self.last - self.since - self.paused
        if seconds < self.steps * MIN_STEP_SECONDS:
            return None, None
        return self.steps / seconds, (None if not self.tokens else self.tokens / seconds)


def rate_text(steps: float | None, tokens: float | None) -> str:
    """The steady rate as the terminal shows it: `31.9 steps/s  48.9k tokens/s`; `-` before it is known."""
    if steps is None:
        return "- steps/s"
    text = f"{steps:.3g} steps/s" if steps < 100 else f"{steps:.0f} steps/s"
    if tokens is not None:
        text += f"  {_si(tokens)} tokens/s"
    return text


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


class Reporter:
    """Metrics to the terminal (a rich progress bar on a terminal, plain lines otherwise), metrics.jsonl,
    and TensorBoard event files when `tensorboard` is set.

    A resumed run (`start` > 0) appends to metrics.jsonl after dropping the rows
    an interrupted process logged past `start`, and purges them from
    TensorBoard, so each step has one row. In a multi-process run process 0
    alone writes and prints (the losses are global, every process has them).
    The progress bar shows the row's `shown` metrics (`:log (:show [...])`; `loss` by default).
    """

    def __init__(self, run_dir: Path, total: int, progress: bool, quiet: bool, name: str, start: int = 0,
                 append: bool = False, tensorboard: bool = False, shown: tuple[str, ...] = ("loss",)):
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
        self.shown = tuple(shown)
        self.bar = None
        self.tb = None
        if tensorboard:
            self.tb = TensorBoardLog(run_dir, purge_step=start + 1 if append else None)
        self.throughput = Throughput(start)
        if progress and not quiet:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn(f"[bold]{name}"), BarColumn(), TextColumn("step"), MofNCompleteColumn(),
                                TextColumn("{task.fields[shown]}"), TextColumn("{task.fields[rate]}"),
                                TextColumn("ETA"), TimeRemainingColumn(), transient=False)
            self.task = self.bar.add_task("train", total=total, completed=start, shown=self.shown_text({}),
                                          rate=rate_text(None, None))
            self.bar.start()

    def ended(self, done: int, tokens: int | None = None):
        """Step `done` ended (its batches held `tokens` tokens, None: not token rows): the rate counts
        it and the bar moves to it."""
        self.done = max(self.done, done)
        self.throughput.ended(done, tokens)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, rate=rate_text(*self.throughput.rates()))

    def pause(self, seconds: float):
        """`seconds` spent on a pass or a save: left out of the steady rate."""
        self.throughput.pause(seconds)

    def log(self, row: dict, done: int):
        """A logged step: one metrics.jsonl row, TensorBoard scalars, the bar or one plain line."""
        try:
            if self.fh is not None:
                self.fh.write_row(json.dumps(row) + "\n")
            if self.tb is not None:
                self.tb.log(row)
        except OSError as e:
            raise RunError(f"cannot write the metrics of step {row.get('step')} in {self.path.parent}: {e.strerror or e}")
        steps, tokens = self.throughput.rates()
        if self.bar is not None:
            self.bar.update(self.task, completed=max(done, self.done), shown=self.shown_text(row),
                            rate=rate_text(steps, tokens))
        elif not self.quiet:
            parts = [f"step {row['step']}/{self.total}"] + [f"{k} {v:.4g}" for k, v in row.items() if k != "step"]
            if steps is not None:   # the steady rate, once a step after the first has ended
                parts.append(rate_text(steps, tokens))
            print("  ".join(parts), file=sys.stderr, flush=True)

    def shown_text(self, row: dict) -> str:
        """The bar's metrics: `loss 2.3456  reward 0.5`, each of `shown` from `row` (`-` before it has one)."""
        return "  ".join(f"{k} {row[k]:.4f}" if isinstance(row.get(k), (int, float)) else f"{k} -"
                         for k in self.shown)

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
