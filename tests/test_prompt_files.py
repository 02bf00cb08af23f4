"""Prompt datasets (`jsonl`, `parquet`) for RL and distillation, and the bad inputs of issue 18 at the command
line: padding, cutting, lengths, masks and the prompt/answer split asserted exactly on files the tests make."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sexpgpu_lang.ir import LoaderIR
from sexpgpu_lang.source import Span
from sexpgpu_runtime.data.loaders import Loader
from sexpgpu_runtime.errors import LoaderError

ROOT = Path(__file__).resolve().parents[1]
SEXPGPU = str(Path(sys.executable).with_name("sexpgpu"))
ROWS = [{"prompt": [5, 6, 7], "answer": [8, 9], "reward": 0.5},
        {"prompt": [1, 2, 3, 4, 5, 6], "answer": [7], "reward": 1.0},
        {"prompt": [9], "answer": [10, 11, 12, 13], "reward": 0.0},
        {"prompt": [3, 3], "answer": [4, 4, 4], "reward": 0.25}]
FIELDS = (("prompt", (4,), "i32"), ("prompt-length", (), "i32"), ("answer", (3,), "i32"),
          ("answer-mask", (3,), "bool"), ("reward", (), "f32"))


def spec(source, fields, batch=4, base="."):
    return LoaderIR("data", source, batch, fields, Span(0, 0), str(base))


def write_jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_parquet(path: Path, rows) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(rows), str(path))


def table_of(ld: Loader) -> dict:
    return ld.source.table


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_token_columns_are_padded_or_cut_with_lengths_and_masks(tmp_path, kind):
    path = tmp_path / f"p.{kind}"
    (write_jsonl if kind == "jsonl" else write_parquet)(path, ROWS)
    ld = Loader(spec((kind, {"path": path.name, "pad": 99}), FIELDS, base=tmp_path), 0)
    t = table_of(ld)
    assert t["prompt"].tolist() == [[5, 6, 7, 99], [1, 2, 3, 4], [9, 99, 99, 99], [3, 3, 99, 99]]
    assert t["prompt-length"].tolist() == [3, 4, 1, 2]                        # after the cut to 4
    assert t["answer"].tolist() == [[8, 9, 99], [7, 99, 99], [10, 11, 12], [4, 4, 4]]
    assert t["answer-mask"].tolist() == [[True, True, False], [True, False, False], [True] * 3, [True] * 3]
    assert t["reward"].dtype == np.float32 and t["reward"].tolist() == [0.5, 1.0, 0.0, 0.25]
    assert t["prompt"].dtype == np.int32 and t["answer-mask"].dtype == np.bool_
    assert sorted(ld.indices(0, 4)) == [0, 1, 2, 3]


def test_text_columns_are_tokenized_with_the_tokenizer(tmp_path):
    from sexpgpu_cli.tokenizer import train_bpe
    from tokenizers import Tokenizer
    corpus = tmp_path / "c.txt"
    corpus.write_text("What is two plus two? Four.\nWhat is one plus one? Two.\n" * 30)
    train_bpe([str(corpus)], 280, str(tmp_path / "tok.json"))
    rows = [{"prompt": "What is two plus two?", "answer": " Four."}, {"prompt": "What is one plus one?", "answer": " Two."}]
    write_parquet(tmp_path / "qa.parquet", rows)
    fields = (("prompt", (16,), "i32"), ("prompt-length", (), "i32"), ("answer", (2,), "i32"))
    t = table_of(Loader(spec(("parquet", {"path": "qa.parquet", "tokenizer": "tok.json"}), fields, batch=2, base=tmp_path), 0))
    tok = Tokenizer.from_file(str(tmp_path / "tok.json"))
    for i, r in enumerate(rows):
        p, a = tok.encode(r["prompt"], add_special_tokens=False).ids, tok.encode(r["answer"], add_special_tokens=False).ids
        assert t["prompt"][i].tolist() == (p + [0] * 16)[:16] and t["prompt-length"][i] == len(p)
        assert t["answer"][i].tolist() == (a + [0] * 2)[:2]


def test_prompt_file_errors_name_the_file_and_the_fix(tmp_path):
    write_jsonl(tmp_path / "p.jsonl", ROWS)

    def err(source, fields=FIELDS):
        with pytest.raises(LoaderError) as e:
            Loader(spec(source, fields, base=tmp_path), 0)
        assert "\n" not in str(e.value)
        return str(e.value)
    # the fields the file has, not only those that matched (issue 18)
    assert "no field `answr` (they have prompt, answer, reward)" in err(("jsonl", {"path": "p.jsonl"}), (("answr", (3,), "i32"),))
    (tmp_path / "bad.jsonl").write_text('{"prompt": [1]}\n{"prompt": [2\n')
    assert "bad.jsonl:2:" in err(("jsonl", {"path": "bad.jsonl"}), (("prompt", (3,), "i32"),))
    (tmp_path / "gap.jsonl").write_text('{"prompt": [1]}\n{"other": 1}\n')
    assert "gap.jsonl:2: the row has no `prompt`" in err(("jsonl", {"path": "gap.jsonl"}), (("prompt", (3,), "i32"),))
    write_jsonl(tmp_path / "text.jsonl", [{"prompt": "hi"}] * 4)
    assert "column `prompt` holds text; give `:tokenizer" in err(("jsonl", {"path": "text.jsonl"}), (("prompt", (3,), "i32"),))
    assert "p.jsonl:3:12: `prompt` has token 9, outside `:vocab 9`" in err(("jsonl", {"path": "p.jsonl", "vocab": 9, "pad": 99}), FIELDS)
    (tmp_path / "x.parquet").write_text("not parquet")
    assert "x.parquet is not a readable parquet file" in err(("parquet", {"path": "x.parquet"}), FIELDS)
    assert "no file" in err(("parquet", {"path": "none.parquet"}), FIELDS)


# -- at the command line: one line, exit 2, no traceback --------------------------------------------

RUN = """(loader train
  :source SOURCE
  :batch 4
  :fields FIELDS)
(defmodel m :params (:w (zeros [1])) :apply (lambda (self x) (* x (getf self :w))))
(model m)
(objective (lambda (batch ctx) (mean (model (cast (field batch :x) :f32)))))
(run :loader train :steps 1)
"""


def run_with(tmp_path: Path, source: str, fields: str = "(:x [8] :i32)") -> str:
    path = tmp_path / "r.sx"
    path.write_text(RUN.replace("SOURCE", source).replace("FIELDS", fields))
    proc = subprocess.run([SEXPGPU, "run", str(path), "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sexpgpu: error:")]
    assert len(errors) == 1, proc.stderr
    return proc.stdout + proc.stderr   # (a file the check reads is named by its diagnostic, on stdout)


@pytest.mark.slow
def test_the_bad_inputs_of_issue_18_at_the_command_line(tmp_path):
    np.save(tmp_path / "train.npy", np.arange(100, dtype=np.uint16))
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "train.bin")
    line = run_with(tmp_path, '(npz "train.npy")')   # was a TypeError traceback
    assert "train.npy is a .npy file" in line and '(tokens "train.npy"' in line
    assert "token 50 at position 50 is outside `:vocab 50`" in run_with(tmp_path, '(tokens "train.bin" :dtype :uint16 :seq 8 :vocab 50)')


def test_the_bad_inputs_of_issue_18_name_the_file_and_the_source_that_reads_it(tmp_path):
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "train.bin")
    (tmp_path / "notes.npz").write_text("just some text\n")

    def err(source, fields=(("x", (8,), "i32"),)):
        with pytest.raises(LoaderError) as e:
            Loader(spec(source, fields, base=tmp_path), 0)
        assert "\n" not in str(e.value)
        return str(e.value)
    line = err(("npz", {"path": "train.bin"}))   # was numpy's "This file contains pickled (object) data"
    assert "train.bin is not an .npz" in line and ":dtype :uint16" in line and "pickle" not in line
    assert "notes.npz is a text file" in err(("npz", {"path": "notes.npz"}))
    assert "train.bin is not UTF-8 text" in err(("text-bytes", {"glob": "train.bin", "seq": 8}))   # was read as bytes
    (tmp_path / "tok.json").write_text("{}")
    assert "tok.json is not a Hugging Face tokenizer.json" in err(("text-tokens", {"glob": "*.npz", "tokenizer": "tok.json", "seq": 8}))
    np.savez(tmp_path / "d.npz", prompt=np.zeros((4, 8), np.int32), answer=np.zeros((4, 8), np.int32))
    # every field the file has, not only those that matched
    assert "no field `answr` (they have answer, prompt)" in err(("npz", {"path": "d.npz"}), (("prompt", (8,), "i32"), ("answr", (8,), "i32")))


def test_npz_of_uint16_tokens_widens_to_the_declared_i32(tmp_path):
    # nanoGPT-style ids in an npz: before issue 18, "field `tokens` has dtype uint16, the declaration says i32"
    np.savez(tmp_path / "u16.npz", tokens=np.full((4, 8), 60000, np.uint16))
    t = table_of(Loader(spec(("npz", {"path": "u16.npz"}), (("tokens", (8,), "i32"),), base=tmp_path), 0))
    assert t["tokens"].dtype == np.int32 and (t["tokens"] == 60000).all()
    with pytest.raises(LoaderError, match="has dtype uint16, the declaration says f32"):
        Loader(spec(("npz", {"path": "u16.npz"}), (("tokens", (8,), "f32"),), base=tmp_path), 0)


def test_a_row_of_the_wrong_kind_is_named_by_its_line_and_column(tmp_path):
    def err(name, lines, fields):
        (tmp_path / name).write_bytes(lines)
        with pytest.raises(LoaderError) as e:
            Loader(spec(("jsonl", {"path": name}), fields, base=tmp_path), 0)
        assert "\n" not in str(e.value) and "str1024" not in str(e.value)
        return str(e.value)
    good = b'{"prompt":"x","reward":1.0}\n' * 5
    reward = (("reward", (), "f32"),)
    line = err("bad3.jsonl", good + b'{"prompt":"x","reward":"high"}\n', reward)
    assert line.startswith("loader `data`: ") and 'bad3.jsonl:6:24: `reward` is text ("high"), but field `reward` is ' \
        "declared `[] :f32` (a number); fix the row, or the declaration if every row is so" in line
    assert "bad4.jsonl:6:24: `reward` is a list, but field `reward`" in err(
        "bad4.jsonl", good + b'{"prompt":"x","reward":[1.0,2.0]}\n', reward)
    assert "frac.jsonl:1:24: `reward` is a number (0.5), but field `reward` is declared `[] :i32` (an integer)" in err(
        "frac.jsonl", b'{"prompt":"x","reward":0.5}\n', (("reward", (), "i32"),))
    # a list in a text column, text in a token column, a list holding text
    (tmp_path / "c.txt").write_text("x y z\n" * 20)
    from sexpgpu_cli.tokenizer import train_bpe
    train_bpe([str(tmp_path / "c.txt")], 260, str(tmp_path / "tok.json"))
    (tmp_path / "mixed.jsonl").write_bytes(good + b'{"prompt":[1,2,5000],"reward":1}\n')
    with pytest.raises(LoaderError) as e:
        Loader(spec(("jsonl", {"path": "mixed.jsonl", "tokenizer": "tok.json"}), (("prompt", (4,), "i32"),),
                    base=tmp_path), 0)
    line = str(e.value)
    assert "mixed.jsonl:6:11: `prompt` is a list, but field `prompt` is declared `[4]` and the first row's" in line
    assert "ids.jsonl:2:12: `prompt` is text (\"hi\"), but field `prompt` is declared `[4]` (the first row's is a list" in err(
        "ids.jsonl", b'{"prompt": [1]}\n{"prompt": "hi"}\n', (("prompt", (4,), "i32"),))
    assert "ids2.jsonl:2:12: `prompt` is a list holding text (\"a\"), but" in err(
        "ids2.jsonl", b'{"prompt": [1]}\n{"prompt": [1, "a"]}\n', (("prompt", (4,), "i32"),))
    # a byte that is not UTF-8: its line, its column and the byte (after a byte-order mark and a 2-byte character)
    line = err("latin.jsonl", b'\xef\xbb\xbf{"prompt":[1]}\n{"prompt":"\xc3\xa9\xe9"}\n', (("prompt", (4,), "i32"),))
    assert line.startswith("loader `data`: ") and "latin.jsonl:2:13: byte 0xe9 is not UTF-8 text" in line


def test_a_nan_infinite_or_boolean_number_in_a_row_is_named_by_its_line(tmp_path):
    good = b'{"prompt":"x","reward":1.0}\n' * 3
    reward = (("reward", (), "f32"),)

    def err(rows):
        (tmp_path / "r.jsonl").write_bytes(good + rows)
        with pytest.raises(LoaderError) as e:
            Loader(spec(("jsonl", {"path": "r.jsonl"}), reward, base=tmp_path), 0)
        assert "\n" not in str(e.value)
        return str(e.value)
    assert err(b'{"prompt":"x","reward":NaN}\n').endswith(
        "r.jsonl:4:24: `reward` is nan; a NaN or infinite input makes the losses that read it NaN: fix the row, or "
        "drop it")
    assert "r.jsonl:4:24: `reward` is inf; a NaN" in err(b'{"prompt":"x","reward":1e999}\n')
    assert "r.jsonl:5:24: `reward` is 1e+39, which is inf in f32; a NaN" in err(
        b'{"prompt":"x","reward":2}\n{"prompt":"x","reward":1e39}\n')
    assert "r.jsonl:4:24: `reward` is a boolean (true), but field `reward` is declared `[] :f32` (a number)" in err(
        b'{"prompt":"x","reward":true}\n')


def test_a_parquet_row_of_the_wrong_kind_is_named_by_its_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"reward": ["1", "2", "high"]}), tmp_path / "r.parquet")
    with pytest.raises(LoaderError) as e:
        Loader(spec(("parquet", {"path": "r.parquet"}), (("reward", (), "f32"),), base=tmp_path), 0)
    assert "r.parquet): row 1 of column `reward`: `reward` is text (\"1\"), but field `reward` is declared `[] :f32`" \
        in str(e.value)


def test_a_token_id_too_large_for_the_dtype_is_named_with_its_line(tmp_path):
    (tmp_path / "big.jsonl").write_text('{"x":[1,2],"y":[1,2]}\n{"x":[1,2],"y":[1,1099511627776]}\n')
    fields = (("x", (2,), "i32"), ("y", (2,), "i32"))
    with pytest.raises(LoaderError) as e:
        Loader(spec(("jsonl", {"path": "big.jsonl"}), fields, batch=2, base=tmp_path), 0)
    assert str(e.value) == (f"loader `data`: {tmp_path / 'big.jsonl'}:2:16: `y` has token id 1099511627776, which "
                            "does not fit i32 (-2147483648 to 2147483647); declare `:i64`, or fix the row")
    (tmp_path / "huge.jsonl").write_text('{"y":[1,2]}\n{"y":[3,4]}\n{"y":[5,' + str(1 << 64) + ']}\n')
    with pytest.raises(LoaderError, match=r"huge.jsonl:3:6: `y` has token id 18446744073709551616, which does not "
                                          r"fit i64 .*; fix the row$"):
        Loader(spec(("jsonl", {"path": "huge.jsonl"}), (("y", (2,), "i64"),), batch=2, base=tmp_path), 0)
