"""Files that never end, JSON that nests forever, a shard outside its checkpoint (issue 35, items 2, 3, 4, 8).

Every file a run file names is read through sexpgpu_lang/files/bounded_read.py: only a regular file (a
FIFO, /dev/zero or a directory is one line saying what the path is, never a wait), with a bound
where the format has one (a tokenizer.json, a safetensors header or index, a jsonl line). The
FIFO and device cases run in a subprocess with a timeout, so that a regression fails the test
instead of hanging the suite.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sexpgpu_lang import analyze
from sexpgpu_lang.files import bounded_read, checkpoint_files
from sexpgpu_lang.files.bounded_read import NotRegularFile, TooLarge

ROOT = Path(__file__).resolve().parents[1]
CASE = (ROOT / "tests" / "cases-files" / "warn-loader-001-tokenizer-larger-than-vocab.sx").read_text()


def bounded(code: str, timeout: float = 120) -> str:
    """Run `code` (Python) in a fresh interpreter from the repository root; its stdout. Fails
    (rather than hangs) when it takes longer than `timeout` seconds."""
    try:
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                           timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s: a read waited on a special file")
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def specials(tmp_path: Path) -> dict[str, str]:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    (tmp_path / "adir.json").mkdir()
    return {"fifo": str(fifo), "zero": "/dev/zero", "dir": str(tmp_path / "adir.json")}


WHAT = {"fifo": "a named pipe (FIFO)", "zero": "a character device", "dir": "a directory"}


# -- the primitives ---------------------------------------------------------------------------------

def test_open_regular_refuses_a_fifo_without_waiting_and_a_device_and_a_directory(tmp_path):
    paths = specials(tmp_path)
    out = bounded(f"""
        from sexpgpu_lang.files.bounded_read import open_regular, NotRegularFile
        for p in {list(paths.values())!r}:
            try:
                open_regular(p)
                print("opened", p)
            except NotRegularFile as e:
                print(e.what, "|", e.strerror)
        """, timeout=60)
    assert out.splitlines() == [f"{WHAT[k]} | it is {WHAT[k]}, not a regular file" for k in paths]
    (tmp_path / "ok.txt").write_bytes(b"abc")
    with bounded_read.open_regular(str(tmp_path / "ok.txt")) as fh:
        assert fh.read() == b"abc"


def test_read_bounded_names_the_limit_and_reads_no_further(tmp_path):
    f = tmp_path / "big.json"
    f.write_bytes(b" " * 2000)
    with pytest.raises(TooLarge) as e:
        bounded_read.read_bounded(str(f), 1000, "a tokenizer.json")
    assert str(e.value) == "it is 2,000 bytes, more than the 1,000 bytes a tokenizer.json may be"
    assert bounded_read.read_bounded(str(f), 2000, "x") == b" " * 2000


def test_a_long_line_is_refused_by_its_number_without_reading_it_whole(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_bytes(b'{"a": 1}\n' + b"x" * 5000 + b"\n{}\n")
    with open(f, "rb") as fh:
        lines = bounded_read.read_lines_bounded(fh, 1000)
        assert next(lines) == b'{"a": 1}\n'
        with pytest.raises(TooLarge) as e:
            next(lines)
    assert e.value.line == 2 and "line 2 is longer than 1,000 bytes" in str(e.value)


def test_json_nesting_and_long_integers_are_value_errors_not_recursion():
    with pytest.raises(bounded_read.JsonTooDeep):
        bounded_read.loads_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(bounded_read.JsonNumberTooLong):
        bounded_read.loads_json('{"a": ' + "7" * 5001 + "}")
    assert bounded_read.loads_json('{"a": [1, 2]}') == {"a": [1, 2]}


# -- the front end: lint --read-files and the language server's checks -----------------------------

def test_a_special_tokenizer_is_one_diagnostic_saying_what_it_is(tmp_path):
    paths = specials(tmp_path)
    out = bounded(f"""
        import json
        from sexpgpu_lang import analyze
        text = {CASE!r}
        for p in {list(paths.values())!r}:
            for read_files in (True, "local"):
                got = analyze(text.replace("data/tokenizer-24.json", p), {str(tmp_path / 'run.sx')!r},
                              read_files=read_files).diagnostics
                print(json.dumps([(d.code, d.message) for d in got]))
        """, timeout=60)
    lines = [json.loads(x) for x in out.splitlines()]
    for k, got in zip([k for k in paths for _ in (0, 1)], lines):
        assert got == [["E-LOADER-001", f"`text-tokens`'s tokenizer `{paths[k]}` is {WHAT[k]}, not a regular "
                        "file; nothing is read from it"]]


def test_a_special_token_file_or_prompt_file_is_a_diagnostic_too(tmp_path):
    fifo = tmp_path / "train.bin"
    os.mkfifo(fifo)
    text = CASE.replace('(text-tokens "data/*.txt" :tokenizer "data/tokenizer-24.json" :seq seq :vocab vocab)',
                        '(tokens "train.bin" :dtype :uint16 :seq seq)')
    out = bounded(f"""
        from sexpgpu_lang import analyze
        for t in ({text!r}, {text.replace('(tokens "train.bin" :dtype :uint16 :seq seq)', '(jsonl "/dev/zero")')!r}):
            print([(d.code, d.message) for d in analyze(t, {str(tmp_path / 'run.sx')!r}, read_files="local").diagnostics
                   if d.code == "E-LOADER-001"])
        """, timeout=60)
    first, second = out.splitlines()
    assert "`tokens`'s file `train.bin` is a named pipe (FIFO), not a regular file" in first
    assert "`jsonl`'s file `/dev/zero` is a character device, not a regular file" in second


def test_without_the_files_read_nothing_is_looked_at(tmp_path):
    (tmp_path / "pipe.json").mkdir()   # (would be E-LOADER-001 with the files read)
    text = CASE.replace("data/tokenizer-24.json", str(tmp_path / "pipe.json"))
    assert [d.code for d in analyze(text, str(tmp_path / "run.sx")).diagnostics] == []


def test_a_tokenizer_past_its_bound_is_refused_naming_the_bound(tmp_path, monkeypatch):
    from sexpgpu_lang.check import source_files
    big = tmp_path / "tok.json"
    big.write_text(json.dumps({"model": {"vocab": {"a": 0}}, "pad": " " * 5000}))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("ab")   # (the case's glob matches a file)
    monkeypatch.setattr(source_files, "TOKENIZER_JSON_LIMIT", 4096)
    source_files.vocab_size.cache_clear()
    got = analyze(CASE.replace("data/tokenizer-24.json", str(big)), str(tmp_path / "run.sx"), read_files=True).diagnostics
    source_files.vocab_size.cache_clear()
    assert [(d.code, d.message) for d in got] == [
        ("E-LOADER-001", f"tokenizer `{big}` cannot be read: it is 5,0{len(big.read_bytes()) - 5000:02d} bytes, more "
                         "than the 4,096 bytes a tokenizer.json may be")]


def _safetensors(path: Path, header: bytes) -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def test_a_safetensors_header_that_nests_forever_or_claims_2_60_bytes_is_one_line(tmp_path):
    from sexpgpu_lang.files.safetensors_header import HeaderError, read_header
    _safetensors(tmp_path / "deep.safetensors", b'{"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")
    with pytest.raises(HeaderError, match="its header nests deeper than JSON is read here"):
        read_header(str(tmp_path / "deep.safetensors"))
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", 1 << 60) + b"{}")
    with pytest.raises(HeaderError, match=r"header length of 1,152,921,504,606,846,976 bytes, more than safetensors' "
                                          r"limit of 95.4 MiB"):
        read_header(str(tmp_path / "huge.safetensors"))


# -- item 8: an index's shards stay inside the checkpoint's directory ----------------------------------

def _index(directory: Path, weight_map: dict) -> Path:
    from safetensors.numpy import save_file
    directory.mkdir(parents=True, exist_ok=True)
    save_file({"w": np.zeros((2, 2), np.float32)}, str(directory / "inside.safetensors"))
    index = directory / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    return index


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink", "passwd"])
def test_an_index_naming_a_shard_outside_its_directory_is_refused_naming_the_entry(tmp_path, where):
    from safetensors.numpy import save_file
    save_file({"w": np.zeros((2, 2), np.float32)}, str(tmp_path / "elsewhere.safetensors"))
    ckpt = tmp_path / "ckpt"
    shard = {"absolute": str(tmp_path / "elsewhere.safetensors"), "dotdot": "../elsewhere.safetensors",
             "symlink": "link.safetensors", "passwd": "../../../../../../../../etc/passwd"}[where]
    index = _index(ckpt, {"w": shard})
    if where == "symlink":
        (ckpt / "link.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    checkpoint_files.forget()
    with pytest.raises(checkpoint_files.SourceError) as e:
        checkpoint_files.tensors(str(index))
    msg = str(e.value)
    assert msg.startswith(f"it places tensor `w` in `{shard}`, ") and "outside the checkpoint's directory" in msg
    assert e.value.file == str(index)


def test_a_shard_inside_its_directory_or_below_it_is_read(tmp_path):
    ckpt = tmp_path / "ckpt"
    index = _index(ckpt, {"w": "inside.safetensors"})
    (ckpt / "sub").mkdir()
    os.symlink(ckpt / "inside.safetensors", ckpt / "sub" / "again.safetensors")
    checkpoint_files.forget()
    assert checkpoint_files.tensors(str(index)) == {"w": ((2, 2), "f32", str(ckpt / "inside.safetensors"))}
    index.write_text(json.dumps({"weight_map": {"w": "sub/again.safetensors"}}))
    checkpoint_files.forget()
    assert checkpoint_files.tensors(str(index))["w"][:2] == ((2, 2), "f32")


def test_lint_read_files_refuses_the_passwd_index_at_the_pretrained_form(tmp_path):
    from sexpgpu_lang.check.pretrained import LOCAL
    _index(tmp_path / "hf", {"model.embed.weight": "../../../../../../../etc/passwd"})
    text = (ROOT / "tests" / "test_lsp_pretrained.py").read_text().split('RUN = """', 1)[1].split('"""', 1)[0]
    text = text.replace("PATH", "hf")
    for read_files in (True, LOCAL):
        checkpoint_files.forget()
        got = analyze(text, str(tmp_path / "run.sx"), read_files=read_files).diagnostics
        assert [d.code for d in got] == ["E-MODEL-003"]
        assert "`hf/model.safetensors.index.json` places tensor `model.embed.weight` in `../../../../../../../etc/passwd`" in got[0].message
        assert "outside the checkpoint's directory" in got[0].message


# -- the runtime's readers ------------------------------------------------------------------------------

RUNTIME = """
    import json, sys
    from sexpgpu_lang.ir import LoaderIR
    from sexpgpu_lang.source import Span
    from sexpgpu_runtime.data.loaders import Loader, LoaderError
    for source, fields in json.loads(sys.argv[1] if len(sys.argv) > 1 else CASES):
        source = (source[0], source[1])
        fields = tuple((n, tuple(s), d) for n, s, d in fields)
        try:
            Loader(LoaderIR("data", source, 1, fields, Span(0, 0), BASE), 0)
            print("read")
        except LoaderError as e:
            print(str(e).replace("\\n", " | "))
    """


def runtime_errors(tmp_path: Path, cases: list) -> list[str]:
    code = textwrap.dedent(RUNTIME).replace("CASES", repr(json.dumps(cases))).replace("BASE", repr(str(tmp_path)))
    return bounded(code, timeout=180).splitlines()


TOKENS = [["tokens"], ["tokens", [8], "i32"]]


def test_the_runtime_refuses_special_files_in_one_line_saying_what_they_are(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "adir").mkdir()
    tok = [["tokens", [8], "i32"]]
    rows = [["prompt", [4], "i32"]]
    cases = []
    for p in (str(fifo), "/dev/zero", str(tmp_path / "adir")):
        cases += [[["tokens", {"path": p, "dtype": "uint16", "seq": 8}], tok],
                  [["jsonl", {"path": p}], rows],
                  [["parquet", {"path": p}], rows],
                  [["npz", {"path": p}], rows]]
    (tmp_path / "a.txt").write_text("some text " * 20)
    for p in (str(fifo), "/dev/zero"):
        cases.append([["text-tokens", {"glob": str(tmp_path / "a.txt"), "tokenizer": p, "seq": 8}], tok])
    got = runtime_errors(tmp_path, cases)
    assert len(got) == len(cases)
    for line, case in zip(got, cases):
        path = case[0][1].get("tokenizer") or case[0][1]["path"]
        what = WHAT["fifo" if path == str(fifo) else "zero" if path == "/dev/zero" else "dir"]
        assert line.startswith("loader `data`") and path in line and f"it is {what}, not a regular file" in line, (case, line)


def test_the_runtime_bad_json_rows_are_one_line_naming_the_file_and_row(tmp_path):
    from sexpgpu_cli.tokenizer import train_bpe
    corpus = tmp_path / "c.txt"
    corpus.write_text("What is two plus two? Four.\n" * 30)
    train_bpe([str(corpus)], 280, str(tmp_path / "tok.json"))
    good = '{"prompt": [1, 2]}\n'
    (tmp_path / "deep.jsonl").write_text(good + '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (tmp_path / "digits.jsonl").write_text(good + good + '{"prompt": [1], "x": ' + "9" * 5001 + "}\n")
    (tmp_path / "surrogate.jsonl").write_text('{"prompt": "ab"}\n{"prompt": "a\\ud800b"}\n')
    (tmp_path / "long.jsonl").write_bytes(good.encode() + b'{"prompt": "' + b"x" * (65 << 20) + b'"}\n')
    (tmp_path / "deep-tok.json").write_text("[" * 100_000 + "]" * 100_000)
    header = b"{'descr': '<u2', 'fortran_order': False, 'shape': (100,"   # the `(` never closed
    header += b" " * (63 - len(header)) + b"\n"
    (tmp_path / "junk.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 200)
    rows = [["prompt", [4], "i32"]]
    got = runtime_errors(tmp_path, [
        [["jsonl", {"path": "deep.jsonl"}], rows],
        [["jsonl", {"path": "digits.jsonl"}], rows],
        [["jsonl", {"path": "surrogate.jsonl", "tokenizer": "tok.json"}], rows],
        [["jsonl", {"path": "long.jsonl"}], rows],
        [["text-tokens", {"glob": str(corpus), "tokenizer": "deep-tok.json", "seq": 4}], [["tokens", [4], "i32"]]],
        [["tokens", {"path": "junk.npy", "seq": 4}], [["tokens", [4], "i32"]]],
    ])
    deep, digits, surrogate, long, deep_tok, npy = got
    assert deep.startswith(f"loader `data`: {tmp_path}/deep.jsonl:2: the row nests deeper than JSON is read here")
    assert digits.startswith(f"loader `data`: {tmp_path}/digits.jsonl:3: the row holds an integer of more digits")
    assert surrogate.startswith(f"loader `data`: {tmp_path}/surrogate.jsonl:2:12: `prompt` holds a lone surrogate "
                                "(\\ud800 at character 2)")
    assert long.startswith(f"loader `data`: {tmp_path}/long.jsonl:2: the line is longer than 64.0 MiB")
    assert f"deep-tok.json is not a Hugging Face tokenizer.json (it nests deeper" in deep_tok
    assert f"junk.npy is a .npy file whose header numpy cannot read (" in npy


@pytest.mark.slow
def test_lint_and_run_of_a_fifo_or_dev_zero_run_file_are_one_line(tmp_path):
    fifo = tmp_path / "run.sx"
    os.mkfifo(fifo)
    exe = str(Path(sys.executable).with_name("sexpgpu"))
    for args in (["lint", str(fifo)], ["lint", "/dev/zero"], ["run", str(fifo), "--run-dir", str(tmp_path / "out")]):
        try:
            r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`sexpgpu {' '.join(args)}` waited on a special file")
        what = "a character device" if "/dev/zero" in args else "a named pipe (FIFO)"
        assert r.returncode == 2 and r.stderr.strip() == f"sexpgpu: error: cannot read {args[1]}: it is {what}, not a regular file"
        assert not (tmp_path / "out").exists()
