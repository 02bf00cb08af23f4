"""The standard library's post-training functions (prelude.sx) against plain NumPy, and against TRL.

Each function is checked as a call in user code is (`check_expression`) and traced through the
runtime's lowering; its value must equal a NumPy computation of its formula, written here from the
definitions the docs cite. GKD's generalized JSD and GRPO's loss (each normalisation, with a KL to
a reference, its gradient too) and the metrics TRL logs are also compared with the numbers TRL's
own functions give on a fixed input: tests/fixtures/posttrain/trl.npz, written by
`python -m benchmarks.trl_posttrain --write` (torch and trl are not needed here).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax
import jax.numpy as jnp

from helpers import evaluate_expression, lowered_expression, types_of
from sexpgpu_lang.check import check_expression
from sexpgpu_lang.types import TensorType

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "posttrain" / "trl.npz"


def evaluated(text: str, **arrays):
    """(`text`'s checked type, its value as f32 NumPy or None, the metrics it reported)."""
    r = evaluate_expression(text, arrays)
    return r.type, None if r.value is None else np.asarray(r.value, np.float32), r.metrics


def grad(text: str, wrt: str, **arrays):
    """The gradient of scalar `text` with respect to the array `wrt`."""
    _, f = lowered_expression(text, types_of(arrays))
    env = {k: jnp.asarray(v) for k, v in arrays.items()}
    return np.asarray(jax.grad(lambda x: f({**env, wrt: x}))(env[wrt]))


def rng(seed=0):
    return np.random.default_rng(seed)


B, T, V = 4, 5, 7


def inputs(seed=0):
    r = rng(seed)
    lengths = np.array([5, 3, 1, 0])
    return {
        "s": (r.standard_normal((B, T, V)) * 2).astype(np.float32),
        "t": (r.standard_normal((B, T, V)) * 2).astype(np.float32),
        "tok": r.integers(0, V, (B, T)).astype(np.int32),
        "m": np.arange(T)[None, :] < lengths[:, None],
        "lp": (r.standard_normal((B, T)) * 0.5 - 1.5).astype(np.float32),
        "old": (r.standard_normal((B, T)) * 0.5 - 1.5).astype(np.float32),
        "ref": (r.standard_normal((B, T)) * 0.5 - 1.5).astype(np.float32),
        "adv": r.standard_normal(B).astype(np.float32),
        "r": np.array([1.0, 0.0, 0.5, 0.25, 0.0, 0.0, 1.0, 0.75], np.float32),
    }


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def gjsd_per_token(s, t, beta):
    """GKD's generalized JSD per token (its paper's eq. 1, TRL's `generalized_jsd_loss` before the
    reduction) of the student's log-probs `s` and the teacher's `t` [..., V]: forward KL at beta 0,
    reverse KL at 1."""
    ps, pt = np.exp(s), np.exp(t)
    if beta == 0:
        return (pt * (t - s)).sum(-1)
    if beta == 1:
        return (ps * (s - t)).sum(-1)
    mix = np.log(beta * pt + (1 - beta) * ps)
    return beta * (pt * (t - mix)).sum(-1) + (1 - beta) * (ps * (s - mix)).sum(-1)


def token_mean(x, m):
    m = m.astype(np.float64)
    return (x * m).sum() / max(m.sum(), 1.0)


def sequence_mean(x, m):
    m = m.astype(np.float64)
    return ((x * m).sum(1) / np.maximum(m.sum(1), 1.0)).mean()


def surrogate(lp, old, adv, lo, hi):
    ratio = np.exp(lp.astype(np.float64) - old)
    a = adv[:, None].astype(np.float64)
    return -np.minimum(ratio * a, np.clip(ratio, 1 - lo, 1 + hi) * a)


# --------------------------------------------------------------------------- each function vs NumPy


def test_token_log_probs_pick_each_token_and_zero_outside_the_mask():
    x = inputs()
    typ, got, _ = evaluated("(token-log-probs s tok m)", s=x["s"], tok=x["tok"], m=x["m"])
    want = np.take_along_axis(log_softmax(x["s"]), x["tok"][..., None], -1)[..., 0] * x["m"]
    assert typ.show() == f"[{B} {T}] f32"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_token_entropy_is_minus_sum_p_log_p():
    x = inputs()
    _, got, _ = evaluated("(token-entropy s m)", s=x["s"], m=x["m"])
    lp = log_softmax(x["s"])
    np.testing.assert_allclose(got, -(np.exp(lp) * lp).sum(-1) * x["m"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", ["forward-kl", "reverse-kl"])
def test_kl_directions_over_the_vocabulary_averaged_over_the_mask(fn):
    x = inputs()
    _, got, _ = evaluated(f"({fn} s t m)", s=x["s"], t=x["t"], m=x["m"])
    s, t = log_softmax(x["s"]), log_softmax(x["t"])
    per = (np.exp(t) * (t - s)).sum(-1) if fn == "forward-kl" else (np.exp(s) * (s - t)).sum(-1)
    np.testing.assert_allclose(got, token_mean(per, x["m"]), rtol=1e-5)


@pytest.mark.parametrize("beta", [0.0, 0.2, 0.5, 0.9, 1.0])
def test_generalized_jsd_is_gkds_formula(beta):
    x = inputs()
    _, got, _ = evaluated(f"(generalized-jsd s t {beta} m)", s=x["s"], t=x["t"], m=x["m"])
    s, t = log_softmax(x["s"]), log_softmax(x["t"])
    per = gjsd_per_token(s, t, beta)
    np.testing.assert_allclose(got, token_mean(per, x["m"]), rtol=1e-5, atol=1e-7)


def test_generalized_jsd_at_the_ends_has_a_finite_gradient():
    x = inputs()
    for beta in (0.0, 1.0):
        g = grad(f"(generalized-jsd s t {beta} m)", "s", s=x["s"], t=x["t"], m=x["m"])
        assert np.isfinite(g).all()
        assert np.abs(g).sum() > 0


def test_repeat_rows_repeats_each_row_in_place():
    x = inputs()
    typ, got, _ = evaluated("(repeat-rows tok 3)", tok=x["tok"])
    assert typ.show() == f"[{B * 3} {T}] i32"
    np.testing.assert_array_equal(got, np.repeat(x["tok"], 3, axis=0))


def test_top_k_rows_keeps_the_best_scored_rows_best_first():
    x = inputs()
    scores = np.array([0.3, 2.0, -1.0, 0.9], np.float32)
    typ, got, _ = evaluated("(top-k-rows s scores 2)", s=x["s"], scores=scores)
    assert typ.show() == f"[2 {T} {V}] f32"
    np.testing.assert_array_equal(got, x["s"][[1, 3]])
    e, diags = check_expression("(top-k-rows s scores 5)", {"s": TensorType((B, T, V), "f32"), "scores": TensorType((B,), "f32")})
    assert [d.code for d in diags] == ["E-TYPE-003"] and "from 1 to 4" in diags[0].message


def test_group_advantages_centre_and_scale_each_group():
    x = inputs()
    _, got, _ = evaluated("(group-advantages r 4)", r=x["r"])
    g = x["r"].astype(np.float64).reshape(-1, 4)
    c = g - g.mean(1, keepdims=True)
    want = (c / (g.std(1, ddof=1, keepdims=True) + 1e-4)).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _, got, _ = evaluated("(group-advantages-unscaled r 2)", r=x["r"])
    g = x["r"].reshape(-1, 2)
    np.testing.assert_allclose(got, (g - g.mean(1, keepdims=True)).reshape(-1), atol=1e-7)


def test_clipped_surrogate_clips_the_ratio_with_two_epsilons():
    x = inputs()
    _, got, _ = evaluated("(clipped-surrogate lp old adv 0.2 0.28 m)", lp=x["lp"], old=x["old"], adv=x["adv"], m=x["m"])
    want = surrogate(x["lp"], x["old"], x["adv"], 0.2, 0.28) * x["m"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ratio = np.exp(x["lp"] - x["old"])
    assert ((ratio < 0.8) | (ratio > 1.28))[x["m"]].any(), "the input clips some ratios"


@pytest.mark.parametrize("fn,norm", [("grpo-loss", "sequence"), ("bnpo-loss", "token"), ("dr-grpo-loss", "constant")])
def test_grpo_losses_normalise_as_named(fn, norm):
    x = inputs()
    extra = " 8" if norm == "constant" else ""
    _, got, _ = evaluated(f"({fn} lp old adv 0.2 0.28 m{extra})", lp=x["lp"], old=x["old"], adv=x["adv"], m=x["m"])
    per = surrogate(x["lp"], x["old"], x["adv"], 0.2, 0.28)
    want = {"sequence": sequence_mean(per, x["m"]), "token": token_mean(per, x["m"]),
            "constant": (per * x["m"]).sum() / (B * 8)}[norm]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_the_normalisations_alone():
    x = inputs()
    _, a, _ = evaluated("(token-mean lp m)", lp=x["lp"], m=x["m"])
    _, b, _ = evaluated("(sequence-mean lp m)", lp=x["lp"], m=x["m"])
    _, c, _ = evaluated("(constant-mean lp m 6)", lp=x["lp"], m=x["m"])
    np.testing.assert_allclose([a, b, c], [token_mean(x["lp"], x["m"]), sequence_mean(x["lp"], x["m"]),
                                           (x["lp"] * x["m"]).sum() / (B * 6)], rtol=1e-5)
    _, none, _ = evaluated("(token-mean lp m)", lp=x["lp"], m=np.zeros((B, T), bool))
    assert none == 0.0   # no token: 0, not NaN


@pytest.mark.parametrize("k", ["k1", "k2", "k3"])
def test_kl_estimators(k):
    x = inputs()
    _, got, _ = evaluated(f"(kl-{k} lp ref m)", lp=x["lp"], ref=x["ref"], m=x["m"])
    d = x["lp"].astype(np.float64) - x["ref"]
    want = {"k1": d, "k2": d * d / 2, "k3": np.exp(-d) + d - 1}[k] * x["m"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_a_float_mask_weighs_as_a_bool_one():
    x = inputs()
    _, a, _ = evaluated("(forward-kl s t m)", s=x["s"], t=x["t"], m=x["m"])
    _, b, _ = evaluated("(forward-kl s t m)", s=x["s"], t=x["t"], m=x["m"].astype(np.float32))
    assert a == b


def test_under_bf16_inputs_the_results_are_f32():
    x = inputs()
    s16 = jnp.asarray(x["s"], jnp.bfloat16)
    for text in ("(forward-kl s t m)", "(generalized-jsd s t 0.5 m)", "(token-entropy s m)", "(token-log-probs s tok m)",
                 "(grpo-loss lp lp adv 0.2 0.2 m)"):
        typ, got, _ = evaluated(text, s=s16, t=s16, tok=x["tok"], m=x["m"], lp=jnp.asarray(x["lp"], jnp.bfloat16),
                          adv=x["adv"])
        assert typ.dtype == "f32", (text, typ.show())
        assert np.isfinite(got).all()


def test_completion_metrics_report_entropy_and_lengths():
    x = inputs()
    typ, _, metrics = evaluated("(completion-metrics s m)", s=x["s"], m=x["m"])
    lp = log_softmax(x["s"])
    assert typ.show() == "nil"
    np.testing.assert_allclose(metrics["entropy"], token_mean(-(np.exp(lp) * lp).sum(-1), x["m"]), rtol=1e-5)
    assert metrics["completion-length"] == pytest.approx(np.mean([5, 3, 1, 0]))
    assert metrics["completion-length-max"] == 5
    assert metrics["stopped"] == pytest.approx(3 / 4)   # every row but the one that fills all 5 columns


# --------------------------------------------------------------------------- against TRL's own functions


@pytest.fixture(scope="module")
def trl():
    return dict(np.load(FIXTURE))


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
def test_generalized_jsd_gives_trls_number(trl, beta):
    _, got, _ = evaluated(f"(generalized-jsd s t {beta} m)", s=trl["student"], t=trl["teacher"], m=trl["mask"])
    np.testing.assert_allclose(got, trl[f"jsd_{beta}"], rtol=1e-5)


def test_group_advantages_give_trls(trl):
    _, got, _ = evaluated("(group-advantages r 2)", r=trl["rewards"])
    np.testing.assert_allclose(got, trl["advantages"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss_type,text", [
    ("grpo", "(sequence-mean (+ (clipped-surrogate lp old adv 0.2 0.28 m) (* 0.04 (kl-k3 lp ref m))) m)"),
    ("bnpo", "(token-mean (+ (clipped-surrogate lp old adv 0.2 0.28 m) (* 0.04 (kl-k3 lp ref m))) m)"),
    ("dapo", "(token-mean (+ (clipped-surrogate lp old adv 0.2 0.28 m) (* 0.04 (kl-k3 lp ref m))) m)"),
    ("dr_grpo", "(constant-mean (+ (clipped-surrogate lp old adv 0.2 0.28 m) (* 0.04 (kl-k3 lp ref m))) m 6)"),
])
def test_grpo_loss_and_gradient_give_trls(trl, loss_type, text):
    arrays = dict(lp=trl["log_p"], old=trl["old_log_p"], ref=trl["ref_log_p"], adv=trl["advantages"], m=trl["mask"])
    _, got, _ = evaluated(text, **arrays)
    np.testing.assert_allclose(got, trl[f"{loss_type}_loss"], rtol=1e-5)
    np.testing.assert_allclose(grad(text, "lp", **arrays), trl[f"{loss_type}_grad"], rtol=1e-4, atol=1e-7)


def test_grpo_loss_without_kl_is_the_surrogates_sequence_mean(trl):
    arrays = dict(lp=trl["log_p"], old=trl["old_log_p"], adv=trl["advantages"], m=trl["mask"])
    _, a, _ = evaluated("(grpo-loss lp old adv 0.2 0.28 m)", **arrays)
    _, b, _ = evaluated("(sequence-mean (clipped-surrogate lp old adv 0.2 0.28 m) m)", **arrays)
    assert a == b


def test_grpo_metrics_give_trls_logged_ones(trl):
    _, _, metrics = evaluated("(grpo-metrics r s lp old ref adv 0.2 0.28 m)", r=trl["rewards"], s=trl["student"],
                        lp=trl["log_p"], old=trl["old_log_p"], ref=trl["ref_log_p"], adv=trl["advantages"],
                        m=trl["mask"])
    np.testing.assert_allclose(metrics["kl"], trl["kl"], rtol=1e-5)
    np.testing.assert_allclose(metrics["entropy"], trl["entropy_metric"], rtol=1e-5)
    np.testing.assert_allclose(metrics["clip-ratio"], trl["clip_ratio"], rtol=1e-5)
    np.testing.assert_allclose(metrics["reward"], trl["rewards"].mean(), rtol=1e-6)
    np.testing.assert_allclose(metrics["reward-std"], trl["rewards"].std(ddof=1), rtol=1e-5)
    assert metrics["completion-length"] == pytest.approx(trl["mask"].sum(1).mean())


# --------------------------------------------------------------------------- the arguments, checked at the call

ENV = {"lg": TensorType((2, 3, 5), "f32"), "lg4": TensorType((2, 4, 5), "f32"), "tok": TensorType((2, 3), "i32"),
       "m": TensorType((2, 3), "bool"), "mi": TensorType((2, 3), "i32"), "lp": TensorType((2, 3), "f32"),
       "lp1": TensorType((2, 1, 3), "f32"), "r": TensorType((4,), "f32"), "adv": TensorType((2,), "f32"),
       "adv3": TensorType((3,), "f32"), "mi1": TensorType((2, 3, 1), "i32")}


@pytest.mark.parametrize("text,code,at,words", [
    ("(forward-kl lg4 lg m)", "E-SHAPE-005", "lg4", "`student-logits` is [2 4 5] f32, but it takes logits [B T V] on the mask's [2 3]"),
    ("(token-log-probs lg lp m)", "E-TYPE-002", "lp", "`tokens` are token ids, integers; got [2 3] f32"),
    ("(token-mean lp mi1)", "E-SHAPE-005", "mi1", "`mask` is a mask [B T], one entry per token of each row"),
    ("(group-advantages r 1)", "E-TYPE-003", "1", "a constant integer of 2 or more; got 1: a group of one row has "
     "nothing to compare with, so every advantage is 0"),
    ("(group-advantages-unscaled r 1)", "E-TYPE-003", "1", "TRL refuses `num_generations` below 2"),
    ("(grpo-loss lp lp adv -0.2 0.2 m)", "E-TYPE-003", "-0.2", "`eps-low` must be from 0 to below 1; got -0.2"),
    ("(bnpo-loss lp lp adv 0.2 -0.1 m)", "E-TYPE-003", "-0.1", "`eps-high` must be 0 or more; got -0.1"),
    ("(clipped-surrogate lp lp adv 1.0 0.2 m)", "E-TYPE-003", "1.0", "`eps-low` must be from 0 to below 1; got 1"),
    ("(generalized-jsd lg lg 1.5 m)", "E-TYPE-003", "1.5", "`beta` must be from 0 to 1; got 1.5"),
    ("(generalized-jsd lg lg \"0.5\" m)", "E-TYPE-001", "\"0.5\"", "`beta` is a number from 0 to 1; got \"0.5\""),
    ("(generalized-jsd lg lg lp m)", "E-SHAPE-005", "lp", "`beta` is one number from 0 to 1 for every token"),
    ("(stop-rows tok mi (< adv 0.0) (cast adv :i32) 1 2 0)", "E-TYPE-002", "mi", "the completion mask it writes a "
     "token's entry into, bool; got [2 3] i32"),
    ("(group-advantages r 3)", "E-SHAPE-005", "3", "groups the 4 rows by 3, which does not divide them"),
    ("(group-advantages r lp)", "E-TYPE-003", "lp", "`group` is a count of rows, a constant integer"),
    ("(repeat-rows tok 0)", "E-TYPE-003", "0", "`n` is a count of rows, a constant integer of 1 or more"),
    ("(grpo-loss lp lp adv3 0.2 0.2 m)", "E-SHAPE-005", "adv3", "`advantages` is [3] f32, but it takes a value per row [B] for the 2 rows"),
    ("(kl-k3 lp1 lp m)", "E-SHAPE-005", "lp1", "`log-p` is [2 1 3] f32, but it takes a value per token [B T]"),
])
def test_a_wrong_argument_is_one_error_at_it(text, code, at, words):
    """Each mistake one error at its argument; the settings' ranges are TRL's (GRPOConfig's beta >= 0 and
    epsilon in [0, 1); GKDConfig's beta in [0, 1])."""
    e, diags = check_expression(text, ENV)
    assert [d.code for d in diags] == [code], [d.message for d in diags]
    assert words in diags[0].message
    assert text[diags[0].span.start:diags[0].span.end] == at
    assert e.type.show() == "{error}"
