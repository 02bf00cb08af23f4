"""Token streams at scale: windows per second from a >= 1 GB token file against numpy slicing a memmap of
it by hand, the resident memory while reading it, and the loader's share of a training step.

    .venv/bin/python benchmarks/tokens.py [--gb 1.0] [--dir /tmp] [--keep]

1. Windows/s: the `tokens` loader (seq 1024 and its next-token target,
   batch 32, i32) against the same windows cut by hand from `np.memmap`
   (`np.stack([mm[s:s + 1025] for s in starts])`, widened to int32 and split
   into input and target, as nanoGPT's get_batch does), the same starts,
   page cache warm for both. Bar: the loader takes at most 1.2x the by-hand
   time. Also at seq 8 (tiny windows, where per-batch overhead shows).
2. Peak resident memory (VmHWM, reset just before) of a child process that
   reads every window of the file once, in the loader's order, against its
   resident memory before (JAX imported). Bar: < 200 MB.
3. A training step of the fixture-sized model (tests/fixtures/tiny-generate.sx's
   width 64, batch 64, seq 8, vocab 256) reading the file through the loader
   with the read-ahead on: the share of the run the loop waited for data,
   and the thread's own reading time against the run. Target: < 5%.
Prints one line per figure; BENCHMARKS.md records them.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_file(path: Path, gb: float) -> int:
    """A raw uint16 token file of `gb` GB of ids below 256 (written in 64 MiB pieces); its token count."""
    n = int(gb * (1 << 30)) // 2
    if path.exists() and path.stat().st_size == 2 * n:
        return n
    rng = np.random.default_rng(0)
    piece = 32 << 20
    with open(path, "wb") as fh:
        for start in range(0, n, piece):
            rng.integers(0, 256, size=min(piece, n - start), dtype=np.uint16).tofile(fh)
    return n


def loader_for(path: Path, seq: int, batch: int, stride: int | None = None):
    from sexpgpu_lang.ir import LoaderIR
    from sexpgpu_lang.source import Span
    from sexpgpu_runtime.data.loaders import Loader
    args = {"path": str(path), "dtype": "uint16", "seq": seq, "vocab": 256}
    if stride:
        args["stride"] = stride
    fields = (("tokens", (seq,), "i32"), ("next", (seq,), "i32"))
    return Loader(LoaderIR("bench", ("tokens", args), batch, fields, Span(0, 0), "."), 0)


def windows_per_second(path: Path, seq: int, batch: int, batches: int) -> tuple[float, float]:
    """(loader seconds, by-hand seconds) for the same `batches` batches, the best of three each."""
    ld = loader_for(path, seq, batch)
    mm = np.memmap(path, dtype=np.uint16, mode="r")
    starts = [ld.indices(b * batch, batch) * seq for b in range(batches)]

    def by_hand():
        for s in starts:
            w = np.stack([mm[i:i + seq + 1] for i in s])
            x, y = w[:, :-1].astype(np.int32), w[:, 1:].astype(np.int32)
        return x, y

    def loader():
        for b in range(batches):
            out = ld.batch(b * batch)
        return out

    by_hand(), loader()   # the pages in the page cache for both
    best = {}
    for _ in range(3):
        for name, fn in (("hand", by_hand), ("loader", loader)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best.get(name, 1e9), time.perf_counter() - t0)
    ref = by_hand()
    got = loader_for(path, seq, batch).batch((batches - 1) * batch)
    assert np.array_equal(ref[0], got["tokens"]) and np.array_equal(ref[1], got["next"])   # the same windows
    return best["loader"], best["hand"]


CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.tokens import loader_for
from pathlib import Path
ld = loader_for(Path(sys.argv[2]), 1024, 64)
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")   # reset VmHWM: the peak from here on
t0 = time.perf_counter()
for b in range(ld.records // 64):
    ld.batch(b * 64)
print(before, status("VmHWM"), ld.records, time.perf_counter() - t0)
"""


def peak_rss(path: Path) -> tuple[int, int, int, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(path)], capture_output=True, text=True, check=True)
    before, peak, records, seconds = out.stdout.split()
    return int(before), int(peak), int(records), float(seconds)


RUN = """(def vocab 256)
(def seq 8)
(def dim 64)
(loader train
  :source (tokens "DATA" :dtype :uint16 :seq seq :vocab vocab)
  :batch 64
  :fields (:tokens [seq] :i32 :next [seq] :i32))
(defmodel lm
  :params (:embed (normal [vocab dim] :std 0.1)
           :hidden (normal [dim dim] :std 0.1)
           :out (normal [dim vocab] :std 0.1))
  :apply (lambda (self x)
           (matmul (relu (matmul (take (getf self :embed) x :axis 0) (getf self :hidden))) (getf self :out))))
(model lm)
(objective (lambda (batch ctx) (mean (cross-entropy (model (field batch :tokens)) (field batch :next)))))
(run :loader train :steps STEPS :optimizer (adam :lr 1e-3) :log (:every 100000))
"""


def step_share(path: Path, steps: int, run_dir: Path) -> dict:
    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions, train
    text = RUN.replace("DATA", str(path)).replace("STEPS", str(steps))
    res = analyze(text, str(run_dir / "run.sx"))
    assert res.program is not None, [d.message for d in res.diagnostics]
    short = train(res.program, RunOptions(steps=20, run_dir=run_dir / "warm", quiet=True))   # compile and warm
    full = train(res.program, RunOptions(steps=steps, run_dir=run_dir / "full", quiet=True))
    steady = max(full.seconds - short.seconds, 1e-9)   # the compile-and-first-steps part taken out
    data = full.data
    return {"steps": steps, "seconds": full.seconds, "step_ms": 1000 * steady / (steps - 20),
            "wait_share": data.wait_s / full.seconds, "read_share": data.read_s / full.seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--keep", action="store_true", help="keep the token file for the next run")
    ap.add_argument("--steps", type=int, default=500)
    a = ap.parse_args()
    path = a.dir / f"sexpgpu-bench-tokens-{a.gb:g}gb.bin"
    t0 = time.perf_counter()
    n = make_file(path, a.gb)
    print(f"token file: {path} ({path.stat().st_size / 1e9:.2f} GB, {n:,} uint16 ids), made in {time.perf_counter() - t0:.1f} s")
    try:
        for seq, batch, batches in ((1024, 32, 300), (8, 64, 2000)):
            ours, hand = windows_per_second(path, seq, batch, batches)
            w = batch * batches
            print(f"windows/s, seq {seq} batch {batch}: loader {w / ours:,.0f}, by hand {w / hand:,.0f}; "
                  f"loader/by-hand time {ours / hand:.2f}x (bar <= 1.2x)")
        before, peak, records, seconds = peak_rss(path)
        print(f"reading all {records:,} windows of 1025 once ({seconds:.1f} s): peak RSS {peak / 1e6:.0f} MB "
              f"(before reading {before / 1e6:.0f} MB; bar < 200 MB)")
        with tempfile.TemporaryDirectory() as d:
            s = step_share(path, a.steps, Path(d))
        print(f"training step (width 64, batch 64, seq 8, vocab 256), {s['steps']} steps in {s['seconds']:.1f} s, "
              f"{s['step_ms']:.2f} ms a step: loop waited for data {100 * s['wait_share']:.2f}% of the run, "
              f"the read-ahead thread read for {100 * s['read_share']:.2f}% of it (target < 5%)")
    finally:
        if not a.keep:
            path.unlink()


if __name__ == "__main__":
    main()
