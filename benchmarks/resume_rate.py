"""Benchmark: the steady steps/s after a resume against a fresh run's, in the same process.

The tiny-generate fixture (tests/fixtures/tiny-generate.sx), with a checkpoint every N steps. Each
round: a **fresh** run of N steps in a new run dir (it saves step N), then a **resume** of it to 2N
steps (it restores step N and trains N+1 ... 2N). Each run's steady rate is taken as its progress
line's is (`report.Throughput` notes when each step ended): from the end of its first step, which
holds the compiles, to the end of its last but one (the last ends inside the final checkpoint's
save), in CPU time of the process (`time.process_time`, the figure to compare on a loaded machine)
and in wall time. The figure is the median over the rounds
of the resume's rate over the fresh run's next to it. Goal: the resume's >= 0.90x. The compilation
cache is off (as in the test suite), so both runs compile every graph. Prints the load average
before and after.

    .venv/bin/python benchmarks/resume_rate.py [--rounds 5] [--steps 30]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["SEXPGPU_COMPILE_CACHE"] = "off"

FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"


def rated_runs():
    """Make every run's `Throughput` note when each step ended, on both clocks; returns the list each
    run's notes ([(step, wall s, CPU s)], in the order the steps ended) are appended to."""
    from sexpgpu_runtime.run import report
    made: list = []
    plain = report.Throughput

    class Noted(plain):
        def __init__(self, start, clock=time.perf_counter):
            super().__init__(start, clock)
            self.notes: list = []
            made.append(self.notes)

        def ended(self, done, tokens=None):
            super().ended(done, tokens)
            self.notes.append((done, time.perf_counter(), time.process_time()))

    report.Throughput = Noted
    return made


def steady(notes: list, clock: int) -> float:
    """Steps/s from the end of the run's first step to the end of its last but one (the last ends
    inside the final checkpoint's save), `clock` 1 wall, 2 CPU."""
    first, last = notes[0], notes[-2]
    return (last[0] - first[0]) / (last[clock] - first[clock])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30, help="N: the fresh run's steps; the resume trains N more")
    a = ap.parse_args()
    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime import train
    made = rated_runs()
    text = FIXTURE.read_text().replace(":log (:every 50))", f":log (:every 50)\n     :checkpoint (:every {a.steps}))")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rates: dict[str, list[tuple[float, float]]] = {"fresh": [], "resume": []}
    for _ in range(a.rounds):
        with tempfile.TemporaryDirectory() as d:
            program = analyze(text, str(Path(d) / "run.sx")).program
            for kind, steps, resume in (("fresh", a.steps, False), ("resume", 2 * a.steps, True)):
                result = train(program, RunOptions(steps=steps, run_dir=Path(d), quiet=True, resume=resume))
                assert result.start == (a.steps if resume else 0)
                rates[kind].append((steady(made[-1], 1), steady(made[-1], 2)))
    for i, clock in enumerate(("CPU", "wall")):
        j = 1 - i   # rates hold (wall, cpu)
        ratio = statistics.median(r[j] / f[j] for r, f in zip(rates["resume"], rates["fresh"]))
        fresh = statistics.median(f[j] for f in rates["fresh"])
        resumed = statistics.median(r[j] for r in rates["resume"])
        print(f"steady steps/s ({clock}): fresh {fresh:7.1f}  after a resume {resumed:7.1f}  ratio {ratio:5.2f}x "
              f"(median of {a.rounds}; goal >= 0.90x: {'met' if ratio >= 0.90 else 'MISSED'})")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
