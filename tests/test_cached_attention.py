"""The standard library's cached attention (prelude.sx: `cache-write`, `cached-attention`,
`llama-block-cached`): a prefill of the prompt, then one position per call, gives the full forward's
outputs at every position (to 1e-5 in f32), with grouped-query heads and rotary positions."""
from __future__ import annotations

import numpy as np

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax
import jax.numpy as jnp

from helpers import lowered_expression, types_of

B, T, S, D, N, K, H, F, P = 2, 7, 9, 16, 4, 2, 8, 32, 3
FULL = "(llama-block x (iota [T]) attn-norm wq wk wv wo mlp-norm w-gate w-up w-down)"
STEP = "(llama-block-cached x pos k-cache v-cache attn-norm wq wk wv wo mlp-norm w-gate w-up w-down)"


def compiled(text: str, env: dict):
    e, fn = lowered_expression(text.replace("[T]", f"[{T}]"), types_of(env))
    return e, jax.jit(fn)


def weights():
    rng = np.random.default_rng(0)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    return {"attn-norm": 1 + w(D), "wq": w(D, N, H), "wk": w(D, K, H), "wv": w(D, K, H), "wo": w(N, H, D),
            "mlp-norm": 1 + w(D), "w-gate": w(D, F), "w-up": w(D, F), "w-down": w(F, D)}, w(B, T, D)


def test_prefill_then_one_position_per_call_equals_the_full_forward():
    ws, x = weights()
    _, full = compiled(FULL, {**ws, "x": x})
    want = np.asarray(full({**ws, "x": jnp.asarray(x)}))
    zeros = np.zeros((B, S, K, H), np.float32)
    prefill_env = {**ws, "x": x[:, :P], "pos": np.int32(0), "k-cache": zeros, "v-cache": zeros}
    e, prefill = compiled(STEP, prefill_env)
    assert e.type.show() == f"(:h [{B} {P} {D}] f32 :k [{B} {S} {K} {H}] f32 :v [{B} {S} {K} {H}] f32)"
    out = prefill({k: jnp.asarray(v) for k, v in prefill_env.items()})
    got = [np.asarray(out["h"])]
    _, step = compiled(STEP, {**prefill_env, "x": x[:, :1]})
    k, v = out["k"], out["v"]
    for p in range(P, T):
        out = step({**{n: jnp.asarray(a) for n, a in ws.items()}, "x": jnp.asarray(x[:, p:p + 1]),
                    "pos": jnp.asarray(p, jnp.int32), "k-cache": k, "v-cache": v})
        k, v = out["k"], out["v"]
        got.append(np.asarray(out["h"]))
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=1e-5, atol=1e-5)
    # the cache holds each position's key once, the positions not yet written still zero
    assert np.all(np.asarray(k)[:, T:] == 0) and np.all(np.asarray(k)[:, :T] != 0)


def test_transformer_block_cached_equals_transformer_block():
    rng = np.random.default_rng(1)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    hk = 4
    ws = {"ln1-gain": 1 + w(D), "ln1-bias": w(D), "wq": w(D, N, hk), "wk": w(D, N, hk), "wv": w(D, N, hk),
          "wo": w(N, hk, D), "ln2-gain": 1 + w(D), "ln2-bias": w(D), "w1": w(D, F), "b1": w(F), "w2": w(F, D), "b2": w(D)}
    names = "ln1-gain ln1-bias wq wk wv wo ln2-gain ln2-bias w1 b1 w2 b2"
    x = w(B, T, D)
    _, full = compiled(f"(transformer-block x {names})", {**ws, "x": x})
    want = np.asarray(full({**ws, "x": jnp.asarray(x)}))
    zeros = np.zeros((B, S, N, hk), np.float32)
    env = {**ws, "x": x[:, :1], "pos": np.int32(0), "k-cache": zeros, "v-cache": zeros}
    _, step = compiled(f"(transformer-block-cached x pos k-cache v-cache {names})", env)
    k, v, got = jnp.asarray(zeros), jnp.asarray(zeros), []
    for p in range(T):   # no prefill: one position per call from the start
        out = step({**{n: jnp.asarray(a) for n, a in ws.items()}, "x": jnp.asarray(x[:, p:p + 1]),
                    "pos": jnp.asarray(p, jnp.int32), "k-cache": k, "v-cache": v})
        k, v = out["k"], out["v"]
        got.append(np.asarray(out["h"]))
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=1e-5, atol=1e-5)
