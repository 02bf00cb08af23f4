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
the rows before are written, then the record is read (`Trainer.settle`) before anything of that
step is reported or saved; the time a pass or a save takes is left out of the rate.
"""
from __future__ import annotations

import collections
import time

import jax
import numpy as np

from ..errors import BadValue
from .report import Reporter
from .state import RunState

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


class Loop:
    """One `Trainer.fit`: from a state to the trainer's last step, logging to `reporter` every
    `:log :every` steps (and the first and last), running the passes, calling `after_step(state,
    row)` after each step is queued (`row` is the step's row when it was written at once, at a pass
    or checkpoint step; else None). `trainer.completed` is kept at the last completed step."""

    def __init__(self, trainer, reporter: Reporter, after_step=None):
        """`trainer` is a train.Trainer (its `step`, `bad`, `step_tokens`, `checks`, `settle`)."""
        self.trainer, self.reporter, self.after_step = trainer, reporter, after_step
        self.history: list[dict] = []
        self.waiting: collections.deque = collections.deque()   # (step, reports, bad, draw) of logged steps
        self.in_flight: collections.deque = collections.deque()   # (step, bad, tokens) of steps not yet ended
        self.last_ended = 0   # the last step reported ended (`_ended`)

    def run(self, state: RunState) -> tuple[RunState, list[dict]]:
        """Train from `state`; returns the last state and the logged rows. A NaN stops the run naming
        the first bad step (BadValue); each logged row is also checked in full. On a stop or a crash
        the queued steps' rows are written first, as if it had not come."""
        tr = self.trainer
        feed = tr.batches.prefetch(state.records, tr.steps - state.step)
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

    def report_row(self, done: int, reports: dict) -> dict:
        """The metrics.jsonl row of a logged step (this syncs with the device): its loss, the learning
        rate its update used (`lr`: the schedule at optimizer step `done - 1`), then the metrics."""
        row = {"step": done, "loss": float(np.mean([float(x) for x in reports["losses"]])),
               "lr": self.trainer.lr(done - 1)}
        row.update(_mean_reports(reports["metrics"]))
        row.update(_mean_reports(reports["diagnostics"]))
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
        checks = self.trainer.checks
        while self.waiting and (wait or self.waiting[0][0] <= self.last_ended):
            done, reports, bad, draw = self.waiting.popleft()
            checks.check_records(bad, draw)
            row = self.report_row(done, reports)
            checks.check_row(row)
            self.history.append(row)
            self.reporter.log(row, done)

    def _steps(self, state: RunState) -> tuple[RunState, list[dict]]:
        tr = self.trainer
        run = tr.program.run
        tr.completed = state
        while state.step < tr.steps:
            state, reports = tr.step(state)
            done = state.step
            log_now = done % run.log_every == 0 or done == tr.steps or done == 1
            save_now = tr.checkpoint_every is not None and (done % tr.checkpoint_every == 0 or done == tr.steps)
            passes_now = [ps for ps in tr.program.passes if done % ps.every == 0 or done == tr.steps]
            row = None
            if log_now and not (save_now or passes_now):
                self.waiting.append((done, reports, tr.bad, tr.draw))
            self.in_flight.append((done, tr.bad, tr.step_tokens))
            self._ended(done - STEPS_AHEAD)
            if save_now or passes_now:
                self._write_rows(wait=True)   # the queued steps' compute counts in the rate
                paused = time.perf_counter()   # the pass or the save from here: left out of it
                tr.settle()
                pass_rows = {}
                for ps in passes_now:
                    pass_rows.update(tr.run_pass(ps, state))
                full = self.report_row(done, reports)
                full.update(pass_rows)
                tr.checks.check_row(full)
                if log_now or pass_rows:
                    row = full
                    self.history.append(row)
                    self.reporter.log(row, done)
            if self.after_step is not None:
                self.after_step(state, row)
            if save_now or passes_now:
                self.reporter.pause(time.perf_counter() - paused)
            tr.completed = state
            if tr.samples is not None:   # samples.py: the rows whose copy has landed
                tr.samples.poll(state.step)
        self._write_rows(wait=True)
        tr.settle()
        return state, self.history
