"""Benchmark: the generator's trip loop against one hand-written jitted `lax.fori_loop` over the trips.

Two models, each a Llama-style stack with a `:decode` entry over a KV cache (benchmarks/decode.py's
blocks), each generator writing one greedy token per trip:

- **decode-heavy**: 2 layers, width 64, batch 8, at 8, 32 and 128 trips: a trip's compute is
  the model's;
- **dispatch-bound**: 16 layers of width 16, batch 2, 32 trips: a trip's compute is small and each
  trip's call passes every parameter leaf (16 x 9) and every cache (32), so what a call costs
  the host shows.

Per case, on the same state and parameters: sexpgpu's trip loop (`Graphs.trips`, with the
trainer's stop check before every trip, as a step runs it: the host loop's in Python, the compiled
loop's in C where it builds, docs/runtime.md "The trip loop") against the same decode step written by
hand in JAX (decode.py's layers generalised to N) run as one jitted `lax.fori_loop`; the tokens
are checked equal. Each side is timed in blocks of calls, alternating (sexpgpu, reference,
sexpgpu, ...; each block about 1024 trips), in CPU time of the process (`time.process_time`: the host thread and XLA's); the
figure is the median over the rounds of sexpgpu's block over the reference's block next to it.
Prints the load average before and after.

    .venv/bin/python benchmarks/trips.py [--rounds 9] [--loop compiled|host] [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decode import _BLOCK, _TAIL, reference_step  # noqa: E402

_HEAD = """(def vocab 64)
(def width {width})
(def heads 4)
(def kv-heads 2)
(def head-width (/ width heads))
(def hidden (* 2 width))
(def rows {batch})
(def prompt {prompt})
(def gen {gen})
(def total (+ prompt gen))

(loader text
  :source (stride-rows :vocab vocab :seq total)
  :batch rows
  :fields (:row [total] :i32 :stride [1] :i32))

"""


def run_file(layers: int, width: int, batch: int, prompt: int, gen: int) -> str:
    """A run file of `layers` Llama blocks with a `:decode` entry and a generator that prefills the
    prompt's first prompt-1 positions in `:init`, then feeds column prompt-1+t at trip t."""
    blocks = "\n".join(_BLOCK.replace("NAME", f"block{i}") for i in range(layers))
    caches = " ".join(f"k{i} v{i}" for i in range(layers))
    decode = "(embedding (getf self :embed) tokens)"
    binds = []
    for i in range(layers):
        h = decode if i == 0 else f"(getf o{i - 1} :h)"
        binds.append(f"(o{i} (block{i} :decode {h} pos k{i} v{i}))")
    out_caches = " ".join(f":k{i} (getf o{i} :k) :v{i} (getf o{i} :v)" for i in range(layers))
    apply = "(embedding (getf self :embed) row)"
    for i in range(layers):
        apply = f"(block{i} {apply})"
    params = " ".join(f":b{i} block{i}" for i in range(layers))
    lm = f"""(defmodel lm
  :params (:embed (normal [vocab width] :std 0.05) {params}
           :norm (ones [width]) :out (normal [width vocab] :std 0.05))
  :apply (lambda (self row) (matmul (rms-norm {apply} (getf self :norm)) (getf self :out)))
  :entries (:decode (lambda (self tokens pos {caches})
                      (let* ({" ".join(binds)})
                        (list :logits (matmul (rms-norm (getf o{layers - 1} :h) (getf self :norm)) (getf self :out))
                              {out_caches})))))

(model lm)
"""
    empties = " ".join("empty" for _ in range(2 * layers))
    state_caches = " ".join(f":k{i} (getf out :k{i}) :v{i} (getf out :v{i})" for i in range(layers))
    state_args = " ".join(f"(getf state :k{i}) (getf state :v{i})" for i in range(layers))
    generator = f"""(defgenerate :trips gen
  :init (lambda (batch ctx)
          (let* ((row (field batch :row))
                 (empty (zeros [rows total kv-heads head-width]))
                 (out (model :decode (slice row :axis 1 :start 0 :end (- prompt 1)) 0 {empties})))
            (list :row row {state_caches})))
  :step (lambda (state trip ctx)
          (let* ((pos (+ (cast trip :i32) (- prompt 1)))
                 (row (getf state :row))
                 (out (model :decode (dynamic-slice row [0 pos] [rows 1]) pos {state_args})))
            (list :row (dynamic-update-slice row (argmax (getf out :logits)) [0 (+ pos 1)]) {state_caches})))
  :finish (lambda (state ctx) (list :sample (getf state :row))))
"""
    head = _HEAD.format(width=width, batch=batch, prompt=prompt, gen=gen)
    return head + blocks + "\n" + lm + generator + _TAIL


def reference_trips(prompt: int, trips: int):
    """The same greedy decoding by hand: `trips` decode steps (decode.py's `reference_step`, over as
    many blocks as the caches hold) in one jitted `lax.fori_loop`. f(params, row, caches) -> (row, caches)."""
    def loop(p, row, caches):
        def body(t, c):
            return reference_step(p, c[0], c[1], jnp.asarray(t, jnp.int32) + (prompt - 1))
        return lax.fori_loop(0, trips, body, (row, caches))
    return jax.jit(loop)


def trainer_of(text: str, run_dir: Path, loop: str | None):
    """A Trainer of `text` (checked), its initial state and its first group (numpy)."""
    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime.run.train import Trainer
    res = analyze(text, str(run_dir / "trips.sx"))
    assert res.program is not None, [d.message for d in res.diagnostics if d.is_error]
    opts = RunOptions(steps=1, run_dir=run_dir, quiet=True)
    if loop is not None:
        opts = RunOptions(steps=1, run_dir=run_dir, quiet=True, trip_loop=loop)
    tr = Trainer(res.program, opts)
    return tr, tr.initial_state()


def cpu_blocks(fns: dict, rounds: int, per: int) -> dict[str, list[float]]:
    """CPU seconds per call of each of `fns` (each returns a device value, waited for), in `rounds`
    rounds of one block of `per` calls each, the blocks alternating."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.process_time()
            for _ in range(per):
                out = fn()
            jax.block_until_ready(out)
            times[k].append((time.process_time() - t0) / per)
    return times


def case(name: str, layers: int, width: int, batch: int, prompt: int, trips: int, rounds: int, loop: str | None,
         target: float) -> None:
    with tempfile.TemporaryDirectory() as d:
        tr, st = trainer_of(run_file(layers, width, batch, prompt, trips), Path(d), loop)
        g = tr.graphs
        batch_np, rows, _ = tr.batches.host_group(0, 0, 0)
        _, rows, first = g.gen_init_1(st.trainable, st.frozen, batch_np, rows)
        first = jax.tree_util.tree_map(np.asarray, first)   # kept on the host: each call starts from it
        params = {**st.trainable, **st.frozen}
        ref = reference_trips(prompt, trips)
        keys = [k for i in range(layers) for k in (f"k{i}", f"v{i}")]
        hook = tr.looks.trip_hook(0)

        def sx():
            s = jax.device_put(first)   # a fresh copy: the trip loop may donate its state
            return g.trips(st.trainable, st.frozen, s, rows, False, hook)["row"]

        def hand():
            s = jax.device_put(first)
            return ref(params, s["row"], tuple(s[k] for k in keys))[0]

        a, b = np.asarray(sx()), np.asarray(hand())
        assert np.array_equal(a, b), f"{name}: sexpgpu's trips and the hand-written loop write different tokens"
        per = max(1, 1024 // trips)   # blocks of about 1024 trips a side: the shortest (8 trips) no longer 15 ms
        cpu_blocks({"sx": sx, "hand": hand}, 1, per)   # warm
        t = cpu_blocks({"sx": sx, "hand": hand}, rounds, per)
    ratio = statistics.median(x / y for x, y in zip(t["sx"], t["hand"]))
    sx_ms, hand_ms = statistics.median(t["sx"]) * 1e3, statistics.median(t["hand"]) * 1e3
    print(f"{name:<34} sexpgpu {sx_ms:8.3f} ms CPU  fori_loop {hand_ms:8.3f} ms CPU  "
          f"ratio {ratio:5.2f}x (median of {rounds}; per trip +{(sx_ms - hand_ms) / trips * 1e3:6.1f} us)"
          f"  target <= {target:.2f}x: {'met' if ratio <= target else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--loop", choices=("compiled", "host"), default=None,
                    help="sexpgpu's trip loop (RunOptions.trip_loop); default: the run's default")
    ap.add_argument("--quick", action="store_true", help="3 rounds, 8 and 32 trips only")
    a = ap.parse_args()
    rounds = 3 if a.quick else a.rounds
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"device {jax.devices()[0].platform}; loop {a.loop or 'default'}")
    for trips in ((8, 32) if a.quick else (8, 32, 128)):
        case(f"decode-heavy, 2x64, {trips} trips", 2, 64, 8, 8, trips, rounds, a.loop, 1.05)
    case("dispatch-bound, 16x16, 32 trips", 16, 16, 2, 4, 32, rounds, a.loop, 1.10)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
