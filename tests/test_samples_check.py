"""`run`'s `:samples` in the checker (sexpgpu_lang/check/samples.py): the IR it builds, hover on a named
tensor, and one clear diagnostic per mistake (E-SAMPLE-001..003, E-FORM-002, E-NAME-003)."""
from __future__ import annotations

import pytest

from helpers import check, cursor, edited, variant
from sexpgpu_lang import analyze, ide

LOG = "     :log (:every 50))"


def with_samples(samples: str, text: str | None = None) -> str:
    return variant(LOG, "     :log (:every 50)\n     :samples " + samples + ")", text)


def errors(text: str) -> list[tuple[str, str]]:
    return [(d.code, d.message) for d in analyze(text, "case.sx").diagnostics if d.severity <= 2]


def test_the_ir_holds_each_named_tensor_with_its_batch_shape_and_dtype():
    res = analyze(with_samples("(:every 5 :rows 3 :text [:sample :row] :values [:correct] :prompt 2)"), "case.sx")
    assert res.program is not None, [d.message for d in res.diagnostics]
    s = res.program.run.samples
    assert (s.every, s.rows, s.prompt) == (5, 3, 2)
    assert s.text == (("sample", (64, 8), "i32"), ("row", (64, 8), "i32"))
    assert s.values == (("correct", (64, 1), "f32"),)
    assert s.decode == ("ids",)   # stride-rows: no tokenizer, no bytes


def test_defaults_and_a_run_without_samples():
    assert analyze(variant("", ""), "case.sx").program.run.samples is None
    s = analyze(with_samples("(:text [:sample])"), "case.sx").program.run.samples
    assert (s.every, s.rows, s.prompt, s.values) == (10, 4, None, ())


def test_the_decoding_follows_the_training_loader_and_a_written_tokenizer_wins(tmp_path):
    from sexpgpu_lang.check.samples import decoding
    from sexpgpu_lang.ir import LoaderIR
    from sexpgpu_lang.source import Span

    def loader(kind, **args):
        return LoaderIR("train", (kind, args), 4, (("x", (8,), "i32"),), Span(0, 0), base_dir="/data")
    assert decoding(loader("text-bytes", glob="*.py"), None, "run.sx") == ("bytes",)
    assert decoding(loader("text-tokens", glob="*.txt", tokenizer="tok.json"), None, "run.sx") == \
        ("tokenizer", "tok.json", "/data")
    assert decoding(loader("jsonl", path="p.jsonl"), None, "run.sx") == ("ids",)   # ids in the file: no tokenizer
    assert decoding(loader("text-bytes"), "tok.json", str(tmp_path / "run.sx")) == \
        ("tokenizer", "tok.json", str(tmp_path))


def test_hover_on_a_sampled_name_shows_its_shape_and_dtype():
    text = with_samples("(:every 10 :text [:sample] :values [:correct])")
    ix, offset = cursor(":values [:correct]", ":values [:cor$0rect]", text)
    assert ":correct [64 1] f32" in ide.hover(ix, offset).markdown
    ix, offset = cursor(":text [:sample]", ":text [:sam$0ple]", text)
    assert ":sample [64 8] i32" in ide.hover(ix, offset).markdown


@pytest.mark.parametrize("samples, code, piece", [
    ("(:text [:lable])", "E-SAMPLE-001", "no `:lable` to sample: neither loader `train`, the generator, what "
                                         "`prepare` returns nor the top-level `let*` of `prepare` or `objective` "
                                         "provides it; did you mean `:label`?"),
    ("(:values [:nothing])", "E-SAMPLE-001", "no `:nothing` to sample"),
    ("(:text [:correct])", "E-SAMPLE-002", "`:correct` is [64 1] f32, not token ids"),
    ("(:text [:sample] :prompt 8)", "E-SAMPLE-003", "`:prompt 8` leaves no completion in `:sample`"),
    ("(:text [:sample] :rows 65)", "E-SAMPLE-003", "`:rows` of `:samples` must be at most 64"),
    ("(:values [:sample] :rows 2 :every 0)", "E-TYPE-003", "`:every` of `:samples` must be 1 or more"),
    ("(:every 10)", "E-SAMPLE-003", "`:samples` shows nothing"),
    ("(:text :sample)", "E-FORM-002", "takes a vector of batch names"),
    ("(:txt [:sample])", "E-NAME-003", "`:samples` has no keyword `:txt`; did you mean `:text`?"),
    ("10", "E-FORM-002", "`:samples` takes a plist"),
])
def test_each_mistake_is_one_error(samples, code, piece):
    got = errors(with_samples(samples))
    assert len(got) == 1 and got[0][0] == code and piece in got[0][1], got


def test_rows_more_than_a_tensor_has():
    text = variant(":batch 64", ":batch 2")
    got = errors(with_samples("(:text [:sample] :rows 3)", text))
    assert got == [("E-SAMPLE-003", "`:rows 3` is more than the 2 rows of `:sample` ([2 8] i32)")], got
    assert errors(with_samples("(:text [:sample])", text)) == []   # the default 4: as many as there are


def test_samples_show_the_generated_rows_as_text_and_the_accuracy_as_numbers():
    """`:samples` shows the generated rows as text (prompt and completion) and the per-row accuracy
    as numbers."""
    check(edited(("     :log (:every 50))",
                  """\
     :log (:every 50)
     :samples (:every 10 :rows 2 :text [:sample :label] :values [:correct :stride] :prompt 2))""")))


def test_names_computed_in_prepare_and_objective_are_known_with_their_types():
    """An entry `prepare` returns (`:target`) and a name the top-level `let*` of `objective` binds
    (`:logits`, `:loss`) may be shown; the IR says where each comes from, a batch name (`:correct`,
    which `prepare` returns too) stays the batch's, and hover shows the computed one's type."""
    text = with_samples("(:rows 2 :text [:target] :values [:correct :logits :loss])")
    res = analyze(text, "case.sx")
    assert res.program is not None, [d.message for d in res.diagnostics]
    s = res.program.run.samples
    assert s.text == (("target", (64, 8), "i32"),)
    assert s.values == (("correct", (64, 1), "f32"), ("logits", (64, 8, 16), "f32"), ("loss", (), "f32"))
    assert s.computed == (("target", "inputs"), ("logits", "objective"), ("loss", "objective"))
    assert s.computed_in("objective") == ("logits", "loss")
    ix, offset = cursor(":values [:correct :logits", ":values [:correct :log$0its", text)
    assert ":logits [64 8 16] f32" in ide.hover(ix, offset).markdown


def test_a_computed_float_in_text_and_a_name_no_phase_binds_are_each_one_error():
    got = errors(with_samples("(:text [:logits])"))
    assert [c for c, _ in got] == ["E-SAMPLE-002"] and "`:logits` is [64 8 16] f32, not token ids" in got[0][1]
    got = errors(with_samples("(:values [:los])"))
    assert [c for c, _ in got] == ["E-SAMPLE-001"] and "did you mean `:loss`?" in got[0][1], got


def test_a_phase_that_failed_to_check_gives_no_second_error_for_its_names():
    text = with_samples("(:values [:loss])").replace("(mean (cross-entropy logits", "(mean (cross-entropy logitz")
    got = errors(text)
    assert got and not any(c == "E-SAMPLE-001" for c, _ in got), got


def test_a_computed_name_that_is_no_tensor_is_one_error():
    text = with_samples("(:values [:pair])").replace("(loss (mean (cross-entropy logits (getf inputs :target)))))",
                                                     "(loss (mean (cross-entropy logits (getf inputs :target))))\n"
                                                     "         (pair (list :a logits)))")
    got = errors(text)
    assert [c for c, _ in got] == ["E-SAMPLE-003"] and "`:pair` is" in got[0][1] and "not a tensor" in got[0][1], got
