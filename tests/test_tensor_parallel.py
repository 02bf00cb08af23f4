"""Tensor parallelism: the mesh's `model` axis (sexpgpu_lang/mesh.py's rules, sexpgpu_runtime/devices/sharding.py),
on the CPU's 8 fake devices, in a child process (XLA_FLAGS must be set before JAX starts; this pytest
process has started it with one device).

The teacher is tests/fixtures/hf/llama3.sx's (the one form's block, `llama-block-freq-cached`, with its
caches through the stacked layers) at 8 query heads over 2 KV heads, random weights: split 2, 4 and 8
ways along `model` its logits and its greedy tokens (decoded with the caches) are one device's."""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from benchmarks.tensor_parallel import teacher_text
from helpers import ROOT, program_of
from runfile import RunFile

EIGHT = "--xla_force_host_platform_device_count=8"


TEACHER_CHILD = textwrap.dedent(r'''
    import json, sys
    import jax, jax.numpy as jnp
    import numpy as np
    from benchmarks.hf_parity import sexpgpu_forward
    from sexpgpu_runtime.devices.sharding import DataParallel
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lowering import Effects, run_phase

    _, program, trainable, frozen = sexpgpu_forward(__import__("pathlib").Path(sys.argv[1]))
    params = {**trainable, **frozen}
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()}
    ids = np.random.default_rng(0).integers(0, 96, (2, 8)).astype(np.int32)
    batch = {"row": jnp.asarray(ids), "stride": jnp.ones((2, 1), jnp.int32)}
    prepare = jax.jit(lambda batch, params: run_phase(program.prepare, [batch, ctx], params, Effects(jax.random.key(0))))
    out = {}
    for ways in (1, 2, 4, 8):
        placed = params
        if ways > 1:
            dp = DataParallel(1, model=ways)
            placed = dp.put_state(params)
            batch_on = dp.put_replicated(batch)
        else:
            batch_on = batch
        got = prepare(batch_on, placed)
        layers = placed["layers"]
        out[ways] = {"logits": np.asarray(got["logits"]).tolist(), "greedy": np.asarray(got["greedy"]).tolist(),
                     "specs": {k: str(getattr(v.sharding, "spec", "")) for k, v in layers.items()},
                     "shard": {k: list(v.addressable_shards[0].data.shape) for k, v in layers.items()},
                     "embed": str(getattr(placed["embed"].sharding, "spec", "")),
                     "lm_head": str(getattr(placed["lm-head"].sharding, "spec", ""))}
    # one decoding trip (benchmarks/tensor_parallel.py's `prepare`): the caches it returns split by KV heads
    _, trip, tr, fr = sexpgpu_forward(__import__("pathlib").Path(sys.argv[2]))
    dp = DataParallel(1, model=2)
    got = jax.jit(lambda b, p: run_phase(trip.prepare, [b, ctx], p, Effects(jax.random.key(0))))(
        dp.put_replicated(batch), dp.put_state({**tr, **fr}))
    out["cache"] = {"k": str(got["k"].sharding.spec), "k_shard": list(got["k"].addressable_shards[0].data.shape)}
    # a generator's state [B S K H] (batch first) constrained per record keeps its split by heads
    dp2 = DataParallel(2, model=2)
    cache = jax.device_put(np.zeros((4, 8, 2, 4), np.float32),
                           jax.sharding.NamedSharding(dp2.mesh, jax.sharding.PartitionSpec("data", None, "model")))
    kept = jax.jit(lambda c: dp2.constrain_records({"k": c * 2}, 4))(cache)["k"]
    out["cache"]["state"] = list(kept.addressable_shards[0].data.shape)
    print(json.dumps(out))
''')


#: A generator whose trips decode with the teacher's KV caches in the state ([layers B seq kv-heads
#: head-width]), and an objective on what it wrote: the caches split by heads with `wk` and `wv`.
GENERATE = """(defgenerate :trips 4
  :init (lambda (records ctx)
          (let* ((row (field records :row))
                 (empty (zeros [layers (axis-size row 0) seq kv-heads head-width]))
                 (o (teacher :decode (slice row :axis 1 :start 0 :end 3) 0 empty empty)))
            (list :row row :k (getf o :k) :v (getf o :v))))
  :step (lambda (state trip ctx)
          (let* ((at (+ (cast trip :i32) 4))
                 (out (teacher :decode (row-token (getf state :row) (- at 1)) (- at 1) (getf state :k) (getf state :v))))
            (decode-trip (getf state :row) out at trip 0)))
  :finish (lambda (state ctx) (list :sample (getf state :row))))

(objective (lambda (b ctx)
  (mean (cross-entropy (model (field b :sample)) (field b :sample)))))
"""


def generating_teacher(**sizes) -> str:
    """The teacher (a batch of 4) decoding in a generator with its caches in the state (`GENERATE`)."""
    text = teacher_text(batch=4, **sizes)
    start, end = text.index("(prepare "), text.index("(run ")
    return text[:start] + GENERATE + "\n" + text[end:]


def child(script: str, *args: str, timeout: int = 300) -> dict:
    env = {**os.environ, "XLA_FLAGS": EIGHT, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_teacher_split_2_4_and_8_ways_gives_one_device_s_logits_and_greedy_tokens(tmp_path):
    run, trip = tmp_path / "teacher.sx", tmp_path / "trip.sx"
    run.write_text(teacher_text())
    trip.write_text(teacher_text(one_trip=True))
    out = child(TEACHER_CHILD, str(run), str(trip))
    one = out["1"]
    for ways in ("2", "4", "8"):
        got = out[ways]
        np.testing.assert_allclose(got["logits"], one["logits"], rtol=1e-5, atol=1e-6)
        assert got["greedy"] == one["greedy"], ways
    # The weights are split as their structure says: query heads, MLP width, vocabulary; the 2 KV heads
    # split 2 ways and are replicated (MaxText's rule) 4 and 8 ways.
    two, four, eight = out["2"], out["4"], out["8"]
    assert two["specs"]["wq"] == "P(None, None, 'model')" and two["shard"]["wq"] == [2, 32, 4, 4]
    assert eight["shard"]["wq"] == [2, 32, 1, 4] and eight["shard"]["wo"] == [2, 1, 4, 32]
    assert two["specs"]["wk"] == "P(None, None, 'model')" and two["shard"]["wk"] == [2, 32, 1, 4]
    assert four["specs"]["wk"] == "P()" and four["shard"]["wk"] == [2, 32, 2, 4]
    assert four["shard"]["w-up"] == [2, 32, 16] and four["shard"]["w-down"] == [2, 16, 32]
    assert four["specs"]["attn-norm"] == "P()"
    assert four["embed"] == "P('model',)" and four["lm_head"] == "P(None, 'model')"
    # the KV caches [layers B S K H] come out split by heads, as the weights that wrote them
    assert out["cache"]["k"] == "P(None, None, None, 'model')" and out["cache"]["k_shard"] == [2, 2, 8, 1, 4]
    assert out["cache"]["state"] == [2, 8, 1, 4]


@pytest.mark.slow
def test_training_on_data_x_model_gives_one_device_s_losses_and_resumes_on_another_mesh(tmp_path):
    """The teacher trained (its `objective`) 2 steps on data=2 x model=4 with FSDP along data, saved, and
    resumed on model=8: the 4 steps log one device's losses. The checkpoint holds no mesh: it is restored
    split as the resuming run splits it."""
    run = tmp_path / "tp.sx"
    run.write_text(teacher_text().replace("(run :loader rows :steps 1",
                                          "(run :loader rows :steps 4 :log (:every 1) :checkpoint (:every 2)"))
    env = {**os.environ, "XLA_FLAGS": EIGHT, "JAX_PLATFORMS": "cpu"}
    base = [sys.executable, "-m", "sexpgpu_cli.main", "run", str(run), "--no-progress"]
    one, split = ["--run-dir", str(tmp_path / "one")], ["--run-dir", str(tmp_path / "split")]
    for args in (["--steps", "4", "--mesh", "data=1"] + one,
                 ["--steps", "2", "--mesh", "data=2,model=4", "--fsdp"] + split,
                 ["--steps", "4", "--mesh", "model=8", "--resume"] + split):
        r = subprocess.run(base + args, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    assert "mesh data=1,model=8, parameters split by heads, MLP width and vocabulary along model=8" in r.stderr
    rows = lambda d: [json.loads(l) for l in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows("split")] == [r["step"] for r in rows("one")] == [1, 2, 3, 4]
    np.testing.assert_allclose([r["loss"] for r in rows("split")], [r["loss"] for r in rows("one")], rtol=1e-5)


def test_the_split_of_each_parameter_comes_from_its_name_and_shape():
    from sexpgpu_lang.mesh import model_dim, param_dims, spec_text, undivided
    # a repeated block's leading layer axis does not move the split
    assert model_dim("wq", (32, 8, 4), 4) == 1 and model_dim("wq", (2, 32, 8, 4), 4) == 2
    assert model_dim("wo", (2, 8, 4, 32), 8) == 1 and model_dim("w-down", (64, 32), 4) == 0
    assert model_dim("w-up", (32, 64), 4) == 1 and model_dim("b1", (64,), 4) == 0
    assert model_dim("embed", (96, 32), 4) == 0 and model_dim("lm-head", (32, 96), 4) == 1
    assert model_dim("attn-norm", (32,), 4) is None and model_dim("wq", (32, 8, 4), 1) is None
    # fewer KV heads than the axis: replicated (MaxText), not an error; a vocabulary too (GPT-2's 50257)
    assert model_dim("wk", (32, 2, 4), 4) is None and undivided("wk", (32, 2, 4), 4) is None
    assert model_dim("wte", (50257, 768), 2) is None and undivided("wte", (50257, 768), 2) is None
    # query heads or an MLP width the axis does not divide: the checker refuses
    assert "does not divide `wq`'s heads (4" in undivided("wq", (32, 4, 8), 8)
    assert "does not divide `w-gate`'s hidden (48" in undivided("w-gate", (32, 48), 32)
    # the file's override (counted from the last axis) wins; FSDP takes another axis than model's
    assert model_dim("t.wq", (32, 8, 4), 4, {"t.wq": None}) is None and model_dim("norm", (32,), 4, {"norm": -1}) == 0
    assert model_dim("teacher.layers.w-up", (2, 32, 64), 4) == 2
    assert param_dims("wq", (32, 8, 4), 2, 4, True) == (0, 1) and spec_text((0, 1)) == "P('data', 'model')"


def test_the_checker_knows_the_model_axis():
    from sexpgpu_lang import analyze
    clean = RunFile(teacher_text()).set("run :model-parallel", "8")
    assert not [d for d in analyze(clean, "x.sx").diagnostics if d.is_error]
    assert program_of(clean).run.model_parallel == 8
    bad = RunFile(teacher_text(heads=4)).set("run :model-parallel", "8")
    errs = [d for d in analyze(bad, "x.sx").diagnostics if d.is_error]
    # at each parameter whose heads 8 does not divide, in its `:params` entry
    assert [(d.code, bad[d.span.start:d.span.end]) for d in errs] == [
        ("E-FORM-002", "(normal [width heads head-width] :std 0.02)"),
        ("E-FORM-002", "(normal [heads head-width width] :std 0.02)")]
    assert errs[0].message == ("the `model` axis of 8 devices does not divide `wq`'s heads (4, axis 2 of [2, 32, 4, 4]), "
                               "parameter `layers.wq`: each device of the `model` axis takes an equal share of it")
    assert "keep `wq` whole with `:shard (:wq :replicated)`" in errs[0].help
    kept = bad.set("run :shard", "(:wq :replicated :wo :replicated)")
    assert not [d for d in analyze(kept, "x.sx").diagnostics if d.is_error]
    assert program_of(kept).run.shard == (("layers.wq", None), ("layers.wo", None))
    wrong = bad.set("run :model-parallel", "4").set("run :shard", "(:wo 5)")
    errs = [d for d in analyze(wrong, "x.sx").diagnostics if d.is_error]
    assert [d.message for d in errs] == ["`:shard` splits `layers.wo` along axis 5, and it has 3 axes"]
    assert wrong[errs[0].span.start:errs[0].span.end] == "5"
    # a model's name covers its parameters, a deeper key wins: the whole teacher whole, its `wq` by heads;
    # an axis of the declared shape (the layer axis of a repeated block not counted)
    deeper = clean.set("run :shard", "(:teacher :replicated :wq :auto :w-up 0)")
    run = program_of(deeper).run
    assert dict(run.shard)["layers.wo"] is None and "layers.wq" not in dict(run.shard)
    assert dict(run.shard)["layers.w-up"] == -2 and len(run.shard) == 11


def test_explain_prints_each_parameter_s_sharding_and_memory_per_device_under_tp_fsdp_and_both():
    from sexpgpu_lang.explain import explain, to_text
    from sexpgpu_lang.mesh import explain_mesh
    program = program_of(teacher_text())
    whole = explain(program)["memory"]
    tp = explain(explain_mesh(program, "model=4", None))
    both = explain(explain_mesh(program, "data=2,model=4", True))
    fsdp = explain(explain_mesh(program, "data=2", True))
    assert tp["mesh"]["param_shardings"]["layers.wq"] == "P(None, None, 'model')"
    assert tp["mesh"]["param_shardings"]["layers.wk"] == "P()"          # 2 KV heads over 4: replicated
    assert tp["mesh"]["param_shardings"]["embed"] == "P('model')"
    assert both["mesh"]["param_shardings"]["layers.wq"] == "P(None, 'data', 'model')"
    assert fsdp["mesh"]["param_shardings"]["layers.wq"] == "P(None, 'data')"
    # per device: the split parameters are 1/4 (1/8 with FSDP along data too), the replicated whole
    from sexpgpu_lang.types import TensorType
    nbytes = {".".join(p.path): TensorType(p.shape, p.dtype).nbytes for p in program.params}
    kept = sum(b // 4 if tp["mesh"]["param_shardings"][k] != "P()" else b for k, b in nbytes.items())
    assert tp["mesh"]["params_per_device"] == kept < whole["params"]
    assert both["mesh"]["params_per_device"] < tp["mesh"]["params_per_device"]
    assert fsdp["mesh"]["params_per_device"] == whole["params"] // 2
    text = to_text(both)
    assert "memory per device (1 of data=2,model=4): params" in text
    assert "mesh: data=2,model=4 · records per device: `rows` 1" in text
    assert "7 of 12 split along model=4 by heads, MLP width or vocabulary; FSDP: 12 of 12 split" in text
    with pytest.raises(ValueError, match="does not divide `wq`'s heads"):
        explain_mesh(program_of(teacher_text(heads=4)), "model=8", None)


@pytest.mark.slow
def test_explain_xla_counts_each_graph_s_collectives_from_the_compiled_hlo(tmp_path):
    """`explain --xla` on a mesh compiles each graph with the run's shardings: under tensor parallelism the
    training graph all-reduces activations; under FSDP it all-gathers the parameters."""
    run = tmp_path / "t.sx"
    run.write_text(teacher_text())
    env = {**os.environ, "XLA_FLAGS": EIGHT, "JAX_PLATFORMS": "cpu"}

    def explain(*args):
        r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "explain", str(run), "--xla", *args],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout
    tp = json.loads(explain("--mesh", "model=4", "--format", "json"))["xla"]
    fsdp = json.loads(explain("--mesh", "data=2", "--fsdp", "--format", "json"))["xla"]
    train, fsdp_train = tp["graphs"]["train"]["collectives"], fsdp["graphs"]["train"]["collectives"]
    # TP reduces activations; what it gathers (activations, if any) is less than FSDP's gathered weights
    assert train["all-reduce"]["count"] > 0
    assert train.get("all-gather", {"bytes": 0})["bytes"] < fsdp_train["all-gather"]["bytes"]
    assert tp["graphs"]["train"]["collective_bytes_per_step"] == sum(v["bytes"] for v in train.values())
    # the training graph's gradients come out split as their parameters: `wq`'s by heads
    assert "P(None, None, 'model')" in tp["graphs"]["train"]["split_outputs"].values()
    text = explain("--mesh", "data=2,model=4", "--fsdp")
    assert re.search(r"comm all-gather ×\d+ [\d.]+ \w?i?B, all-reduce ×\d+ [\d.]+ \w?i?B per call · .* per step", text)
    assert "collectives move" in text


@pytest.mark.slow
def test_two_processes_train_on_data_x_model_as_one(tmp_path):
    """Two processes of two CPU devices each, a mesh data=2 x model=2 (each process one row of the mesh,
    its two devices the model axis), log one process's losses."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "t.sx"
    run.write_text(teacher_text().replace("(run :loader rows :steps 1", "(run :loader rows :steps 2 :log (:every 1)"))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    base = [sys.executable, "-m", "sexpgpu_cli.main", "run", str(run), "--no-progress"]
    procs = [subprocess.Popen(base + ["--run-dir", str(tmp_path / "two"), "--mesh", "data=2,model=2",
                                      "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    one = subprocess.run(base + ["--run-dir", str(tmp_path / "one"), "--mesh", "data=1"], env=env,
                         capture_output=True, text=True, timeout=300)
    outs = [p.communicate(timeout=300) for p in procs]
    assert one.returncode == 0, one.stderr[-2000:]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    assert "4 cpu devices of the 4 JAX sees in 2 processes; mesh data=2,model=2" in outs[0][1]
    rows = lambda d: [json.loads(l) for l in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows("two")] == [1, 2]
    np.testing.assert_allclose([r["loss"] for r in rows("two")], [r["loss"] for r in rows("one")], rtol=1e-5)


def test_docs_distillation_run_splits_the_teacher_4_ways_and_keeps_the_student_whole():
    """docs/sharding.md's example: examples/distill.sx on data=2 x model=4, `:shard (:student :replicated
    :teacher :auto)`; without the override the student's 2 heads are refused."""
    from sexpgpu_lang import analyze
    from sexpgpu_lang.explain import explain, to_text
    text = RunFile.read(ROOT / "examples" / "distill.sx")
    bare = text.set("run :devices", "2").set("run :model-parallel", "4")
    errs = [d for d in analyze(bare, "examples/distill.sx").diagnostics if d.code == "E-FORM-002"]
    assert [bare[d.span.start:d.span.end].split()[0] for d in errs] == ["(normal", "(normal"]
    assert "does not divide `wq`'s heads (2" in errs[0].message
    split = bare.set("run :shard", "(:student :replicated :teacher :auto)")
    report = explain(program_of(split, "examples/distill.sx"))
    specs = report["mesh"]["param_shardings"]
    assert (specs["teacher.wq"], specs["teacher.wo"], specs["teacher.w1"], specs["teacher.embed"]) == (
        "P(None, 'model')", "P('model')", "P(None, 'model')", "P('model')")
    assert all(v == "P()" for k, v in specs.items() if not k.startswith("teacher."))
    assert "mesh: data=2,model=4 · records per device: `prompts` 16" in to_text(report)
    assert "params 9 of 34 split along model=4 by heads, MLP width or vocabulary" in to_text(report)


def test_the_one_form_teacher_from_a_checkpoint_carries_the_split():
    """`(defmodel teacher :pretrained "llama3" :frozen true)` expands to the family's block (hf_config.py),
    whose parameters the `model` axis splits by name; a head count it does not divide is refused at the
    one form's `:pretrained` value."""
    from sexpgpu_lang import analyze
    from sexpgpu_lang.explain import explain
    fixtures = ROOT / "tests" / "fixtures" / "hf"
    one = (RunFile.read(fixtures / "llama3.sx").drop("defmodel layer")
           .set("defmodel teacher", '(defmodel teacher :pretrained "llama3" :frozen true)')
           .set("model", "(model student)")
           .add("(defmodel student :params (:w (zeros [2]) :teacher teacher) :apply (lambda (self ids) "
                "(* (sum (getf self :w)) (teacher ids))))", before="model"))
    four = one.set("run :model-parallel", "4")
    res = analyze(four, str(fixtures / "one-form.sx"), read_files=True)
    assert not [d for d in res.diagnostics if d.is_error], [d.message for d in res.diagnostics]
    specs = explain(res.program)["mesh"]["param_shardings"]
    teacher = {k: v for k, v in specs.items() if "wq" in k or "wk" in k or "w-up" in k or "lm-head" in k}
    assert set(teacher.values()) == {"P(None, None, 'model')", "P()", "P(None, 'model')"}
    assert [v for k, v in teacher.items() if k.endswith(".wk")] == ["P()"]   # 2 KV heads over 4: replicated
    eight = one.set("run :model-parallel", "8")
    errs = [d for d in analyze(eight, str(fixtures / "one-form.sx"), read_files=True).diagnostics if d.is_error]
    assert errs and all(d.code == "E-FORM-002" and eight[d.span.start:d.span.end] == '"llama3"' for d in errs)
    assert "does not divide `wq`'s heads (4" in errs[0].message


@pytest.mark.slow
def test_a_model_axis_that_does_not_divide_the_heads_is_one_line_before_anything_runs(tmp_path):
    run = tmp_path / "h4.sx"
    run.write_text(teacher_text(heads=4))
    env = {**os.environ, "XLA_FLAGS": EIGHT, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", str(run), "--mesh", "model=8",
                        "--run-dir", str(tmp_path / "r"), "--no-progress"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == (
        "sexpgpu: error: the `model` axis of 8 devices does not divide `wq`'s heads (4, axis 2 of [2, 32, 4, 4]), "
        "parameter `layers.wq`; pick a model axis that divides it")
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def lora_teacher(targets: str = ":wq :wk :wo :w-up :w-down :lm-head") -> RunFile:
    """The teacher with LoRA adapters of rank 2 on `targets` (the base frozen)."""
    return RunFile(teacher_text()).set("defmodel teacher :lora", f"(:targets [{targets}] :rank 2 :alpha 4)")


#: The split each adapter takes with its base on model=4 (8 query heads, 2 KV heads, MLP 64, vocabulary 96):
#: a base split on its output axis splits B on its output axis; on its input axis, A on its input axis;
#: `wk`'s 2 KV heads do not split 4 ways, so its base and both adapters stay whole.
LORA_SPECS = {"layers.wq.lora-a": "P()", "layers.wq.lora-b": "P(None, None, 'model')",
              "layers.wo.lora-a": "P(None, 'model')", "layers.wo.lora-b": "P()",
              "layers.w-up.lora-a": "P()", "layers.w-up.lora-b": "P(None, None, 'model')",
              "layers.w-down.lora-a": "P(None, 'model')", "layers.w-down.lora-b": "P()",
              "lm-head.lora-a": "P()", "lm-head.lora-b": "P(None, 'model')",
              "layers.wk.lora-a": "P()", "layers.wk.lora-b": "P()"}


def test_lora_adapters_split_with_their_base_in_explain():
    """MaxText's and tunix's rule (sexpgpu_lang.mesh.adapter_overrides), as static explain shows it; a
    `model` axis that splits the KV heads splits `wk`'s B with them; a `:shard` of the whole model
    replicates the base and so its adapters."""
    from sexpgpu_lang.explain import explain
    from sexpgpu_lang.mesh import explain_mesh
    program = program_of(lora_teacher())
    specs = explain(explain_mesh(program, "data=2,model=4", None))["mesh"]["param_shardings"]
    assert {k: specs[k] for k in LORA_SPECS} == LORA_SPECS
    two = explain(explain_mesh(program, "model=2", None))["mesh"]["param_shardings"]
    assert (two["layers.wk"], two["layers.wk.lora-a"], two["layers.wk.lora-b"]) == (
        "P(None, None, 'model')", "P()", "P(None, None, 'model')")
    # under FSDP as well, each adapter's other axes go to `data` by FSDP's rule
    both = explain(explain_mesh(program, "data=2,model=4", True))["mesh"]["param_shardings"]
    assert both["layers.wq.lora-b"] == "P('data', None, 'model')" and both["layers.wo.lora-a"] == "P('data', 'model')"
    whole = program_of(lora_teacher().set("run :model-parallel", "4").set("run :shard", "(:teacher :replicated)"))
    specs = explain(whole)["mesh"]["param_shardings"]
    assert set(specs.values()) == {"P()"}

    def specs_with(shard: str) -> dict:
        text = lora_teacher(":wq :wo").set("run :model-parallel", "4").set("run :shard", f"({shard})")
        return {k: v for k, v in explain(program_of(text))["mesh"]["param_shardings"].items() if "lora" in k}
    # an adapter named itself keeps the file's word; `wq` split on its input axis (`:teacher 0`) splits A;
    # split inside its output group (its head width, axis 2) both adapters stay whole
    assert specs_with(":wq.lora-b :replicated")["layers.wq.lora-b"] == "P()"
    assert specs_with(":teacher 0")["layers.wq.lora-a"] == "P(None, 'model')"
    assert specs_with(":wq 2")["layers.wq.lora-a"] == specs_with(":wq 2")["layers.wq.lora-b"] == "P()"


LORA_CHILD = textwrap.dedent(r'''
    import json, sys
    import jax
    from benchmarks.hf_parity import sexpgpu_forward
    from sexpgpu_runtime.devices.sharding import DataParallel
    from sexpgpu_runtime.weights.optim import make_optimizer
    from sexpgpu_runtime.weights.params import flatten

    _, program, trainable, frozen = sexpgpu_forward(__import__("pathlib").Path(sys.argv[1]))
    dp = DataParallel.of(program, 2, model=4)
    placed = dp.put_state(trainable)
    opt = jax.eval_shape(make_optimizer(program.run.optimizer, program).init, trainable)
    mu = [x for x in jax.tree_util.tree_leaves(dp.state_shardings(opt)) if hasattr(x, "spec")]
    out = {".".join(k): {"spec": str(v.sharding.spec), "shard": list(v.addressable_shards[0].data.shape),
                         "shape": list(v.shape)} for k, v in flatten(placed).items()}
    out["moments"] = sorted({str(s.spec) for s in mu})
    print(json.dumps(out))
''')


@pytest.mark.slow
def test_a_lora_run_on_a_model_axis_splits_its_adapters_with_the_base_and_gives_one_device_s_losses(tmp_path):
    """The runtime places the adapters (and their optimizer moments) as explain says, and 3 steps of the LoRA
    run on data=2 x model=4 log one device's losses."""
    run = tmp_path / "lora.sx"
    run.write_text(lora_teacher().replace("(run :loader rows :steps 1", "(run :loader rows :steps 3 :log (:every 1)"))
    got = child(LORA_CHILD, str(run))
    for name, want in LORA_SPECS.items():
        assert got[name]["spec"] == want, name
        full, shard = got[name]["shape"], got[name]["shard"]
        split = [i for i, (a, b) in enumerate(zip(full, shard)) if a != b]
        assert split == ([] if want == "P()" else [want.count("None")]) and \
            all(a == (b * 4 if i in split else b) for i, (a, b) in enumerate(zip(full, shard))), name
    assert "P(None, None, 'model')" in got["moments"]   # Adam's moments of B, split as B
    env = {**os.environ, "XLA_FLAGS": EIGHT, "JAX_PLATFORMS": "cpu"}
    base = [sys.executable, "-m", "sexpgpu_cli.main", "run", str(run), "--no-progress"]
    for args in (["--mesh", "data=1", "--run-dir", str(tmp_path / "one")],
                 ["--mesh", "data=2,model=4", "--run-dir", str(tmp_path / "split")]):
        r = subprocess.run(base + args, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    rows = lambda d: [json.loads(l) for l in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows("split")] == [1, 2, 3]
    losses = [r["loss"] for r in rows("one")]
    assert len(set(losses)) == 3   # the adapters train: the loss moves
    np.testing.assert_allclose([r["loss"] for r in rows("split")], losses, rtol=1e-5)


def test_static_explain_counts_one_device_s_share_of_what_the_model_axis_splits():
    """Each phase's activations per device: the attention's by heads, the MLP's by width, the logits by
    vocabulary, the KV caches by heads (and whole where the KV heads are replicated), so the memory per
    device is below the unsplit figure, and the caches' shardings are shown."""
    from sexpgpu_lang.explain import explain, to_text
    from sexpgpu_lang.mesh import explain_mesh
    program = program_of(generating_teacher(**{"kv-heads": 4}))
    whole = explain(program, target="cpu")
    tp = explain(explain_mesh(program, "model=4", None), target="cpu")["mesh"]
    assert tp["state_shardings"] == {"row": "P()", "k": "P(None, None, None, 'model')",
                                     "v": "P(None, None, None, 'model')"}
    per, mem = tp["memory_per_device"], whole["memory"]
    for phase in ("generation", "train"):
        assert 0 < per[phase] < mem[phase] / 2, phase
    assert tp["peak_per_device"] < mem["peak"] / 2
    # the state the trips carry: the row whole, each cache a quarter
    cache = 2 * 4 * 8 * 4 * 4 * 4
    step = next(p for p in explain(explain_mesh(program, "model=4", None), target="cpu")["plan"]
                if p["phase"] == "generate.step")
    assert step["parts"]["state"] == 4 * 8 * 4 + 2 * cache   # (the report's plan is the whole run's)
    from sexpgpu_lang.explain import memory_plan, step_graphs
    device = memory_plan(program, step_graphs(program, 1, "cpu", model=4), 1, model=4)
    assert next(p for p in device["phases"] if p["phase"] == "generate.step")["parts"]["state"] == \
        4 * 8 * 4 + 2 * cache // 4
    # 2 KV heads over 4 devices: `wk`, `wv` and so the caches whole on every device; the query heads and
    # the MLP still split
    gqa = explain(explain_mesh(program_of(generating_teacher()), "model=4", None), target="cpu")["mesh"]
    assert gqa["state_shardings"]["k"] == "P()"
    assert per["generation"] < gqa["memory_per_device"]["generation"] < mem["generation"]
    # data x model: the records 1/2 more, the caches' split shown in the mesh line and each graph's shard line
    both = explain(explain_mesh(program, "data=2,model=4", None), target="cpu")
    assert both["mesh"]["memory_per_device"]["train"] < per["train"]
    text = to_text(both)
    assert "generator state P('data'); along model `k` P(None, None, None, 'model'), `v` P(None, None, None, 'model')" \
        in text.split("\nmesh: ")[1]
    assert "shard state P('data'); along model `k` P(None, None, None, 'model')" in text


def test_the_split_follows_reshapes_contractions_and_reductions():
    from sexpgpu_lang.explain.split import propagate, regroup
    # heads merged into the width keep the split as its major part; split back, into the heads
    assert regroup((2, 8, 8, 4), (2,), (2, 8, 32), 4) == (2,)
    assert regroup((2, 8, 32), (2,), (2, 8, 8, 4), 4) == (2,)
    # 8 query heads grouped by 2 KV heads on 4 devices: the split runs over both group axes
    assert regroup((2, 8, 8, 4), (2,), (2, 8, 2, 4, 4), 4) == (2, 3)
    assert regroup((2, 8, 8, 4), (2,), (16, 32), 4) == (1,)   # the rows merged: the heads still major
    assert regroup((2, 8, 8, 4), (2,), (2, 64, 4), 4) == ()   # merged with an axis before it: XLA moves it
    # a contraction over the split heads is whole (all-reduced); over the width it keeps the heads' split
    assert propagate("einsum", (2, 8, 32), [((2, 8, 8, 4), (2,)), ((8, 4, 32), (0,))],
                     {"subscripts": "btnh,nhd->btd"}, 4) == ()
    assert propagate("einsum", (2, 8, 8, 4), [((2, 8, 32), ()), ((32, 8, 4), (1,))],
                     {"subscripts": "btd,dnh->btnh"}, 4) == (2,)
    # logits split by vocabulary: a softmax keeps it, the cross-entropy and an argmax over it do not
    assert propagate("softmax", (2, 8, 96), [((2, 8, 96), (2,))], {"axis": 2}, 4) == (2,)
    assert propagate("cross-entropy", (2, 8), [((2, 8, 96), (2,)), ((2, 8), ())], {}, 4) == ()
    assert propagate("argmax", (2, 8), [((2, 8, 96), (2,))], {"axis": 2, "keepdims": False}, 4) == ()
    assert propagate("sum", (2, 8), [((2, 8, 8, 4), (2,))], {"axes": (2, 3), "keepdims": False}, 4) == ()
    assert propagate("mean", (2, 8, 1), [((2, 8, 96), ())], {"axes": (2,), "keepdims": True}, 4) == ()
    assert propagate("+", (2, 8, 8, 4), [((2, 8, 8, 4), (2,)), ((4,), ())], {}, 4) == (2,)
    assert propagate("take", (2, 8, 4, 4), [((2, 2, 8, 4, 4), (3,)), ((), ())], {"axis": 0}, 4) == (2,)


@pytest.mark.slow
def test_static_memory_per_device_is_within_a_factor_of_xla_s_on_a_split_teacher(tmp_path):
    """On 8 simulated CPU devices, `model=4` (4 KV heads: the caches split): each graph's live set on one
    device, statically (`mesh.graphs_per_device`), is within 1.25x either way of what XLA's memory analysis
    of the graph compiled with the run's shardings says (`xla.graphs.*.live`, per device), and below the
    static unsplit figure; the caches XLA's compiled graphs return are split as the static report says."""
    run = tmp_path / "gen.sx"
    run.write_text(generating_teacher(**{"kv-heads": 4}))
    env = {**os.environ, "XLA_FLAGS": EIGHT, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "explain", str(run), "--xla", "--mesh", "model=4",
                        "--format", "json"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert report["step"]["target"] == "cpu"
    static, xla = report["mesh"]["graphs_per_device"], report["xla"]["graphs"]
    whole = {g["name"]: g["live"]["total"] for g in report["graphs"]}
    assert set(static) == set(xla) == {"generate.init", "generate.step", "generate.finish", "train", "update"}
    for name, got in static.items():
        assert 0.8 <= got["live"] / xla[name]["live"] <= 1.25, (name, got["live"], xla[name]["live"])
        if whole[name] > 1024:   # (`generate.finish` copies the row: nothing to split)
            assert got["live"] < whole[name] / 2, name
    assert xla["generate.step"]["split_outputs"] == {k: v for k, v in report["mesh"]["state_shardings"].items()
                                                     if v != "P()"}
