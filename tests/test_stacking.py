"""Stacking keeps the bits of one microbatch at a time (docs/runtime.md, "Stacking"), on models with
reductions over a feature axis: layer-norm, mlp (gelu), a softmax, cross-entropy, in f32 and bf16,
with a sampling generator and a counter, and with a curriculum. Under `jax.vmap` each of these
differed after a step or three (XLA:CPU gives a batched reduction another kernel); the stacked
graphs now run the unstacked body once per microbatch (sexpgpu_runtime/lowering/stacking.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import run
from sexpgpu_runtime.weights.params import flatten
from sexpgpu_runtime.lowering.stacking import over_copies

pytestmark = pytest.mark.slow


MODEL = """
(def vocab 16)
(def seq 8)
(def dim 32)

(loader train :source (stride-rows :vocab vocab :seq seq) :batch 16 :fields (:row [seq] :i32 :stride [1] :i32))

(defmodel lm
  :params (:embed (normal [vocab dim] :std 0.1)
           :g (ones [dim]) :b (zeros [dim])
           :w1 (normal [dim 64] :std 0.1) :b1 (zeros [64]) :w2 (normal [64 dim] :std 0.1) :b2 (zeros [dim])
           :out (normal [dim vocab] :std 0.1))
  :apply (lambda (self row)
           (let* ((h (layer-norm (embedding (getf self :embed) row) (getf self :g) (getf self :b)))
                  (h (+ h (mlp h (getf self :w1) (getf self :b1) (getf self :w2) (getf self :b2))))
                  (h (* h (softmax h :axis -1))))
             (matmul h (getf self :out)))))

(model lm)
"""

PLAIN = MODEL + """
(prepare (lambda (batch ctx)
  (list :input (field batch :row) :target (mod (+ (field batch :row) (field batch :stride)) vocab))))

(objective (lambda (inputs ctx)
  (let* ((loss (mean (cross-entropy (model (getf inputs :input)) (getf inputs :target)))))
    (metric :loss loss)
    loss)))

(run :loader train :steps 3 :microbatches MB :stack ST :seed 0 :precision PREC :optimizer (adam :lr 1e-2) :log (:every 1))
"""

# GRPO-like: the generator samples each position with `categorical`, the reward is the fraction the
# rule gets right, and the loss of the sampled rows is weighted by it; a counter the objective reads.
SAMPLED = MODEL + """
(defgenerate :trips 3
  :init (lambda (batch ctx) (list :row (field batch :row) :stride (field batch :stride)))
  :step (lambda (state trip ctx)
          (let* ((row (getf state :row))
                 (column (iota [1 seq] :axis 1))
                 (drawn (categorical (model row) :salt trip :temperature 0.7)))
            (list :row (where (= column (+ (cast trip :i32) 1)) drawn row) :stride (getf state :stride))))
  :finish (lambda (state ctx)
            (let* ((row (getf state :row))
                   (truth (mod (+ (take row [0] :axis 1) (* (iota [1 seq] :axis 1) (getf state :stride))) vocab)))
              (list :sample row :reward (mean (cast (= row truth) :f32) :axes [1] :keepdims true)))))

(prepare (lambda (batch ctx)
  (counter :tokens (size (field batch :sample)))
  (list :input (field batch :sample)
        :target (mod (+ (field batch :sample) (field batch :stride)) vocab)
        :reward (field batch :reward))))

(objective (lambda (inputs ctx)
  (let* ((logp (log-softmax (model (getf inputs :input)) :axis -1))
         (picked (take-along-axis logp (expand-dims (getf inputs :target) :axis -1) :axis -1))
         (advantage (- (getf inputs :reward) (mean (getf inputs :reward))))
         (loss (neg (mean (* picked (expand-dims advantage :axis -1))))))
    (metric :loss loss)
    (metric :seen (cast (getf ctx :tokens) :f32))
    loss)))

(run :loader train :steps 3 :microbatches MB :stack ST :seed 0 :precision PREC :optimizer (adam :lr 1e-2) :log (:every 1))
"""

CURRICULUM = PLAIN + """
(loader easy :source (stride-rows :vocab vocab :seq seq :records 48) :batch 16 :fields (:row [seq] :i32 :stride [1] :i32))

(curriculum (stage :loader easy :records 48) (stage :loader train))
"""


# tests/differential/stacking.py's file 6 of seed 0 (rms-norm, a mean over time, attention, a
# sampling generator, noise on the logits): with the training graph's copies in a `lax.scan`, the
# embedding's gradient (a scatter-add in the loop's body) differed in 23 of its 256 entries after 2
# steps; side by side (stacking.py `copy_of`) it keeps the bits.
ATTENTION_SAMPLED = """
(def vocab 8)
(def seq 8)
(def dim 32)
(def hid 64)
(def heads 2)
(def kd 8)
(def batch 8)
(loader train :source (stride-rows :vocab vocab :seq seq) :batch batch :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel lm
  :params (:embed (normal [vocab dim] :std 0.3) :g0 (ones [dim])  :wq2 (normal [dim heads kd] :std 0.2) :wk2 (normal [dim heads kd] :std 0.2) :wv2 (normal [dim heads kd] :std 0.2) :wo2 (normal [heads kd dim] :std 0.2) :out (normal [dim vocab] :std 0.2))
  :apply (lambda (self row) (matmul (let* ((h (let* ((h (let* ((h (embedding (getf self :embed) row))) (rms-norm h (getf self :g0))))) (- h (mean h :axes [1] :keepdims true))))) (+ h (causal-self-attention h (getf self :wq2) (getf self :wk2) (getf self :wv2) (getf self :wo2)))) (getf self :out))))
(model lm)

(defgenerate :trips 2
  :init (lambda (batch ctx) (list :row (field batch :row) :stride (field batch :stride)))
  :step (lambda (state trip ctx)
          (let* ((row (getf state :row))
                 (column (iota [1 seq] :axis 1))
                 (guess (categorical (cast (model row) :f32) :salt trip)))
            (list :row (where (= column (+ (cast trip :i32) 1)) guess row) :stride (getf state :stride))))
  :finish (lambda (state ctx)
            (let* ((row (getf state :row)))
              (list :sample row
                    :reward (mean (cast (= row (mod (+ (take row [0] :axis 1) (* (iota [1 seq] :axis 1) (getf state :stride))) vocab)) :f32) :axes [1] :keepdims true)))))

(prepare (lambda (batch ctx)
  
  (list :input (field batch :sample)
        :target (mod (+ (field batch :sample) (field batch :stride)) vocab)
        :reward (field batch :reward))))
(objective (lambda (inputs ctx)
  (let* ((logits (+ (model (getf inputs :input)) (* 0.1 (normal [batch seq vocab] :salt (getf ctx :microbatch)))))
         (target (getf inputs :target))
         (loss (* (mean (cross-entropy logits target)) (+ 1.0 (mean (getf inputs :reward))))))
    (metric :loss loss)
    loss)))
(run :loader train :steps 2 :microbatches MB :stack ST :seed 6 :precision PREC
     :optimizer (adam :lr 1e-2))
"""


def text_of(template: str, mb: int, stack: int, precision: str) -> str:
    return (template.replace(":microbatches MB", f":microbatches {mb}").replace(":stack ST", f":stack {stack}")
            .replace(":precision PREC", f":precision :{precision}"))


def assert_same_bits(template: str, mb: int, stack: int, precision: str, tmp_path, steps: int = 3):
    one = run(text_of(template, mb, 1, precision), tmp_path / "s1", steps)
    many = run(text_of(template, mb, stack, precision), tmp_path / "sn", steps)
    assert "train stacked" in many.traces and "train stacked" not in one.traces
    assert [r["loss"] for r in one.history] == [r["loss"] for r in many.history]
    a, b = flatten(one.trainable), flatten(many.trainable)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), (k, np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k]))))
    return one, many


@pytest.mark.parametrize("mb,stack,precision", [(4, 4, "f32"), (2, 2, "bf16")])
def test_layer_norm_mlp_softmax_cross_entropy_stack_bit_for_bit(tmp_path, mb, stack, precision):
    assert_same_bits(PLAIN, mb, stack, precision, tmp_path)


def test_a_sampling_generator_and_a_counter_stack_bit_for_bit(tmp_path):
    one, many = assert_same_bits(SAMPLED, 4, 2, "f32", tmp_path)
    assert {"generate.step stacked", "generate.finish stacked"} <= set(many.traces)
    assert [r["seen"] for r in many.history] == [r["seen"] for r in one.history]


def test_an_embedding_gradient_under_attention_and_a_sampled_generator_stacks_bit_for_bit(tmp_path):
    _, many = assert_same_bits(ATTENTION_SAMPLED, 2, 2, "f32", tmp_path, steps=2)
    assert {"generate.step stacked", "train stacked"} <= set(many.traces)


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_a_curriculum_run_stacks_bit_for_bit(tmp_path, precision):
    one, _ = assert_same_bits(CURRICULUM, 2, 2, precision, tmp_path)
    assert len(one.history) == 3


def layer_norm_grad(x, w):
    """The gradient of a layer-norm's mean square with respect to a shared weight, as XLA:CPU ran
    it differently under vmap: its reductions, batched, went to another kernel."""
    def loss(w):
        y = x @ w
        mu = jnp.mean(y, -1, keepdims=True)
        d = y - mu
        return jnp.mean((d * jax.lax.rsqrt(jnp.mean(d * d, -1, keepdims=True) + 1e-5)) ** 2)
    return jax.grad(loss)(w)


def test_over_copies_gives_each_copy_the_bits_of_its_own_call():
    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.normal(size=(3, 128, 32)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(32, 16)), jnp.float32)
    stacked = jax.jit(over_copies(layer_norm_grad, 3, (0,)))(xs, w)
    one = jax.jit(layer_norm_grad)
    assert stacked.shape == (3, 32, 16)
    for i in range(3):
        assert np.array_equal(np.asarray(stacked[i]), np.asarray(one(xs[i], w))), i
