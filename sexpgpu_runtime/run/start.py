"""The start of a run: fresh, resumed (`--resume`) or started over (`--overwrite`), decided in one
place before anything trains.

`RunStart` refuses, before anything is created, options that cannot work, a run dir another
process holds (run_lock.py: the dir is held from here until `release`, so two runs never write
one dir, and `--overwrite` never clears a dir another run is writing) and a resume with
nothing to resume; makes the run dir and proves it writable, removing the folders it made when the
trainer cannot be built (a missing data file, say); then claims the run dir, so that a fresh run
never mixes its rows or checkpoints with an earlier run's: a dir an earlier run used is refused
unless the run resumes it (its newest complete checkpoint must be this run's, identity checked) or
replaces it (`--overwrite` clears that run first). A resume of a run that has trained its steps
already raises RunFinished, having changed nothing (resume.py). Identity and free space are
checked before anything is computed, and a step whose memory plan could never fit the device before
anything is allocated (fits.py). Every error is a RunError (or OptionError, RunFinished).

`RunStart` knows nothing of the trainer: it is handed what it needs (the checkpoint tree's shapes,
the mesh, the first step) and hands back the checkpoint store, a restored state and the reporter;
train.py builds the trainer between `prepare` and `checkpoints` and makes the fresh state.
"""
from __future__ import annotations

import sys
from pathlib import Path

import jax

from sexpgpu_lang import ir

from ..devices.sharding import DataParallel, run_devices
from ..errors import CheckpointError, RunError
from ..weights.pretrained import content_hashes, frozen_params
from .checkpoint import Checkpoints
from .checkpoint_policy import checkpoint_spec
from .fits import refuse_never_fits
from .options import RunOptions, check_options
from .report import Reporter
from .resume import dropped_line, missing_rows_line, refuse_finished, resuming_line
from .run_dir import (
    clear_run_dir,
    has_rows,
    nothing_to_resume,
    open_checkpoints,
    outermost_missing,
    prepare_run_dir,
    remove_made,
)
from .run_lock import RunDirLock, hold_run_dir_everywhere
from .state import RunState, from_checkpoint


def refuse_resume_of_nothing(program: ir.Program, options: RunOptions, metrics: Path, total: int) -> None:
    """With `resume`, before anything is created: when the checkpoint dir does not exist, RunFinished
    for a run whose `metrics` (metrics.jsonl) say it trained its `total` steps already
    (`refuse_finished`), else the RunError "nothing to resume"; nothing when the dir exists
    (`RunStart._claim` decides then). So a mistyped `--run-dir` leaves no empty run dir behind."""
    if not options.resume:
        return
    try:
        spec = checkpoint_spec(program.run.checkpoint, options.run_dir)
    except CheckpointError as e:
        raise RunError(str(e))
    if spec.dir.exists():
        return
    refuse_finished(None, metrics, options.run_dir, total, spec.every, options.export)
    raise RunError(nothing_to_resume(spec.dir, metrics, every=spec.every))


class RunStart:
    """The start of one run of `program` with `options`: `prepare` (before the trainer is built;
    `abandon` if that fails), then `checkpoints` (the checkpoint store and, with `resume`, the
    restored state) and `reporter` (once the first state is made); `release` once the run has
    ended, however it ended (the run dir's lock, taken by `prepare`)."""

    def __init__(self, program: ir.Program, options: RunOptions):
        self.program, self.options = program, options
        self.total = options.steps or program.run.steps
        self.metrics = options.run_dir / "metrics.jsonl"
        self.lock: RunDirLock | None = None
        self.checkpoint_lock: RunDirLock | None = None   # a checkpoint dir outside the run dir (`_hold_checkpoints`)
        self.made: list = []   # (dir, the outermost folder `prepare` made for it), for `abandon`

    def release(self) -> None:
        """Let the run dir and an outside checkpoint dir go (their locks released, the lock files
        removed); never raises."""
        for lock in (self.checkpoint_lock, self.lock):
            if lock is not None:
                lock.release()
        self.lock = self.checkpoint_lock = None

    def _hold_checkpoints(self) -> list:
        """Take the lock of the checkpoint dir too where it lies outside the run dir (an absolute
        `:checkpoint (:dir ...)` two run dirs may share): RunDirInUse naming the holder when another
        run holds it. The dir is made first where missing; returns the folders made (for
        run_dir.remove_made). Nothing for a dir inside the run dir (the run dir's lock holds it)."""
        try:
            spec = checkpoint_spec(self.program.run.checkpoint, self.options.run_dir)
        except CheckpointError:
            return []   # (said where the store is opened)
        ck, run_dir = spec.dir.resolve(), self.options.run_dir.resolve()
        if ck == run_dir or run_dir in ck.parents:
            return []
        made = outermost_missing(ck)
        try:
            ck.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunError(f"cannot write checkpoints to {spec.dir}: {e.strerror or e}")
        try:
            self.checkpoint_lock = hold_run_dir_everywhere(ck, "checkpoint dir")
        except BaseException:
            remove_made(ck, made)
            raise
        return [(ck, made)]

    def _hold(self) -> None:
        """Take the run dir's lock (run_lock.hold_run_dir_everywhere): RunDirInUse, naming the
        holder, when another process holds it. The dir must exist."""
        self.lock = hold_run_dir_everywhere(self.options.run_dir)

    def _say(self, line: str, everywhere: bool = False) -> None:
        if not self.options.quiet and (everywhere or jax.process_index() == 0):
            print(line, file=sys.stderr, flush=True)

    def say(self, line: str) -> None:
        """Print one line of the run's to stderr (process 0's, unless quiet)."""
        self._say(line)

    def say_dropped(self, dropped: list[int], step: int, path: Path, again: str = "trained and logged again") -> None:
        """The one line of a resume that dropped rows past checkpoint `step` from `path` (resume.dropped_line)."""
        self._say(dropped_line(dropped, step, path, again), everywhere=True)

    def prepare(self) -> None:
        """Check the options, refuse a resume of nothing and a step that could never fit the device's
        memory (fits.py: explain's memory plan against the device's), make the run dir (and an outside
        checkpoint dir). The run dir is held (its lock taken) from before anything is read or written
        in it; on any failure here it is let go again and the folders made are removed (where still
        empty). The trainer is built next (which opens the loaders); `abandon` if that fails."""
        check_options(self.program, self.options)
        made = None
        try:
            held = self.options.run_dir.is_dir()
            if held:   # a second run is told before anything else
                self._hold()
            refuse_resume_of_nothing(self.program, self.options, self.metrics, self.total)
            refuse_never_fits(self.program, self.options)   # the memory plan against the device's, before allocating
            made = outermost_missing(self.options.run_dir)
            prepare_run_dir(self.options.run_dir)
            if not held:
                self._hold()
            outside = self._hold_checkpoints()
        except BaseException:
            self.release()
            remove_made(self.options.run_dir, made)   # (a checkpoint dir another run holds: nothing left made)
            raise
        self.made = [(self.options.run_dir, made), *outside]

    def abandon(self) -> None:
        """The trainer could not be built (a missing data file, say): let the run dir go and remove
        the folders `prepare` made (where still empty)."""
        self.release()
        for folder, made in self.made:
            remove_made(folder, made)
        self.made = []

    def checkpoints(self, like, dp: DataParallel | None) -> tuple[Checkpoints, RunState | None]:
        """The run's checkpoint store (opened, proven writable, holding the `:pretrained` files'
        hashes) and, with `resume`, the newest complete checkpoint's state (said in one line; its
        frozen parameters made again; not yet placed), else None: a fresh start. `like` is the
        checkpoint tree's shapes and dtypes (state.checkpoint_tree, train.Trainer.state_like), which
        the disk must have room for; `dp` the run's mesh (sharding.DataParallel), or None on one
        device. A finished run is refused first (RunFinished), an earlier run's dir refused or
        cleared (`_claim`). The store is closed again if any of it fails."""
        store = open_checkpoints(self.program, self.options, content_hashes(self.program))
        try:
            resumed = self._restored(like, dp, store)
        except BaseException:
            store.close()
            raise
        return store, resumed

    def reporter(self, step: int, dp: DataParallel | None) -> Reporter:
        """Once the first state (at `step`) is made: the lines that say where the run trains and what a
        resume lost, and the run's reporter (metrics.jsonl appended to on a resume, its rows past
        the checkpoint dropped and said so)."""
        options = self.options
        self._say(f"sexpgpu: training on {run_devices(dp)}")   # once the run dir and checkpoints are settled
        lost = missing_rows_line(self.metrics, step) if options.resume else None
        if lost is not None:
            self._say(lost)
        reporter = Reporter(options.run_dir, self.total, options.progress, options.quiet,
                            Path(self.program.path).stem, start=step, append=options.resume,
                            tensorboard=bool(self.program.run.log.get("tensorboard")),
                            shown=self.program.run.log.get("show") or ("loss",))
        if reporter.dropped:
            self.say_dropped(reporter.dropped, step, reporter.path)
        return reporter

    def _restored(self, like, dp: DataParallel | None, store: Checkpoints) -> RunState | None:
        """With `resume` the newest complete checkpoint's state (saying which, in one line); None for a
        fresh start."""
        options = self.options
        if not options.overwrite:   # (a second plain `sexpgpu run FILE` of a finished run says where it is)
            refuse_finished(store, self.metrics, options.run_dir, self.total, store.spec.every, options.export,
                            again=not options.resume)
        self._claim(store)
        try:
            store.check_space(like)
            if options.resume:
                # Restore onto this run's devices (the mesh's, replicated, or the one device), whatever
                # devices the checkpoint was saved from: orbax refuses another topology otherwise.
                # Under FSDP each array comes back split as the run splits it (sharding.py).
                one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
                where = (dp.state_shardings(like) if dp is not None
                         else jax.tree_util.tree_map(lambda _: one, like))
                like = jax.tree_util.tree_map(lambda x, w: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=w), like, where)
                step, tree, records = store.restore(like)
                self._say(resuming_line(step, self.total, store.spec.dir, store.cut_short, store.failed))
                # A checkpoint holds no frozen parameters: they are drawn or read again, and only they.
                frozen = frozen_params(self.program, self.program.run.seed)
                return from_checkpoint(step, tree, records, frozen)
        except CheckpointError as e:
            raise RunError(str(e))
        return None

    def _claim(self, store: Checkpoints) -> None:
        """Refuse a run dir that an earlier run used, unless this run continues or replaces it.

        With `resume`, the newest complete checkpoint must be this run's (identity
        checked); without, a dir holding checkpoints, or a metrics.jsonl with rows,
        is refused, since it would mix two runs, unless `overwrite` clears that run
        first (run_dir.clear_run_dir).
        """
        resume, overwrite = self.options.resume, self.options.overwrite
        try:
            newest = store.newest_meta()   # (one that cannot be read is skipped here, and by `restore`)
            if newest is not None:
                latest, meta = newest
                if not resume and not overwrite:
                    if store.provenance.is_ours(meta):
                        raise RunError(f"{store.spec.dir} already holds checkpoints of this run (newest: step {latest}); "
                                       "pass --resume to continue it, --overwrite to start over, or give another --run-dir")
                    raise RunError(f"{store.spec.dir} already holds checkpoints of another run ({store.provenance.identity_of(meta).show()}, "
                                   f"newest: step {latest}); pass --overwrite to replace that run, or give another --run-dir")
                if resume:
                    store.provenance.check(latest, meta)
            elif store.latest() is not None:   # checkpoints, none of whose JSON items reads
                if not resume and not overwrite:
                    raise RunError(f"{store.spec.dir} already holds checkpoints that cannot be read (newest: step "
                                   f"{store.latest()}); pass --overwrite to start over, or give another --run-dir")
            elif resume:
                raise RunError(nothing_to_resume(store.spec.dir, self.metrics, store.cut_short, store.spec.every,
                                                 store.failed))
            elif not overwrite and has_rows(self.metrics):
                raise RunError(f"{self.options.run_dir} already holds the metrics.jsonl of an earlier run (and no "
                               "checkpoint to resume from); pass --overwrite to start over, or give another --run-dir")
            if overwrite:
                clear_run_dir(self.options.run_dir, store)
        except CheckpointError as e:
            raise RunError(str(e))
