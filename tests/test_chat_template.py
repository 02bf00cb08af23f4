"""Chat prompts and prompts laid out for generation (issue 41, item 2 and its bad input).

A `[L]` field whose column holds chat messages is rendered through the tokenizer's chat template as
transformers' `apply_chat_template(..., add_generation_prompt=True)` renders it: the ids equal
transformers' own, committed in tests/fixtures/chat/expected.json by benchmarks/hf_chat_template.py
(a Qwen2 template in tokenizer_config.json, a Llama 3 one in chat_template.jinja). `:pad-side :left`
lays rows out for generation with `-length`, `-mask` and `-positions`; a row longer than its field
is refused (or cut where `:truncate` says), and a template that fails on a row names the row and the
template's error, in the same words from `sexpgpu run` and `lint --read-files` (prompt_rows.PromptRows).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import check
from sexpgpu_lang import analyze
from sexpgpu_lang.ir import LoaderIR
from sexpgpu_lang.source import Span
from sexpgpu_runtime.data.loaders import Loader
from sexpgpu_runtime.errors import LoaderError

CHAT = Path(__file__).resolve().parent / "fixtures" / "chat"
EXPECTED = json.loads((CHAT / "expected.json").read_text(encoding="utf-8"))
CONVERSATIONS = [json.loads(line)["prompt"] for line in (CHAT / "conversations.jsonl").read_text("utf-8").splitlines()]

RUN = """\
(loader prompts
  :source SOURCE
  :batch 1
  :fields (:prompt [WIDTH] :i32 :prompt-length [] :i32))
(defmodel m :params (:w (zeros [1])) :apply (lambda (self x) (* x (getf self :w))))
(model m)
(objective (lambda (batch ctx) (mean (model (cast (field batch :prompt) :f32)))))
(run :loader prompts :steps 1)
"""


def encoder(name: str):
    from tokenizers import Tokenizer
    from sexpgpu_lang.files.prompt_encoder import PromptEncoder
    path = str(CHAT / name / "tokenizer.json")
    return PromptEncoder(Tokenizer.from_file(path), path)


def table(tmp_path: Path, source: tuple, fields, batch: int = 1) -> dict:
    return Loader(LoaderIR("prompts", source, batch, fields, Span(0, 0), str(tmp_path)), 0).source.table


def run_error(tmp_path: Path, source: tuple, fields) -> str:
    with pytest.raises(LoaderError) as e:
        table(tmp_path, source, fields)
    return str(e.value)


def lint(tmp_path: Path, source: str, width: int = 8) -> list:
    f = tmp_path / "r.sx"
    f.write_text(RUN.replace("SOURCE", source).replace("WIDTH", str(width)), encoding="utf-8")
    res = analyze(f.read_text(), str(f), read_files=True)
    return [(d.code, res.source.slice(d.span), d.message, d.help) for d in res.diagnostics]


def chat_dir(tmp_path: Path, name: str = "qwen2") -> None:
    """The fixture's tokenizer and template `name` copied into `tmp_path`/tok/."""
    shutil.copytree(CHAT / name, tmp_path / "tok")


@pytest.mark.parametrize("name", ["qwen2", "llama3"])
def test_chat_prompt_ids_equal_transformers_apply_chat_template(name):
    enc = encoder(name)
    assert [enc.text(c, "chat") for c in CONVERSATIONS] == EXPECTED[name]["text"]
    assert [enc.ids(c, "chat") for c in CONVERSATIONS] == EXPECTED[name]["ids"]
    assert len({len(ids) for ids in EXPECTED[name]["ids"]}) == len(CONVERSATIONS)   # every length differs


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_chat_column_is_left_padded_with_lengths_positions_and_an_attention_mask(tmp_path, kind):
    chat_dir(tmp_path, "llama3")
    if kind == "jsonl":
        shutil.copy(CHAT / "conversations.jsonl", tmp_path / "c.jsonl")
    else:   # a list<struct<role, content, ...>> column: a message's absent keys read as null, and are dropped
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.Table.from_pylist([{"prompt": c} for c in CONVERSATIONS]), str(tmp_path / "c.parquet"))
    width = 100
    fields = (("prompt", (width,), "i32"), ("prompt-length", (), "i32"), ("prompt-mask", (width,), "bool"),
              ("prompt-positions", (width,), "i32"))
    t = table(tmp_path, (kind, {"path": f"c.{kind}", "tokenizer": "tok/tokenizer.json", "pad": 7,
                                "pad-side": "left"}), fields)
    for i, ids in enumerate(EXPECTED["llama3"]["ids"]):
        n = len(ids)
        assert t["prompt"][i].tolist() == [7] * (width - n) + ids        # the prompt's end at the last column
        assert t["prompt-length"][i] == n
        assert t["prompt-mask"][i].tolist() == [False] * (width - n) + [True] * n
        assert t["prompt-positions"][i].tolist() == [-1] * (width - n) + list(range(n))   # -1: padding
    assert t["prompt-mask"].dtype == np.bool_ and t["prompt-positions"].dtype == np.int32


def test_right_padding_gives_positions_from_the_first_column(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"prompt": [5, 6, 7]}\n{"prompt": [1]}\n')
    fields = (("prompt", (4,), "i32"), ("prompt-positions", (4,), "i32"), ("prompt-mask", (4,), "i32"))
    t = table(tmp_path, ("jsonl", {"path": "p.jsonl", "pad": 9}), fields)
    assert t["prompt"].tolist() == [[5, 6, 7, 9], [1, 9, 9, 9]]
    assert t["prompt-positions"].tolist() == [[0, 1, 2, -1], [0, -1, -1, -1]]
    assert t["prompt-mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_prompt_longer_than_a_left_padded_field_is_refused_naming_the_row_and_its_length(tmp_path, kind):
    rows = [{"prompt": [1, 2]}, {"prompt": [1, 2, 3, 4, 5, 6]}, {"prompt": [3]}]
    if kind == "jsonl":
        (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "p.parquet"))
    fields = (("prompt", (4,), "i32"), ("prompt-length", (), "i32"))
    reason = ("`prompt` is 6 token ids, more than the 4 of field `prompt` (`:pad-side :left` keeps every prompt "
              "whole); widen the field to `[6]`, or give `:truncate :left` to keep each row's last 4 "
              "(`:truncate :right`: its first)")
    place = ("loader `prompts`: " + str(tmp_path / "p.jsonl") + ":2:12" if kind == "jsonl"
             else f"loader `prompts` ({tmp_path / 'p.parquet'}): row 2 of column `prompt`")
    assert run_error(tmp_path, (kind, {"path": f"p.{kind}", "pad-side": "left"}), fields) == f"{place}: {reason}"
    left = table(tmp_path, (kind, {"path": f"p.{kind}", "pad-side": "left", "truncate": "left"}), fields)
    assert left["prompt"].tolist() == [[0, 0, 1, 2], [3, 4, 5, 6], [0, 0, 0, 3]]
    assert left["prompt-length"].tolist() == [2, 4, 1]
    right = table(tmp_path, (kind, {"path": f"p.{kind}", "pad-side": "left", "truncate": "right"}), fields)
    assert right["prompt"][1].tolist() == [1, 2, 3, 4]
    if kind == "jsonl":   # lint --read-files refuses the same row in the same words
        got = lint(tmp_path, '(jsonl "p.jsonl" :pad-side :left)', width=4)
        r, _, fix = reason.partition("; ")
        assert got == [("E-LOADER-001", '"p.jsonl"', f"`jsonl`'s file `p.jsonl` has a row `run` refuses: "
                        f"p.jsonl:2:12: {r}", fix)]
        assert lint(tmp_path, '(jsonl "p.jsonl" :pad-side :left :truncate :left)', width=4) == []
    else:
        got = lint(tmp_path, '(parquet "p.parquet" :pad-side :left)', width=4)
        r, _, fix = reason.partition("; ")
        assert got == [("E-LOADER-001", '"p.parquet"', f"`parquet`'s file `p.parquet`: row 2 of column `prompt`: {r}",
                        fix)]


def test_a_long_chat_prompt_is_refused_by_lint_and_run_alike(tmp_path):
    chat_dir(tmp_path)
    shutil.copy(CHAT / "conversations.jsonl", tmp_path / "c.jsonl")
    n = len(EXPECTED["qwen2"]["ids"][0])   # the first row, the shortest but one
    fields = (("prompt", (n - 1,), "i32"), ("prompt-length", (), "i32"))
    msg = run_error(tmp_path, ("jsonl", {"path": "c.jsonl", "tokenizer": "tok/tokenizer.json", "pad-side": "left"}),
                    fields)
    assert msg.startswith(f"loader `prompts`: {tmp_path / 'c.jsonl'}:1:12: `prompt` is {n} tokens, more than the "
                          f"{n - 1} of field `prompt`")
    got = lint(tmp_path, '(jsonl "c.jsonl" :tokenizer "tok/tokenizer.json" :pad-side :left)', width=n - 1)
    reason, _, fix = msg.split("c.jsonl:1:12: ")[1].partition("; ")
    assert got == [("E-LOADER-001", '"c.jsonl"', f"`jsonl`'s file `c.jsonl` has a row `run` refuses: c.jsonl:1:12: "
                    f"{reason}", fix)]


def test_a_template_that_fails_on_a_row_names_the_row_and_the_template_error(tmp_path):
    chat_dir(tmp_path, "llama3")
    rows = [CONVERSATIONS[0], CONVERSATIONS[1], [{"role": "assistant", "content": "I start."}]]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"prompt": r}) + "\n" for r in rows))
    fields = (("prompt", (128,), "i32"),)
    reason = ("`prompt`'s messages do not render through the chat template: "
              f"{EXPECTED['llama3']['refused']}")   # transformers' own words for the template's raise_exception
    msg = run_error(tmp_path, ("jsonl", {"path": "c.jsonl", "tokenizer": "tok/tokenizer.json"}), fields)
    assert msg == f"loader `prompts`: {tmp_path / 'c.jsonl'}:3:12: {reason}; fix the row, or the template"
    got = lint(tmp_path, '(jsonl "c.jsonl" :tokenizer "tok/tokenizer.json")', width=128)
    assert got == [("E-LOADER-001", '"c.jsonl"', f"`jsonl`'s file `c.jsonl` has a row `run` refuses: c.jsonl:3:12: "
                    f"{reason}", "fix the row, or the template")]


def test_a_tokenizer_without_a_chat_template_or_with_a_broken_one_is_named(tmp_path):
    chat_dir(tmp_path)
    shutil.copy(CHAT / "conversations.jsonl", tmp_path / "c.jsonl")
    source = ("jsonl", {"path": "c.jsonl", "tokenizer": "tok/tokenizer.json"})
    fields = (("prompt", (128,), "i32"),)
    (tmp_path / "tok" / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    msg = run_error(tmp_path, source, fields)
    assert msg == (f"loader `prompts` ({tmp_path / 'c.jsonl'}): column `prompt` holds chat messages, but the "
                   f"tokenizer's directory {tmp_path / 'tok'} has no chat template (no chat_template.jinja, and no "
                   "`chat_template` string in tokenizer_config.json); put the model's tokenizer_config.json beside "
                   "tokenizer.json, or store the prompts as text")
    (tmp_path / "tok" / "chat_template.jinja").write_text("{% for m in messages %}\n{{ m['content'] }\n{% endfor %}")
    msg = run_error(tmp_path, source, fields)
    assert "chat_template.jinja does not compile (line 2 of the template: unexpected '}')" in msg
    got = lint(tmp_path, '(jsonl "c.jsonl" :tokenizer "tok/tokenizer.json")', width=128)
    assert [(c, at) for c, at, _, _ in got] == [("E-LOADER-001", '"c.jsonl"')]
    assert "does not compile (line 2 of the template" in got[0][2]


def test_a_chat_row_that_is_not_messages_or_has_no_tokenizer_is_named(tmp_path):
    chat_dir(tmp_path)
    rows = [CONVERSATIONS[0], [{"content": "no role"}]]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"prompt": r}) + "\n" for r in rows))
    fields = (("prompt", (64,), "i32"),)
    msg = run_error(tmp_path, ("jsonl", {"path": "c.jsonl", "tokenizer": "tok/tokenizer.json"}), fields)
    assert msg.endswith(":2:12: `prompt`'s message 1 is an object without a text `role`; each message is an object "
                        '{"role": "user", "content": "..."}: fix the row')
    msg = run_error(tmp_path, ("jsonl", {"path": "c.jsonl"}), fields)
    assert msg.endswith("column `prompt` holds chat messages; give `:tokenizer \"tokenizer.json\"` (with the model's "
                        "tokenizer_config.json beside it, for its chat template) to render and tokenize them, or "
                        "store token ids")


def test_pad_side_and_truncate_take_left_or_right():
    res = check(RUN.replace("SOURCE", '(jsonl "p.jsonl" :pad-side :middle :truncate :left)\n'
                            '                                  ;; ^^^^^^^ E-FORM-002').replace("WIDTH", "4"))
    assert res.diagnostics[0].message == "`:pad-side` of `jsonl` is `:right` or `:left`, got `:middle`"
    check(RUN.replace("SOURCE", '(parquet "p.parquet" :truncate 3)\n'
                      '                                      ;; ^ E-FORM-002').replace("WIDTH", "4"))


@pytest.mark.slow
def test_sexpgpu_run_refuses_a_failing_chat_row_before_training(tmp_path):
    import subprocess
    import sys
    chat_dir(tmp_path, "llama3")
    rows = [CONVERSATIONS[0], [{"role": "assistant", "content": "I start."}]]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"prompt": r}) + "\n" for r in rows))
    run = tmp_path / "r.sx"
    run.write_text(RUN.replace("SOURCE", '(jsonl "c.jsonl" :tokenizer "tok/tokenizer.json" :pad-side :left)')
                   .replace("WIDTH", "64"), encoding="utf-8")
    exe = str(Path(sys.executable).with_name("sexpgpu"))
    proc = subprocess.run([exe, "run", str(run), "--run-dir", str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stdout.strip().splitlines()   # run checks the file with its data first, as lint --read-files does
    assert lines[0] == (f"{run}:2:18: error[E-LOADER-001]: `jsonl`'s file `c.jsonl` has a row `run` refuses: "
                        "c.jsonl:2:12: `prompt`'s messages do not render through the chat template: "
                        f"{EXPECTED['llama3']['refused']}")
    assert "  = help: fix the row, or the template" in lines
    assert proc.stderr.strip() == f"sexpgpu: error: {run} has 1 error; fix them before running"
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("side", ["left", "right"])
def test_the_loader_s_positions_and_start_are_the_standard_library_s_from_its_mask(tmp_path, side):
    # the fields the generator's blocks take directly (docs/stdlib.md, per-row positions): `-positions` is
    # `(padded-positions mask)`, and `-length` minus the width is `(left-padded-start mask)` for left padding
    from helpers import evaluate_expression
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": list(range(1, n + 1))}) + "\n" for n in (5, 1, 3, 0)))
    fields = (("prompt", (5,), "i32"), ("prompt-length", (), "i32"), ("prompt-mask", (5,), "bool"),
              ("prompt-positions", (5,), "i32"))
    t = table(tmp_path, ("jsonl", {"path": "p.jsonl", "pad-side": side}), fields)

    def stdlib(text):
        return evaluate_expression(text, {"mask": t["prompt-mask"]}).value
    assert t["prompt-positions"].tolist() == stdlib("(padded-positions mask)").tolist()
    if side == "left":
        assert (t["prompt-length"] - 5).tolist() == stdlib("(left-padded-start mask)").tolist() == [0, -4, -2, -5]


@pytest.mark.slow
def test_the_whole_path_of_docs_stdlib_checks_and_trains(tmp_path):
    # docs/stdlib.md "From a prompt file to a completion", with its `def`s, examples/distill.sx's student as
    # the model and the examples' chat prompts: lint clean, and two steps on the completion it decodes
    from helpers import run
    from sexpgpu_lang import analyze
    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "stdlib.md").read_text(encoding="utf-8")
    section = doc[doc.index("### From a prompt file to a completion"):]
    code = section[section.index("```lisp") + 7:section.index("```", section.index("```lisp") + 7)]
    data = root / "examples" / "data"
    code = (code.replace('"data/chat.jsonl"', f'"{data / "code-prompts.jsonl"}"')
            .replace('"tok/tokenizer.json"', f'"{data / "bytes-chat" / "tokenizer.json"}"').replace(":batch 8", ":batch B"))
    distill = (root / "examples" / "distill.sx").read_text(encoding="utf-8")
    student = distill[distill.index("(defmodel student"):distill.index("(model student)")].replace(
        "\n           :teacher code-lm", "")
    defs = ("(def seq 64) (def head-width 16) (def small 32) (def small-heads 2) (def small-hidden 64)\n"
            "(def B 32) (def P 48) (def C 16) (def S seq) (def K small-heads) (def H head-width) (def eos 10)\n")
    tail = """(model student)
(prepare (lambda (b ctx) (list :c (field b :completion) :m (field b :completion-mask))))
(objective (lambda (in ctx)
  (let* ((logits (model (concat [(zeros [B (- seq C)] :dtype :i32) (getf in :c)] :axis 1))))
    (completion-cross-entropy (slice logits :axis 1 :start (- seq C) :end seq) (getf in :c) (getf in :m)))))
(run :loader prompts :steps 2)
"""
    text = defs + code + "\n" + student + tail
    res = analyze(text, str(tmp_path / "run.sx"), read_files=True)
    assert [d.message for d in res.diagnostics if d.severity <= 2] == []
    out = run(text, tmp_path, 2)
    assert [row["step"] for row in out.history][-1] == 2
