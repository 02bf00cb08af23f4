"""Security: checking a run file reads nothing but the document and runs nothing from it;
loading parameters, data and checkpoints never unpickles.

* `analyze` (what `sexpgpu lint` and the language server call) opens no file:
  not a `:pretrained` safetensors file, not an `npz` or `text-bytes` source.
  Only `read_files=True` (what `sexpgpu run` checks with) reads the
  `:pretrained` headers. A spy on every way Python opens a file shows it.
* `sexpgpu lint` opens the run file and nothing else.
* The server's analysis (`lsp/documents.py`) is the same `analyze`, with `read_files="local"`:
  the headers of the `:pretrained` checkpoints on its machine, and nothing else.
* A run that loads a `:pretrained` file and an `.npz` loader, saves
  checkpoints and resumes from one never calls `pickle`, and every `np.load`
  passes `allow_pickle=False`.
"""
from __future__ import annotations

import builtins
import io
import os
import pathlib
import pickle
from pathlib import Path

import pytest

from helpers import check, marked, variant
from sexpgpu_lang import analyze, analyze_file

ROOT = Path(__file__).resolve().parents[1]
PRETRAINED = ROOT / "tests" / "cases" / "clean-pretrained-teacher.sx"
NPZ = ROOT / "examples" / "sines-npz.sx"
TEXT_BYTES = ROOT / "examples" / "stdlib-bytes.sx"
MISSING_PRETRAINED = ROOT / "tests" / "cases-files" / "model-003-pretrained-unknown-file.sx"


class FileSpy:
    """Records every path opened (or listed) through builtins.open, io.open, os.open,
    io.FileIO, pathlib, os.listdir and os.scandir while installed."""

    def __init__(self, monkeypatch):
        self.opened: list[str] = []
        real_open, real_os_open, real_fileio = builtins.open, os.open, io.FileIO
        real_listdir, real_scandir = os.listdir, os.scandir

        def spy_open(file, *a, **k):
            if not isinstance(file, int):   # a descriptor: its path was recorded when os.open made it
                self.opened.append(str(file))
            return real_open(file, *a, **k)

        def spy_os_open(path, *a, **k):
            self.opened.append(str(path))
            return real_os_open(path, *a, **k)

        class SpyFileIO(real_fileio):
            def __init__(inner, file, *a, **k):
                if not isinstance(file, int):
                    self.opened.append(str(file))
                super().__init__(file, *a, **k)

        def spy_listdir(path="."):
            self.opened.append(str(path))
            return real_listdir(path)

        def spy_scandir(path="."):
            self.opened.append(str(path))
            return real_scandir(path)

        monkeypatch.setattr(builtins, "open", spy_open)
        monkeypatch.setattr(io, "open", spy_open)
        monkeypatch.setattr(os, "open", spy_os_open)
        monkeypatch.setattr(io, "FileIO", SpyFileIO)
        monkeypatch.setattr(os, "listdir", spy_listdir)
        monkeypatch.setattr(os, "scandir", spy_scandir)
        monkeypatch.setattr(pathlib.Path, "open", lambda p, *a, **k: spy_open(p, *a, **k))


@pytest.fixture
def spy(monkeypatch):
    from sexpgpu_lang.files import checkpoint_files
    for path in (PRETRAINED, NPZ, TEXT_BYTES):   # the grammar and the standard library load once, before the spy
        analyze_file(str(path))
    checkpoint_files.forget()   # no header kept from an earlier test's read
    return FileSpy(monkeypatch)


@pytest.mark.parametrize("path", [PRETRAINED, NPZ, TEXT_BYTES, MISSING_PRETRAINED], ids=lambda p: p.name)
def test_analyze_opens_no_file(spy, path):
    text = path.read_text(encoding="utf-8")
    spy.opened.clear()
    res = analyze(text, str(path))
    assert spy.opened == []
    assert not res.has_errors, [d.message for d in res.diagnostics]


def test_analyze_file_opens_only_the_document(spy):
    analyze_file(str(PRETRAINED))
    assert spy.opened == [str(PRETRAINED)]


def test_read_files_reads_the_pretrained_header_and_nothing_else(spy):
    # the spy sees what it must: with read_files=True (as `sexpgpu run` checks) the header is read
    text = PRETRAINED.read_text(encoding="utf-8")
    spy.opened.clear()
    res = analyze(text, str(PRETRAINED), read_files=True)
    assert [Path(p).name for p in spy.opened] == ["teacher.safetensors"]
    assert not res.has_errors
    missing = analyze(MISSING_PRETRAINED.read_text(encoding="utf-8"), str(MISSING_PRETRAINED), read_files=True)
    assert [d.code for d in missing.diagnostics if d.is_error] == ["E-MODEL-003"]


def test_lint_opens_only_the_run_file(spy):
    from typer.testing import CliRunner

    from sexpgpu_cli.main import app
    for path in (PRETRAINED, NPZ, MISSING_PRETRAINED):
        spy.opened.clear()
        result = CliRunner().invoke(app, ["lint", str(path)])
        assert result.exit_code == 0, result.output
        assert [p for p in spy.opened if p != str(path)] == [], spy.opened


def test_lint_read_files_reports_model_003(spy):
    from typer.testing import CliRunner

    from sexpgpu_cli.main import app
    result = CliRunner().invoke(app, ["lint", "--read-files", str(MISSING_PRETRAINED)])
    assert result.exit_code == 1 and "E-MODEL-003" in result.output


def test_the_server_analyzes_without_opening_files(spy):
    from lsprotocol import types

    from lsp.documents import DocumentStore, analyze_document
    store = DocumentStore()
    doc = store.open(types.TextDocumentItem(uri=PRETRAINED.as_uri(), language_id="sexpgpu", version=1,
                                            text=MISSING_PRETRAINED.read_text(encoding="utf-8")))
    spy.opened.clear()
    got = analyze_document(doc)
    assert spy.opened == []
    assert not got.result.has_errors


def test_the_server_reads_a_local_pretrained_header_and_nothing_else(spy):
    from lsprotocol import types

    from lsp.documents import DocumentStore, analyze_document
    store = DocumentStore()
    for path in (PRETRAINED, NPZ):
        doc = store.open(types.TextDocumentItem(uri=path.as_uri(), language_id="sexpgpu", version=1,
                                                text=path.read_text(encoding="utf-8")))
        spy.opened.clear()
        got = analyze_document(doc)
        assert [Path(p).name for p in spy.opened] == (["teacher.safetensors"] if path == PRETRAINED else [])
        assert not got.result.has_errors


def test_checking_runs_no_code_from_the_file(spy, monkeypatch):
    # the language has no eval, import or shell form; names that look like them are unbound names
    import subprocess
    ran = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(os, "system", lambda *a, **k: ran.append(a))
    text = variant("(def dim 64)", '(def dim 64)\n(def boom (eval "__import__(\'os\').system(\'touch /tmp/x\')"))'
                   '\n(def sh (system "touch /tmp/x"))')
    text = marked(marked(text, "eval", "E-NAME-001"), "system", "E-NAME-001", within="(system")
    spy.opened.clear()
    check(text, "evil.sx")
    assert ran == [] and spy.opened == []


# --------------------------------------------------------------------------- never unpickle


@pytest.mark.slow
def test_pretrained_npz_and_checkpoints_never_unpickle(tmp_path, monkeypatch):
    import numpy as np

    from sexpgpu_runtime import RunOptions, train

    def refuse(*a, **k):
        raise AssertionError("unpickled")

    for mod in (pickle, __import__("_pickle")):
        monkeypatch.setattr(mod, "load", refuse)
        monkeypatch.setattr(mod, "loads", refuse)
        monkeypatch.setattr(mod, "Unpickler", refuse)
    loads = []
    real_np_load = np.load

    def np_load(*a, **k):
        loads.append(k.get("allow_pickle", "default"))
        return real_np_load(*a, **k)

    monkeypatch.setattr(np, "load", np_load)

    def program(src: Path, text: str):
        copy = src.parent / f".security-{src.name}"   # beside the original, so relative data paths hold
        res = analyze(text, str(copy), read_files=True)
        assert res.program is not None, [d.message for d in res.diagnostics]
        return res.program

    ckpt = ":checkpoint (:every 2 :keep 2)"
    teacher = PRETRAINED.read_text(encoding="utf-8").replace(":log (:every 50)", f":log (:every 1)\n     {ckpt}")
    assert ckpt in teacher
    sines = NPZ.read_text(encoding="utf-8").replace(":log (:every 50)", f":log (:every 1)\n     {ckpt}")
    assert ckpt in sines
    for name, prog in (("teacher", program(PRETRAINED, teacher)), ("sines", program(NPZ, sines))):
        d = tmp_path / name
        first = train(prog, RunOptions(steps=4, run_dir=d, quiet=True))
        assert first.steps == 4
        resumed = train(prog, RunOptions(steps=6, run_dir=d, quiet=True, resume=True))
        assert resumed.start >= 2 and resumed.steps == 6
    assert loads and all(v is False for v in loads), loads
