"""Training: the `Trainer` (one run's step and passes) and `train`, the entry `sexpgpu run` calls.

`Trainer(program, options)` owns one run; a `RunState` (state.py) is everything a step changes
(parameters, optimizer state, the next step, records consumed, counter totals), so a checkpoint of
it resumes the run exactly. A run is a pure function of its file, its data and its seed: parameter
initialisation, record order and every draw derive from `:seed`.

`train` wires the pieces, each handed what it uses: the start of the run, fresh or resumed, decided
before anything trains (start.py), the step loop (loop.py, given the trainer's `LoopParts`) with
SIGINT/SIGTERM looked for before every trip and between phases (signals.py, the trainer's
`stop`), checkpoints saved when the policy says, at a stop too (checkpoint_policy.py, writing
through checkpoint.py), the metrics (report.py), `--export` (weights/pretrained.py). A stop abandons the step in flight; what
was saved is the last completed step, and the resume takes the abandoned step again, so the
resumed run's bits are the uninterrupted run's. The parts' errors become the run's here
(errors.py): a NaN or infinite value, a checkpoint or data file failing while the run trains, the
device running out of memory (fits.py).
"""
from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from sexpgpu_lang import ir

from ..data.prefetch import ReadStats
from ..devices.sharding import DataParallel
from ..errors import (BadDraw, BadValue, CheckpointError, InternalTypeError, LoaderError, MeshError, OptionError,
                      RunError, Stopped, TokenFileError)
from ..lowering.context import context_row
from ..lowering.finite_check import first_nonfinite_op
from ..lowering.generator_graphs import default_trip_loop
from ..lowering.graphs import Graphs
from ..weights.optim import learning_rate, make_optimizer
from ..weights.hf_export import export_extras
from ..weights.params import init_params, param_shapes
from ..weights.pretrained import export_mapping, export_params, initial_params, nonfinite_param
from .batches import Batches, open_loaders
from .checkpoint import Checkpoints
from .checkpoint_policy import CheckpointPolicy
from .checks import ValueChecks
from .compile_cache import configure as configure_compile_cache
from .fits import is_out_of_memory, out_of_memory
from .loop import Loop, LoopParts
from .options import RunOptions
from .report import TOKEN_SOURCES, Reporter, batch_tokens
from .rewards import PythonReward
from .samples import SampleLog, open_samples
from .signals import StopLooks, StopSignals
from .start import RunStart
from .state import RunResult, RunState, StepReport, checkpoint_tree


def placed(state: RunState, dp: DataParallel | None) -> RunState:
    """The parameters, optimizer state and counters committed to the one device (as a restore and the
    graphs' outputs are: a fresh run and a resume compile each graph once), or on the mesh `dp`
    replicated (under FSDP split along it: sharding.DataParallel.state_sharding)."""
    parts = (state.trainable, state.frozen, state.opt_state, state.counters)
    trainable, frozen, opt_state, counters = (jax.device_put(parts, jax.devices()[0]) if dp is None
                                              else dp.put_state(parts))
    return RunState(state.step, trainable, frozen, opt_state, state.records, counters)


class Trainer:
    """One run of a checked program: its batches, graphs, optimizer, the step and the passes.

    `stop` (signals.StopSignals, or None: never stops) is looked at before every trip of the
    generator and between the phases of a step, `on_trip(step, trip)` just before that look (tests
    send signals from it): `looks` (signals.StopLooks). `steps` is the run's last step. Raises DataError when a
    loader's data are not as declared.
    """

    def __init__(self, program: ir.Program, options: RunOptions, on_trip=None, stop: StopSignals | None = None):
        self.program = program
        self.options = options
        run = program.run
        self.steps = options.steps or run.steps
        loaders = open_loaders(program)   # (a missing or bad data file fails here, first)
        selected = frozenset(options.diagnostics) | frozenset(run.diagnostics)
        self.optimizer = make_optimizer(run.optimizer, program)
        self.lr = learning_rate(run.optimizer)   # the learning rate of an optimizer step, logged as `lr`
        try:
            self.dp = DataParallel.of(program, options.devices, options.fsdp, options.model)
        except MeshError as e:
            raise (OptionError if options.devices is not None or options.model is not None else RunError)(str(e))
        self.trip_loop = options.trip_loop or default_trip_loop(self.dp is None)
        self.graphs = Graphs(program, self.optimizer, selected, donate=jax.default_backend() != "cpu", dp=self.dp,
                             trip_loop=self.trip_loop)
        self.layout = self.graphs.layout
        self.batches = Batches(program, loaders, self.layout, self.dp)
        self.checks = ValueChecks(program, self.graphs.draw_sites, lambda: self.graphs.training.report_names)
        gen = self.graphs.generator
        self.looks = StopLooks(stop, on_trip, gen.watch if gen is not None else None, self.trip_loop == "compiled",
                               gen.c_look if gen is not None else None)
        self.bad = None                # on the device: the first non-finite loss (training_graphs.tally), or None
        self.draw = None               # on the device: the first bad traced temperature (draw_check.py), or None
        # tokens/s (report.Throughput): whether the training loader's records are token rows
        self.counts_tokens = program.loaders[run.loader].source[0] in TOKEN_SOURCES
        # `defgenerate`'s `:reward`: the Python function called after the generator (rewards.py), imported here
        gen = program.generate
        self.reward = PythonReward(gen.reward, self.dp) if gen is not None and gen.reward is not None else None

    def initial_state(self, load: bool = True) -> RunState:
        """Fresh parameters (pretrained ones loaded unless `load` is False: for shapes only), fresh
        optimizer state, step 0."""
        if load:
            trainable, frozen = initial_params(self.program, self.program.run.seed)
        else:
            trainable, frozen = init_params(self.program.params, self.program.run.seed)
        return self.place(RunState(0, trainable, frozen, self.optimizer.init(trainable), 0, self.graphs.zero_counters()))

    def place(self, state: RunState) -> RunState:
        """`state` placed as every step's graphs take it (`placed`)."""
        return placed(state, self.dp)

    def state_like(self):
        """The checkpoint tree's shapes and dtypes (`checkpoint_tree`), from the declared shapes: drawing
        the parameters, even abstractly, costs start-up time."""
        shapes, frozen_shapes = param_shapes(self.program.params)
        return jax.eval_shape(lambda t: checkpoint_tree(RunState(
            0, t, frozen_shapes, self.optimizer.init(t), 0, self.graphs.zero_counters())), shapes)

    def step(self, state: RunState, samples: SampleLog | None = None) -> tuple[RunState, StepReport]:
        """Run one training step; return the new state and its report (device values). `samples`
        (samples.SampleLog, or None) takes the first group's rows of a step it is due at.

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
        tokens = 0
        for group in range(self.layout.groups):
            self.looks.poll()
            batch, rows, records = self.batches.next_group(state.step, group, records)
            if self.program.generate is not None:
                batch, rows, made = g.generate(state.trainable, state.frozen, batch, rows, self.layout.stack > 1,
                                               self.looks.trip_hook(state.step), draw)
                batch, draw = {**batch, **made}, g.draw
                if self.reward is not None:   # on the host, between `generate.finish` and the training graph
                    batch = self.reward.join(batch, state.step + 1, group * self.layout.stack, self.layout.stack > 1)
                self.looks.poll()
            if self.counts_tokens:   # the rows the training graph reads: the generated ones, where it runs
                tokens += batch_tokens(batch, self.layout.stack > 1)
            l, total, m, d, counters, bad = g.train_group(total, state.trainable, state.frozen, batch, rows,
                                                          counters, bad)
            if group == 0 and samples is not None and samples.due(state.step + 1):
                samples.take(state.step + 1, batch, self.layout.stack > 1, kept=g.training.last_kept)
            losses += l
            metrics.append(m)
            diags.append(d)
        self.looks.commit(state.step)
        trainable, opt_state = g.update(state.trainable, state.opt_state, total, bad[0])
        new = RunState(state.step + 1, trainable, state.frozen, opt_state, records, counters)
        self.bad, self.draw = bad, draw
        return new, StepReport(losses, metrics, diags, bad, draw, tokens if self.counts_tokens else None)

    def run_pass(self, ps: ir.PassIR, state: RunState, samples: SampleLog | None = None) -> dict:
        """K batches of the pass's loader (always its first K, so evaluations compare), no gradient;
        `samples` (or None) takes each pass's first rows.

        A pass does not look for a stop: it runs after its step's update, which
        on an accelerator donated the previous state's buffers, so the step is
        past abandoning; a stop that arrives during a pass is acted on before
        the next step, once this step (its pass rows included) is complete.
        """
        sums: dict[str, float] = {}
        fn = self.graphs.passes[ps.name]
        for k, (batch, rows) in enumerate(self.batches.pass_batches(ps, state.step, state.records)):
            if ps.runs_generator:
                batch, rows, made = self.graphs.generate(state.trainable, state.frozen, batch, rows, stacked=False)
                batch = {**batch, **made}
                if self.reward is not None:
                    batch = self.reward.join(batch, state.step, 0, False, ps.name)
                if self.graphs.draw is not None:   # (the pass waits for its loss below anyway)
                    self.checks.check_records(None, self.graphs.draw, ps.name)
            loss, metrics, *kept = fn(state.trainable, state.frozen, batch, rows, state.counters)
            if k == 0 and samples is not None:   # every pass's first rows
                samples.take(state.step, batch, False, ps.name, kept=kept[0] if kept else None)
            for m, v in {"loss": float(loss), **{m: float(v) for m, v in metrics.items()}}.items():
                sums[m] = sums.get(m, 0.0) + v
        return {f"{ps.name}/{m}": v / ps.batches for m, v in sums.items()}

    def loop_parts(self) -> LoopParts:
        """What the step loop uses of this run (loop.LoopParts)."""
        run = self.program.run
        return LoopParts(self.step, self.run_pass, self.settle, self.checks, self.lr, self.batches.prefetch,
                         run.log_every, tuple(self.program.passes))

    def fit(self, state: RunState, reporter: Reporter, last: int | None = None) -> tuple[RunState, list[dict]]:
        """Train from `state` to step `last` (default `self.steps`), logging every `:log :every` steps,
        running passes, saving no checkpoint (loop.py's `Loop`); returns the last state and the
        logged rows."""
        return Loop(self.loop_parts(), reporter, self.steps if last is None else last).run(state)

    def nonfinite_origin(self, done: RunState | None):
        """Where the first non-finite loss's microbatch first made a non-finite value (a
        finite_check.Origin), or None: none kept, nothing non-finite op by op, or a multi-process run
        (each process holds only its rows). Re-runs that microbatch from `done`, the last completed
        state, whose parameters the update kept from the bad step on (training_graphs `_update`), its
        records and context rows as the step read them, and the counter totals the record kept."""
        if self.bad is None or done is None or jax.process_count() > 1:
            return None
        step, _, micro, base = jax.device_get(self.bad[:4])
        step, micro = int(step), int(micro)
        if step < 1 or micro < 0 or done.step < step - 1:
            return None
        batch_size, S = self.batches.batch_size, self.layout.stack
        per_step = self.layout.groups * S * batch_size
        start = done.records - (done.step - (step - 1)) * per_step   # the bad step's first record

        def row(m: int):
            records = start + m * batch_size
            stage, _, within = self.batches.stage_at(records)
            return records, np.array([context_row(step - 1, m, records, stage, within)], np.int64)

        records, rows = row(micro)
        _, gen_rows = row(micro - micro % S)   # a stacked group's generator reads its first copy's context
        batch = self.batches.training_batch(records)
        joined = None if self.reward is None else (lambda b: self.reward.join(b, step, micro, False))
        return first_nonfinite_op(self.program, self.graphs.tracer, done.trainable, done.frozen, batch, gen_rows,
                                  rows, {c: jax.numpy.asarray(v) for c, v in base.items()},
                                  self.graphs.counter_types, joined)

    def settle(self) -> None:
        """Raise BadValue if any completed step's loss was NaN or infinite, naming the first such step
        (see loop.py), or BadDraw for the first bad traced temperature of a generator (the earlier of
        the two); waits for the device. Called before anything is logged or saved."""
        if self.bad is not None:
            self.checks.check_records(self.bad, self.draw)


def _fit_saving(loop: Loop, policy: CheckpointPolicy, signals: StopSignals, state: RunState, c_look=None):
    """`loop.run` with the stop signals noted (and told to the compiled trip loop's stop bit in C,
    `c_look`: lowering/trip_look.py), the checkpoints the policy saves written, and at a stop the
    last completed step saved (then RunStopped)."""
    with signals:
        if c_look is not None:   # a signal sets the compiled loop's stop bit in C (trip_look.py)
            signals.listen(c_look.stop)
        try:
            state, history = loop.run(state)
            policy.finish()
        except Stopped as stop:
            raise policy.at_stop(stop, loop.completed)
    return state, history


def _out_of_memory(e: BaseException, done: RunState | None, store: Checkpoints, first: int) -> RunError:
    """The RunError of a step that ran out of device memory (fits.py `out_of_memory`): the step it was
    in (after `done`, the last completed state) and the newest checkpoint saved, which `--resume`
    continues from."""
    try:
        store.wait()
    except CheckpointError:
        pass
    step = (done.step if done is not None else first) + 1
    return out_of_memory(e, step, store.latest(), store.spec.dir)


def _diverged(e: BadValue, trainer: Trainer, store: Checkpoints, done: RunState | None) -> BaseException:
    """The error a NaN or infinite value stops the run with, naming the last good checkpoint: a bad
    traced temperature stays a BadDraw (an error of the file, not a divergence); any other is a RunError naming the cause
    (a non-finite frozen or initial parameter) or the likely ones. `done`: the last completed state."""
    try:
        store.wait()
    except CheckpointError:
        pass
    good = store.latest()
    where = (f"the last good checkpoint is step {good} in {store.spec.dir}" if good is not None
             else "no checkpoint was saved")
    if isinstance(e, BadDraw):   # a setting the file computes wrongly, not a divergence
        return e.saved_at(where)
    program = trainer.program
    cause = None if done is None else nonfinite_param(program, done.frozen) or (
        nonfinite_param(program, done.trainable, "initial") if done.step == 0 else None)
    if cause is not None:
        return RunError(f"{e}, so the run stopped: {cause}; {where}")
    origin = _origin(e, trainer, done)
    if origin is not None:
        return RunError(f"{e}, so the run stopped; the first value of that step that was not finite: "
                        f"{origin.describe(program)}; {where}")
    return RunError(f"{e}, so the run stopped; likely causes: too high a learning rate, a log of 0 or a "
                    "division by 0, an index out of range (e.g. a label >= the number of classes), a NaN "
                    f"in a pretrained checkpoint's trainable tensors; {where}")


def _origin(e: BadValue, trainer: Trainer, done: RunState | None):
    """The check of the bad step's intermediates (`Trainer.nonfinite_origin`) for a non-finite loss
    the training graph kept; None for another value (a row's metric, a parameter) or when the
    re-run itself fails (the generic causes are said then)."""
    if e.metric != "`loss`":
        return None
    try:
        return trainer.nonfinite_origin(done)
    except Exception:   # the diagnosis must never hide the error it explains
        return None


def train(program: ir.Program, options: RunOptions, on_trip=None) -> RunResult:
    """Train `program` from scratch, or from its newest checkpoint with `options.resume`.

    Raises RunError for data problems, an unwritable or full dir, a checkpoint
    of another run, or a NaN/Inf value (naming the step, the metric and the
    last good checkpoint); RunStopped when SIGINT or SIGTERM stopped it (after
    saving the last completed step); RunFinished, having changed nothing, when
    `options.resume` finds the run has trained its steps already. `on_trip(step,
    trip)` is called before every trip of the generator: where `options.trip_loop` is None the run
    then takes the host loop, which calls it in this thread before each call; with "compiled" it is
    called on the host from the loop's callback, what it raises raised at the host's next look. The run dir is held from before
    anything is written in it until the export is written (run_lock.py): RunDirInUse, having
    written nothing, when another process holds it.
    """
    configure_compile_cache(options.compile_cache)   # before anything compiles
    if on_trip is not None and options.trip_loop is None:   # a hook to call before each trip: the host loop
        options = dataclasses.replace(options, trip_loop="host")
    start = RunStart(program, options)
    try:
        return _run(start, program, options, on_trip)
    finally:
        start.release()   # the run dir, held since `prepare`, let go however the run ended


def _begin(start: RunStart, trainer: Trainer) -> tuple[Checkpoints, RunState, Reporter]:
    """The checkpoint store, the first state (fresh, or the resumed checkpoint's) and the reporter;
    the store closed again if any of it fails."""
    store, resumed = start.checkpoints(trainer.state_like(), trainer.dp)
    try:
        state = trainer.initial_state() if resumed is None else trainer.place(resumed)
        reporter = start.reporter(state.step, trainer.dp)
    except BaseException:
        store.close()
        raise
    return store, state, reporter


def _run(start: RunStart, program: ir.Program, options: RunOptions, on_trip) -> RunResult:
    """`train`'s body, from `start` (whose run dir it holds) to the export."""
    signals = StopSignals()   # (installed while the loop runs: `_fit_saving`)
    start.prepare()
    try:
        trainer = Trainer(program, options, on_trip, signals)
    except BaseException:
        start.abandon()
        raise
    try:
        store, state, reporter = _begin(start, trainer)
    except jax.errors.JaxRuntimeError as e:   # the first state did not fit
        if is_out_of_memory(e):
            raise out_of_memory(e, None, None, "") from None
        raise
    first = state.step
    samples: SampleLog | None = None
    loop: Loop | None = None
    try:
        t0 = time.perf_counter()
        try:
            samples = open_samples(program, options, trainer.steps, first, reporter)
            if samples is not None and samples.dropped:
                start.say_dropped(samples.dropped, first, samples.path, "sampled again")
            policy = CheckpointPolicy(store, trainer.steps, trainer.settle, trainer.checks, samples)
            loop = Loop(trainer.loop_parts(), reporter, trainer.steps, policy, samples)
            gen = trainer.graphs.generator
            state, history = _fit_saving(loop, policy, signals, state, gen.c_look if gen is not None else None)
        except InternalTypeError as e:
            line, col = program.line_col(e.offset)
            raise RunError(f"{e} ({program.path}:{line}:{col}); this is a bug in sexpgpu, please report it")
        except BadValue as e:
            err = _diverged(e, trainer, store, loop.completed if loop is not None else None)
            if isinstance(err, BadDraw):
                raise err from None
            raise err
        except CheckpointError as e:
            raise RunError(str(e))
        except (LoaderError, TokenFileError) as e:   # a read that failed during the run (the file changed under it)
            raise RunError(str(e)) from None
        except jax.errors.JaxRuntimeError as e:   # XLA out of memory where the plan said it would fit
            if not is_out_of_memory(e):
                raise
            raise _out_of_memory(e, loop.completed if loop is not None else None, store, first) from None
        finally:
            done = loop.completed if loop is not None else None
            if samples is not None:   # the rows of the completed steps, then the file closed
                samples.close(done.step if done is not None else None)
            reporter.close()
    finally:
        store.close()
    jax.block_until_ready(state.trainable)
    seconds = time.perf_counter() - t0
    if options.export is not None:
        mapped = options.export_names is not None   # then config.json and the tokenizer beside the shards, one export
        left = export_params(options.export, state.trainable, state.frozen, options.export_frozen,
                             export_mapping(program, options.export_names)[0] if mapped else None,
                             options.max_shard_bytes,
                             export_extras(program, options.export_names) if mapped and jax.process_index() == 0 else (),
                             str(options.run_dir.resolve()), program, options.export_adapter)
        if left is not None:
            start.say(left)
    feed = trainer.batches.feed
    return RunResult(state.trainable, state.frozen, history, dict(trainer.graphs.traces), seconds, trainer.steps,
                     first, feed.stats() if feed is not None else ReadStats())
