"""Benchmark: the cost of `run`'s `:samples` (every 10 steps) as a ratio of the step time, in one process.

The same run file (tests/fixtures/grpo-by-hand.sx, examples/grpo.sx as it was written by
hand: a generator, 6 trips a step) is trained
with `:samples (:every 10 :rows 4 :text [:answer] :values [:row-reward
:advantage] :prompt 2)` (the batch's names), with `:log-p` of `objective`'s
`let*` added to its `:values` (kept inside the training graph), and without
`:samples`, in turn (each variant first, second and last as often),
`--repeats` times each. The step time of one run is the time between the
host starting step `--short` and step `--long - 1` (their generators' first
trip), over the steps between: compilation and start-up
are left out, and the host is then held back by the device (the loop waits
for the step before), so that is the device's pace. The ratio of each
variant is the median over the repeats of with / without, of the wall time
and of the process's CPU time (every thread's; less moved by other jobs on
a shared machine, it is the work sampling adds). The target is at most
1.02 (the gathered rows go to the host asynchronously: no step waits for
them). The host's own work of a sampled step is also measured alone
(`host_seconds`), as a share of the ten steps between samples: the same
cost, without the machine's noise. Prints each measurement and the ratios.

    .venv/bin/python benchmarks/samples.py [--short 20 --long 420 --repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sexpgpu_lang import analyze  # noqa: E402
from sexpgpu_runtime import RunOptions, train  # noqa: E402

GRPO = ROOT / "tests" / "fixtures" / "grpo-by-hand.sx"   # examples/grpo.sx as written by hand


def variants() -> dict[str, str]:
    """grpo.sx with `:samples` every 10 steps of the batch's names, of those and objective's `log-p`, and
    without `:samples`."""
    text = GRPO.read_text()
    start = text.index("     :samples (")
    end = text.index(")", text.index(":prompt", start)) + 1
    without = text[:start].rstrip("\n") + text[end:]

    def with_(values: str) -> str:
        return text[:start] + f"     :samples (:every 10 :rows 4 :text [:answer] :values [{values}] :prompt 2)" + text[end:]
    return {"batch": with_(":row-reward :advantage"), "objective": with_(":row-reward :advantage :log-p"),
            "without": without}


def step_seconds(text: str, short: int, long: int) -> tuple[float, float]:
    """The mean step time of one run of `long` steps in a fresh run dir, from the host starting step
    `short` to it starting step `long - 1`: (wall seconds, the process's CPU seconds, all threads)."""
    res = analyze(text, str(GRPO))
    assert res.program is not None, [d.message for d in res.diagnostics]
    at: dict[int, float] = {}

    def on_trip(step: int, trip: int) -> None:
        if trip == 0 and step in (short, long - 1):
            at[step] = (time.perf_counter(), time.process_time())
    with tempfile.TemporaryDirectory() as d:
        train(res.program, RunOptions(steps=long, run_dir=Path(d) / "run", quiet=True), on_trip=on_trip)
        if "samples" in text.split("(run", 1)[1]:
            assert (Path(d) / "run" / "samples.jsonl").stat().st_size > 0
    n = long - 1 - short
    return (at[long - 1][0] - at[short][0]) / n, (at[long - 1][1] - at[short][1]) / n


def host_seconds(text: str, n: int = 200) -> float:
    """The host's work of one sampled step of grpo.sx, alone: `SampleLog.take` (the gather's dispatch and
    the copies' start) and writing its rows (decoded, samples.jsonl), on device arrays of the batch's
    shapes; a direct figure, where the runs' ratios move with the machine's load."""
    import jax.numpy as jnp
    from sexpgpu_runtime.run.samples import SampleLog
    res = analyze(text, str(GRPO))
    batch = {"answer": jnp.zeros((128, 8), jnp.int32), "row-reward": jnp.zeros((128, 1)),
             "advantage": jnp.zeros((128, 1))}
    with tempfile.TemporaryDirectory() as d:
        log = SampleLog(res.program, Path(d), n + 10, 0, False, None)
        for i in range(10):   # warm-up: the gather's compilation
            log.take(i, batch, False)
        log.flush()
        t = time.perf_counter()
        for i in range(n):
            log.take(i, batch, False)
        log.flush()
        out = (time.perf_counter() - t) / n
        log.close(None)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", type=int, default=20)
    ap.add_argument("--long", type=int, default=420)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    texts = variants()
    per_step: dict[str, list[tuple[float, float]]] = {k: [] for k in texts}
    step_seconds(texts["without"], 1, 3)   # warm-up: imports and the first compilations
    names = list(texts)
    for r in range(args.repeats):
        for name in names[r % 3:] + names[:r % 3]:   # each variant first, second and last in turn
            text = texts[name]
            t = step_seconds(text, args.short, args.long)
            per_step[name].append(t)
            print(f"repeat {r + 1} {name:9s} {t[0] * 1e3:.3f} ms/step wall, {t[1] * 1e3:.3f} CPU", flush=True)
    for name in ("batch", "objective"):
        for i, what in ((0, "wall"), (1, "CPU")):
            ratios = [w[i] / wo[i] for w, wo in zip(per_step[name], per_step["without"])]
            print(f"{name} {what}: ratios {' '.join(f'{x:.3f}' for x in ratios)}; median with/without "
                  f"{statistics.median(ratios):.3f} (target <= 1.02)")
    host = host_seconds(texts["batch"])
    step = statistics.median(w for w, _ in per_step["without"])
    print(f"host work of a sampled step {host * 1e3:.3f} ms: {host / (10 * step):.4f} of the 10 steps between samples "
          f"({step * 1e3:.3f} ms each without)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
