"""The training loop: the step's graphs over the loaders' batches, passes, checkpoints, stops.

`Trainer(program, options)` owns one run; `RunState` is everything a step
changes (parameters, optimizer state, the next step, records consumed,
counter totals), so a checkpoint of it resumes the run exactly. A run is a
pure function of its file, its data and its seed: parameter
initialisation, record order and every draw derive from `:seed`.

`train` wires the pieces: the options checked and the run dir and
checkpoint dir proven writable before anything trains (options.py,
run_dir.py), `--resume` from the newest complete checkpoint
(checkpoint.py), SIGINT/SIGTERM looked for before every trip and between
phases (signals.py), metrics to the terminal, metrics.jsonl and
TensorBoard (report.py), `:pretrained` values and `--export`
(pretrained.py). A stop abandons the step in flight; what was saved is
the last completed step, and the resume takes the abandoned step again,
so the resumed run's bits are the uninterrupted run's.
"""
from __future__ import annotations

import collections
import sys
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np

from sexpgpu_lang import ir

from .checkpoint import Checkpoints
from ..errors import (BadDraw, BadValue, CheckpointError, DataError, InternalTypeError, LoaderError, MeshError,
                      OptionError, RunError, RunStopped, TokenFileError)
from ..lowering.graphs import Graphs
from ..data.loaders import Loader
from ..weights.optim import learning_rate, make_optimizer
from ..lowering.draw_check import bad_draw
from .options import RunOptions, check_options
from ..weights.params import flatten, init_params
from ..data.prefetch import Prefetch
from ..weights.pretrained import (content_hashes, export_mapping, export_params, frozen_params, initial_params,
                         nonfinite_param)
from .report import Reporter
from .resume import dropped_line, missing_rows_line, refuse_finished, resuming_line
from .run_dir import (claim_run_dir, open_checkpoints, outermost_missing, prepare_run_dir, refuse_resume_of_nothing,
                      remove_made)
from ..devices.sharding import DataParallel, run_devices
from .signals import StopSignals, Stopped


@dataclass
class RunState:
    """What a step changes. `step` is the next step to run (0-based); `records` the
    training records consumed so far (the loader position, and the curriculum's)."""

    step: int
    trainable: dict
    frozen: dict
    opt_state: object
    records: int
    counters: dict


@dataclass
class RunResult:
    """What a finished run leaves: the final state, the logged metrics, and how often each graph was traced."""

    trainable: dict
    frozen: dict
    history: list[dict]
    traces: dict
    seconds: float
    steps: int = 0
    extra: dict = field(default_factory=dict)


#: How many steps the loop queues ahead of the device before it waits for the oldest (`Trainer.fit`), on
#: one device: enough that the host never starves it (on a 2-core CPU a bound of 2 cost ~3% of the step
#: against 4 or 8: BENCHMARKS.md), and a bound on the batches waiting in the queue.
MAX_STEPS_IN_FLIGHT = 8
#: The same on a mesh: with many steps queued, XLA:CPU's device threads deadlocked in an FSDP all-gather.
MAX_STEPS_IN_FLIGHT_MESH = 2


def _stack(trees: list[dict]) -> dict:
    return {k: np.stack([t[k] for t in trees]) for k in trees[0]}


def _mean_reports(groups: list[list[dict]]) -> dict[str, float]:
    flat = [m for g in groups for m in g]
    out: dict[str, float] = {}
    for name in dict.fromkeys(k for m in flat for k in m):
        vals = [float(m[name]) for m in flat if name in m]
        out[name] = sum(vals) / len(vals)
    return out



class Trainer:
    """One run of a checked program: loaders, graphs, optimizer, the step and the loop.

    `stop` (a StopSignals, set by `train`) is looked at before every trip of
    the generator and between the phases of a step; `on_trip(step, trip)` is
    called just before that look (tests send signals from it). `completed` is
    the last state whose step finished (update, passes and logging), the one
    a stop saves.
    """

    def __init__(self, program: ir.Program, options: RunOptions):
        self.program = program
        self.options = options
        run = program.run
        self.steps = options.steps or run.steps
        try:
            stage_loaders = [name for name, _ in program.stages] or [run.loader]
            self.loaders = {name: Loader(program.loaders[name], run.seed) for name in dict.fromkeys(stage_loaders)}
            self.pass_loaders = {ps.name: Loader(program.loaders[ps.loader], run.seed) for ps in program.passes}
        except LoaderError as e:
            raise DataError(str(e)) from None
        for ps in program.passes:
            # A pass reads its loader's first K batches; more than the loader holds would repeat records.
            ld = self.pass_loaders[ps.name]
            if ps.batches * ld.spec.batch > ld.records:
                raise DataError(f"pass `{ps.name}` reads {ps.batches} batches of {ld.spec.batch} "
                               f"({ps.batches * ld.spec.batch} records), but {ld.where} has {ld.records}; "
                               "lower its `:batches`, or give the loader more records")
        self.stages = [(name, n) for name, n in program.stages] or [(run.loader, None)]
        selected = frozenset(options.diagnostics) | frozenset(run.diagnostics)
        self.optimizer = make_optimizer(run.optimizer, program)
        self.lr = learning_rate(run.optimizer)   # the learning rate of an optimizer step, logged as `lr`
        try:
            self.dp = DataParallel.of(program, options.devices, options.fsdp)
        except MeshError as e:
            raise (OptionError if options.devices is not None else RunError)(str(e))
        self.graphs = Graphs(program, self.optimizer, selected, donate=jax.default_backend() != "cpu", dp=self.dp)
        self.layout = self.graphs.layout
        self.batch_size = program.loaders[run.loader].batch
        self.on_trip = None            # called before every trip with (step, trip), before the stop check
        self.stop: StopSignals | None = None
        self.checkpoint_every: int | None = None   # steps whose values are checked in full before a save
        self.completed: RunState | None = None
        self.bad = None                # on the device: (first step with a non-finite loss, or -1; its value)
        self.draw = None               # on the device: the first bad traced temperature (draw_check.py), or None
        self._finite = None
        self.feed: Prefetch | None = None   # the training batches, read ahead on a thread while `fit` runs

    def initial_state(self, load: bool = True) -> RunState:
        """Fresh parameters (pretrained ones loaded unless `load` is False: for shapes only), fresh
        optimizer state, step 0."""
        if load:
            trainable, frozen = initial_params(self.program, self.program.run.seed)
        else:
            trainable, frozen = init_params(self.program.params, self.program.run.seed)
        return self.place(RunState(0, trainable, frozen, self.optimizer.init(trainable), 0, self.graphs.zero_counters()))

    def place(self, state: RunState) -> RunState:
        """On a mesh, the parameters, optimizer state and counters replicated on every device (or, under
        FSDP, split along the mesh: sharding.DataParallel.state_sharding)."""
        if self.dp is None:
            return state
        trainable, frozen, opt_state, counters = self.dp.put_state(
            (state.trainable, state.frozen, state.opt_state, state.counters))
        return RunState(state.step, trainable, frozen, opt_state, state.records, counters)

    # -- stops ----------------------------------------------------------------------------------
    def poll(self) -> None:
        """Raise `Stopped` if a stop signal has arrived (a phase boundary: nothing half-done is kept)."""
        if self.stop is not None:
            self.stop.check()

    def _trip_hook(self, step: int):
        def before_trip(trip: int):
            if self.on_trip is not None:
                self.on_trip(step, trip)
            self.poll()
        return before_trip

    # -- data -----------------------------------------------------------------------------------
    def stage_at(self, records: int) -> tuple[int, str, int]:
        """(stage index, its loader, records consumed within it) for a training position."""
        start = 0
        for i, (name, n) in enumerate(self.stages):
            if n is None or records < start + n or i == len(self.stages) - 1:
                return i, name, records - start
            start += n
        raise AssertionError("unreachable")

    def read(self, loader: Loader, position: int) -> dict:
        """The batch at `position`: on several processes only this process's rows (sharding.py)."""
        return loader.batch(position) if self.dp is None else self.dp.read(loader, position)

    def training_batch(self, records: int) -> dict:
        """The training batch at training position `records` (its stage's loader, at the position within)."""
        _, name, within = self.stage_at(records)
        return self.read(self.loaders[name], within)

    def host_group(self, step: int, group: int, records: int):
        """The batches of one group of microbatches as numpy ([S B ...] when stacked), their context
        rows ([S 6] i64, `make_ctx`'s values per copy) and the records consumed after the group.
        While `fit` runs, the batches come from `feed`, read ahead on a thread (prefetch.py)."""
        batches, rows = [], []
        for i in range(self.layout.stack):
            stage, name, within = self.stage_at(records)
            batches.append(self.feed.take(records) if self.feed is not None else self.training_batch(records))
            rows.append((step, group * self.layout.stack + i, records, stage, within, 0))   # CONTEXT_KEYS' order
            records += self.batch_size
        batch = _stack(batches) if self.layout.stack > 1 else batches[0]
        return batch, np.array(rows, np.int64), records

    def next_group(self, step: int, group: int, records: int):
        """One group of microbatches as the graphs take it: (batch, context rows, records after the group).
        On one device numpy (the group's first call transfers both, `Graphs.generate`); on a mesh placed:
        the records split along the mesh's `data` axis, the context rows on every device."""
        batch, rows, records = self.host_group(step, group, records)
        if self.dp is not None:
            batch = self.dp.put_batch(batch, stacked=self.layout.stack > 1)
            rows = self.dp.put_replicated(rows)
        return batch, rows, records

    # -- the step -------------------------------------------------------------------------------
    def step(self, state: RunState) -> tuple[RunState, dict]:
        """Run one training step; return the new state and its reports (device values).

        Looks for a stop before each group, before every trip, before the
        training graph and before the update; `state` is never changed before
        the update (which may donate its buffers), so a stop anywhere leaves it
        as the last completed state. Nothing here waits for the device: the
        first non-finite loss is kept on the device (`self.bad`, set once the
        update is queued) and read by `settle`.
        """
        g = self.graphs
        total, losses, metrics, diags = None, [], [], []   # total: the running sum of the gradients
        records, counters = state.records, state.counters
        bad = self.bad if self.bad is not None else g.no_bad()
        draw = self.draw
        for group in range(self.layout.groups):
            self.poll()
            batch, rows, records = self.next_group(state.step, group, records)
            if self.program.generate is not None:
                batch, rows, made = g.generate(state.trainable, state.frozen, batch, rows, self.layout.stack > 1,
                                               self._trip_hook(state.step), draw)
                batch, draw = {**batch, **made}, g.draw
                self.poll()
            l, total, m, d, counters, bad = g.train_group(total, state.trainable, state.frozen, batch, rows,
                                                          counters, bad)
            losses += l
            metrics.append(m)
            diags.append(d)
        self.poll()
        trainable, opt_state = g.update(state.trainable, state.opt_state, total)
        new = RunState(state.step + 1, trainable, state.frozen, opt_state, records, counters)
        self.bad, self.draw = bad, draw
        return new, {"losses": losses, "metrics": metrics, "diagnostics": diags}

    def report_row(self, done: int, reports: dict) -> dict:
        """The metrics.jsonl row of a logged step (this syncs with the device): its loss, the learning
        rate its update used (`lr`: the schedule at optimizer step `done - 1`), then the metrics."""
        row = {"step": done, "loss": float(np.mean([float(x) for x in reports["losses"]])), "lr": self.lr(done - 1)}
        row.update(_mean_reports(reports["metrics"]))
        row.update(_mean_reports(reports["diagnostics"]))
        return row

    def run_pass(self, ps: ir.PassIR, state: RunState) -> dict:
        """K batches of the pass's loader (always its first K, so evaluations compare), no gradient.

        A pass does not look for a stop: it runs after its step's update, which
        on an accelerator donated the previous state's buffers, so the step is
        past abandoning; a stop that arrives during a pass is acted on before
        the next step, once this step (its pass rows included) is complete.
        """
        sums: dict[str, float] = {}
        fn = self.graphs.passes[ps.name]
        loader = self.pass_loaders[ps.name]
        stage, _, within = self.stage_at(state.records)   # the training position the pass runs at
        number = 1 + [p.name for p in self.program.passes].index(ps.name)   # `:pass`
        pass_rows = np.array([(state.step, 0, state.records, stage, within, number)], np.int64)   # as `host_group`'s
        for k in range(ps.batches):
            batch, rows = self.read(loader, k * loader.spec.batch), pass_rows
            if self.dp is not None:
                batch, rows = self.dp.put_batch(batch, stacked=False), self.dp.put_replicated(rows)
            if ps.runs_generator:
                batch, rows, made = self.graphs.generate(state.trainable, state.frozen, batch, rows, stacked=False)
                batch = {**batch, **made}
                if self.graphs.draw is not None:   # (the pass waits for its loss below anyway)
                    self.check_records(None, self.graphs.draw, ps.name)
            loss, metrics = fn(state.trainable, state.frozen, batch, rows, state.counters)
            for m, v in {"loss": float(loss), **{m: float(v) for m, v in metrics.items()}}.items():
                sums[m] = sums.get(m, 0.0) + v
        return {f"{ps.name}/{m}": v / ps.batches for m, v in sums.items()}

    # -- bad values -----------------------------------------------------------------------------
    @staticmethod
    def check_row(row: dict) -> None:
        """Raise BadValue for the first NaN or infinite value of a metrics row."""
        for k, v in row.items():
            if k != "step" and not math.isfinite(v):
                raise BadValue(row["step"], f"`{k}`", v)

    @staticmethod
    def check_losses(bad) -> None:
        """Raise BadValue naming the first step whose loss (any microbatch's, the first in microbatch
        order) was NaN or infinite. `bad` is the record the training graph keeps (`Graphs._tally`):
        (i64 step or -1, f32 value). Reading it waits for the device."""
        step, value = jax.device_get(bad)
        if int(step) >= 0:
            raise BadValue(int(step), "`loss`", float(value))

    def check_records(self, bad, draw, pass_name: str | None = None) -> None:
        """Raise for the earlier of the first non-finite loss (`bad`, `check_losses`; None: none kept)
        and the first bad traced temperature (`draw`, BadDraw: draw_check.bad_draw; None: nothing
        checked), the temperature at the same step. Reading them waits for the device."""
        err = None if draw is None else bad_draw(draw, self.program, self.graphs.draw_sites, pass_name)
        if err is not None and bad is not None and 0 <= int(jax.device_get(bad[0])) < err.step:
            self.check_losses(bad)
        if err is not None:
            raise err
        if bad is not None:
            self.check_losses(bad)

    def check_params(self, state: RunState) -> None:
        """Raise BadValue naming the first trainable parameter with a NaN or infinite entry (before a save)."""
        if self._finite is None:
            self._finite = jax.jit(lambda tree: jax.tree_util.tree_map(lambda v: jax.numpy.all(jax.numpy.isfinite(v)), tree))
        ok = jax.device_get(self._finite(state.trainable))
        for path, good in flatten(ok).items():
            if not bool(good):
                raise BadValue(state.step, f"parameter `{'.'.join(map(str, path))}`", float("nan"))

    # -- the loop -------------------------------------------------------------------------------
    def fit(self, state: RunState, reporter: Reporter, after_step=None) -> tuple[RunState, list[dict]]:
        """Train from `state` to `self.steps`, logging every `:log :every` steps, running passes.

        Every step's loss is checked for NaN and Inf on the device (the training
        graph keeps the first bad step: `Graphs._tally`), so the host never waits
        for a step it queued. A logged step's row waits (`_write_rows`) until the
        device has reached that step, and is written then, in step order, while
        later steps are queued: logging does not drain the queue. At a pass, a
        checkpoint step, a stop and the end the loop waits: the rows before are
        written, then the record is read (`settle`) before anything of that
        step is reported or saved. A NaN stops the run naming the first bad
        step; each logged row is also checked in full. `after_step(state, row)`
        runs after each step is queued (`row` is the step's row when it was
        written at once, at a pass or checkpoint step; else None).
        """
        history: list[dict] = []
        waiting: collections.deque = collections.deque()   # (step, reports, records) of logged steps
        per_step = self.layout.groups * self.layout.stack * self.batch_size
        self.feed = Prefetch(self.training_batch, self.batch_size, state.records + (self.steps - state.step) * per_step)
        try:
            return self._fit(state, reporter, after_step, history, waiting)
        except BadValue:
            raise
        except BaseException:   # a stop, or a crash: the queued steps' rows are written as if it had not come
            try:
                self._write_rows(waiting, history, reporter, wait=True)
            except BadValue as bad:   # a row before it was bad: the run stops there, as if it had been written
                raise bad from None   # at its step (and a stop then saves nothing past it)
            except Exception:         # the device itself failing: the first error is the one to tell
                pass
            raise
        finally:
            self.feed.close()

    def _write_rows(self, waiting: collections.deque, history: list, reporter: Reporter, wait: bool) -> None:
        """Write the rows of logged steps in order: each once the device has finished its step (`wait`:
        all of them, waiting). A NaN loss up to that step, or in the row, raises BadValue; a bad traced
        temperature of a generator up to that step, BadDraw."""
        while waiting and (wait or waiting[0][2][0].is_ready()):
            done, reports, bad, draw = waiting.popleft()
            self.check_records(bad, draw)
            row = self.report_row(done, reports)
            self.check_row(row)
            history.append(row)
            reporter.log(row, done)

    def _fit(self, state: RunState, reporter: Reporter, after_step, history: list, waiting: collections.deque):
        run = self.program.run
        self.completed = state
        in_flight: collections.deque = collections.deque()
        while state.step < self.steps:
            state, reports = self.step(state)
            done = state.step
            # A bounded number of steps queued ahead of the device: enough to keep it busy, and a bound on
            # what waits in the queue (batches, and on a CPU mesh the collectives of many queued steps,
            # which XLA:CPU's device threads can deadlock on).
            in_flight.append(self.bad)
            if len(in_flight) > (MAX_STEPS_IN_FLIGHT if self.dp is None else MAX_STEPS_IN_FLIGHT_MESH):
                jax.block_until_ready(in_flight.popleft())
            log_now = done % run.log_every == 0 or done == self.steps or done == 1
            save_now = self.checkpoint_every is not None and (done % self.checkpoint_every == 0 or done == self.steps)
            passes_now = [ps for ps in self.program.passes if done % ps.every == 0 or done == self.steps]
            row = None
            reporter.advance(done)
            if save_now or passes_now:
                self._write_rows(waiting, history, reporter, wait=True)
                self.settle()
                pass_rows = {}
                for ps in passes_now:
                    pass_rows.update(self.run_pass(ps, state))
                full = self.report_row(done, reports)
                full.update(pass_rows)
                self.check_row(full)
                if log_now or pass_rows:
                    row = full
                    history.append(row)
                    reporter.log(row, done)
            elif log_now:
                waiting.append((done, reports, self.bad, self.draw))
            self._write_rows(waiting, history, reporter, wait=False)
            if after_step is not None:
                after_step(state, row)
            self.completed = state
        self._write_rows(waiting, history, reporter, wait=True)
        self.settle()
        return state, history

    def settle(self) -> None:
        """Raise BadValue if any completed step's loss was NaN or infinite, naming the first such step
        (see `fit`), or BadDraw for the first bad traced temperature of a generator (the earlier of
        the two); waits for the device. Called before anything is logged or saved."""
        if self.bad is not None:
            self.check_records(self.bad, self.draw)


def _tree(state: RunState) -> dict:
    """The arrays of a state that a checkpoint holds: not the frozen parameters, which a resume
    makes again (initialised from the seed, or loaded from their `:pretrained` files, whose
    content hashes the checkpoint records)."""
    return {"trainable": state.trainable, "opt_state": state.opt_state, "counters": state.counters}


def _state(step: int, tree: dict, records: int, frozen: dict) -> RunState:
    return RunState(step, tree["trainable"], frozen, tree["opt_state"], records, tree["counters"])


def start_state(trainer: Trainer, store: Checkpoints, options: RunOptions) -> RunState:
    """A fresh state, or with `resume` the newest complete checkpoint's (saying which, in one line).

    Identity and free space are checked before anything is computed: the run
    dir must be this run's to use (`claim_run_dir`: a checkpoint of another
    run is refused, and so is a fresh run into a run dir that an earlier run
    used, unless `overwrite` clears that run first). A resume of a run that
    has trained its steps already raises RunFinished, having changed nothing
    (resume.py).
    """
    if options.resume:
        refuse_finished(store, options.run_dir / "metrics.jsonl", options.run_dir, trainer.steps)
    claim_run_dir(store, options)
    try:
        # The state's shapes and dtypes, traced without computing anything.
        like = jax.eval_shape(lambda: _tree(trainer.initial_state(load=False)))
        store.check_space(like)
        if options.resume:
            # Restore onto this run's devices (the mesh's, replicated, or the one device), whatever
            # devices the checkpoint was saved from: orbax refuses another topology otherwise.
            # Under FSDP each array comes back split as the run splits it (sharding.py).
            one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
            where = trainer.dp.state_shardings(like) if trainer.dp is not None else jax.tree_util.tree_map(lambda _: one, like)
            like = jax.tree_util.tree_map(lambda x, w: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=w), like, where)
            step, tree, records = store.restore(like)
            if not options.quiet and jax.process_index() == 0:
                print(resuming_line(step, trainer.steps, store.spec.dir, store.cut_short), file=sys.stderr, flush=True)
            # A checkpoint holds no frozen parameters: they are drawn or read again, and only they.
            return trainer.place(_state(step, tree, records, frozen_params(trainer.program, trainer.program.run.seed)))
    except CheckpointError as e:
        raise RunError(str(e))
    return trainer.initial_state()


def train(program: ir.Program, options: RunOptions, on_trip=None) -> RunResult:
    """Train `program` from scratch, or from its newest checkpoint with `options.resume`.

    Raises RunError for data problems, an unwritable or full dir, a checkpoint
    of another run, or a NaN/Inf value (naming the step, the metric and the
    last good checkpoint); RunStopped when SIGINT or SIGTERM stopped it (after
    saving the last completed step); RunFinished, having changed nothing, when
    `options.resume` finds the run has trained its steps already. `on_trip(step,
    trip)` is called before every trip of the generator.
    """
    check_options(program, options)
    refuse_resume_of_nothing(program, options, options.steps or program.run.steps)
    made = outermost_missing(options.run_dir)
    prepare_run_dir(options.run_dir)
    try:
        trainer = Trainer(program, options)   # (opens the loaders: a missing or bad data file fails here)
    except BaseException:
        remove_made(options.run_dir, made)
        raise
    trainer.on_trip = on_trip
    store = open_checkpoints(program, options)
    store.pretrained = content_hashes(program)
    try:
        state = start_state(trainer, store, options)
        if not options.quiet and jax.process_index() == 0:   # once the run dir and checkpoints are settled
            print(f"sexpgpu: training on {run_devices(trainer.dp)}", file=sys.stderr, flush=True)
        every = store.spec.every
        trainer.checkpoint_every = every
        start = state.step
        lost = missing_rows_line(options.run_dir / "metrics.jsonl", start) if options.resume else None
        if lost is not None and not options.quiet and jax.process_index() == 0:
            print(lost, file=sys.stderr, flush=True)
        reporter = Reporter(options.run_dir, trainer.steps, options.progress, options.quiet, Path(program.path).stem,
                            start=start, append=options.resume, tensorboard=bool(program.run.log.get("tensorboard")))
        if reporter.dropped and not options.quiet:
            print(dropped_line(reporter.dropped, start, reporter.path), file=sys.stderr, flush=True)

        def save(s: RunState) -> None:
            trainer.settle()          # a NaN loss of any step so far is never checkpointed
            trainer.check_params(s)
            store.save(s.step, _tree(s), s.records)

        def after_step(s: RunState, row) -> None:
            if every is not None and (s.step % every == 0 or s.step == trainer.steps):
                save(s)

        t0 = time.perf_counter()
        try:
            with StopSignals() as trainer.stop:
                try:
                    state, history = trainer.fit(state, reporter, after_step)
                    store.wait()
                except Stopped as stop:
                    done = trainer.completed
                    store.wait()
                    if store.latest() != done.step:
                        trainer.settle()
                        save(done)
                        store.wait()
                    raise RunStopped(stop.name, stop.exit_code, done.step + 1, done.step, store.spec.dir)
        except InternalTypeError as e:
            line, col = program.line_col(getattr(e, "offset", 0))
            raise RunError(f"{e} ({program.path}:{line}:{col}); this is a bug in sexpgpu, please report it")
        except BadValue as e:
            try:
                store.wait()
            except CheckpointError:
                pass
            good = store.latest()
            if isinstance(e, BadDraw):   # a setting the file computes: bad input (exit 2), not a divergence
                raise e.saved_at(f"the last good checkpoint is step {good} in {store.spec.dir}" if good is not None
                                 else "no checkpoint was saved") from None
            where = (f"the last good checkpoint is step {good} in {store.spec.dir}" if good is not None
                     else "no checkpoint was saved")
            done = trainer.completed
            cause = None if done is None else nonfinite_param(program, done.frozen) or (
                nonfinite_param(program, done.trainable, "initial") if done.step == 0 else None)
            if cause is not None:
                raise RunError(f"{e}, so the run stopped: {cause}; {where}")
            raise RunError(f"{e}, so the run stopped; likely causes: too high a learning rate, a log of 0 or a "
                           "division by 0, an index out of range (e.g. a label >= the number of classes), a NaN "
                           f"in a pretrained checkpoint's trainable tensors; {where}")
        except CheckpointError as e:
            raise RunError(str(e))
        except (LoaderError, TokenFileError) as e:   # a read that failed during the run (the file changed under it)
            raise RunError(str(e)) from None
        finally:
            reporter.close()
    finally:
        store.close()
    jax.block_until_ready(state.trainable)
    seconds = time.perf_counter() - t0
    if options.export is not None:
        export_params(options.export, state.trainable, state.frozen, options.export_frozen,
                      export_mapping(program, options.export_names)[0] if options.export_names else None,
                      options.max_shard_bytes)
    data = trainer.feed.stats() if trainer.feed is not None else {"batches": 0, "read_s": 0.0, "wait_s": 0.0}
    return RunResult(state.trainable, state.frozen, history, dict(trainer.graphs.traces), seconds, trainer.steps,
                     extra={"start": start, "data": data})

