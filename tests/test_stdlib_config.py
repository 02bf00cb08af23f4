"""The standard library's layers that take what a checkpoint's config.json varies (prelude.sx:
`layer-norm-eps`, `rms-norm-eps`, `rope-inv-freq` with Llama 3's and linear scaling, `rotary-freq`,
`gpt2-block-eps`, `gpt2-block-cached`, `llama-block-freq`, `qwen2-block`, `qwen3-block`, `olmo2-block`,
`rms-norm-heads` and their cached forms) against NumPy written here from Hugging Face's definitions
(`_compute_llama3_parameters`, `_compute_linear_scaling_rope_parameters`, LlamaRMSNorm, Qwen2's biased
q/k/v projections, Qwen3's q_norm/k_norm over each head, OLMo 2's over the whole projection and its
post-norms)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax.numpy as jnp

from test_stdlib_lm import (B, D, F, H, K, N, T, ref_attention, ref_layer_norm, ref_rms_norm, ref_swiglu, gelu,
                            rand, evaluated)


def ref_inv_freq(h, base, rope_type=None, factor=1.0, low=1.0, high=4.0, original=8192):
    """transformers' rope initialisation: default, `linear` (inv_freq / factor) and `llama3`."""
    inv = 1.0 / base ** (np.arange(0, h, 2, dtype=np.float64) / h)
    if rope_type == "linear":
        return inv / factor
    if rope_type != "llama3":
        return inv
    low_wl, high_wl = original / low, original / high
    wavelen = 2 * math.pi / inv
    llama = np.where(wavelen > low_wl, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return np.where(medium, smoothed, llama)


def ref_rotary_freq(x, positions, inv):
    freqs = positions[..., None].astype(np.float64) * inv
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb)[..., None, :], np.sin(emb)[..., None, :]
    h = x.shape[-1]
    x1, x2 = x[..., : h // 2], x[..., h // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


@pytest.mark.parametrize("args,kind", [
    ("500000.0 1.0 1.0 4.0 0", {}),                                              # no scaling
    ("500000.0 8.0 1.0 4.0 8192", dict(rope_type="llama3", factor=8.0, low=1.0, high=4.0, original=8192)),
    ("10000.0 32.0 1.0 4.0 64", dict(rope_type="llama3", factor=32.0, low=1.0, high=4.0, original=64)),
    ("10000.0 4.0 1.0 4.0 0", dict(rope_type="linear", factor=4.0)),
])
def test_rope_inv_freq_is_transformers(args, kind):
    h = 64
    _, out = evaluated(f"(rope-inv-freq {h} {args})")
    base = float(args.split()[0])
    np.testing.assert_allclose(out, ref_inv_freq(h, base, **kind), rtol=2e-6)


def test_rope_inv_freq_unscaled_is_rotary_bit_for_bit():
    """factor 1 and original 0 give `rotary`'s own frequencies: `rotary-freq` equals `rotary` exactly."""
    x, positions = rand(B, T, N, H), np.arange(T, dtype=np.int32)
    _, a = evaluated("(rotary x positions 500000.0)", x=x, positions=positions)
    _, b = evaluated(f"(rotary-freq x positions (rope-inv-freq {H} 500000.0 1.0 1.0 4.0 0))", x=x, positions=positions)
    assert np.array_equal(a, b)


def test_norms_take_their_epsilon():
    x, g, b = rand(B, T, D, scale=1e-3), rand(D, seed=1), rand(D, seed=2)
    _, out = evaluated("(rms-norm-eps x g 1e-5)", x=x, g=g)
    np.testing.assert_allclose(out, ref_rms_norm(x, g, eps=1e-5), rtol=1e-5, atol=1e-6)
    assert not np.allclose(out, ref_rms_norm(x, g, eps=1e-6), rtol=1e-3)
    _, out = evaluated("(layer-norm-eps x g b 1e-3)", x=x, g=g, b=b)
    np.testing.assert_allclose(out, ref_layer_norm(x, g, b, eps=1e-3), rtol=1e-5, atol=1e-6)


def _llama_params(biases: bool):
    p = dict(g1=rand(D, seed=1), wq=rand(D, N, H, seed=2, scale=0.3), wk=rand(D, K, H, seed=3, scale=0.3),
             wv=rand(D, K, H, seed=4), wo=rand(N, H, D, seed=5), g2=rand(D, seed=6), wg=rand(D, F, seed=7),
             wu=rand(D, F, seed=8), wd=rand(F, D, seed=9))
    if biases:
        p.update(bq=rand(N, H, seed=10), bk=rand(K, H, seed=11), bv=rand(K, H, seed=12))
    return p


def _ref_llama(x, positions, p, inv, eps):
    a = ref_rms_norm(x, p["g1"], eps)
    q = np.einsum("btd,dnh->btnh", a, p["wq"]) + p.get("bq", 0)
    k = np.einsum("btd,dkh->btkh", a, p["wk"]) + p.get("bk", 0)
    v = np.einsum("btd,dkh->btkh", a, p["wv"]) + p.get("bv", 0)
    q, k = ref_rotary_freq(q, positions, inv), ref_rotary_freq(k, positions, inv)
    h = x + np.einsum("btnh,nhd->btd", ref_attention(q, k, v), p["wo"])
    return h + ref_swiglu(ref_rms_norm(h, p["g2"], eps), p["wg"], p["wu"], p["wd"])


FREQ = f"(rope-inv-freq {H} 500000.0 8.0 1.0 4.0 16)"


def test_llama_block_freq_is_llama3():
    x, positions = rand(B, T, D), np.arange(T, dtype=np.int32)
    p = _llama_params(False)
    t, out = evaluated(f"(llama-block-freq x positions {FREQ} 1e-5 g1 wq wk wv wo g2 wg wu wd)", x=x, positions=positions, **p)
    assert (t.shape, t.dtype) == ((B, T, D), "f32")
    inv = ref_inv_freq(H, 500000.0, "llama3", 8.0, 1.0, 4.0, 16)
    np.testing.assert_allclose(out, _ref_llama(x, positions, p, inv, 1e-5), rtol=1e-4, atol=1e-4)


def test_qwen2_block_adds_qkv_biases():
    x, positions = rand(B, T, D), np.arange(T, dtype=np.int32)
    p = _llama_params(True)
    _, out = evaluated(f"(qwen2-block x positions {FREQ} 1e-6 g1 wq bq wk bk wv bv wo g2 wg wu wd)", x=x,
                 positions=positions, **p)
    inv = ref_inv_freq(H, 500000.0, "llama3", 8.0, 1.0, 4.0, 16)
    np.testing.assert_allclose(out, _ref_llama(x, positions, p, inv, 1e-6), rtol=1e-4, atol=1e-4)


def _qk_norm_params(whole: bool):
    """Qwen3's q/k norm gains [H] (each head's width), or OLMo 2's [N H] and [K H] (the whole projection)."""
    p = _llama_params(False)
    p.update(qn=rand(*((N, H) if whole else (H,)), seed=13) + 1, kn=rand(*((K, H) if whole else (H,)), seed=14) + 1)
    return p


def test_qwen3_block_norms_each_head_s_queries_and_keys():
    """Qwen3Attention: q_norm and k_norm (RMSNorm over head_dim, one gain for every head) before the rotary
    embedding; the head width H (6) is not D / N (8 / 4)."""
    x, positions = rand(B, T, D), np.arange(T, dtype=np.int32)
    p = _qk_norm_params(False)
    t, out = evaluated(f"(qwen3-block x positions {FREQ} 1e-6 g1 wq wk wv qn kn wo g2 wg wu wd)", x=x,
                 positions=positions, **p)
    assert (t.shape, t.dtype) == ((B, T, D), "f32") and N * H != D
    inv = ref_inv_freq(H, 500000.0, "llama3", 8.0, 1.0, 4.0, 16)
    a = ref_rms_norm(x, p["g1"], 1e-6)
    q = ref_rms_norm(np.einsum("btd,dnh->btnh", a, p["wq"]), p["qn"], 1e-6)
    k = ref_rms_norm(np.einsum("btd,dkh->btkh", a, p["wk"]), p["kn"], 1e-6)
    v = np.einsum("btd,dkh->btkh", a, p["wv"])
    q, k = ref_rotary_freq(q, positions, inv), ref_rotary_freq(k, positions, inv)
    h = x + np.einsum("btnh,nhd->btd", ref_attention(q, k, v), p["wo"])
    want = h + ref_swiglu(ref_rms_norm(h, p["g2"], 1e-6), p["wg"], p["wu"], p["wd"])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert not np.allclose(out, _ref_llama(x, positions, p, inv, 1e-6), rtol=1e-2)   # the norms matter


def test_rms_norm_heads_is_over_the_whole_projection():
    x, g = rand(B, T, N, H), rand(N, H, seed=1)
    _, out = evaluated("(rms-norm-heads x g 1e-5)", x=x, g=g)
    flat = ref_rms_norm(x.reshape(B, T, N * H), g.reshape(N * H), 1e-5).reshape(B, T, N, H)
    np.testing.assert_allclose(out, flat, rtol=1e-5, atol=1e-6)
    assert not np.allclose(out, ref_rms_norm(x, g, 1e-5), rtol=1e-3)   # not each head on its own


def _ref_olmo2(x, positions, p, inv, eps):
    """Olmo2DecoderLayer: no pre-norms; q_norm and k_norm over the whole projection; RMSNorms after the
    attention (post_attention_layernorm, `g1` here) and after the MLP (post_feedforward_layernorm, `g2`)."""
    def whole(v, g):
        n = v.shape[2] * v.shape[3]
        return ref_rms_norm(v.reshape(*v.shape[:2], n), g.reshape(n), eps).reshape(v.shape)
    q = whole(np.einsum("btd,dnh->btnh", x, p["wq"]), p["qn"])
    k = whole(np.einsum("btd,dkh->btkh", x, p["wk"]), p["kn"])
    v = np.einsum("btd,dkh->btkh", x, p["wv"])
    q, k = ref_rotary_freq(q, positions, inv), ref_rotary_freq(k, positions, inv)
    h = x + ref_rms_norm(np.einsum("btnh,nhd->btd", ref_attention(q, k, v), p["wo"]), p["g1"], eps)
    return h + ref_rms_norm(ref_swiglu(h, p["wg"], p["wu"], p["wd"]), p["g2"], eps)


def test_olmo2_block_norms_after_attention_and_the_mlp():
    x, positions = rand(B, T, D), np.arange(T, dtype=np.int32)
    p = _qk_norm_params(True)
    t, out = evaluated(f"(olmo2-block x positions {FREQ} 1e-5 wq wk wv qn kn wo g1 wg wu wd g2)", x=x,
                 positions=positions, **p)
    assert (t.shape, t.dtype) == ((B, T, D), "f32")
    inv = ref_inv_freq(H, 500000.0, "llama3", 8.0, 1.0, 4.0, 16)
    np.testing.assert_allclose(out, _ref_olmo2(x, positions, p, inv, 1e-5), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("block,params,w", [
    ("llama-block-freq", _llama_params(False), "g1 wq wk wv wo g2 wg wu wd"),
    ("qwen2-block", _llama_params(True), "g1 wq bq wk bk wv bv wo g2 wg wu wd"),
    ("qwen3-block", _qk_norm_params(False), "g1 wq wk wv qn kn wo g2 wg wu wd"),
    ("olmo2-block", _qk_norm_params(True), "wq wk wv qn kn wo g1 wg wu wd g2"),
])
def test_cached_blocks_equal_the_full_forward(block, params, w):
    """Prefill of 3 positions then one at a time: each output row equals the full block's."""
    S = T
    x, positions = rand(B, T, D), np.arange(T, dtype=np.int32)
    p = params
    _, full = evaluated(f"({block} x positions {FREQ} 1e-5 {w})", x=x, positions=positions, **p)
    kc, vc = np.zeros((B, S, K, H), np.float32), np.zeros((B, S, K, H), np.float32)
    rows = []
    for start, end in [(0, 3)] + [(i, i + 1) for i in range(3, T)]:
        xs = np.ascontiguousarray(x[:, start:end])
        _, h = evaluated(f"(getf ({block}-cached xs {start} kc vc {FREQ} 1e-5 {w}) :h)", xs=xs, kc=kc, vc=vc, **p)
        _, kc = evaluated(f"(getf ({block}-cached xs {start} kc vc {FREQ} 1e-5 {w}) :k)", xs=xs, kc=kc, vc=vc, **p)
        _, vc = evaluated(f"(getf ({block}-cached xs {start} kc vc {FREQ} 1e-5 {w}) :v)", xs=xs, kc=kc, vc=vc, **p)
        rows.append(h)
    np.testing.assert_allclose(np.concatenate(rows, 1), full, rtol=1e-4, atol=1e-4)


def _gpt2_params():
    return dict(g1=rand(D, seed=1), b1=rand(D, seed=2), wq=rand(D, N, H, seed=3, scale=0.3), bq=rand(N, H, seed=4),
                wk=rand(D, N, H, seed=5, scale=0.3), bk=rand(N, H, seed=6), wv=rand(D, N, H, seed=7),
                bv=rand(N, H, seed=8), wo=rand(N, H, D, seed=9), bo=rand(D, seed=10), g2=rand(D, seed=11),
                b2=rand(D, seed=12), w1=rand(D, F, seed=13), c1=rand(F, seed=14), w2=rand(F, D, seed=15),
                c2=rand(D, seed=16))


GPT2_W = "g1 b1 wq bq wk bk wv bv wo bo g2 b2 w1 c1 w2 c2"


def test_gpt2_block_eps_default_is_gpt2_block_bit_for_bit():
    x, p = rand(B, T, D), _gpt2_params()
    _, a = evaluated(f"(gpt2-block x {GPT2_W})", x=x, **p)
    _, b = evaluated(f"(gpt2-block-eps x 1e-5 {GPT2_W})", x=x, **p)
    assert np.array_equal(a, b)
    _, c = evaluated(f"(gpt2-block-eps x 0.1 {GPT2_W})", x=x, **p)
    ln = lambda v, g, b: ref_layer_norm(v, g, b, eps=0.1)  # noqa: E731
    a1 = ln(x, p["g1"], p["b1"])
    q, k, v = (np.einsum("btd,dhk->bthk", a1, p["w" + c_]) + p["b" + c_] for c_ in "qkv")
    h = x + np.einsum("bthk,hkd->btd", ref_attention(q, k, v), p["wo"]) + p["bo"]
    want = h + gelu(ln(h, p["g2"], p["b2"]) @ p["w1"] + p["c1"]) @ p["w2"] + p["c2"]
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_gpt2_block_cached_equals_the_full_forward():
    S = T
    x, p = rand(B, T, D), _gpt2_params()
    _, full = evaluated(f"(gpt2-block x {GPT2_W})", x=x, **p)
    kc, vc = np.zeros((B, S, N, H), np.float32), np.zeros((B, S, N, H), np.float32)
    rows = []
    for start, end in [(0, 2)] + [(i, i + 1) for i in range(2, T)]:
        xs = np.ascontiguousarray(x[:, start:end])
        call = f"(gpt2-block-cached xs {start} kc vc 1e-5 {GPT2_W})"
        _, h = evaluated(f"(getf {call} :h)", xs=xs, kc=kc, vc=vc, **p)
        _, kc2 = evaluated(f"(getf {call} :k)", xs=xs, kc=kc, vc=vc, **p)
        _, vc = evaluated(f"(getf {call} :v)", xs=xs, kc=kc, vc=vc, **p)
        kc = kc2
        rows.append(h)
    np.testing.assert_allclose(np.concatenate(rows, 1), full, rtol=1e-4, atol=1e-4)
