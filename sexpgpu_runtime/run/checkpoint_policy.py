"""The checkpoint policy: when a run saves a checkpoint, what it saves, how many it keeps, at its end
and at a stop, decided here and nowhere else; checkpoint.py is the writer and reader it drives.

`:checkpoint (:every N :dir D :keep K)` (`checkpoint_spec`; docs/checkpoints.md): D is relative to
the run dir; a file without `:checkpoint` saves only when a signal stops the run, so that `--resume`
works. `CheckpointPolicy` holds the rules:

- when: after every step whose number is a multiple of `:every`, and after the run's last step
  (`due`; the step loop waits for the device at such a step, loop.py); at a stop, the last
  completed step unless the newest checkpoint is it already (`at_stop`);
- what: a state's `checkpoint_tree` (state.py: not the frozen parameters) and its records, never
  before every loss so far is known finite and the parameters are checked (a NaN is never
  checkpointed), and only once the sample rows up to it are written;
- how many: `:keep`, which the writer's orbax manager applies after each save;
- at the end: `finish` waits for the writes in flight (a failed write is a CheckpointError).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from ..errors import CheckpointError, RunStopped, Stopped
from .checks import ValueChecks
from .samples import SampleLog
from .state import RunState, checkpoint_tree

DEFAULT_DIR = "checkpoints"
DEFAULT_EVERY = 1000
DEFAULT_KEEP = 3


@dataclass(frozen=True)
class CheckpointSpec:
    """Where checkpoints go, how often and how many are kept. `every` is None when the file has no
    `:checkpoint`: then a checkpoint is written only when a signal stops the run (so that `--resume`
    works), and one is kept."""

    dir: Path
    every: int | None
    keep: int


def checkpoint_spec(setting: dict | None, run_dir: Path) -> CheckpointSpec:
    """The spec of a `:checkpoint (:every N :dir D :keep K)` plist (None when absent); D relative to
    `run_dir`. CheckpointError for a value that is not a whole number of 1 or more, or a `:dir` not
    a path."""
    if setting is None:
        return CheckpointSpec(run_dir / DEFAULT_DIR, None, 1)

    def positive(key: str, default: int) -> int:
        v = setting.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 1:
            raise CheckpointError(f"`:checkpoint` `:{key}` must be a whole number of 1 or more, got {v!r}")
        return int(v)

    d = setting.get("dir", DEFAULT_DIR)
    if not isinstance(d, str) or not d:
        raise CheckpointError(f"`:checkpoint` `:dir` must be a path in quotes like \"checkpoints\", got {d!r}")
    return CheckpointSpec(run_dir / Path(d).expanduser(), positive("every", DEFAULT_EVERY), positive("keep", DEFAULT_KEEP))


class Store(Protocol):
    """What the policy asks of the writer (checkpoint.Checkpoints)."""

    spec: CheckpointSpec

    def save(self, step: int, tree, records: int) -> None: ...

    def wait(self) -> None: ...

    def latest(self) -> int | None: ...


class CheckpointPolicy:
    """The checkpoints of one run: `store` (the writer) saves when `due` says, up to the run's `last`
    step. Before each save `settle()` raises the BadValue of a non-finite loss of any step so far
    (train.Trainer.settle), `checks` (checks.ValueChecks) checks the parameters, and `samples`
    (samples.SampleLog, or None) writes its rows up to the step."""

    def __init__(self, store: Store, last: int, settle: Callable[[], None], checks: ValueChecks,
                 samples: SampleLog | None):
        self.store, self.last, self.settle, self.checks, self.samples = store, last, settle, checks, samples
        self.every = store.spec.every

    def due(self, step: int) -> bool:
        """Whether the state after step `step` (1-based, as in metrics.jsonl) is saved: a multiple of
        `:every`, or the last step; never without `:checkpoint`."""
        return self.every is not None and (step % self.every == 0 or step == self.last)

    def save(self, state: RunState) -> None:
        """Start writing `state` (its `checkpoint_tree` and records) as checkpoint `state.step`, once
        nothing non-finite can be in it; the write finishes in the background."""
        self.settle()             # a NaN loss of any step so far is never checkpointed
        self.checks.check_params(state.step, state.trainable)
        if self.samples is not None:   # every sample row up to the checkpoint is written first
            self.samples.flush(state.step)
        self.store.save(state.step, checkpoint_tree(state), state.records)

    def after_step(self, state: RunState) -> None:
        """Save `state` if its step is `due` (the step loop calls it after every step)."""
        if self.due(state.step):
            self.save(state)

    def finish(self) -> None:
        """The run trained its steps: wait for every write in flight (CheckpointError if one failed)."""
        self.store.wait()

    def at_stop(self, stop: Stopped, done: RunState) -> RunStopped:
        """A signal stopped the run with `done` its last completed state: save it unless the newest
        checkpoint is of its step, wait for the writes, and return the RunStopped naming it."""
        self.store.wait()
        if self.store.latest() != done.step:
            self.settle()
            self.save(done)
            self.store.wait()
        return RunStopped(stop.name, stop.exit_code, done.step + 1, done.step, self.store.spec.dir)
