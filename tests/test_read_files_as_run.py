"""`lint --read-files` refuses what `run` refuses before training, in the same words (issue 45, item 7).

Each hostile input (a symlink loop for a tokenizer, a jsonl file, a token file, a `:samples
:tokenizer` or a `:pretrained` checkpoint; a glob matching only a FIFO or /dev/zero; a
`:samples :tokenizer` that is a FIFO, /dev/zero, missing or nested too deeply; a tokenizer at
/proc/self/mem; a corpus of fewer windows than one batch; an `npz` that is not one, or whose
array has another record shape or dtype than declared; a `.npy` token file of two axes, or of floats; `jsonl`
text whose ids, tokenized, fall outside `:vocab`; a parquet file that is not one, or whose rows
`run` refuses)
is given to both. The fast tier
compares the checker's diagnostic (`analyze(..., read_files=True)`, and the language server's
"local") with the runtime's own refusal when the file is opened as the run opens it
(data/loaders.Loader, the checker's file checks left out); the slow tier runs `sexpgpu lint
--read-files` and `sexpgpu run` on the same file and finds the same refusal in both.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import sexpgpu_program
from sexpgpu_lang import analyze

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "tests" / "cases-files" / "warn-loader-001-tokenizer-larger-than-vocab.sx").read_text() \
    .replace("(def vocab 16)", "(def vocab 32)")
SOURCE = '(text-tokens "data/*.txt" :tokenizer "data/tokenizer-24.json" :seq seq :vocab vocab)'


def setup(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "tests" / "cases-files" / "data", tmp_path / "data")
    os.symlink("loop.json", tmp_path / "loop.json")
    os.symlink("loop.safetensors", tmp_path / "loop.safetensors")
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "pipes").mkdir()
    os.mkfifo(tmp_path / "pipes" / "a.txt")
    (tmp_path / "zeros").mkdir()
    os.symlink("/dev/zero", tmp_path / "zeros" / "a.txt")
    import numpy as np
    np.save(tmp_path / "one.npy", np.zeros(64, np.int32))
    (tmp_path / "notes.npz").write_text("some notes, not arrays\n")
    (tmp_path / "raw.npz").write_bytes(bytes(range(1, 200)))
    (tmp_path / "hi.jsonl").write_text('{"prompt": "w0 w1 w22 w3"}\n' * 4)
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"prompt": [[1, 2, 3], [4, 5, None]]}), tmp_path / "null.parquet")
    pq.write_table(pa.table({"prompt": [[1, 2, 3], [4, 5, 99]]}), tmp_path / "ids.parquet")
    (tmp_path / "junk.parquet").write_text("junk")
    np.save(tmp_path / "two.npy", np.zeros((4, 16), np.uint16))
    np.save(tmp_path / "float.npy", np.zeros(64, np.float32))
    np.savez(tmp_path / "shape.npz", tokens=np.zeros((10, 9), np.int32), next=np.zeros((10, 8), np.int32))
    np.savez_compressed(tmp_path / "dtype.npz", tokens=np.zeros((10, 8), np.float64), next=np.zeros((10, 8), np.int32))


def samples(tok: str) -> dict:
    return {"(run :loader train": f'(run :samples (:every 1 :text [:tokens] :tokenizer "{tok}") :loader train'}


PROMPTS = {":fields (:tokens [seq] :i32 :next [seq] :i32)": ":fields (:prompt [seq] :i32)",
           "(field batch :tokens)) (field batch :next)": "(field batch :prompt)) (field batch :prompt)"}
LOOP = "is a symbolic link that leads back to itself (a loop)"
#: name -> (the edits to BASE, the words both say, whether the runtime's loader says them too)
CASES = {
    "tokenizer-loop": ({'"data/tokenizer-24.json"': '"loop.json"'}, LOOP, False),
    "jsonl-loop": ({SOURCE: '(jsonl "loop.json" :tokenizer "data/tokenizer-24.json" :vocab vocab)',
                    ":fields (:tokens [seq] :i32 :next [seq] :i32)": ":fields (:prompt [seq] :i32)"}, LOOP, False),
    "tokens-loop": ({SOURCE: '(tokens "loop.json" :dtype :uint16 :seq seq)'}, LOOP, False),
    "glob-of-a-fifo": ({'"data/*.txt"': '"pipes/*.txt"'},
                       "pipes/a.txt (PATH/pipes/*.txt matches it): it is a named pipe (FIFO), not a regular file",
                       True),
    "glob-of-dev-zero": ({'"data/*.txt"': '"zeros/*.txt"'},
                         "zeros/a.txt (PATH/zeros/*.txt matches it): it is a character device, not a regular file",
                         True),
    "tokenizer-proc-self-mem": ({'"data/tokenizer-24.json"': '"/proc/self/mem"'}, "/proc/self/mem", True),
    "fewer-windows-than-a-batch": ({":batch 2": ":batch 8"}, "has 3 windows, fewer than one batch of 8", True),
    "samples-tokenizer-fifo": (samples("fifo.json"), "`fifo.json` is a named pipe (FIFO), not a regular file", False),
    "samples-tokenizer-dev-zero": (samples("/dev/zero"), "`/dev/zero` is a character device, not a regular file",
                                   False),
    "samples-tokenizer-missing": (samples("missing.json"), "`missing.json` is not there", False),
    "samples-tokenizer-deep": (samples("data/tokenizer-deep.json"), "nests deeper than JSON is read here", False),
    "samples-tokenizer-loop": (samples("loop.json"), LOOP, False),
    "npz-a-npy": ({SOURCE: '(npz "one.npy")'}, "one.npy is a .npy file (one array, no field names), not an .npz", True),
    "npz-text": ({SOURCE: '(npz "notes.npz")'}, "notes.npz is a text file, not an .npz", True),
    "npz-no-zip": ({SOURCE: '(npz "raw.npz")'}, "raw.npz is not an .npz (no zip header)", True),
    "npz-record-shape": ({SOURCE: '(npz "shape.npz")'},
                         "field `tokens` has records of shape [9], the declaration says [8]", True),
    "npz-dtype": ({SOURCE: '(npz "dtype.npz")'}, "field `tokens` has dtype float64, the declaration says i32", True),
    "npy-2-d": ({SOURCE: '(tokens "two.npy" :seq seq)'},
                "two.npy` holds an array of shape [4 16]; a token stream is one-dimensional", False),
    "npy-float": ({SOURCE: '(tokens "float.npy" :seq seq)'}, "float.npy` holds float32 values; a token file holds "
                  "little-endian integer ids", False),
    "jsonl-text-outside-vocab": ({"(def vocab 32)": "(def vocab 16)",
                                  SOURCE: '(jsonl "hi.jsonl" :tokenizer "data/tokenizer-24.json" :vocab vocab)',
                                  ":fields (:tokens [seq] :i32 :next [seq] :i32)": ":fields (:prompt [seq] :i32)",
                                  "(field batch :tokens)) (field batch :next)": "(field batch :prompt)) (field batch :prompt)"},
                                 "hi.jsonl:1:12: `prompt` has token 23, outside `:vocab 16`", True),
    "parquet-null-id": (PROMPTS | {SOURCE: '(parquet "null.parquet" :vocab vocab)'},
                        "row 2 of column `prompt`: `prompt` is a list holding null", True),
    "parquet-id-outside-vocab": (PROMPTS | {SOURCE: '(parquet "ids.parquet" :vocab vocab)'},
                                 "row 2 of column `prompt`: `prompt` has token 99, outside `:vocab 32`", True),
    "parquet-not-parquet": (PROMPTS | {SOURCE: '(parquet "junk.parquet" :vocab vocab)'},
                            "junk.parquet is not a readable parquet file", True),
    "pretrained-loop": ({"(defmodel lm\n": '(defmodel lm\n  :pretrained "loop.safetensors"\n'},
                        "cannot use `loop.safetensors`: Too many levels of symbolic links", False),
}


def text_of(name: str) -> str:
    text = BASE
    for old, new in CASES[name][0].items():
        assert old in text, (name, old)
        text = text.replace(old, new, 1)
    return text


def words(name: str, tmp_path: Path) -> str:
    return CASES[name][1].replace("PATH", str(tmp_path))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_checker_with_the_files_read_refuses_it(tmp_path, name):
    setup(tmp_path)
    text = text_of(name)
    (tmp_path / "run.sx").write_text(text)
    for read_files in (True, "local") if name in ("pretrained-loop", "tokenizer-loop", "samples-tokenizer-loop",
                                                  "samples-tokenizer-fifo") else (True,):
        got = [d for d in analyze(text, str(tmp_path / "run.sx"), read_files=read_files).diagnostics
               if d.is_error]
        assert got and got[0].code in ("E-LOADER-001", "E-MODEL-003"), (read_files, got)
        assert words(name, tmp_path) in got[0].message, (read_files, got[0].message)


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n][2]))
def test_the_runtime_opening_the_loader_refuses_it_in_the_same_words(tmp_path, name):
    """The checker's file checks left out (`read_files` False), the run's own opening of the loader
    (data/loaders.Loader) refuses the same input, saying the same."""
    from sexpgpu_runtime.data.loaders import Loader
    from sexpgpu_runtime.errors import LoaderError
    setup(tmp_path)
    res = analyze(text_of(name), str(tmp_path / "run.sx"), read_files=False)
    assert res.program is not None, res.diagnostics
    with pytest.raises(LoaderError) as e:
        Loader(res.program.loaders["train"], 0)
    assert words(name, tmp_path) in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_lint_read_files_and_run_refuse_it_alike(tmp_path, name):
    setup(tmp_path)
    (tmp_path / "run.sx").write_text(text_of(name))
    lint = subprocess.run([sexpgpu_program(), "lint", "--read-files", "run.sx"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    run = subprocess.run([sexpgpu_program(), "run", "run.sx", "--run-dir", "r", "--steps", "1"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert lint.returncode != 0 and words(name, tmp_path) in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    assert run.returncode != 0 and words(name, tmp_path) in run.stdout + run.stderr, run.stdout + run.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists()
