"""`lint --read-files` (and `run`'s check, which reads the same) reports the loader files `run` would
refuse: a data file or tokenizer that is not there, a glob that matches nothing, an empty or truncated
tokenizer.json, a .jsonl row that is not read (a number of 5,000 digits, a row cut short), each one
E-LOADER-001 at the path. The rows are read through the runtime's own reader
(bounded_read.jsonl_rows), so the two say the same; the language server (`read_files="local"`)
does not call a missing file an error (it may be on the machine that runs the file)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from sexpgpu_lang import analyze
from sexpgpu_lang.check.pretrained import LOCAL

RUN = """\
(loader prompts
  :source SOURCE
  :batch 1
  :fields (:prompt [3] :i32))
(defmodel m :params (:w (zeros [1])) :apply (lambda (self x) (* x (getf self :w))))
(model m)
(objective (lambda (batch ctx) (mean (model (cast (field batch :prompt) :f32)))))
(run :loader prompts :steps 1)
"""
TOKENS = RUN.replace(":fields (:prompt [3] :i32)", ":fields (:prompt [3] :i32 :next [3] :i32)")
TOKENIZER = '{"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}, "unk_token": "a"}, "added_tokens": []}'
WS_TOKENIZER = ('{"version": "1.0", "model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1, "[UNK]": 2}, '
                '"unk_token": "[UNK]"}, "pre_tokenizer": {"type": "Whitespace"}, "added_tokens": []}')


def lint(tmp_path, source: str, read_files=True, text: str = RUN):
    f = tmp_path / "r.sx"
    f.write_text(text.replace("SOURCE", source), encoding="utf-8")
    res = analyze(f.read_text(), str(f), read_files=read_files)
    return [(d.code, res.source.slice(d.span), d.message, d.help) for d in res.diagnostics]


def test_a_good_jsonl_and_tokenizer_are_clean(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3]}\n\n{"prompt": [4, 5, 6]}\n')
    (tmp_path / "tok.json").write_text(TOKENIZER)
    assert lint(tmp_path, '(jsonl "p.jsonl")') == []
    assert lint(tmp_path, '(jsonl "p.jsonl" :tokenizer "tok.json" :pad 0)') == []


def test_a_missing_jsonl_is_one_error_at_its_path(tmp_path):
    got = lint(tmp_path, '(jsonl "p.jsonl")')
    assert got == [("E-LOADER-001", '"p.jsonl"', f"`jsonl`'s file `p.jsonl` is not there ({tmp_path / 'p.jsonl'})",
                    "make it, or fix the path (relative to the run file)")]
    assert lint(tmp_path, '(jsonl "p.jsonl")', read_files=False) == []
    assert lint(tmp_path, '(jsonl "p.jsonl")', read_files=LOCAL) == []


def test_a_missing_token_file_tokenizer_or_an_empty_glob_is_one_error(tmp_path):
    got = lint(tmp_path, '(tokens "train.bin" :dtype :uint16 :seq 3)', text=TOKENS)
    assert [(c, at) for c, at, _, _ in got] == [("E-LOADER-001", '"train.bin"')]
    got = lint(tmp_path, '(text-tokens "corpus/*.txt" :tokenizer "tok.json" :seq 3)', text=TOKENS)
    assert [(c, at, m.split(" (")[0]) for c, at, m, _ in got] == [   # two files, two causes
        ("E-LOADER-001", '"corpus/*.txt"', "`text-tokens`'s glob `corpus/*.txt` matches no file"),
        ("E-LOADER-001", '"tok.json"', "`text-tokens`'s tokenizer `tok.json` is not there")]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("ab")
    got = lint(tmp_path, '(text-tokens "corpus/*.txt" :tokenizer "tok.json" :seq 3)', text=TOKENS)
    assert [(c, at, m.split(" (")[0]) for c, at, m, _ in got] == [
        ("E-LOADER-001", '"tok.json"', "`text-tokens`'s tokenizer `tok.json` is not there")]


@pytest.mark.parametrize("content,reason", [
    ("", "it is empty, not a Hugging Face tokenizer.json"),
    ("  \n", "it is empty, not a Hugging Face tokenizer.json"),
    (TOKENIZER[:40], "it is not JSON (Expecting value at line 1 column 41: cut short?), not a Hugging Face tokenizer.json"),
    ("[1, 2]", "it is JSON but not a Hugging Face tokenizer.json (it has no `model` object)"),
], ids=["empty", "blank", "truncated", "not a tokenizer"])
def test_a_tokenizer_run_refuses_is_one_error_with_or_without_vocab(tmp_path, content, reason):
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3]}\n')
    (tmp_path / "tok.json").write_text(content)
    for source in ('(jsonl "p.jsonl" :tokenizer "tok.json" :pad 0)', '(jsonl "p.jsonl" :tokenizer "tok.json" :pad 0 :vocab 8)'):
        got = lint(tmp_path, source)
        assert [(c, at, m) for c, at, m, _ in got] == [("E-LOADER-001", '"tok.json"', f"tokenizer `tok.json` cannot be read: {reason}")]
    assert lint(tmp_path, '(jsonl "p.jsonl" :tokenizer "tok.json" :pad 0)', read_files=LOCAL)[0][0] == "E-LOADER-001"


def test_a_jsonl_row_run_refuses_is_one_error_saying_the_runtime_s_reason(tmp_path):
    from sexpgpu_lang.files.bounded_read import BadJsonlRow, jsonl_rows, open_regular
    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": [1, 2, 3]}\n{"prompt": [1, 2, ' + "9" * 5000 + ']}\n{"prompt": [4, 5\n')
    got = lint(tmp_path, '(jsonl "p.jsonl")')
    assert got == [("E-LOADER-001", '"p.jsonl"', "`jsonl`'s file `p.jsonl` has a row `run` refuses: p.jsonl:2: the row "
                    "holds an integer of more digits than Python reads (4,300 by default)",
                    "no field holds such a number: fix the row, or drop it")]
    with open_regular(str(p)) as fh, pytest.raises(BadJsonlRow) as e:   # what the runtime reads through
        list(jsonl_rows(fh))
    assert (e.value.line, e.value.col) == (2, None) and e.value.detail.startswith("the row holds an integer")
    p.write_text('{"prompt": [1, 2, 3]}\n{"prompt": [4, 5\n')
    assert [m for _, _, m, _ in lint(tmp_path, '(jsonl "p.jsonl")')] == [
        "`jsonl`'s file `p.jsonl` has a row `run` refuses: p.jsonl:2:17: not JSON (Expecting ',' delimiter)"]
    assert lint(tmp_path, '(jsonl "p.jsonl")', read_files=LOCAL) == []   # (the server does not read data rows)


def test_sexpgpu_lint_read_files_exits_1_for_it(tmp_path):
    f = tmp_path / "r.sx"
    f.write_text(RUN.replace("SOURCE", '(jsonl "p.jsonl")'), encoding="utf-8")
    lint_ = lambda *a: subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "lint", *a, str(f)],  # noqa: E731
                                      capture_output=True, text=True, timeout=120)
    r = lint_("--read-files")
    assert r.returncode == 1 and "error[E-LOADER-001]: `jsonl`'s file `p.jsonl` is not there" in r.stdout, r.stdout
    assert lint_().returncode == 0


# The rows `run` refuses for what they hold against the fields: lint says the runtime's own reason
# (both check through sexpgpu_lang.files.prompt_rows.PromptRows), at the loader's path.
SCALAR = RUN.replace(":fields (:prompt [3] :i32)", ":fields (:prompt [3] :i32 :r [] :f32)")


def _runtime_reason(tmp_path, source_args: dict, fields) -> str:
    """What `sexpgpu run`'s prompt_table refuses the .jsonl for, after ``FILE:LINE[:COL]: ``."""
    from sexpgpu_lang.ir import LoaderIR
    from sexpgpu_lang.source import Span
    from sexpgpu_runtime.data.prompt_files import prompt_table
    from sexpgpu_runtime.errors import LoaderError
    spec = LoaderIR("prompts", ("jsonl", source_args), 1, fields, Span(0, 0), str(tmp_path))
    with pytest.raises(LoaderError) as e:
        prompt_table(spec, source_args)
    return str(e.value)


@pytest.mark.parametrize("bad,held", [
    ("[1, 2.5]", "a number (2.5)"), ("[1, true]", "a boolean (true)"), ('[1, "2"]', 'text ("2")'),
    ("[1, [2]]", "a list"), ("[1, null]", "null"), ("[1, 1e999]", "a number (inf)"),
], ids=["float", "bool", "text", "nested", "null", "1e999"])
def test_a_token_list_holding_a_non_integer_is_run_s_error(tmp_path, bad, held):
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3]}\n{"prompt": ' + bad + '}\n')
    reason = (f"`prompt` is a list holding {held}, but field `prompt` is declared `[3]`, a list of integer token ids")
    got = lint(tmp_path, '(jsonl "p.jsonl")')
    assert got == [("E-LOADER-001", '"p.jsonl"', f"`jsonl`'s file `p.jsonl` has a row `run` refuses: p.jsonl:2:12: "
                    f"{reason}", "fix the row, or store text in every row (with `:tokenizer`)")]
    ran = _runtime_reason(tmp_path, {"path": "p.jsonl"}, (("prompt", (3,), "i32"),))
    assert ran == f"loader `prompts`: {tmp_path / 'p.jsonl'}:2:12: {reason}; fix the row, or store text in every row (with `:tokenizer`)"
    assert lint(tmp_path, '(jsonl "p.jsonl")', read_files=LOCAL) == []   # the server reads no data rows


@pytest.mark.parametrize("value,said", [("1e999", "inf"), ("9" * 5000 + ".5", "inf"), ("-1e999", "-inf"),
                                        ("1e300", "1e+300, which is inf in f32")],
                         ids=["1e999", "5000 digits", "-1e999", "past f32"])
def test_a_scalar_that_is_infinite_is_run_s_error(tmp_path, value, said):
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3], "r": 1.0}\n{"prompt": [1, 2, 3], "r": ' + value + '}\n')
    got = lint(tmp_path, '(jsonl "p.jsonl")', text=SCALAR)
    fix = "a NaN or infinite input makes the losses that read it NaN: fix the row, or drop it"
    assert got == [("E-LOADER-001", '"p.jsonl"', f"`jsonl`'s file `p.jsonl` has a row `run` refuses: p.jsonl:2:28: "
                    f"`r` is {said}", fix)]
    ran = _runtime_reason(tmp_path, {"path": "p.jsonl"}, (("prompt", (3,), "i32"), ("r", (), "f32")))
    assert ran == f"loader `prompts`: {tmp_path / 'p.jsonl'}:2:28: `r` is {said}; {fix}"


def test_an_empty_jsonl_has_no_field_as_run_says(tmp_path):
    (tmp_path / "p.jsonl").write_text("")
    got = lint(tmp_path, '(jsonl "p.jsonl")')
    assert got == [("E-LOADER-001", '"p.jsonl"', "`jsonl`'s file `p.jsonl`: the data have no field `prompt` "
                    "(they have nothing)", None)]
    ran = _runtime_reason(tmp_path, {"path": "p.jsonl"}, (("prompt", (3,), "i32"),))
    assert ran.endswith(": the data have no field `prompt` (they have nothing)")
    (tmp_path / "p.jsonl").write_text('{"other": 1}\n')
    assert [m for _, _, m, _ in lint(tmp_path, '(jsonl "p.jsonl")')] == [
        "`jsonl`'s file `p.jsonl`: the data have no field `prompt` (they have other)"]


def test_a_null_row_and_text_without_a_tokenizer_are_run_s_errors(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3]}\n{"prompt": null}\n')
    assert lint(tmp_path, '(jsonl "p.jsonl")') == [("E-LOADER-001", '"p.jsonl"', "`jsonl`'s file `p.jsonl` has a row "
                                                   "`run` refuses: p.jsonl:2: the row has no `prompt` (or it is null)",
                                                   "give every row the field")]
    (tmp_path / "p.jsonl").write_text('{"prompt": "ab"}\n')
    assert [m for _, _, m, _ in lint(tmp_path, '(jsonl "p.jsonl")')] == [
        "`jsonl`'s file `p.jsonl`: column `prompt` holds text"]
    (tmp_path / "tok.json").write_text(TOKENIZER)
    assert lint(tmp_path, '(jsonl "p.jsonl" :tokenizer "tok.json")') == []


def test_an_edited_jsonl_is_read_again(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": [1, 2, 3]}\n')
    assert lint(tmp_path, '(jsonl "p.jsonl")') == []
    p.write_text('{"prompt": [1, 2, 3.5]}\n')
    assert [c for c, _, _, _ in lint(tmp_path, '(jsonl "p.jsonl")')] == ["E-LOADER-001"]


@pytest.mark.parametrize("data,problem,fix", [
    (b"ab\x00cd", "it holds NUL bytes: a binary file", "a token file is read with `(tokens ...)`, else narrow the glob to text files"),
    (b"ab\xffcd", "byte 2 is 0xff", "convert it to UTF-8, or narrow the glob to text files"),
    (b"ab\xc3", "byte 2 is 0xc3", "convert it to UTF-8, or narrow the glob to text files"),
], ids=["NUL", "0xff", "cut short"])
def test_a_text_tokens_file_that_is_not_utf8_is_run_s_error(tmp_path, data, problem, fix):
    from sexpgpu_lang.files.bounded_read import file_chunks, text_problem
    from sexpgpu_runtime.data.tokenize import read_text
    from sexpgpu_runtime.errors import TokenizeError
    (tmp_path / "tok.json").write_text(WS_TOKENIZER)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("ab ab ab")
    (tmp_path / "corpus" / "b.txt").write_bytes(data)
    b = tmp_path / "corpus" / "b.txt"
    got = lint(tmp_path, '(text-tokens "corpus/*.txt" :tokenizer "tok.json" :seq 3)', text=TOKENS)
    assert got == [("E-LOADER-001", '"corpus/*.txt"', f"`text-tokens`'s glob `corpus/*.txt` matches {b}, which is "
                    f"not UTF-8 text ({problem})", fix)]
    with pytest.raises(TokenizeError) as e:   # what the run says
        read_text(str(b))
    assert str(e.value) == f"{b} is not UTF-8 text ({problem}); {fix}"
    with open(b, "rb") as fh:   # a chunk at a time says the same as the whole
        assert text_problem(file_chunks(fh, 1)) == problem
    assert lint(tmp_path, '(text-tokens "corpus/*.txt" :tokenizer "tok.json" :seq 3)', text=TOKENS,
                read_files=LOCAL) == []
    b.write_text("é ab")
    with open(b, "rb") as fh:   # a character split between chunks is text
        assert text_problem(file_chunks(fh, 1)) is None
    with open(b, "rb") as fh:   # the start of a file, cut inside a character, is not called cut short
        assert text_problem(file_chunks(fh, 1, limit=1), final=False) is None
    with open(b, "rb") as fh:
        assert text_problem(file_chunks(fh, 1, limit=1)) == "byte 0 is 0xc3"
    assert lint(tmp_path, '(text-tokens "corpus/*.txt" :tokenizer "tok.json" :seq 3)', text=TOKENS) == []


def test_an_npz_without_a_declared_field_is_run_s_error(tmp_path):
    import numpy as np
    from sexpgpu_lang.ir import LoaderIR
    from sexpgpu_lang.source import Span
    from sexpgpu_runtime.data.loaders import load_table
    from sexpgpu_runtime.errors import LoaderError
    np.savez(tmp_path / "d.npz", y=np.zeros((2, 3), np.int32), x=np.zeros((2, 3), np.int32))
    got = lint(tmp_path, '(npz "d.npz")')
    assert got == [("E-LOADER-001", '"d.npz"', "`npz`'s file `d.npz`: the data have no field `prompt` (they have x, y)",
                    "save the field with np.savez, or fix the loader's `:fields`")]
    spec = LoaderIR("prompts", ("npz", {"path": "d.npz"}), 1, (("prompt", (3,), "i32"),), Span(0, 0), str(tmp_path))
    with pytest.raises(LoaderError) as e:
        load_table(spec, 0)
    assert str(e.value) == f"loader `prompts` ({tmp_path / 'd.npz'}): the data have no field `prompt` (they have x, y)"
    assert lint(tmp_path, '(npz "d.npz")', read_files=LOCAL) == []
    assert lint(tmp_path, '(npz "d.npz")', read_files=False) == []
    np.savez(tmp_path / "d.npz", prompt=np.zeros((2, 3), np.int32))
    assert lint(tmp_path, '(npz "d.npz")') == []
    (tmp_path / "d.npz").write_text("not a zip")   # what it is, in the run's words (prompt_rows.not_an_npz)
    assert lint(tmp_path, '(npz "d.npz")') == [
        ("E-LOADER-001", '"d.npz"', f"`npz`'s file `d.npz`: {tmp_path / 'd.npz'} is a text file, not an .npz",
         "read text with `(text-tokens ...)` or `(text-bytes ...)`, or save arrays with np.savez")]


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_an_npy_whose_header_disagrees_with_dtype_is_run_s_error(tmp_path, version):
    import numpy as np
    from sexpgpu_runtime.data.token_files import TokenStream
    from sexpgpu_runtime.errors import TokenFileError
    with open(tmp_path / "t.npy", "wb") as fh:
        np.lib.format.write_array(fh, np.arange(64, dtype=np.uint32), version=version)
    got = lint(tmp_path, '(tokens "t.npy" :dtype :uint16 :seq 3)', text=TOKENS)
    assert got == [("E-LOADER-001", '"t.npy"', "`tokens`'s file `t.npy` holds uint32 ids (its header says so), but "
                    "`:dtype` says uint16", "write `:dtype :uint32` or leave it out")]
    with pytest.raises(TokenFileError) as e:   # what the run says
        TokenStream(str(tmp_path / "t.npy"), "uint16")
    assert str(e.value) == (f"{tmp_path / 't.npy'} holds uint32 ids (its header says so), but `:dtype` says uint16; "
                            "write `:dtype :uint32` or leave it out")
    assert lint(tmp_path, '(tokens "t.npy" :dtype :uint32 :seq 3)', text=TOKENS) == []
    assert lint(tmp_path, '(tokens "t.npy" :seq 3)', text=TOKENS) == []
    assert lint(tmp_path, '(tokens "t.npy" :dtype :uint16 :seq 3)', text=TOKENS, read_files=LOCAL) == []


def test_a_text_tokens_corpus_shorter_than_one_window_is_run_s_error(tmp_path):
    from sexpgpu_lang.ir import LoaderIR
    from sexpgpu_lang.source import Span
    from sexpgpu_runtime.data.token_loaders import token_windows
    from sexpgpu_runtime.errors import LoaderError
    (tmp_path / "tok.json").write_text(WS_TOKENIZER)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("a b")
    src = '(text-tokens "corpus/*.txt" :tokenizer "tok.json" :seq 3)'
    got = lint(tmp_path, src, text=TOKENS)   # 2 tokens; windows of 3 + 1 (a target field)
    assert got == [("E-LOADER-001", '"corpus/*.txt"', "`text-tokens`'s glob `corpus/*.txt`: its text, tokenized, "
                    "holds 2 tokens, fewer than one window of 4", "give it more text, or lower `:seq`")]
    args = {"glob": "corpus/*.txt", "tokenizer": "tok.json", "seq": 3}
    spec = LoaderIR("prompts", ("text-tokens", args), 1, (("prompt", (3,), "i32"), ("next", (3,), "i32")),
                    Span(0, 0), str(tmp_path))
    with pytest.raises(LoaderError) as e:   # what the run says
        token_windows(spec, args)
    assert str(e.value).endswith(": the file holds 2 tokens, fewer than one window of 4; give it more text, or lower `:seq`")
    assert lint(tmp_path, src, text=TOKENS, read_files=LOCAL) == []
    (tmp_path / "corpus" / "b.txt").write_text("b a b a")
    assert lint(tmp_path, src, text=TOKENS) == []


def test_a_token_list_outside_vocab_or_its_dtype_is_run_s_error(tmp_path):
    fields = (("prompt", (3,), "i32"),)
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3]}\n{"prompt": [1, 9, 3, 99]}\n')
    src = '(jsonl "p.jsonl" :vocab 8)'
    reason = "`prompt` has token 9, outside `:vocab 8`"
    fix = "raise `:vocab` to the model's vocabulary, or tokenize with its tokenizer"
    assert lint(tmp_path, src) == [("E-LOADER-001", '"p.jsonl"', f"`jsonl`'s file `p.jsonl` has a row `run` refuses: "
                                    f"p.jsonl:2:12: {reason}", fix)]
    ran = _runtime_reason(tmp_path, {"path": "p.jsonl", "vocab": 8}, fields)
    assert ran == f"loader `prompts`: {tmp_path / 'p.jsonl'}:2:12: {reason}; {fix}"
    assert lint(tmp_path, '(jsonl "p.jsonl" :vocab 10)') == []   # (99 is past the cut to [3])
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3]}\n{"prompt": [1, 4294967296, 3]}\n')
    reason = "`prompt` has token id 4294967296, which does not fit i32 (-2147483648 to 2147483647)"
    assert [m for _, _, m, _ in lint(tmp_path, '(jsonl "p.jsonl")')] == [
        f"`jsonl`'s file `p.jsonl` has a row `run` refuses: p.jsonl:2:12: {reason}"]
    assert _runtime_reason(tmp_path, {"path": "p.jsonl"}, fields) == (
        f"loader `prompts`: {tmp_path / 'p.jsonl'}:2:12: {reason}; declare `:i64`, or fix the row")


@pytest.mark.parametrize("value,fix", [("2147483648", "declare `:i64`, or fix the row"),
                                       ("-9223372036854775809", "fix the row")],
                         ids=["past i32", "past i64"])
def test_a_scalar_integer_past_its_dtype_is_run_s_error_not_wrapped(tmp_path, value, fix):
    """An integer `[] :i32` value past i32 is refused (it would wrap round to another number, silently);
    `:i64` is offered only for a value that fits it."""
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3], "n": 3}\n{"prompt": [1, 2, 3], "n": ' + value + '}\n')
    text = RUN.replace(":fields (:prompt [3] :i32)", ":fields (:prompt [3] :i32 :n [] :i32)")
    reason = f"`n` is {value}, which does not fit i32 (-2147483648 to 2147483647); {fix}"
    got = lint(tmp_path, '(jsonl "p.jsonl")', text=text)
    assert [(c, m) for c, _, m, _ in got] == [
        ("E-LOADER-001", f"`jsonl`'s file `p.jsonl` has a row `run` refuses: p.jsonl:2:28: {reason.split('; ')[0]}")]
    ran = _runtime_reason(tmp_path, {"path": "p.jsonl"}, (("prompt", (3,), "i32"), ("n", (), "i32")))
    assert ran == f"loader `prompts`: {tmp_path / 'p.jsonl'}:2:28: {reason}"


def test_a_pass_loaders_bad_data_hides_none_of_the_files_other_mistakes(tmp_path):
    """A pass's jsonl that lacks a declared column is E-LOADER-001, and the file's own mistakes are
    still found beside it: the generated `:label` is a field of that loader (E-GEN-003), and the
    pass, whose loader the generator does not run on, reads the generated `:sample`
    (E-CONTRACT-005). The loader's fields are what the file declares, whatever its data holds."""
    from helpers import fixture_text
    (tmp_path / "held.jsonl").write_text('{"row": [1, 2, 3, 4, 5, 6, 7, 8]}\n')
    text = fixture_text() + """
(loader held
  :source (jsonl "held.jsonl" :vocab vocab)
  :batch 1
  :fields (:row [8] :i32 :label [8] :i32))
(pass held-eval :loader held :every 10)
"""
    f = tmp_path / "r.sx"
    f.write_text(text)
    codes = sorted(d.code for d in analyze(text, str(f), read_files=True).diagnostics)
    assert codes == ["E-CONTRACT-005", "E-GEN-003", "E-LOADER-001"], codes


@pytest.mark.parametrize("fields, code, words", [
    ("(:prompt [3] :f32)", "E-TYPE-002", "a `[L]` field is a row of token ids"),
    ("(:prompt [3 2] :i32)", "E-FORM-002", "a column gives a scalar `[]` or a sequence of tokens `[L]`"),
    ("(:prompt [3] :i32 :prompt-mask [2] :bool)", "E-FORM-002", "its mask is `[3]`, one a token"),
    ("(:prompt [3] :i32 :prompt-length [3] :i32)", "E-FORM-002", "a length is `[]`"),
    ("(:prompt [3] :i32 :prompt-positions [3] :f32)", "E-TYPE-002", "a length or position is an integer dtype"),
])
def test_a_prompt_field_declared_as_no_run_reads_it_is_one_error_without_the_files(tmp_path, fields, code, words):
    """A jsonl/parquet field the runtime cannot read as declared (a token row of floats was a traceback
    at run; a mask or length of the wrong shape passed lint) is refused by the checker, files or not."""
    text = RUN.replace(":fields (:prompt [3] :i32)", f":fields {fields}").replace("SOURCE", '(jsonl "p.jsonl")')
    got = [(d.code, d.message) for d in analyze(text, str(tmp_path / "r.sx")).diagnostics]
    assert len(got) == 1 and got[0][0] == code and words in got[0][1], got
