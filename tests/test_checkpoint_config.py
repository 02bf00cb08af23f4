"""A checkpoint's config.json in a run file (sexpgpu_lang/files/hf_config.py, check/config.py): `checkpoint-config`
binds its settings to `def`s (hover names the key), a value the file states is compared with it where
the checkpoint is read, and what the standard library does not compute is refused (E-CONFIG)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runfile import RunFile
from sexpgpu_lang import analyze, ide
from sexpgpu_lang.files.hf_config import ConfigError, refusals, settings

CASES = Path(__file__).parent / "cases-files"
LLAMA3 = json.loads((CASES / "data" / "llama3-tiny" / "config.json").read_text())


def codes(res):
    return [(d.code, d.message) for d in res.diagnostics if d.is_error]


def test_llama3_settings_from_config():
    s = settings(LLAMA3)
    assert {k: v.value for k, v in s.items()} == {
        "layers": 2, "width": 32, "heads": 4, "kv-heads": 2, "head-width": 8, "hidden": 64, "vocab": 64,
        "positions": 16, "eps": 1e-5, "rope-base": 500000.0, "rope-factor": 8.0, "rope-low-freq-factor": 1.0,
        "rope-high-freq-factor": 4.0, "rope-original-positions": 8, "tied": False}
    assert s["kv-heads"].key == "num_key_value_heads" and s["rope-factor"].key == "rope_scaling.factor"


def test_defaults_and_the_other_rope_types():
    llama2 = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2,
              "intermediate_size": 16, "vocab_size": 10, "max_position_embeddings": 4}
    s = settings(llama2)
    assert (s["kv-heads"].value, s["head-width"].value, s["eps"].value, s["rope-base"].value) == (2, 4, 1e-6, 10000.0)
    assert (s["rope-factor"].value, s["rope-original-positions"].value) == (1.0, 0)
    s = settings({**llama2, "rope_scaling": {"type": "linear", "factor": 2.0}})
    assert (s["rope-factor"].value, s["rope-original-positions"].value) == (2.0, 0)
    s = settings({**llama2, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})
    assert isinstance(s["rope-factor"], ConfigError) and "dynamic" in str(s["rope-factor"])
    assert isinstance(s["layers"].value, int)
    gpt2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 16, "n_head": 4, "vocab_size": 50, "n_positions": 32}
    s = settings(gpt2)
    assert (s["hidden"].value, s["head-width"].value, s["eps"].value, s["tied"].value) == (64, 4, 1e-5, True)
    assert "rope-base" not in s


def test_qwen3_and_olmo2_take_their_config_class_s_defaults():
    """Qwen3Config's `head_dim` is 128 where config.json has none, whatever the width (Qwen3 sizes its heads
    on their own); Olmo2Config's `rms_norm_eps` is 1e-5; the rest are Llama's keys."""
    sizes = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
             "vocab_size": 96, "max_position_embeddings": 64}
    s = settings({"model_type": "qwen3", **sizes})
    assert (s["head-width"].value, s["eps"].value, s["kv-heads"].value, s["tied"].value) == (128, 1e-6, 4, False)
    assert s["head-width"].key == "head_dim" and "128" in s["head-width"].text
    assert settings({"model_type": "qwen3", **sizes, "head_dim": 16})["head-width"].value == 16
    s = settings({"model_type": "olmo2", **sizes})
    assert (s["head-width"].value, s["eps"].value) == (8, 1e-5)
    assert settings({"model_type": "olmo2", **sizes, "rms_norm_eps": 1e-6})["eps"].value == 1e-6
    assert settings({"model_type": "llama", **sizes})["eps"].value == 1e-6   # Llama's own default unchanged


@pytest.mark.parametrize("config,mapping,piece", [
    ({"model_type": "qwen3"}, "qwen2", "use `:names :qwen3`"),
    ({"model_type": "qwen3", "tie_word_embeddings": True}, "qwen3", "use `:names :qwen3-tied`"),
    ({"model_type": "qwen3", "attention_bias": True}, "qwen3", "`attention_bias` is true"),
    ({"model_type": "qwen3", "use_sliding_window": True}, "qwen3", "`use_sliding_window` is true"),
    ({"model_type": "olmo2"}, "llama", "use `:names :olmo2`"),
    ({"model_type": "olmo2", "tie_word_embeddings": True}, "olmo2", "the mapping `olmo2` is for an untied output"),
    ({"model_type": "olmo2", "attention_bias": True}, "olmo2", "`attention_bias` is true"),
    ({"model_type": "qwen2"}, "llama", "use `:names :qwen2`"),
    ({"model_type": "llama", "tie_word_embeddings": True}, "llama", "use `:names :llama-tied`"),
    ({"model_type": "qwen2", "tie_word_embeddings": True}, "qwen2", "use `:names :qwen2-tied`"),
    ({"model_type": "gpt2", "activation_function": "relu"}, "gpt2", "`activation_function` is \"relu\""),
    ({"model_type": "llama", "hidden_act": "gelu"}, "llama", "`hidden_act` is \"gelu\""),
    ({"model_type": "llama", "attention_bias": True}, "llama", "`attention_bias` is true"),
    ({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "llama", "type \"yarn\""),
    ({"model_type": "phi3"}, "llama", "`model_type` is \"phi3\""),
])
def test_refusals_name_the_key(config, mapping, piece):
    got = refusals(config, mapping)
    assert any(piece in r for r in got), got


def test_nothing_refused_for_the_families_read():
    assert refusals(LLAMA3, "llama") == []
    assert refusals({"model_type": "mistral", "sliding_window": 4096}, "llama") == []
    assert refusals({"model_type": "qwen2", "tie_word_embeddings": True}, "qwen2-tied") == []
    assert refusals({"model_type": "qwen3", "head_dim": 128, "use_sliding_window": False}, "qwen3") == []
    assert refusals({"model_type": "qwen3", "tie_word_embeddings": True}, "qwen3-tied") == []
    assert refusals({"model_type": "olmo2", "attention_bias": False}, "olmo2") == []
    assert refusals({"model_type": "gpt2", "activation_function": "gelu_new"}, "gpt2") == []


@pytest.fixture
def project(tmp_path):
    """The E-CONFIG-004 case's run file and checkpoint in a folder of their own."""
    shutil.copytree(CASES / "data" / "llama3-tiny", tmp_path / "data" / "llama3-tiny")
    text = RunFile.read(CASES / "config-004-stated-rope.sx")
    return tmp_path, text


def bound(text: RunFile) -> RunFile:
    """The case with every number of the model bound from the config, and `llama-block-freq`."""
    ck = '"data/llama3-tiny"'
    for name in ("layers", "width", "heads", "kv-heads", "head-width", "hidden", "vocab"):
        text = text.set(f"def {name}", f"(def {name} (checkpoint-config {ck} :{name}))")
    text = text.add("\n".join(f"(def {k} (checkpoint-config {ck} :{k}))" for k in (
        "eps", "rope-base", "rope-factor", "rope-low-freq-factor", "rope-high-freq-factor", "rope-original-positions")),
        after="def seq")
    text = text.edit("defmodel block", "(llama-block h positions", "(llama-block-freq h positions (rope-inv-freq head-width "
                     "rope-base rope-factor rope-low-freq-factor rope-high-freq-factor rope-original-positions) eps")
    return text.set("defmodel llama3 (rms-norm-eps", "(rms-norm-eps (block (embedding (getf self :embed) x) (iota [seq])) "
                    "(getf self :norm) eps)")


def test_a_file_that_states_no_number_checks_clean_and_hover_names_the_key(project):
    root, text = project
    text = bound(text)
    res = analyze(text, str(root / "run.sx"), read_files=True)
    assert codes(res) == []
    at = text.index("(rope-inv-freq head-width rope-base") + len("(rope-inv-freq head-width rope-")
    info = ide.hover(ide.Index(res), at)
    assert "rope-base: [] f32" in info.markdown, info.markdown
    assert "from data/llama3-tiny/config.json: `rope_theta` 500000.0" in info.markdown, info.markdown


def test_a_changed_config_is_read_again(project):
    root, text = project
    text = bound(text)
    path = root / "data" / "llama3-tiny" / "config.json"
    cfg = json.loads(path.read_text())
    cfg["rope_theta"] = 10000.0
    path.write_text(json.dumps(cfg))
    res = analyze(text, str(root / "run.sx"), read_files=True)
    at = text.index("(rope-inv-freq head-width rope-base") + len("(rope-inv-freq head-width rope-")
    assert "`rope_theta` 10000.0" in ide.hover(ide.Index(res), at).markdown


def test_stated_values_are_checked_by_plain_lint_as_by_the_editor(project):
    """config.json is small and read bounded: plain `lint` compares it as the editor and `--read-files` do."""
    root, text = project
    for read_files in (False, "local", True):
        got = codes(analyze(text, str(root / "run.sx"), read_files=read_files))
        assert [c for c, _ in got] == ["E-CONFIG-004"], (read_files, got)
        assert "`rope_theta` 500000.0" in got[0][1] and "`llama-block` here uses 1e-06, 10000 and no scaling" in got[0][1]
    (root / "data" / "llama3-tiny" / "model.safetensors").unlink()   # the tensors are not needed for it
    assert [c for c, _ in codes(analyze(text, str(root / "run.sx")))] == ["E-CONFIG-004"]
    (root / "data" / "llama3-tiny" / "config.json").unlink()   # nor is a checkpoint without a config compared
    assert codes(analyze(text, str(root / "run.sx"))) == []


def test_a_stated_value_that_agrees_is_clean_and_one_that_does_not_names_the_key(project):
    root, text = project
    text = text.edit("defmodel block", "(llama-block h positions", "(llama-block-freq h positions (rope-inv-freq head-width "
                     "500000.0 8.0 1.0 4.0 8) 1e-5")
    assert codes(analyze(text, str(root / "run.sx"), read_files=True)) == []
    wrong = text.set("defmodel block (rope-inv-freq", "(rope-inv-freq head-width 500000.0 8.0 1.0 4.0 8192)")
    got = codes(analyze(wrong, str(root / "run.sx"), read_files=True))
    assert got == [("E-CONFIG-004", "`data/llama3-tiny/config.json` has `rope_scaling.original_max_position_embeddings`"
                    " 8, and `llama-block-freq` here uses 8192")]
    assert codes(analyze(text.set("def layers", "(def layers 3)"), str(root / "run.sx"),
                         read_files=True))[0][0] == "E-MODEL-003"   # a shape the tensors tell already


def test_the_mapping_must_be_for_the_config(project):
    root, text = project
    path = root / "data" / "llama3-tiny" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "tie_word_embeddings": True}))
    got = codes(analyze(text, str(root / "run.sx"), read_files=True))
    assert got[0][0] == "E-CONFIG-002" and "use `:names :llama-tied`" in got[0][1]


def test_checkpoint_config_outside_a_def_is_a_form_error(project):
    root, text = project
    text = text.set("defmodel llama3 (iota", "(iota [(checkpoint-config \"data/llama3-tiny\" :positions)])")
    got = dict(codes(analyze(text, str(root / "run.sx"))))
    assert "is a `def`'s value" in got["E-FORM-002"], got


def test_gpt2_has_no_rope_base(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 16,
                                                              "n_head": 4, "vocab_size": 50, "n_positions": 32}))
    res = analyze('(def base (checkpoint-config "ck" :rope-base))\n', str(tmp_path / "run.sx"))
    assert "E-CONFIG-003" in [c for c, _ in codes(res)]


HF = Path(__file__).parent / "fixtures" / "hf"


def test_file_dtype_of_another_dtype_than_the_file_s_says_so_and_how_to_fix_it(tmp_path):
    """`:file-dtype :bf16` on an f32 file: the file's dtype differs from `:file-dtype`, not the parameters'."""
    shutil.copytree(HF / "gpt2", tmp_path / "gpt2")
    text = RunFile.read(HF / "gpt2.sx").set("defmodel teacher :pretrained :file-dtype", ":bf16")
    res = analyze(text, str(tmp_path / "run.sx"), read_files=True)
    d, = [d for d in res.diagnostics if d.is_error]
    assert d.code == "E-MODEL-003"
    assert "its 28 tensors are f32 where `:file-dtype` says bf16" in d.message and "parameters" not in d.message
    assert d.help.startswith("`:file-dtype` is the dtype the file holds, and it holds f32: write `:file-dtype :f32`")


def test_another_family_s_checkpoint_is_one_short_line_with_the_mapping_it_fits(tmp_path):
    """A GPT-2 checkpoint read with `:names :llama`: not one clause per missing tensor."""
    shutil.copytree(HF / "gpt2", tmp_path / "llama3")
    shutil.copy(HF / "llama3" / "config.json", tmp_path / "llama3" / "config.json")   # (so the defs check)
    res = analyze((HF / "llama3.sx").read_text(), str(tmp_path / "run.sx"), read_files=True)
    d, = [d for d in res.diagnostics if d.is_error]
    assert d.code == "E-MODEL-003" and len(d.message) < 300, d.message
    assert "has none of the 12 tensors the mapping reads (it has `transformer.h.0.attn.c_attn.bias`" in d.message
    assert "write `:names :gpt2`" in d.help


@pytest.mark.parametrize("make,piece", [
    (lambda d: (d / "config.json").mkdir(), "it is a directory, not a regular file"),
    (lambda d: (d / "config.json").write_text("{not json"), "it is not JSON"),
    (lambda d: (d / "config.json").write_text("[1, 2]"), "it is not a JSON object of settings"),
    (lambda d: None, "no such file"),
])
def test_a_config_that_cannot_be_read_is_one_line(tmp_path, make, piece):
    (tmp_path / "ck").mkdir()
    make(tmp_path / "ck")
    res = analyze('(def layers (checkpoint-config "ck" :layers))\n', str(tmp_path / "run.sx"))
    got = [(d.code, d.message) for d in res.diagnostics if d.code.startswith("E-CONFIG")]
    assert len(got) == 1 and got[0][0] == "E-CONFIG-001" and piece in got[0][1], got
    assert "ck/config.json" in got[0][1]


@pytest.mark.parametrize("window, refused", [(4, True), (7, True), (8, False), (None, False)])
def test_a_mistral_window_shorter_than_the_sequences_is_refused(project, window, refused):
    # the standard library's attention is the full causal one: Mistral's only up to its window
    root, text = project   # (rows of 9 tokens: the model reads 8, the last is a target)
    path = root / "data" / "llama3-tiny" / "config.json"
    cfg = {k: v for k, v in json.loads(path.read_text()).items() if k != "rope_scaling"}
    path.write_text(json.dumps({**cfg, "model_type": "mistral", "sliding_window": window}))
    got = [c for c in codes(analyze(text, str(root / "run.sx"), read_files=True)) if c[0] == "E-CONFIG-002"]
    assert bool(got) == refused, got
    if refused:
        assert f"`sliding_window` is {window}, and this file's loaders give rows of 9 tokens" in got[0][1]


def test_a_config_json_that_is_a_fifo_or_nests_too_deep_is_one_line(project):
    import os
    root, text = project
    path = root / "data" / "llama3-tiny" / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    got = codes(analyze(text, str(root / "run.sx"), read_files=True))
    assert got and got[0][0] == "E-CONFIG-001" and "nests deeper" in got[0][1], got
    path.unlink()
    os.mkfifo(path)   # never opened for a wait: refused from its mode
    got = codes(analyze(text, str(root / "run.sx"), read_files=True))
    assert got and got[0][0] == "E-CONFIG-001" and "named pipe" in got[0][1], got


@pytest.mark.parametrize("key, value, said", [
    ("rms_norm_eps", -1, "`rms_norm_eps` is -1, not a finite number above 0"),
    ("num_hidden_layers", -1, "`num_hidden_layers` is -1, not a count of 1 or more"),
    ("rope_theta", float("nan"), "`rope_theta` is nan, not a finite number above 0"),
])
def test_a_config_value_that_is_no_size_or_setting_is_one_refusal(project, key, value, said):
    root, text = project
    path = root / "data" / "llama3-tiny" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    got = codes(analyze(text, str(root / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-CONFIG-002"], got
    assert said in got[0][1], got[0][1]


@pytest.mark.parametrize("family,wrong", [("gpt2", "llama"), ("llama3", "gpt2"), ("qwen2", "gpt2")])
def test_a_wrong_model_type_is_one_error_at_the_first_def_not_a_cascade(tmp_path, family, wrong):
    """A checkpoint whose config.json says another family's `model_type`: every `checkpoint-config`
    def would read a key the file lacks, and the `:pretrained` mapping would see no parameters; one
    E-CONFIG-002 says the cause (no false E-MODEL-006, no E-CONFIG-002 per def)."""
    from test_hf_parity import FIXTURES
    shutil.copytree(FIXTURES / family, tmp_path / family)
    config = json.loads((tmp_path / family / "config.json").read_text())
    config["model_type"] = wrong
    (tmp_path / family / "config.json").write_text(json.dumps(config))
    text = (FIXTURES / f"{family}.sx").read_text()
    for read_files in (False, True):
        res = analyze(text, str(tmp_path / "run.sx"), read_files=read_files)
        assert [d.code for d in res.diagnostics] == ["E-CONFIG-002"], [(d.code, d.message) for d in res.diagnostics]
        d = res.diagnostics[0]
        right = "gpt2" if family == "gpt2" else "llama"
        assert f'`model_type` is "{wrong}", but the config has none of that family\'s sizes' in d.message
        assert d.message.endswith(f'configs have: is `model_type` "{right}"?') and d.help == "fix `model_type` in the config.json"
        assert text[d.span.start:d.span.end] == f'"{family}"' and res.source.line_col(d.span.start)[0] == 2


def test_a_mapping_mistake_beside_a_parameter_that_did_not_check_is_still_said():
    text = (RunFile.small().set("defmodel lm :params :embed", "(normal [nothing 32] :std 0.1)")
            .set("defmodel lm :pretrained", '(:path "x.safetensors" :names (:embed "e" :outt "o"))'))
    res = analyze(text, "run.sx")
    got = {d.code: d.message for d in res.diagnostics}
    assert "E-NAME-001" in got or any(c.startswith("E-") for c in got if c != "E-MODEL-006"), got
    assert "maps `outt`, which is not a parameter of `lm` (did you mean `out`?)" in got["E-MODEL-006"], got
    assert "`embed`" not in got["E-MODEL-006"]   # its shape did not check: said there, not here


@pytest.mark.parametrize("family", ["qwen3", "qwen3-tied", "olmo2"])
def test_a_qwen3_or_olmo2_block_stated_against_its_config_is_compared(tmp_path, family):
    """The parity fixture's run file checks clean; an epsilon stated in the block's call that is not the
    config's is E-CONFIG-004 at that call, naming `rms_norm_eps`."""
    from test_hf_parity import FIXTURES
    shutil.copytree(FIXTURES / family, tmp_path / family)
    text = (FIXTURES / f"{family}.sx").read_text()
    assert codes(analyze(text, str(tmp_path / "run.sx"), read_files=True)) == []
    block = "olmo2-block-cached" if family == "olmo2" else "qwen3-block-cached"
    stated = text.replace("eps (getf self :", "1e-3 (getf self :", 1)
    assert stated != text and block in text
    got = codes(analyze(stated, str(tmp_path / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-CONFIG-004"], got
    assert f"has `rms_norm_eps` 1e-06, and `{block}` here uses 0.001" in got[0][1], got


def test_a_qwen3_head_width_of_width_over_heads_is_not_its_head_dim(tmp_path):
    """Qwen3's heads are `head_dim` wide (16 in the fixture), not width / heads (8): a file that says so
    is refused where the checkpoint is read, naming the projection's shape and the parameter's."""
    from test_hf_parity import FIXTURES
    shutil.copytree(FIXTURES / "qwen3", tmp_path / "qwen3")
    text = RunFile.read(FIXTURES / "qwen3.sx").set("def head-width", "(def head-width (/ width heads))")
    got = codes(analyze(text, str(tmp_path / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-MODEL-003"], got
    assert "tensor `model.layers.0.self_attn.q_proj.weight` is [64 32] f32, parameter `layers.wq` [2 32 4 8]" \
        in got[0][1], got
    fixed = text.set("def head-width", "(def head-width 16)")
    assert codes(analyze(fixed, str(tmp_path / "run.sx"), read_files=True)) == []


def test_a_stated_size_is_reported_at_the_parameter_of_the_model_that_reads_the_checkpoint(tmp_path):
    """Two models with a `:wq`: the teacher's (read from the checkpoint, 8 heads where config.json has 4)
    and a student's after it. E-CONFIG-004 stands at the teacher block's `:wq`, not at the last `:wq`
    of the file."""
    shutil.copytree(CASES / "data" / "llama3-tiny", tmp_path / "data" / "llama3-tiny")
    text = RunFile.read(CASES / "config-004-stated-heads.sx").set("model", "(model pair)").add("""(defmodel pair
  :params (:teacher llama3 :wq (normal [width heads head-width] :std 0.02))
  :apply (lambda (self x) (+ (llama3 x) (sum (getf self :wq)))))""", before="model")
    text = text.edit("objective", "(model (getf inputs :x))", "(pair (getf inputs :x))")
    f = tmp_path / "pair.sx"
    f.write_text(text)
    res = analyze(text, str(f), read_files=True)
    found = [(d.code, res.source.line_col(d.span.start)[0] + 1) for d in res.diagnostics]
    assert sorted(found) == [("E-CONFIG-004", 21), ("E-CONFIG-004", 22)], [(d.code, d.message) for d in res.diagnostics]


def test_a_checkpoint_dir_without_config_json_is_only_that(tmp_path):
    """`checkpoint-config` of a directory without config.json (its shards there): E-CONFIG-001 alone,
    no E-CONFIG-004 or W-MODEL-001 from the values it could not give (a `repeat` of 1 layer)."""
    hf = Path(__file__).parent / "fixtures" / "hf"
    shutil.copytree(hf / "llama3", tmp_path / "llama3")
    (tmp_path / "llama3" / "config.json").unlink()
    f = tmp_path / "llama3.sx"
    f.write_text((hf / "llama3.sx").read_text())
    res = analyze(f.read_text(), str(f), read_files=True)
    assert {d.code for d in res.diagnostics} == {"E-CONFIG-001"}, [(d.code, d.message) for d in res.diagnostics]


def test_a_teacher_deeper_than_its_checkpoint_is_one_short_line(tmp_path):
    """A `repeat` of 3 over a 2-layer checkpoint: one E-MODEL-003 clause saying both depths (not one
    clause per missing tensor), its help binding the count with `checkpoint-config`."""
    hf = Path(__file__).parent / "fixtures" / "hf"
    shutil.copytree(hf / "llama3", tmp_path / "llama3")
    f = tmp_path / "deep.sx"
    f.write_text((hf / "llama3.sx").read_text().replace('(def layers (checkpoint-config "llama3" :layers))',
                                                        "(def layers 3)"))
    res = analyze(f.read_text(), str(f), read_files=True)
    (d,) = [d for d in res.diagnostics if d.code == "E-MODEL-003"]
    assert d.message == ("`llama3`: the checkpoint has 2 layers, and the `repeat` makes 3: layer 2 has no tensors "
                         "in it")
    assert '(checkpoint-config "llama3" :layers)' in d.help


@pytest.mark.parametrize("value, message", [
    (None, "it has no `num_hidden_layers` (a count of 1 or more), which the model's sizes are read from"),
    ("2", '`num_hidden_layers` is "2", not a count of 1 or more'),
])
def test_a_missing_or_mistyped_config_key_is_one_error_in_plain_words(tmp_path, value, message):
    """A key config.json lacks is said to be missing (not "null"); a layer count written as a string
    is one E-CONFIG-002, without a W-MODEL-001 from a `repeat` of the unknown count."""
    hf = Path(__file__).parent / "fixtures" / "hf"
    shutil.copytree(hf / "llama3", tmp_path / "llama3")
    config = json.loads((tmp_path / "llama3" / "config.json").read_text())
    if value is None:
        del config["num_hidden_layers"]
    else:
        config["num_hidden_layers"] = value
    (tmp_path / "llama3" / "config.json").write_text(json.dumps(config))
    f = tmp_path / "llama3.sx"
    f.write_text((hf / "llama3.sx").read_text())
    res = analyze(f.read_text(), str(f), read_files=True)
    assert [(d.code, d.message) for d in res.diagnostics] == [
        ("E-CONFIG-002", f"`llama3/config.json`: {message}")]

@pytest.mark.parametrize("value", [[1], {"name": "llama"}, 7])
def test_a_model_type_of_the_wrong_json_type_is_one_line_in_lint_explain_and_the_server(tmp_path, value):
    """A `model_type` that is no string: one E-CONFIG-002 naming the key and its value, never a traceback
    (in `lint`, `lint --read-files`, the server's check and its hovers, and `explain`)."""
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    from test_hf_parity import FIXTURES
    shutil.copytree(FIXTURES / "llama3", tmp_path / "llama3")
    config = json.loads((tmp_path / "llama3" / "config.json").read_text())
    (tmp_path / "llama3" / "config.json").write_text(json.dumps({**config, "model_type": value}))
    text = (FIXTURES / "llama3.sx").read_text()
    (tmp_path / "run.sx").write_text(text)
    for read_files in (False, True, "local"):
        res = analyze(text, str(tmp_path / "run.sx"), read_files=read_files)
        got = [(d.code, d.message) for d in res.diagnostics]
        assert [c for c, _ in got] == ["E-CONFIG-002"], got
        assert f"`model_type` is {json.dumps(value)}, not a string naming the family" in got[0][1]
        index = ide.Index(res)
        for at in range(0, len(text), 50):
            ide.hover(index, at)
    for args in (["lint", str(tmp_path / "run.sx")], ["lint", "--read-files", str(tmp_path / "run.sx")],
                 ["explain", str(tmp_path / "run.sx")]):
        r = CliRunner().invoke(app, args, env={"COLUMNS": "400", "NO_COLOR": "1"})
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)
        assert "Traceback" not in r.output and r.output.count("E-CONFIG-002") == 1, (args, r.output)


def test_one_unreadable_config_is_one_e_config_001_not_one_per_def(tmp_path):
    """Every `checkpoint-config` of a broken config.json has one cause: one E-CONFIG-001, at the first."""
    from test_hf_parity import FIXTURES
    (tmp_path / "llama3").mkdir()
    (tmp_path / "llama3" / "config.json").write_text("{not json")
    text = (FIXTURES / "llama3.sx").read_text()
    assert text.count("(checkpoint-config") >= 13
    res = analyze(text, str(tmp_path / "run.sx"))
    got = [d for d in res.diagnostics if d.is_error]
    assert [d.code for d in got] == ["E-CONFIG-001"], [(d.code, d.message) for d in got]
    assert res.source.line_col(got[0].span.start)[0] == 2 and "it is not JSON" in got[0].message


FREQ = ("(rope-inv-freq head-width rope-base rope-factor rope-low-freq-factor\n"
        "                                                               rope-high-freq-factor rope-original-positions)")


@pytest.fixture
def llama3(tmp_path):
    """The Llama 3 parity fixture's run file (every setting from its config.json) beside its checkpoint."""
    from test_hf_parity import FIXTURES
    shutil.copytree(FIXTURES / "llama3", tmp_path / "llama3")
    text = (FIXTURES / "llama3.sx").read_text()
    assert FREQ in text and "eps (getf self :attn-norm)" in text
    return tmp_path / "run.sx", text


def let_bound(text: str, freq: str) -> str:
    """The layer's frequencies bound in its `let*` to `freqs` as `freq`, the block given the name."""
    text = text.replace(FREQ, "freqs")
    return text.replace("(let* ((ks (getf c :k))", f"(let* ((freqs {freq})\n                  (ks (getf c :k))", 1)


def all_codes(res):
    return [(d.code, d.message) for d in res.diagnostics]


def test_frequencies_bound_in_a_let_are_compared(llama3):
    """The issue's silent case: a Llama 3 teacher whose `rope-inv-freq` is bound in a `let*` with Llama 2's
    base was 3.82 off in logits with lint clean; it is E-CONFIG-004 at the base, in plain lint too."""
    path, text = llama3
    right = let_bound(text, "(rope-inv-freq head-width 500000.0 8.0 1.0 4.0 16)")
    for read_files in (False, True):
        assert all_codes(analyze(right, str(path), read_files=read_files)) == []
    wrong = let_bound(text, "(rope-inv-freq head-width 10000.0 8.0 1.0 4.0 16)")
    for read_files in (False, True):
        got = all_codes(analyze(wrong, str(path), read_files=read_files))
        assert got == [("E-CONFIG-004", "`llama3/config.json` has `rope_parameters.rope_theta` 500000.0, and "
                        "`llama-block-freq-cached` here uses 10000.0")], got
    renamed = let_bound(text, "(rope-inv-freq head-width 10000.0 8.0 1.0 4.0 16)").replace(
        "(let* ((freqs", "(let* ((f0", 1).replace("(ks (getf c :k))", "(freqs f0)\n (ks (getf c :k))", 1)
    assert [c for c, _ in all_codes(analyze(renamed, str(path)))] == ["E-CONFIG-004"]   # a name of a name


@pytest.mark.parametrize("eps, want", [
    ("(* 10.0 1e-6)", []),                                   # computed in place, the config's value
    ("(let* ((e (/ 1.0 100000.0))) e)", []),
    ("(* 2.0 eps)", ["E-CONFIG-004"]),                         # computed, and not the config's
    ("(+ eps (* 0.0 (mean (getf self :attn-norm))))", ["W-CONFIG-001"]),   # known only when it runs
])
def test_a_computed_epsilon_is_folded_or_said_to_be_uncompared(llama3, eps, want):
    path, text = llama3
    text = text.replace("eps (getf self :attn-norm)", f"{eps} (getf self :attn-norm)", 1)
    got = all_codes(analyze(text, str(path)))
    assert [c for c, _ in got] == want, got
    if want == ["W-CONFIG-001"]:
        assert got[0][1] == ("`llama-block-freq-cached` here takes the epsilon `(+ eps (* 0.0 (mean (getf self "
                             ":attn-norm))))`, which the checker cannot know before the run, so `rms_norm_eps` of "
                             "`llama3/config.json` is not compared with it")
    if want == ["E-CONFIG-004"]:
        assert "`rms_norm_eps` 1e-05" in got[0][1] and "here uses 2e-05" in got[0][1]


def test_frequencies_not_from_rope_inv_freq_are_said_to_be_uncompared(llama3):
    path, text = llama3
    text = text.replace(FREQ, f"(* 1.0 {FREQ})")
    got = all_codes(analyze(text, str(path)))
    assert [c for c, _ in got] == ["W-CONFIG-001"], got
    assert got[0][1].startswith("`llama-block-freq-cached` here takes the rotary frequencies `(* 1.0 (rope-inv-freq")
    assert got[0][1].endswith("so `rope_parameters` of `llama3/config.json` is not compared with it"), got[0][1]


GENERATOR = """
(defgenerate :trips TRIPS
  :init (lambda (batch ctx) INIT)
  :step (lambda (state trip ctx) (list :row (getf state :row) :last (getf state :last)))
  :finish (lambda (state ctx) (list :sample (getf state :row)
                                    :sample-logits (model (cast (slice (getf state :row) :axis 1 :start 0 :end seq) :i32)))))
"""
ROWS = "(list :row (concat [(field batch :row) (field batch :row)] :axis 1) :last (zeros [2 4]))"
NO_ROW = "(list :row (cast (field batch :row) :f32) :last (zeros [2 4]))"


@pytest.fixture
def mistral(tmp_path):
    """The Mistral parity fixture (its rows: 8 tokens) with a generator that runs the teacher, and a
    writer of its config.json's window and positions."""
    from test_hf_parity import FIXTURES
    shutil.copytree(FIXTURES / "mistral", tmp_path / "mistral")
    path = tmp_path / "mistral" / "config.json"
    config = json.loads(path.read_text())

    def text(trips, init):
        gen = GENERATOR.replace("TRIPS", str(trips)).replace("INIT", init)
        return (FIXTURES / "mistral.sx").read_text().replace("(prepare (lambda", gen + "\n(prepare (lambda", 1)

    def configure(window, positions):
        path.write_text(json.dumps({**config, "sliding_window": window, "max_position_embeddings": positions}))
    return tmp_path / "run.sx", text, configure


@pytest.mark.parametrize("trips, init, window, said", [
    (4, ROWS, 12, "the generator makes rows of 16 positions (`:row`, 4 trips), which `teacher` reads"),
    (4, ROWS, 16, None),
    (20, NO_ROW, 16, "the generator runs 20 trips, a position each, which `teacher` reads"),   # the trips counted
    (16, NO_ROW, 16, None),
])
def test_a_generator_past_mistral_s_window_is_refused(mistral, trips, init, window, said):
    """The loader's rows (8 tokens) fit the window; the generator's positions are counted too."""
    path, text, configure = mistral
    configure(window, 64)
    got = all_codes(analyze(text(trips, init), str(path)))
    if said is None:
        assert got == [], got
    else:
        assert [c for c, _ in got] == ["E-CONFIG-002"] and f"`sliding_window` is {window}, and {said}" in got[0][1], got


@pytest.mark.parametrize("positions, said", [
    (10, "`mistral/config.json` has `max_position_embeddings` 10, and the generator makes rows of 16 positions "
         "(`:row`, 4 trips): `teacher` reads 16 positions, past the 10 it was trained on"),
    (6, "`mistral/config.json` has `max_position_embeddings` 6, and the generator makes rows of 16 positions "
        "(`:row`, 4 trips): `teacher` reads 16 positions, past the 6 it was trained on"),
    (16, None),
])
def test_positions_past_max_position_embeddings_are_a_warning(mistral, positions, said):
    path, text, configure = mistral
    configure(None, positions)
    got = all_codes(analyze(text(4, ROWS), str(path)))
    assert got == ([("W-CONFIG-002", said)] if said else []), got


def test_loader_rows_past_max_position_embeddings_are_a_warning(mistral):
    from test_hf_parity import FIXTURES
    path, _, configure = mistral
    configure(None, 6)
    got = all_codes(analyze((FIXTURES / "mistral.sx").read_text(), str(path)))
    assert got == [("W-CONFIG-002", "`mistral/config.json` has `max_position_embeddings` 6, and this file's loaders "
                    "give rows of 8 tokens (the model reads 7): `teacher` reads 7 positions, past the 6 it was "
                    "trained on")], got


@pytest.mark.parametrize("config, code", [("{not json", "E-CONFIG-001"),
                                          ('{"model_type": ["llama"]}', "E-CONFIG-002")])
def test_a_bad_config_read_by_a_def_and_by_pretrained_is_said_once(project, config, code):
    """Sizes stated by hand, the epsilon bound from the config: the `def` and the `:pretrained` both read
    the one bad config.json, which is one diagnostic, at the `def`."""
    root, text = project
    (root / "data" / "llama3-tiny" / "config.json").write_text(config)
    text = text.add('(def eps (checkpoint-config "data/llama3-tiny" :eps))', after="def seq")
    for read_files in (False, True):
        got = codes(analyze(text, str(root / "run.sx"), read_files=read_files))
        assert [c for c, _ in got] == [code], (read_files, got)


@pytest.mark.parametrize("case", ["config-004-stated-heads.sx", "config-004-stated-rope.sx"])
def test_plain_lint_reports_what_lint_read_files_does(case):
    """The cases' contradictions with config.json (sizes and settings) need no tensor: plain `lint` gives
    every one `--read-files` gives, at the same places."""
    text = (CASES / case).read_text()
    plain = analyze(text, str(CASES / case))
    read = analyze(text, str(CASES / case), read_files=True)
    assert [(d.code, d.span, d.message) for d in plain.diagnostics] == \
        [(d.code, d.span, d.message) for d in read.diagnostics]
    assert plain.diagnostics and all(d.code == "E-CONFIG-004" for d in plain.diagnostics)


@pytest.mark.parametrize("helper, call, want", [
    ("(lambda (x w) (rms-norm-eps x w 1e-5))", "(my-norm (getf c :h) (getf self :norm))", []),
    ("(lambda (x w) (rms-norm-eps x w 1e-6))", "(my-norm (getf c :h) (getf self :norm))", ["E-CONFIG-004"]),
    ("(lambda (x w e) (rms-norm-eps x w e))", "(my-norm (getf c :h) (getf self :norm) 2e-5)", ["W-CONFIG-001"]),
])
def test_a_block_in_a_function_of_the_file_s_own_is_compared_or_said_uncompared(llama3, helper, call, want):
    """The final norm written through a function `(def my-norm (lambda ...))`: its literal epsilon is
    compared; one it takes as an argument (each call may give another) is W-CONFIG-001, not silence."""
    path, text = llama3
    text = RunFile(text).add(f"(def my-norm {helper})", before="defmodel layer")
    old = "(rms-norm-eps (getf c :h) (getf self :norm) eps)"
    assert text.count(old) == 2
    text = text.replace(old, call)
    got = all_codes(analyze(text, str(path)))
    assert [c for c, _ in got] == want, got
    if want == ["W-CONFIG-001"]:
        assert "the epsilon `e`, which the checker cannot know in the body of the function `my-norm`" in got[0][1]


def test_e_config_004_has_a_quick_fix_that_makes_the_file_clean(tmp_path):
    """The mechanical help as a quick fix: a number written at the call becomes config.json's value,
    a `def` the call names is bound with `checkpoint-config`; applied, the file checks clean."""
    hf = Path(__file__).parent / "fixtures" / "hf"
    shutil.copytree(hf / "llama3", tmp_path / "llama3")
    text = (RunFile.read(hf / "llama3.sx").set("def eps", "(def eps 1e-6)")
            .edit("defmodel layer (rope-inv-freq", "rope-base", "10000.0"))
    f = tmp_path / "llama3.sx"
    f.write_text(text)
    res = analyze(text, str(f))
    ix = ide.index(res)
    diags = [d for d in res.diagnostics if d.code == "E-CONFIG-004"]
    assert diags, [(d.code, d.message) for d in res.diagnostics]
    for _ in range(len(diags)):
        d = next(d for d in ix.result.diagnostics if d.code == "E-CONFIG-004")
        (fix,) = [x for x in ide.quick_fixes(ix, d.span) if x.title == "use the checkpoint's config.json values"]
        for e in sorted(fix.edits, key=lambda e: -e.span.start):
            text = text[:e.span.start] + e.text + text[e.span.end:]
        f.write_text(text)
        ix = ide.index(analyze(text, str(f)))
        if not any(d.code == "E-CONFIG-004" for d in ix.result.diagnostics):
            break
    assert [(d.code, d.message) for d in ix.result.diagnostics] == []
    assert '(def eps (checkpoint-config "llama3" :eps))' in text and "(rope-inv-freq head-width 500000.0" in text


def test_hover_on_a_checkpoint_config_path_and_key_and_on_a_pretrained_repeat():
    """Hover on `"llama3"` and `:layers` inside `(checkpoint-config ...)` says what the def binds and
    from which key; hover on a `:pretrained` model's `(repeat ...)` entry lists each stacked
    parameter's checkpoint tensors."""
    hf = Path(__file__).parent / "fixtures" / "hf"
    text = (hf / "llama3.sx").read_text()
    ix = ide.index(analyze(text, str(hf / "llama3.sx"), read_files=True))
    for needle in ('"llama3" :layers', ':layers))'):
        shown = ide.hover(ix, text.index(needle) + 2).markdown
        assert "from llama3/config.json: `num_hidden_layers` 2" in shown, shown
    shown = ide.hover(ix, text.index(":layers (repeat") + 2).markdown
    assert "- `layers.wq`: `model.layers.0.self_attn.q_proj.weight` [32 32] f32, and 1 more, one a layer" in shown, shown


def test_an_eos_token_id_that_is_no_id_names_the_one_file_that_holds_it(tmp_path):
    """generation_config.json's `eos_token_id` (which wins) that is no id: the message names that file alone."""
    fixtures = Path(__file__).parent / "fixtures" / "hf"
    shutil.copytree(fixtures / "llama3", tmp_path / "ck")
    (tmp_path / "ck" / "generation_config.json").write_text(json.dumps({"eos_token_id": "</s>"}))
    text = '(def eos (checkpoint-config "ck" :eos))\n'
    res = analyze(text, str(tmp_path / "run.sx"))
    (d,) = [d for d in res.diagnostics if d.code.startswith("E-CONFIG")]   # (the file has no run: E-FORM too)
    assert d.code == "E-CONFIG-002"
    assert d.message == '`ck/generation_config.json`: `eos_token_id` is "</s>", not an id or a list of ids', d.message
    (tmp_path / "ck" / "generation_config.json").write_text(json.dumps({}))
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    (tmp_path / "ck" / "config.json").write_text(json.dumps({**cfg, "eos_token_id": [2, "x"]}))
    (d,) = [d for d in analyze(text, str(tmp_path / "run.sx")).diagnostics if d.code.startswith("E-CONFIG")]
    assert d.message == '`ck/config.json`: `eos_token_id` is [2, "x"], not an id or a list of ids', d.message
