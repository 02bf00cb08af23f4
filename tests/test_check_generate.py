"""The generator's state in the checker (sexpgpu_lang/check/generate.py, trips.py): which
changes of a state entry between trips are E-GEN-002 and which are not, as inline run files
(the fixture, tests/fixtures/tiny-generate.sx, with one edit; every diagnostic marked)."""
from __future__ import annotations

import pytest

from helpers import check, edited, variant


def test_an_index_state_plus_an_i64_changes_dtype():
    """E-GEN-002 (rule 32-bit-defaults, docs/language.md): `:stride` is an argmax, an i32 index,
    and `:step` adds an i64 to it; in JAX (64-bit types on) the index is already int64 and the
    loop runs."""
    check(edited((":stride (field batch :stride)))",
                  ":stride (argmax (cast (field batch :row) :f32) :keepdims true)))"),
                 ("                  :stride (getf state :stride))))",
                  """\
                  :stride (+ (getf state :stride) (cast 0 :i64)))))
;;                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ E-GEN-002""")))


def test_a_bool_state_plus_a_float_changes_dtype():
    """E-GEN-002 (rule strong-state, docs/language.md): `:init` makes `:stride` a bool from
    constants, and `:step` adds 1.0, an f32; JAX's fori_loop lets the weakly typed bool carry
    become a float."""
    check(edited((":stride (field batch :stride)))",
                  ":stride (broadcast-to (>= -1.5 0.5) [64 1])))"),
                 ("                  :stride (getf state :stride))))",
                  """\
                  :stride (+ (getf state :stride) 1.0))))
;;                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^ E-GEN-002""")))


def test_a_state_made_from_a_size_is_i32_for_every_trip():
    """E-GEN-002 (rule strong-state, docs/language.md): `:init` makes `:stride` from a size, an i32
    the language fixes for every trip, so `:step` casting it to f32 changes it; JAX's fori_loop
    would let its weakly typed carry become f32."""
    check(edited((":stride (field batch :stride)))",
                  ":stride (broadcast-to (axis-size (field batch :row) 1) [64 1])))"),
                 ("                  :stride (getf state :stride))))",
                  """\
                  :stride (cast (getf state :stride) :f32))))
;;                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ E-GEN-002""")))


def test_a_state_from_an_integer_literal_is_i32():
    """(rule 32-bit-defaults, docs/language.md): a state made from an integer literal alone is i32,
    so `:step` casting it to i32 keeps it; in JAX (64-bit types on) `jnp.sum(1)` is int64 and
    its loop refuses."""
    check(edited((":stride (field batch :stride)))",
                  ":stride (broadcast-to (sum 1) [64 1])))"),
                 (":stride (getf state :stride))))",
                  ":stride (cast (getf state :stride) :i32))))")))


def test_an_integer_literal_leaves_an_i32_row_i32():
    """An integer literal added to the i32 row leaves it i32."""
    check(edited(("(list :row (where (= column at) guess row)",
                  "(list :row (where (= column at) (+ guess 0) row)")))


def test_trips_given_by_a_def():
    """`:trips` given by a `def`."""
    check(edited(("(defgenerate :trips 6",
                  "(defgenerate :trips seq")))


def test_a_defd_function_called_in_step():
    """A `def`'d function, called in :step."""
    check(edited(("""\

(loader train""",
                  """\
(def greedy (lambda (logits) (argmax logits :axis -1)))

(loader train"""),
                 ("(guess (sum (where (= column (- at 1)) (argmax (model row)) 0)",
                  "(guess (sum (where (= column (- at 1)) (greedy (model row)) 0)")))


def test_finish_reads_stage_without_a_curriculum_and_the_run_stacks():
    """:finish reads :stage, and there is no curriculum: the stage is 0 for every copy, so the run
    stacks."""
    check(edited(("  :batch 64",
                  """\
  :batch 64
  :fields (:row [seq] :i32
           :stride [1] :i32))

(loader easy
  :source (stride-rows :vocab vocab :seq seq :records 4096)
  :batch 64"""),
                 ("(list :sample row",
                  "(list :sample (+ row (* 0 (getf ctx :stage)))")))


def test_a_microbatch_salt_in_an_unstacked_run_is_only_information():
    """A salt with :microbatch, but the run does not stack, so no warning."""
    check(edited(("                 (guess (sum (where (= column (- at 1)) (argmax (model row)) 0)",
                  """\
                 (guess (sum (where (= column (- at 1)) (categorical (model row) :salt (+ (* (getf ctx :step) 65536) (getf ctx :microbatch))) 0)
;;                                                                                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ W-RAND-003"""),
                 (":stack 2",
                  ":stack 1")))


def _apply_salt_advice(text: str, code: str) -> str:
    """`text` with the `:salt ...` that `code`'s help suggests added to the draw it is reported at."""
    import re
    from sexpgpu_lang import analyze
    d = next(d for d in analyze(text).diagnostics if d.code == code)
    salt = re.search(r"`(:salt .+?)`", d.help).group(1)
    end = d.span.end - 1                      # the draw's closing paren
    assert text[end] == ")"
    return text[:end] + " " + salt + text[end:]


@pytest.mark.parametrize("old, new, code", [
    # a draw straight in `:step` (the advice must not be a salt W-RAND-003 then finds the same every trip)
    ("(argmax (model row))", "(categorical (model row))", "W-RAND-001"),
    # in `:finish`
    ("(column (iota [1 seq] :axis 1))\n                   (truth",
     "(column (iota [1 seq] :axis 1))\n                   (noise (uniform [4]))\n                   (truth", "W-RAND-001"),
    # in `prepare`
    ("(list :input (field batch :sample)", "(list :noise (uniform [4])\n        :input (field batch :sample)",
     "W-RAND-002"),
])
def test_salt_advice_applied_leaves_no_diagnostic(old, new, code):
    """Advice never makes a file worse: the suggested salt, applied, leaves the file with no
    diagnostic of any severity (it was W-RAND-003 in `:step`, and sampling wrote one token a trip)."""
    from sexpgpu_lang import analyze
    text = variant(old, new)
    assert [d.code for d in analyze(text).diagnostics] == [code]
    fixed = _apply_salt_advice(text, code)
    assert [(d.code, d.message) for d in analyze(fixed).diagnostics] == []
