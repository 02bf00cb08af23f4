"""The model from a checkpoint in one form (sexpgpu_lang/check/one_form.py, docs/checkpoints.md "The model
from a checkpoint"): `(defmodel teacher :pretrained "dir")` is the written-out model its family's record
(hf_config.Family) describes. Against the parity fixtures (tests/fixtures/hf, made by
benchmarks/hf_parity.py): the one form in place of each fixture's written-out `layer` and `teacher` gives
the written-out model's logits and greedy tokens bit for bit and transformers' within the fixtures'
tolerance; a student made from a checkpoint trains; the editor and `explain` see the expansion; a
checkpoint without a config or of another family is one error at the path."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from helpers import check, program_of
from sexpgpu_lang import analyze
from sexpgpu_lang.files.hf_config import RECORDS

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
FAMILIES = ("gpt2", "llama2", "llama3", "mistral", "qwen2", "qwen3", "qwen3-tied", "olmo2", "llama-tied")


def one_form_text(family: str, extra: str = " :frozen true", fixture: str | None = None) -> str:
    """The fixture's run file (`fixture`, default the family's) with its written-out `layer` and `teacher`
    replaced by the one form, the checkpoint named by its absolute path (the file is checked from anywhere)."""
    text = (FIXTURES / f"{fixture or family}.sx").read_text()
    start, end = text.index("(defmodel layer"), text.index("(model teacher)")
    text = text[:start] + f'(defmodel teacher :pretrained ckpt{extra})\n\n' + text[end:]
    return f'(def ckpt "{FIXTURES / family}")\n' + text.replace(f'(checkpoint-config "{family}"', "(checkpoint-config ckpt")


@functools.lru_cache(maxsize=None)
def forward(path: Path):
    from benchmarks.hf_parity import sexpgpu_forward
    return sexpgpu_forward(path)[0]


def one_form_forward(family: str, tmp: Path):
    run = tmp / f"{family}-one-form.sx"
    run.write_text(one_form_text(family))
    from benchmarks.hf_parity import sexpgpu_forward
    return sexpgpu_forward(run)[0]


def test_the_one_form_of_llama3_is_the_written_out_model_bit_for_bit(tmp_path):
    want = np.load(FIXTURES / "llama3.npz")
    mine, written = one_form_forward("llama3", tmp_path), forward(FIXTURES / "llama3.sx")
    assert np.array_equal(mine(want["ids"]), written(want["ids"]))
    assert np.array_equal(mine(want["ids"], "greedy"), written(want["ids"], "greedy"))   # `:decode` with caches
    assert np.array_equal(mine(want["ids"], "greedy"), want["greedy"])


@pytest.mark.slow
@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "llama3"])
def test_every_fixture_family_in_the_one_form_matches_transformers_and_the_written_out_model(family, tmp_path):
    from benchmarks.hf_parity import relative
    want = np.load(FIXTURES / f"{family}.npz")
    mine, written = one_form_forward(family, tmp_path), forward(FIXTURES / f"{family}.sx")
    assert np.array_equal(mine(want["ids"]), written(want["ids"]))
    assert relative(mine(want["ids"]), want["logits"]) <= 1e-4
    assert np.array_equal(mine(want["ids"], "greedy"), want["greedy"])


@pytest.mark.parametrize("family", FAMILIES)
def test_the_one_form_checks_clean_with_the_headers_read_and_is_the_written_out_parameters(family):
    res = analyze(one_form_text(family), str(FIXTURES / "one-form.sx"), read_files=True)
    assert [d.code for d in res.diagnostics] == []
    written = analyze((FIXTURES / f"{family}.sx").read_text(), str(FIXTURES / f"{family}.sx"))
    shapes = lambda p: {q.path: (q.shape, q.layers, q.dtype) for q in p.params}  # noqa: E731
    assert shapes(res.program) == shapes(written.program)
    assert all(q.frozen for q in res.program.params)   # `:frozen true`


def test_a_student_made_from_a_checkpoint_is_trainable_and_its_settings_come_from_config_json():
    text = one_form_text("qwen2", extra="")
    p = program_of(text, str(FIXTURES / "one-form.sx"))
    assert not any(q.frozen for q in p.params) and len(p.params) == 14
    cfg = json.loads((FIXTURES / "qwen2" / "config.json").read_text())
    res = analyze(text, str(FIXTURES / "one-form.sx"))
    o = res.facts.one_forms["teacher"]
    assert o.family is RECORDS["qwen2"] and o.mapping == "qwen2-tied"
    got = {k: (v, key) for k, v, key, _ in o.settings}
    theta = cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]
    assert got["rope-base"][0] == theta and got["rope-base"][1].endswith("rope_theta")
    assert got["eps"] == (cfg["rms_norm_eps"], "rms_norm_eps")
    assert got["head-width"][1] == "hidden_size"   # no head_dim: width / heads
    assert "(qwen2-block-cached" in o.text and ":names :qwen2-tied" in o.text and ":lm-head" not in o.text


@pytest.mark.slow
def test_a_student_made_from_a_checkpoint_trains(tmp_path):
    from helpers import run
    from sexpgpu_runtime.weights.pretrained import initial_params
    text = f"""(def ckpt "{FIXTURES / 'llama3'}")
(def vocab (checkpoint-config ckpt :vocab))
(loader rows
  :source (stride-rows :vocab vocab :seq 8)
  :batch 2
  :fields (:row [8] :i32 :stride [1] :i32))
(defmodel student :pretrained ckpt)
(model student)
(objective (lambda (inputs ctx)
  (mean (cross-entropy (model (field inputs :row)) (field inputs :row)))))
(run :loader rows :steps 2 :seed 0 :optimizer (adam :lr 1e-2))
"""
    start, _ = initial_params(program_of(text, str(tmp_path / "run.sx")), 0)
    res = run(text, tmp_path, 2)
    assert len(res.history) >= 1 and all(np.isfinite(h["loss"]) for h in res.history if "loss" in h)
    before, after = np.asarray(start["layers"]["wq"]), np.asarray(res.trainable["layers"]["wq"])
    assert before.shape == after.shape == (2, 32, 4, 8) and not np.array_equal(before, after)


def test_hover_on_the_one_form_shows_the_family_each_setting_and_where_it_came_from_and_the_expansion():
    from sexpgpu_lang.ide import hover, index
    text = one_form_text("llama3")
    ix = index(analyze(text, str(FIXTURES / "one-form.sx")))
    at = text.index("(defmodel teacher") + len("(defmodel t")
    shown = hover(ix, at).markdown
    assert "Llama causal LM (`model_type` `llama`)" in shown
    assert "| `:rope-factor` | 8.0 | `rope_parameters.factor` |" in shown or \
        "| `:rope-factor` | 8.0 | `rope_scaling.factor` |" in shown
    assert "| `:kv-heads` | 2 | `num_key_value_heads` |" in shown
    assert "(defmodel teacher.layer" in shown and "(llama-block-freq-cached" in shown
    assert ":frozen true" in shown and ":entries (:decode" in shown
    on_path = hover(ix, text.index("(defmodel teacher :pretrained ckpt") + len("(defmodel teacher :pretrained c"))
    assert "ckpt: string" in on_path.markdown   # the def it names, as anywhere else
    at_call = hover(ix, text.index("(teacher :decode") + len("(teacher :d"))
    assert "(teacher :decode ids pos k v)" in at_call.markdown and "entry point" in at_call.markdown


def test_completion_offers_the_one_form_model_s_entries():
    from sexpgpu_lang.ide import completions, index
    text = one_form_text("llama3")
    at = text.index("(teacher :decode") + len("(teacher :")
    got = completions(index(analyze(text, str(FIXTURES / "one-form.sx"))), at)
    assert ":decode" in [c.label for c in got.items]


def test_explain_shows_the_one_form_model_s_graphs():
    from sexpgpu_lang.explain import explain
    from sexpgpu_lang.explain.text import to_text
    p = program_of(one_form_text("llama3"), str(FIXTURES / "one-form.sx"))
    shown = to_text(explain(p))
    assert "scan teacher.layer × 2 layers (one body, parameters `layers` stacked [2 ...])" in shown
    assert {q.path for q in p.params} >= {("layers", "wq"), ("lm-head",)}


def test_a_directory_without_config_json_is_one_error_at_the_path(tmp_path):
    (tmp_path / "empty").mkdir()
    check(f"""(def vocab 96)
(loader rows :source (stride-rows :vocab vocab :seq 8) :batch 2 :fields (:row [8] :i32 :stride [1] :i32))
(defmodel teacher :pretrained "{tmp_path / 'empty'}")
;;                            {'^' * (len(str(tmp_path / 'empty')) + 2)} E-CONFIG-001
(model teacher)
(objective (lambda (inputs ctx) (mean (cross-entropy (model (field inputs :row)) (field inputs :row)))))
(run :loader rows :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
""")


def test_an_unknown_model_type_is_one_error_at_the_path_naming_it(tmp_path):
    (tmp_path / "ck").mkdir()
    cfg = json.loads((FIXTURES / "llama3" / "config.json").read_text())
    (tmp_path / "ck" / "config.json").write_text(json.dumps({**cfg, "model_type": "falcon"}))
    res = check(f"""(def vocab 96)
(def ckpt "{tmp_path / 'ck'}")
(loader rows :source (stride-rows :vocab vocab :seq 8) :batch 2 :fields (:row [8] :i32 :stride [1] :i32))
(defmodel teacher :pretrained ckpt)
;;                            ^^^^ E-CONFIG-002
(model teacher)
(objective (lambda (inputs ctx) (mean (cross-entropy (model (field inputs :row)) (field inputs :row)))))
(run :loader rows :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
""")
    (d,) = res.diagnostics
    assert '`model_type` is "falcon"' in d.message and "config.json" in d.message


def test_checkpoint_config_takes_a_def_d_path():
    text = f"""(def ckpt "{FIXTURES / 'llama3'}")
(def layers (checkpoint-config ckpt :layers))
(def vocab (checkpoint-config ckpt :vocab))
(loader rows :source (stride-rows :vocab vocab :seq 8) :batch 2 :fields (:row [8] :i32 :stride [1] :i32))
(defmodel student :pretrained ckpt)
(model student)
(objective (lambda (inputs ctx) (mean (cross-entropy (model (field inputs :row)) (field inputs :row)))))
(run :loader rows :steps layers :seed 0 :optimizer (adam :lr 1e-3))
"""
    res = check(text)
    assert res.program is not None and res.program.run.steps == 2


def test_docs_show_what_the_one_form_of_the_llama3_fixture_makes_and_the_lines_each_form_takes():
    """docs/checkpoints.md "The model from a checkpoint": the expansion as hover shows it, and the
    written-out fixture's line count."""
    text = (FIXTURES / "llama3.sx").read_text()
    start, end = text.index("(defmodel layer"), text.index("(model teacher)")
    one = text[:start] + '(defmodel teacher :pretrained "llama3" :frozen true)\n\n' + text[end:]
    res = analyze(one, str(FIXTURES / "one-form.sx"))
    doc = (Path(__file__).parents[1] / "docs" / "checkpoints.md").read_text()
    assert res.facts.one_forms["teacher"].text.strip() in doc
    lines = text.splitlines()
    code = [line for line in lines if line.strip() and not line.lstrip().startswith(";;")]
    defs = [line for line in code if "(checkpoint-config" in line]
    model = [line for line in text[start:end].splitlines() if line.strip() and not line.lstrip().startswith(";;")]
    assert f"it takes {len(defs) + len(model)} lines: {len(defs)}" in " ".join(doc.split())


def test_the_one_form_takes_a_plist_with_file_dtype_and_refuses_a_mapping_of_its_own():
    ok = one_form_text("llama2", extra="").replace(":pretrained ckpt", ":pretrained (:path ckpt :file-dtype :f32)")
    res = analyze(ok, str(FIXTURES / "one-form.sx"), read_files=True)
    assert [d.code for d in res.diagnostics] == []
    assert ':pretrained (:path "' in res.facts.one_forms["teacher"].text
    assert ":names :llama :file-dtype :f32)" in res.facts.one_forms["teacher"].text
    bad = one_form_text("llama2", extra="").replace(":pretrained ckpt", ":pretrained (:path ckpt :names :llama)")
    res = analyze(bad, str(FIXTURES / "one-form.sx"))
    (d,) = [d for d in res.diagnostics if d.is_error]
    assert d.code == "E-FORM-002" and "`:names` is the family's own mapping" in d.help
    other = one_form_text("llama2", extra=" :remat :dots-saveable :lr 3")
    (d,) = [d for d in analyze(other, str(FIXTURES / "one-form.sx")).diagnostics if d.is_error]
    assert d.code == "E-FORM-002" and other[d.span.start:d.span.end] == ":lr"


def test_a_setting_the_standard_library_does_not_compute_is_one_error_at_the_path(tmp_path):
    import shutil
    shutil.copytree(FIXTURES / "llama2", tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    (tmp_path / "ck" / "config.json").write_text(json.dumps({**cfg, "hidden_act": "gelu", "mlp_bias": True}))
    text = one_form_text("llama2").replace(f'"{FIXTURES / "llama2"}"', f'"{tmp_path / "ck"}"')
    res = analyze(text, str(tmp_path / "run.sx"), read_files=True)
    (d,) = res.diagnostics
    assert d.code == "E-CONFIG-002" and text[d.span.start:d.span.end] == "ckpt"
    assert '`hidden_act` is "gelu"' in d.message and "`mlp_bias` is true" in d.message


@pytest.mark.parametrize("family", [pytest.param(f, marks=[] if f == "qwen2" else [pytest.mark.slow])
                                    for f in ("gpt2", "llama3", "qwen2")])
def test_the_one_form_decodes_a_left_padded_batch_per_row_as_generate_does(family, tmp_path):
    """`:decode` with `pos` [B] (each row's own position) through the one form's cached blocks: the
    padded fixture's prompts (benchmarks/hf_parity.py) give transformers' tokens, each row stopping at
    its end-of-sequence id, with the caches and without."""
    from benchmarks.hf_parity import padded_batch, sexpgpu_batch
    want = np.load(FIXTURES / f"{family}-padded.npz")
    run = tmp_path / f"{family}-padded.sx"
    run.write_text(one_form_text(family, fixture=f"{family}-padded").replace(
        '(npz "', f'(npz "{FIXTURES}/'))
    got = sexpgpu_batch(run)(padded_batch(want))
    assert np.array_equal(got["greedy"], want["completion"])
    assert np.array_equal(got["greedy-uncached"], want["completion"])


def edited(tmp_path, family: str, **changes) -> Path:
    """A copy of the fixture checkpoint `family` with its config.json's `changes` (None removes a key)."""
    import shutil
    ck = tmp_path / f"{family}-edited"
    shutil.copytree(FIXTURES / family, ck)
    cfg = json.loads((ck / "config.json").read_text())
    cfg.update(changes)
    (ck / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return ck


def reading(text: str, family: str, ck: Path) -> str:
    return text.replace(f'"{FIXTURES / family}"', f'"{ck}"')


def diags(text: str, path: str, read_files=True):
    res = analyze(text, path, read_files=read_files)
    return [(d.code, text[d.span.start:d.span.end], d.message, d.help or "") for d in res.diagnostics]


@pytest.mark.parametrize("value", ['"yes"', "0", "1", ":true"])
def test_frozen_takes_true_or_false_only_in_the_one_form_and_written_out(value):
    """`:frozen` is read as a bool, never by truthiness: anything else is E-TYPE-003 at the value."""
    one = one_form_text("llama3", extra=f" :frozen {value}")
    written = (FIXTURES / "llama3.sx").read_text().replace("(defmodel teacher", f"(defmodel teacher :frozen {value}")
    for text, path in ((one, FIXTURES / "one-form.sx"), (written, FIXTURES / "llama3.sx")):
        got = diags(text, str(path), read_files=False)
        assert [(c, at) for c, at, _, _ in got] == [("E-TYPE-003", value)], got
        assert "`:frozen` must be `true` or `false`" in got[0][2]
    res = analyze(one_form_text("llama3", extra=" :frozen false"), str(FIXTURES / "one-form.sx"))
    assert [d for d in res.diagnostics if d.is_error] == [] and not res.program.params[0].frozen


DISTILL = Path(__file__).parents[1] / "examples" / "distill-gpt2.sx"


@pytest.mark.parametrize("bad,at", [(':pretrained "gpt2-teacher" :frozn true', ":frozn"),
                                    (":pretrained 5 :frozen true", "5"),
                                    (':pretrained "no-such-org/absent" :frozen true', '"no-such-org/absent"'),
                                    (':pretrained "gpt2-teacher" :frozen true :params (:x (zeros [2]))', ":params")])
def test_a_failed_one_form_is_one_diagnostic_its_uses_are_not_reported(bad, at, tmp_path, monkeypatch):
    """The teacher of examples/distill-gpt2.sx (used in the student's `:params` and called in `:finish`):
    a one form that fails says why once, at its own form; no "`teacher` is not a model" where it is used."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    text = DISTILL.read_text()
    assert ':pretrained "gpt2-teacher" :frozen true' in text
    text = text.replace(':pretrained "gpt2-teacher" :frozen true', bad)
    got = [d for d in diags(text, str(DISTILL), read_files=False) if d[0].startswith("E-")]
    assert [at_ for _, at_, _, _ in got] == [at], got
    if at == ":frozn":
        assert "did you mean `:frozen`?" in got[0][2]
    if at == ":params":
        assert got[0][0] == "E-FORM-002" and "takes no `:params`" in got[0][2] and "drop `:params`" in got[0][3]


@pytest.mark.parametrize("layers", [1, 3])
def test_a_config_whose_layer_count_is_not_the_weights_is_one_error_naming_both(layers, tmp_path):
    """config.json's `num_hidden_layers` against the layers the weights hold, in the one form and in a written-out
    model whose count is bound by `checkpoint-config`: the checkpoint contradicts itself (not W-MODEL-001 for the
    layers past the count, not a help to bind the count from the config that gave it)."""
    ck = edited(tmp_path, "llama3", num_hidden_layers=layers)
    one = reading(one_form_text("llama3"), "llama3", ck)
    written = (FIXTURES / "llama3.sx").read_text().replace('"llama3"', f'"{ck}"')
    for text in (one, written):
        got = diags(text, str(tmp_path / "run.sx"))
        assert [c for c, _, _, _ in got] == ["E-MODEL-003"], got
        _, _, message, help_ = got[0]
        assert f"has `num_hidden_layers` {layers}, and its weights hold 2 layers" in message, message
        assert "make `num_hidden_layers` 2" in help_ and "checkpoint-config" not in help_, help_


def test_heads_not_a_multiple_of_the_kv_heads_is_refused_at_the_path_before_expanding(tmp_path):
    ck = edited(tmp_path, "llama3", num_attention_heads=5)
    got = diags(reading(one_form_text("llama3"), "llama3", ck), str(tmp_path / "run.sx"), read_files=False)
    assert [(c, at) for c, at, _, _ in got] == [("E-CONFIG-002", "ckpt")], got
    assert "`num_attention_heads` 5 is not a multiple of `num_key_value_heads` 2" in got[0][2]
    ck = edited(tmp_path / "b", "llama3", num_attention_heads=5, num_key_value_heads=5, head_dim=None)
    got = diags(reading(one_form_text("llama3"), "llama3", ck), str(tmp_path / "run.sx"), read_files=False)
    assert [(c, at) for c, at, _, _ in got] == [("E-CONFIG-002", "ckpt")], got
    assert "`hidden_size` 32 is not a multiple of `num_attention_heads` 5" in got[0][2]


def test_hover_rows_say_false_and_name_the_rope_key_read():
    from sexpgpu_lang.ide.describe import one_form_text as hover_text
    res = analyze(one_form_text("qwen2"), str(FIXTURES / "one-form.sx"))
    shown = hover_text(res.facts.one_forms["teacher"])
    assert "| `:rope-factor` | 1.0 | `rope_parameters` |" in shown, shown
    res = analyze(one_form_text("llama2"), str(FIXTURES / "one-form.sx"))
    shown = hover_text(res.facts.one_forms["teacher"])
    assert "| `:tied` | false | `tie_word_embeddings` |" in shown and "False" not in shown, shown
