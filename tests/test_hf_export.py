"""What an export in the Hugging Face layout writes besides the weights (sexpgpu_runtime/hf_export.py):
the run's tokenizer, copied with a tokenizer_config.json; and an export never loses a tensor: two
parameters read from one checkpoint tensor are refused before the run (`--export-names`), and
`mapped_tensors` refuses rather than keep the last."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sexpgpu_lang import analyze_file
from sexpgpu_lang.name_mapping import STDLIB_NAMES, shared_tensors, stdlib_names
from sexpgpu_runtime.weights.hf_export import run_tokenizer, write_tokenizer
from sexpgpu_runtime.weights.hf_layout import mapped_tensors
from sexpgpu_runtime import OptionError, RunError, RunOptions, check_options

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hf"


def test_the_standard_mappings_give_each_tensor_one_parameter():
    assert {name: shared_tensors(m) for name, m in stdlib_names().items()} == {name: [] for name in stdlib_names()}


def test_a_qwen3_export_states_head_dim_where_its_source_left_it_to_the_default():
    """Qwen3Config's absent `head_dim` is 128, not width / heads: an export of a Qwen3 whose heads are width /
    heads wide writes `head_dim` even where its source checkpoint's config.json had none (a Llama export
    there leaves it out, as its source did)."""
    from sexpgpu_lang.files.hf_config import export_config
    shapes = {"embed": (96, 32), "layers.wq": (2, 32, 4, 8), "layers.wk": (2, 32, 2, 8), "layers.w-gate": (2, 32, 64)}
    source = {"model_type": "qwen3", "hidden_size": 32, "num_attention_heads": 4, "tie_word_embeddings": True}
    assert export_config("qwen3-tied", shapes, {}, source)["head_dim"] == 8
    assert "head_dim" not in export_config("llama-tied", shapes, {}, {**source, "model_type": "llama"})
    made = export_config("qwen3", shapes, {"eps": 1e-6}, None)
    assert (made["architectures"], made["model_type"], made["head_dim"], made["tie_word_embeddings"],
            made["use_sliding_window"], made["attention_bias"]) == (["Qwen3ForCausalLM"], "qwen3", 8, False, False, False)
    made = export_config("olmo2", shapes, {"eps": 1e-5}, None)
    assert (made["architectures"], made["model_type"], made["rms_norm_eps"]) == (["Olmo2ForCausalLM"], "olmo2", 1e-5)


def tied_into_untied(tmp_path: Path) -> Path:
    """The llama3 fixture's run file reading the tied Llama fixture through a mapping of its own that
    reads the embedding into both `:embed` and `:lm-head`."""
    text = STDLIB_NAMES.read_text()
    llama = text[text.index("(names llama\n") + len("(names llama\n"):text.index('"lm_head.weight"))')]
    names = "(" + llama.strip() + ' "model.embed_tokens.weight"))'
    shutil.copytree(FIXTURES / "llama-tied", tmp_path / "llama3")
    run = (FIXTURES / "llama3.sx").read_text().replace(":names :llama)", f":names {names})")
    (tmp_path / "run.sx").write_text(run)
    return tmp_path / "run.sx"


def test_a_tied_checkpoint_read_into_an_untied_model_loads_but_is_not_exported(tmp_path):
    res = analyze_file(str(tied_into_untied(tmp_path)), read_files=True)
    assert res.program is not None, [(d.code, d.message) for d in res.diagnostics]
    names = dict(res.program.pretrained[0].names)
    assert shared_tensors(names) == [("model.embed_tokens.weight", ["embed", "lm-head"])]
    with pytest.raises(OptionError, match=r"parameters `embed`, `lm-head` are all read from tensor "
                                          r"`model\.embed_tokens\.weight`.*`:names :llama`"):
        check_options(res.program, RunOptions(export=tmp_path / "out", export_names="teacher",
                                              run_dir=tmp_path / "runs"))
    check_options(res.program, RunOptions(export=tmp_path / "out", export_names="llama", run_dir=tmp_path / "runs"))
    values = {"embed": np.ones((3, 2)), "lm-head": np.zeros((2, 3))}
    with pytest.raises(RunError, match="two parameters of the mapping are read from it"):
        mapped_tensors({k: names[k] for k in values}, values)


def test_the_run_s_tokenizer_is_copied_beside_the_export(tmp_path):
    res = analyze_file(str(ROOT / "examples" / "gpt2-teacher.sx"))
    assert res.program is not None
    assert Path(run_tokenizer(res.program)) == ROOT / "examples" / "data" / "asyncio-tokenizer.json"
    written = write_tokenizer(res.program, tmp_path)
    assert [p.name for p in written] == ["tokenizer.json", "tokenizer_config.json"]
    assert (tmp_path / "tokenizer.json").read_bytes() == (ROOT / "examples" / "data" / "asyncio-tokenizer.json").read_bytes()
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    none = analyze_file(str(FIXTURES / "gpt2.sx"), read_files=True)
    assert write_tokenizer(none.program, tmp_path / "x") == []


@pytest.mark.slow
def test_a_run_s_export_writes_config_json_beside_the_shards(tmp_path):
    """`sexpgpu run --export DIR --export-names qwen2-tied` of a Qwen2 fine-tune: its config.json is the
    source checkpoint's with the trained sizes, so the directory loads where HF checkpoints load."""
    from helpers import run
    shutil.copytree(FIXTURES / "qwen2", tmp_path / "qwen2")
    text = (FIXTURES / "qwen2.sx").read_text()
    run(text, tmp_path, 1, export=tmp_path / "out", export_names="qwen2-tied", max_shard_bytes=30_000)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    source = json.loads((FIXTURES / "qwen2" / "config.json").read_text())
    assert {k: config[k] for k in source if k != "dtype"} == {k: v for k, v in source.items() if k != "dtype"}
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert "lm_head.weight" not in index["weight_map"] and "model.layers.1.self_attn.q_proj.bias" in index["weight_map"]
