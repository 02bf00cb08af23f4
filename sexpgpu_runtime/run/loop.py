"""The step loop: a run's steps queued one ahead of the device, each step's end shown as it
comes, its rows logged in step order, its passes run, every value checked, and the state after each
completed step kept for a stop to save.

Every step's loss, metrics and diagnostics are checked for NaN and Inf on the device (the training
graph keeps the first bad step of each: training_graphs.tally), so reading them back is never needed
to go on. Once step N is
queued, the loop waits for step N - `STEPS_AHEAD` to end (its record of the first bad loss, a
scalar, is ready): the device always has the next step queued while the host waits, and the host
is never more than `STEPS_AHEAD` steps past what the terminal shows, so a stop signal lands in the
step after the one last shown (`_ended`). Each step is reported when it ends: the progress bar
moves, the steady rate (report.Throughput) counts it, and a logged step's row is written then, in
step order. At a pass, a checkpoint step, a stop and the end the loop waits for every queued step:
the rows before are written, then the record is read (`LoopParts.settle`) before anything of that
step is reported or saved; the time a pass or a save takes is left out of the rate.

The loop receives what it uses, named in one `LoopParts` (the trainer's step, passes and checks, the
schedule of logs and passes), and the run's reporter, checkpoint policy and sample log; it knows
nothing else of the trainer.
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Callable

import jax
import numpy as np

from sexpgpu_lang import ir

from ..data.prefetch import Prefetch
from ..errors import BadValue
from .checkpoint_policy import CheckpointPolicy
from .checks import ValueChecks
from .report import Reporter
from .samples import SampleLog
from .state import RunState, StepReport

#: How many steps past the last ended one the host may have queued: once step N is queued the loop
#: waits for step N - STEPS_AHEAD to end. One keeps the device fed (the next step is queued while
#: it runs the current one; benchmarks/live_output.py measures the step against 8 ahead) and each
#: step's row and the progress bar at most one step late; it also bounds what waits in the queue
#: (batches, and on a CPU mesh the collectives of many queued steps, which XLA:CPU's device threads
#: deadlocked on in an FSDP all-gather).
STEPS_AHEAD = 1


def _mean_reports(groups: list[list[dict]]) -> dict[str, float]:
    flat = [m for g in groups for m in g]
    out: dict[str, float] = {}
    for name in dict.fromkeys(k for m in flat for k in m):
        vals = [float(m[name]) for m in flat if name in m]
        out[name] = sum(vals) / len(vals)
    return out


@dataclass(frozen=True)
class LoopParts:
    """What the step loop uses of a run (train.Trainer.loop_parts makes it):

    - `step(state, samples)`: one training step queued, `(state after it, StepReport)`;
    - `run_pass(pass, state, samples)`: a pass's averaged row (`{"NAME/metric": value}`), waiting for it;
    - `settle()`: raise the BadValue (or BadDraw) of the first non-finite value of any step so far;
    - `checks`: the NaN and Inf checks of records and rows (checks.ValueChecks);
    - `lr(step)`: the learning rate of optimizer step `step` (0-based), logged as `lr`;
    - `prefetch(records, steps)`: start reading the training batches of `steps` steps from position
      `records` ahead (batches.Batches.prefetch), closed by the loop when it ends;
    - `log_every`: `:log :every`; `passes`: the file's passes (each run every `:every` steps and last).
    """

    step: Callable[[RunState, SampleLog | None], tuple[RunState, StepReport]]
    run_pass: Callable[[ir.PassIR, RunState, SampleLog | None], dict]
    settle: Callable[[], None]
    checks: ValueChecks
    lr: Callable[[int], float]
    prefetch: Callable[[int, int], Prefetch]
    log_every: int
    passes: tuple


class Loop:
    """One stretch of training: from a state to step `last`, logging to `reporter` every `:log :every`
    steps (and the first and last), running the passes, and after each step letting `checkpoints`
    (checkpoint_policy.CheckpointPolicy, or None: no checkpoint) save it when due; `samples`
    (samples.SampleLog, or None) takes `:samples`' rows. `completed` is the last completed state
    (the one a stop saves): the first state until a step completes."""

    def __init__(self, parts: LoopParts, reporter: Reporter, last: int, checkpoints: CheckpointPolicy | None = None,
                 samples: SampleLog | None = None):
        self.parts, self.reporter, self.last = parts, reporter, last
        self.checkpoints, self.samples = checkpoints, samples
        self.completed: RunState | None = None
        self.history: list[dict] = []
        self.waiting: collections.deque = collections.deque()   # (step, report) of logged steps
        self.in_flight: collections.deque = collections.deque()   # (step, bad, tokens) of steps not yet ended
        self.last_ended = 0   # the last step reported ended (`_ended`)

    def run(self, state: RunState) -> tuple[RunState, list[dict]]:
        """Train from `state`; returns the last state and the logged rows. A NaN stops the run naming
        the first bad step (BadValue); each logged row is also checked in full. On a stop or a crash
        the queued steps' rows are written first, as if it had not come."""
        feed = self.parts.prefetch(state.records, self.last - state.step)
        try:
            return self._steps(state)
        except BadValue:
            raise
        except BaseException:
            try:
                self._write_rows(wait=True)
            except BadValue as bad:   # a row before it was bad: the run stops there, as if it had been written
                raise bad from None   # at its step (and a stop then saves nothing past it)
            except Exception:         # the device itself failing: the first error is the one to tell
                pass
            raise
        finally:
            feed.close()

    def report_row(self, done: int, report: StepReport) -> dict:
        """The metrics.jsonl row of a logged step (this syncs with the device): its loss, the learning
        rate its update used (`lr`: the schedule at optimizer step `done - 1`), then the metrics."""
        row = {"step": done, "loss": float(np.mean([float(x) for x in report.losses])),
               "lr": self.parts.lr(done - 1)}
        row.update(_mean_reports(report.metrics))
        row.update(_mean_reports(report.diagnostics))
        return row

    def _ended(self, upto: int | None) -> None:
        """Report the queued steps that have ended, in order: every one up to step `upto` waiting for it
        (None: all of them), then any later one already ended; each moves the progress bar and the
        rate (`Reporter.ended`) and then has its row written if it is logged (`_write_rows`)."""
        while self.in_flight:
            done, bad, tokens = self.in_flight[0]
            if upto is None or done <= upto:
                jax.block_until_ready(bad)
            elif not bad[0].is_ready():
                break
            self.in_flight.popleft()
            self.last_ended = done
            self.reporter.ended(done, tokens)
            self._write_rows(wait=False)

    def _write_rows(self, wait: bool) -> None:
        """Write the rows of logged steps in order: each once its step has ended (`wait`: all of them,
        waiting for every queued step first). A NaN loss up to that step, or in the row, raises
        BadValue; a bad traced temperature of a generator up to that step, BadDraw."""
        if wait:
            self._ended(None)
        checks = self.parts.checks
        while self.waiting and (wait or self.waiting[0][0] <= self.last_ended):
            done, report = self.waiting.popleft()
            checks.check_records(report.bad, report.draw)
            row = self.report_row(done, report)
            checks.check_row(row)
            self.history.append(row)
            self.reporter.log(row, done)

    def _steps(self, state: RunState) -> tuple[RunState, list[dict]]:
        parts, last = self.parts, self.last
        self.completed = state
        while state.step < last:
            state, report = parts.step(state, self.samples)
            done = state.step
            log_now = done % parts.log_every == 0 or done == last or done == 1
            save_now = self.checkpoints is not None and self.checkpoints.due(done)
            passes_now = [ps for ps in parts.passes if done % ps.every == 0 or done == last]
            if log_now and not (save_now or passes_now):
                self.waiting.append((done, report))
            self.in_flight.append((done, report.bad, report.tokens))
            self._ended(done - STEPS_AHEAD)
            if save_now or passes_now:
                self._write_rows(wait=True)   # the queued steps' compute counts in the rate
                paused = time.perf_counter()   # the pass or the save from here: left out of it
                parts.settle()
                pass_rows = {}
                for ps in passes_now:
                    pass_rows.update(parts.run_pass(ps, state, self.samples))
                full = self.report_row(done, report)
                full.update(pass_rows)
                parts.checks.check_row(full)
                if log_now or pass_rows:
                    self.history.append(full)
                    self.reporter.log(full, done)
            if self.checkpoints is not None:
                self.checkpoints.after_step(state)
            if save_now or passes_now:
                self.reporter.pause(time.perf_counter() - paused)
            self.completed = state
            if self.samples is not None:   # samples.py: the rows whose copy has landed
                self.samples.poll(state.step)
        self._write_rows(wait=True)
        parts.settle()
        return state, self.history
