"""The run dir's row files read back by `sexpgpu samples` and `sexpgpu plot` (sexpgpu_cli/row_files.py):
a FIFO or a device is refused from its mode (never waited on, never read without end), a line nested
past what JSON is read to is a corrupt row naming FILE:LINE, a torn last line after good rows is
skipped."""
from __future__ import annotations

import os

import pytest

from sexpgpu_cli.plot import PlotError, read_rows
from sexpgpu_cli.samples import SamplesError, read_samples

ROW = '{"step": 1, "pass": "train", "row": 0, "fields": {"answer": "1 2"}}\n'


@pytest.mark.parametrize("read, error", [(read_samples, SamplesError), (read_rows, PlotError)])
def test_a_fifo_or_dev_zero_is_refused_saying_what_it_is(tmp_path, read, error):
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(error, match="named pipe"):
        read(fifo)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    with pytest.raises(error, match="character device"):
        read(zero)


def test_a_row_nested_too_deep_is_a_corrupt_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(ROW + '{"step": 2, "pass": "train", "row": 0, "fields": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(SamplesError, match=r"samples.jsonl:2 is corrupt: not a samples row"):
        read_samples(path)


def test_a_torn_last_line_after_good_rows_is_skipped(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(ROW + '{"step": 2, "pass": "tr')
    assert read_samples(path) == [{"step": 1, "pass": "train", "row": 0, "fields": {"answer": "1 2"}}]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "lo')
    assert read_rows(metrics) == [{"step": 1, "loss": 2.5}]
