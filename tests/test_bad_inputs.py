"""Bad inputs to `sexpgpu run`, one test per kind, through the command itself.

Each gives one clear `sexpgpu: error:` line naming the place (the loader and
file, the tensor, the run dir, the step) and exits 1 or 2, with no
traceback (`--debug` shows it), and nothing saved before is lost. The same
mistakes are tested at the `train()` level, with their exact messages, in
test_loaders.py, test_runtime.py and test_checkpoint.py; here the point is
what a user sees at the command line.
"""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import variant

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[1]
SINES = ROOT / "examples" / "sines-npz.sx"
TEACHER = ROOT / "tests" / "cases" / "clean-pretrained-teacher.sx"
SEXPGPU = str(Path(sys.executable).with_name("sexpgpu"))


def sexpgpu(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SEXPGPU, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


def one_clear_line(proc: subprocess.CompletedProcess, *names: str, codes=(1, 2)) -> str:
    """The run failed with one `sexpgpu: error:` line naming every one of `names`, no traceback."""
    assert proc.returncode in codes, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sexpgpu: error:")]
    assert len(errors) == 1, proc.stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


@pytest.fixture
def sines(tmp_path) -> Path:
    """examples/sines-npz.sx and its data, copied into tmp_path."""
    shutil.copy(SINES, tmp_path / SINES.name)
    shutil.copytree(ROOT / "examples" / "data", tmp_path / "data")
    return tmp_path / SINES.name


def save_npz(path: Path, **fields) -> None:
    with open(path, "wb") as fh:
        np.savez(fh, **fields)


GOOD = {"wave": np.zeros((256, 32), np.float32), "label": np.zeros((256,), np.int32)}


@pytest.mark.parametrize("kind", ["missing", "empty", "truncated", "corrupt", "pickled"])
def test_a_bad_data_file(sines, kind):
    data = sines.parent / "data" / "sines-train.npz"
    if kind == "missing":
        data.unlink()
    elif kind == "empty":
        data.write_bytes(b"")
    elif kind == "truncated":
        data.write_bytes(data.read_bytes()[:3000])
    elif kind == "corrupt":
        data.write_bytes(bytes(range(256)) * 40)
    else:   # an object array: loading it would unpickle, so it is refused
        save_npz(data, wave=np.array([object()] * 256, dtype=object), label=GOOD["label"])
    refused(sexpgpu("run", sines, "--steps", 2, "--run-dir", sines.parent / "run"), "train", data)


def refused(proc: subprocess.CompletedProcess, loader: str, data: Path, *names: str) -> None:
    """A bad data file refused before anything trains: where the check reads it (as `lint --read-files`
    does), one E-LOADER-001 at the loader's source naming the file (as the run file gives it) and
    `names`; where the run reads it, one error line naming the loader and the file."""
    if "error[E-LOADER-001]" in proc.stdout:
        refused_at_check(proc, "data/" + data.name, *names)
    else:
        one_clear_line(proc, f"`{loader}`", str(data), *names)


def refused_at_check(proc: subprocess.CompletedProcess, *names: str) -> str:
    """A data file the check reads (as `lint --read-files` does) refused before the run: one E-LOADER-001
    diagnostic at the loader's source naming every one of `names` (stdout), one error line, no traceback."""
    one_clear_line(proc)
    diags = [line for line in proc.stdout.splitlines() if "error[E-LOADER-001]" in line]
    assert len(diags) == 1, proc.stdout
    for name in names:
        assert name in diags[0], (name, diags[0])
    return diags[0]


@pytest.mark.parametrize("field,value", [("label", GOOD["wave"][:, 0]), ("wave", np.zeros((256, 16), np.float32))],
                         ids=["wrong-dtype", "wrong-shape"])
def test_a_field_of_the_wrong_dtype_or_shape(sines, field, value):
    data = sines.parent / "data" / "sines-train.npz"
    save_npz(data, **{**GOOD, field: value})
    refused(sexpgpu("run", sines, "--steps", 2, "--run-dir", sines.parent / "run"), "train", data, f"`{field}`")


def write_safetensors(path: Path, header: dict) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


@pytest.fixture
def teacher(tmp_path) -> Path:
    shutil.copy(TEACHER, tmp_path / TEACHER.name)
    (tmp_path / "data").mkdir()
    shutil.copy(TEACHER.parent / "data" / "teacher.safetensors", tmp_path / "data" / "teacher.safetensors")
    return tmp_path / TEACHER.name


def test_a_pretrained_file_with_a_missing_tensor(teacher):
    from safetensors.numpy import load_file, save_file
    path = teacher.parent / "data" / "teacher.safetensors"
    tensors = load_file(str(path))
    gone = sorted(tensors)[0]
    save_file({k: v for k, v in tensors.items() if k != gone}, str(path))
    proc = sexpgpu("run", teacher, "--steps", 2, "--run-dir", teacher.parent / "run")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "E-MODEL-003" in proc.stdout and f"has no tensor `{gone}`" in proc.stdout
    assert not (teacher.parent / "run").exists()   # refused before anything ran


def test_a_pretrained_file_whose_header_is_not_safetensors(teacher):
    # the header parses as JSON but a shape is not a list of integers: a diagnostic, not a crash of the checker
    write_safetensors(teacher.parent / "data" / "teacher.safetensors",
                      {"embed": {"dtype": "F32", "shape": "wide", "data_offsets": [0, 0]}})
    proc = sexpgpu("run", teacher, "--steps", 2, "--run-dir", teacher.parent / "run")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "E-MODEL-003" in proc.stdout and "not a safetensors file" in proc.stdout


def test_a_pretrained_file_cut_after_its_header(teacher):
    path = teacher.parent / "data" / "teacher.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    path.write_bytes(raw[:8 + n + 10])   # the header parses; the tensors are not all there
    proc = sexpgpu("run", teacher, "--steps", 2, "--run-dir", teacher.parent / "run")
    # Found before anything trains, by the check of the header's byte ranges against the file's size.
    one_clear_line(proc, teacher.name, "fix them before running")
    assert "error[E-MODEL-003]: cannot use `data/teacher.safetensors`: it is cut short" in proc.stdout + proc.stderr
    assert not (teacher.parent / "run").exists()


def files(d: Path) -> list:
    """Every file below `d`, with its size and modification time."""
    return sorted((p.relative_to(d), p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*") if p.is_file())


def test_a_checkpoint_of_another_run_is_refused_and_kept(sines):
    run_dir = sines.parent / "run"
    text = sines.read_text(encoding="utf-8").replace(":log (:every 50)", ":log (:every 50)\n     :checkpoint (:every 2)")
    sines.write_text(text, encoding="utf-8")
    assert sexpgpu("run", sines, "--steps", 2, "--run-dir", run_dir).returncode == 0
    before = files(run_dir)
    other = sines.with_name("other.sx")
    other.write_text(text.replace(":seed", ":seed 1 ;", 1) if ":seed" in text
                     else text.replace("(run ", "(run :seed 7 ", 1), encoding="utf-8")
    line = one_clear_line(sexpgpu("run", other, "--steps", 4, "--run-dir", run_dir, "--resume"), "cannot resume")
    assert "Traceback" not in line
    after = files(run_dir)
    assert after == before and before   # no file of the earlier run was touched


def test_an_unwritable_run_dir(sines):
    blocker = sines.parent / "notes.txt"
    blocker.write_text("keep me")
    one_clear_line(sexpgpu("run", sines, "--steps", 2, "--run-dir", blocker / "run"), str(blocker), codes=(1, 2))
    assert blocker.read_text() == "keep me"


def test_a_nan_loss_keeps_the_last_good_checkpoint(tmp_path):
    text = variant(":label (mod (+ row stride) vocab)", ":label (+ (mod (+ row stride) vocab) 1)")   # a label == vocab
    path = tmp_path / "nan.sx"
    path.write_text(text, encoding="utf-8")
    line = one_clear_line(sexpgpu("run", path, "--steps", 3, "--run-dir", tmp_path / "run"), "`loss` is nan", "step 1")
    assert line.startswith("sexpgpu: error: step 1:")


def test_debug_shows_the_traceback(sines):
    data = sines.parent / "data" / "sines-train.npz"   # fewer records than one batch: found when the run reads it
    save_npz(data, **{k: v[:3] for k, v in GOOD.items()})
    proc = sexpgpu("run", sines, "--steps", 2, "--run-dir", sines.parent / "run", "--debug")
    assert proc.returncode == 1   # a data file not as declared, found before anything trained
    assert "Traceback (most recent call last)" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("sexpgpu: error: loader `train`")
