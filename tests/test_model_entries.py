"""A model with several entry points (`:entries`): each checked where it is called, hoverable, and
run over the model's one set of parameters; a cached decode entry gives the full forward's logits
at every position (to 1e-5 in f32)."""
from __future__ import annotations

import numpy as np

import sexpgpu_runtime  # noqa: F401  (enables x64)
import jax
import jax.numpy as jnp
import pytest

from helpers import SMALL, check, cursor_at, program_of
from sexpgpu_lang import ide
from sexpgpu_runtime.lowering.lowering import Effects, run_phase

#: SMALL's model with a second entry: the logits of one position, through a [B 8 32] cache of
#: embeddings written at `pos` (a toy cache: the model looks at no other position).
ENTRIES = SMALL.replace(
    "  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))",
    """  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out)))
  :entries (:decode (lambda (self token cache pos)
                      (let* ((h (take (getf self :embed) token))
                             (cache (dynamic-update-slice cache h [0 pos 0])))
                        (list :logits (matmul (dynamic-slice cache [0 pos 0] [32 1 32]) (getf self :out))
                              :cache cache)))))""")


OBJECTIVE = "(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))))"


def with_objective(body: str) -> str:
    """ENTRIES with its objective's body replaced by `body` (lines of their own)."""
    assert OBJECTIVE in ENTRIES
    return ENTRIES.replace(OBJECTIVE, "(objective (lambda (inputs ctx)\n" + body + "\n  ))")


def test_an_entry_is_checked_where_it_is_called():
    check(with_objective("""  (let* ((x (getf inputs :x))
         (s (lm :decode x 1)))
;;          ^^^^^^^^^^^^^^^^ E-FORM-003
    (mean (cross-entropy (model x) (getf inputs :y))))"""))
    # an entry the model does not have, with the nearest one
    res = check(with_objective("""  (mean (cross-entropy (model :decod (getf inputs :x)) (getf inputs :y)))
;;                            ^^^^^^ E-NAME-004"""))
    assert "did you mean `:decode`?" in res.diagnostics[0].message


def test_hover_on_an_entry_shows_its_parameters():
    text = with_objective("""  (let* ((s (lm :de$0code (slice (getf inputs :x) :axis 1 :start 0 :end 1) (zeros [32 8 32]) 2)))
    (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y))))""")
    ix, offset = cursor_at(text)
    info = ide.hover(ix, offset)
    assert info is not None and "(lm :decode token cache pos)" in info.markdown, info
    assert "model entry point" in info.markdown


@pytest.mark.slow
def test_entries_run_over_one_set_of_parameters():
    text = with_objective("""  (let* ((x (getf inputs :x))
         (full (model x))
         (step (model :decode (slice x :axis 1 :start 3 :end 4) (zeros [32 8 32]) 3)))
    (metric :gap (max (abs (- (slice full :axis 1 :start 3 :end 4) (getf step :logits)))))
    (mean (cross-entropy full (getf inputs :y))))""")
    prog = program_of(text)
    rng = np.random.default_rng(0)
    params = {"embed": jnp.asarray(rng.standard_normal((16, 32)), jnp.float32),
              "out": jnp.asarray(rng.standard_normal((32, 16)), jnp.float32)}
    inputs = {"x": jnp.asarray(rng.integers(0, 16, (32, 8)), jnp.int32),
              "y": jnp.asarray(rng.integers(0, 16, (32, 8)), jnp.int32)}
    fx = Effects(seed_key=jax.random.key(0))
    ctx = {"step": jnp.asarray(0, jnp.int64)}
    run_phase(prog.objective, [inputs, ctx], params, fx)
    assert float(fx.metrics["gap"]) <= 1e-5
