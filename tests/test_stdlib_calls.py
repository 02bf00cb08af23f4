"""The sampling functions' and the objectives' arguments checked at the call (check/stdlib_calls.py;
docs/stdlib.md "Sampling generators" and "Post-training"): each wrong argument is one diagnostic at it,
in the words of the function's docs, not an error of the body at the whole call; a note about a call a
library function makes points at the user's call of it; a right-padded prompt field reaching
`prefill-prompts` is W-LOADER-003 and trips past the row W-SHAPE-002.

`BASE` is a small run file that decodes left-padded prompts with a cache (`prefill-prompts`,
`cached-trip`, `decode-logits`) and trains on `gkd-objective`; each test changes one argument by place
(tests/runfile.py) and marks the one diagnostic it must give (tests/helpers.check).
"""
from __future__ import annotations

import pytest

from helpers import check
from runfile import RunFile
from sexpgpu_lang import analyze
from sexpgpu_lang.check import check_expression
from sexpgpu_lang.types import TensorType

BASE = RunFile('''(def vocab 9)
(def prompt 4)
(def seq 7)
(def width 4)
(loader train
  :source (jsonl "prompts.jsonl" :tokenizer "tokenizer.json" :pad 0 :pad-side :left)
  :batch 3
  :fields (:prompt [prompt] :i32 :prompt-mask [prompt] :bool))
(defmodel lm
  :params (:embed (normal [vocab width] :std 1.0) :pos (normal [seq width] :std 1.0) :out (normal [width vocab] :std 1.0))
  :apply (lambda (self x) (matmul (+ (embedding (getf self :embed) x) (getf self :pos)) (getf self :out)))
  :entries (:decode (lambda (self x pos k v)
                      (let* ((h (+ (embedding (getf self :embed) x) (learned-positions (getf self :pos) pos (axis-size x 1))))
                             (kv (reshape h [(axis-size x 0) (axis-size x 1) 1 width])))
                        (list :logits (matmul h (getf self :out)) :k (cache-write k kv pos) :v (cache-write v (* kv 2.0) pos))))))
(defmodel plain
  :params (:out (normal [width vocab] :std 1.0))
  :apply (lambda (self x) (matmul (one-hot x width) (getf self :out)))
  :frozen true)
(defmodel both
  :params (:lm lm :plain plain)
  :apply (lambda (self x) (lm x)))
(model both)
(defgenerate :trips (- seq prompt)
  :init (lambda (batch ctx)
          (prefill-prompts lm (field batch :prompt) (field batch :prompt-mask) (zeros [3 seq 1 width])))
  :step (lambda (state trip ctx)
          (cached-trip lm state (+ (cast trip :i32) prompt) trip 1))
  :finish (lambda (state ctx)
            (let* ((row (getf state :row)))
              (list :row row :start (getf state :start)
                    :logits (decode-logits lm row (getf state :start) (zeros [3 seq 1 width]))
                    :mask (>= (iota [3 seq] :axis 1) (- prompt 1))))))
(objective (lambda (b ctx)
  (gkd-objective (both (field b :row)) (field b :logits) 0.5 (field b :mask))))
(run :loader train :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
''')

INIT, STEP, FINISH = "defgenerate :init (prefill-prompts", "defgenerate :step (cached-trip", \
    "defgenerate :finish (decode-logits"


def test_the_base_file_is_clean():
    check(BASE)


@pytest.mark.parametrize("place,call,snippet,code,words", [
    (FINISH, "(decode-logits vocab row (getf state :start) (zeros [3 seq 1 width]))", "vocab", "E-TYPE-004",
     "`decode-logits`'s `m` is the model it calls, a model with a `:decode` entry; got `vocab`, the number 9, "
     "which is not a model"),
    (FINISH, "(decode-logits (lambda (r) (lm r)) row (getf state :start) (zeros [3 seq 1 width]))",
     "(lambda (r) (lm r))", "E-TYPE-004", "got a function (a `lambda`), which is not a model"),
    (FINISH, "(decode-logits train row (getf state :start) (zeros [3 seq 1 width]))", "train", "E-TYPE-004",
     "got loader train, which is not a model"),
    (INIT, "(prefill-prompts plain (field batch :prompt) (field batch :prompt-mask) (zeros [3 seq 1 width]))",
     "plain", "E-NAME-004", "`prefill-prompts` calls `(plain :decode ...)`, but model `plain` has no entry `:decode`"),
    (FINISH, "(sample-trip vocab row 5 0 1)", "vocab", "E-TYPE-004", "`sample-trip`'s `m` is the model it calls"),
    (FINISH, "(sample-trip lm row 5 0 -1)", "-1", "E-RAND-001",
     "`sample-trip`'s `temperature` is -1; it must be 0 or more"),
    (STEP, "(cached-trip lm state (+ (cast trip :i32) prompt) trip \"1\")", "\"1\"", "E-TYPE-001",
     "`cached-trip`'s `temperature` is a number; got string"),
    (STEP, "(cached-trip lm (getf state :row) (+ (cast trip :i32) prompt) trip 1)", "(getf state :row)",
     "E-TYPE-001", "`cached-trip`'s `state` is the plist `prefill-prompts` makes"),
    (STEP, "(cached-trip lm state (iota [3 seq]) trip 1)", "(iota [3 seq])", "E-SHAPE-005",
     "`cached-trip`'s `at` is the column each row writes: an integer scalar, or [3] one per row"),
])
def test_a_wrong_argument_of_a_sampling_function_is_one_diagnostic_at_it(place, call, snippet, code, words):
    text = BASE.set(place, call).mark(place.rsplit(" ", 1)[0], snippet, code)
    res = check(text)
    assert any(words in d.message for d in res.diagnostics), [d.message for d in res.diagnostics]


@pytest.mark.parametrize("place,call,snippet,words", [
    (INIT, "(prefill-prompts lm (field batch :prompt) (field batch :prompt-mask) (zeros [2 seq 1 width]))",
     "(zeros [2 seq 1 width])", "`prefill-prompts`' `cache` [2 7 1 4] f32 holds 2 rows, but the prompt [3 4] i32 has 3"),
    (INIT, "(prefill-prompts lm (field batch :prompt) (field batch :prompt-mask) (zeros [3 prompt 1 width]))",
     "(zeros [3 prompt 1 width])", "the prompt's 4 columns leave no column for the trips to write"),
    (FINISH, "(decode-logits lm row (getf state :start) (zeros [3 5 1 width]))", "(zeros [3 5 1 width])",
     "`decode-logits`'s cache [3 5 1 4] f32 is 5 positions long, but the row is 7 columns wide"),
    (FINISH, "(decode-logits lm row (getf state :start) (zeros [1 seq 1 width]))", "(zeros [1 seq 1 width])",
     "holds 1 rows, but the row has 3"),
])
def test_a_cache_that_does_not_hold_the_row_is_reported_at_the_cache(place, call, snippet, words):
    res = check(BASE.set(place, call).mark(place.rsplit(" ", 1)[0], snippet, "E-SHAPE-005"))
    assert words in res.diagnostics[0].message


def test_trips_past_the_row_warn_at_cached_trip_s_column():
    text = BASE.set("defgenerate :trips", "seq").mark(STEP, "(+ (cast trip :i32) prompt)", "W-SHAPE-002")
    (d,) = check(text).diagnostics
    assert "`cached-trip` writes past the end of the row [3 7] i32 on trip 3 (of trips 0 to 6): its column `at` " \
        "is 7 there" in d.message
    assert "with `:trips 3` every trip writes a column" in d.help


def test_a_right_padded_prompt_reaching_prefill_prompts_warns_at_each_field():
    right = (BASE.set("loader train :source :pad-side", ":right")
             .mark(INIT, "(field batch :prompt)", "W-LOADER-003").mark(INIT, "(field batch :prompt-mask)", "W-LOADER-003"))
    res = check(right)
    assert [d.help for d in res.diagnostics] == ["give loader `train`'s source `:pad-side :left`, so that each prompt "
                                                 "ends at the last column"] * 2
    assert "`prefill-prompts` takes left-padded prompts" in res.diagnostics[0].message
    # `left-padded-start`, the cached layers' first position of such a prompt, is traced the same way
    start = (BASE.set("loader train :source :pad-side", ":right")
             .set(INIT, "(let* ((s (left-padded-start (field batch :prompt-mask)))) (prefill-prompts lm "
                        "(field batch :prompt) (field batch :prompt-mask) (zeros [3 seq 1 width])))")
             .mark("defgenerate :init (left-padded-start", "(field batch :prompt-mask)", "W-LOADER-003")
             .mark("defgenerate :init (prefill-prompts", "(field batch :prompt)", "W-LOADER-003")
             .mark("defgenerate :init (prefill-prompts", "(field batch :prompt-mask)", "W-LOADER-003"))
    assert "`left-padded-start` takes left-padded prompts" in check(start).diagnostics[0].message
    # without `:pad-side` a prompt is padded on the right (the default), and a `cast` of the field is traced
    check(BASE.drop("loader train :source :pad-side")
          .edit(INIT, "(field batch :prompt) (field", "(cast (field batch :prompt) :i32) (field")
          .mark(INIT, "(cast (field batch :prompt) :i32)", "W-LOADER-003")
          .mark(INIT, "(field batch :prompt-mask)", "W-LOADER-003"))


LM2 = """(defmodel lm2
  :params (:embed (normal [vocab width] :std 1.0))
  :entries (:decode (lambda (self x pos k v)
                      (let* ((h (embedding (getf self :embed) x))
                             (kv (reshape h [(axis-size x 0) (axis-size x 1) 2 2])))
                        (list :logits h :k (cache-write k kv pos) :v (cache-write v kv pos)))))
  :apply (lambda (self x) (embedding (getf self :embed) x))
  :frozen true)"""


def test_a_note_about_a_call_inside_a_library_function_points_at_the_user_s_call():
    text = (BASE.add(LM2, before="model").set("defmodel both :params", "(:lm lm :plain plain :lm2 lm2)")
            .set(STEP, "(cached-trip lm2 state (+ (cast trip :i32) prompt) trip 1)"))
    res = analyze(text, "check.sx")
    (d,) = [d for d in res.diagnostics if d.is_error]
    call = text.node(STEP).span
    assert (d.span.start, d.span.end) == (call.start, call.end)
    assert [(r.span.start, r.span.end) for r in d.related] == [(call.start, call.end)]
    assert d.related[0].message.startswith("`cached-trip` (standard library) calls `(lm2 :decode ...)` from here with ")


ENV = {"lg": TensorType((4, 6, 5), "f32"), "lg3": TensorType((4, 6, 3), "f32"), "row": TensorType((4, 6), "i32"),
       "m": TensorType((4, 6), "bool"), "m5": TensorType((4, 5), "bool"), "rw": TensorType((4,), "f32"),
       "p1": TensorType((2,), "i32")}


@pytest.mark.parametrize("text,code,at,words", [
    ("(gkd-objective lg lg3 0.5 m)", "E-SHAPE-005", "lg3", "`gkd-objective`'s `teacher-logits` [4 6 3] f32 are over "
     "a vocabulary of 3, `student-logits` [4 6 5] f32 over 5"),
    ("(grpo-objective lg lg3 row m rw rw 0.04 0.2 0.28)", "E-SHAPE-005", "lg3", "`ref-logits` [4 6 3] f32 are over "
     "a vocabulary of 3"),
    ("(grpo-objective lg lg row m5 rw rw 0.04 0.2 0.28)", "E-SHAPE-005", "m5", "`grpo-objective`'s `mask` is [4 5] "
     "bool, but the row is [4 6] i32"),
    ("(grpo-objective lg lg row m rw rw \"0.04\" 0.2 0.28)", "E-TYPE-001", "\"0.04\"", "`grpo-objective`'s `beta` "
     "is a number 0 or more; got \"0.04\""),
    ("(gkd-objective lg lg rw m)", "E-SHAPE-005", "rw", "`gkd-objective`'s `beta` is one number from 0 to 1 for every token"),
    ("(repeat-prompts p1 2 4 0)", "E-SHAPE-005", "p1", "`repeat-prompts`' `prompt` is the prompts [B P], one row "
     "per prompt; got [2] i32"),
    ("(repeat-prompts row 0 8 0)", "E-TYPE-003", "0", "a constant integer of 1 or more; got the number 0"),
])
def test_a_wrong_argument_of_an_objective_is_one_error_at_it_in_the_docs_words(text, code, at, words):
    e, diags = check_expression(text, ENV)
    assert [d.code for d in diags] == [code], [d.message for d in diags]
    assert words in diags[0].message
    assert "column t" not in (diags[0].help or "")
    assert text[diags[0].span.start:diags[0].span.end] == at
    assert e.type.show() == "{error}"


TB = """(defmodel tb
  :params (:embed (normal [vocab width] :std 0.1) :out (normal [width vocab] :std 0.1)
           :ln1-gain (ones [width]) :ln1-bias (zeros [width]) :ln2-gain (ones [width]) :ln2-bias (zeros [width])
           :wq (normal [width 1 width] :std 0.1) :wk (normal [width 1 width] :std 0.1)
           :wv (normal [width 1 width] :std 0.1) :wo (normal [1 width width] :std 0.1)
           :w1 (normal [width 8] :std 0.1) :b1 (zeros [8]) :w2 (normal [8 width] :std 0.1) :b2 (zeros [width]))
  :apply (lambda (self x) (matmul (embedding (getf self :embed) x) (getf self :out)))
  :entries (:decode (lambda (self x pos k v)
                      (let* ((b (transformer-block-cached (embedding (getf self :embed) x) pos k v
                                                          (getf self :ln1-gain) (getf self :ln1-bias) (getf self :wq)
                                                          (getf self :wk) (getf self :wv) (getf self :wo)
                                                          (getf self :ln2-gain) (getf self :ln2-bias) (getf self :w1)
                                                          (getf self :b1) (getf self :w2) (getf self :b2))))
                        (list :logits (matmul (getf b :h) (getf self :out)) :k (getf b :k) :v (getf b :v)))))
  :frozen true)"""


def test_a_cache_whose_heads_the_model_s_layer_refuses_is_reported_at_the_user_s_cache():
    text = (BASE.add(TB, before="model").set("defmodel both :params", "(:lm lm :plain plain :tb tb)")
            .set(INIT, "(prefill-prompts tb (field batch :prompt) (field batch :prompt-mask) (zeros [3 seq 2 width]))")
            .mark("defgenerate :init", "(zeros [3 seq 2 width])", "E-SHAPE-005"))
    (d,) = check(text).diagnostics
    assert d.message == ("in `prefill-prompts` (standard library): `transformer-block-cached`'s `k-cache` is "
                         "[3 7 2 4] f32, but its layout is [B S K H]: batch, positions, 1 key-value head of width 4 "
                         "(wk's last two axes)")
    assert d.related[0].message.startswith("`prefill-prompts` (standard library) calls `(tb :decode ...)` from here")
