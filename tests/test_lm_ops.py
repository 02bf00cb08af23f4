"""The ops language models need (`sin`, `cos`, `cumsum`, `dot-product-attention`) against plain JAX
and NumPy, their shape errors, their cost entries, and a `def`'s exact integer arithmetic."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax
import jax.numpy as jnp

from helpers import evaluate_expression, numpy_attention
from sexpgpu_lang import analyze
from sexpgpu_lang.check import check_expression
from sexpgpu_lang.explain.cost import COSTS
from sexpgpu_lang.types import TensorType


def evaluated(text: str, **arrays):
    """(`text`'s checked type, its value), the value's shape and dtype asserted to be the type's."""
    r = evaluate_expression(text, arrays)
    return r.type, r.value


def errors(text: str, **types):
    _, diags = check_expression(text, types)
    return [d for d in diags if d.is_error]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- sin, cos


@pytest.mark.parametrize("name,fn", [("sin", jnp.sin), ("cos", jnp.cos)])
def test_sin_cos_are_jax(name, fn):
    x = rand(3, 4)
    t, out = evaluated(f"({name} x)", x=x)
    assert t.dtype == "f32"
    np.testing.assert_allclose(out, fn(x), rtol=1e-6)
    i = np.arange(6, dtype=np.int32).reshape(2, 3)
    t, out = evaluated(f"({name} i)", i=i)        # integers give f32, as exp does
    assert t.dtype == "f32"
    np.testing.assert_allclose(out, fn(i.astype(np.float32)), rtol=1e-6)


def test_sin_of_bool_is_refused():
    assert [d.code for d in errors("(sin b)", b=TensorType((2,), "bool"))] == ["E-TYPE-002"]


# --------------------------------------------------------------------------- cumsum


def test_cumsum_keeps_i32_under_x64():
    """The language keeps the input dtype, as `sum` does (whose jnp default under x64 is i64)."""
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert jnp.sum(jnp.asarray(i)).dtype == jnp.int64
    t, out = evaluated("(cumsum i :axis 1)", i=i)
    assert (t.shape, t.dtype) == ((3, 4), "i32")
    np.testing.assert_array_equal(out, np.cumsum(i, axis=1))


def test_cumsum_default_axis_is_the_last_and_bool_counts_in_i32():
    x = rand(2, 3, 4)
    _, out = evaluated("(cumsum x)", x=x)
    np.testing.assert_allclose(out, jnp.cumsum(x, axis=-1), rtol=1e-6)
    b = np.array([[True, False, True], [True, True, False]])
    assert jnp.cumsum(jnp.asarray(b), axis=0).dtype == jnp.int64     # JAX's default integer under x64
    t, out = evaluated("(cumsum b :axis 0)", b=b)
    assert t.dtype == "i32"
    np.testing.assert_array_equal(out, np.cumsum(b, axis=0))


def test_cumsum_axis_errors():
    assert [d.code for d in errors("(cumsum x :axis 2)", x=TensorType((2, 3), "f32"))] == ["E-SHAPE-003"]
    assert [d.code for d in errors("(cumsum s)", s=TensorType((), "f32"))] == ["E-SHAPE-003"]


# --------------------------------------------------------------------------- dot-product-attention

B, T, S, N, K, H = 2, 5, 7, 4, 2, 8


reference = numpy_attention


@pytest.mark.parametrize("kv_heads", [N, K, 1], ids=["multi-head", "grouped", "multi-query"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_is_jax_and_the_formula(kv_heads, causal):
    q, k, v = rand(B, T, N, H), rand(B, T, kv_heads, H, seed=1), rand(B, T, kv_heads, H, seed=2)
    t, out = evaluated(f"(dot-product-attention q k v :causal {'true' if causal else 'false'})", q=q, k=k, v=v)
    assert (t.shape, t.dtype) == ((B, T, N, H), "f32")
    np.testing.assert_allclose(out, jax.nn.dot_product_attention(q, k, v, is_causal=causal), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out, reference(q, k, v, causal=causal), rtol=1e-5, atol=1e-5)


def test_attention_mask_broadcasts_and_scale():
    q, k, v = rand(B, T, N, H), rand(B, S, K, H, seed=1), rand(B, S, K, H, seed=2)
    mask = np.random.default_rng(3).random((T, S)) > 0.3
    mask[:, 0] = True                           # every query attends to something
    _, out = evaluated("(dot-product-attention q k v :mask m :scale 0.5)", q=q, k=k, v=v, m=mask)
    np.testing.assert_allclose(out, reference(q, k, v, mask=mask, scale=0.5), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, jax.nn.dot_product_attention(q, k, v, mask=mask[None, None], scale=0.5),
                               rtol=1e-6, atol=1e-6)


def test_attention_keeps_bf16():
    q = jnp.asarray(rand(B, T, N, H), jnp.bfloat16)
    t, out = evaluated("(dot-product-attention q q q :causal true)", q=q)
    assert t.dtype == "bf16"


F32 = lambda *s: TensorType(s, "f32")  # noqa: E731


@pytest.mark.parametrize("text,types,code,quoted", [
    ("(dot-product-attention q k k)", {"q": F32(B, T, 3, H), "k": F32(B, S, K, H)}, "E-SHAPE-005",
     [f"[{B} {T} 3 {H}]", f"[{B} {S} {K} {H}]"]),                         # 3 heads do not group by 2
    ("(dot-product-attention q k k)", {"q": F32(B, T, N, H), "k": F32(B, S, K, 4)}, "E-SHAPE-005",
     [f"[{B} {T} {N} {H}]", f"[{B} {S} {K} 4]"]),                          # head widths differ
    ("(dot-product-attention q k v)", {"q": F32(B, T, N, H), "k": F32(B, S, K, H), "v": F32(B, T, K, H)}, "E-SHAPE-005",
     [f"[{B} {S} {K} {H}]", f"[{B} {T} {K} {H}]"]),                        # key and value differ
    ("(dot-product-attention q q q)", {"q": F32(T, N, H)}, "E-SHAPE-005", [f"[{T} {N} {H}]"]),
    ("(dot-product-attention q k k)", {"q": F32(B, T, N, H), "k": TensorType((B, S, K, H), "bf16")}, "E-TYPE-002",
     ["f32", "bf16"]),
    ("(dot-product-attention q q q :mask m)", {"q": F32(B, T, N, H), "m": F32(T, T)}, "E-TYPE-002", ["f32"]),
    ("(dot-product-attention q q q :mask m)", {"q": F32(B, T, N, H), "m": TensorType((T, 3), "bool")}, "E-SHAPE-001",
     [f"[{T} 3]"]),
    ("(dot-product-attention q q q :causal 1)", {"q": F32(B, T, N, H)}, "E-TYPE-003", ["`:causal`"]),
])
def test_attention_shape_errors_quote_the_shapes(text, types, code, quoted):
    errs = errors(text, **types)
    assert [d.code for d in errs] == [code], [d.message for d in errs]
    for q in quoted:
        assert q in errs[0].message, errs[0].message


def test_attention_error_points_at_the_argument():
    text = "(dot-product-attention q k k)"
    errs = errors(text, q=F32(B, T, 3, H), k=F32(B, S, K, H))
    assert text[errs[0].span.start:errs[0].span.end] == "k"


def test_attention_cost_counts_4bntsh_and_the_operands_only():
    c = COSTS["dot-product-attention"]
    q, kv, out = F32(B, T, N, H), F32(B, S, K, H), F32(B, T, N, H)
    cost = c.flops([q, kv, kv], out, {"causal": True})
    assert cost.flops == 4 * B * N * T * S * H and cost.transcendentals == B * N * T * S
    assert c.fusion == "root" and c.whole_operands     # its output a buffer, no [B N T S] one


# --------------------------------------------------------------------------- integer constants


def defs(text: str):
    from sexpgpu_lang.check.context import CheckContext
    from sexpgpu_lang.check.toplevel import check_file
    from sexpgpu_lang.source import SourceText
    from sexpgpu_lang.syntax import parse
    ctx = CheckContext(parse(SourceText(text)))
    check_file(ctx, True)
    return ctx.globals.names, [d for d in ctx.diags if d.code != "E-FORM-001"]


def test_a_def_divides_integers_exactly():
    names, diags = defs("(def width 64)\n(def heads 4)\n(def head-width (/ width heads))\n"
                        "(def twice (* 2 (/ width heads)))\n(def shape [heads head-width])\n(def left (mod 7 (/ 6 2)))\n")
    assert not diags
    assert (names["head-width"].type.dtype, names["head-width"].type.value) == ("i32", 16)
    assert names["twice"].type.value == 32 and names["left"].type.value == 1
    assert names["shape"].type.dims == (4, 16)


def test_an_inexact_division_is_e_type_005_at_the_division():
    text = "(def width 32)\n(def heads 3)\n(def dim (/ width heads))\n(def shape [dim dim])\n"
    names, diags = defs(text)
    assert [d.code for d in diags] == ["E-TYPE-005"]     # the uses of `dim` are not reported again
    assert text[diags[0].span.start:diags[0].span.end] == "(/ width heads)"
    assert "32" in diags[0].message and "3" in diags[0].message and diags[0].help


def test_floats_keep_their_arithmetic():
    names, diags = defs("(def lr (/ 1.0 1000))\n(def half (/ 1 2.0))\n(def zero (/ 1 0))\n")
    assert names["lr"].type.value == pytest.approx(0.001) and names["lr"].type.dtype == "f32"
    assert names["half"].type.value == 0.5
    e, d = check_expression("(/ 7 2)", {})              # outside a def: true division
    assert not d and (e.type.dtype, e.type.value) == ("f32", 3.5)


def test_head_width_in_a_model_shape():
    src = (Path(__file__).parents[1] / "sexpgpu_lang" / "diagnostic_docs" / "types" / "E-TYPE-005.sx").read_text(encoding="utf-8")
    fixed = src.replace("(def heads 3)", "(def heads 4)")
    res = analyze(fixed, "fixed.sx")
    assert not [d for d in res.diagnostics if d.is_error], [d.message for d in res.diagnostics]

