"""Benchmark: the step time with each step shown when it ends (the loop one step ahead of the device)
against the loop eight steps ahead, as a ratio, in one process.

The loop (sexpgpu_runtime/run/loop.py) queues step N, then waits for step N - `STEPS_AHEAD` to end,
so that each metrics row and the progress bar come at most one step late; eight ahead, rows come in
bursts up to eight steps late. The same run file (tests/fixtures/grpo-by-hand.sx, examples/grpo.sx as it was written by
hand: a generator, 6 trips a step,
logged every step so that every step's row is read) is trained with `STEPS_AHEAD` 1 and 8,
alternately (each first as often), `--repeats` times each. The step time of one run is the time
between the host starting step `--short` and step `--long - 1` (their generators' first trip), over
the steps between: the host is then held back by the device (it waits for a step one or eight
behind), so that is the device's pace, without compilation or start-up. The ratio is the median
over the repeats of 1 ahead / 8 ahead, of the wall time (the target: at most 1.03) and of the
process's CPU time (every thread's). Prints each measurement and the ratios.

    .venv/bin/python benchmarks/live_output.py [--short 20 --long 420 --repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sexpgpu_runtime.run import loop  # noqa: E402
from samples import step_seconds as run_steps  # noqa: E402

GRPO = ROOT / "tests" / "fixtures" / "grpo-by-hand.sx"   # examples/grpo.sx as written by hand


def run_file() -> str:
    """grpo.sx logged every step, without `:samples`."""
    text = GRPO.read_text().replace(":log (:every 25)", ":log (:every 1)")
    start = text.index("     :samples (")
    end = text.index(")", text.index(":prompt", start)) + 1
    return text[:start].rstrip("\n") + text[end:]


def step_seconds(text: str, short: int, long: int, ahead: int) -> tuple[float, float]:
    """The mean step time of one run of `long` steps with the loop `ahead` steps ahead (samples.py's
    `step_seconds`: from the host starting step `short` to it starting step `long - 1`, once the host
    is held by the device): (wall seconds, the process's CPU seconds, all threads)."""
    loop.STEPS_AHEAD = ahead
    return run_steps(text, short, long)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", type=int, default=20)
    ap.add_argument("--long", type=int, default=420)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    text = run_file()
    per_step: dict[int, list[tuple[float, float]]] = {1: [], 8: []}
    step_seconds(text, 1, 3, 1)   # warm-up: imports and the first compilations
    for r in range(args.repeats):
        for ahead in ((1, 8) if r % 2 == 0 else (8, 1)):   # each first as often
            t = step_seconds(text, args.short, args.long, ahead)
            per_step[ahead].append(t)
            print(f"repeat {r + 1} {ahead} ahead {t[0] * 1e3:.3f} ms/step wall, {t[1] * 1e3:.3f} CPU", flush=True)
    for i, what in ((0, "wall"), (1, "CPU")):
        ratios = [a[i] / b[i] for a, b in zip(per_step[1], per_step[8])]
        print(f"{what}: ratios {' '.join(f'{x:.3f}' for x in ratios)}; median 1 ahead / 8 ahead "
              f"{statistics.median(ratios):.3f} (target <= 1.03)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
