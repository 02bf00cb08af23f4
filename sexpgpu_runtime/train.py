"""The training loop: loaders, the step's graphs, metrics to the terminal and metrics.jsonl.

`train(program, options)` runs the checked program. A run is a pure
function of its file, its data and its seed: parameter initialisation,
record order and every draw derive from `:seed`.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from sexpgpu_lang import ir

from .graphs import Graphs
from .loaders import Loader, LoaderError
from .optim import make_optimizer
from .params import init_params


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


@dataclass
class RunResult:
    """What a finished run leaves: the final parameters, the logged metrics, and how often each graph was traced."""

    trainable: dict
    frozen: dict
    history: list[dict]
    traces: dict
    seconds: float
    steps: int = 0
    extra: dict = field(default_factory=dict)


def _ctx(step: int, microbatch: int, records: int) -> dict:
    return {"step": np.int64(step), "microbatch": np.int32(microbatch), "records": np.int64(records),
            "stage": np.int32(0), "stage-records": np.int64(records)}


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

    def __init__(self, run_dir: Path, total: int, progress: bool, quiet: bool, name: str):
        self.path = run_dir / "metrics.jsonl"
        self.fh = open(self.path, "w", encoding="utf-8")
        self.total, self.quiet = total, quiet
        self.bar = None
        self.t0 = time.perf_counter()
        if progress and not quiet:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn(f"[bold]{name}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} steps/s"),
                                TimeRemainingColumn(), transient=False)
            self.task = self.bar.add_task("train", total=total, loss="-", rate="-")
            self.bar.start()

    def advance(self, step: int):
        if self.bar is not None:
            self.bar.update(self.task, completed=step)

    def log(self, row: dict, done: int):
        self.fh.write(json.dumps(row) + "\n")
        self.fh.flush()
        elapsed = time.perf_counter() - self.t0
        rate = done / elapsed if elapsed > 0 else 0.0
        if self.bar is not None:
            self.bar.update(self.task, completed=done, loss=f"{row.get('loss', float('nan')):.4f}", rate=f"{rate:.1f}")
        elif not self.quiet:
            parts = [f"step {row['step']}/{self.total}"] + [f"{k} {v:.4g}" for k, v in row.items() if k != "step"]
            print("  ".join(parts) + f"  {rate:.1f} steps/s", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.stop()
        self.fh.close()


def _prepare_run_dir(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise RunError(f"cannot write to run dir {run_dir}: {e.strerror or e}")


def train(program: ir.Program, options: RunOptions) -> RunResult:
    """Train `program`. Raises RunError for data problems, an unwritable run dir, or a NaN/Inf loss."""
    run = program.run
    steps = options.steps or run.steps
    _prepare_run_dir(options.run_dir)
    try:
        loader = Loader(program.loaders[run.loader], run.seed)
        pass_loaders = {ps.name: Loader(program.loaders[ps.loader], run.seed) for ps in program.passes}
    except LoaderError as e:
        raise RunError(str(e))

    selected = frozenset(options.diagnostics or run.diagnostics)
    optimizer = make_optimizer(run.optimizer)
    donate = jax.default_backend() != "cpu"
    graphs = Graphs(program, optimizer, selected, donate)
    layout = graphs.layout
    trainable, frozen = init_params(program.params, run.seed)
    opt_state = optimizer.init(trainable)
    counters = graphs.zero_counters()
    B = loader.spec.batch
    position = 0
    history: list[dict] = []
    reporter = Reporter(options.run_dir, steps, options.progress, options.quiet, Path(program.path).stem)
    t0 = time.perf_counter()
    try:
        for step in range(steps):
            grads = []
            losses, metrics, diags = [], [], []
            for g in range(layout.groups):
                copies = []
                for i in range(layout.stack):
                    mb = g * layout.stack + i
                    copies.append((loader.batch(position), _ctx(step, mb, position)))
                    position += B
                stacked = layout.stack > 1
                if stacked:
                    batch = _stack([c[0] for c in copies])
                    ctxs = _stack([c[1] for c in copies])
                    gen_ctx = copies[0][1]
                else:
                    batch, ctxs = copies[0]
                    gen_ctx = ctxs
                if program.generate is not None:
                    made = graphs.generate(trainable, frozen, batch, gen_ctx, stacked)
                    batch = {**batch, **made}
                l, gs, m, d, dl = graphs.grads(trainable, frozen, batch, ctxs, counters)
                grads += gs
                for delta in dl:
                    counters = {c: counters[c] + delta[c] for c in counters}
                losses += l
                metrics.append(m)
                diags.append(d)
            trainable, opt_state = graphs.update(trainable, opt_state, grads)
            done = step + 1
            log_now = done % run.log_every == 0 or done == steps or done == 1
            pass_rows = {}
            for ps in program.passes:
                if done % ps.every == 0 or done == steps:
                    pass_rows.update(_run_pass(graphs, ps, pass_loaders[ps.name], trainable, frozen, step, position, counters))
            if log_now or pass_rows:
                row = {"step": done, "loss": float(np.mean([float(x) for x in losses]))}
                row.update(_mean_reports(metrics))
                row.update(_mean_reports(diags))
                row.update(pass_rows)
                for k, v in row.items():
                    if k != "step" and not math.isfinite(v):
                        raise RunError(f"step {done}: `{k}` is {v}; the run stopped (lower the learning rate, or look for a log of 0)")
                history.append(row)
                reporter.log(row, done)
            else:
                reporter.advance(done)
    finally:
        reporter.close()
    seconds = time.perf_counter() - t0
    jax.block_until_ready(trainable)
    return RunResult(trainable, frozen, history, dict(graphs.traces), seconds, steps)


def _run_pass(graphs: Graphs, ps: ir.PassIR, loader: Loader, trainable, frozen, step: int, records: int, counters) -> dict:
    """K batches of the pass's loader (always its first K, so evaluations compare), no gradient."""
    sums: dict[str, float] = {}
    fn = graphs.passes[ps.name]
    B = loader.spec.batch
    for k in range(ps.batches):
        batch = loader.batch(k * B)
        ctx = _ctx(step, 0, records)
        if ps.runs_generator:
            batch = {**batch, **graphs.generate(trainable, frozen, batch, ctx, stacked=False)}
        loss, metrics = fn(trainable, frozen, batch, ctx, counters)
        vals = {"loss": float(loss), **{m: float(v) for m, v in metrics.items()}}
        for m, v in vals.items():
            sums[m] = sums.get(m, 0.0) + v
    return {f"{ps.name}/{m}": v / ps.batches for m, v in sums.items()}
