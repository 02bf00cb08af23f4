"""Benchmark: the time to the first step, a fresh process each, against the hand-written JAX script.

Each side is one fresh Python process that trains one step of the tiny-generate fixture and ends:
`sexpgpu` checks the file and runs `train` (benchmarks/tiny_generate.py `sexpgpu(1)`); `hand` is
the same step written by hand in JAX and optax (`reference(1)`: four jitted graphs). Both with
JAX's persistent compilation cache, **cold** (a new empty directory each process) and **warm** (a
directory an earlier process of the same side filled): sexpgpu's through `SEXPGPU_COMPILE_CACHE`,
the hand script's through JAX's own `JAX_COMPILATION_CACHE_DIR` (every graph cached, as
compile_cache.py configures sexpgpu's), and Python's bytecode cache on for both (`one`). Measured: each process's CPU time (user + system, its
threads included: `resource.getrusage(RUSAGE_CHILDREN)`), and wall time; the processes alternate
(sexpgpu, hand, sexpgpu ...); the figure is the median over the rounds of sexpgpu's over the
hand script's next to it. Prints the load average before and after.

    .venv/bin/python benchmarks/first_step.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SIDES = {
    "sexpgpu": "from benchmarks.tiny_generate import sexpgpu; sexpgpu(1)",
    "hand": "from benchmarks.tiny_generate import reference; reference(1)",
}


def one(side: str, cache: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one fresh process of `side`, its compilation cache at `cache`."""
    env = dict(os.environ, SEXPGPU_COMPILE_CACHE=str(cache), JAX_COMPILATION_CACHE_DIR=str(cache),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    # Python's own bytecode cache on, as an installed package has it (pip compiles a wheel's modules):
    # with PYTHONDONTWRITEBYTECODE (set on the development machine) every process would compile
    # sexpgpu's ~130 modules from source again (about 0.2 s of CPU), which the hand script's
    # dependencies, installed with their bytecode, never do.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", SIDES[side]], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as d:
        warm = {s: Path(d) / f"warm-{s}" for s in SIDES}
        for s in SIDES:
            one(s, warm[s])   # fills the warm caches
        for kind in ("cold", "warm"):
            t: dict[str, list[tuple[float, float]]] = {s: [] for s in SIDES}
            for r in range(a.rounds):
                for s in SIDES:
                    cache = Path(d) / f"cold-{s}-{r}" if kind == "cold" else warm[s]
                    t[s].append(one(s, cache))
            cpu = statistics.median(x[0] / y[0] for x, y in zip(t["sexpgpu"], t["hand"]))
            wall = statistics.median(x[1] / y[1] for x, y in zip(t["sexpgpu"], t["hand"]))
            med = {s: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for s, v in t.items()}
            print(f"first step, cache {kind}: sexpgpu {med['sexpgpu'][0]:5.2f} s CPU ({med['sexpgpu'][1]:5.2f} s wall)  "
                  f"hand {med['hand'][0]:5.2f} s CPU ({med['hand'][1]:5.2f} s wall)  ratio {cpu:4.2f}x CPU, "
                  f"{wall:4.2f}x wall (median of {a.rounds}); target <= 1.15x: {'met' if cpu <= 1.15 else 'MISSED'}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
