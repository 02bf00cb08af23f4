"""`:pretrained` files: a file cut short after (or inside) its tensor data
is E-MODEL-003 at lint time, from the header's byte ranges and the file's size; tensors the
file has that `:params` does not name are W-MODEL-001, named."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from sexpgpu_lang import analyze_file
from sexpgpu_lang.files.safetensors_header import HeaderError, read_header

CASES = Path(__file__).resolve().parent / "cases-files"


def write(path: Path, header: dict, data: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


HEADER = {"embed": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
          "out": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}}


def test_a_whole_file_reads(tmp_path):
    assert read_header(str(write(tmp_path / "a.safetensors", HEADER, bytes(32)))) == {
        "embed": ((2, 3), "f32"), "out": ((4,), "bf16")}


@pytest.mark.parametrize("kept,message", [
    (0, "it is cut short: tensor `embed` ends at byte 24 of the data, and the file holds 0 bytes of data after its header"),
    (31, "it is cut short: tensor `out` ends at byte 32 of the data, and the file holds 31 bytes of data after its header"),
])
def test_a_file_cut_short_is_refused(tmp_path, kept, message):
    with pytest.raises(HeaderError) as e:
        read_header(str(write(tmp_path / "a.safetensors", HEADER, bytes(kept))))
    assert str(e.value) == message


def test_a_byte_range_that_does_not_fit_the_shape_is_refused(tmp_path):
    bad = dict(HEADER, out={"dtype": "BF16", "shape": [5], "data_offsets": [24, 32]})
    with pytest.raises(HeaderError, match=r"tensor `out` takes 8 bytes, its shape and dtype need 10"):
        read_header(str(write(tmp_path / "a.safetensors", bad, bytes(32))))


def test_lint_read_files_refuses_the_truncated_case():
    res = analyze_file(str(CASES / "model-003-pretrained-truncated.sx"), read_files=True)
    assert [(d.code, d.message) for d in res.diagnostics] == [(
        "E-MODEL-003", "cannot use `data/teacher-truncated.safetensors`: it is cut short: tensor `embed` ends at "
        "byte 4096 of the data, and the file holds 0 bytes of data after its header")]
    # Without --read-files the file is not opened, and nothing is said.
    assert analyze_file(str(CASES / "model-003-pretrained-truncated.sx")).diagnostics == []


def test_tensors_params_does_not_name_are_a_warning_naming_them():
    res = analyze_file(str(CASES / "warn-model-001-pretrained-extra-tensors.sx"), read_files=True)
    assert [(d.code, d.is_error, d.message) for d in res.diagnostics] == [(
        "W-MODEL-001", False, "`data/teacher-extra.safetensors` has 2 tensors that `:params` of `teacher` does not "
        "name, which are not loaded: `head.bias`, `lm_head`")]
    assert res.program is not None   # a warning: the run goes ahead


def test_many_extra_tensors_are_counted_past_eight(tmp_path):
    src = (CASES / "warn-model-001-pretrained-extra-tensors.sx").read_text()
    header = {"embed": {"dtype": "F32", "shape": [16, 64], "data_offsets": [0, 4096]},
              "out": {"dtype": "F32", "shape": [64, 16], "data_offsets": [4096, 8192]}}
    for i in range(10):
        header[f"x{i}"] = {"dtype": "F32", "shape": [1], "data_offsets": [8192 + 4 * i, 8196 + 4 * i]}
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "teacher-extra.safetensors", header, bytes(8232))
    (tmp_path / "run.sx").write_text(src)
    [d] = analyze_file(str(tmp_path / "run.sx"), read_files=True).diagnostics
    assert d.message.endswith("has 10 tensors that `:params` of `teacher` does not name, which are not loaded: "
                              "`x0`, `x1`, `x2`, `x3`, `x4`, `x5`, `x6`, `x7` and 2 more")
