"""Optimizer settings: learning-rate schedules (optax's, by optax's names), the weight-decay mask of
`adamw` and `lion`, their lint-time checks, the `lr` of every metrics row, and resume with a schedule.
Numbers are compared with optax called directly."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from helpers import fixture_text, program_of, run
from sexpgpu_lang import analyze
from sexpgpu_runtime.weights.optim import decay_mask, embedding_tables, learning_rate, make_optimizer
from sexpgpu_runtime.weights.params import flatten, init_params
from test_accumulation import run_text

STEPS = (0, 1, 5, 9, 10, 11, 50, 99, 100, 150)
SCHEDULES = [
    ("(constant :value 2e-3)", optax.constant_schedule(2e-3)),
    ("(linear :init-value 1e-3 :end-value 1e-4 :transition-steps 50 :transition-begin 10)",
     optax.linear_schedule(1e-3, 1e-4, 50, 10)),
    ("(cosine-decay :init-value 1e-3 :decay-steps 100 :alpha 0.1)", optax.cosine_decay_schedule(1e-3, 100, 0.1)),
    ("(warmup-cosine-decay :peak-value 3e-4 :warmup-steps 10 :decay-steps 100 :end-value 3e-5)",
     optax.warmup_cosine_decay_schedule(0.0, 3e-4, 10, 100, 3e-5)),
    ("(warmup-constant :init-value 1e-5 :peak-value 1e-3 :warmup-steps 10)",
     optax.warmup_constant_schedule(1e-5, 1e-3, 10)),
]


def with_optimizer(opt: str, text: str | None = None) -> str:
    return (text or run_text(2, 1)).replace("(adam :lr 1e-2)", opt)


@pytest.mark.parametrize("form,want", SCHEDULES, ids=[s.split()[0][1:] for s, _ in SCHEDULES])
def test_a_schedule_is_optax_s_schedule_of_that_name(form, want):
    text = with_optimizer(f"(adamw :lr {form})").replace(":steps 3", ":steps 200")
    spec = program_of(text).run.optimizer
    lr = learning_rate(spec)
    for k in STEPS:
        assert lr(k) == float(want(k)), (form, k)


@pytest.mark.slow
def test_the_update_follows_the_schedule_and_the_mask_bit_for_bit():
    form, sched = SCHEDULES[3]
    program = program_of(with_optimizer(f"(adamw :lr {form} :weight-decay 0.1)").replace(":steps 3", ":steps 200"))
    ours = make_optimizer(program.run.optimizer, program)
    mask = {"embed": False, "gain": False, "w": True, "b": False}
    theirs = optax.adamw(sched, weight_decay=0.1, mask=mask)
    params, _ = init_params(program.params, 0)
    s1, s2, p1, p2 = ours.init(params), theirs.init(params), params, params
    key = jax.random.key(1)
    for step in range(12):
        key, sub = jax.random.split(key)
        grads = jax.tree_util.tree_map(lambda x: jax.random.normal(sub, x.shape, x.dtype), params)
        u1, s1 = ours.update(grads, s1, p1)
        u2, s2 = theirs.update(grads, s2, p2)
        p1, p2 = optax.apply_updates(p1, u1), optax.apply_updates(p2, u2)
    for k, v in flatten(p1).items():
        assert np.array_equal(np.asarray(v).view(np.uint32), np.asarray(flatten(p2)[k]).view(np.uint32)), k


def decayed(opt: str, text: str | None = None) -> dict:
    """Which parameters one step of `opt` changes when every gradient is 0 (then only the decay moves a
    parameter: adam's and lion's own step is 0 for a zero gradient), checked against optax's masked decay."""
    program = program_of(with_optimizer(opt, text))
    params, _ = init_params(program.params, 0)
    params = jax.tree_util.tree_map(lambda x: x + 0.5, params)   # no parameter is 0 (a gain of ones, zeros bias)
    optimizer = make_optimizer(program.run.optimizer, program)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    updates, _ = optimizer.update(zeros, optimizer.init(params), params)
    out = {}
    for k, u in flatten(updates).items():
        p = np.asarray(flatten(params)[k])
        u = np.asarray(u)
        out[k[-1]] = bool(np.any(u != 0))
        if out[k[-1]]:   # decoupled decay: -lr * wd * p, as optax computes it
            lr, wd = program.run.optimizer[1]["lr"], program.run.optimizer[1]["weight-decay"]
            np.testing.assert_allclose(u, -lr * wd * p, rtol=1e-6)
    return out


def test_adamw_decays_only_matrices_by_default_not_gains_biases_or_embeddings():
    assert decayed("(adamw :lr 1e-2 :weight-decay 0.1)") == {"embed": False, "gain": False, "w": True, "b": False}


def test_lion_has_the_same_default_mask():
    assert decayed("(lion :lr 1e-2 :weight-decay 0.1)") == {"embed": False, "gain": False, "w": True, "b": False}


def test_the_mask_can_decay_everything_or_named_keys():
    assert decayed("(adamw :lr 1e-2 :weight-decay 0.1 :decay-mask :all)") == dict.fromkeys(
        ["embed", "gain", "w", "b"], True)
    assert decayed("(adamw :lr 1e-2 :weight-decay 0.1 :decay-mask [:embed :b])") == {
        "embed": True, "gain": False, "w": False, "b": True}


def test_embedding_tables_are_found_through_take_directly_and_through_functions():
    # the fixture reads :embed, :first and :second with `take`; :hidden and :out are matmul weights
    program = program_of(fixture_text())
    assert embedding_tables(program) == {("embed",), ("first",), ("second",)}
    assert decay_mask(program, "matrices") == {"embed": False, "first": False, "second": False,
                                               "hidden": True, "out": True}
    # through the standard library's `embedding` (a function whose argument is the table)
    assert embedding_tables(program_of(run_text(2, 1))) == {("embed",)}


def diagnostics(opt: str, steps: int = 200):
    text = with_optimizer(opt).replace(":steps 3", f":steps {steps}")
    res = analyze(text, "x.sx")
    return [(d.code, text[d.span.start:d.span.end], d.message, d.help) for d in res.diagnostics]


def test_an_unknown_schedule_is_reported_at_its_name_with_optax_s_spelling_read():
    [(code, at, msg, help)] = diagnostics("(adamw :lr (warmup_cosine_decay_schedule :peak-value 3e-4))")
    assert (code, at) == ("E-OPT-001", "warmup_cosine_decay_schedule")
    assert "did you mean `warmup-cosine-decay`?" in msg and "(warmup-cosine-decay" in help
    [(code, at, msg, _)] = diagnostics("(adamw :lr (cosine :init-value 1e-3 :decay-steps 10))")
    assert (code, at) == ("E-OPT-001", "cosine") and "`cosine-decay`" in msg


def test_schedule_settings_out_of_range_are_reported_at_the_value():
    assert diagnostics("(adam :lr (warmup-cosine-decay :peak-value -3e-4 :warmup-steps 10 :decay-steps 100))") == [
        ("E-OPT-002", "-3e-4", "`:peak-value` of `warmup-cosine-decay` must be greater than 0, got -0.0003",
         "a number greater than 0, like `:peak-value 3e-4`")]
    [(code, at, msg, _)] = diagnostics("(adam :lr (linear :init-value 1e-3 :end-value 0 :transition-steps 0))")
    assert (code, at, msg) == ("E-OPT-002", "0", "`:transition-steps` of `linear` must be 1 or more, got 0")
    [(code, at, msg, _)] = diagnostics("(adam :lr (cosine-decay :init-value 1e-3 :decay-steps 10 :alpha 2))")
    assert (code, at) == ("E-OPT-002", "2") and "from 0 to 1" in msg
    [(code, at, msg, _)] = diagnostics("(adam :lr 1e-3 :b2 1.0)")
    assert (code, at) == ("E-OPT-002", "1.0") and "1 excluded" in msg


def test_a_warmup_not_shorter_than_the_decay_is_an_error():
    [(code, at, msg, help)] = diagnostics("(adam :lr (warmup-cosine-decay :peak-value 3e-4 :warmup-steps 100 "
                                          ":decay-steps 100))")
    assert (code, at) == ("E-OPT-002", "100") and "must be less than `:decay-steps 100`" in msg
    assert "the run's `:steps`" in help


def test_a_missing_setting_is_reported_at_the_schedule():
    [(code, at, msg, _)] = diagnostics("(adam :lr (warmup-cosine-decay :warmup-steps 10 :decay-steps 100))")
    assert (code, at, msg) == ("E-FORM-005", "warmup-cosine-decay", "`warmup-cosine-decay` needs `:peak-value`")


def test_a_warmup_longer_than_the_run_is_a_warning_at_the_warmup():
    [(code, at, msg, help)] = diagnostics("(adam :lr (warmup-constant :peak-value 1e-3 :warmup-steps 300))", steps=200)
    assert (code, at) == ("W-OPT-001", "300")
    assert msg == "`:warmup-steps 300` is longer than the run's `:steps 200`: the learning rate never reaches `:peak-value`"
    assert "shorten the warmup" in help
    assert analyze(with_optimizer("(adam :lr (warmup-constant :peak-value 1e-3 :warmup-steps 300))")
                   .replace(":steps 3", ":steps 200"), "x.sx").program is not None   # a warning: it still runs


def test_a_bad_decay_mask_is_reported():
    [(code, at, msg, help)] = diagnostics("(adamw :lr 1e-3 :decay-mask [:w :bb])")
    assert (code, at) == ("E-OPT-003", ":bb") and "did you mean `:b`?" in msg and "`:embed`, `:gain`, `:w`, `:b`" in help
    [(code, at, _, _)] = diagnostics("(adamw :lr 1e-3 :decay-mask :some)")
    assert (code, at) == ("E-OPT-003", ":some")
    [(code, at, _, _)] = diagnostics("(adam :lr 1e-3 :decay-mask :all)")   # adam does not decay
    assert (code, at) == ("E-NAME-003", ":decay-mask")


@pytest.mark.slow
def test_every_logged_row_has_the_learning_rate_its_update_used(tmp_path):
    sched = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 8, 1e-3)
    text = with_optimizer("(adam :lr (warmup-cosine-decay :peak-value 1e-2 :warmup-steps 3 :decay-steps 8 "
                          ":end-value 1e-3))").replace(":steps 3", ":steps 8 :log (:every 1)")
    result = run(text, tmp_path, 8)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert [r["lr"] for r in rows] == [float(sched(s - 1)) for s in range(1, 9)]
    assert rows == result.history
    constant = run(run_text(2, 1), tmp_path / "c", 2)
    assert [r["lr"] for r in constant.history] == [1e-2, 1e-2]


@pytest.mark.slow
def test_resume_with_a_schedule_is_bit_exact(tmp_path):
    text = with_optimizer("(adamw :lr (warmup-cosine-decay :peak-value 1e-2 :warmup-steps 2 :decay-steps 6) "
                          ":weight-decay 0.1)").replace(":steps 3", ":steps 6 :log (:every 1) :checkpoint (:every 1)")
    full = run(text, tmp_path / "full", 6)
    run(text, tmp_path / "part", 3)
    resumed = run(text, tmp_path / "part", 6, resume=True)
    assert resumed.start == 3
    a, b = flatten(full.trainable), flatten(resumed.trainable)
    for k in a:
        assert np.array_equal(np.asarray(a[k]).view(np.uint32), np.asarray(b[k]).view(np.uint32)), k
    assert resumed.history == full.history[3:]
