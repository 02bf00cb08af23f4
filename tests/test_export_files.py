"""An export is finished or says so, and never removes a file it did not write (weights/export_files.py).

The fast tier drives `write_export` and the checks around it directly: an
earlier export replaced file by file from its manifest (or, written
without one, from its index), the user's files left and named in one
line, a cut export's manifest saying not complete and its `.tmp` files
cleaned by the next export, a directory holding only a cut export taken up
again (run/options.py), and a finished run whose export is missing with
no checkpoint to write it from refused in one line (run/resume.py). The
slow tier kills real `sexpgpu run` processes with SIGKILL while they
export and resumes them.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from helpers import sexpgpu_program
from sexpgpu_runtime import OptionError, RunError, RunFinished, RunOptions, check_options
from sexpgpu_runtime.run.resume import export_written, refuse_finished
from sexpgpu_runtime.weights.export_files import MANIFEST, earlier_files, is_complete, write_export

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hf"


def text_writer(text: str):
    return lambda tmp: Path(tmp).write_text(text)


def weights(value: float):
    return lambda tmp: save_file({"w": np.full((2,), value, np.float32)}, str(tmp))


def manifest(d: Path) -> dict:
    return json.loads((d / MANIFEST).read_text())


def test_an_earlier_export_is_replaced_file_by_file_and_the_user_s_files_are_left_and_named(tmp_path):
    d = tmp_path / "out"
    three = [(f"model-0000{k}-of-00003.safetensors", weights(k)) for k in (1, 2, 3)]
    write_export(d, three + [("model.safetensors.index.json", text_writer("{}")), ("config.json", text_writer("{}"))])
    mine = ["model-backup.safetensors", "model_v1.safetensors", "modelcard.safetensors", "README.md"]
    for name in mine:
        (d / name).write_text(f"the user's {name}")
    got = write_export(d, [("model.safetensors", weights(7.0)), ("config.json", text_writer('{"a": 1}'))], "/runs/x")
    assert sorted(os.listdir(d)) == sorted(mine + ["model.safetensors", "config.json", MANIFEST])
    for name in mine:
        assert (d / name).read_text() == f"the user's {name}"
    assert manifest(d) == {"format": 1, "complete": True, "files": ["model.safetensors", "config.json"],
                           "replaces": [], "run": "/runs/x"}
    assert got.left_line() == (f"sexpgpu: the export left 4 files in {d} that it did not write: README.md, "
                               "model-backup.safetensors, model_v1.safetensors, modelcard.safetensors (an export "
                               "replaces only the files an earlier export wrote)")
    assert is_complete(d) is not None


def test_an_export_written_without_a_manifest_is_replaced_from_the_index_it_wrote(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model_v1.safetensors"):
        weights(1.0)(d / name)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "evil": "../x"}}))
    assert earlier_files(d) == {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                "model-00002-of-00002.safetensors"}
    got = write_export(d, [("model.safetensors", weights(2.0))])
    assert sorted(os.listdir(d)) == sorted([MANIFEST, "model.safetensors", "model_v1.safetensors"])
    assert got.left == ["model_v1.safetensors"]


def test_a_cut_export_says_so_and_the_next_cleans_its_tmp_files_and_replaces_it(tmp_path):
    d = tmp_path / "out"
    write_export(d, [("model-00001-of-00002.safetensors", weights(1.0)), ("model-00002-of-00002.safetensors",
                                                                            weights(2.0))])
    (d / "mine.txt").write_text("mine")

    def cut(tmp):   # a writer that dies half-way, its temporary file left as a SIGKILL leaves it
        Path(tmp).write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_export(d, [("model.safetensors", weights(3.0)), ("tokenizer.json", cut)])
    assert is_complete(d) is None and manifest(d)["complete"] is False
    assert manifest(d)["replaces"] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert (d / ".tokenizer.json.tmp").exists()
    write_export(d, [("model.safetensors", weights(3.0)), ("tokenizer.json", text_writer("{}"))])
    assert sorted(os.listdir(d)) == sorted([MANIFEST, "model.safetensors", "tokenizer.json", "mine.txt"])
    assert is_complete(d) is not None


def test_an_export_with_a_listed_file_missing_is_not_complete_nor_written(tmp_path):
    d = tmp_path / "out"
    write_export(d, [("model.safetensors", weights(1.0)), ("tokenizer.json", text_writer("{}"))])
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1}\n')
    os.utime(metrics, ns=(0, 0))
    assert export_written(d, metrics)
    (d / "tokenizer.json").unlink()
    assert is_complete(d) is None and not export_written(d, metrics)


def test_a_directory_holding_only_a_cut_export_is_taken_up_again(tmp_path):
    """Killed before its first file was renamed, a directory holds the manifest and a `.tmp`: the
    options accept it (another directory without an export is still refused)."""
    d = tmp_path / "out"
    d.mkdir()
    (d / MANIFEST).write_text(json.dumps({"format": 1, "complete": False, "files": ["model.safetensors"],
                                          "replaces": []}))
    (d / ".model.safetensors.tmp").write_text("half")
    from sexpgpu_lang import analyze_file
    program = analyze_file(str(FIXTURES / "gpt2.sx"), read_files=True).program
    assert check_options(program, RunOptions(steps=1, run_dir=tmp_path / "run", export=d, export_names="gpt2")) is None
    (d / MANIFEST).unlink()
    with pytest.raises(OptionError, match="it is a directory that holds no export"):
        check_options(program, RunOptions(steps=1, run_dir=tmp_path / "run", export=d, export_names="gpt2"))


def test_a_finished_run_whose_export_is_missing_without_a_checkpoint_says_why_it_writes_nothing(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 3}\n')
    with pytest.raises(RunError, match=r"^cannot write the export .*out: the run in .* has trained 3 steps but saved no "
                                       r"checkpoint to export from; to get the export, start it over with "
                                       r"`--overwrite --export .*out`; nothing was changed$"):
        refuse_finished(None, metrics, tmp_path, 3, None, tmp_path / "out")
    with pytest.raises(RunFinished):   # without --export it has finished
        refuse_finished(None, metrics, tmp_path, 3, None, None)
    assert sorted(os.listdir(tmp_path)) == ["metrics.jsonl"]


# --- real processes killed while they export ---------------------------------------------------------

KILLER = """
import os, signal, sys
from pathlib import Path
import sexpgpu_runtime.weights.export_files as ef
at = sys.argv.pop(1)
real = ef.publish
def publish(tmp, path):
    if Path(path).name == at:
        os.kill(os.getpid(), signal.SIGKILL)   # the file written under its temporary name, not renamed
    real(tmp, path)
ef.publish = publish
from sexpgpu_cli.main import main
sys.exit(main())
"""


def run_file(tmp_path: Path, checkpoint: bool) -> Path:
    """The qwen2 fixture's fine-tune with a second loader reading a tokenizer (which the export copies)."""
    import shutil
    shutil.copytree(FIXTURES / "qwen2", tmp_path / "qwen2")
    shutil.copy(ROOT / "examples" / "data" / "sums-tokenizer.json", tmp_path / "tok.json")
    (tmp_path / "sums.txt").write_text("12+34=46\n" * 20)
    text = (FIXTURES / "qwen2.sx").read_text().replace("(defmodel layer", """(loader sums
  :source (text-tokens "sums.txt" :tokenizer "tok.json" :seq 9 :vocab vocab)
  :batch 2
  :fields (:tokens [9] :i32))

(defmodel layer""", 1)
    if checkpoint:
        text = text.replace("(run :loader rows", "(run :checkpoint (:every 1) :loader rows")
    (tmp_path / "run.sx").write_text(text)
    return tmp_path / "run.sx"


def sexpgpu(tmp_path: Path, *args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    base = [sys.executable, "-c", KILLER, kill_at] if kill_at else [sexpgpu_program()]
    return subprocess.run(base + ["run", str(tmp_path / "run.sx"), "--run-dir", str(tmp_path / "run"), "--export",
                                  str(tmp_path / "out"), "--export-names", "qwen2-tied", "--max-shard-size", "30KB",
                                  *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)


def exported(d: Path) -> list[str]:
    """The files a whole export of the fixture writes: its shards (those its index names) and the rest."""
    shards = set(json.loads((d / "model.safetensors.index.json").read_text())["weight_map"].values())
    return sorted(shards | {"config.json", "model.safetensors.index.json", MANIFEST, "tokenizer.json",
                            "tokenizer_config.json"})


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["tokenizer.json", "model-00001-of-00004.safetensors"])
def test_an_export_killed_while_written_is_completed_by_resume(tmp_path, kill_at):
    """SIGKILL as the tokenizer is renamed (shards, index and config.json there) or before the first shard
    is: `--resume` writes the export whole, its `.tmp` files gone, the user's file beside it left; a
    second resume then says the run finished."""
    run_file(tmp_path, checkpoint=True)
    write_export(tmp_path / "out", [("model.safetensors", weights(1.0))])   # an earlier export, and a file of the user's
    (tmp_path / "out" / "model-backup.safetensors").write_text("mine")
    cut = sexpgpu(tmp_path, kill_at=kill_at)
    assert cut.returncode == -signal.SIGKILL, cut.stderr
    assert manifest(tmp_path / "out")["complete"] is False
    assert (tmp_path / "out" / f".{kill_at}.tmp").exists()
    done = sexpgpu(tmp_path, "--resume")
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp_path / "out")) == sorted(exported(tmp_path / "out") + ["model-backup.safetensors"])
    assert (tmp_path / "out" / "model-backup.safetensors").read_text() == "mine"
    assert "that it did not write: model-backup.safetensors" in done.stderr
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == (tmp_path / "tok.json").read_bytes()
    again = sexpgpu(tmp_path, "--resume")
    assert again.returncode == 0 and "nothing was changed" in again.stderr, again.stderr


@pytest.mark.slow
def test_a_cut_export_without_a_checkpoint_cannot_be_resumed_and_says_so(tmp_path):
    run_file(tmp_path, checkpoint=False)
    cut = sexpgpu(tmp_path, kill_at="tokenizer.json")
    assert cut.returncode == -signal.SIGKILL, cut.stderr
    got = sexpgpu(tmp_path, "--resume")
    assert got.returncode != 0
    assert "saved no checkpoint to export from" in got.stderr and "--overwrite" in got.stderr, got.stderr
    redo = sexpgpu(tmp_path, "--overwrite")   # the directory holding the cut export is taken up again
    assert redo.returncode == 0, redo.stderr
    assert sorted(os.listdir(tmp_path / "out")) == exported(tmp_path / "out")
