"""A `:pretrained` model holding a `:pretrained` sub-model (a policy loaded from one checkpoint with a
frozen reference from another): each checkpoint holds its own model's parameters. `lint
--read-files` asks the outer checkpoint for none of the sub-model's tensors and its `:names` maps
none of them, and the run reads each parameter from its own model's file."""
from __future__ import annotations

import numpy as np
import pytest

from sexpgpu_lang import analyze
from sexpgpu_runtime.weights.params import flatten
from sexpgpu_runtime.weights.pretrained import frozen_params, initial_params
from test_hf_checkpoints import write_hf

REF = """\
(def vocab 16)
(def seq 8)
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 32
  :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel ref
  :params (:w (normal [vocab vocab] :std 0.1))
  :apply (lambda (self x) (matmul x (getf self :w)))
  :frozen true
  :pretrained (:path "ref-hf" :file-dtype :bf16))
"""
TAIL = """\
(model lm)
(prepare (lambda (batch ctx) (list :x (field batch :row) :y (mod (+ (field batch :row) (field batch :stride)) vocab))))
(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))))
(run :loader train :steps 10 :optimizer (sgd :lr 0.1))
"""
POLICY = """\
(defmodel lm
  :params (:embed (normal [vocab 32] :std 0.1) :out (normal [32 vocab] :std 0.1) :ref ref)
  :apply (lambda (self row) (ref (matmul (take (getf self :embed) row) (getf self :out))))
  :pretrained {pretrained})
"""
PLAIN = '(:path "policy-hf" :file-dtype :bf16)'
NAMED = '(:path "policy-hf" :file-dtype :bf16 :names (:embed "model.embed.weight" :out "lm_head.weight"))'


def write_checkpoints(tmp_path, named: bool) -> dict[str, np.ndarray]:
    """The two HF-layout checkpoints (the policy's in two shards), each tensor of distinct values."""
    rng = np.random.default_rng(0)
    ref = {"w": rng.standard_normal((16, 16)).astype(np.float32)}
    policy = {"embed": rng.standard_normal((16, 32)).astype(np.float32),
              "out": rng.standard_normal((32, 16)).astype(np.float32)}
    write_hf(tmp_path / "ref-hf", ref, shards=1)
    tensors = {"model.embed.weight": policy["embed"], "lm_head.weight": policy["out"]} if named else policy
    write_hf(tmp_path / "policy-hf", tensors)
    return {"embed": policy["embed"], "out": policy["out"], "ref.w": ref["w"]}


def run_file(tmp_path, named: bool) -> str:
    text = REF + POLICY.format(pretrained=NAMED if named else PLAIN) + TAIL
    (tmp_path / "nested.sx").write_text(text, encoding="utf-8")
    return text


@pytest.mark.parametrize("named", [False, True], ids=["tensor names", ":names"])
def test_lint_read_files_is_clean_and_each_parameter_comes_from_its_own_checkpoint(tmp_path, named):
    values = write_checkpoints(tmp_path, named)
    text = run_file(tmp_path, named)
    res = analyze(text, str(tmp_path / "nested.sx"), read_files=True)
    assert [(d.code, d.message) for d in res.diagnostics] == []
    by_model = {spec.model: sorted(rel for rel, _ in spec.names) for spec in res.program.pretrained}
    assert by_model == {"lm": ["embed", "out"], "ref": ["w"]}
    trainable, frozen = initial_params(res.program, 0)
    got = {".".join(k): np.asarray(v, np.float32) for k, v in {**flatten(trainable), **flatten(frozen)}.items()}
    assert sorted(got) == sorted(values)
    import ml_dtypes
    for k, v in values.items():   # the bf16 file's values, cast to f32
        np.testing.assert_array_equal(got[k], v.astype(ml_dtypes.bfloat16).astype(np.float32), err_msg=k)
    assert set(".".join(k) for k in flatten(frozen)) == {"ref.w"}
    np.testing.assert_array_equal(np.asarray(frozen_params(res.program, 0)["ref"]["w"]),
                                  np.asarray(frozen["ref"]["w"]))


def test_the_sub_model_s_tensor_missing_from_its_own_file_is_still_its_own_error(tmp_path):
    write_checkpoints(tmp_path, False)
    write_hf(tmp_path / "ref-hf", {"v": np.zeros((16, 16), np.float32)}, shards=1)
    res = analyze(run_file(tmp_path, False), str(tmp_path / "nested.sx"), read_files=True)
    assert [(d.code, d.message.split(":")[0]) for d in res.diagnostics] == [("E-MODEL-003", "`ref-hf`")]
    assert "has no tensor `w`" in res.diagnostics[0].message


def test_the_outer_mapping_need_not_and_cannot_map_the_sub_model(tmp_path):
    write_checkpoints(tmp_path, True)
    text = run_file(tmp_path, True).replace(':out "lm_head.weight"', ':out "lm_head.weight" :ref.w "ref.w"')
    res = analyze(text, str(tmp_path / "nested.sx"))
    assert [d.code for d in res.diagnostics] == ["E-MODEL-006"]
    assert "maps `ref.w`, which is not a parameter of `lm`" in res.diagnostics[0].message
