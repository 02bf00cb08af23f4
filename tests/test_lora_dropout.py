"""LoRA dropout (`:lora (... :dropout p)`, sexpgpu_runtime/lowering/lora.py, docs/checkpoints.md "LoRA
adapters"): the training step's forward applies each adapter unmerged on its input dropped out, as
peft's `Linear.forward` does in training; every other graph (the generator, a pass) folds it. Checked
here: the unmerged form at p 0 is the folded one to rounding (on the Llama fixture, whose targets are
contracted by einsums with one and two input axes and by a matmul); at p > 0 the training graph's
loss and gradients are a plain JAX computation of `x W + scale * (dropout(x) A) B` with the same masks
(one per step, microbatch, target and layer), and a dropped-out contraction's mean over many masks is
the undropped one; with peft's masks injected, peft's train-mode logits, loss and gradients
(tests/fixtures/lora/dropout.npz); the generator and a pass do not depend on p; a run trains and resumes bit-exact;
the export records p as `lora_dropout`."""
from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import program_of, run
from runfile import RunFile
from test_lora import LORA, fixture_text, small

P = 0.3
EXTRA = """
(defgenerate :trips 2
  :init (lambda (batch ctx) (list :gen (field batch :row)))
  :step (lambda (state trip ctx) (list :gen (argmax (model (getf state :gen))))))

(pass ev :loader train :every 1 :batches 1)
"""


def dropout_text(p: float) -> RunFile:
    """tests/test_lora.py's small model (a 2-layer repeated block whose `:wq` an einsum reads, and the
    root's `:out`, a matmul's) with adapters of dropout `p` on both, a generator and a pass."""
    return RunFile(small(f":lora (:targets [:wq :out] :rank 2 :alpha 4 :dropout {p})")).add(EXTRA, after="model")


def _state(program):
    """The program's starting parameters with the adapters moved off their start (B is zero there,
    which would hide the adapters and their dropout)."""
    import jax
    from sexpgpu_runtime.weights.pretrained import initial_params
    t, f = initial_params(program, 0)
    leaves, tree = jax.tree_util.tree_flatten(t)
    keys = jax.random.split(jax.random.key(7), len(leaves))
    t = tree.unflatten([x + 0.2 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)])
    return t, f


def _batch():
    return {"row": np.arange(64, dtype=np.int32).reshape(8, 8) * 5 % 16, "stride": np.ones((8, 1), np.int32)}


def _rows(step: int, microbatch: int):
    from sexpgpu_runtime.lowering.context import context_row
    return np.array([context_row(step, microbatch, 8 * microbatch)], np.int64)


def _train_graph(text: str):
    from sexpgpu_runtime.lowering.graphs import Graphs
    from sexpgpu_runtime.weights.optim import make_optimizer
    program = program_of(text)
    return program, Graphs(program, make_optimizer(program.run.optimizer))


def test_dropout_outside_0_to_1_is_refused_and_p_is_the_adapters():
    from helpers import check
    check(small(":lora (:targets [:wq] :rank 2 :dropout 1)", "1"))
    check(small(":lora (:targets [:wq] :rank 2 :dropout 2.5)", "2.5"))
    p = program_of(dropout_text(0.05))
    assert {(a.path, a.dropout) for a in p.adapters} == {(("blocks", "wq"), 0.05), (("out",), 0.05)}


def test_unmerged_at_dropout_0_is_the_folded_form_to_rounding_loss_and_gradients():
    """On the Llama fixture with peft's adapter: `wq`, `wv` (einsum, one input axis), `wo` (einsum, two
    input axes: heads and head width) and `w-gate` (a matmul) unmerged, against the fold."""
    import jax
    import jax.numpy as jnp
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lora import dropout_key
    from sexpgpu_runtime.lowering.lowering import Effects, run_phase
    from sexpgpu_runtime.weights.params import merge
    from sexpgpu_runtime.weights.pretrained import initial_params
    program = program_of(fixture_text(), str(LORA / "x.sx"))
    trainable, frozen = initial_params(program, 0)
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(2, 1, 0).items()}
    ids = np.load(LORA / "lora.npz")["ids"]
    batch = {"row": jnp.asarray(ids), "stride": jnp.ones((ids.shape[0], 1), jnp.int32)}

    def loss(t, unmerged: bool):
        fx = Effects(jax.random.key(0))
        if unmerged:
            fx.dropout_key, fx.unmerged = dropout_key(fx.seed_key, ctx), True
        inputs = run_phase(program.prepare, [batch, ctx], merge(t, frozen), fx)
        return run_phase(program.objective, [inputs, ctx], merge(t, frozen), fx)

    folded, g_folded = jax.jit(jax.value_and_grad(lambda t: loss(t, False)))(trainable)
    unmerged, g_unmerged = jax.jit(jax.value_and_grad(lambda t: loss(t, True)))(trainable)
    np.testing.assert_allclose(float(unmerged), float(folded), rtol=2e-6)
    for path, a in jax.tree_util.tree_leaves_with_path(g_folded):
        b = dict(jax.tree_util.tree_leaves_with_path(g_unmerged))[path]
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5 * float(jnp.abs(a).max()))


def _plain_loss(t, f, step: int, microbatch: int, p: float, seed: int = 0):
    """The small model's loss written in plain JAX: every adapted contraction `x W + scale * x' (A B)`,
    x' = x * mask / (1 - p), each mask `bernoulli(1 - p)` of x's shape from the key of its target and
    layer (lora.py `target_key`) under the microbatch's (`dropout_key`)."""
    import jax
    import jax.numpy as jnp
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lora import dropout_key, target_key
    key = dropout_key(jax.random.key(seed), make_ctx(step, microbatch, 0))
    scale = 4 / 2

    def drop(x, k):
        return x * jax.random.bernoulli(k, 1 - p, x.shape) / (1 - p)

    row = jnp.asarray(_batch()["row"])
    h = f["embed"][row]
    for i in range(2):
        wq, gain = f["blocks"]["wq"][i], f["blocks"]["gain"][i]
        delta = (t["blocks"]["wq.lora-a"][i] @ t["blocks"]["wq.lora-b"][i]).reshape(wq.shape)
        x = drop(h, target_key(key, ("blocks", "wq"), (i,)))
        y = jnp.einsum("btd,dhk->bthk", h, wq) + scale * jnp.einsum("btd,dhk->bthk", x, delta)
        h = gain * y.reshape(8, 8, 32)
    logits = h @ f["out"] + scale * (drop(h, target_key(key, ("out",))) @ t["out.lora-a"] @ t["out.lora-b"])
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, row[..., None], axis=-1))


def test_the_training_loss_and_gradients_are_the_masked_formula_with_the_run_s_masks():
    import jax
    program, g = _train_graph(dropout_text(P))
    t, f = _state(program)
    losses = {}
    for step, mb in ((3, 0), (3, 1), (4, 0)):
        (loss,), (grads,), *_ = g.grads(t, f, _batch(), _rows(step, mb), {})
        want, want_g = jax.value_and_grad(_plain_loss)(t, f, step, mb, P)
        np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
        for path, a in jax.tree_util.tree_leaves_with_path(want_g):
            b = dict(jax.tree_util.tree_leaves_with_path(grads))[path]
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)
        losses[step, mb] = float(loss)
    # a new mask every microbatch and step; the same one for the same step and microbatch
    assert len(set(losses.values())) == 3
    assert float(g.grads(t, f, _batch(), _rows(3, 1), {})[0][0]) == losses[3, 1]
    _, g0 = _train_graph(dropout_text(0.0))
    (loss0,), *_ = g0.grads(t, f, _batch(), _rows(3, 0), {})
    assert abs(float(loss0) - losses[3, 0]) > 1e-4   # the dropout matters
    np.testing.assert_allclose(float(loss0), float(_plain_loss(t, f, 3, 0, 0.0)), rtol=1e-5)


def test_the_training_forward_with_peft_s_masks_is_peft_s_train_mode():
    """tests/fixtures/lora/dropout.npz (benchmarks/peft_parity.py): peft's model in train mode with
    `lora_dropout` 0.25, each module's mask given; sexpgpu's training forward with the same masks in
    place of its own gives peft's logits, loss and adapters' gradients (`wo`: two input axes)."""
    from benchmarks.hf_parity import relative
    from benchmarks.peft_parity import OURS, peft_grad, sexpgpu_train_mode
    from sexpgpu_runtime.weights.pretrained import initial_params
    want = dict(np.load(LORA / "dropout.npz"))
    p = float(want["p"])
    program = program_of(fixture_text(lora=f'\n  :lora (:targets [:wq :wv :wo :w-gate] :rank 4 :alpha 8 :dropout {p} '
                                           ':pretrained "adapter")'), str(LORA / "x.sx"))
    trainable, frozen = initial_params(program, 0)
    logits, loss, grads = sexpgpu_train_mode(program, trainable, frozen, want["ids"], want)
    assert relative(logits, want["logits"]) <= 1e-5
    assert relative(want["logits"], np.load(LORA / "lora.npz")["logits"]) > 0.1   # the masks matter
    assert loss == pytest.approx(float(want["loss"]), rel=1e-5)
    for key in OURS.values():
        for part in ("lora-a", "lora-b"):
            ours = np.asarray(grads["layers"][f"{key}.{part}"])
            assert relative(ours, peft_grad(want, key, part, ours.shape[0])) <= 1e-4, (key, part)


def test_a_dropped_out_contraction_is_the_undropped_one_in_expectation():
    """The mean over 4000 masks of `x W + scale * (x' A) B` (x' kept with probability 1 - p, scaled by
    1 / (1 - p)) is the folded `x (W + scale A B)`: the dropout is unbiased, as torch's."""
    import jax
    import jax.numpy as jnp
    from sexpgpu_runtime.lowering.lora import LoraWeight, contract
    ks = jax.random.split(jax.random.key(3), 4)
    x = jax.random.normal(ks[0], (4, 16))
    w, a, b = (jax.random.normal(k, s) * 0.3 for k, s in zip(ks[1:], [(16, 4, 2), (16, 3), (3, 8)]))

    def once(key):
        lw = LoraWeight(w, a, b, key, 2.0, 0.5, 1)
        return contract("einsum", ["td,dhk->thk", x, lw],
                        {"subscripts": "td,dhk->thk", "dtype": "f32"})

    keys = jax.random.split(jax.random.key(11), 4000)
    mean = jnp.mean(jax.lax.map(once, keys, batch_size=500), axis=0)
    folded = jnp.einsum("td,dhk->thk", x, LoraWeight(w, a, b, None, 2.0, 0.5, 1).folded())
    one = once(keys[0])
    assert float(jnp.abs(one - folded).max()) > 0.3   # one mask moves it
    assert float(jnp.abs(mean - folded).max()) < 0.05 * float(jnp.abs(folded).max())


def test_the_generator_and_a_pass_do_not_depend_on_the_dropout():
    _, g = _train_graph(dropout_text(P))
    _, g0 = _train_graph(dropout_text(0.0))
    program = program_of(dropout_text(P))
    t, f = _state(program)
    rows = _rows(3, 0)
    made = [np.asarray(graphs.generate(t, f, _batch(), rows, False)[2]["gen"]) for graphs in (g, g0)]
    assert np.array_equal(made[0], made[1])
    passes = [graphs.passes["ev"](t, f, _batch(), _rows(3, 0), {})[0] for graphs in (g, g0)]
    assert float(passes[0]) == float(passes[1])
    (train,), *_ = g.grads(t, f, _batch(), rows, {})
    assert float(train) != float(passes[0])   # (only the training step drops out)


def test_explain_counts_the_unmerged_path_in_training_alone():
    """The training graph's live set grows by the dropped-out inputs and the rank-r products the
    gradient keeps; the pass (folded) is unchanged."""
    from sexpgpu_lang.explain import step_graphs
    plain, dropped = (step_graphs(program_of(dropout_text(p)), 1, "accelerator") for p in (0.0, P))
    assert dropped["train"].temps > plain["train"].temps
    assert dropped["pass ev"].temps == plain["pass ev"].temps


def test_the_adapter_export_records_the_dropout_as_peft_s_lora_dropout(tmp_path):
    from sexpgpu_runtime.weights.pretrained import export_params, initial_params
    text = fixture_text(lora='\n  :lora (:targets [:wq :wv :wo :w-gate] :rank 4 :alpha 8 :dropout 0.1 :pretrained "adapter")')
    program = program_of(text, str(tmp_path / "x.sx"))
    trainable, frozen = initial_params(program, 0)
    export_params(tmp_path / "adapter", trainable, frozen, program=program, adapter=True)
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["lora_dropout"] == 0.1
    layout = json.loads((LORA / "layout.json").read_text())
    assert set(config) <= set(layout["config"]) and config["r"] == layout["config"]["r"]
    # and a run starts from it again (its config read as peft's)
    again = program_of(RunFile(text).set("defmodel student :lora :pretrained", json.dumps(str(tmp_path / "adapter"))),
                       str(tmp_path / "x.sx"))
    t2, _ = initial_params(again, 0)
    assert np.array_equal(np.asarray(t2["layers"]["wq.lora-a"]), np.asarray(trainable["layers"]["wq.lora-a"]))


@pytest.mark.slow
def test_a_run_with_dropout_trains_and_resumes_bit_exact(tmp_path):
    """Two microbatches a step (the later one adding into the running sum in its backward scan), a
    checkpoint every 3 steps; a crash at step 7 resumes from step 6 and ends with the uninterrupted
    run's parameters and metrics."""
    from test_checkpoint import Crash, assert_same_params, rows
    text = dropout_text(P).set("run", "(run :loader train :steps 10 :microbatches 2 :seed 3 :optimizer (adam :lr 3e-2)\n"
                                      "     :log (:every 1) :checkpoint (:every 3 :keep 2))")
    full = run(text, tmp_path / "full", steps=10)
    history = [r["loss"] for r in rows(tmp_path / "full")]
    assert history[-1] < history[0] - 0.05   # it trains

    def before_trip(step, trip):
        if (step, trip) == (7, 1):
            raise Crash

    with pytest.raises(Crash):
        run(text, tmp_path / "cut", steps=10, on_trip=before_trip)
    resumed = run(text, tmp_path / "cut", steps=10, resume=True)
    assert resumed.start == 6
    assert_same_params(resumed.trainable, full.trainable)
    assert rows(tmp_path / "cut") == rows(tmp_path / "full")
