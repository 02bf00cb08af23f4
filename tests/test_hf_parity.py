"""Parity with transformers, kept: tests/fixtures/hf/ holds tiny random checkpoints of each family that
transformers made and saved sharded (`python -m benchmarks.hf_parity --write`), its logits and greedy
tokens, and the run files that read them stating no size or setting by hand (`checkpoint-config`). Here,
without transformers: each run file checks clean against its checkpoint's config.json, its logits match
transformers' (f32, 1e-4 relative to the largest), its greedy decoding gives transformers' tokens,
with its caches through the stacked layers (its `:decode` entry) and without (cached and uncached
`generate` gave the same), and an export in the HF layout writes a config.json with
the source's settings and the trained sizes that reads back to the same logits."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import functools

from benchmarks.hf_parity import (FAMILIES, NEW, PADDED_FAMILIES, SEQ, greedy_of, padded_batch, relative, run_file,
                                  sexpgpu_batch)
from benchmarks.hf_parity import sexpgpu_forward as _forward

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


@functools.lru_cache(maxsize=None)
def sexpgpu_forward(path: Path):
    """Each fixture checked, loaded and its `prepare` compiled once for the module's tests."""
    return _forward(path)


@pytest.fixture(params=list(FAMILIES))
def family(request):
    return request.param


def test_the_fixture_run_files_are_the_script_s(family):
    assert (FIXTURES / f"{family}.sx").read_text() == run_file(family, FAMILIES[family][2])


def test_logits_and_greedy_tokens_match_transformers(family):
    want = np.load(FIXTURES / f"{family}.npz")
    forward, program, _, _ = sexpgpu_forward(FIXTURES / f"{family}.sx")
    got = forward(want["ids"])
    assert got.dtype == np.float32 and got.shape == want["logits"].shape
    assert relative(got, want["logits"]) <= 1e-4
    assert np.array_equal(want["greedy"], want["greedy_uncached"])
    assert np.array_equal(greedy_of(forward, want["ids"]), want["greedy"])        # the row recomputed each step
    assert np.array_equal(forward(want["ids"], "greedy"), want["greedy"])         # `:decode` with the caches


def test_the_llama3_fixture_is_llama3():
    """The settings the issue names are the fixtures' (so the parity above covers them)."""
    cfg = json.loads((FIXTURES / "llama3" / "config.json").read_text())
    rope = cfg.get("rope_parameters") or {**cfg.get("rope_scaling", {}), "rope_theta": cfg.get("rope_theta")}
    assert (rope["rope_theta"], cfg["rms_norm_eps"], rope["rope_type"]) == (500000.0, 1e-5, "llama3")
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]
    assert len(json.loads((FIXTURES / "llama3" / "model.safetensors.index.json").read_text())["weight_map"]) > 1


def test_the_qwen3_and_olmo2_fixtures_have_what_sets_them_apart():
    """Qwen3's heads are `head_dim` wide, not width / heads, with a q/k norm gain per head's width, untied and
    tied; OLMo 2's q/k norms are over the whole projection, with norms after attention and the MLP and none
    before: the parity above covers each."""
    from sexpgpu_lang.files.checkpoint_files import tensors
    for family, tied in (("qwen3", False), ("qwen3-tied", True)):
        cfg = json.loads((FIXTURES / family / "config.json").read_text())
        assert cfg["model_type"] == "qwen3" and cfg["tie_word_embeddings"] is tied
        assert cfg["head_dim"] * cfg["num_attention_heads"] != cfg["hidden_size"]
        t = tensors(str(FIXTURES / family))
        assert t["model.layers.0.self_attn.q_norm.weight"][0] == (cfg["head_dim"],)
        assert ("lm_head.weight" in t) is not tied
    cfg = json.loads((FIXTURES / "olmo2" / "config.json").read_text())
    t = tensors(str(FIXTURES / "olmo2"))
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    assert t["model.layers.0.self_attn.q_norm.weight"][0] == (cfg["num_attention_heads"] * hd,)
    assert t["model.layers.0.self_attn.k_norm.weight"][0] == (cfg["num_key_value_heads"] * hd,)
    assert "model.layers.0.post_feedforward_layernorm.weight" in t
    assert not any("input_layernorm" in name for name in t)


@pytest.mark.slow
def test_an_export_writes_config_json_and_reads_back(family, tmp_path):
    from sexpgpu_lang.name_mapping import stdlib_names
    from sexpgpu_runtime.weights.hf_export import write_config
    from sexpgpu_runtime.weights.pretrained import export_params
    mapping = FAMILIES[family][2]
    want = np.load(FIXTURES / f"{family}.npz")
    forward, program, trainable, frozen = sexpgpu_forward(FIXTURES / f"{family}.sx")
    out = tmp_path / family
    export_params(out, trainable, frozen, True, stdlib_names()[mapping])
    write_config(program, out, mapping)
    source = json.loads((FIXTURES / family / "config.json").read_text())
    written = json.loads((out / "config.json").read_text())
    assert {k: written.get(k) for k in source if k not in ("architectures", "torch_dtype", "dtype")} \
        == {k: v for k, v in source.items() if k not in ("architectures", "torch_dtype", "dtype")}
    assert written["torch_dtype"] == "float32" and written["architectures"] == [source["architectures"][0]]
    # the same run file pointed at the export reads the same logits
    shutil.copy(FIXTURES / f"{family}.sx", tmp_path / "again.sx")   # it reads tmp_path/family: the export
    again, _, _, _ = sexpgpu_forward(tmp_path / "again.sx")
    assert np.array_equal(again(want["ids"]), forward(want["ids"]))


def test_a_config_made_from_the_file_alone_has_its_settings(family, tmp_path):
    """For a model trained from scratch: the sizes of its parameters, the settings its calls state."""
    import dataclasses
    from sexpgpu_runtime.weights.hf_export import write_config
    from sexpgpu_lang.files.hf_config import settings
    mapping = FAMILIES[family][2]
    _, program, _, _ = sexpgpu_forward(FIXTURES / f"{family}.sx")
    write_config(dataclasses.replace(program, pretrained=()), tmp_path, mapping)
    made = settings(json.loads((tmp_path / "config.json").read_text()))
    source = settings(json.loads((FIXTURES / family / "config.json").read_text()))
    keys = set(source) - {"positions"} if mapping != "gpt2" else set(source)
    assert {k: made[k].value for k in keys} == {k: source[k].value for k in keys}
    assert SEQ <= made["positions"].value


@pytest.mark.parametrize("family", PADDED_FAMILIES)
def test_a_left_padded_batch_decodes_as_generate_does_each_row_stopping_at_its_eos(family):
    """transformers' `generate` of prompts of different lengths, left-padded, with an attention mask and
    an end-of-sequence id: sexpgpu's per-row positions and stops give its tokens, with the caches and
    over the whole row each step, and each row's completion length ends at its own stop."""
    want = np.load(FIXTURES / f"{family}-padded.npz")
    assert (FIXTURES / f"{family}-padded.sx").read_text() == run_file(family, FAMILIES[family][2], padded=True)
    batch = padded_batch(want)
    saved = np.load(FIXTURES / f"{family}-prompts.npz")
    assert all(np.array_equal(saved[k], v) for k, v in batch.items())
    lengths = want["prompt_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1 and not want["prompt_mask"][:, -1].__invert__().any()   # left-padded
    stops = want["stops"]
    assert len(set(stops.tolist())) > 1 and (stops < NEW).any()     # the rows stop at different trips
    assert np.array_equal(want["completion"], want["completion_uncached"])
    got = sexpgpu_batch(FIXTURES / f"{family}-padded.sx")(batch)
    assert np.array_equal(got["greedy"], want["completion"])
    assert np.array_equal(got["greedy-uncached"], want["completion"])
    assert np.array_equal(got["completion-length"], np.minimum(stops + 1, NEW))
    assert np.array_equal(got["completion-mask"], np.arange(NEW)[None] < np.minimum(stops + 1, NEW)[:, None])
    for b, s in enumerate(stops):      # the stopped row's end-of-sequence token, then nothing
        if s < NEW:
            assert got["greedy"][b, s] == want["eos"] and not got["greedy"][b, s + 1:].any()
