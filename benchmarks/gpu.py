"""GPU section of BENCHMARKS.md: bf16 MFU of a >= 100M-parameter training graph, and the trip loop.

One process, meant for one call of the `device` tool (benchmarks/gpu.sh runs it):

1. Writes a byte-level transformer run file built from the standard library's
   layers (`embedding`, `transformer-block`, `layer-norm`), `:precision :bf16`,
   adamw, reading a synthetic `.npz` written to a temporary directory (no
   download). Default: width 1024, 8 blocks, 16 heads of 64, MLP 4096, batch 32
   of 1024 tokens: about 101M parameters, counted from the checked program's
   `params` (asserted >= 100M unless --small).
2. Times steady-state steps of sexpgpu's real loop (`Trainer.fit`, through
   `run_all.SxLoop`, as the "training step" row does) in blocks, after a
   warm-up that compiles; the first block's time (compile included) is printed.
3. MFU = training FLOPs per step / step time / the device's dense bf16 peak.
   The FLOPs are given two ways: `explain(program)`'s static count of the
   `train` and `update` graphs (attention's T^2 terms and the backward pass
   included), and the standard 6 * N * tokens. The peak comes from a table
   keyed by `jax.devices()[0].device_kind` (datasheet figures); an unknown
   device (the CPU) prints FLOP/s only. A bf16 matmul measured in the same run
   gives a second, achievable ceiling.
4. Runs run_all's trip-loop comparison on the same device (`bench_trips` here:
   run_all's, with the generator state carried from call to call, since the
   trainer donates it on an accelerator): a host loop of 6 jitted generator
   steps, by hand and sexpgpu's `Graphs.trips`, against one `lax.fori_loop`.
5. Prints one table (and, with --json, writes the figures as JSON).

`--budget-s` bounds the timing loops (the warm-up and compilation excepted):
blocks stop once the budget's share is spent, so the whole script stays well
under 8 minutes on an H200. `--small` shrinks the model, batch and repetitions
so it runs on the CPU in under a minute (a smoke test; its MFU means nothing).

    .venv/bin/python benchmarks/gpu.py --small           # CPU smoke run
    JAX_PLATFORMS=cuda python3 benchmarks/gpu.py         # on the GPU (benchmarks/gpu.sh)
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# Dense bf16 peak FLOP/s (no sparsity), datasheet figures, by a substring of `device_kind`; first match wins.
PEAK_BF16 = [
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("A10G", 70e12),
    ("TPU v5p", 459e12),
    ("TPU v5 lite", 197e12),
    ("TPU v4", 275e12),
]


def peak_for(kind: str) -> float | None:
    """The dense bf16 peak of a device kind from PEAK_BF16, or None when the kind is not in the table."""
    for key, peak in PEAK_BF16:
        if key.lower() in kind.lower():
            return peak
    return None


def run_file(npz: Path, width: int, layers: int, heads: int, hidden: int, seq: int, batch: int) -> str:
    """The transformer run file: `layers` pre-norm blocks of the standard library, a final layer-norm and
    an output projection to 256 byte values; next-byte cross-entropy; bf16; adamw."""
    assert width % heads == 0, (width, heads)
    hw = width // heads
    std = 0.02
    blk = ("ln1-gain", "ln1-bias", "wq", "wk", "wv", "wo", "ln2-gain", "ln2-bias", "w1", "b1", "w2", "b2")
    shapes = {"ln1-gain": ("ones", "[width]"), "ln1-bias": ("zeros", "[width]"),
              "wq": ("normal", "[width heads head-width]"), "wk": ("normal", "[width heads head-width]"),
              "wv": ("normal", "[width heads head-width]"), "wo": ("normal", "[heads head-width width]"),
              "ln2-gain": ("ones", "[width]"), "ln2-bias": ("zeros", "[width]"),
              "w1": ("normal", "[width hidden]"), "b1": ("zeros", "[hidden]"),
              "w2": ("normal", "[hidden width]"), "b2": ("zeros", "[width]")}
    params = [f"(:embed (normal [256 width] :std {std})"]
    for i in range(layers):
        for n in blk:
            init, shape = shapes[n]
            params.append(f" :l{i}-{n} ({init} {shape}" + (f" :std {std})" if init == "normal" else ")"))
    params.append(" :lnf-gain (ones [width]) :lnf-bias (zeros [width])")
    params.append(f" :out (normal [width 256] :std {std}))")
    binds = ["(h0 (embedding (getf self :embed) x))"]
    for i in range(layers):
        args = " ".join(f"(getf self :l{i}-{n})" for n in blk)
        binds.append(f"(h{i + 1} (transformer-block h{i} {args}))")
    binds.append(f"(hf (layer-norm h{layers} (getf self :lnf-gain) (getf self :lnf-bias)))")
    nl = "\n           "
    return f""";; Written by benchmarks/gpu.py: a {layers}-block byte transformer from the standard library's layers.
(def seq {seq})
(def window {seq + 1})
(def width {width})
(def heads {heads})
(def head-width {hw})
(def hidden {hidden})

(loader synthetic
  :source (npz "{npz}")
  :batch {batch}
  :fields (:bytes [window] :i32))

(defmodel lm
  :params {nl.join(params)}
  :apply (lambda (self x)
           (let* ({(nl + '       ').join(binds)})
             (matmul hf (getf self :out)))))

(model lm)

(prepare (lambda (batch ctx)
  (let* ((b (field batch :bytes)))
    (list :x (slice b :axis 1 :start 0 :end seq)
          :y (slice b :axis 1 :start 1 :end window)))))

(objective (lambda (inputs ctx)
  (let* ((logits (model (getf inputs :x)))
         (loss (mean (cross-entropy logits (getf inputs :y)))))
    (metric :loss loss)
    loss)))

(run :loader synthetic
     :steps 1000000
     :seed 0
     :precision :bf16
     :optimizer (adamw :lr 3e-4 :weight-decay 0.01)
     :log (:every 1000000))
"""


def write_data(path: Path, records: int, window: int) -> None:
    """`records` windows of random bytes (as i32), the loader's one field `bytes`."""
    import numpy as np
    rng = np.random.default_rng(0)
    np.savez(path, bytes=rng.integers(0, 256, size=(records, window), dtype=np.int32))


def matmul_rate(n: int, reps: int) -> float:
    """Measured bf16 FLOP/s of one jitted n x n x n matmul (mean of `reps` after 3 warm-ups): an achievable
    ceiling to set beside the datasheet peak."""
    import jax
    import jax.numpy as jnp
    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (n, n), jnp.bfloat16)
    b = jax.random.normal(k2, (n, n), jnp.bfloat16)
    f = jax.jit(lambda a, b: a @ b)
    for _ in range(3):
        f(a, b).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(reps):
        out = f(a, b)
    out.block_until_ready()
    return 2.0 * n ** 3 * reps / (time.perf_counter() - t0)


def bench_trips(reps: int) -> list[tuple[str, str, str, str, str]]:
    """run_all's trip-loop rows (`run_all.trip_rows`) on this device."""
    import run_all
    return run_all.trip_rows(reps)


def fmt_rate(x: float) -> str:
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e11 else f"{x / 1e9:.2f} GFLOP/s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a CPU-sized smoke run (no 100M assertion)")
    ap.add_argument("--width", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--hidden", type=int, help="MLP width (default 4 x width)")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--blocks", type=int, help="timed blocks of steps (default 8; --small 3)")
    ap.add_argument("--block-s", type=float, default=None, help="target seconds per timed block (default 2; --small 0.5)")
    ap.add_argument("--trip-reps", type=int, help="repetitions of the trip-loop row (default 300; --small 50; 0 skips it)")
    ap.add_argument("--matmul", type=int, help="side of the calibration matmul (default 8192; --small 256; 0 skips it)")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="seconds the timing loops may take together, compilation excepted (default 240)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    a = ap.parse_args()
    s = a.small
    width = a.width or (64 if s else 1024)
    layers = a.layers or (2 if s else 8)
    heads = a.heads or (4 if s else 16)
    hidden = a.hidden or 4 * width
    batch = a.batch or (4 if s else 32)
    seq = a.seq or (64 if s else 1024)
    blocks = a.blocks or (3 if s else 8)
    block_s = a.block_s or (0.5 if s else 2.0)
    trip_reps = (50 if s else 300) if a.trip_reps is None else a.trip_reps
    mm = (256 if s else 8192) if a.matmul is None else a.matmul
    t_start = time.perf_counter()

    import jax
    import run_all
    from sexpgpu_lang import analyze
    from sexpgpu_lang.explain import explain, fmt_bytes
    dev = jax.devices()[0]
    kind = dev.device_kind
    print(f"device: {dev.platform} {kind} ({jax.device_count()} device(s)); jax {jax.__version__}", flush=True)

    tmp = tempfile.TemporaryDirectory()
    npz = Path(tmp.name) / "synthetic.npz"
    write_data(npz, max(8 * batch, 64), seq + 1)
    text = run_file(npz, width, layers, heads, hidden, seq, batch)
    sx_path = Path(tmp.name) / "gpu-transformer.sx"
    sx_path.write_text(text)
    res = analyze(text, str(sx_path))
    assert res.program is not None, [(d.code, d.message) for d in res.diagnostics]
    prog = res.program
    n_params = sum(math.prod(p.shape) for p in prog.params)
    n_embed = sum(math.prod(p.shape) for p in prog.params if p.path[-1] in ("embed", "out"))
    print(f"model: width {width}, {layers} blocks, {heads} heads, MLP {hidden}; {n_params:,} parameters "
          f"({n_params - n_embed:,} outside embed/out); batch {batch} x seq {seq}", flush=True)
    if not s:
        assert n_params >= 100_000_000, f"{n_params:,} parameters < 100M: raise --width or --layers"

    rep = explain(prog)
    flops_graph = {g["name"]: g["flops"] * g["calls_per_step"] for g in rep["graphs"]}
    flops_explain = rep["step"]["flops"]
    tokens = batch * seq
    flops_6nd = 6.0 * n_params * tokens
    print(f"explain: train {flops_graph.get('train', 0):.4g} + update {flops_graph.get('update', 0):.4g} "
          f"= {flops_explain:.4g} FLOP/step; 6*N*tokens = {flops_6nd:.4g}; "
          f"estimated peak memory {fmt_bytes(rep['memory']['peak'])}", flush=True)

    # --- steady-state steps of the real loop (run_all.SxLoop: Trainer.fit in blocks) ------------------
    t0 = time.perf_counter()
    loop = run_all.SxLoop(text, warm=1)    # analysis, init, compilation and the first step
    first = time.perf_counter() - t0
    warm = loop.block(2)                    # the second and third steps: nothing left to compile
    print(f"first step (compile included) {first:.1f} s; warm-up step {warm * 1000:.1f} ms", flush=True)
    traces_after_warm = dict(loop.tr.graphs.traces)
    per_block = max(1, int(block_s / max(warm, 1e-6)))
    times = []
    budget_loops = a.budget_s * (0.75 if trip_reps else 1.0)
    t_loop = time.perf_counter()
    for _ in range(blocks):
        times.append(loop.block(per_block))
        if time.perf_counter() - t_loop > budget_loops:
            print(f"  budget: stopped after {len(times)} blocks", flush=True)
            break
    retraced = {k: v for k, v in loop.tr.graphs.traces.items() if v != traces_after_warm.get(k)}
    loop.close()
    med, best = statistics.median(times), min(times)
    mem = None
    try:
        ms = dev.memory_stats() or {}
        mem = ms.get("peak_bytes_in_use")
    except Exception:   # the CPU client keeps no such statistics
        pass
    print(f"steps: {len(times)} blocks of {per_block}: median {med * 1000:.2f} ms/step, best {best * 1000:.2f}", flush=True)

    peak = peak_for(kind)
    measured_mm = matmul_rate(mm, 10 if not s else 3) if mm else None
    rate_explain, rate_6nd = flops_explain / med, flops_6nd / med

    # --- the trip loop on this device ------------------------------------------------------------------
    trip_rows = []
    if trip_reps and time.perf_counter() - t_loop > a.budget_s:
        print("  budget: spent; the trip loop is skipped", flush=True)
    elif trip_reps:
        trip_rows = bench_trips(trip_reps)
        for r in trip_rows:
            print("  " + " | ".join(r), flush=True)

    # --- the table ---------------------------------------------------------------------------------------
    def mfu(rate: float) -> str:
        parts = []
        if peak:
            parts.append(f"{rate / peak * 100:.1f}% of {peak / 1e12:.0f} TFLOP/s datasheet")
        if measured_mm:
            parts.append(f"{rate / measured_mm * 100:.1f}% of measured matmul")
        return "; ".join(parts) or "no peak known for this device: FLOP/s only"

    rows = [
        ("device", f"{kind} ({dev.platform}), jax {jax.__version__}"),
        ("model", f"{n_params / 1e6:.1f}M params (width {width}, {layers} blocks, {heads} heads, MLP {hidden}), bf16, adamw"),
        ("tokens per step", f"{tokens:,} (batch {batch} x seq {seq})"),
        ("first step (compile included)", f"{first:.1f} s"),
        ("step time, steady state", f"median {med * 1000:.2f} ms, best {best * 1000:.2f} ms "
                                    f"({len(times)} blocks of {per_block} steps, Trainer.fit)"),
        ("retraced after warm-up", ", ".join(f"{k} {v}" for k, v in retraced.items()) or "none"),
        ("FLOPs/step, explain (train+update)", f"{flops_explain:.4g} (train {flops_graph.get('train', 0):.4g}, "
                                               f"update {flops_graph.get('update', 0):.4g})"),
        ("FLOPs/step, 6*N*tokens", f"{flops_6nd:.4g}"),
        ("achieved, explain FLOPs", fmt_rate(rate_explain)),
        ("achieved, 6ND", fmt_rate(rate_6nd)),
        ("bf16 peak (datasheet)", f"{peak / 1e12:.0f} TFLOP/s" if peak else f"unknown for {kind!r}"),
        ("bf16 matmul measured", f"{fmt_rate(measured_mm)} ({mm}^3)" if measured_mm else "skipped"),
        ("MFU, explain FLOPs", mfu(rate_explain)),
        ("MFU, 6ND", mfu(rate_6nd)),
        ("device memory peak", fmt_bytes(mem) if mem else "not reported"),
    ]
    for name, value, ref, ratio, target in trip_rows:
        rows.append((name, f"{value} | ref {ref} | ratio {ratio} | target {target}"))
    total = time.perf_counter() - t_start
    rows.append(("total", f"{total:.0f} s"))
    w = max(len(r[0]) for r in rows)
    print()
    for name, value in rows:
        print(f"{name.ljust(w)} | {value}")
    if a.json:
        a.json.write_text(json.dumps({
            "device_kind": kind, "platform": dev.platform, "jax": jax.__version__, "params": n_params,
            "width": width, "layers": layers, "heads": heads, "hidden": hidden, "batch": batch, "seq": seq,
            "first_step_s": first, "step_s_median": med, "step_s_best": best, "block_times_s": times,
            "steps_per_block": per_block, "flops_explain": flops_explain, "flops_graphs": flops_graph,
            "flops_6nd": flops_6nd, "peak_bf16": peak, "matmul_measured": measured_mm,
            "mfu_explain": rate_explain / peak if peak else None, "mfu_6nd": rate_6nd / peak if peak else None,
            "device_memory_peak": mem, "trip_rows": trip_rows, "retraced": retraced, "total_s": total}, indent=1))
    tmp.cleanup()


if __name__ == "__main__":
    main()
