"""Per-row positions and padding through the standard library (prelude.sx): a left-padded batch
decoded with the cached blocks (`pos` [B], the prefill at each row's `left-padded-start`, then each
row's own position per call) gives each row's outputs as that row decoded alone (scalar `pos`, no
padding); the uncached blocks with `padded-positions` give each real token's output as the row alone;
and the checker reports a `pos`, `positions` or padding mask of the wrong shape or dtype at its place."""
from __future__ import annotations

import numpy as np
import pytest

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax
import jax.numpy as jnp

from helpers import lowered_expression, types_of
from sexpgpu_lang.check import check_expression
from sexpgpu_lang.types import TensorType

B, P, S, D, N, K, H, F = 3, 5, 9, 16, 4, 2, 8, 32
LENGTHS = [5, 2, 3]          # each row's prompt: left-padded to P
TRIPS = 3

LLAMA = "attn-norm wq wk wv wo mlp-norm w-gate w-up w-down"
GPT2 = "eps ln1-gain ln1-bias wq bq wk bk wv bv wo bo ln2-gain ln2-bias w1 b1 w2 b2"


def compiled(text: str, env: dict):
    _, lowered = lowered_expression(text, types_of(env))
    fn = jax.jit(lowered)
    return lambda **vals: jax.tree.map(np.asarray, fn({k: jnp.asarray(v) for k, v in {**env, **vals}.items()}))


def llama_weights(seed=0):
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)   # noqa: E731
    return {"attn-norm": 1 + w(D), "wq": w(D, N, H), "wk": w(D, K, H), "wv": w(D, K, H), "wo": w(N, H, D),
            "mlp-norm": 1 + w(D), "w-gate": w(D, F), "w-up": w(D, F), "w-down": w(F, D)}


def gpt2_weights(seed=1):
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)   # noqa: E731
    return {"eps": np.float32(1e-5), "ln1-gain": 1 + w(D), "ln1-bias": w(D), "wq": w(D, N, H), "bq": w(N, H),
            "wk": w(D, N, H), "bk": w(N, H), "wv": w(D, N, H), "bv": w(N, H), "wo": w(N, H, D), "bo": w(D),
            "ln2-gain": 1 + w(D), "ln2-bias": w(D), "w1": w(D, F), "b1": w(F), "w2": w(F, D), "b2": w(D)}


def rows():
    """Each row's real inputs [L+TRIPS D], and the left-padded prompt batch [B P D] with its mask."""
    rng = np.random.default_rng(2)
    real = [rng.standard_normal((n + TRIPS, D)).astype(np.float32) for n in LENGTHS]
    x = np.full((B, P, D), 7.0, np.float32)          # the padding is not zeros: it must not matter
    mask = np.zeros((B, P), bool)
    for b, n in enumerate(LENGTHS):
        x[b, P - n:] = real[b][:n]
        mask[b, P - n:] = True
    return real, x, mask


@pytest.mark.parametrize("block,weights,kv", [("llama-block-cached", llama_weights, K),
                                              ("gpt2-block-cached", gpt2_weights, N)])
def test_a_left_padded_batch_decodes_each_row_as_if_alone(block, weights, kv):
    ws = weights()
    names = LLAMA if block.startswith("llama") else GPT2
    call = f"({block} x pos k-cache v-cache {names})"
    real, x, mask = rows()
    zeros = np.zeros((B, S, kv, H), np.float32)
    # the batch: the prefill at each row's first column's position (negative: padding), then a call a trip
    start = compiled("(left-padded-start mask)", {"mask": mask})()
    assert start.tolist() == [n - P for n in LENGTHS]
    prefill = compiled(call, {**ws, "x": x, "pos": start, "k-cache": zeros, "v-cache": zeros})
    trip = compiled(call, {**ws, "x": x[:, :1], "pos": start, "k-cache": zeros, "v-cache": zeros})
    out = prefill()
    got = [out["h"]]
    for t in range(TRIPS):
        step = np.stack([real[b][n + t] for b, n in enumerate(LENGTHS)])[:, None]
        out = trip(x=step, pos=np.asarray(LENGTHS, np.int32) + t, **{"k-cache": out["k"], "v-cache": out["v"]})
        got.append(out["h"])
    # each row alone: its prompt at position 0, scalar pos, no padding; then one position per call
    for b, n in enumerate(LENGTHS):
        one = np.zeros((1, S, kv, H), np.float32)
        alone_prefill = compiled(call, {**ws, "x": real[b][None, :n], "pos": np.int32(0), "k-cache": one,
                                        "v-cache": one})
        alone_trip = compiled(call, {**ws, "x": real[b][None, :1], "pos": np.int32(0), "k-cache": one,
                                     "v-cache": one})
        o = alone_prefill()
        np.testing.assert_allclose(got[0][b, P - n:], o["h"][0], rtol=1e-5, atol=1e-5)
        for t in range(TRIPS):
            o = alone_trip(x=real[b][None, n + t:n + t + 1], pos=np.int32(n + t),
                           **{"k-cache": o["k"], "v-cache": o["v"]})
            np.testing.assert_allclose(got[t + 1][b], o["h"][0], rtol=1e-5, atol=1e-5)
        # the row's cache holds its real positions only, first to last, as the row alone's does
        np.testing.assert_allclose(out["k"][b], o["k"][0], rtol=1e-5, atol=1e-5)
        assert np.all(out["k"][b, n + TRIPS:] == 0)


@pytest.mark.parametrize("block", ["llama-block", "qwen2-block", "gpt2-block-padded"])
def test_the_uncached_blocks_leave_padding_out(block):
    ws = llama_weights()
    if block == "gpt2-block-padded":
        ws = gpt2_weights()
        call = f"(gpt2-block-padded x positions {GPT2})"
    elif block == "qwen2-block":
        rng = np.random.default_rng(3)
        ws.update({"bq": rng.standard_normal((N, H)).astype(np.float32),
                   "bk": rng.standard_normal((K, H)).astype(np.float32),
                   "bv": rng.standard_normal((K, H)).astype(np.float32)})
        call = ("(qwen2-block x positions (rope-inv-freq 8 10000.0 1.0 1.0 4.0 0) 1e-6 attn-norm wq bq wk bk wv bv "
                "wo mlp-norm w-gate w-up w-down)")
    else:
        call = f"(llama-block x positions {LLAMA})"
    real, x, mask = rows()
    positions = compiled("(padded-positions mask)", {"mask": mask})()
    assert positions.tolist()[1] == [-1, -1, -1, 0, 1]
    got = compiled(call, {**ws, "x": x, "positions": positions})()
    assert np.isfinite(got).all()
    for b, n in enumerate(LENGTHS):
        alone = compiled(call, {**ws, "x": real[b][None, :n], "positions": np.arange(n, dtype=np.int32)})()
        np.testing.assert_allclose(got[b, P - n:], alone[0], rtol=1e-5, atol=1e-5)
    if block == "gpt2-block-padded":   # every row full: gpt2-block-eps's outputs
        full = compiled(f"(gpt2-block-eps x {GPT2})", {**ws, "x": x})()
        same = compiled(call, {**ws, "x": x, "positions": np.arange(P, dtype=np.int32)})()
        np.testing.assert_allclose(same, full, rtol=1e-5, atol=1e-5)


def test_padded_positions_of_a_right_padded_mask_count_from_the_first_token():
    got = compiled("(padded-positions mask)", {"mask": np.array([[1, 1, 0], [1, 1, 1]], np.int32)})()
    assert got.tolist() == [[0, 1, -1], [0, 1, 2]]


def test_cache_write_drops_padding_and_writes_each_row_at_its_own_position():
    cache = np.zeros((2, 4, 1, 1), np.float32)
    new = np.arange(1, 7, dtype=np.float32).reshape(2, 3, 1, 1)
    got = compiled("(cache-write cache new pos)", {"cache": cache, "new": new, "pos": np.array([-1, 2], np.int32)})()
    assert got[..., 0, 0].tolist() == [[2, 3, 0, 0], [0, 0, 4, 5]]   # row 1's third entry is past S: dropped
    scalar = compiled("(cache-write cache new pos)", {"cache": cache, "new": new, "pos": np.int32(1)})()
    assert scalar[..., 0, 0].tolist() == [[0, 1, 2, 3], [0, 4, 5, 6]]


def _diag(text, env):
    types = {k: TensorType(s, d) for k, (s, d) in env.items()}
    _, diags = check_expression(text, types)
    return [(d.code, text[d.span.start:d.span.end], d.message) for d in diags if d.is_error]


def test_the_checker_reports_a_pos_positions_or_mask_of_the_wrong_shape_or_dtype_at_its_place():
    x = ((2, 1, 16), "f32")
    cache = ((2, 9, 2, 8), "f32")
    w = {"attn-norm": ((16,), "f32"), "wq": ((16, 4, 8), "f32"), "wk": ((16, 2, 8), "f32"),
         "wv": ((16, 2, 8), "f32"), "wo": ((4, 8, 16), "f32"), "mlp-norm": ((16,), "f32"),
         "w-gate": ((16, 32), "f32"), "w-up": ((16, 32), "f32"), "w-down": ((32, 16), "f32")}
    call = f"(llama-block-cached x p k-cache v-cache {LLAMA})"
    env = {**w, "x": x, "k-cache": cache, "v-cache": cache}
    assert _diag(call, {**env, "p": ((2,), "i32")}) == []                       # one per row
    assert _diag(call, {**env, "p": ((), "i64")}) == []                         # every row the same
    [(code, at, msg)] = _diag(call, {**env, "p": ((2, 1), "i32")})
    assert (code, at) == ("E-SHAPE-005", "p") and "[2] one per row" in msg and "[2 1] i32" in msg
    [(code, at, msg)] = _diag(call, {**env, "p": ((3,), "i32")})
    assert (code, at) == ("E-SHAPE-005", "p")
    [(code, at, _)] = _diag(call, {**env, "p": ((2,), "f32")})
    assert (code, at) == ("E-TYPE-002", "p")
    assert _diag("(padded-positions m)", {"m": ((2, 5), "f32")}) == []   # any dtype: nonzero is real
    [(code, at, msg)] = _diag("(left-padded-start m)", {"m": ((5,), "bool")})
    assert (code, at) == ("E-SHAPE-005", "m") and "[B T]" in msg
    [(code, at, msg)] = _diag(f"(llama-block y q {LLAMA})", {**w, "y": ((2, 5, 16), "f32"), "q": ((2, 4), "i32")})
    assert (code, at) == ("E-SHAPE-005", "q") and "[5] or [2 5]" in msg


def test_transformer_block_padded_is_transformer_block_on_each_row_s_real_tokens():
    ws = {k: v for k, v in gpt2_weights().items() if k not in ("eps", "bq", "bk", "bv", "bo")}
    names = "ln1-gain ln1-bias wq wk wv wo ln2-gain ln2-bias w1 b1 w2 b2"
    real, x, mask = rows()
    positions = compiled("(padded-positions mask)", {"mask": mask})()
    got = compiled(f"(transformer-block-padded x positions {names})", {**ws, "x": x, "positions": positions})()
    for b, n in enumerate(LENGTHS):
        alone = compiled(f"(transformer-block x {names})", {**ws, "x": real[b][None, :n]})()
        np.testing.assert_allclose(got[b, P - n:], alone[0], rtol=1e-5, atol=1e-5)
