"""Models in the checker (sexpgpu_lang/check/models.py): sub-models, tied weights and repeated
blocks in a whole run file (the fixture, tests/fixtures/tiny-generate.sx, with one edit), clean."""
from __future__ import annotations

from helpers import check, edited


def test_the_output_layer_as_a_sub_model():
    """The output layer as a sub-model, reachable through student's :params."""
    check(edited(("""\

(defmodel student""",
                  """\

(defmodel head
  :params (:head head)
  :apply (lambda (self h) (head h)))

(defmodel student""")))


def test_tied_output_weights_transposed():
    """Tied output weights, the embedding transposed."""
    check(edited(("""\
           :hidden (normal [dim dim] :std 0.1)
           :out (normal [dim vocab] :std 0.1))""",
                  "           :hidden (normal [dim dim] :std 0.1))"),
                 ("(matmul h (getf self :out)))))",
                  "(matmul h (transpose (getf self :embed))))))")))


def test_a_repeated_hidden_layer_stacked_and_rematerialised():
    """The hidden layer as a repeated block, 2 layers stacked, rematerialised."""
    check(edited(("(defmodel student",
                  """\
(defmodel layer
  :params (:w (normal [dim dim] :std 0.1))
  :apply (lambda (self h)
           (+ h (relu (matmul h (getf self :w))))))

(defmodel student"""),
                 (":hidden (normal [dim dim] :std 0.1)",
                  ":layers (repeat layer 2 :remat :nothing-saveable)"),
                 ("(h (relu (matmul (+ here start next) (getf self :hidden)))))",
                  "(h (layer (+ here start next))))")))
