"""The standard library's sampling generators and objectives in one call (prelude.sx; docs/stdlib.md
"Sampling generators" and "The objectives in one call") against NumPy, their arguments checked at the
call (check/stdlib_args.py).

`repeat-prompts`, `gkd-objective` and `grpo-objective` are checked as a call in user code is and traced
through the runtime's lowering; the functions that take a model (`sample-trip`, `prefill-prompts`,
`cached-trip`, `decode-logits`) run in a small run file's generator (`run_phase`, its parameters drawn
from the seed), whose model is simple enough to compute in NumPy: its `:apply` and `:decode` logits are
an embedding of each token plus one of its position, times an output matrix, and its caches hold the
same sum at each real position.
"""
from __future__ import annotations

import numpy as np
import pytest

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax
import jax.numpy as jnp

from helpers import evaluate_expression, lowered_expression, program_of, types_of
from runfile import RunFile
from sexpgpu_lang.check import check_expression
from sexpgpu_lang.types import TensorType
from test_stdlib_posttrain import evaluated, gjsd_per_token, grad, log_softmax, sequence_mean, surrogate, token_mean


# --------------------------------------------------------------------------- repeat-prompts


def test_repeat_prompts_repeats_each_prompt_in_place_then_fills_the_columns():
    p = np.array([[3, 4, 5], [6, 7, 8]], np.int32)
    m = np.array([[False, True, True], [True, True, True]])
    typ, got, _ = evaluated("(repeat-prompts p 3 5 0)", p=p)
    want = np.concatenate([np.repeat(p, 3, axis=0), np.zeros((6, 2), np.int32)], axis=1)
    assert typ.show() == "[6 5] i32"          # the literal fill takes the prompt's dtype (not x64's i64)
    np.testing.assert_array_equal(got, want)
    typ, got, _ = evaluated("(repeat-prompts m 3 5 true)", m=m)
    assert typ.show() == "[6 5] bool"
    np.testing.assert_array_equal(got, np.concatenate([np.repeat(m, 3, axis=0), np.ones((6, 2), bool)], axis=1))


def test_broadcast_to_of_a_literal_lowers_to_the_rule_s_dtype():
    """`broadcast-to` of a weakly typed literal is the checker's dtype, as the rule says (x64's i64 was
    an internal error)."""
    typ, out, _ = evaluate_expression("(broadcast-to 7 [2 3])", {}, clean=True)
    assert typ.show() == "[2 3] i32*"   # weak, as the literal
    assert out.dtype == np.int32 and out.tolist() == [[7] * 3] * 2


# --------------------------------------------------------------------------- the objectives in one call


def _gkd_inputs(seed=0):
    """Logits over whole rows [3 5 6] and the completion mask on the rows' columns: row 0 sampled
    columns 2 ... 4, row 1 column 3 alone (then stopped), row 2 column 4 (its prompt 4 long)."""
    r = np.random.default_rng(seed)
    cols = np.arange(5)[None, :]
    return {"s": (r.standard_normal((3, 5, 6)) * 2).astype(np.float32),
            "t": (r.standard_normal((3, 5, 6)) * 2).astype(np.float32),
            "m": (cols >= np.array([2, 3, 4])[:, None]) & (cols < np.array([5, 4, 5])[:, None])}


def _predicts_a_sampled_token(m):
    """[B S] bool: the positions whose logits predict a token the mask holds (position t's logits
    predict the token at t + 1; the last position's predict none)."""
    out = np.zeros_like(m)
    for b in range(m.shape[0]):
        for t in range(m.shape[1] - 1):
            out[b, t] = m[b, t + 1]
    return out


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_gkd_objective_is_the_generalized_jsd_with_agreement_and_completion_metrics(beta):
    x = _gkd_inputs()
    typ, got, metrics = evaluated(f"(gkd-objective s t {beta} m)", **x)
    s, t = log_softmax(x["s"]), log_softmax(x["t"])
    m = _predicts_a_sampled_token(x["m"])
    assert m.sum() == 5 and not m[:, -1].any()        # 3 + 1 + 1 sampled tokens; the last column never
    per = gjsd_per_token(s, t, beta)
    assert typ.show() == "[] f32"
    np.testing.assert_allclose(got, token_mean(per, m), rtol=1e-5)
    assert metrics["loss"] == pytest.approx(float(got))
    agree = (x["s"].argmax(-1) == x["t"].argmax(-1))
    assert metrics["agreement"] == pytest.approx(token_mean(agree, m))
    np.testing.assert_allclose(metrics["entropy"], token_mean(-(np.exp(s) * s).sum(-1), m), rtol=1e-5)
    assert metrics["completion-length"] == pytest.approx(5 / 3) and metrics["completion-length-max"] == 3
    assert metrics["stopped"] == pytest.approx(1 / 3)   # row 1 alone ends before the last column


def test_gkd_objective_reads_nothing_of_the_last_column_s_logits():
    """The last column's logits predict a token past the row: changing them changes nothing (TRL's
    GKDTrainer drops that position too)."""
    x = _gkd_inputs()
    _, got, metrics = evaluated("(gkd-objective s t 0.0 m)", **x)
    y = dict(x, s=x["s"].copy(), t=x["t"].copy())
    y["s"][:, -1] = 50.0 * np.arange(6)
    y["t"][:, -1] = -50.0 * np.arange(6)
    _, again, metrics_again = evaluated("(gkd-objective s t 0.0 m)", **y)
    assert float(again) == float(got) and metrics_again == metrics


def _grpo_inputs(seed=0):
    r = np.random.default_rng(seed)
    b, s, v = 4, 6, 5
    return {"lg": (r.standard_normal((b, s, v)) * 1.5).astype(np.float32),
            "rl": (r.standard_normal((b, s, v)) * 1.5).astype(np.float32),
            "row": r.integers(0, v, (b, s)).astype(np.int32),
            "m": np.arange(s)[None, :] >= np.array([2, 3, 3, 5])[:, None],   # the completion's columns
            "rw": np.array([1.0, 0.0, 0.5, 0.25], np.float32),
            "adv": np.array([0.7, -1.2, 0.1, 0.4], np.float32)}


GRPO = "(grpo-objective lg rl row m rw adv 0.04 0.2 0.28)"


def _grpo_numpy(x, beta=0.04):
    """TRL's GRPO loss (loss_type "grpo") with one update per batch, from the logits: each token's
    log-probability from the column before it, old = the policy's, k3 KL to the reference."""
    tokens, m = x["row"][:, 1:], x["m"][:, 1:]
    lp = np.take_along_axis(log_softmax(x["lg"][:, :-1]), tokens[..., None], -1)[..., 0] * m
    ref = np.take_along_axis(log_softmax(x["rl"][:, :-1]), tokens[..., None], -1)[..., 0] * m
    d = ref - lp
    k3 = (np.exp(d) - d - 1) * m
    return sequence_mean(surrogate(lp, lp, x["adv"], 0.2, 0.28) * m + beta * k3, m), lp, ref, m


def test_grpo_objective_is_trls_loss_from_the_logits_with_its_metrics():
    x = _grpo_inputs()
    typ, got, metrics = evaluated(GRPO, **x)
    want, lp, ref, m = _grpo_numpy(x)
    assert typ.show() == "[] f32"
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert metrics["loss"] == pytest.approx(float(got))
    np.testing.assert_allclose(metrics["kl"], token_mean((np.exp(ref - lp) - (ref - lp) - 1) * m, m), rtol=1e-5)
    assert metrics["reward"] == pytest.approx(x["rw"].mean()) and metrics["clip-ratio"] == 0.0
    assert metrics["reward-std"] == pytest.approx(x["rw"].std(ddof=1), rel=1e-5)
    assert metrics["completion-length"] == pytest.approx(m.sum(1).mean())


def test_grpo_objective_s_gradient_is_the_policy_gradient_plus_the_kl_s():
    """The sampler's log-probabilities are held (the ratio 1), so the gradient with respect to the
    logits is -A/|o| d log p + beta d k3, per sequence: a plain JAX computation of the same."""
    x = _grpo_inputs(1)
    got = grad(GRPO, "lg", **x)
    tokens, m = jnp.asarray(x["row"][:, 1:]), jnp.asarray(x["m"][:, 1:], jnp.float32)
    ref = jnp.take_along_axis(jax.nn.log_softmax(jnp.asarray(x["rl"][:, :-1])), tokens[..., None], -1)[..., 0]

    def loss(lg):
        lp = jnp.take_along_axis(jax.nn.log_softmax(lg[:, :-1]), tokens[..., None], -1)[..., 0]
        d = ref - lp
        per = -jnp.asarray(x["adv"])[:, None] * jnp.exp(lp - jax.lax.stop_gradient(lp)) + 0.04 * (jnp.exp(d) - d - 1)
        return jnp.mean((per * m).sum(1) / jnp.maximum(m.sum(1), 1.0))
    np.testing.assert_allclose(got, np.asarray(jax.grad(loss)(jnp.asarray(x["lg"]))), rtol=1e-4, atol=1e-7)


ENV = {"p": TensorType((2, 6), "i32"), "lg": TensorType((4, 6, 5), "f32"), "row": TensorType((4, 6), "i32"),
       "m": TensorType((4, 6), "bool"), "mi": TensorType((4, 6), "i32"), "rw": TensorType((4,), "f32"),
       "f": TensorType((4, 6), "f32"), "lg5": TensorType((4, 5, 5), "f32")}


@pytest.mark.parametrize("text,code,at,words", [
    ("(repeat-prompts p 4 3 0)", "E-SHAPE-005", "3", "`width` is 3, fewer than the prompt's 6 columns"),
    ("(repeat-prompts p 4 (axis-size (sum f :axes [1]) 0) 0)", "E-SHAPE-005", "(axis-size (sum f :axes [1]) 0)",
     "`width` is 4, fewer"),
    ("(repeat-prompts p rw 12 0)", "E-TYPE-003", "rw", "`n` is a count of rows"),
    ("(gkd-objective lg lg 0.5 rw)", "E-SHAPE-005", "rw", "`mask` is a mask [B T], one entry per token"),
    ("(gkd-objective lg lg -0.5 m)", "E-TYPE-003", "-0.5", "`beta` must be from 0 to 1; got -0.5"),
    ("(gkd-objective lg lg 1.5 m)", "E-TYPE-003", "1.5", "`beta` must be from 0 to 1; got 1.5"),
    ("(gkd-objective lg lg :beta 0.5 :mask m)", "E-FORM-003", ":beta", "`gkd-objective` takes its 4 arguments by "
     "position, not by keyword: `(gkd-objective student-logits teacher-logits beta mask)`, got `:beta`"),
    ("(grpo-objective lg lg row m rw rw -0.04 0.2 0.28)", "E-TYPE-003", "-0.04", "`beta` must be 0 or more"),
    ("(grpo-objective lg lg row m rw rw 0.04 -0.2 0.28)", "E-TYPE-003", "-0.2", "`eps-low` must be from 0 to "
     "below 1; got -0.2"),
    ("(grpo-objective lg lg row m rw rw 0.04 1 0.28)", "E-TYPE-003", "1", "`eps-low` must be from 0 to below 1"),
    ("(grpo-objective lg lg row m rw rw 0.04 0.2 -0.28)", "E-TYPE-003", "-0.28", "`eps-high` must be 0 or more"),
    ("(grpo-objective lg lg row m rw rw \"0.04\" 0.2 0.28)", "E-TYPE-001", "\"0.04\"", "`beta` is a number 0 or "
     "more; got \"0.04\""),
    ("(repeat-prompts p 4 12 0.5)", "E-TYPE-002", "0.5", "`fill` is a scalar of the prompt's dtype (i32, the prompt "
     "[2 6] i32); got [] f32"),
    ("(repeat-prompts p 4 12 \"a\")", "E-TYPE-001", "\"a\"", "`fill` is a scalar of the prompt's dtype"),
    ("(repeat-prompts p 4 12 (cast 0 :i64))", "E-TYPE-002", "(cast 0 :i64)", "which would make the rows i64"),
    ("(repeat-prompts m 4 12 0)", "E-TYPE-002", "0", "(bool, the prompt [4 6] bool); got [] i32"),
    ("(repeat-prompts f 4 12 0)", "E-TYPE-002", "f", "`prompt` is token ids [B P], integers (or a prompt's padding "
     "mask, bool); got [4 6] f32"),
    ("(sample-trip lg row 3 :salt 1 :temperature 0)", "E-FORM-003", ":salt", "takes its 5 arguments by position, not by keyword"),
    ("(gkd-objective lg5 lg 0.5 m)", "E-SHAPE-005", "lg5", "takes logits [B T V] on the mask's [4 6]"),
    ("(grpo-objective lg lg f m rw rw 0.04 0.2 0.28)", "E-TYPE-002", "f", "`row` are token ids, integers"),
    ("(grpo-objective lg lg row m rw f 0.04 0.2 0.28)", "E-SHAPE-005", "f", "`advantages` is [4 6] f32, but it "
     "takes a value per row [B]"),
])
def test_a_wrong_argument_is_one_error_at_it(text, code, at, words):
    """Each mistake one error at its argument: the settings' ranges are TRL's (GRPOConfig's beta >= 0,
    epsilon in [0, 1); GKDConfig's beta in [0, 1]), a fill the prompt's dtype (docs/stdlib.md)."""
    e, diags = check_expression(text, ENV)
    assert [d.code for d in diags] == [code], [d.message for d in diags]
    assert words in diags[0].message
    assert text[diags[0].span.start:diags[0].span.end] == at
    assert e.type.show() == "{error}"


@pytest.mark.parametrize("text", ["(repeat-prompts p 4 12 0)", "(repeat-prompts p 4 12 (cast 0 :i32))",
                                  "(repeat-prompts m 1 12 true)", "(gkd-objective lg lg 0 m)",
                                  "(gkd-objective lg lg 1 mi)", "(grpo-objective lg lg row f rw rw 0 0 0)"])
def test_settings_at_their_ends_and_a_fill_of_the_prompt_s_dtype_are_clean(text):
    assert check_expression(text, ENV)[1] == []


@pytest.mark.parametrize("call", ["(gkd-objective s t 0.5 m)", GRPO])
def test_a_completion_mask_may_be_bool_integer_or_float_and_counts_the_same(call):
    """One rule for every post-training function's mask (TRL's are integer 0/1): bool, i32 and f32
    0/1 masks give the same loss and metrics."""
    x = _gkd_inputs() if call.startswith("(gkd") else _grpo_inputs()
    got = [evaluated(call, **{**x, "m": x["m"].astype(dt)}) for dt in (bool, np.int32, np.float32)]
    for typ, value, metrics in got[1:]:
        assert typ.show() == "[] f32"
        np.testing.assert_allclose(value, got[0][1], rtol=1e-6)
        assert metrics == pytest.approx(got[0][2])


# --------------------------------------------------------------------------- the functions that take a model

V, P, S, D, B = 9, 4, 7, 4, 3

LM = f"""(def vocab {V})
(def prompt {P})
(def seq {S})
(loader train
  :source (stride-rows :vocab vocab :seq prompt)
  :batch {B}
  :fields (:row [prompt] :i32 :stride [1] :i32))
(defmodel lm
  :params (:embed (normal [vocab {D}] :std 1.0) :pos (normal [seq {D}] :std 1.0) :out (normal [{D} vocab] :std 1.0))
  :apply (lambda (self x) (matmul (+ (embedding (getf self :embed) x) (getf self :pos)) (getf self :out)))
  :entries (:decode (lambda (self x pos k v)
                      (let* ((h (+ (embedding (getf self :embed) x) (learned-positions (getf self :pos) pos (axis-size x 1))))
                             (kv (reshape h [(axis-size x 0) (axis-size x 1) 1 {D}])))
                        (list :logits (matmul h (getf self :out)) :k (cache-write k kv pos) :v (cache-write v (* kv 2.0) pos))))))
(model lm)
(defgenerate :trips (- seq prompt)
  :init GEN-INIT
  :step GEN-STEP
  :finish GEN-FINISH)
(objective (lambda (b ctx) (mean (cast (field b :out) :f32))))
(run :loader train :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
"""

CACHED = (LM.replace("GEN-INIT", f"(lambda (batch ctx) (prefill-prompts lm (field batch :row) (!= (field batch :row) 0) "
                                 f"(zeros [{B} seq 1 {D}])))")
            .replace("GEN-STEP", "(lambda (state trip ctx) (cached-trip lm state (+ (cast trip :i32) prompt) trip 0))")
            .replace("GEN-FINISH", f"(lambda (state ctx) (list :out (getf state :row) :start (getf state :start) "
                                   f":k (getf state :k) :logits (decode-logits lm (getf state :row) (getf state :start) "
                                   f"(zeros [{B} seq 1 {D}]))))"))
SAMPLED = (LM.replace("GEN-INIT", "(lambda (batch ctx) (list :row (repeat-prompts (field batch :row) 2 seq 0)))")
             .replace("GEN-STEP", "(lambda (state trip ctx) (list :row (sample-trip lm (getf state :row) "
                                  "(+ (cast trip :i32) prompt) trip 0)))")
             .replace("GEN-FINISH", "(lambda (state ctx) (list :out (getf state :row)))"))


def _generate(text: str, batch: dict):
    """The generator of `text` run on `batch` (its phases through `run_phase`): (what `:finish`
    returned, as NumPy, the parameters drawn from the seed)."""
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lowering import Effects, run_phase
    from sexpgpu_runtime.weights.params import init_params, merge
    prog = program_of(text)
    params = merge(*init_params(prog.params, 0))
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()}
    g = prog.generate
    fx = lambda: Effects(jax.random.key(0), in_generator=True)   # noqa: E731
    state = run_phase(g.init, [{k: jnp.asarray(v) for k, v in batch.items()}, ctx], params, fx())
    for trip in range(g.trips):
        state = run_phase(g.step, [state, jnp.asarray(trip, jnp.int64), ctx], params, fx())
    out = run_phase(g.finish, [state, ctx], params, fx())
    return {k: np.asarray(v) for k, v in out.items()}, {k: np.asarray(v) for k, v in params.items()}


def test_prefill_cached_trips_and_decode_logits_decode_each_left_padded_row_at_its_own_positions():
    """Greedy (temperature 0): each row's next token is the argmax of its last token's logits at its
    position counted from its first real token, the padding never cached; `decode-logits` is the
    entry's logits over the whole row at those positions."""
    lengths = np.array([4, 2, 3])
    row = np.array([[1, 2, 3, 4], [0, 0, 5, 6], [0, 7, 8, 2]], np.int32)
    out, w = _generate(CACHED, {"row": row, "stride": np.ones((B, 1), np.int32)})   # 0 is the padding
    start = lengths - P
    want = np.concatenate([row, np.zeros((B, S - P), np.int32)], axis=1)
    for at in range(P, S):
        pos = start + at - 1
        logits = (w["embed"][want[np.arange(B), at - 1]] + w["pos"][pos]) @ w["out"]
        want[:, at] = logits.argmax(-1)
    np.testing.assert_array_equal(out["out"], want)
    np.testing.assert_array_equal(out["start"], start)
    positions = start[:, None] + np.arange(S)[None, :]
    h = w["embed"][want] + w["pos"][np.maximum(positions, 0)]
    np.testing.assert_allclose(out["logits"], h @ w["out"], rtol=1e-5, atol=1e-5)
    for b in range(B):   # the cache holds each real position's entry, up to the last fed (S - 2), and nothing else
        real = positions[b][(positions[b] >= 0) & (np.arange(S) <= S - 2)]
        np.testing.assert_allclose(out["k"][b, real, 0], h[b, positions[b] >= 0][: len(real)], rtol=1e-5, atol=1e-6)
        assert not out["k"][b, np.max(real) + 1:].any()


def test_sample_trip_writes_the_token_from_the_column_before_each_trip():
    """At temperature 0 each trip writes, at its column, the argmax of `(lm row)`'s logits at the
    column before it; `repeat-prompts` gives each prompt twice."""
    row = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [2, 2, 2, 2]], np.int32)
    out, w = _generate(SAMPLED, {"row": row, "stride": np.ones((B, 1), np.int32)})
    want = np.concatenate([np.repeat(row, 2, axis=0), np.zeros((2 * B, S - P), np.int32)], axis=1)
    for at in range(P, S):
        logits = (w["embed"][want] + w["pos"][None]) @ w["out"]
        want[:, at] = logits[:, at - 1].argmax(-1)
    np.testing.assert_array_equal(out["out"], want)


def test_sample_trip_samples_salted_and_its_column_is_a_scalar():
    sampled = RunFile(SAMPLED).edit("defgenerate :step (sample-trip", "prompt) trip 0)", "prompt) trip 1)")
    a, _ = _generate(sampled, {"row": np.ones((B, P), np.int32), "stride": np.ones((B, 1), np.int32)})
    assert (a["out"][:, :P] == 1).all() and a["out"].max() < V
    assert len({tuple(r) for r in a["out"][:, P:]}) > 1     # the rows' draws differ
    from helpers import check, marked
    bad = RunFile(SAMPLED).set("defgenerate :step (sample-trip (+", "(+ (iota [6] :axis 0) prompt)")
    check(marked(bad, "(+ (iota [6] :axis 0) prompt)", "E-SHAPE-005"))


def test_a_where_on_two_numbers_lowers_to_the_branch_it_selects():
    """`generalized-jsd` at beta 0 is `forward-kl` bit for bit, value and gradient, under `jit`: its
    `(where (<= beta 0.0) ...)` compares two numbers, so the lowering takes that branch alone (the
    others are never differentiated: XLA does not fold their zeros-times-operands backward away)."""
    x = _gkd_inputs(2)
    env = {k: jnp.asarray(v) for k, v in x.items()}

    def jitted(text):
        _, fn = lowered_expression(text, types_of(x), clean=True)
        f = jax.jit(lambda s: fn({**env, "s": s}))
        return f, jax.jit(jax.grad(f))
    jsd, jsd_grad = jitted("(generalized-jsd s t 0.0 m)")
    fwd, fwd_grad = jitted("(forward-kl s t m)")
    assert np.asarray(jsd(env["s"])) == np.asarray(fwd(env["s"]))
    np.testing.assert_array_equal(np.asarray(jsd_grad(env["s"])), np.asarray(fwd_grad(env["s"])))
    ops = lambda f: len(jax.make_jaxpr(f)(env["s"]).eqns)   # noqa: E731
    assert ops(jsd_grad) == ops(fwd_grad)      # the mixture's branch is not in the graph


def test_explain_prices_a_where_on_two_numbers_as_the_lowering_runs_it():
    """`sexpgpu explain`'s trace folds the comparison of two numbers and takes the branch it selects, as
    the lowering does: `generalized-jsd` at beta 0 costs what `forward-kl` costs."""
    from sexpgpu_lang.explain import explain

    def train_cost(loss):
        text = RunFile(CACHED).set("objective", f"(objective (lambda (b ctx) (let* ((lg (lm (field b :out)))) {loss})))")
        g = {g["name"]: g for g in explain(program_of(text))["graphs"]}["train"]
        return g["flops"], g["live"]["total"]
    jsd = train_cost("(generalized-jsd lg (stop-gradient lg) 0.0 (> (field b :out) 0))")
    assert jsd == train_cost("(forward-kl lg (stop-gradient lg) (> (field b :out) 0))")
    assert jsd != train_cost("(generalized-jsd lg (stop-gradient lg) 0.5 (> (field b :out) 0))")
