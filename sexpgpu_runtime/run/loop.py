"""The step loop: a run's steps queued ahead of the device, its rows logged in step order, its
passes run, every value checked, and the state after each completed step kept for a stop to save.

Every step's loss is checked for NaN and Inf on the device (the training graph keeps the first
bad step: training_graphs.tally), so the host never waits for a step it queued. A logged step's
row waits (`_write_rows`) until the device has reached that step, and is written then, in step
order, while later steps are queued: logging does not drain the queue. At a pass, a checkpoint
step, a stop and the end the loop waits: the rows before are written, then the record is read
(`Trainer.settle`) before anything of that step is reported or saved.
"""
from __future__ import annotations

import collections

import jax
import numpy as np

from ..errors import BadValue
from .report import Reporter
from .state import RunState

#: How many steps the loop queues ahead of the device before it waits for the oldest, on one
#: device: enough that the host never starves it (on a 2-core CPU a bound of 2 costs ~3% of the step
#: against 4 or 8), and a bound on the batches waiting in the queue.
MAX_STEPS_IN_FLIGHT = 8
#: The same on a mesh: with many steps queued, XLA:CPU's device threads deadlocked in an FSDP all-gather.
MAX_STEPS_IN_FLIGHT_MESH = 2


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
        self.trainer, self.reporter, self.after_step = trainer, reporter, after_step
        self.history: list[dict] = []
        self.waiting: collections.deque = collections.deque()   # (step, reports, bad, draw) of logged steps

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

    def _write_rows(self, wait: bool) -> None:
        """Write the rows of logged steps in order: each once the device has finished its step (`wait`:
        all of them, waiting). A NaN loss up to that step, or in the row, raises BadValue; a bad traced
        temperature of a generator up to that step, BadDraw."""
        checks = self.trainer.checks
        while self.waiting and (wait or self.waiting[0][2][0].is_ready()):
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
        in_flight: collections.deque = collections.deque()
        while state.step < tr.steps:
            state, reports = tr.step(state)
            done = state.step
            # A bounded number of steps queued ahead of the device: enough to keep it busy, and a bound on
            # what waits in the queue (batches, and on a CPU mesh the collectives of many queued steps,
            # which XLA:CPU's device threads can deadlock on).
            in_flight.append(tr.bad)
            if len(in_flight) > (MAX_STEPS_IN_FLIGHT if tr.dp is None else MAX_STEPS_IN_FLIGHT_MESH):
                jax.block_until_ready(in_flight.popleft())
            log_now = done % run.log_every == 0 or done == tr.steps or done == 1
            save_now = tr.checkpoint_every is not None and (done % tr.checkpoint_every == 0 or done == tr.steps)
            passes_now = [ps for ps in tr.program.passes if done % ps.every == 0 or done == tr.steps]
            row = None
            self.reporter.advance(done)
            if save_now or passes_now:
                self._write_rows(wait=True)
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
            elif log_now:
                self.waiting.append((done, reports, tr.bad, tr.draw))
            self._write_rows(wait=False)
            if self.after_step is not None:
                self.after_step(state, row)
            tr.completed = state
            if tr.samples is not None:   # samples.py: the rows whose copy has landed
                tr.samples.poll(state.step)
        self._write_rows(wait=True)
        tr.settle()
        return state, self.history
