"""`(defmodel ref :copy student)`: a frozen copy of a model's starting parameters, a reference model
in one form (docs/language.md "A frozen copy of a model").

The checker types a copy's calls as its source's and gives it one frozen leaf per trainable leaf of
the source (check/models.py `place_copies`, infer.py `call_copy`); the runtime fills those leaves
with the source's starting values, drawn or loaded, on a fresh start and on a resume
(weights/params.py `fill_copies`, weights/pretrained.py). Refusals are E-MODEL-007 and E-MODEL-001.
"""
from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest

from helpers import program_of
from sexpgpu_lang import analyze
from sexpgpu_lang import ir

HEAD = """\
(def vocab 16)
(def seq 8)
(def dim 32)
(loader train :source (stride-rows :vocab vocab :seq seq) :batch 8 :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel block :params (:w (normal [dim dim] :std 0.1)) :apply (lambda (self h) (relu (matmul h (getf self :w)))))
(defmodel teacher :params (:e (normal [vocab vocab] :std 0.1)) :apply (lambda (self x) (take (getf self :e) x))
  :frozen true)
(defmodel policy
  :params (:embed (normal [vocab dim] :std 0.1) :blocks (repeat block 2) :out (normal [dim vocab] :std 0.1)
           :teacher teacher)
  :apply (lambda (self row) (+ (matmul (block (take (getf self :embed) row)) (getf self :out)) (teacher row))))
(model policy)
"""
COPY = "(defmodel ref :copy policy)\n"
TAIL = """\
(defgenerate :trips 1
  :init (lambda (batch ctx) (list :row (field batch :row)))
  :step (lambda (state trip ctx) state)
  :finish (lambda (state ctx) (list :answer (getf state :row))))
(prepare (lambda (batch ctx) (list :x (field batch :answer))))
(objective (lambda (inputs ctx)
  (let* ((x (getf inputs :x))
         (m (> (iota [8 seq] :axis 1) 1))
         (lp (token-log-probs (policy x) x m))
         (rlp (token-log-probs (ref x) x m)))
    (metric :kl (token-mean (kl-k3 lp rlp m) m))
    (+ (neg (token-mean lp m)) (* 0.1 (token-mean (kl-k3 lp rlp m) m))))))
(run :loader train :steps 6 :seed 0 :optimizer (adam :lr 3e-2) :log (:every 1))
"""
TEXT = HEAD + COPY + TAIL


def test_a_copy_has_a_frozen_leaf_per_trainable_leaf_of_its_source():
    program = program_of(TEXT)
    copies = {p.path: p for p in program.params if p.copy_of is not None}
    trainable = {p.path: p for p in program.params if not p.frozen}
    assert set(copies) == {("ref",) + path for path in trainable}       # the frozen teacher is shared, not copied
    for path, p in copies.items():
        src = trainable[p.copy_of]
        assert p.frozen and p.copy_of == path[1:]
        assert (p.shape, p.dtype, p.init, p.place, p.layers) == (src.shape, src.dtype, src.init, src.place, src.layers)


def test_a_copys_call_is_its_sources_on_the_copys_parameters():
    program = program_of(TEXT)
    calls = [e for e in ir.walk(program.objective.body) if isinstance(e, ir.ModelCall)]
    by_model = {}
    for e in calls:
        by_model.setdefault(e.model, set()).add(e.path)
    assert by_model["ref"] == {("ref",)}
    assert by_model["policy"] == {()}
    assert by_model["block"] == {("blocks",), ("ref", "blocks")}      # the copy's layers are its own
    assert by_model["teacher"] == {("teacher",)}                      # a frozen sub-model is shared
    ref_call = next(e for e in calls if e.model == "ref")
    policy_call = next(e for e in calls if e.model == "policy")
    assert ref_call.type == policy_call.type


@pytest.mark.parametrize("src,code,snippet,words", [
    (HEAD + "(defmodel ref :copy policy :params (:w (zeros [2])))\n" + TAIL, "E-MODEL-007", ":params",
     "it takes its parameters, `:apply` and entries from the model it copies"),
    (HEAD + "(defmodel ref :copy policy :frozen false)\n" + TAIL, "E-MODEL-007", "false", "a copy is frozen"),
    (HEAD + "(defmodel ref :copy block)\n" + TAIL, "E-MODEL-007", "block",
     "`block` is a layer of the repeated block `block`"),
    (HEAD + "(defmodel ref0 :copy policy)\n(defmodel ref :copy ref0)\n" + TAIL, "E-MODEL-007", "ref0",
     "`ref0` is itself a copy (of `policy`)"),
    (HEAD.replace(":teacher teacher)", ":teacher teacher :ref teacher)") + COPY + TAIL, "E-MODEL-007", "policy",
     "the root model `policy` has a parameter `:ref`"),
])
def test_a_copy_that_cannot_be_made_is_one_error_at_its_place(src, code, snippet, words):
    errors = [d for d in analyze(src, "check.sx").diagnostics if d.is_error]
    assert [d.code for d in errors] == [code], [d.message for d in errors]
    assert words in errors[0].message
    assert src[errors[0].span.start:errors[0].span.end].startswith(snippet)


def test_a_copy_of_a_model_nothing_reaches_is_e_model_001_at_the_call():
    src = HEAD + "(defmodel other :params (:w (zeros [vocab vocab])) :apply (lambda (self x) (take (getf self :w) x)))\n" \
        + "(defmodel ref :copy other)\n" + TAIL
    errors = [d for d in analyze(src, "check.sx").diagnostics if d.is_error]
    assert [d.code for d in errors] == ["E-MODEL-001"]
    assert "`ref` is a copy of `other`, which `model` (`policy`) cannot reach" in errors[0].message
    assert src[errors[0].span.start:errors[0].span.end] == "(ref x)"


def test_a_copy_inside_params_is_refused():
    src = HEAD.replace(":teacher teacher)", ":teacher teacher :r ref)") + COPY + TAIL
    errors = [d for d in analyze(src, "check.sx").diagnostics if d.is_error]
    assert [d.code for d in errors] == ["E-MODEL-007"]
    assert "has its own place in the run, not inside another model's `:params`" in errors[0].message


def test_the_copy_starts_as_the_sources_starting_values_in_its_own_buffers():
    from sexpgpu_runtime.weights.params import flatten
    from sexpgpu_runtime.weights.pretrained import frozen_params, initial_params
    program = program_of(TEXT)
    trainable, frozen = initial_params(program, 0)
    t, f = flatten(trainable), flatten(frozen)
    for path, value in t.items():
        copy = f[("ref",) + path]
        assert np.array_equal(np.asarray(copy), np.asarray(value))
        assert copy.unsafe_buffer_pointer() != value.unsafe_buffer_pointer()
    # a resume rebuilds the frozen tree, the copy's starting values included, with the same bits
    again = flatten(frozen_params(program, 0))
    assert again.keys() == f.keys()
    for path in f:
        assert np.array_equal(np.asarray(again[path]), np.asarray(f[path])), path


def test_a_copy_of_a_pretrained_model_holds_the_checkpoints_values(tmp_path):
    from safetensors.numpy import save_file
    from sexpgpu_runtime.weights.params import flatten
    from sexpgpu_runtime.weights.pretrained import frozen_params, initial_params
    rng = np.random.default_rng(1)
    tensors = {"embed": rng.standard_normal((16, 32)).astype(np.float32),
               "out": rng.standard_normal((32, 16)).astype(np.float32)}
    save_file(tensors, str(tmp_path / "start.safetensors"))
    text = TEXT.replace("(defmodel policy\n  :params (:embed (normal [vocab dim] :std 0.1) :blocks (repeat block 2) "
                        ":out (normal [dim vocab] :std 0.1)\n           :teacher teacher)",
                        "(defmodel policy\n  :params (:embed (normal [vocab dim] :std 0.1) :out (normal [dim vocab] "
                        ":std 0.1))\n  :pretrained \"start.safetensors\"")
    text = text.replace("(+ (matmul (block (take (getf self :embed) row)) (getf self :out)) (teacher row))",
                        "(matmul (take (getf self :embed) row) (getf self :out))")
    program = program_of(text, str(tmp_path / "run.sx"))
    for f in (flatten(initial_params(program, 0)[1]), flatten(frozen_params(program, 0))):
        for name, value in tensors.items():
            assert np.array_equal(np.asarray(f[("ref", name)]), value)


@pytest.mark.slow
def test_the_copy_stays_at_the_start_while_the_source_trains_and_a_resume_keeps_it(tmp_path):
    from helpers import run
    from sexpgpu_runtime import RunOptions, RunStopped, train
    from sexpgpu_runtime.weights.params import flatten
    text = TEXT.replace(":log (:every 1))", ":log (:every 1) :checkpoint (:every 2 :keep 2))")
    full = run(text, tmp_path / "full", 6)
    kl = [json.loads(line)["kl"] for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    assert kl[0] == 0.0 and kl[-1] > 1e-3        # the policy moves away from its frozen start
    d = tmp_path / "stopped"

    def before_trip(step, trip):
        if (step, trip) == (3, 0):
            os.kill(os.getpid(), signal.SIGTERM)
    program = program_of(text, str(d / "run.sx"))
    with pytest.raises(RunStopped):
        train(program, RunOptions(steps=6, run_dir=d, quiet=True), on_trip=before_trip)
    resumed = train(program, RunOptions(steps=6, run_dir=d, quiet=True, resume=True))
    for a, b in ((full.trainable, resumed.trainable), (full.frozen, resumed.frozen)):
        fa, fb = flatten(a), flatten(b)
        assert fa.keys() == fb.keys()
        for k in fa:
            assert np.array_equal(np.asarray(fa[k]), np.asarray(fb[k])), k
    assert [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] == \
        [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
