"""Benchmark: fuzz the front end with 100,000 mutated run files and print how many failed (goal 0).

Each input is one of our run files (`../shared/cases`, `examples/`,
`tests/fixtures`, `tests/cases`, the diagnostic records' examples) with one to four random edits
(`tests/test_fuzz_front_end.py` `mutate`: deleted, duplicated and stray
brackets, swapped tokens, truncations, random bytes and Unicode, deep
nesting). Every input is analyzed; every `--query-every`-th also gets every
editor query and the formatter (`exercise`), and the one after it is
analyzed with `read_files=True` (as `sexpgpu run` checks). An input fails when anything
raises. Failures are written, one file each, under `--keep DIR` so they can
become regression cases.

    .venv/bin/python benchmarks/fuzz.py [--n 100000] [--seed 0] [--jobs 2] [--query-every 10] [--keep DIR]

About 15 ms an input on one core of the development machine.
"""
from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_fuzz_front_end import exercise, mutate, seeds  # noqa: E402

from sexpgpu_lang import analyze  # noqa: E402


def chunk(args: tuple[int, int, int, int]) -> list[tuple[int, str, str]]:
    """Inputs `start` to `start + count` of run `seed`: the failures as (index, error, text)."""
    seed, start, count, query_every = args
    texts = seeds()
    out = []
    for i in range(start, start + count):
        rng = random.Random(f"{seed}-{i}")
        text = mutate(rng, rng.choice(texts), deep=rng.random() < 0.05)
        try:
            if i % query_every == 0:
                exercise(text, rng, offsets=3)
            elif i % query_every == 1:   # as `sexpgpu run` checks: `:pretrained` headers read
                analyze(text, "fuzz.sx", read_files=True)
            else:
                analyze(text, "fuzz.sx")
        except Exception:  # noqa: BLE001 - every exception is a front-end bug
            out.append((i, traceback.format_exc(limit=-3), text))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    ap.add_argument("--query-every", type=int, default=10)
    ap.add_argument("--keep", type=Path, default=None, metavar="DIR")
    a = ap.parse_args()
    size = 500
    work = [(a.seed, s, min(size, a.n - s), a.query_every) for s in range(0, a.n, size)]
    t0 = time.perf_counter()
    failures = []
    with multiprocessing.Pool(a.jobs) as pool:
        for done, part in enumerate(pool.imap_unordered(chunk, work), 1):
            failures += part
            print(f"\r{min(done * size, a.n)}/{a.n} inputs, {len(failures)} failed", end="", file=sys.stderr)
    print(file=sys.stderr)
    kinds: dict[str, int] = {}
    for i, tb, text in sorted(failures):
        last = tb.strip().splitlines()[-1]
        kinds[last] = kinds.get(last, 0) + 1
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            (a.keep / f"fuzz-{a.seed}-{i}.sx").write_text(text, encoding="utf-8", errors="surrogatepass")
            (a.keep / f"fuzz-{a.seed}-{i}.txt").write_text(tb, encoding="utf-8")
    for last, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  {last}")
    print(f"{a.n} inputs in {time.perf_counter() - t0:.0f} s: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
