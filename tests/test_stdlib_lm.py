"""The standard library's language-model layers (prelude.sx) against plain NumPy written here.

Each layer is checked with `check_expression` (as a call in user code is) and traced through the
runtime's lowering; its result must equal a NumPy implementation of the same layer, written from
the field's definitions (Hugging Face's Llama RMSNorm and rotate_half rotary embeddings, GPT-2's
block), to float tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax.numpy as jnp

from helpers import evaluate_expression, numpy_attention
from sexpgpu_lang.check import check_expression
from sexpgpu_lang.types import TensorType

B, T, D, N, K, H, F = 2, 5, 8, 4, 2, 6, 16


def evaluated(text: str, **arrays):
    """(`text`'s checked type, its value as f32 NumPy), the names typed by these arrays."""
    r = evaluate_expression(text, arrays)
    return r.type, np.asarray(r.value, np.float32)


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# --------------------------------------------------------------------------- references


def ref_layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def ref_rms_norm(x, g, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def ref_rotary(x, positions, base=10000.0):
    """Hugging Face's Llama: inv_freq = 1 / base^(arange(0, H, 2) / H), emb = cat(freqs, freqs),
    x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1)."""
    h = x.shape[-1]
    inv = 1.0 / base ** (np.arange(0, h, 2, dtype=np.float64) / h)
    freqs = positions[..., None].astype(np.float64) * inv
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb)[..., None, :], np.sin(emb)[..., None, :]   # [... T 1 H]
    x1, x2 = x[..., : h // 2], x[..., h // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def ref_attention(q, k, v, causal=True, mask=None, scale=None):
    """The layers' attention: causal unless told otherwise (`helpers.numpy_attention`)."""
    return numpy_attention(q, k, v, causal=causal, mask=mask, scale=scale)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1 + np.exp(-x))


def ref_swiglu(x, wg, wu, wd):
    return (silu(x @ wg) * (x @ wu)) @ wd


# --------------------------------------------------------------------------- layers


def test_rms_norm_is_llamas():
    x, g = rand(B, T, D), rand(D, seed=1)
    t, out = evaluated("(rms-norm x g)", x=x, g=g)
    assert (t.shape, t.dtype) == ((B, T, D), "f32")
    np.testing.assert_allclose(out, ref_rms_norm(x, g), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positions", [np.arange(T, dtype=np.int32), np.stack([np.arange(T), np.arange(3, 3 + T)]).astype(np.int32)],
                         ids=["per-position", "per-row"])
def test_rotary_is_hf_rotate_half(positions):
    x = rand(B, T, N, H)
    t, out = evaluated("(rotary x positions 10000)", x=x, positions=positions)
    assert (t.shape, t.dtype) == ((B, T, N, H), "f32")
    np.testing.assert_allclose(out, ref_rotary(x, positions), rtol=1e-5, atol=1e-5)


def test_rotary_base_is_an_argument():
    x, positions = rand(B, T, N, H), np.arange(T, dtype=np.int32) * 7
    _, out = evaluated("(rotary x positions 500000.0)", x=x, positions=positions)
    np.testing.assert_allclose(out, ref_rotary(x, positions, 500000.0), rtol=1e-5, atol=1e-5)
    assert not np.allclose(out, ref_rotary(x, positions, 10000.0), atol=1e-3)


def test_rotary_keeps_bf16():
    """The angle table is weakly typed (a float constant times integers), so a bf16 query stays
    bf16, as HF's casts cos and sin to the query's dtype."""
    x, positions = rand(B, T, N, H), np.arange(T, dtype=np.int32)
    t, out = evaluated("(rotary x positions 10000)", x=jnp.asarray(x, jnp.bfloat16), positions=positions)
    assert t.dtype == "bf16"
    np.testing.assert_allclose(out, ref_rotary(x, positions), rtol=0.05, atol=0.05)


def test_rotary_of_an_odd_width_is_a_shape_error_at_the_call():
    env = {"x": TensorType((B, T, N, 5), "f32"), "p": TensorType((T,), "i32")}
    _, diags = check_expression("(rotary x p 10000)", env)
    assert [d.code for d in diags] == ["E-SHAPE-004"]
    # said at the call, in the call's terms (check/stdlib_args.py), not as a reshape inside the layer
    assert diags[0].message.startswith("rotary embeddings need an even head width"), diags[0].message
    assert "H = 5" in diags[0].message


def test_swiglu_mlp():
    x, wg, wu, wd = rand(B, T, D), rand(D, F, seed=1), rand(D, F, seed=2), rand(F, D, seed=3)
    _, out = evaluated("(swiglu-mlp x wg wu wd)", x=x, wg=wg, wu=wu, wd=wd)
    np.testing.assert_allclose(out, ref_swiglu(x, wg, wu, wd), rtol=1e-4, atol=1e-4)


def test_causal_self_attention_keeps_its_results():
    """Re-written on `dot-product-attention`: the same numbers as the explicit masked softmax."""
    x, wq, wk, wv, wo = rand(B, T, D), rand(D, N, H, seed=1), rand(D, N, H, seed=2), rand(D, N, H, seed=3), rand(N, H, D, seed=4)
    _, out = evaluated("(causal-self-attention x wq wk wv wo)", x=x, wq=wq, wk=wk, wv=wv, wo=wo)
    q, k, v = (np.einsum("btd,dhk->bthk", x, w) for w in (wq, wk, wv))
    want = np.einsum("bthk,hkd->btd", ref_attention(q, k, v), wo)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_gpt2_block():
    x = rand(B, T, D)
    p = dict(g1=rand(D, seed=1), b1=rand(D, seed=2), wq=rand(D, N, H, seed=3, scale=0.3), bq=rand(N, H, seed=4),
             wk=rand(D, N, H, seed=5, scale=0.3), bk=rand(N, H, seed=6), wv=rand(D, N, H, seed=7), bv=rand(N, H, seed=8),
             wo=rand(N, H, D, seed=9), bo=rand(D, seed=10), g2=rand(D, seed=11), b2=rand(D, seed=12),
             w1=rand(D, F, seed=13), c1=rand(F, seed=14), w2=rand(F, D, seed=15), c2=rand(D, seed=16))
    t, out = evaluated("(gpt2-block x g1 b1 wq bq wk bk wv bv wo bo g2 b2 w1 c1 w2 c2)", x=x, **p)
    assert (t.shape, t.dtype) == ((B, T, D), "f32")
    a = ref_layer_norm(x, p["g1"], p["b1"])
    q, k, v = (np.einsum("btd,dhk->bthk", a, p["w" + c]) + p["b" + c] for c in "qkv")
    h = x + np.einsum("bthk,hkd->btd", ref_attention(q, k, v), p["wo"]) + p["bo"]
    m = ref_layer_norm(h, p["g2"], p["b2"])
    want = h + gelu(m @ p["w1"] + p["c1"]) @ p["w2"] + p["c2"]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_llama_block_with_grouped_query_heads():
    x, positions = rand(B, T, D), np.arange(T, dtype=np.int32)
    p = dict(g1=rand(D, seed=1), wq=rand(D, N, H, seed=2, scale=0.3), wk=rand(D, K, H, seed=3, scale=0.3),
             wv=rand(D, K, H, seed=4), wo=rand(N, H, D, seed=5), g2=rand(D, seed=6), wg=rand(D, F, seed=7),
             wu=rand(D, F, seed=8), wd=rand(F, D, seed=9))
    t, out = evaluated("(llama-block x positions g1 wq wk wv wo g2 wg wu wd)", x=x, positions=positions, **p)
    assert (t.shape, t.dtype) == ((B, T, D), "f32")
    a = ref_rms_norm(x, p["g1"])
    q = ref_rotary(np.einsum("btd,dnh->btnh", a, p["wq"]), positions)
    k = ref_rotary(np.einsum("btd,dkh->btkh", a, p["wk"]), positions)
    v = np.einsum("btd,dkh->btkh", a, p["wv"])
    h = x + np.einsum("btnh,nhd->btd", ref_attention(q, k, v), p["wo"])
    want = h + ref_swiglu(ref_rms_norm(h, p["g2"]), p["wg"], p["wu"], p["wd"])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_llama_block_reports_heads_that_do_not_group_at_the_call():
    env = {"x": TensorType((B, T, D), "f32"), "p": TensorType((T,), "i32"), "g": TensorType((D,), "f32"),
           "wq": TensorType((D, N, H), "f32"), "wk": TensorType((D, 3, H), "f32"), "wo": TensorType((N, H, D), "f32"),
           "wg": TensorType((D, F), "f32"), "wd": TensorType((F, D), "f32")}
    _, diags = check_expression("(llama-block x p g wq wk wk wo g wg wg wd)", env)
    assert [d.code for d in diags] == ["E-SHAPE-005"]
    assert "in `llama-block` (standard library)" in diags[0].message
    assert f"[{B} {T} {N} {H}]" in diags[0].message and f"[{B} {T} 3 {H}]" in diags[0].message


def llama_file() -> str:
    """examples/stdlib-transformer.sx with a `llama-block` of 4 query heads over 2 key heads, its
    head width a `def` computed from the width."""
    from pathlib import Path
    src = (Path(__file__).resolve().parents[1] / "examples" / "stdlib-transformer.sx").read_text(encoding="utf-8")
    start, end = src.index("(defmodel"), src.index("(model byte-transformer)")
    model = """(def kv-heads 2)
(def head-dim (/ width heads))

(defmodel byte-transformer
  :params (:embed (normal [256 width] :std 0.05)
           :attn-norm (ones [width])
           :wq (normal [width heads head-dim] :std 0.05)
           :wk (normal [width kv-heads head-dim] :std 0.05)
           :wv (normal [width kv-heads head-dim] :std 0.05)
           :wo (normal [heads head-dim width] :std 0.05)
           :mlp-norm (ones [width])
           :w-gate (normal [width hidden] :std 0.05) :w-up (normal [width hidden] :std 0.05)
           :w-down (normal [hidden width] :std 0.05)
           :out (normal [width 256] :std 0.05))
  :apply (lambda (self x)
           (let* ((h (llama-block (embedding (getf self :embed) x) (iota [seq])
                                  (getf self :attn-norm) (getf self :wq) (getf self :wk) (getf self :wv)
                                  (getf self :wo) (getf self :mlp-norm) (getf self :w-gate) (getf self :w-up)
                                  (getf self :w-down))))
             (matmul (rms-norm h (getf self :mlp-norm)) (getf self :out)))))

"""
    return src[:start] + model + src[end:]


@pytest.mark.slow
def test_a_llama_block_model_checks_and_explain_agrees_with_xla_on_flops():
    """A whole run file: the grouped-query attention checks, and explain's traced FLOPs of each
    graph (attention expanded as XLA runs JAX's implementation) are within 25% of XLA's count."""
    from sexpgpu_lang import analyze
    from sexpgpu_lang.explain import explain
    from sexpgpu_runtime import xla_report
    res = analyze(llama_file(), "llama.sx")
    assert res.program is not None and not [d for d in res.diagnostics if d.is_error], \
        [d.message for d in res.diagnostics]
    report = explain(res.program, target="cpu")
    xla = xla_report(res.program, report)["graphs"]
    est = {g["name"]: g for g in report["graphs"]}
    assert "train" in xla and "train" in est
    for name in set(est) & set(xla):
        assert abs(est[name]["flops"] - xla[name]["flops"]) <= 0.25 * xla[name]["flops"] + 1e3, name
