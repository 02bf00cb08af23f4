"""The training loop: loaders, the step's graphs, metrics to the terminal and metrics.jsonl.

`Trainer(program, options)` owns one run; `RunState` is everything a step
changes (parameters, optimizer state, the next step, records consumed,
counter totals), so a checkpoint of it resumes the run exactly. A run is a
pure function of its file, its data and its seed: parameter
initialisation, record order and every draw derive from `:seed`.
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import jax
import numpy as np

from sexpgpu_lang import ir

from .dtypes import InternalTypeError, jdt
from .graphs import Graphs
from .loaders import Loader, LoaderError
from .optim import make_optimizer
from .params import flatten, init_params, set_path


class RunError(Exception):
    """A run that cannot go on, for a reason the user can act on (bad data, a NaN loss, an unwritable dir)."""


@dataclass
class RunOptions:
    """How to run: `steps` overrides the file's `:steps`; metrics go under `run_dir`."""

    steps: int | None = None
    run_dir: Path = Path("runs/run")
    diagnostics: tuple[str, ...] = ()
    progress: bool = False
    quiet: bool = False
    export: Path | None = None


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


def make_ctx(step: int, microbatch: int, records: int, stage: int = 0, stage_records: int | None = None) -> dict:
    """The context scalars with their dtypes (`:step` i64, `:microbatch` i32, ...; DESIGN.md section 2)."""
    return {"step": np.int64(step), "microbatch": np.int32(microbatch), "records": np.int64(records),
            "stage": np.int32(stage), "stage-records": np.int64(records if stage_records is None else stage_records)}


def _stack(trees: list[dict]) -> dict:
    return {k: np.stack([t[k] for t in trees]) for k in trees[0]}


def _mean_reports(groups: list[list[dict]]) -> dict[str, float]:
    flat = [m for g in groups for m in g]
    out: dict[str, float] = {}
    for name in dict.fromkeys(k for m in flat for k in m):
        vals = [float(m[name]) for m in flat if name in m]
        out[name] = sum(vals) / len(vals)
    return out


class Reporter:
    """Metrics to the terminal (a rich progress bar on a terminal, plain lines otherwise) and metrics.jsonl."""

    def __init__(self, run_dir: Path, total: int, progress: bool, quiet: bool, name: str, start: int = 0, append: bool = False):
        self.path = run_dir / "metrics.jsonl"
        self.fh = open(self.path, "a" if append else "w", encoding="utf-8")
        self.total, self.quiet, self.start = total, quiet, start
        self.bar = None
        self.t0 = time.perf_counter()
        if progress and not quiet:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn(f"[bold]{name}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} steps/s"),
                                TimeRemainingColumn(), transient=False)
            self.task = self.bar.add_task("train", total=total, completed=start, loss="-", rate="-")
            self.bar.start()

    def _rate(self, done: int) -> float:
        elapsed = time.perf_counter() - self.t0
        return (done - self.start) / elapsed if elapsed > 0 else 0.0

    def advance(self, done: int):
        if self.bar is not None:
            self.bar.update(self.task, completed=done)

    def log(self, row: dict, done: int):
        self.fh.write(json.dumps(row) + "\n")
        self.fh.flush()
        rate = self._rate(done)
        if self.bar is not None:
            self.bar.update(self.task, completed=done, loss=f"{row.get('loss', float('nan')):.4f}", rate=f"{rate:.1f}")
        elif not self.quiet:
            parts = [f"step {row['step']}/{self.total}"] + [f"{k} {v:.4g}" for k, v in row.items() if k != "step"]
            print("  ".join(parts) + f"  {rate:.1f} steps/s", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.stop()
        self.fh.close()


def prepare_run_dir(run_dir: Path) -> None:
    """Create the run dir and prove it writable, before anything trains."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise RunError(f"cannot write to run dir {run_dir}: {e.strerror or e}")


def load_pretrained(program: ir.Program, trainable: dict, frozen: dict) -> None:
    """Replace the initial values of every `:pretrained` model's parameters with the file's tensors.

    The checker compared the file's header with `:params` already; a file
    changed since is still refused here (RunError naming file and tensor).
    """
    if not program.pretrained:
        return
    from safetensors.numpy import load_file
    import jax.numpy as jnp
    by_path = {p.path: p for p in program.params}
    for prefix, path in program.pretrained:
        try:
            tensors = load_file(path)
        except Exception as e:  # safetensors raises its own error types
            raise RunError(f"cannot load {path}: {e}")
        for p in program.params:
            if p.path[:len(prefix)] != prefix:
                continue
            name = ".".join(p.path[len(prefix):])
            if name not in tensors:
                raise RunError(f"{path}: no tensor `{name}` (expected [{' '.join(map(str, p.shape))}] {p.dtype})")
            arr = tensors[name]
            if tuple(arr.shape) != p.shape:
                raise RunError(f"{path}: tensor `{name}` is {list(arr.shape)}, expected {list(p.shape)}")
            set_path(frozen if by_path[p.path].frozen else trainable, p.path, jnp.asarray(arr).astype(jdt(p.dtype)))


def export_params(path: Path, trainable: dict, frozen: dict) -> None:
    """Write every parameter to a .safetensors file, named by its path below the root model joined with `.`."""
    from safetensors.numpy import save_file
    tensors = {".".join(k): np.asarray(v) for k, v in {**flatten(trainable), **flatten(frozen)}.items()}
    try:
        save_file(tensors, str(path))
    except OSError as e:
        raise RunError(f"cannot write {path}: {e.strerror or e}")


class Trainer:
    """One run of a checked program: loaders, graphs, optimizer, the step and the loop."""

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
            raise RunError(str(e))
        self.stages = [(name, n) for name, n in program.stages] or [(run.loader, None)]
        selected = frozenset(options.diagnostics or run.diagnostics)
        self.optimizer = make_optimizer(run.optimizer)
        self.graphs = Graphs(program, self.optimizer, selected, donate=jax.default_backend() != "cpu")
        self.layout = self.graphs.layout
        self.batch_size = program.loaders[run.loader].batch
        self.on_trip = None   # called before every trip with (step, trip); a signal check goes here

    def initial_state(self) -> RunState:
        """Fresh parameters (pretrained ones loaded), fresh optimizer state, step 0."""
        trainable, frozen = init_params(self.program.params, self.program.run.seed)
        load_pretrained(self.program, trainable, frozen)
        return RunState(0, trainable, frozen, self.optimizer.init(trainable), 0, self.graphs.zero_counters())

    def stage_at(self, records: int) -> tuple[int, str, int]:
        """(stage index, its loader, records consumed within it) for a training position."""
        start = 0
        for i, (name, n) in enumerate(self.stages):
            if n is None or records < start + n or i == len(self.stages) - 1:
                return i, name, records - start
            start += n
        raise AssertionError("unreachable")

    def next_group(self, step: int, group: int, records: int):
        """The batches and contexts of one group of microbatches, on the device."""
        copies = []
        for i in range(self.layout.stack):
            stage, name, within = self.stage_at(records)
            copies.append((self.loaders[name].batch(within), make_ctx(step, group * self.layout.stack + i, records, stage, within)))
            records += self.batch_size
        if self.layout.stack > 1:
            batch, ctxs, gen_ctx = _stack([c[0] for c in copies]), _stack([c[1] for c in copies]), copies[0][1]
        else:
            (batch, ctxs), gen_ctx = copies[0], copies[0][1]
        # One transfer per group: the generator's calls then reuse the device copies.
        batch, ctxs, gen_ctx = jax.device_put((batch, ctxs, gen_ctx))
        return batch, ctxs, gen_ctx, records

    def step(self, state: RunState) -> tuple[RunState, dict]:
        """Run one training step; return the new state and its reports (device values)."""
        g = self.graphs
        grads, losses, metrics, diags = [], [], [], []
        records, counters = state.records, state.counters
        for group in range(self.layout.groups):
            batch, ctxs, gen_ctx, records = self.next_group(state.step, group, records)
            if self.program.generate is not None:
                on_trip = (lambda t: self.on_trip(state.step, t)) if self.on_trip else None
                made = g.generate(state.trainable, state.frozen, batch, gen_ctx, self.layout.stack > 1, on_trip)
                batch = {**batch, **made}
            l, gs, m, d, dl = g.grads(state.trainable, state.frozen, batch, ctxs, counters)
            grads += gs
            for delta in dl:
                counters = {c: counters[c] + delta[c] for c in counters}
            losses += l
            metrics.append(m)
            diags.append(d)
        trainable, opt_state = g.update(state.trainable, state.opt_state, grads)
        new = RunState(state.step + 1, trainable, state.frozen, opt_state, records, counters)
        return new, {"losses": losses, "metrics": metrics, "diagnostics": diags}

    def report_row(self, done: int, reports: dict) -> dict:
        """The metrics.jsonl row of a logged step (this syncs with the device)."""
        row = {"step": done, "loss": float(np.mean([float(x) for x in reports["losses"]]))}
        row.update(_mean_reports(reports["metrics"]))
        row.update(_mean_reports(reports["diagnostics"]))
        return row

    def run_pass(self, ps: ir.PassIR, state: RunState) -> dict:
        """K batches of the pass's loader (always its first K, so evaluations compare), no gradient."""
        sums: dict[str, float] = {}
        fn = self.graphs.passes[ps.name]
        loader = self.pass_loaders[ps.name]
        for k in range(ps.batches):
            batch = jax.device_put(loader.batch(k * loader.spec.batch))
            ctx = jax.device_put(make_ctx(state.step, 0, state.records))
            if ps.runs_generator:
                batch = {**batch, **self.graphs.generate(state.trainable, state.frozen, batch, ctx, stacked=False)}
            loss, metrics = fn(state.trainable, state.frozen, batch, ctx, state.counters)
            for m, v in {"loss": float(loss), **{m: float(v) for m, v in metrics.items()}}.items():
                sums[m] = sums.get(m, 0.0) + v
        return {f"{ps.name}/{m}": v / ps.batches for m, v in sums.items()}

    def fit(self, state: RunState, reporter: Reporter, after_step=None) -> tuple[RunState, list[dict]]:
        """Train from `state` to `self.steps`, logging every `:log :every` steps, running passes."""
        history = []
        run = self.program.run
        while state.step < self.steps:
            state, reports = self.step(state)
            done = state.step
            log_now = done % run.log_every == 0 or done == self.steps or done == 1
            row = None
            pass_rows = {}
            for ps in self.program.passes:
                if done % ps.every == 0 or done == self.steps:
                    pass_rows.update(self.run_pass(ps, state))
            if log_now or pass_rows:
                row = self.report_row(done, reports)
                row.update(pass_rows)
                bad = [k for k, v in row.items() if k != "step" and not math.isfinite(v)]
                if bad:
                    raise RunError(f"step {done}: `{bad[0]}` is {row[bad[0]]}; the run stopped "
                                   "(lower the learning rate, or look for a log or division by 0)")
                history.append(row)
                reporter.log(row, done)
            else:
                reporter.advance(done)
            if after_step is not None:
                after_step(state, row)
        return state, history


def train(program: ir.Program, options: RunOptions) -> RunResult:
    """Train `program` from scratch. Raises RunError for data problems, an unwritable run dir, or a NaN/Inf loss."""
    prepare_run_dir(options.run_dir)
    trainer = Trainer(program, options)
    state = trainer.initial_state()
    reporter = Reporter(options.run_dir, trainer.steps, options.progress, options.quiet, Path(program.path).stem)
    t0 = time.perf_counter()
    try:
        state, history = trainer.fit(state, reporter)
    except InternalTypeError as e:
        line, col = program.line_col(getattr(e, "offset", 0))
        raise RunError(f"{e} ({program.path}:{line}:{col}); this is a bug in sexpgpu, please report it")
    finally:
        reporter.close()
    jax.block_until_ready(state.trainable)
    seconds = time.perf_counter() - t0
    if options.export is not None:
        export_params(options.export, state.trainable, state.frozen)
    return RunResult(state.trainable, state.frozen, history, dict(trainer.graphs.traces), seconds, trainer.steps)
