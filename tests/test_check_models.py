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


def test_an_error_in_a_models_body_names_the_call_that_passed_its_arguments():
    """An error inside `:apply` or an `:entries` entry, for the argument types a call gave, has that
    call as a related place, with the types: the mistake may be the caller's."""
    from sexpgpu_lang import analyze
    text = """(def vocab 16)
(loader train :source (stride-rows :vocab vocab :seq 8) :batch 4 :fields (:row [8] :i32 :stride [1] :i32))
(defmodel m
  :params (:w (normal [vocab vocab] :std 0.1))
  :apply (lambda (self x) (take (getf self :w) x))
  :entries (:score (lambda (self x) (matmul x (getf self :w)))))
(model m)
(objective (lambda (inputs ctx)
  (+ (mean (m :score (field inputs :stride)))
     (mean (m (cast (field inputs :row) :f32))))))
(run :loader train :steps 2)
"""
    res = analyze(text)
    got = {d.code: [(res.source.line_col(r.span.start), r.message) for r in d.related] for d in res.diagnostics}
    assert got == {"E-TYPE-002": [((9, 11), "`(m ...)` is called here with [4 8] f32")],
                   "E-SHAPE-002": [((8, 11), "`(m :score ...)` is called here with [4 1] i32")]}
