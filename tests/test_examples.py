"""The examples on real data: each is clean and its loss falls over a few steps through the real loaders.

examples/gpt2.sx and examples/llama.sx train here at a smaller size than their own (SMALLER: 2 layers,
a context of 16, batches of 4), so that their 10 steps stay cheap; tests/test_examples_lm.py checks
their full sizes and compares them with the same models written in JAX.

examples/distill.sx loads examples/code-lm.safetensors, which a user makes by running
examples/code-lm.sx with `--export` (examples/README.md); here the teacher is code-lm as its own
test trains it (STEPS steps), exported into a tmp dir, and the copy of distill.sx that runs points there.
"""
from pathlib import Path

import pytest

from sexpgpu_lang import analyze_file
from sexpgpu_runtime import RunOptions, train

pytestmark = pytest.mark.slow


EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.sx"))
STEPS = 10
#: The examples that train here with some of their `def`s replaced: {file: {def name: value}}.
SMALLER = {"gpt2.sx": {"layers": 2, "seq": 16, "batch": 4}, "llama.sx": {"layers": 2, "seq": 16, "batch": 4}}


def test_there_are_examples():
    assert {"code-lm.sx", "distill.sx", "select.sx"} <= {p.name for p in EXAMPLES}


def train_example(path: Path, run_dir: Path, export: Path | None = None, export_names: str | None = None):
    res = analyze_file(str(path), read_files=True)     # distill's teacher header too (E-MODEL-003)
    assert [d for d in res.diagnostics if d.severity <= 2] == []
    return train(res.program, RunOptions(steps=STEPS, run_dir=run_dir, quiet=True, export=export,
                                         export_names=export_names))


@pytest.fixture(scope="module")
def code_lm(tmp_path_factory):
    """code-lm's run, exported: its test's result, and distill's teacher (right names and shapes)."""
    tmp = tmp_path_factory.mktemp("code-lm")
    export = tmp / "code-lm.safetensors"
    out = train_example(EXAMPLES_DIR / "code-lm.sx", tmp / "run", export)
    assert export.is_file()
    return out, export


@pytest.fixture(scope="module")
def gpt2_teacher(tmp_path_factory):
    """gpt2-teacher.sx's run, exported in the Hugging Face layout (`--export-names gpt2`): its test's
    result, and distill-gpt2's teacher directory."""
    tmp = tmp_path_factory.mktemp("gpt2-teacher")
    out = train_example(EXAMPLES_DIR / "gpt2-teacher.sx", tmp / "run", tmp / "hf", "gpt2")
    assert (tmp / "hf" / "model.safetensors").is_file()
    return out, tmp / "hf"


def runnable(path: Path, tmp_path: Path, request) -> Path:
    """The example itself, or a copy (in tmp_path): for distill.sx and distill-gpt2.sx one whose teacher
    is the fixture's, for the SMALLER ones one with those `def`s replaced (in a copy, the `data/` paths,
    relative to the run file, made absolute: the tokenizers of gpt2.sx, llama.sx and distill-gpt2.sx,
    distill.sx's prompts and tokenizer)."""
    if path.name in SMALLER:
        text = path.read_text(encoding="utf-8")
        for name, value in SMALLER[path.name].items():
            lines = [line for line in text.splitlines() if line.startswith(f"(def {name} ")]
            assert len(lines) == 1, (path.name, name)
            text = text.replace(lines[0], f"(def {name} {value})")
        text = text.replace('"data/', f'"{EXAMPLES_DIR / "data"}/')
        copy = tmp_path / path.name
        copy.write_text(text, encoding="utf-8")
        return copy
    if path.name == "lora.sx":   # the checkpoint is gpt2-teacher's export, as for distill-gpt2.sx
        text = path.read_text(encoding="utf-8")
        assert text.count('(def ckpt "gpt2-teacher")') == 1
        copy = tmp_path / path.name
        text = text.replace('(def ckpt "gpt2-teacher")', f'(def ckpt "{request.getfixturevalue("gpt2_teacher")[1]}")')
        copy.write_text(text.replace('"data/', f'"{EXAMPLES_DIR / "data"}/'), encoding="utf-8")
        return copy
    if path.name == "distill-gpt2.sx":
        text = path.read_text(encoding="utf-8")
        assert text.count(':pretrained "gpt2-teacher"') == 1
        copy = tmp_path / path.name
        text = text.replace(':pretrained "gpt2-teacher"',
                            f':pretrained "{request.getfixturevalue("gpt2_teacher")[1]}"')
        copy.write_text(text.replace('"data/', f'"{EXAMPLES_DIR / "data"}/'), encoding="utf-8")
        return copy
    if path.name != "distill.sx":
        return path
    teacher = request.getfixturevalue("code_lm")[1]
    text = path.read_text(encoding="utf-8")
    assert text.count(':pretrained "code-lm.safetensors"') == 1
    copy = tmp_path / "distill.sx"
    text = text.replace('"code-lm.safetensors"', f'"{teacher}"').replace('"data/', f'"{EXAMPLES_DIR / "data"}/')
    copy.write_text(text, encoding="utf-8")
    return copy


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_clean_and_loss_falls(path, tmp_path, request):
    if path.name == "code-lm.sx":
        out = request.getfixturevalue("code_lm")[0]
    elif path.name == "gpt2-teacher.sx":
        out = request.getfixturevalue("gpt2_teacher")[0]
    else:
        out = train_example(runnable(path, tmp_path, request), tmp_path / "run")
    assert out.history[-1]["step"] == STEPS
    assert all(n == 1 for n in out.traces.values()), out.traces
    first, last = out.history[0], out.history[-1]
    assert first["step"] == 1
    if path.name in ("grpo.sx", "grpo-arith.sx"):   # a policy-gradient loss need not fall: tests/test_grpo.py checks the reward
        return
    assert last["loss"] < first["loss"], f"{path.name}: loss {first['loss']} at step 1, {last['loss']} at {STEPS}"
    if path.name == "distill.sx":   # the student comes to agree with the teacher on its own rows
        assert last["agreement"] > first["agreement"] + 0.1, (first["agreement"], last["agreement"])
        # one position per sampled byte (seq - prompt = 16): the last column's logits predict none
        assert first["completion-length"] == 16 and first["stopped"] == 0, first


def test_lora_example_trains_the_adapters_alone_and_exports_them_in_peft_s_layout(tmp_path, request):
    """examples/lora.sx fine-tunes gpt2-teacher's export; `--export-adapter` writes PEFT's layout, as
    tests/fixtures/lora/layout.json records peft's (its names' form, `[r in]` and `[out r]`, its
    config's keys), here for GPT-2's Conv1D modules; a run starts from it again."""
    import json
    import numpy as np
    from safetensors.numpy import load_file
    from sexpgpu_runtime.weights.pretrained import initial_params
    path = runnable(EXAMPLES_DIR / "lora.sx", tmp_path, request)
    res = analyze_file(str(path), read_files=True)
    out = train(res.program, RunOptions(steps=3, run_dir=tmp_path / "run", quiet=True, export=tmp_path / "adapter",
                                        export_adapter=True))
    assert set(out.trainable) == {"h"} and set(out.trainable["h"]) == {
        f"{t}.lora-{ab}" for t in ("wo", "w1", "w2") for ab in "ab"}
    recorded = json.loads((Path(__file__).parent / "fixtures" / "lora" / "layout.json").read_text())
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert set(config) <= set(recorded["config"])
    assert {k: config[k] for k in ("peft_type", "bias", "task_type", "lora_dropout")} == \
        {k: recorded["config"][k] for k in ("peft_type", "bias", "task_type", "lora_dropout")}
    assert config["r"] == 8 and config["lora_alpha"] == 16 and config["fan_in_fan_out"] is True
    assert config["target_modules"] == ["c_fc", "c_proj"]   # both c_proj modules are adapted
    tensors = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    assert {k: list(v.shape) for k, v in tensors.items()} == {
        f"base_model.model.transformer.h.{i}.{m}.lora_{ab}.weight": shape
        for i in range(2) for m, fan_in, fan_out in (("attn.c_proj", 64, 64), ("mlp.c_fc", 64, 256),
                                                     ("mlp.c_proj", 256, 64))
        for ab, shape in (("A", [8, fan_in]), ("B", [fan_out, 8]))}
    # peft's names for the Llama fixture have the same form: base_model.model.<module>.lora_A.weight [r in]
    assert all(k.startswith("base_model.model.model.layers.") and k.endswith((".lora_A.weight", ".lora_B.weight"))
               for k in recorded["tensors"])
    again = path.read_text().replace(":alpha 16)", f':alpha 16 :pretrained "{tmp_path / "adapter"}")')
    (tmp_path / "again.sx").write_text(again)
    start, _ = initial_params(analyze_file(str(tmp_path / "again.sx"), read_files=True).program, 0)
    for k, v in out.trainable["h"].items():
        assert np.array_equal(np.asarray(start["h"][k]), np.asarray(v)), k


def test_distill_teacher_matches_code_lm():
    """The teacher in distill.sx is code-lm's model: the same :params and :apply, word for word."""
    def model_form(text: str, name: str) -> str:
        start = text.index(f"(defmodel {name}")
        end = text.index("\n\n", start)
        return " ".join(text[start:end].split())
    code_lm = model_form((EXAMPLES_DIR / "code-lm.sx").read_text(encoding="utf-8"), "code-lm")
    teacher = model_form((EXAMPLES_DIR / "distill.sx").read_text(encoding="utf-8"), "code-lm")
    assert teacher.startswith(code_lm[:-1])
    assert teacher.endswith(':frozen true :pretrained "code-lm.safetensors")')
