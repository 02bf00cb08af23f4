"""The bad inputs of models at depth: each a diagnostic at the right range with
its fix, and an entry in docs/errors.md. A repeated layer whose carry changes type (E-MODEL-004), a
stacked pretrained tensor of another depth (E-MODEL-003), a head width that is not an integer
(E-TYPE-005), an unknown remat policy (E-FORM-002)."""
import numpy as np

from helpers import ROOT, check
from sexpgpu_lang import analyze

HEAD = """(def vocab 16)
(def seq 8)
(def width 32)
(def heads 4)
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 4
  :fields (:row [seq] :i32 :stride [1] :i32))
"""

LAYER = """(defmodel layer
  :params (:w (normal [width width] :std 0.1))
  :apply (lambda (self h) (+ h (matmul h (getf self :w)))))
"""

LM = """(defmodel lm
  :params (:embed (normal [vocab width] :std 0.1)
           :layers (repeat layer 2)
           :out (normal [width vocab] :std 0.1))
  :apply (lambda (self row) (matmul (layer (take (getf self :embed) row)) (getf self :out))))
(model lm)
(objective (lambda (batch ctx)
  (mean (cross-entropy (model (field batch :row)) (mod (+ (field batch :row) (field batch :stride)) vocab)))))
(run :loader train :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
"""

ERRORS_MD = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")


def helps(res, code):
    return [d.help for d in res.diagnostics if d.code == code]


def test_a_repeated_layer_whose_carry_changes_dtype():
    res = check(HEAD + """(defmodel layer
  :params (:w (normal [width width] :std 0.1))
  :apply (lambda (self h) (cast (matmul h (getf self :w)) :bf16)))
;;                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ E-MODEL-004
""" + LM)
    d, = res.diagnostics
    assert "returns [4 8 32] bf16" in d.message and "carry (its first argument) is [4 8 32] f32" in d.message
    assert "`cast` to its dtype" in d.help
    assert '<a id="e-model-004"></a>' in ERRORS_MD


def test_a_repeated_layer_whose_carry_changes_shape():
    res = check(HEAD + """(defmodel layer
  :params (:w (normal [width vocab] :std 0.1))
  :apply (lambda (self h) (matmul h (getf self :w))))
;;                        ^^^^^^^^^^^^^^^^^^^^^^^^^ E-MODEL-004
""" + LM)
    assert "returns [4 8 16] f32" in res.diagnostics[0].message and "project back to the input width" in res.diagnostics[0].help


def test_a_head_width_that_is_not_an_integer():
    res = check(HEAD.replace("(def heads 4)", """(def heads 3)
(def head-width (/ width heads))
;;              ^^^^^^^^^^^^^^^ E-TYPE-005""") + LAYER + LM)
    d, = res.diagnostics
    assert "32 = 3 * 10 + 2" in d.message and "make 32 a multiple of 3" in d.help
    assert '<a id="e-type-005"></a>' in ERRORS_MD


def test_an_unknown_remat_policy():
    res = check(HEAD + LAYER + LM.replace("(repeat layer 2)", """(repeat layer 2 :remat :save-nothing)
;;                                        ^^^^^^^^^^^^^ E-FORM-002"""))
    d, = res.diagnostics
    assert d.message == "`:remat` has no policy `:save-nothing`; did you mean `:nothing-saveable`?"
    assert "`:dots-saveable`" in d.help and "recomputes everything in the backward pass" in d.help
    res = check(HEAD + LAYER + LM.replace("(run :loader train", """(run :remat :all
;;          ^^^^ E-FORM-002
     :loader train"""))
    assert helps(res, "E-FORM-002")[0]


def test_a_stacked_pretrained_tensor_of_another_depth(tmp_path):
    from safetensors.numpy import save_file
    save_file({"embed": np.zeros((16, 32), np.float32), "layers.w": np.zeros((3, 32, 32), np.float32),
               "out": np.zeros((32, 16), np.float32)}, str(tmp_path / "p.safetensors"))
    text = HEAD + LAYER + LM.replace("(defmodel lm\n", '(defmodel lm\n  :frozen true\n  :pretrained "p.safetensors"\n')
    res = analyze(text, str(tmp_path / "run.sx"), read_files=True)
    d, = [d for d in res.diagnostics if d.is_error]
    assert d.code == "E-MODEL-003" and text[d.span.start:d.span.end] == '"p.safetensors"'
    assert "`layers.w` is [3 32 32] f32" in d.message and "expects [2 32 32] f32" in d.message
    assert "the file has 3 layers, the run 2" in d.message
    assert d.help == "repeat the block 3 times to load this file, or point at a file of 2 layers"
    assert "another depth" in ERRORS_MD.split('<a id="e-model-003"></a>')[1].split("<a id=")[0]
