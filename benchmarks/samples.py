"""Benchmark: the cost of `run`'s `:samples` (every 10 steps) as a ratio of the step time, in one process.

The same run file (examples/grpo.sx: a generator, 6 trips a step) is trained
with `:samples (:every 10 :rows 4 :text [:answer] :values [:row-reward
:advantage] :prompt 2)` and without `:samples`, alternately, `--repeats`
times each. The step time of one variant is the time of a long run minus
that of a short one, over the steps between (compilation and start-up cancel
out); the ratio is the median over the repeats of with / without. The target
is at most 1.02 (the gathered rows go to the host asynchronously: no step
waits for them). Prints each measurement and the ratio.

    .venv/bin/python benchmarks/samples.py [--short 20 --long 220 --repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sexpgpu_lang import analyze  # noqa: E402
from sexpgpu_runtime.run.train import RunOptions, train  # noqa: E402

GRPO = ROOT / "examples" / "grpo.sx"


def variants() -> dict[str, str]:
    """grpo.sx with `:samples` every 10 steps, and without `:samples`."""
    text = GRPO.read_text()
    start = text.index("     :samples (")
    end = text.index(")", text.index(":prompt", start)) + 1
    without = text[:start].rstrip("\n") + text[end:]
    with_ = text[:start] + "     :samples (:every 10 :rows 4 :text [:answer] :values [:row-reward :advantage] :prompt 2)" \
        + text[end:]
    return {"with samples": with_, "without": without}


def seconds(text: str, steps: int) -> float:
    """The training time of one run of `steps` steps in a fresh run dir (compilation included)."""
    res = analyze(text, str(GRPO))
    assert res.program is not None, [d.message for d in res.diagnostics]
    with tempfile.TemporaryDirectory() as d:
        out = train(res.program, RunOptions(steps=steps, run_dir=Path(d) / "run", quiet=True))
        if "samples" in text.split("(run", 1)[1]:
            assert (Path(d) / "run" / "samples.jsonl").stat().st_size > 0
        return out.seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", type=int, default=20)
    ap.add_argument("--long", type=int, default=220)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    texts = variants()
    per_step: dict[str, list[float]] = {k: [] for k in texts}
    seconds(texts["without"], 2)   # warm-up: imports and the first compilations
    for r in range(args.repeats):
        for name, text in texts.items():
            t = (seconds(text, args.long) - seconds(text, args.short)) / (args.long - args.short)
            per_step[name].append(t)
            print(f"repeat {r + 1} {name:13s} {t * 1e3:.3f} ms/step", flush=True)
    ratios = [w / wo for w, wo in zip(per_step["with samples"], per_step["without"])]
    ratio = statistics.median(ratios)
    print(f"ratios {' '.join(f'{x:.3f}' for x in ratios)}; median with/without {ratio:.3f} (target <= 1.02)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
