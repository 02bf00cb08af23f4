"""LoRA adapters (`defmodel`'s `:lora`, sexpgpu_lang/check/lora.py, sexpgpu_runtime/weights/lora.py,
docs/checkpoints.md "LoRA adapters"): the adapters typed beside their targets and the base frozen, on
a one-form model and on a written-out one; E-MODEL-008; the memory plan counting the adapters'
optimizer state alone; against peft (tests/fixtures/lora, written by benchmarks/peft_parity.py with
peft and transformers, checked here without them): the logits and greedy tokens of the base with
peft's adapter, the generator decoding with the adapters, a `:copy` reference equal to the base,
the export's names, shapes and adapter_config.json equal to peft's, the merged export equal to the
unmerged model; a run that trains the adapters alone and exports them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import check, program_of
from runfile import RunFile
from sexpgpu_lang import analyze

FIXTURES = Path(__file__).parent / "fixtures"
LORA = FIXTURES / "lora"
LLAMA3 = FIXTURES / "hf" / "llama3"

SMALL = """(def vocab 16)
(def seq 8)
(def dim 32)

(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 8
  :fields (:row [seq] :i32
           :stride [1] :i32))

(defmodel block
  :params (:wq (normal [dim 4 8] :std 0.1) :gain (ones [dim]))
  :apply (lambda (self h) (* (getf self :gain) (reshape (einsum "btd,dhk->bthk" h (getf self :wq)) [8 seq dim]))))

(defmodel student
  :params (:embed (normal [vocab dim] :std 0.1)
           :blocks (repeat block 2)
           :out (normal [dim vocab] :std 0.1))
  :apply (lambda (self row) (matmul (blocks (take (getf self :embed) row)) (getf self :out)))
  LORA)

(model student)

(objective (lambda (batch ctx)
  (mean (cross-entropy (model (field batch :row)) (field batch :row)))))

(run :loader train :steps 2 :optimizer (adam :lr 1e-2))
"""


FIXTURE_LORA = '\n  :lora (:targets [:wq :wv :wo :w-gate] :rank 4 :alpha 8 :pretrained "adapter")'


def small(lora: str, under: str | None = None) -> str:
    """SMALL with `lora` as the student's last setting; with `under`, a `;; ^^^ E-MODEL-008` marker
    under the first `under` in `lora`."""
    text = SMALL.replace("LORA)", lora + ")").replace("(blocks ", "(block ")
    if under is not None:
        col = 2 + lora.index(under)
        text = text.replace(lora + ")\n", lora + ")\n;;" + " " * (col - 2) + "^" * len(under) + " E-MODEL-008\n")
    return text


def fixture_text(extra: str = "", lora: str | None = None) -> str:
    """tests/fixtures/lora/llama3-lora.sx with its paths absolute (checked from anywhere), `extra`
    after `(model student)`, and `lora` in place of its `:lora` setting."""
    text = (LORA / "llama3-lora.sx").read_text()
    assert FIXTURE_LORA in text
    if lora is not None:
        text = text.replace(FIXTURE_LORA, lora)
    text = text.replace('"../hf/llama3"', json.dumps(str(LLAMA3))).replace('"adapter"', json.dumps(str(LORA / "adapter")))
    return text.replace("(model student)", "(model student)" + extra)


def test_adapters_are_typed_beside_their_targets_and_the_whole_base_is_frozen_on_a_one_form_model():
    p = program_of(fixture_text(), str(LORA / "x.sx"))
    shapes = {".".join(q.path): (q.shape, q.frozen) for q in p.params}
    assert shapes["layers.wq.lora-a"] == ((2, 32, 4), False) and shapes["layers.wq.lora-b"] == ((2, 4, 32), False)
    assert shapes["layers.wv.lora-b"] == ((2, 4, 16), False)   # 2 key-value heads of 8
    assert shapes["layers.wo.lora-a"] == ((2, 32, 4), False)   # [heads head-width width]: the input is 4 x 8
    assert shapes["layers.w-gate.lora-b"] == ((2, 4, 64), False)
    assert {k for k, (_, frozen) in shapes.items() if not frozen} == {
        f"layers.{t}.lora-{ab}" for t in ("wq", "wv", "wo", "w-gate") for ab in "ab"}
    init = {".".join(q.path): q.init for q in p.params}
    assert init["layers.wq.lora-a"] == ("uniform", {"min": -1 / 32 ** 0.5, "max": 1 / 32 ** 0.5})   # kaiming, a=sqrt(5)
    assert init["layers.wq.lora-b"] == ("zeros", {})
    assert {(a.path, a.in_axes, a.scale) for a in p.adapters} == {
        (("layers", "wq"), 1, 2.0), (("layers", "wv"), 1, 2.0), (("layers", "wo"), 2, 2.0), (("layers", "w-gate"), 1, 2.0)}


def test_adapters_on_a_written_out_model_below_a_repeat_with_rslora():
    p = program_of(small(":lora (:targets [:wq] :rank 2 :alpha 4 :rslora true)"))
    shapes = {".".join(q.path): (q.shape, q.frozen) for q in p.params}
    assert shapes["blocks.wq.lora-a"] == ((2, 32, 2), False) and shapes["blocks.wq.lora-b"] == ((2, 2, 32), False)
    assert all(frozen for k, (_, frozen) in shapes.items() if "lora" not in k)
    assert p.adapters[0].scale == pytest.approx(4 / 2 ** 0.5)


def test_a_target_that_does_not_exist_and_a_rank_past_the_matrix_are_said_at_their_place():
    res = check(small(":lora (:targets [:wqq] :rank 2)", ":wqq"))
    assert "`:wqq` is no parameter of `student` or of a model below it; did you mean `:wq`?" in res.diagnostics[0].message
    res = check(small(":lora (:targets [:wq :out] :rank 20)", "20"))
    assert "past the matrix of `:out` of `student`, 32 inputs by 16 outputs" in res.diagnostics[0].message
    res = check(small(":lora (:targets [:wq] :rank 2 :dropout 1.0)", "1.0"))
    assert "`:dropout` must be a probability below 1, got 1" in res.diagnostics[0].message
    check(small(":lora (:targets [:wq] :rank 2 :dropout -0.1)", "-0.1"))
    res = check(small(':lora (:targets [:wq] :rank 2 :dropout "0.1")', '"0.1"'))   # a string, shown as one
    assert res.diagnostics[0].message.endswith('must be a number of 0 or more, got "0.1"')
    res = check(small(":lora (:targets [:wq] :rank :two)", ":two"))
    assert res.diagnostics[0].message.endswith("must be an integer of 1 or more, got :two")
    check(small(":lora (:targets [:gain] :rank 1)", ":gain"))
    check(small(":lora (:targets [:wq] :rank 0)", "0"))


def with_ref(text: str) -> RunFile:
    """`text` with `ref`, a `:copy` of the student, whose mean output the objective adds to its loss."""
    return (RunFile(text).add("(defmodel ref :copy student)", after="model")
            .set("objective (mean", "(+ (mean (ref (field batch :row))) (mean (cross-entropy (model (field batch :row)) "
                                    "(field batch :row))))"))


def test_a_copy_of_a_lora_model_is_its_base_with_no_parameters_and_a_copy_of_another_model_is_a_copy():
    lora = program_of(with_ref(small(":lora (:targets [:wq] :rank 2)")))
    assert not any(q.path[0] == "ref" for q in lora.params)
    calls = [e for e in __import__("sexpgpu_lang.ir", fromlist=["walk"]).walk(lora.objective.body)
             if type(e).__name__ in ("ModelCall", "Repeat")]
    assert any(c.model == "ref" and not c.adapters for c in calls)
    assert any(c.adapters == (("wq", 1.0, 0.0),) for c in calls)   # the student's own call: alpha 2 / r 2, no dropout
    plain = program_of(with_ref(small("")))
    assert any(q.path[0] == "ref" for q in plain.params)   # (main's `:copy`: a copy of the parameters)


def test_full_fine_tuning_would_not_fit_where_the_lora_run_does():
    """The memory plan (the CPU's memory model: no donation) counts the adapters' optimizer state
    alone: a budget between the two plans refuses full fine-tuning and accepts LoRA."""
    from sexpgpu_lang.explain import optimizer_bytes, param_bytes
    from sexpgpu_runtime.devices.device import fit_verdict
    full, lora = program_of(fixture_text(lora=""), str(LORA / "x.sx")), program_of(fixture_text(), str(LORA / "x.sx"))
    assert not full.adapters and lora.adapters
    assert param_bytes(full) == param_bytes(lora) - sum(4 * int(np.prod(q.shape)) for q in lora.params if "lora" in q.path[-1])
    adapters = sum(4 * int(np.prod(q.shape)) for q in lora.params if not q.frozen)
    assert 2 * adapters <= optimizer_bytes(lora) <= 2 * adapters + 8   # adam's m and v of the adapters, and its count
    budget = param_bytes(full) + optimizer_bytes(full) // 2
    assert "could never fit" in fit_verdict(full, budget, "fake memory", 1, "cpu", donate=False)
    assert fit_verdict(lora, 16 * 2**30, "fake memory", 1, "cpu", donate=False) is None
    assert param_bytes(lora) + optimizer_bytes(lora) < budget


@pytest.fixture(scope="module")
def parity():
    from benchmarks.hf_parity import sexpgpu_forward
    return sexpgpu_forward


def test_the_base_with_peft_s_adapter_gives_peft_s_logits_and_greedy_tokens_and_the_base_reference_the_base(parity, tmp_path):
    from benchmarks.hf_parity import relative
    want = np.load(LORA / "lora.npz")
    run = tmp_path / "run.sx"
    run.write_text(fixture_text(extra="\n(defmodel ref :copy student)").replace(
        ":logits (student row)", ":logits (student row) :base (ref row)"))
    forward, program, trainable, frozen = parity(run)
    assert relative(forward(want["ids"]), want["logits"]) <= 1e-5
    assert relative(want["base_logits"], want["logits"]) > 0.1   # the adapters matter
    assert np.array_equal(forward(want["ids"], "greedy"), want["greedy"])   # `:decode` with caches, adapters applied
    assert relative(forward(want["ids"], "base"), want["base_logits"]) <= 1e-5   # the reference: no adapter
    assert len(program.params) == len(program_of(fixture_text(), str(run)).params)   # the copy has no parameter


def test_the_generator_decodes_with_the_adapters(parity, tmp_path):
    """A generator's greedy rows (the whole row forwarded at each trip) are peft's greedy tokens."""
    import jax
    import jax.numpy as jnp
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lowering import Effects, run_phase
    from sexpgpu_runtime.weights.params import merge
    want = np.load(LORA / "lora.npz")
    gen = """
(defgenerate :trips 4
  :init (lambda (batch ctx) (list :gen (where (< (iota [1 seq] :axis 1) 4) (field batch :row) 0)))
  :step (lambda (state trip ctx)
          (let* ((row (getf state :gen))
                 (at (+ (cast trip :i32) 4))
                 (column (iota [1 seq] :axis 1))
                 (guess (sum (where (= column (- at 1)) (argmax (student row)) 0) :axes [1] :keepdims true)))
            (list :gen (where (= column at) guess row)))))
"""
    run = tmp_path / "run.sx"
    run.write_text(fixture_text(extra=gen))
    _, program, trainable, frozen = parity(run)
    params = merge(trainable, frozen)
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()}
    batch = {"row": jnp.asarray(want["ids"]), "stride": jnp.ones((2, 1), jnp.int32)}
    g = program.generate
    state = run_phase(g.init, [batch, ctx], params, Effects(jax.random.key(0), in_generator=True))
    for trip in range(4):
        state = run_phase(g.step, [state, jnp.asarray(trip, jnp.int64), ctx], params,
                          Effects(jax.random.key(0), in_generator=True))
    assert np.array_equal(np.asarray(state["gen"]), want["greedy"])


def test_the_export_has_peft_s_names_shapes_and_config_and_the_merged_export_is_the_unmerged_model(parity, tmp_path):
    from benchmarks.hf_parity import relative
    from safetensors.numpy import load_file
    from sexpgpu_lang.name_mapping import stdlib_names
    from sexpgpu_runtime.weights.pretrained import export_params
    want = np.load(LORA / "lora.npz")
    layout = json.loads((LORA / "layout.json").read_text())
    run = tmp_path / "run.sx"
    run.write_text(fixture_text())
    forward, program, trainable, frozen = parity(run)
    export_params(tmp_path / "adapter", trainable, frozen, program=program, adapter=True)
    written = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    assert {k: list(v.shape) for k, v in written.items()} == layout["tensors"]
    peft_wrote = load_file(str(LORA / "adapter" / "adapter_model.safetensors"))
    assert all(np.array_equal(written[k], peft_wrote[k]) for k in peft_wrote)   # read in, written out: the same
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    for key in ("peft_type", "r", "lora_alpha", "lora_dropout", "bias", "task_type", "use_rslora", "fan_in_fan_out"):
        assert config[key] == layout["config"][key], key
    assert sorted(config["target_modules"]) == sorted(layout["config"]["target_modules"])
    assert set(config) <= set(layout["config"])   # every key is one peft writes
    # the merged model, in the base's layout, read by the written-out fixture model without adapters
    export_params(tmp_path / "merged", trainable, frozen, names=dict(stdlib_names()["llama"]), program=program)
    shutil.copy(LLAMA3 / "config.json", tmp_path / "merged" / "config.json")
    plain = (FIXTURES / "hf" / "llama3.sx").read_text().replace('"llama3"', json.dumps(str(tmp_path / "merged")))
    (tmp_path / "merged.sx").write_text(plain)
    merged_forward = parity(tmp_path / "merged.sx")[0]
    assert relative(merged_forward(want["ids"]), forward(want["ids"])) <= 1e-6


def test_an_adapter_of_another_rank_is_refused_naming_the_file(tmp_path):
    from sexpgpu_runtime import RunError
    from sexpgpu_runtime.weights.pretrained import initial_params
    text = RunFile(fixture_text()).set("defmodel student :lora :rank", "2")
    with pytest.raises(RunError, match="adapter_config.json has r 4 and lora_alpha 8; the file's `:lora` has `:rank` 2"):
        initial_params(program_of(text, str(tmp_path / "x.sx")), 0)


def test_export_adapter_is_refused_before_training_without_lora_or_beside_export_names(tmp_path):
    from sexpgpu_runtime import OptionError, RunOptions, check_options
    plain = program_of(small(""))
    with pytest.raises(OptionError, match="has no LoRA adapters"):
        check_options(plain, RunOptions(export=tmp_path / "a", export_adapter=True))
    no_module = program_of(small(":lora (:targets [:wq] :rank 2)"))
    with pytest.raises(OptionError, match="no checkpoint module"):
        check_options(no_module, RunOptions(export=tmp_path / "a", export_adapter=True))
    lora = program_of(fixture_text(), str(tmp_path / "x.sx"))
    with pytest.raises(OptionError, match="give one"):
        check_options(lora, RunOptions(export=tmp_path / "a", export_adapter=True, export_names="llama"))
    check_options(lora, RunOptions(export=tmp_path / "a", export_adapter=True))


@pytest.mark.slow
def test_a_lora_run_trains_the_adapters_alone_exports_them_and_a_run_starts_from_them(tmp_path):
    from helpers import run
    from sexpgpu_runtime.weights.pretrained import initial_params
    text = f"""(def ckpt {json.dumps(str(LLAMA3))})
(def vocab (checkpoint-config ckpt :vocab))
(loader rows
  :source (stride-rows :vocab vocab :seq 8)
  :batch 2
  :fields (:row [8] :i32 :stride [1] :i32))
(defmodel student :pretrained ckpt :lora (:targets [:wq :wv] :rank 4 :alpha 8))
(model student)
(objective (lambda (inputs ctx)
  (mean (cross-entropy (model (field inputs :row)) (field inputs :row)))))
(run :loader rows :steps 3 :seed 0 :optimizer (adam :lr 1e-2))
"""
    program = program_of(text, str(tmp_path / "run.sx"))
    start_t, start_f = initial_params(program, 0)
    res = run(text, tmp_path / "a", 3, export=tmp_path / "adapter", export_adapter=True)
    assert set(res.trainable["layers"]) == {"wq.lora-a", "wq.lora-b", "wv.lora-a", "wv.lora-b"}
    assert set(res.trainable) == {"layers"}
    assert not np.array_equal(np.asarray(res.trainable["layers"]["wq.lora-b"]), 0)   # B moved off zero
    assert np.array_equal(np.asarray(res.frozen["layers"]["wq"]), np.asarray(start_f["layers"]["wq"]))   # the base did not
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["target_modules"] == ["q_proj", "v_proj"]
    # a later run starts from the saved adapter: its first parameters are the export's
    again = RunFile(text).set("defmodel student :lora :pretrained", json.dumps(str(tmp_path / "adapter")))
    t2, _ = initial_params(program_of(again, str(tmp_path / "run.sx")), 0)
    for k in ("wq.lora-a", "wq.lora-b", "wv.lora-b"):
        assert np.array_equal(np.asarray(t2["layers"][k]), np.asarray(res.trainable["layers"][k])), k
    # the merged export through the family's mapping: the base's layout, the adapters folded in
    res2 = run(text, tmp_path / "b", 3, export=tmp_path / "merged", export_names="llama")
    from safetensors.numpy import load_file
    merged = load_file(str(tmp_path / "merged" / "model.safetensors"))
    index = json.loads((LLAMA3 / "model.safetensors.index.json").read_text())
    assert set(merged) == set(index["weight_map"])   # the base's names: no adapter left
    wq = np.asarray(res2.frozen["layers"]["wq"][0]).reshape(32, 32)
    a, b = np.asarray(res2.trainable["layers"]["wq.lora-a"][0]), np.asarray(res2.trainable["layers"]["wq.lora-b"][0])
    np.testing.assert_allclose(merged["model.layers.0.self_attn.q_proj.weight"], (wq + 2.0 * a @ b).T, rtol=1e-6, atol=1e-7)


def test_adapters_of_two_models_train_and_a_parameter_adapted_twice_is_refused():
    text = RunFile(small(":lora (:targets [:out] :rank 2)")).set("defmodel block :lora", "(:targets [:wq] :rank 2)")
    p = program_of(text)
    assert {".".join(q.path) for q in p.params if not q.frozen} == {
        "out.lora-a", "out.lora-b", "blocks.wq.lora-a", "blocks.wq.lora-b"}
    twice = text.set("defmodel student :lora :targets", "[:out :wq]")
    res = analyze(twice, "check.sx")
    assert [d.code for d in res.diagnostics] == ["E-MODEL-008"] and "has adapters already" in res.diagnostics[0].message


def test_an_adapter_directory_without_its_config_is_said_at_the_path_when_files_are_read():
    text = fixture_text().replace(json.dumps(str(LORA / "adapter")), json.dumps(str(LORA)))
    res = analyze(text, str(LORA / "x.sx"), read_files=True)
    assert [d.code for d in res.diagnostics] == ["E-MODEL-008"]
    assert "holds no adapter_config.json" in res.diagnostics[0].message
    assert analyze(text, str(LORA / "x.sx")).diagnostics == []   # (not read: nothing said)


def test_a_run_records_the_adapter_files_it_starts_from_for_its_resume():
    """The identity a resume compares (checkpoint.py `Provenance`): the adapter's two files beside the
    checkpoint's, by their SHA-256."""
    import hashlib
    from sexpgpu_runtime.weights.pretrained import content_hashes
    got = content_hashes(program_of(fixture_text(), str(LORA / "x.sx")))
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        path = LORA / "adapter" / name
        assert got[str(path)] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert any(k.startswith(str(LLAMA3)) for k in got)
