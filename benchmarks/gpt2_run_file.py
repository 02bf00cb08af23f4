"""Run-file text of a GPT-2-architecture teacher in the parameter names of the standard library's `:gpt2`
mapping (sexpgpu_lang/hf_names.sx), shared by tests/test_hf_checkpoints.py and benchmarks/pretrained_load.py.

`GPT2_LAYER` is a `defmodel gpt2-layer` whose `:params` are the stdlib
`gpt2-block`'s arguments; `gpt2_teacher(layers, pretrained)` a frozen
`defmodel teacher` (`:wte`, `:wpe`, `(repeat gpt2-layer N)`, the final
layer norm; logits through the tied `wte`) loaded with `:pretrained
PRETRAINED`. Both read the `def`s `vocab`, `seq`, `width`, `heads`,
`head-width` and `hidden`, which the file using them writes.
"""
from __future__ import annotations

GPT2_LAYER = """
(defmodel gpt2-layer
  :params (:ln1-gain (ones [width]) :ln1-bias (zeros [width])
           :wq (normal [width heads head-width] :std 0.02) :bq (zeros [heads head-width])
           :wk (normal [width heads head-width] :std 0.02) :bk (zeros [heads head-width])
           :wv (normal [width heads head-width] :std 0.02) :bv (zeros [heads head-width])
           :wo (normal [heads head-width width] :std 0.02) :bo (zeros [width])
           :ln2-gain (ones [width]) :ln2-bias (zeros [width])
           :w1 (normal [width hidden] :std 0.02) :b1 (zeros [hidden])
           :w2 (normal [hidden width] :std 0.02) :b2 (zeros [width]))
  :apply (lambda (self x)
           (gpt2-block x (getf self :ln1-gain) (getf self :ln1-bias)
                       (getf self :wq) (getf self :bq) (getf self :wk) (getf self :bk)
                       (getf self :wv) (getf self :bv) (getf self :wo) (getf self :bo)
                       (getf self :ln2-gain) (getf self :ln2-bias)
                       (getf self :w1) (getf self :b1) (getf self :w2) (getf self :b2))))
"""


def gpt2_teacher(layers: int, pretrained: str) -> str:
    """`GPT2_LAYER` and a frozen `teacher` of `layers` of it, whose `:pretrained` is the text `pretrained`."""
    return GPT2_LAYER + f"""
(defmodel teacher
  :params (:wte (normal [vocab width] :std 0.02)
           :wpe (normal [seq width] :std 0.01)
           :h (repeat gpt2-layer {layers})
           :lnf-gain (ones [width]) :lnf-bias (zeros [width]))
  :apply (lambda (self ids)
           (let* ((h (gpt2-layer (+ (embedding (getf self :wte) ids) (getf self :wpe)))))
             (matmul (layer-norm h (getf self :lnf-gain) (getf self :lnf-bias)) (transpose (getf self :wte)))))
  :frozen true
  :pretrained {pretrained})
"""
