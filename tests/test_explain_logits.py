"""explain's live set of a pass that reads large logits twice, against XLA on the CPU.

A cross-entropy computes a log-softmax of the logits: on the CPU, XLA holds the shifted logits
(x - max x) as a buffer of their size, which it writes into the logits' own buffer only where the
cross-entropy is their one reader (`OpCost.shifted`, `_Schedule._shift_spans`). Beside an argmax (an
accuracy metric, as the LM examples report), the pass holds two logits-sized buffers; alone, one.
"""
import pytest

from helpers import program_of
from sexpgpu_lang.explain import explain

pytestmark = pytest.mark.slow


VOCAB, SEQ, BATCH, WIDTH = 2048, 64, 16, 64
LOGITS = BATCH * SEQ * VOCAB * 4   # f32 [16 64 2048]: 8 MiB

LOSS = "(mean (cross-entropy logits (getf inputs :y)))"
ACCURACY = "(metric :accuracy (mean (cast (= (argmax logits) (getf inputs :y)) :f32)))"


def lm(metrics: str) -> str:
    """A one-matmul LM over 2048 tokens whose held-out pass runs the objective with `metrics` beside the loss."""
    return f"""\
(def vocab {VOCAB})
(def seq {SEQ})
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch {BATCH}
  :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel lm
  :params (:embed (normal [vocab {WIDTH}] :std 0.1) :out (normal [{WIDTH} vocab] :std 0.1))
  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))
(model lm)
(prepare (lambda (batch ctx) (list :x (field batch :row) :y (mod (+ (field batch :row) (field batch :stride)) vocab))))
(objective (lambda (inputs ctx)
  (let* ((logits (model (getf inputs :x)))
         (loss {LOSS}))
    {metrics}
    loss)))
(pass eval :loader train :every 5 :batches 1)
(run :loader train :steps 10 :optimizer (sgd :lr 0.1))
"""


@pytest.mark.parametrize("metrics,buffers", [("", 1), (ACCURACY, 2), ("(metric :mean-logit (mean logits))", 2)],
                         ids=["loss alone", "beside an argmax", "beside a mean"])
def test_a_pass_holds_the_shifted_logits_beside_logits_read_twice(metrics, buffers):
    from sexpgpu_runtime import xla_report
    program = program_of(lm(metrics))
    report = explain(program, target="cpu")
    est = next(p for p in report["passes"] if p["name"] == "pass eval")["live"]["temps"]
    xla = xla_report(program, report)["graphs"]["pass eval"]["temps"]
    assert buffers * LOGITS <= est < (buffers + 1) * LOGITS, (est, buffers)
    assert buffers * LOGITS <= xla < (buffers + 1) * LOGITS, (xla, buffers)
    assert abs(est - xla) <= 0.25 * xla, (est, xla)


def test_the_training_graph_counts_the_shifted_logits_once():
    # On the gradient path the gradient's residual of the logits' size (cross-entropy's
    # `inner_residual`) is the shifted buffer: the argmax beside the loss adds no third logits buffer.
    from sexpgpu_runtime import xla_report
    program = program_of(lm(ACCURACY))
    report = explain(program, target="cpu")
    est = next(g for g in report["graphs"] if g["name"] == "train")["live"]["temps"]
    xla = xla_report(program, report)["graphs"]["train"]["temps"]
    assert abs(est - xla) <= 0.25 * xla, (est, xla)
