"""Every error the runtime raises, in one place, and what the command line does with each.

The run's own errors, which `sexpgpu run` prints as one line:

- `RunError`: a run that cannot go on for a reason the user can act on (exit 1); its subclasses
  `DataError` (a loader's data not as declared, found before anything trains: exit 1),
  `OptionError` (a command-line option that cannot work: exit 2, a usage error), `RunDirInUse` (a run
  dir another process holds: exit 1), `RewardError` (a `:reward` Python function that cannot be
  imported, raised, or returned anything but a finite float per row: exit 1), `BadValue` (a NaN
  or infinite value at a step: exit 1) and `BadDraw` (a generator's traced temperature out of
  range: exit 1).
- `RunStopped`: SIGINT or SIGTERM stopped the run after the last completed step was saved
  (exit 130 or 143; `Stopped` is the signal's arrival, where the loop looks); `RunFinished`: a `--resume` of a run that has trained its steps already,
  which changes nothing (exit 0).

The errors of the parts, each turned into one of the above where the run meets it (run/start.py
before anything trains, run/train.py while it trains): `LoaderError`, `TokenFileError` and
`TokenizeError` (data/), `CheckpointError` (run/checkpoint.py), `PathProblem` and `FileInTheWay`
(paths.py), `MeshError` (devices/sharding.py). `InternalTypeError` is a bug in sexpgpu, never
the user's mistake. This module imports nothing of the runtime.
"""
from __future__ import annotations

import signal
from pathlib import Path


class RunError(Exception):
    """A run that cannot go on, for a reason the user can act on (bad data, a NaN loss, an unwritable dir)."""


class DataError(RunError):
    """A loader's data that cannot be read as declared (a missing or mis-typed file, a field the file
    lacks, a token id outside `:vocab`), found before anything trains: an error in what the file
    names, so the command line exits 1 for it, as for the file's own errors (docs/cli.md)."""


class OptionError(RunError):
    """A command-line option that cannot work (an `--export` path that cannot be written, say): found
    before anything runs; the command line exits 2 for it, as for any usage problem."""


class RunDirInUse(RunError):
    """A run dir another process holds (run/run_lock.py): refused before anything is written (exit
    1, as for a run dir an earlier run used). `holder` names it: its pid, host, start time, command."""

    def __init__(self, message: str, holder: str):
        super().__init__(message)
        self.holder = holder


class SampleError(RunError):
    """`run`'s `:samples`: a tokenizer that cannot be read, or samples.jsonl that cannot be written
    (run/samples.py)."""


class RewardError(RunError):
    """`defgenerate`'s `:reward` (run/rewards.py): its Python file that cannot be imported, a function
    that raised (named with the row and the step), or rewards that are not one finite float per row."""


class BadValue(RunError):
    """A loss, metric or parameter that is NaN or infinite at a step; `metric` is as shown (`` `loss` ``)."""

    def __init__(self, step: int, metric: str, value: float):
        super().__init__(f"step {step}: {metric} is {value}")
        self.step, self.metric, self.value = step, metric, value


class BadDraw(BadValue):
    """A generator's traced `categorical` temperature that was negative, infinite or NaN at a step
    (sexpgpu_runtime.lowering.draw_check): a setting the file computes wrongly, so the command line exits 1
    for it, as for the file's own errors. `where` is the draw's file:line:col, `trip` its trip, `pass_name` the
    pass whose generator drew it (None: training); `saved` says which checkpoint is the last good one."""

    def __init__(self, step: int, where: str, trip: int, value: float, pass_name: str | None = None,
                 saved: str = ""):
        run = f"pass `{pass_name}`'s generator" if pass_name else "the generator"
        RunError.__init__(self, f"step {step}: the `:temperature` of the `categorical` at {where} is {value} at "
                          f"trip {trip} of {run}; it must be finite and 0 or more (0 is the argmax), so compute "
                          f"it so that it stays in range, e.g. `(maximum t 0.0)`" + (f"; {saved}" if saved else ""))
        self.step, self.metric, self.value = step, "`:temperature`", value
        self.where, self.trip, self.pass_name = where, trip, pass_name

    def saved_at(self, saved: str) -> "BadDraw":
        """The same error, saying which checkpoint is the last good one (`saved`)."""
        return BadDraw(self.step, self.where, self.trip, self.value, self.pass_name, saved)


class RunStopped(Exception):
    """A signal stopped the run. `step` is the step that was abandoned (1-based, as in metrics.jsonl);
    `saved` the step of the newest complete checkpoint, in `dir`; `exit_code` 130 (SIGINT) or 143 (SIGTERM)."""

    def __init__(self, signal_name: str, exit_code: int, step: int, saved: int, dir: Path):
        super().__init__(f"stopped by {signal_name} during step {step}; step {saved} is saved in {dir}")
        self.signal_name, self.exit_code, self.step, self.saved, self.dir = signal_name, exit_code, step, saved, dir


class RunFinished(Exception):
    """`--resume` (or a plain second `sexpgpu run`) of a run that has trained its steps already (`step`, the last it trained, at least
    `total`, the steps asked for): nothing was read or written; the message says how to train longer."""

    def __init__(self, message: str, step: int, total: int):
        super().__init__(message)
        self.step, self.total = step, total


class Stopped(Exception):
    """Raised by `run.signals.StopSignals.check` once a stop signal has arrived; the run turns it into
    RunStopped once the last completed step is saved."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        """The signal's name, `SIGINT` or `SIGTERM`."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process a signal ended: 128 + the signal number (130, 143)."""
        return 128 + self.signum


class LoaderError(Exception):
    """A data problem: a missing or corrupt file, a field missing or of the wrong shape or dtype."""


class TokenFileError(Exception):
    """A token file that cannot be read as declared (the message names the file and the fix)."""


class TokenizeError(Exception):
    """A tokenizer file that does not parse, a text file that is not text, a cache that cannot be written."""


class CheckpointError(Exception):
    """A checkpoint problem the user can act on: an unwritable or full dir, another run's checkpoint, a bad setting."""


class PathProblem(Exception):
    """A path that cannot be written, for a reason the user can act on (one line)."""


class FileInTheWay(PathProblem):
    """A file where a directory (or one of its parents) must be."""


class MeshError(Exception):
    """A mesh that cannot be built: more devices than JAX sees, a batch that does not divide,
    a multi-process mesh that does not take the same number of devices from every process."""


class LoopCostUnavailable(Exception):
    """The installed jax/jaxlib lacks the private API that costs one computation of a compiled module
    (`lowering/xla_loops.py`): `explain --xla` then counts each while loop once and says so."""


class InternalTypeError(AssertionError):
    """JAX's result type differs from the registry rule's: a bug in sexpgpu, not in the run file.
    `offset`: where in the run file the op is (a character offset), when known."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset
