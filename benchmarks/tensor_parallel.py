"""Benchmark: one decoding trip of a deep teacher split over 8 devices, FSDP against tensor parallel.

The teacher is tests/fixtures/hf/llama3.sx's (the one form's Llama block over its caches, `:decode`),
its sizes written out and its weights drawn (`teacher_text`): by default 16 layers, width 256, 8 query
and 8 KV heads, MLP 1024, vocabulary 1024, a batch of 8 rows. Its `prepare` is one trip: one new token
per row through `:decode` at a traced position, on caches of `seq` positions. That graph is compiled
twice on the same 8 devices, in this process, one after the other:

- **FSDP** (`--mesh data=8 --fsdp`): every parameter split along `data`, the batch too; each layer's
  weights are all-gathered to run one token.
- **tensor parallel** (`--mesh model=8`): attention split by heads, the MLP by width, the embedding and
  output by vocabulary (sexpgpu_lang.mesh.model_dim); the batch whole on every device; only
  activations are reduced.

For each: the collectives of one trip from the compiled HLO (sexpgpu_runtime/lowering/collectives.py:
bytes of their results on one device, each layer's scan body counted once a layer) and the best trip
time of `--repeats` calls. Prints both, their ratio, and whether TP moves fewer bytes than FSDP. Run it
with the CPU's fake devices:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 .venv/bin/python -m benchmarks.tensor_parallel
"""
from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf" / "llama3.sx"
#: The fixture's sizes as tests/test_tensor_parallel.py uses them (8 query heads over 2 KV heads).
SIZES = {"layers": 2, "width": 32, "heads": 8, "kv-heads": 2, "head-width": 4, "hidden": 64, "vocab": 96,
         "eps": 1e-5, "rope-base": 500000.0, "rope-factor": 8.0, "rope-low-freq-factor": 1.0,
         "rope-high-freq-factor": 4.0, "rope-original-positions": 16}

ONE_TRIP = """(prepare (lambda (batch ctx)
  (let* ((row (field batch :row))
         (zero (* 0 (sum (field batch :stride))))
         (cache (zeros [layers (axis-size row 0) seq kv-heads head-width]))
         (o (teacher :decode (slice row :axis 1 :start 0 :end 1) (+ zero 4) cache cache)))
    (list :logits (getf o :logits) :k (getf o :k) :v (getf o :v) :row row))))
"""


def teacher_text(batch: int | None = None, one_trip: bool = False, **sizes) -> str:
    """tests/fixtures/hf/llama3.sx with its sizes written out (SIZES, updated by `sizes`), its weights drawn
    from the seed rather than read, `:batch batch` when given, and with `one_trip` a `prepare` that is one
    decoding trip."""
    text = FIXTURE.read_text()
    for key, value in {**SIZES, **sizes}.items():
        text, n = re.subn(rf'\(def {key} \(checkpoint-config "llama3" :{key}\)\)', f"(def {key} {value})", text)
        if n != 1:
            raise ValueError(f"{FIXTURE} has no `(def {key} (checkpoint-config ...))`")
    text = text.replace('\n  :pretrained (:path "llama3" :names :llama))', ")")
    if batch is not None:
        text = text.replace(":batch 2\n", f":batch {batch}\n")
    if one_trip:
        start, end = text.index("(prepare "), text.index("(objective ")
        text = text[:start] + ONE_TRIP + "\n" + text[end:]
    return text


def measure(path: Path, data: int, model: int, fsdp: bool, repeats: int) -> dict:
    """Compile the run file's `prepare` (one trip) on a data x model mesh; its collectives and best time."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from benchmarks.hf_parity import sexpgpu_forward
    from sexpgpu_runtime.devices.sharding import DataParallel
    from sexpgpu_runtime.lowering.collectives import collectives, total_bytes
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lowering import Effects, run_phase
    _, program, trainable, frozen = sexpgpu_forward(path)
    dp = DataParallel(data, fsdp, model)
    params = dp.put_state({**trainable, **frozen})
    ld = program.loaders[program.run.loader]
    shape = dict(ld.batch_type().entries)["row"].shape
    rows = np.random.default_rng(0).integers(0, 96, (ld.batch, *shape[1:]), dtype=np.int32)
    batch = dp.put_batch({"row": rows, "stride": np.ones((ld.batch, 1), np.int32)}, stacked=False)
    ctx = dp.put_replicated({k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()})
    fn = jax.jit(lambda b, p, c: run_phase(program.prepare, [b, c], p, Effects(jax.random.key(0))))
    compiled = fn.lower(batch, params, ctx).compile()
    found = collectives(compiled.as_text())
    out = compiled(batch, params, ctx)
    jax.block_until_ready(out)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(batch, params, ctx))
        best = min(best, time.perf_counter() - t0)
    return {"collectives": found, "bytes": total_bytes(found), "seconds": best,
            "logits": np.asarray(out["logits"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    import jax
    import numpy as np
    if len(jax.devices()) < 8:
        raise SystemExit("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
    text = teacher_text(args.batch, True, layers=args.layers, width=args.width, heads=args.heads,
                        **{"kv-heads": args.heads, "head-width": args.width // args.heads, "hidden": args.hidden,
                           "vocab": args.vocab})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "teacher.sx"
        path.write_text(text)
        fsdp = measure(path, 8, 1, True, args.repeats)
        tp = measure(path, 1, 8, False, args.repeats)
    same = float(np.abs(fsdp["logits"] - tp["logits"]).max())
    mib = lambda b: f"{b / 2**20:.2f} MiB"   # noqa: E731
    print(f"teacher: {args.layers} layers, width {args.width}, {args.heads} heads, MLP {args.hidden}, "
          f"vocabulary {args.vocab}, batch {args.batch}; one decoding trip on 8 {jax.devices()[0].platform} devices")
    for name, r in (("FSDP data=8", fsdp), ("TP model=8", tp)):
        kinds = ", ".join(f"{k} x{v['count']} {mib(v['bytes'])}" for k, v in r["collectives"].items()) or "none"
        print(f"  {name:<12} {mib(r['bytes']):>10} moved per trip ({kinds}); best trip {r['seconds'] * 1e3:.2f} ms")
    ratio = fsdp["bytes"] / max(tp["bytes"], 1)
    print(f"bytes per trip FSDP / TP: {ratio:.1f}x; trip time FSDP / TP: {fsdp['seconds'] / tp['seconds']:.2f}x; "
          f"largest logit difference {same:.2e}")
    ok = tp["bytes"] < fsdp["bytes"]
    print("TP moves fewer bytes per trip than FSDP: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
