"""The main benchmarks: every row measured against its reference in the same run.

    .venv/bin/python benchmarks/run_all.py [--only lint,lint10k,lsp,step,trips,stack,compiles] [--quick]

Prints one table: benchmark, measured value, the reference measured in this
run, the ratio and the target. The runtime rows give two ratios: best block
over best block, and (paired) the median over rounds of one block over the
reference's block run next to it. About 3-5 minutes on the 2-core CPU machine.
Not a test: the numbers depend on the machine (BENCHMARKS.md records them).

Rows:
* lint      `sexpgpu lint` on the fixture, cold (a fresh process), against
            `python -c "import lark"`; median of several interleaved runs.
* lint10k   `sexpgpu lint` on a generated 10,000-line run file (lsp_latency.generate),
            a fresh process, median; also the front end alone in this process.
* lsp       the server's edit-to-diagnostics p50/p99 on a 2,000-line file
            (lsp_latency.measure).
* step      the fixture's steady-state time per training step (the real loop,
            `Trainer.fit`, after compiling) against a hand-written JAX + optax
            step of the same model, batch, generator and optimizer; 20 alternating
            blocks of 150 steps each (the loop logs every 50, as the fixture says).
* trips     the generator's trip loop: a host loop of 6 jitted step calls (by hand,
            and sexpgpu's own loop, `Graphs.trips`, with the trainer's stop check
            before every trip) against one `lax.fori_loop` over the same 6 trips,
            jitted once.
* stack     the fixture with `:microbatches 4 :stack 4` against `:stack 1`,
            steady-state time per step.
* compiles  `Graphs.traces` of a `train` run: how often each graph was traced.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"
SEXPGPU = ROOT / ".venv" / "bin" / "sexpgpu"
ROWS: list[tuple[str, str, str, str, str]] = []


def row(name: str, value: str, reference: str, ratio: str, target: str) -> None:
    ROWS.append((name, value, reference, ratio, target))
    print(f"  {name}: {value} | ref {reference} | ratio {ratio} | target {target}", flush=True)


def timed_process(cmd: list[str], ok_codes=(0,)) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in ok_codes:
        raise SystemExit(f"{cmd} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return dt, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(cmds: list[list[str]], runs: int) -> list[tuple[float, float]]:
    """Median (wall, CPU) seconds of each command, the commands interleaved so that noise hits all alike.
    CPU time is the steadier figure on a shared machine: waiting for a core does not count."""
    times: list[list[tuple[float, float]]] = [[] for _ in cmds]
    for _ in range(runs):
        for i, c in enumerate(cmds):
            times[i].append(timed_process(c))
    return [(statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for t in times]


# --------------------------------------------------------------------------- front end

def bench_lint(runs: int) -> None:
    # Both sides read bytecode, as an installed package does: lark's installed files have their .pyc;
    # ours are written here (a checkout run with PYTHONDONTWRITEBYTECODE=1 would compile every run).
    import compileall
    for pkg in ("sexpgpu_lang", "sexpgpu_cli"):
        compileall.compile_dir(str(ROOT / pkg), quiet=1)
    (lint, lint_cpu), (lark, lark_cpu) = medians([[str(SEXPGPU), "lint", str(FIXTURE)], [sys.executable, "-c", "import lark"]], runs)
    row("lint cold, fixture", f"{lint * 1000:.0f} ms wall, {lint_cpu * 1000:.0f} ms CPU",
        f"import lark {lark * 1000:.0f} ms wall, {lark_cpu * 1000:.0f} ms CPU",
        f"{lint / lark:.2f}x wall, {lint_cpu / lark_cpu:.2f}x CPU", "<= 1.5x")


def bench_lint10k(runs: int) -> None:
    from lsp_latency import generate
    from sexpgpu_lang import analyze
    text = generate(10_000)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.sx"
        path.write_text(text)
        ((wall, cpu),) = medians([[str(SEXPGPU), "lint", str(path)]], runs)
    from sexpgpu_lang import syntax
    inproc = []
    for _ in range(3):
        for cache in (getattr(syntax, n, None) for n in ("_LEXED", "_BUILT", "_PLACED")):
            if cache is not None:
                cache.clear()   # the parser's caches would make every run after the first a no-op parse
        t0 = time.perf_counter()
        res = analyze(text, "big.sx")
        inproc.append(time.perf_counter() - t0)
    assert not res.diagnostics, res.diagnostics[:3]
    row(f"lint 10k lines ({text.count(chr(10))} lines)", f"{wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU (process)",
        f"front end alone, in process, cold caches {min(inproc) * 1000:.0f} ms",
        f"{cpu:.2f}x of target (CPU), {wall:.2f}x (wall)", "<= 1000 ms")


def bench_lsp(edits: int) -> None:
    from lsp_latency import generate, measure_with_cpu, percentile
    text = generate(2000)
    lat, cpu_ms = asyncio.run(measure_with_cpu(text, edits))
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    cpu = f", server CPU {cpu_ms:.0f} ms/edit" if cpu_ms is not None else ""
    row(f"server edit->diagnostics, 2k lines, {edits} edits", f"p50 {p50:.0f} ms, p99 {p99:.0f} ms{cpu}", "-",
        f"{p50 / 30:.1f}x / {p99 / 100:.1f}x of target", "p50 <= 30 ms, p99 <= 100 ms")


# --------------------------------------------------------------------------- runtime

def _jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    return jax


def reference_step(seed: int = 0):
    """The fixture's step by hand (as benchmarks/tiny_generate.py): returns (one_step(), params())."""
    jax = _jax()
    import jax.numpy as jnp
    import numpy as np
    from tiny_generate import TRIPS, reference_parts
    params, opt, step, finish, train, make_batch = reference_parts(seed)
    st = {"p": params, "o": opt.init(params)}
    step_j = jax.jit(jax.vmap(step, in_axes=(None, 0, 0, None)))
    finish_j = jax.jit(jax.vmap(finish))

    def trips_fori(p, rows, strides):
        return jax.lax.fori_loop(0, TRIPS, lambda t, c: step(p, c[0], c[1], jnp.asarray(t, jnp.int64)), (rows, strides))
    fori_j = jax.jit(jax.vmap(trips_fori, in_axes=(None, 0, 0)))

    rng = np.random.default_rng(seed)
    trips = [jnp.asarray(t, jnp.int64) for t in range(TRIPS)]

    def batch():
        return make_batch(rng)

    def one_step():
        r, s_ = batch()
        for t in trips:
            r, s_ = step_j(st["p"], r, s_, t)
        samples, labels, correct = finish_j(r, s_)
        st["p"], st["o"], loss = train(st["p"], st["o"], samples, labels)
        return loss

    def host_trips(r, s_):
        for t in trips:
            r, s_ = step_j(st["p"], r, s_, t)
        return r

    def fori_trips(r, s_):
        return fori_j(st["p"], r, s_)[0]

    return one_step, st, batch, host_trips, fori_trips


class RefLoop:
    """The hand-written step, run in blocks: `block(n)` returns seconds per step over n steps."""

    def __init__(self, warm: int = 30):
        self.jax = _jax()
        self.one_step, self.st, *_ = reference_step()
        self.block(warm)

    def block(self, n: int) -> float:
        self.jax.block_until_ready(self.st["p"])
        t0 = time.perf_counter()
        for _ in range(n):
            self.one_step()
        self.jax.block_until_ready(self.st["p"])
        return (time.perf_counter() - t0) / n


def trainer_for(text: str):
    _jax()
    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime.run.train import Trainer
    res = analyze(text, str(FIXTURE))
    assert res.program is not None, [d.code for d in res.diagnostics]
    return Trainer(res.program, RunOptions(quiet=True))


class SxLoop:
    """sexpgpu's real loop (`Trainer.fit`: logging every `:log :every`, the loss checks) run in blocks."""

    def __init__(self, text: str, warm: int = 30):
        self.jax = _jax()
        from sexpgpu_runtime.run.report import Reporter
        self.dir = tempfile.TemporaryDirectory()
        self.tr = trainer_for(text)
        self.rep = Reporter(Path(self.dir.name), 10**9, False, True, "bench")
        self.state = self.tr.initial_state()
        self.block(warm)

    def block(self, n: int) -> float:
        self.jax.block_until_ready(self.state.trainable)
        t0 = time.perf_counter()
        self.state, _ = self.tr.fit(self.state, self.rep, self.state.step + n)
        self.jax.block_until_ready(self.state.trainable)
        return (time.perf_counter() - t0) / n

    def close(self):
        self.rep.close()
        self.dir.cleanup()


def interleaved(a, b, steps: int, rounds: int = 10) -> tuple[float, float, float]:
    """Seconds per step of a and of b in `rounds` alternating blocks of `steps // rounds` steps (a shared,
    noisy machine): (best block of a, best block of b, median over the rounds of a's block / b's block
    next to it). The paired median is the steadier figure when the load changes during the run."""
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(a.block(steps // rounds))
        tb.append(b.block(steps // rounds))
    return min(ta), min(tb), statistics.median(x / y for x, y in zip(ta, tb))


def ratios(a: float, b: float, paired: float) -> str:
    """`best a / best b`, then the median of the paired ratios."""
    return f"{a / b:.2f}x (paired {paired:.2f}x)"


def bench_step(steps: int, rounds: int = 20) -> None:
    sx_loop, ref_loop = SxLoop(FIXTURE.read_text()), RefLoop()
    sx, ref, paired = interleaved(sx_loop, ref_loop, steps, rounds)
    sx_loop.close()
    row("training step, fixture (steady state)", f"{sx * 1000:.2f} ms/step", f"hand JAX+optax {ref * 1000:.2f} ms/step",
        ratios(sx, ref, paired), "<= 1.05x")


def trip_rows(reps: int) -> list[tuple[str, str, str, str, str]]:
    """The trip-loop rows on the default device: the fixture's 6 generator trips as a host loop of
    jitted steps (by hand, and sexpgpu's real loop `Graphs.trips`, with the trainer's stop check before
    every trip, stacked as the fixture runs) against one `lax.fori_loop`, in interleaved blocks (best
    block, and the paired median of the ratios). Each `Graphs.trips` call starts from the state the
    previous one returned, as a real step feeds each trip's state to the next: on an accelerator the
    trainer's `generate.step` donates its state argument, so the first state cannot be read twice."""
    jax = _jax()
    _, st, batch, host_trips, fori_trips = reference_step()
    r, s_ = batch()
    tr = trainer_for(FIXTURE.read_text())
    g = tr.graphs
    state = tr.initial_state()
    b, rows, _ = tr.batches.next_group(0, 0, 0)
    stacked = tr.layout.stack > 1
    init = g.gen_init if stacked else g.gen_init_1
    b, rows, first = init(state.trainable, state.frozen, b, rows)
    carry = {"s": first}
    hook = tr.looks.trip_hook(0)

    def sx_trips():
        carry["s"] = g.trips(state.trainable, state.frozen, carry["s"], rows, stacked, hook)
        return carry["s"]

    fns = {"host": lambda: host_trips(r, s_), "fori": lambda: fori_trips(r, s_), "sx": sx_trips}
    for fn in fns.values():
        for _ in range(10):
            jax.block_until_ready(fn())
    rounds = 10
    per = max(1, reps // rounds)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):   # interleaved blocks
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(per):
                out = fn()
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - t0) / per)
    best = {k: min(v) for k, v in times.items()}
    paired = {k: statistics.median(x / y for x, y in zip(times[k], times["fori"])) for k in ("host", "sx")}
    fori = best["fori"]
    return [(f"trip loop, {label}", f"{best[k] * 1e6:.0f} us/6 trips", f"fori_loop {fori * 1e6:.0f} us",
             ratios(best[k], fori, paired[k]), "<= 1.1x")
            for k, label in (("host", "hand host loop of jitted steps"), ("sx", "sexpgpu Graphs.trips host loop"))]


def bench_trips(reps: int) -> None:
    for r in trip_rows(reps):
        row(*r)


def stacked_text(stack: int) -> str:
    text = FIXTURE.read_text()
    old = "     :microbatches 2\n     :stack 2\n"
    assert old in text
    return text.replace(old, f"     :microbatches 4\n     :stack {stack}\n")


def bench_stack(steps: int) -> None:
    l1, l4 = SxLoop(stacked_text(1)), SxLoop(stacked_text(4))
    assert l4.tr.layout.stack == 4 and l1.tr.layout.stack == 1, (l4.tr.layout, l1.tr.layout)
    s4, s1, paired = interleaved(l4, l1, steps)
    l1.close(), l4.close()
    row("stacked run degree 4 (microbatches 4)", f"{s4 * 1000:.2f} ms/step", f":stack 1 {s1 * 1000:.2f} ms/step",
        ratios(s4, s1, paired), "faster (< 1x)")


def bench_compiles(steps: int) -> None:
    _jax()
    from sexpgpu_lang import analyze_file
    from sexpgpu_runtime import RunOptions, train
    res = analyze_file(str(FIXTURE))
    with tempfile.TemporaryDirectory() as d:
        out = train(res.program, RunOptions(steps=steps, run_dir=Path(d), quiet=True))
    traces = dict(out.traces)
    worst = max(traces.values())
    row(f"compilations per run ({steps} steps)", ", ".join(f"{k} {v}" for k, v in sorted(traces.items())), "-",
        f"max {worst} per graph", "1 per graph")


# --------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="lint,lint10k,lsp,step,trips,stack,compiles")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    a = ap.parse_args()
    q = a.quick
    which = a.only.split(",")
    benches = {
        "lint": lambda: bench_lint(3 if q else 15),
        "lint10k": lambda: bench_lint10k(1 if q else 3),
        "lsp": lambda: bench_lsp(10 if q else 60),
        "step": lambda: bench_step(50 if q else 3000, 5 if q else 20),   # blocks of 150 steps (3 logged)
        "trips": lambda: bench_trips(50 if q else 300),
        "stack": lambda: bench_stack(25 if q else 250),
        "compiles": lambda: bench_compiles(20 if q else 60),
    }
    t0 = time.perf_counter()
    for name in which:
        print(f"[{name}]", flush=True)
        benches[name]()
    print()
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; total {time.perf_counter() - t0:.0f} s")
    widths = [max(len(r[i]) for r in ROWS + [("benchmark", "measured", "reference (same run)", "ratio", "target")])
              for i in range(5)]
    header = ("benchmark", "measured", "reference (same run)", "ratio", "target")
    for r in [header, tuple("-" * w for w in widths)] + ROWS:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
