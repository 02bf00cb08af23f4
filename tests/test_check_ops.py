"""Operations in a whole run file (the rules of sexpgpu_lang/ops/ as the checker applies them
inside the generator, prepare and objective): each test is the fixture,
tests/fixtures/tiny-generate.sx, with one op written in, and checks clean."""
from __future__ import annotations

from helpers import check, edited


def test_argsort_for_the_greedy_guess():
    """The greedy guess as the last index of argsort."""
    check(edited(("(guess (sum (where (= column (- at 1)) (argmax (model row)) 0)",
                  "(guess (sum (where (= column (- at 1)) (squeeze (take (argsort (model row)) [15] :axis 2) :axes [2]) 0)")))


def test_labels_shifted_with_slice_and_concat():
    """Labels shifted with slice and concat."""
    check(edited((":label (mod (+ row stride) vocab)",
                  ":label (concat [(slice row :axis 1 :start 1) (mod (+ (slice row :axis 1 :start -1) stride) vocab)] :axis 1)")))


def test_the_output_layer_as_an_einsum():
    """The output layer as an einsum."""
    check(edited(("(matmul h (getf self :out)))))",
                  '(einsum "bsd,dv->bsv" h (getf self :out)))))')))


def test_cross_entropy_from_one_hot_and_log_softmax():
    """Cross-entropy written with one-hot and log-softmax."""
    check(edited(("(loss (mean (cross-entropy logits (getf inputs :target)))))",
                  "(loss (neg (mean (sum (* (one-hot (getf inputs :target) vocab) (log-softmax logits)) :axes [2])))))")))


def test_reshape_after_embedding_the_flattened_row():
    """Embed the flattened row, then reshape back."""
    check(edited(("(let* ((here (take (getf self :embed) row))",
                  "(let* ((here (reshape (take (getf self :embed) (reshape row [-1])) [64 seq dim]))")))


def test_argmax_of_the_softmax():
    """Argmax of the softmax."""
    check(edited(("(guess (sum (where (= column (- at 1)) (argmax (model row)) 0)",
                  "(guess (sum (where (= column (- at 1)) (argmax (softmax (model row) :axis -1)) 0)")))


def test_accuracy_over_sorted_rows():
    """Accuracy over sorted rows."""
    check(edited((":correct (mean (cast (= row truth) :f32) :axes [1] :keepdims true)))))",
                  ":correct (mean (cast (= (sort row :axis 1) (sort truth :axis 1 :descending false)) :f32) :axes [1] :keepdims true)))))")))


def test_two_position_embeddings_stacked():
    """The two position embeddings stacked and summed."""
    check(edited(("(h (relu (matmul (+ here start next) (getf self :hidden)))))",
                  "(h (relu (matmul (+ here (sum (stack [start next] :axis 0) :axes [0])) (getf self :hidden)))))")))


def test_cross_entropy_from_take_along_axis():
    """Cross-entropy written with take-along-axis."""
    check(edited(("(loss (mean (cross-entropy logits (getf inputs :target)))))",
                  "(loss (neg (mean (take-along-axis (log-softmax logits) (expand-dims (getf inputs :target) :axis 2) :axis 2)))))")))


def test_top_k_indices_for_the_greedy_guess():
    """The greedy guess from top-k's :indices, squeezed."""
    check(edited(("(guess (sum (where (= column (- at 1)) (argmax (model row)) 0)",
                  "(guess (sum (where (= column (- at 1)) (squeeze (getf (top-k (model row) 1) :indices) :axes [2]) 0)")))


def test_a_categorical_draw_salted_by_step_and_trip():
    """A categorical draw salted by step and trip, with a temperature."""
    check(edited(("(guess (sum (where (= column (- at 1)) (argmax (model row)) 0)",
                  "(guess (sum (where (= column (- at 1)) (categorical (model row) :salt (+ (* (getf ctx :step) 8) trip) :temperature 0.7) 0)")))


def test_a_uniform_draw_salted_by_the_step():
    """A uniform draw in :init salted by the step; ties broken by noise."""
    check(edited((":stride (field batch :stride)))",
                  ":stride (+ (field batch :stride) (cast (< (uniform [64 1] :salt (getf ctx :step)) 0.0) :i32))))")))


def test_a_division_by_a_constant_zero_is_reported_at_the_divisor():
    """E-TYPE-006: a `def` that is 0, a literal 0.0, constants that fold to 0; a divisor that is
    not a constant, or a constant that is not zero, is clean."""
    check(edited(("(def vocab 16)", "(def vocab 16)\n(def cold 0.0)"),
                 ("(let* ((logits (model (getf inputs :input)))", """(let* ((logits (/ (model (getf inputs :input)) cold))
;;                                               ^^^^ E-TYPE-006""")))
    check(edited(("                   :label (mod (+ row stride) vocab)", """\
                   :label (mod (+ row stride) (- vocab 16))
;;                                             ^^^^^^^^^^^^ E-TYPE-006""")))
    check(edited(("(let* ((logits (model (getf inputs :input)))", """(let* ((logits (/ (model (getf inputs :input)) 0.0))
;;                                               ^^^ E-TYPE-006""")))
    check(edited(("(let* ((logits (model (getf inputs :input)))",
                  "(let* ((logits (/ (model (getf inputs :input)) (+ 0.5 0.5)))")))
