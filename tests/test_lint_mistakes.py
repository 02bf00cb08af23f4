"""Mistakes a new user of the language-model features makes that used to lint clean (issue 36).

- W-SHAPE-002: a `dynamic-slice`, `dynamic-update-slice` or `at-set` whose start provably
  leaves its axis, on a trip of `:step` (named, from the start's trip form) or anywhere its
  range proves it (`check/ranges.py`).
- W-MODEL-002: trainable parameters that get no gradient from the loss (a teacher left
  trainable, read only by the generator), named at their model (`check/models.py`).
- W-SHAPE-001 from a loader's declared `:vocab` (an embedding lookup inside a model, a label) and
  from a `where`'s constant branch (Hugging Face's -100 label).
- The standard library's arguments checked at the call (`check/stdlib_args.py`): float positions,
  an odd head width for rotary, a transposed embedding table, a cache of the wrong layout or too
  short for the prefill; each one error, with no E-MODEL-004 after it about `{error}` types.
- W-LOADER-002: a raw token file whose size or first ids make its `:dtype` implausible.
"""
from __future__ import annotations

import pytest

from helpers import CASE_COPIES, SMALL, check, fixture_text, marked
from runfile import RunFile
from sexpgpu_lang import analyze
from sexpgpu_lang.check.ranges import _bad_trips

HEAD = """\
(def vocab 16)
(def seq 8)
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 4
  :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel lm
  :params (:embed (normal [vocab 32] :std 0.1) :out (normal [32 vocab] :std 0.1))
  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))
(model lm)
"""

TAIL = """\
(prepare (lambda (batch ctx) (list :x (field batch :sample))))
(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :x)))))
(run :loader train :steps 10 :optimizer (sgd :lr 0.1))
"""


def generator(trips: int, step_body: str, finish: str = "(list :sample (getf state :tokens))") -> str:
    """A generator writing one token per trip into `:tokens` (a copy of the row), `step_body`
    the `let*` of `:step` after `row` and `at` (`trip + 2`) are bound."""
    return (HEAD + f"(defgenerate :trips {trips}\n"
            "  :init (lambda (batch ctx) (list :tokens (field batch :row)))\n"
            "  :step (lambda (state trip ctx)\n"
            "          (let* ((row (getf state :tokens))\n"
            "                 (at (+ (cast trip :i32) 2)))\n"
            f"{step_body}\n))\n"
            f"  :finish (lambda (state ctx) {finish}))\n" + TAIL)


WRITE = """\
            (list :tokens (dynamic-update-slice row (argmax (dynamic-slice (model row) [0 (- at 1) 0] [4 1 vocab])) [0 at]))"""


def test_a_trip_writing_past_the_row_is_reported_at_its_start():
    # trips 0 to 7 write at 2 to 9 of an 8-column row, and read the logits at 1 to 8
    res = check(marked(marked(generator(8, WRITE), "(- at 1)", "W-SHAPE-002"), "at", "W-SHAPE-002", within="[0 at]"))
    write, read = sorted(res.diagnostics, key=lambda d: -d.span.start)
    assert write.message == ("`dynamic-update-slice` writes past the end of axis 1 of [4 8] i32 on trip 6 (of trips "
                             "0 to 7): this start is 8 there, and a window of 1 fits only at starts 0 to 7")
    assert write.help == ("JAX moves the start back to 7, so trips 6 to 7 overwrite position 7 instead, silently; "
                          "with `:trips 6` every trip fits; or make the axis longer")
    assert read.message.startswith("`dynamic-slice` reads past the end of axis 1 of [4 8 16] f32 on trip 7 (of trips "
                                   "0 to 7): this start is 8 there")
    assert read.help.startswith("JAX moves the start back to 7, so trip 7 reads position 7 instead")


def test_trips_that_fit_the_row_are_clean():
    check(generator(6, WRITE))


def test_a_window_wider_than_one_and_a_scaled_trip():
    body = """\
            (list :tokens (dynamic-update-slice row (slice row :axis 1 :start 0 :end 3) [0 (* (cast trip :i32) 2)]))"""
    res = check(marked(generator(4, body), "(* (cast trip :i32) 2)", "W-SHAPE-002"))
    [d] = res.diagnostics
    assert "on trip 3 (of trips 0 to 3): this start is 6 there, and a window of 3 fits only at starts 0 to 5" in d.message
    assert d.help.startswith("JAX moves the start back to 5, so trip 3 overwrites positions 5 to 7 instead")


def test_a_start_before_the_axis_names_the_first_trips():
    body = """\
            (list :tokens (dynamic-update-slice row (slice row :axis 1 :start 0 :end 1) [0 (- at 4)]))"""
    [d] = check(marked(generator(6, body), "(- at 4)", "W-SHAPE-002")).diagnostics
    assert "before the start of axis 1 of [4 8] i32 on trip 0 (of trips 0 to 5): this start is -2 there" in d.message
    assert d.help.startswith("JAX moves the start back to 0, so trips 0 to 1 overwrite position 0 instead")


def test_at_set_past_the_axis_drops_the_update():
    body = """\
            (list :tokens (at-set row [0 at] 3))"""
    [d] = check(marked(generator(8, body), "at", "W-SHAPE-002", within="[0 at]")).diagnostics
    assert "on trip 6 (of trips 0 to 7): this index is 8 there" in d.message
    assert "an index fits only from -8 to 7" in d.message
    assert d.help.startswith("JAX drops an update outside the axis, so trips 6 to 7 write nothing")


def test_a_start_through_a_function_and_the_standard_library():
    # a function's parameter carries the trip form; a standard-library layer reports at its call
    fn = "(def put (lambda (row tok pos) (dynamic-update-slice row tok [0 pos])))\n"
    body = """\
            (list :tokens (put row (slice row :axis 1 :start 0 :end 1) at))"""
    src = RunFile(generator(8, body)).add(fn, after="model")
    [d] = analyze(src, "case.sx").diagnostics
    assert d.code == "W-SHAPE-002" and "on trip 6 (of trips 0 to 7): this start is 8 there" in d.message
    body = """\
            (list :tokens (getf state :tokens) :cache (cache-write (getf state :cache) (zeros [4 1 2 4]) at))"""
    src = RunFile(generator(8, body)).set("defgenerate :init (list :cache", "(zeros [4 seq 2 4])")
    [d] = analyze(src, "case.sx").diagnostics
    assert d.code == "W-SHAPE-002" and "on trip 6 (of trips 0 to 7): this position is 8 there" in d.message
    assert "is dropped" in d.help and "with `:trips 6` every trip fits" in d.help
    assert src[d.span.start:d.span.end].startswith("(cache-write")


def test_a_start_provably_outside_anywhere_is_reported_by_its_range():
    # no trip: the argmax of 16 classes plus 8 is 8 to 23, every value past an 8-column row
    body = """\
            (list :tokens row)"""
    finish = """(let* ((t (getf state :tokens)))
    (list :sample (dynamic-update-slice t (slice t :axis 1 :start 0 :end 1) [0 (+ (argmax (sum (model t) :axes [0 1])) 8)])))"""
    res = check(marked(generator(2, body, finish), "(+ (argmax (sum (model t) :axes [0 1])) 8)", "W-SHAPE-002"))
    [d] = res.diagnostics
    assert d.message == ("`dynamic-update-slice` writes past the end of axis 1 of [4 8] i32: this start is from 8 to "
                         "23, and a window of 1 fits only at starts 0 to 7")


@pytest.mark.parametrize("starts", ["[0 (mod at seq)]", "[0 (minimum at 7)]", "[0 (getf state :x)]"])
def test_starts_not_proven_outside_are_clean(starts):
    body = f"""\
            (list :tokens (dynamic-update-slice row (slice row :axis 1 :start 0 :end 1) {starts}) :x (getf state :x))"""
    src = RunFile(generator(8, body)).set("defgenerate :init (list :x", "(cast (sum (field batch :stride)) :i32)")
    check(src)


@pytest.mark.parametrize("a,b,lo,hi,trips", [(1, 2, 0, 7, 8), (2, 0, 0, 5, 4), (1, -4, 0, 7, 6), (-1, 3, 0, 7, 9),
                                              (3, -5, 0, 6, 5), (1, 0, 0, 100, 10), (0, 1, 0, 7, 3)])
def test_the_bad_trips_are_those_counted_one_by_one(a, b, lo, hi, trips):
    bad = [t for t in range(trips) if not lo <= a * t + b <= hi]
    first_run = [t for i, t in enumerate(bad) if t - i == bad[0]] if bad else []
    assert _bad_trips(a, b, lo, hi, trips) == ([first_run[0], first_run[-1]] if bad else [])


# --------------------------------------------------------------------------- W-MODEL-002

TEACHER = RunFile(CASE_COPIES["teacher-reachable-clean.sx"])
TRAINABLE_TEACHER = TEACHER.drop("defmodel teacher :frozen")


def test_a_trainable_teacher_read_only_by_the_generator_is_named():
    src = TRAINABLE_TEACHER.mark("defmodel teacher", "teacher", "W-MODEL-002")
    [d] = check(src).diagnostics
    assert d.message == ("no parameter of `teacher` gets a gradient from the loss (`:embed`, `:out`): only the "
                         "generator reads them, and no gradient passes through it, so the optimizer never trains them")
    assert d.help == "if `teacher` is not meant to train (a teacher, a reward model), give it `:frozen true`"


def test_weight_decay_is_named_where_the_optimizer_decays():
    src = TRAINABLE_TEACHER.set("run :optimizer", "(adamw :lr 3e-3)")
    [d] = check(src.mark("defmodel teacher", "teacher", "W-MODEL-002")).diagnostics
    assert d.message.endswith("never trains them, and `adamw`'s weight decay still shrinks them every step")
    check(src.set("run :optimizer :weight-decay", "0").set("defmodel teacher :frozen", "true"))


def test_a_frozen_teacher_and_a_model_trained_by_the_loss_are_clean():
    check(TEACHER)
    check(SMALL)
    check(fixture_text())


#: helpers.SMALL whose model has a parameter `:extra` it does not read.
EXTRA = RunFile.small().set("defmodel lm :params :extra", "(normal [32] :std 0.1)")


@pytest.mark.parametrize("use", [
    "(stop-gradient (getf self :extra))",                  # no gradient through stop-gradient
    "(cast (argmax (getf self :extra)) :f32)",             # nor through an integer
])
def test_a_parameter_the_loss_reads_without_a_gradient(use):
    src = EXTRA.edit("defmodel lm :apply", "(getf self :out)", f"(+ (getf self :out) (sum {use}))")
    [d] = check(src.mark("defmodel lm", "lm", "W-MODEL-002")).diagnostics
    assert d.message == ("1 parameter of `lm` gets no gradient from the loss (`:extra`): the loss does not depend on "
                         "them, so the optimizer never trains them")
    assert d.help == "use them in the loss, or drop them from `:params`"


def test_a_parameter_never_read_and_a_metric_only_read():
    check(EXTRA.mark("defmodel lm", "lm", "W-MODEL-002"))
    src = EXTRA.edit("objective", "(lambda (inputs ctx) (mean", "(lambda (inputs ctx) (metric :e (sum (lm :probe 0))) (mean")
    src = src.set("defmodel lm :entries", "(:probe (lambda (self z) (getf self :extra)))")
    check(src.mark("defmodel lm", "lm", "W-MODEL-002"))


def test_a_file_with_an_error_is_not_judged():
    src = TRAINABLE_TEACHER.edit("objective", "(getf inputs :target)", "(getf inputs :targte)")
    assert [d.code for d in analyze(src, "case.sx").diagnostics] == ["E-NAME-004"]


# --------------------------------------------------------------------------- W-SHAPE-001: declared vocabularies

IDS = RunFile.small().set("loader train :source :vocab", "32")


def test_a_loaders_vocabulary_past_the_embedding_table_is_reported_in_the_model():
    # the loader declares ids 0 to 31, the table has 16 rows: the lookup inside the model and the label
    src = IDS.set("prepare (list :y", "(field batch :row)")
    src = marked(marked(src, "row", "W-SHAPE-001", within="(take (getf self :embed) row)"),
                 "(getf inputs :y)", "W-SHAPE-001")
    lookup, label = sorted(check(src).diagnostics, key=lambda d: d.span.start)
    assert lookup.message == ("the indices reach 31 (as a loader's `:vocab` declares), outside axis 0 of `take`'s "
                              "[16 32] f32 (0 to 15)")
    assert lookup.help.endswith("make the table 32 long, as the loader's `:vocab`, or the loader's `:vocab` 16, "
                                "the table's size")
    assert label.message.startswith("the labels reach 31 (as a loader's `:vocab` declares), outside the 16 classes")


def test_declared_ids_through_a_slice_a_let_and_a_standard_library_embedding():
    src = (IDS.set("defmodel lm (matmul", "(let* ((h (embedding (getf self :embed) row))) (matmul h (getf self :out)))")
           .set("defmodel lm :params :embed", "(normal [vocab 24] :std 0.1)")
           .set("defmodel lm :params :out", "(normal [24 vocab] :std 0.1)")
           .set("prepare (list :x", "(slice (field batch :row) :axis 1 :start 0 :end 4)")
           .set("objective (cross-entropy",
                "(cross-entropy (model (getf inputs :x)) (slice (getf inputs :y) :axis 1 :start 0 :end 4))"))
    [d] = check(src.mark("defmodel lm", "(embedding (getf self :embed) row)", "W-SHAPE-001")).diagnostics
    assert d.message.startswith("in `embedding` (standard library): the indices reach 31")


def test_a_loader_whose_vocabulary_fits_the_table_is_clean():
    check(SMALL)
    check(IDS.set("defmodel lm :params :embed", "(normal [32 32] :std 0.1)")
          .set("defmodel lm :params :out", "(normal [32 32] :std 0.1)")
          .set("prepare (list :y", "(field batch :row)"))


def test_hugging_faces_ignore_label_is_reported_with_the_mask_to_use():
    labels = "(where (> (field batch :row) 3) (field batch :row) -100)"
    src = RunFile.small().set("prepare (list :y", labels)
    [d] = check(src.mark("objective", "(getf inputs :y)", "W-SHAPE-001")).diagnostics
    assert d.message == "the labels reach -100, outside the 16 classes of the logits' last axis (0 to 15)"
    assert "`cross-entropy` has no ignored label (Hugging Face's -100 is read as a class)" in d.help
    # a padding label inside the classes is fine, and so is a where whose branches are not constant
    check(src.set("prepare (list :y", "(where (> (field batch :row) 3) (field batch :row) 0)"))
    check(src.set("prepare (list :y", "(where (> (field batch :row) 3) (field batch :row) (- (field batch :row) 1))"))


# --------------------------------------------------------------------------- the standard library's arguments

#: A two-layer Llama whose repeated block carries (:h :k :v) through `llama-block-cached`.
LLAMA = """\
(def vocab 16)
(def seq 8)
(def width 8)
(def heads 2)
(def head-width 4)
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 4
  :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel block
  :params (:attn-norm (ones [width]) :wq (normal [width heads head-width] :std 0.02)
           :wk (normal [width 1 head-width] :std 0.02) :wv (normal [width 1 head-width] :std 0.02)
           :wo (normal [heads head-width width] :std 0.02) :mlp-norm (ones [width])
           :w-gate (normal [width 16] :std 0.02) :w-up (normal [width 16] :std 0.02) :w-down (normal [16 width] :std 0.02))
  :apply (lambda (self c positions)
           (let* ((out (llama-block-cached (getf c :h) positions (getf c :k) (getf c :v)
                                           (getf self :attn-norm) (getf self :wq) (getf self :wk) (getf self :wv)
                                           (getf self :wo) (getf self :mlp-norm) (getf self :w-gate) (getf self :w-up)
                                           (getf self :w-down))))
             (list :h (getf out :h) :k (getf out :k) :v (getf out :v)))))
(defmodel lm
  :params (:embed (normal [vocab width] :std 0.02) :blocks (repeat block 2) :out (normal [width vocab] :std 0.02))
  :apply (lambda (self x)
           (let* ((c (block (list :h (embedding (getf self :embed) x) :k (zeros [4 seq 1 head-width])
                                  :v (zeros [4 seq 1 head-width])) 0)))
             (matmul (getf c :h) (getf self :out)))))
(model lm)
(prepare (lambda (batch ctx) (list :x (field batch :row))))
(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :x)))))
(run :loader train :steps 10 :optimizer (sgd :lr 0.1))
"""

#: The same model's blocks through `llama-block` (positions [T]).
LLAMA = RunFile(LLAMA)
PLAIN = (LLAMA.edit("defmodel block (out", "(llama-block-cached (getf c :h) positions (getf c :k) (getf c :v)",
                    "(llama-block (getf c :h) positions")
         .set("defmodel block (list", "(list :h out :k (getf c :k) :v (getf c :v))")
         .edit("defmodel lm (block", "head-width])) 0)", "head-width])) (iota [seq]))"))


def test_the_llama_models_are_clean():
    check(LLAMA)
    check(PLAIN)


def test_float_positions_of_the_standard_library_are_an_error_at_the_argument():
    src = PLAIN.set("defmodel lm (block (iota", "(cast (iota [seq]) :f32)")
    [d] = check(marked(src, "positions", "E-TYPE-002", within="(llama-block (getf c :h) positions")).diagnostics
    assert d.message == "`llama-block`'s `positions` must be integer positions, got [8] f32"
    assert d.help.startswith("positions count tokens: cast them, `(cast positions :i32)`")
    src = LLAMA.edit("defmodel lm (block", "head-width])) 0)", "head-width])) 0.0)")
    [d] = check(marked(src, "positions", "E-TYPE-002", within="(llama-block-cached (getf c :h) positions")).diagnostics
    assert d.message == "`llama-block-cached`'s `pos` must be an integer position, got [] f32*"


def test_rotary_called_directly_checks_its_positions_and_head_width():
    src = RunFile.small().set("defmodel lm (matmul",
                              "(matmul (reshape (rotary (reshape (take (getf self :embed) row) [32 seq 4 8]) "
                              "(cast (iota [seq]) :f32) 10000) [32 seq 32]) (getf self :out))")
    check(marked(src, "(cast (iota [seq]) :f32)", "E-TYPE-002"))
    src = RunFile.small().set("defmodel lm (matmul",
                              "(matmul (reshape (rotary (reshape (take (getf self :embed) row) [32 seq 32 1]) "
                              "(iota [seq]) 10000) [32 seq 32]) (getf self :out))")
    [d] = check(marked(src, "(reshape (take (getf self :embed) row) [32 seq 32 1])", "E-SHAPE-004")).diagnostics
    assert d.message == "rotary embeddings need an even head width: `rotary`'s x [B T N H] has H = 1"


def test_an_odd_head_width_is_said_so_not_as_a_reshape():
    src = PLAIN.set("def head-width", "(def head-width 3)")
    [d] = check(marked(src, "(getf self :wq)", "E-SHAPE-004", within="(llama-block (getf c :h)")).diagnostics
    assert d.message == "rotary embeddings need an even head width: `llama-block`'s wq [D N H] has H = 3"


def test_a_transposed_embedding_table_is_reported_at_the_table_once():
    src = PLAIN.set("defmodel lm :params :embed", "(normal [width vocab] :std 0.02)")
    [d] = check(marked(src, "(getf self :embed)", "E-SHAPE-005", within="(embedding")).diagnostics
    assert d.message == ("the embedding table is [8 16] f32, but the ids reach 15 (as a loader's `:vocab` declares): "
                         "it looks transposed (`embedding` takes table [V D], one row per id)")
    assert d.help.startswith("declare it [16 8] (vocabulary first), or pass `(transpose table)`; if it is the right "
                             "way round, the ids need 16 rows")


def test_a_prefill_past_the_cache_and_a_swapped_cache_are_one_error_each_not_an_e_model_004():
    short = LLAMA.set("defmodel lm (list :k", "(zeros [4 4 1 head-width])").set("defmodel lm (list :v", "(zeros [4 4 1 head-width])")
    [d] = check(marked(short, "(getf c :h)", "E-SHAPE-005", within="(llama-block-cached")).diagnostics
    assert d.message == ("`llama-block-cached` writes the 8 positions of x [4 8 8] f32 into `k-cache`, which holds 4 "
                         "([4 4 1 4] f32)")
    swapped = LLAMA.set("defmodel lm (list :k", "(zeros [4 1 seq head-width])")
    [d] = check(marked(swapped, "(getf c :k)", "E-SHAPE-005", within="(llama-block-cached")).diagnostics
    assert d.message.endswith("its axes 1 and 2 look swapped") and d.help.startswith("make it [4 8 1 4]")


def test_an_error_inside_a_repeated_blocks_plist_carry_is_not_also_e_model_004():
    # the block's result holds an error (its :h) where it went wrong: the carry is not compared with it
    src = PLAIN.set("defmodel block (list :h", "(rms-norm out (ones [3]))")
    assert [d.code for d in analyze(src, "case.sx").diagnostics] == ["E-SHAPE-001"]


def test_a_boolean_keyword_given_a_number_is_already_an_error():
    src = RunFile.small().set("defmodel lm (matmul",
                              "(let* ((h (reshape (take (getf self :embed) row) [32 seq 4 8])))"
                              " (matmul (reshape (dot-product-attention h h h :causal 1) [32 seq 32]) (getf self :out)))")
    [d] = check(marked(src, "1", "E-TYPE-003", within=":causal 1")).diagnostics
    assert d.message == "`:causal` of `dot-product-attention` must be `true` or `false`"


# --------------------------------------------------------------------------- W-LOADER-002

TOKENS = (RunFile.small().set("loader train :source", '(tokens "train.bin" :dtype :uint16 :seq seq :vocab vocab)')
          .set("loader train :fields", "(:row [seq] :i32 :next [seq] :i32)")
          .set("prepare (list :y", "(field batch :next)"))


def lint_with_file(tmp_path, ids, dtype: str, text: str = TOKENS):
    """`text` linted with the files read, beside a `train.bin` of `ids` written as numpy `dtype`."""
    import numpy as np
    (tmp_path / "train.bin").write_bytes(np.asarray(ids, dtype=dtype).tobytes())
    return analyze(text, str(tmp_path / "run.sx"), read_files=True).diagnostics


def test_an_int32_file_read_as_uint16_is_reported_at_the_dtype(tmp_path):
    ids = [i % 16 for i in range(1, 2000)]
    [d] = lint_with_file(tmp_path, ids, "<i4")
    assert d.code == "W-LOADER-002" and TOKENS[d.span.start:d.span.end] == ":uint16"
    assert d.message == ("`train.bin` read as `:uint16`: every other id of its first 3998 is 0, as when a file of "
                         "4-byte ids (`:int32`) is read as 2-byte ones: the run would train on those zeros")
    assert d.help == "give the dtype the file was written with, likely `:dtype :int32`"


def test_a_file_of_the_declared_dtype_is_clean_and_not_read_without_read_files(tmp_path):
    assert lint_with_file(tmp_path, [i % 16 for i in range(2000)], "<u2") == []
    (tmp_path / "train.bin").write_bytes(b"\x01")
    assert analyze(TOKENS, str(tmp_path / "run.sx")).diagnostics == []


def test_a_size_not_a_whole_number_of_ids_and_ids_past_the_vocabulary(tmp_path):
    [d] = lint_with_file(tmp_path, [1, 2, 3], "u1")
    assert d.message == "`train.bin` read as `:uint16`: its 3 bytes are not a whole number of 2-byte ids"
    # a uint16 file read as int32: two ids in each, huge
    [d] = lint_with_file(tmp_path, [i % 16 for i in range(1, 2001)], "<u2", TOKENS.set("loader train :source :dtype", ":int32"))
    assert "its first 1000 ids reach" in d.message and "past `:vocab 16`" in d.message
