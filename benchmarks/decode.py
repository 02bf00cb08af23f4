"""Benchmark: decoding inside the step with a KV cache, against a hand-written JAX decode step and against
recomputing the row every trip.

One run file (`run_file`), a two-layer Llama-style transformer (grouped-query heads, rotary
positions) with an `:apply` for the full forward and a `:decode` entry over a cache, and two
generators over it: `cached` prefills the prompt in `:init` and then feeds one position per trip
through `:decode`, writing the caches with `dynamic-update-slice`; `recompute` runs the full
forward over the row every trip. All in this process, on the same machine, one after the other:

- **trip**: one call of sexpgpu's jitted `generate.step` (the cached generator) against the same
  decode step written by hand in JAX (`lax.dynamic_update_slice` on the caches,
  `jax.nn.dot_product_attention`), on the same parameters and state; the ratio must be at most 1.1.
- **generation**: the whole generation of `GEN` tokens (`generate.init`, the trips,
  `generate.finish`) with the cache against recomputing the row each trip; at least 4x faster.

The hand-written step must write the tokens sexpgpu's does (checked); both generators decode
greedily, and the share of tokens they agree on is printed. Each pair of timings is the best of
several calls made in turn. Prints each time, the ratios and whether the bars hold.

    .venv/bin/python benchmarks/decode.py [--batch 8] [--width 128] [--repeats 20]
"""
from __future__ import annotations

import argparse
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

_BLOCK = """(defmodel NAME
  :params (:attn-norm (ones [width])
           :wq (normal [width heads head-width] :std 0.05)
           :wk (normal [width kv-heads head-width] :std 0.05)
           :wv (normal [width kv-heads head-width] :std 0.05)
           :wo (normal [heads head-width width] :std 0.05)
           :mlp-norm (ones [width])
           :w-gate (normal [width hidden] :std 0.05)
           :w-up (normal [width hidden] :std 0.05)
           :w-down (normal [hidden width] :std 0.05))
  :apply (lambda (self h)
           (llama-block h (iota [(axis-size h 1)]) (getf self :attn-norm) (getf self :wq) (getf self :wk)
                        (getf self :wv) (getf self :wo) (getf self :mlp-norm) (getf self :w-gate)
                        (getf self :w-up) (getf self :w-down)))
  :entries (:decode (lambda (self h pos k v)
                      (llama-block-cached h pos k v (getf self :attn-norm) (getf self :wq) (getf self :wk)
                                          (getf self :wv) (getf self :wo) (getf self :mlp-norm)
                                          (getf self :w-gate) (getf self :w-up) (getf self :w-down)))))
"""

_HEAD = """(def vocab 256)
(def width WIDTH)
(def heads 4)
(def kv-heads 2)
(def head-width (/ width heads))
(def hidden (* 2 width))
(def rows BATCH)
(def prompt PROMPT)
(def gen GEN)
(def total (+ prompt gen))

(loader text
  :source (stride-rows :vocab vocab :seq total)
  :batch rows
  :fields (:row [total] :i32 :stride [1] :i32))

"""

_LM = """(defmodel lm
  :params (:embed (normal [vocab width] :std 0.05) :b0 block0 :b1 block1
           :norm (ones [width]) :out (normal [width vocab] :std 0.05))
  :apply (lambda (self row)
           (let* ((h (block1 (block0 (embedding (getf self :embed) row)))))
             (matmul (rms-norm h (getf self :norm)) (getf self :out))))
  :entries (:decode (lambda (self tokens pos k0 v0 k1 v1)
                      (let* ((a (block0 :decode (embedding (getf self :embed) tokens) pos k0 v0))
                             (b (block1 :decode (getf a :h) pos k1 v1)))
                        (list :logits (matmul (rms-norm (getf b :h) (getf self :norm)) (getf self :out))
                              :k0 (getf a :k) :v0 (getf a :v) :k1 (getf b :k) :v1 (getf b :v))))))

(model lm)

"""

#: The cached generator: `:init` prefills the prompt's first prompt-1 positions; trip t feeds
#: column prompt-1+t and writes the greedy token at column prompt+t.
_CACHED = """(defgenerate :trips gen
  :init (lambda (batch ctx)
          (let* ((row (field batch :row))
                 (empty (zeros [rows total kv-heads head-width]))
                 (out (model :decode (slice row :axis 1 :start 0 :end (- prompt 1)) 0 empty empty empty empty)))
            (list :row row :k0 (getf out :k0) :v0 (getf out :v0) :k1 (getf out :k1) :v1 (getf out :v1))))
  :step (lambda (state trip ctx)
          (let* ((pos (+ (cast trip :i32) (- prompt 1)))
                 (row (getf state :row))
                 (out (model :decode (dynamic-slice row [0 pos] [rows 1]) pos
                             (getf state :k0) (getf state :v0) (getf state :k1) (getf state :v1))))
            (list :row (dynamic-update-slice row (argmax (getf out :logits)) [0 (+ pos 1)])
                  :k0 (getf out :k0) :v0 (getf out :v0) :k1 (getf out :k1) :v1 (getf out :v1))))
  :finish (lambda (state ctx) (list :sample (getf state :row))))
"""

#: The same greedy decoding, recomputing the whole row through `:apply` every trip.
_RECOMPUTE = """(defgenerate :trips gen
  :init (lambda (batch ctx) (list :row (field batch :row)))
  :step (lambda (state trip ctx)
          (let* ((pos (+ (cast trip :i32) (- prompt 1)))
                 (row (getf state :row))
                 (logits (dynamic-slice (model row) [0 pos 0] [rows 1 vocab])))
            (list :row (dynamic-update-slice row (argmax logits) [0 (+ pos 1)]))))
  :finish (lambda (state ctx) (list :sample (getf state :row))))
"""

_TAIL = """
(prepare (lambda (batch ctx)
  (let* ((s (field batch :sample)))
    (list :x (slice s :axis 1 :start 0 :end (- total 1)) :y (slice s :axis 1 :start 1 :end total)))))

(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))))

(run :loader text :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
"""


def run_file(cached: bool, batch: int = 8, width: int = 128, prompt: int = 64, gen: int = 64) -> str:
    """The benchmark's run file: the two-layer model and the cached (or recomputing) generator."""
    head = (_HEAD.replace("WIDTH", str(width)).replace("BATCH", str(batch)).replace("PROMPT", str(prompt))
            .replace("GEN", str(gen)))
    blocks = _BLOCK.replace("NAME", "block0") + "\n" + _BLOCK.replace("NAME", "block1") + "\n"
    return head + blocks + _LM + (_CACHED if cached else _RECOMPUTE) + _TAIL


def trainer_of(text: str, run_dir: Path):
    """A Trainer of `text` (checked), its graphs and its initial state."""
    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime.run.train import Trainer
    res = analyze(text, str(run_dir / "decode.sx"))
    assert res.program is not None, [d.message for d in res.diagnostics if d.is_error]
    trainer = Trainer(res.program, RunOptions(steps=1, run_dir=run_dir, quiet=True))
    return trainer, trainer.graphs, trainer.initial_state()


# --------------------------------------------------------------------------- the hand-written step


def _rms(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def _rotary(x, positions):
    h = x.shape[-1]
    x1, x2 = x[..., : h // 2], x[..., h // 2:]
    inv = jnp.power(10000.0, jnp.arange(h // 2, dtype=jnp.float32) * (-2.0 / h))
    ang = positions[:, None].astype(jnp.float32) * inv
    emb = jnp.concatenate([ang, ang], -1)[:, None, :]
    return x * jnp.cos(emb) + jnp.concatenate([-x2, x1], -1) * jnp.sin(emb)


def reference_step(p, row, caches, pos):
    """One greedy decode step by hand: the token at column pos through every layer (`p["b0"]`, `p["b1"]`
    ..., one k and one v cache each) over the caches (`lax.dynamic_update_slice` at pos), the argmax
    written at pos + 1. (row, caches)."""
    z = jnp.zeros((), jnp.int32)   # under x64 a Python 0 is i64; JAX wants the starts of one dtype
    tok = lax.dynamic_slice(row, (z, pos), (row.shape[0], 1))
    h = p["embed"][tok]
    positions = pos + jnp.arange(1, dtype=jnp.int32)
    s = caches[0].shape[1]
    mask = (jnp.arange(s)[None, :] <= pos)[None, None]
    out = []
    for i in range(len(caches) // 2):
        b = p[f"b{i}"]
        a = _rms(h, b["attn-norm"])
        q = _rotary(jnp.einsum("btd,dnh->btnh", a, b["wq"]), positions)
        k = lax.dynamic_update_slice(caches[2 * i], _rotary(jnp.einsum("btd,dkh->btkh", a, b["wk"]), positions),
                                     (z, pos, z, z))
        v = lax.dynamic_update_slice(caches[2 * i + 1], jnp.einsum("btd,dkh->btkh", a, b["wv"]), (z, pos, z, z))
        h = h + jnp.einsum("btnh,nhd->btd", jax.nn.dot_product_attention(q, k, v, mask=mask), b["wo"])
        m = _rms(h, b["mlp-norm"])
        h = h + (jax.nn.silu(m @ b["w-gate"]) * (m @ b["w-up"])) @ b["w-down"]
        out += [k, v]
    logits = _rms(h, p["norm"]) @ p["out"]
    nxt = jnp.argmax(logits, -1).astype(jnp.int32)
    return lax.dynamic_update_slice(row, nxt, (z, pos + 1)), tuple(out)


# --------------------------------------------------------------------------- timing


def _pair(f, g, repeats: int) -> tuple[float, float]:
    """The best of `repeats` timed calls of `f` and of `g` (each blocks until its result is ready),
    called in turn (f, g, f, g ...) so that a load on the machine weighs on both alike; the best
    of several is timeit's advice on a shared machine."""
    f(), g()
    tf, tg = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        tf.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        g()
        tg.append(time.perf_counter() - t0)
    return min(tf), min(tg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    sizes = dict(batch=a.batch, width=a.width, prompt=a.prompt, gen=a.gen)
    with tempfile.TemporaryDirectory() as d:
        tc, gc, sc = trainer_of(run_file(True, **sizes), Path(d) / "c")
        tr, gr, sr = trainer_of(run_file(False, **sizes), Path(d) / "r")
        batch, rows, _ = tc.batches.host_group(0, 0, 0)
        params = {**sc.trainable, **sc.frozen}

        # one trip: sexpgpu's generate.step against the hand-written step, on the same state
        _, _, state = gc.gen_init_1(sc.trainable, sc.frozen, batch, rows)
        trip = jnp.asarray(a.prompt // 2, jnp.int64)
        pos = jnp.asarray(a.prompt - 1 + a.prompt // 2, jnp.int32)
        keys = ("k0", "v0", "k1", "v1")
        ref = jax.jit(reference_step)
        ref_out = ref(params, state["row"], tuple(state[k] for k in keys), pos)
        row, caches = state["row"], tuple(state[k] for k in keys)
        # generate.step donates its state: each timed call takes the state the last one returned (the
        # same trip, so the same work), and the first takes a copy, the reference keeping the original
        carry = {"s": jax.tree_util.tree_map(jnp.copy, state)}
        sx_out = gc.gen_step_1(sc.trainable, sc.frozen, carry["s"], trip, rows)
        assert np.array_equal(np.asarray(ref_out[0]), np.asarray(sx_out["row"])), "the steps write different tokens"
        carry["s"] = sx_out

        def sx_trip():
            carry["s"] = gc.gen_step_1(sc.trainable, sc.frozen, carry["s"], trip, rows)
            return jax.block_until_ready(carry["s"])
        t_sx, t_ref = _pair(sx_trip, lambda: jax.block_until_ready(ref(params, row, caches, pos)), a.repeats * 5)

        # the whole generation: cached against recomputing the row each trip
        def whole(g, s):
            return lambda: jax.block_until_ready(g.generate(s.trainable, s.frozen, batch, rows, stacked=False)[2])
        cached_tokens = np.asarray(whole(gc, sc)()["sample"])
        recomputed_tokens = np.asarray(whole(gr, sr)()["sample"])
        agree = float(np.mean(cached_tokens[:, a.prompt:] == recomputed_tokens[:, a.prompt:]))
        t_cached, t_recompute = _pair(whole(gc, sc), whole(gr, sr), a.repeats)

    trip_ratio = t_sx / t_ref
    speedup = t_recompute / t_cached
    print(f"model: 2 layers, width {a.width}, 4 heads over 2 key-value heads, batch {a.batch}, "
          f"prompt {a.prompt}, {a.gen} tokens; device {jax.devices()[0].platform}")
    print(f"one cached trip: sexpgpu {t_sx * 1e3:8.3f} ms  hand-written JAX {t_ref * 1e3:8.3f} ms  "
          f"ratio {trip_ratio:5.2f} (bar <= 1.1: {'ok' if trip_ratio <= 1.1 else 'MISSED'})")
    print(f"generation of {a.gen}: cached {t_cached * 1e3:8.1f} ms  recomputing {t_recompute * 1e3:8.1f} ms  "
          f"{speedup:5.2f}x faster (bar >= 4: {'ok' if speedup >= 4 else 'MISSED'}); "
          f"greedy tokens agree {agree:.3f}")


if __name__ == "__main__":
    main()
