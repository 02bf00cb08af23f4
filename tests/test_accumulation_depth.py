"""Gradient accumulation at depth: a repeated block's backward scan adds each layer's gradient into the
running sum in place (sexpgpu_runtime.lowering.accumulate `scan_summing`), so a later microbatch's training
graph holds no second gradient-sized buffer; the bits are those of summing every microbatch's whole
gradient (main's step before the running sum moved into the training graph), under every remat policy.
The model is tests/fixtures/tinyllama.sx at a tiny shape."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import program_of
from sexpgpu_runtime.lowering.training_graphs import accumulate
from sexpgpu_runtime import RunOptions
from sexpgpu_runtime.run.train import Trainer
from test_accumulation import bits, old_step
from test_explain_depth import tinyllama_text

pytestmark = pytest.mark.slow


TINY = {"vocab": 64, "seq": 16, "width": 32, "heads": 4, "kv-heads": 2, "hidden": 48, "layers": 2, "batch": 4}


def tiny_text(microbatches: int, remat: str = ":nothing-saveable") -> str:
    return tinyllama_text(microbatches, remat, **TINY).replace(":precision :bf16", ":precision :f32")


def trainer_of(tmp_path, microbatches: int, remat: str = ":nothing-saveable") -> Trainer:
    return Trainer(program_of(tiny_text(microbatches, remat)), RunOptions(steps=2, run_dir=tmp_path, quiet=True))


@pytest.mark.parametrize("mb,remat", [(2, ":nothing-saveable"), (3, ":dots-saveable"), (2, "")])
def test_the_backward_scan_sums_give_the_bits_of_the_summed_list(tmp_path, mb, remat):
    trainer = trainer_of(tmp_path, mb, remat)
    new = old = trainer.initial_state()
    for _ in range(2):
        new, reports = trainer.step(new)
        old = old_step(trainer, old)
    a, b = bits(new.trainable), bits(old.trainable)
    assert ("layers", "w-gate") in a and a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert trainer.graphs.traces["train summing"] == 1 and trainer.graphs.traces["accumulate"] == 0


def test_the_sum_is_the_sum_of_the_microbatch_gradients_by_hand(tmp_path):
    """Against plain JAX: the sum `train summing` returns is the old sum plus this microbatch's gradient
    as `jax.grad` of the training graph's loss gives it (the first group's graph, unchanged)."""
    trainer = trainer_of(tmp_path, 2)
    g, state = trainer.graphs, trainer.initial_state()
    batch, rows, _ = trainer.batches.next_group(state.step, 1, 0)
    old = jax.tree_util.tree_map(lambda x: jnp.full_like(x, 0.25), state.trainable)
    _, total, _, _, _, _ = g.grads_summing(state.trainable, state.frozen, batch, rows, state.counters, g.no_bad(), old)
    _, gs, _, _, _, _ = g.grads(state.trainable, state.frozen, batch, rows, state.counters, g.no_bad())
    want = jax.tree_util.tree_map(lambda a, b: np.asarray(a) + np.asarray(b), old, gs[0])
    for k, v in bits(total).items():
        assert np.array_equal(v, bits(want)[k]), k


def test_a_later_microbatch_holds_no_second_gradient_buffer(tmp_path):
    """XLA's own memory analysis of the two training graphs, the running sum donated: the graph that
    adds into the sum holds what the first group's holds (which returns its gradient), beside at most a
    layer's gradient, not the stack's; the graph that returns the gradient for a separate add holds a
    second gradient-sized buffer."""
    trainer = trainer_of(tmp_path, 2)
    g, state = trainer.graphs, trainer.initial_state()
    batch, rows, _ = trainer.batches.host_group(state.step, 0, 0)
    args = (state.trainable, state.frozen, batch, rows, state.counters, g.no_bad())
    grad = sum(x.nbytes for x in jax.tree_util.tree_leaves(state.trainable))
    layer = sum(x.nbytes for x in jax.tree_util.tree_leaves(state.trainable["layers"])) // TINY["layers"]

    def live(fn, *a, donate=()):
        m = jax.jit(fn, donate_argnums=donate).lower(*a).compile().memory_analysis()
        return m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes

    first = live(g.training._grads, *args)
    summing = live(g.training._grads_summing, *args, state.trainable, donate=(6,))
    separate = live(lambda *a: (lambda r: (r[0], accumulate(a[-1], r[1]), *r[2:]))(g.training._grads(*a[:-1])),
                    *args, state.trainable, donate=(6,))
    assert abs(summing - (first + 0)) <= layer, (summing, first, layer)
    assert separate >= first + grad - layer, (separate, first, grad)
