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
"""
from __future__ import annotations

import sys
from pathlib import Path

import jax

from sexpgpu_lang import ir

from ..devices.sharding import run_devices
from ..errors import CheckpointError, RunError
from ..weights.params import param_shapes
from ..weights.pretrained import content_hashes, frozen_params
from .checkpoint import Checkpoints, checkpoint_spec
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
from .state import RunState, checkpoint_tree, from_checkpoint


def state_like(program: ir.Program, trainer):
    """The checkpoint tree's shapes and dtypes (`checkpoint_tree`), from the declared shapes: drawing
    the parameters, even abstractly, costs start-up time."""
    shapes, frozen_shapes = param_shapes(program.params)
    return jax.eval_shape(lambda t: checkpoint_tree(RunState(
        0, t, frozen_shapes, trainer.optimizer.init(t), 0, trainer.graphs.zero_counters())), shapes)


class RunStart:
    """The start of one run of `program` with `options`: `prepare` (before the trainer is built),
    then `begin` (the checkpoint store, the first state and the reporter); `release` once the run
    has ended, however it ended (the run dir's lock, taken by `prepare`)."""

    def __init__(self, program: ir.Program, options: RunOptions):
        self.program, self.options = program, options
        self.total = options.steps or program.run.steps
        self.metrics = options.run_dir / "metrics.jsonl"
        self.lock: RunDirLock | None = None
        self.checkpoint_lock: RunDirLock | None = None   # a checkpoint dir outside the run dir (`_hold_checkpoints`)

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

    def prepare(self, make_trainer):
        """Check the options, refuse a resume of nothing and a step that could never fit the device's
        memory (fits.py: explain's memory plan against the device's), make the run dir, then build the trainer
        (`make_trainer()`, which opens the loaders); if that fails, the folders made for the run dir
        are removed again (where still empty). The run dir is held (its lock taken) from before
        anything is read or written in it; on any failure here it is let go again. Returns the
        trainer."""
        check_options(self.program, self.options)
        made = None
        try:
            held = self.options.run_dir.is_dir()
            if held:   # a second run is told before anything else
                self._hold()
            self._refuse_resume_of_nothing()
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
        try:
            return make_trainer()
        except BaseException:
            self.release()
            remove_made(self.options.run_dir, made)
            for ck, ck_made in outside:
                remove_made(ck, ck_made)
            raise

    def _refuse_resume_of_nothing(self) -> None:
        """With `resume`, before anything is created: when the checkpoint dir does not exist, RunFinished
        for a run whose metrics.jsonl says it trained its steps already (`refuse_finished`), else the
        RunError "nothing to resume"; nothing when the dir exists (`_claim` decides then). So a
        mistyped `--run-dir` leaves no empty run dir behind."""
        if not self.options.resume:
            return
        try:
            spec = checkpoint_spec(self.program.run.checkpoint, self.options.run_dir)
        except CheckpointError as e:
            raise RunError(str(e))
        if spec.dir.exists():
            return
        refuse_finished(None, self.metrics, self.options.run_dir, self.total, spec.every, self.options.export)
        raise RunError(nothing_to_resume(spec.dir, self.metrics, every=spec.every))

    def begin(self, trainer) -> tuple[Checkpoints, RunState, Reporter]:
        """The run's checkpoint store (opened, proven writable), its first state (fresh, or with
        `resume` the newest complete checkpoint's, said in one line) and its reporter (metrics.jsonl
        appended to on a resume, its rows past the checkpoint dropped and said so). The store is
        closed again if any of it fails."""
        options = self.options
        store = open_checkpoints(self.program, options)
        store.provenance.pretrained = content_hashes(self.program)
        try:
            state = self._first_state(trainer, store)
            self._say(f"sexpgpu: training on {run_devices(trainer.dp)}")   # once the run dir and checkpoints are settled
            lost = missing_rows_line(self.metrics, state.step) if options.resume else None
            if lost is not None:
                self._say(lost)
            reporter = Reporter(options.run_dir, trainer.steps, options.progress, options.quiet,
                                Path(self.program.path).stem, start=state.step, append=options.resume,
                                tensorboard=bool(self.program.run.log.get("tensorboard")),
                                shown=self.program.run.log.get("show") or ("loss",))
            if reporter.dropped:
                self.say_dropped(reporter.dropped, state.step, reporter.path)
        except BaseException:
            store.close()
            raise
        return store, state, reporter

    def _first_state(self, trainer, store: Checkpoints) -> RunState:
        """A fresh state, or with `resume` the newest complete checkpoint's (saying which, in one line)."""
        options = self.options
        if not options.overwrite:   # (a second plain `sexpgpu run FILE` of a finished run says where it is)
            refuse_finished(store, self.metrics, options.run_dir, trainer.steps, store.spec.every, options.export,
                            again=not options.resume)
        self._claim(store)
        try:
            # The state's shapes and dtypes, traced without computing anything.
            like = state_like(self.program, trainer)
            store.check_space(like)
            if options.resume:
                # Restore onto this run's devices (the mesh's, replicated, or the one device), whatever
                # devices the checkpoint was saved from: orbax refuses another topology otherwise.
                # Under FSDP each array comes back split as the run splits it (sharding.py).
                one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
                where = (trainer.dp.state_shardings(like) if trainer.dp is not None
                         else jax.tree_util.tree_map(lambda _: one, like))
                like = jax.tree_util.tree_map(lambda x, w: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=w), like, where)
                step, tree, records = store.restore(like)
                self._say(resuming_line(step, trainer.steps, store.spec.dir, store.cut_short, store.failed))
                # A checkpoint holds no frozen parameters: they are drawn or read again, and only they.
                frozen = frozen_params(self.program, self.program.run.seed)
                return trainer.place(from_checkpoint(step, tree, records, frozen))
        except CheckpointError as e:
            raise RunError(str(e))
        return trainer.initial_state()

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
