"""The command line: `python -m tests.differential [--n N] [--ill N] [--phases N] ...` from the
repository root; prints the tallies and the disagreements, exits 1 when there is one.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sexpgpu_lang.ops import REGISTRY

from . import __doc__ as PACKAGE_DOC
from .judge import run, run_phases


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.differential", description=PACKAGE_DOC.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="random compositions (default 3000)")
    ap.add_argument("--ill", type=int, default=2000, help="ill-typed calls, each op in turn (default 2000)")
    ap.add_argument("--phases", type=int, default=1000, help="whole run files, `:step` and `objective` (default 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--phase-depth", type=int, default=2, help="depth of the compositions in run files (default 2)")
    ap.add_argument("--keep", type=Path, default=None, metavar="DIR")
    a = ap.parse_args()
    progress = lambda s: print(f"\r{s}", end="", file=sys.stderr)  # noqa: E731
    bad = 0
    if a.n or a.ill:
        t0 = time.perf_counter()
        tally = run(a.n, a.ill, a.seed, a.depth, progress=progress)
        print(file=sys.stderr)
        for text, env, why in tally.disagreements[:30]:
            names = " ".join(f"{k}:{list(t.shape)}{t.dtype}" for k, t in env.items())
            print(f"  {text}\n      with {names}\n      {why}")
        if a.keep and tally.disagreements:
            a.keep.mkdir(parents=True, exist_ok=True)
            with open(a.keep / f"differential-{a.seed}.txt", "w", encoding="utf-8") as fh:
                for text, env, why in tally.disagreements:
                    fh.write(f"{text}\t{ {k: (list(t.shape), t.dtype) for k, t in env.items()} }\t{why}\n")
        uncovered = sorted(set(REGISTRY) - set(tally.covered))
        print(f"{tally.programs} programs ({a.n} random compositions, {a.ill} ill-typed calls; seed {a.seed}) "
              f"in {time.perf_counter() - t0:.0f} s; each op's calls rejected at least "
              f"{min(tally.covered[o] for o in REGISTRY)} times" + (f"; never rejected: {uncovered}" if uncovered else ""))
        print(tally.report())
        bad += len(tally.disagreements)
    if a.phases:
        t0 = time.perf_counter()
        pt = run_phases(a.phases, a.seed, a.phase_depth, progress=progress)
        print(file=sys.stderr)
        for text, why in pt.disagreements[:10]:
            print(f"{text}\n  {why}\n")
        if a.keep and pt.disagreements:
            a.keep.mkdir(parents=True, exist_ok=True)
            for i, (text, why) in enumerate(pt.disagreements):
                (a.keep / f"phases-{a.seed}-{i}.sx").write_text(f";; {why}\n{text}", encoding="utf-8")
        print(f"whole run files (seed {a.seed}, depth {a.phase_depth}) in {time.perf_counter() - t0:.0f} s")
        print(pt.report())
        bad += len(pt.disagreements)
