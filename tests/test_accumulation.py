"""Gradient accumulation: microbatch gradients summed into one running buffer as they are produced
(sexpgpu_runtime.lowering.graphs `Graphs.train_group`), with the same float additions, in the same order, as
summing the list of every microbatch's gradient at the update; and explain's memory plan holding one
gradient buffer whatever `:microbatches` is."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from helpers import program_of
from sexpgpu_lang.explain import explain
from sexpgpu_runtime import RunOptions
from sexpgpu_runtime.weights.params import flatten
from sexpgpu_runtime.run.train import Trainer

pytestmark = pytest.mark.slow


RUN = """
(def vocab 16)
(def seq 8)
(def dim 32)

(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 16
  :fields (:row [seq] :i32 :stride [1] :i32))

(defmodel lm
  :params (:embed (normal [vocab dim] :std 0.1)
           :gain (ones [dim])
           :w (normal [dim vocab] :std 0.1)
           :b (zeros [vocab]))
  :apply (lambda (self row)
           (+ (matmul (* (embedding (getf self :embed) row) (getf self :gain)) (getf self :w)) (getf self :b))))

(model lm)

(prepare (lambda (batch ctx)
  (list :input (field batch :row)
        :target (mod (+ (field batch :row) (field batch :stride)) vocab))))

(objective (lambda (inputs ctx)
  (mean (cross-entropy (model (getf inputs :input)) (getf inputs :target)))))

(run :loader train :steps 3 :microbatches MB :stack ST :seed 0 :optimizer (adam :lr 1e-2))
"""


def run_text(mb: int, stack: int) -> str:
    return RUN.replace(":microbatches MB", f":microbatches {mb}").replace(":stack ST", f":stack {stack}")


def old_step(trainer: Trainer, state):
    """The step as it was before the running sum: every microbatch's gradient kept in a list, summed in
    microbatch order at the update (`total = g0; total = total + g` for each later g), scaled, optax."""
    g = trainer.graphs
    grads, records, counters, bad = [], state.records, state.counters, g.no_bad()
    for group in range(trainer.layout.groups):
        batch, rows, records = trainer.batches.next_group(state.step, group, records)
        _, gs, _, _, counters, bad = g.grads(state.trainable, state.frozen, batch, rows, counters, bad)
        grads += gs

    @jax.jit
    def update(trainable, opt_state, grads):
        total = grads[0]
        for x in grads[1:]:
            total = jax.tree_util.tree_map(jnp.add, total, x)
        scale = 1.0 / trainer.layout.microbatches
        total = jax.tree_util.tree_map(lambda x: x * jnp.asarray(scale, x.dtype), total)
        updates, opt_state = trainer.optimizer.update(total, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state

    trainable, opt_state = update(state.trainable, state.opt_state, grads)
    return type(state)(state.step + 1, trainable, state.frozen, opt_state, records, counters)


def bits(tree) -> dict:
    return {k: np.asarray(v).view(np.uint32) for k, v in flatten(tree).items()}


@pytest.mark.parametrize("mb,stack", [(1, 1), (4, 1), (4, 2), (4, 4), (6, 3)])
def test_the_running_sum_gives_the_bits_of_the_summed_list(tmp_path, mb, stack):
    trainer = Trainer(program_of(run_text(mb, stack)), RunOptions(steps=3, run_dir=tmp_path, quiet=True))
    assert trainer.layout.stack == stack
    new = old = trainer.initial_state()
    for _ in range(3):
        new, _ = trainer.step(new)
        old = old_step(trainer, old)
    a, b = bits(new.trainable), bits(old.trainable)
    assert a.keys() == b.keys() == {("embed",), ("gain",), ("w",), ("b",)}
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert new.records == old.records == 3 * mb * 16
    traces = trainer.graphs.traces
    # one add graph for the first group's copies after its first, one for every later stacked group; an
    # unstacked later group's training graph adds into the sum itself (`train summing`); each traced once
    assert traces["accumulate first"] == (1 if stack > 1 else 0)
    assert traces["accumulate"] == (1 if mb > stack > 1 else 0)
    assert traces["train summing"] == (1 if mb > stack == 1 else 0)
    assert all(n == 1 for n in traces.values()), traces


def plan(mb: int, stack: int = 1) -> dict:
    report = explain(program_of(run_text(mb, stack)))
    return report["memory"], {p["phase"]: p for p in report["plan"]}


def test_the_peak_does_not_grow_with_microbatches():
    one, one_phases = plan(1)
    mems = {mb: plan(mb) for mb in (2, 4, 16)}
    grad = one["trainable"]                       # one gradient-sized buffer: the running sum
    assert "accumulate" not in one_phases and "train summing" not in one_phases and one["gradients_held"] == 0
    for mb, (mem, phases) in mems.items():
        # the same microbatch: the first group's training graph is the one of a single microbatch
        assert mem["train"] == one["train"], mb
        assert mem["gradients_held"] == grad, mb
        assert phases["update"]["parts"]["gradients"] == grad, mb
        # a later group's graph adds into the held sum in place (`Graphs.train_group`): no add graph
        assert "accumulate" not in phases and phases["train summing"]["live"] + grad == phases["train"]["live"]
        # whatever :microbatches is, the peak of a single microbatch
        assert mem["peak"] == one["peak"], mb


def test_a_stacked_group_holds_its_copies_but_not_the_earlier_groups():
    mem4, phases4 = plan(16, 4)
    mem2, _ = plan(8, 4)
    assert phases4["accumulate"]["parts"]["gradients"] == 4 * mem4["trainable"]
    assert mem4["peak"] == mem2["peak"] and mem4["gradients_held"] == mem4["trainable"]
