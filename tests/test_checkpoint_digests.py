"""Corrupt checkpoints: a CRC-32 per array is written with each checkpoint
and checked on restore; a checkpoint that fails (bytes overwritten, a data file cut short)
is skipped, saying so, and the newest that verifies is resumed, bit-exact; a stray empty
step directory does not block resuming; a failed read prints no asyncio task noise."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("orbax.checkpoint")

from helpers import run, variant  # noqa: E402
from sexpgpu_runtime.run.checkpoint_meta import digests, first_difference  # noqa: E402
from sexpgpu_runtime import RunError, RunFinished  # noqa: E402
from sexpgpu_runtime.weights.params import flatten  # noqa: E402

pytestmark = pytest.mark.slow


TEXT = variant(":log (:every 50))", ":log (:every 1)\n     :checkpoint (:every 5 :keep 3))")
STEPS = 15
LONGER = 17   # the resumes train on to here: a resume to STEPS would find the run finished, and change nothing


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A 15-step run with checkpoints at steps 5, 10 and 15, and the parameters of the same run trained on
    to step 17 without a stop (what each resume below must give, bit for bit)."""
    d = tmp_path_factory.mktemp("base")
    first = run(TEXT, d, STEPS)
    return first, d, run(TEXT, tmp_path_factory.mktemp("longer"), LONGER).trainable


def copy_of(base, tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(base[1], d)
    return d


def data_files(step_dir: Path) -> list[Path]:
    """The array data files of a checkpoint (tensorstore's OCDBT `d/` files)."""
    out = [p for p in step_dir.rglob("*") if p.is_file() and p.parent.name == "d"]
    assert out, sorted(str(p) for p in step_dir.rglob("*"))
    return out


def same(a, b):
    fa, fb = flatten(a), flatten(b)
    return fa.keys() == fb.keys() and all(np.array_equal(np.asarray(fa[k]), np.asarray(fb[k])) for k in fa)


def resumed_from(d: Path, capfd, base) -> tuple[int, str]:
    res = run(TEXT, d, LONGER, resume=True)
    err = capfd.readouterr().err
    assert same(res.trainable, base[2])   # trained again from the fallback: bit-exact
    return res.start, err


def test_every_array_has_a_digest_in_the_meta(base):
    metas = [p for p in (base[1] / "checkpoints" / "15" / "meta").rglob("*") if p.is_file()]
    sums = json.loads(metas[0].read_text())["digests"]
    assert sums and all(isinstance(v, int) for v in sums.values())
    assert any("trainable" in k for k in sums)


def test_overwritten_bytes_fall_back_to_the_newest_checkpoint_that_verifies(base, tmp_path, capfd):
    d = copy_of(base, tmp_path)
    for f in data_files(d / "checkpoints" / "15"):
        data = bytearray(f.read_bytes())
        mid = len(data) // 2
        data[mid:mid + 4] = bytes(255 - b for b in data[mid:mid + 4])
        f.write_bytes(bytes(data))
    with pytest.raises(RunFinished):      # the run had finished: its resume reads no array, moves nothing aside
        run(TEXT, d, STEPS, resume=True)
    assert (d / "checkpoints" / "15").is_dir() and not (d / "checkpoints" / "15.corrupt").exists()
    start, err = resumed_from(d, capfd, base)
    assert start == 10
    assert "checkpoint step 15 in" in err and "skipping it" in err
    assert "resuming from checkpoint step 10, the newest that verifies" in err


def test_a_truncated_data_file_falls_back_without_task_noise(base, tmp_path, capfd):
    d = copy_of(base, tmp_path)
    for f in data_files(d / "checkpoints" / "15"):
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
    start, err = resumed_from(d, capfd, base)
    assert start == 10
    assert "Task exception was never retrieved" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 2, err     # the skip and the resume, one line each


def test_a_stray_empty_step_directory_does_not_block_resume(base, tmp_path, capfd):
    d = copy_of(base, tmp_path)
    shutil.rmtree(d / "checkpoints" / "15")
    (d / "checkpoints" / "20").mkdir()
    start, _ = resumed_from(d, capfd, base)
    assert start == 10
    assert not (d / "checkpoints" / "20").exists()


def test_when_nothing_verifies_the_error_lists_why(base, tmp_path, capfd):
    d = copy_of(base, tmp_path)
    for step in ("5", "10", "15"):
        for f in data_files(d / "checkpoints" / step):
            f.write_bytes(b"")
    with pytest.raises(RunError, match=r"no checkpoint in .* verifies: .*step 15.*step 10.*step 5"):
        run(TEXT, d, LONGER, resume=True)


def test_first_difference_names_the_array():
    tree = {"w": np.arange(6, dtype=np.float32), "b": np.zeros(3, np.float32)}
    saved = digests(tree)
    assert first_difference(saved, tree) is None
    tree["w"][2] = 7.0
    assert first_difference(saved, tree) == "array ['w'] does not match the digest written with it"
