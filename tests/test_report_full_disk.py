"""A full disk while a run logs: one RunError, and metrics.jsonl keeps only
whole rows (a row that could be written only in part is cut off again). ENOSPC is simulated
by making `os.write` write part of a row and then fail, as a filling disk does."""
from __future__ import annotations

import errno
import json
import os

import pytest

pytest.importorskip("jax")

from sexpgpu_runtime.run import report  # noqa: E402
from sexpgpu_runtime import RunError  # noqa: E402


def full_after(monkeypatch, budget: int):
    """Let `budget` more bytes reach the disk, then fail every write with ENOSPC."""
    real = os.write
    left = [budget]

    def write(fd, data):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, bytes(data[:left[0]]))
        left[0] -= n
        return n
    monkeypatch.setattr(report.os, "write", write)


def test_a_full_disk_is_one_run_error_and_no_torn_row(tmp_path, monkeypatch):
    rep = report.Reporter(tmp_path, 10, progress=False, quiet=True, name="tiny")
    rep.log({"step": 1, "loss": 2.5}, 1)
    full_after(monkeypatch, 10)          # the next row gets 10 of its bytes to disk, then ENOSPC
    with pytest.raises(RunError) as e:
        rep.log({"step": 2, "loss": 2.25}, 2)
    assert str(e.value) == f"cannot write the metrics of step 2 in {tmp_path}: No space left on device"
    rep.close()                           # nothing is left buffered: closing raises nothing
    text = (tmp_path / "metrics.jsonl").read_text()
    assert text == json.dumps({"step": 1, "loss": 2.5}) + "\n"


def test_rows_written_in_pieces_are_whole(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(report.os, "write", lambda fd, data: real(fd, bytes(data[:3])))   # short writes
    rows = report.RowFile(tmp_path / "m.jsonl", append=False)
    for i in range(3):
        rows.write_row(json.dumps({"step": i}) + "\n")
    rows.close()
    assert [json.loads(line)["step"] for line in (tmp_path / "m.jsonl").read_text().splitlines()] == [0, 1, 2]


def test_a_resumed_file_appends_after_its_whole_rows(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"st')       # a torn row from an older version's crash
    report.keep_rows_up_to(path, 5)
    rows = report.RowFile(path, append=True)
    full_after(monkeypatch, 4)
    with pytest.raises(OSError):
        rows.write_row('{"step": 3}\n')
    rows.close()
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
