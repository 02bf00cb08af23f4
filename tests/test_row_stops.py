"""Stops per row (prelude.sx `stop-rows`, `all-stopped`, `completion-length`; docs/stdlib.md "Stops per
row"): a generator that writes each row's completion until its end-of-sequence id, freezes it, and
gives the completion mask and length as generated fields; `:until (all-stopped done)` ends the trips
early with the parameters bit for bit those of every trip; the completion-masked loss; W-GEN-002 for
a `:step` that writes past a row's stop; `:samples` showing a prompt without its padding and a
completion up to its stop."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import check, evaluate_expression, program_of, run
from runfile import RunFile

#: tiny-generate's student, its completion kept per row: a row stops at an end-of-sequence id (here
#: every id under 16, so every row stops at its first trip and `:until` can end the trips early),
#: frozen after; the training reads the completion's length.
STOPS = (RunFile.fixture()
         .set("defgenerate :init (list :completion", "(zeros [64 6] :dtype :i32)")
         .set("defgenerate :init (list :mask", "(< (zeros [64 6] :dtype :i32) 0)")
         .set("defgenerate :init (list :done", "(< (take (field batch :stride) 0 :axis 1) 0)")
         .insert("defgenerate :step (guess", "(s (stop-rows (getf state :completion) (getf state :mask) (getf state :done)\n"
                                             "                               (squeeze guess :axes [1]) trip (iota [16]) 0))")
         .set("defgenerate :step (list :row", "(where (and (= column at) (expand-dims (not (getf state :done)) :axis -1)) guess row)")
         .set("defgenerate :step (list :completion", "(getf s :completion)")
         .set("defgenerate :step (list :mask", "(getf s :mask)")
         .set("defgenerate :step (list :done", "(getf s :done)")
         .set("defgenerate :finish (list :completion", "(getf state :completion)")
         .set("defgenerate :finish (list :completion-mask", "(getf state :mask)")
         .set("defgenerate :finish (list :completion-length", "(completion-length (getf state :mask))")
         .set("prepare (list :weight", "(cast (field batch :completion-length) :f32)")
         .set("objective (loss", "(loss (+ (mean (cross-entropy logits (getf inputs :target)))\n"
                                 "                  (* 0.01 (mean (getf inputs :weight)))))"))
UNTIL = STOPS.set("defgenerate :until", "(lambda (state ctx) (all-stopped (getf state :done)))")


def test_stop_rows_with_until_is_clean():
    check(UNTIL)


def test_a_step_writing_past_a_row_s_stop_is_a_warning_at_the_write():
    unguarded = "(where (= column at) guess row)"
    text = UNTIL.set("defgenerate :step (list :row", unguarded)
    [d] = check(text.mark("defgenerate :step (list :row", unguarded, "W-GEN-002")).diagnostics
    assert "`:row` without reading `:done`" in d.message and d.help and "stop-rows" in d.help
    # without `:until` there is no early exit to change the result: no warning
    check(text.drop("defgenerate :until"))
    # an entry `:finish` does not read (a cache) may change after a row's stop
    check(UNTIL.set("defgenerate :init (list :cache", "(zeros [64 seq] :dtype :i32)")
          .set("defgenerate :step (list :cache", "(+ (getf state :cache) 1)"))


def test_a_scalar_until_flag_is_not_judged():
    """The `freeze` pattern's flag is a bool scalar: not a per-row stop; W-GEN-002 is for the per-row one."""
    text = UNTIL.set("defgenerate :until", "(lambda (state ctx) (> (sum (cast (getf state :row) :i32)) 0))")
    check(text)


def test_the_completion_fields_are_generated_with_their_types():
    gen = program_of(UNTIL).generate
    out = dict(gen.out.entries)
    assert out["completion"].show() == "[64 6] i32" and out["completion-mask"].show() == "[64 6] bool"
    assert out["completion-length"].show() == "[64] i32"


def test_an_eos_id_past_the_vocabulary_is_one_line():
    text = UNTIL.edit("defgenerate :step (stop-rows", "(squeeze guess :axes [1]) trip (iota [16]) 0",
                      "(argmax (take (model row) 1 :axis 1)) trip 40 0")   # the tokens an argmax over the 16 logits gives
    [d] = [d for d in check(text.mark("defgenerate :step (stop-rows", "40", "E-SHAPE-005")).diagnostics]
    assert d.message == "end-of-sequence id 40 is past the vocabulary: the tokens are 0 to 15, so it would never stop a row"


def trained(text, steps, run_dir):
    """The run's result and the (step, trip) of every trip it ran."""
    seen = []
    return run(text, run_dir, steps, on_trip=lambda step, trip: seen.append((step, trip))), seen


def flat(tree):
    import jax
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(tree)}


@pytest.mark.slow
def test_until_all_stopped_ends_early_and_equals_every_trip_bit_for_bit(tmp_path):
    samples = "(:every 1 :rows 4 :text [:completion] :values [:completion-length])"
    full, every = trained(STOPS.set("run :samples", samples), 2, tmp_path / "full")
    early, few = trained(UNTIL.set("run :samples", samples), 2, tmp_path / "early")
    assert len(every) == 2 * 6 and len(few) < len(every)
    a, b = flat(full.trainable), flat(early.trainable)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    rows = [json.loads(line) for line in (tmp_path / "early" / "samples.jsonl").read_text().splitlines()]
    assert rows == [json.loads(line) for line in (tmp_path / "full" / "samples.jsonl").read_text().splitlines()]
    # each row's completion is shown up to its stop (its mask): as many ids as its length, the last an EOS
    for r in rows:
        ids = [int(i) for i in r["fields"]["completion"].split()]
        assert len(ids) == r["fields"]["completion-length"] >= 1
        assert len(ids) == 1   # every id is an EOS: each row stops at its first token


def test_samples_show_a_prompt_without_its_padding_and_a_completion_up_to_its_stop(tmp_path):
    from sexpgpu_runtime.run.samples import SampleLog
    text = UNTIL.set("run :samples", "(:every 1 :rows 2 :text [:completion :sample] :prompt 2)")
    program = program_of(text, str(tmp_path / "run.sx"))
    assert program.run.samples.masks == (("completion", "completion-mask"),)
    log = SampleLog(program, tmp_path, 10, 0, False, None)
    arrays = {"completion": np.array([[13, 14, 3, 0, 0, 0], [15, 15, 15, 15, 15, 15]]),
              "completion-mask": np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], bool),
              "sample": np.array([[1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 1, 2, 3, 4, 5, 6]])}
    got = [r["fields"] for r in log.rows_of(1, "train", arrays)]
    assert got[0]["completion"] == {"prompt": "13 14", "completion": "3"}
    assert got[1]["completion"] == {"prompt": "15 15", "completion": "15 15 15 15"}
    assert got[0]["sample"] == {"prompt": "1 2", "completion": "3 4 5 6 7 8"}     # no mask: the whole row
    # a left-padded prompt with its loader's mask
    log.masks = {"sample": "sample-mask"}
    arrays["sample-mask"] = np.array([[1] * 8, [0, 0, 1, 1, 1, 1, 0, 0]], bool)
    got = [r["fields"] for r in log.rows_of(1, "train", arrays)]
    assert got[1]["sample"] == {"prompt": "", "completion": "1 2 3 4"}
    log.close(None)


def test_the_completion_losses_count_the_mask_s_tokens_only():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 4, 5)).astype(np.float32)
    targets = np.array([[1, 2, -100, 7], [0, 4, 3, 2]], np.int32)     # outside the mask: -100, 7 (past V)
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], bool)
    env = {"l": logits, "y": targets, "m": mask}

    def evaluated(text):
        return evaluate_expression(text, env, clean=True).value
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.where(mask, np.take_along_axis(logp, np.where(mask, targets, 0)[..., None], -1)[..., 0], 0)
    np.testing.assert_allclose(evaluated("(completion-cross-entropy l y m)"), -picked.sum() / mask.sum(), rtol=1e-6)
    np.testing.assert_allclose(evaluated("(completion-log-prob l y m)"), picked.sum(1), rtol=1e-6)
    assert evaluated("(row-completion-mask m 3)").tolist() == [[False] * 3 + r for r in mask.tolist()]
    # no token at all: 0, not a division by zero
    env["m"] = np.zeros((2, 4), bool)
    assert evaluated("(completion-cross-entropy l y m)") == 0.0


HF = Path(__file__).parent / "fixtures" / "hf"


def _padded_with_config_eos(family: str) -> str:
    """The padded parity fixture of `family` stopping at its checkpoint's own end-of-sequence ids."""
    text = RunFile.read(HF / f"{family}-padded.sx").set("prepare (eos", "(eos (stack eos-ids))")
    return f'(def eos-ids (checkpoint-config "{family}" :eos))\n' + text


def errors_of(text: str) -> list:
    from sexpgpu_lang import analyze
    return [d for d in analyze(text, str(HF / "check.sx"), read_files=True).diagnostics if d.is_error]


def test_checkpoint_config_gives_the_end_of_sequence_ids_and_one_past_the_vocabulary_is_one_line():
    # Llama 3's generation_config.json says 2: a vector of one id, clean
    assert errors_of(_padded_with_config_eos("llama3")) == []
    # GPT-2's is 50256, past its 96 tokens: one error, at the ids, naming them
    text = _padded_with_config_eos("gpt2")
    errors = errors_of(text)
    assert {d.message for d in errors} == {"end-of-sequence id 50256 is past the vocabulary: the tokens are 0 to 95, "
                                           "so it would never stop a row"}
    assert all(text[d.span.start:d.span.end] == "eos" for d in errors)
    # a bare vector is a shape, not a tensor: said at the argument, with the fix
    text = RunFile(_padded_with_config_eos("llama3")).set("prepare (eos", "(eos eos-ids)")
    errors = errors_of(text)
    assert errors and errors[0].code == "E-TYPE-001" and "(stack eos)" in errors[0].help


#: A generator over the Qwen2 parity checkpoint (made from it in one form, frozen): the left-padded
#: prompts prefilled at each row's `left-padded-start` in `:init`, then a trip per token with the
#: caches in the state, each row at its own position, stopping at the batch's end-of-sequence id; a
#: small student trains on the completions through their mask.
GENERATE = """(def vocab (checkpoint-config "qwen2" :vocab))
(def kv-heads (checkpoint-config "qwen2" :kv-heads))
(def head-width (checkpoint-config "qwen2" :head-width))
(def layers (checkpoint-config "qwen2" :layers))
(def seq 8)

(loader prompts
  :source (npz "qwen2-prompts.npz")
  :batch 4
  :fields (:prompt [4] :i32 :prompt-mask [4] :bool :eos [] :i32))

(defmodel teacher :pretrained "qwen2" :frozen true)

(defmodel student
  :params (:embed (normal [vocab 16] :std 0.1) :out (normal [16 vocab] :std 0.1) :teacher teacher)
  :apply (lambda (self ids) (matmul (embedding (getf self :embed) ids) (getf self :out))))

(model student)

(defgenerate :trips 4
  :init (lambda (batch ctx)
          (let* ((prompt (field batch :prompt))
                 (start (left-padded-start (field batch :prompt-mask)))
                 (empty (zeros [layers 4 seq kv-heads head-width]))
                 (o (teacher :decode prompt start empty empty)))
            (list :completion (zeros [4 4] :dtype :i32)
                  :mask (< (zeros [4 4] :dtype :i32) 0)
                  :done (< start -100)
                  :token (argmax (take (getf o :logits) 3 :axis 1))
                  :length (+ start 4)
                  :eos (field batch :eos)
                  :k (getf o :k)
                  :v (getf o :v))))
  :step (lambda (state trip ctx)
          (let* ((s (stop-rows (getf state :completion) (getf state :mask) (getf state :done)
                               (getf state :token) trip (take (getf state :eos) 0) 0))
                 (o (teacher :decode (expand-dims (getf s :token) :axis 1) (+ (getf state :length) (cast trip :i32))
                             (getf state :k) (getf state :v))))
            (list :completion (getf s :completion)
                  :mask (getf s :mask)
                  :done (getf s :done)
                  :token (argmax (take (getf o :logits) 0 :axis 1))
                  :length (getf state :length)
                  :eos (getf state :eos)
                  :k (getf o :k)
                  :v (getf o :v))))
  :until (lambda (state ctx) (all-stopped (getf state :done)))
  :finish (lambda (state ctx)
            (list :completion (getf state :completion)
                  :completion-mask (getf state :mask)
                  :completion-length (completion-length (getf state :mask)))))

(prepare (lambda (batch ctx)
  (list :completion (field batch :completion) :mask (field batch :completion-mask))))

(objective (lambda (inputs ctx)
  (completion-cross-entropy (model (getf inputs :completion)) (getf inputs :completion) (getf inputs :mask))))

(run :loader prompts :steps 1 :seed 0 :optimizer (adam :lr 1e-3)
     :samples (:every 1 :rows 4 :text [:completion] :values [:completion-length]))
"""


@pytest.mark.slow
def test_a_generator_decodes_left_padded_prompts_per_row_with_caches_as_generate_does(tmp_path):
    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions, train
    want = np.load(HF / "qwen2-padded.npz")
    path = HF / "generate-check.sx"            # (never written: the paths resolve beside the fixtures)
    res = analyze(GENERATE, str(path), read_files=True)
    assert not res.diagnostics, [d.message for d in res.diagnostics]
    train(res.program, RunOptions(steps=1, run_dir=tmp_path, quiet=True))
    rows = [json.loads(line)["fields"] for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    # the loader's first batch is a permutation of the fixture's rows: match each by its completion length
    stops = np.minimum(want["stops"] + 1, 4)
    got = sorted((r["completion-length"], r["completion"]) for r in rows)
    expected = sorted((int(n), " ".join(str(int(i)) for i in c[:n])) for c, n in zip(want["completion"], stops))
    assert got == expected
