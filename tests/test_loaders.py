"""Loaders on real data: npz files, text bytes from the Python standard library, order and errors."""
import sysconfig

import numpy as np
import pytest

from sexpgpu_lang.ir import LoaderIR
from sexpgpu_lang.source import Span
from sexpgpu_runtime.data.loaders import Loader
from sexpgpu_runtime.errors import LoaderError


def spec(source, fields, batch=4, base="."):
    return LoaderIR("data", source, batch, fields, Span(0, 0), str(base))


def test_order_is_a_pure_function_of_seed_and_shuffles_every_epoch(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.arange(10, dtype=np.int32)[:, None])
    s = spec(("npz", {"path": "d.npz"}), (("x", (1,), "i32"),), batch=5, base=tmp_path)
    a, b, c = Loader(s, 7), Loader(s, 7), Loader(s, 8)
    epoch0 = np.concatenate([a.batch(0)["x"], a.batch(5)["x"]])[:, 0]
    epoch1 = np.concatenate([a.batch(10)["x"], a.batch(15)["x"]])[:, 0]
    assert sorted(epoch0) == list(range(10)) and sorted(epoch1) == list(range(10))   # each epoch sees every record once
    assert list(epoch0) != list(epoch1)                                                 # and in a new order
    assert np.array_equal(a.batch(15)["x"], b.batch(15)["x"])                           # the position is the whole state
    assert not np.array_equal(np.concatenate([c.batch(0)["x"], c.batch(5)["x"]])[:, 0], epoch0)


def test_npz_errors_name_the_file_and_field(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((6, 3), np.float32))
    with pytest.raises(LoaderError, match=r"no file .*missing\.npz"):
        Loader(spec(("npz", {"path": "missing.npz"}), (("x", (3,), "f32"),), base=tmp_path), 0)
    with pytest.raises(LoaderError, match=r"d\.npz.*no field `y`"):
        Loader(spec(("npz", {"path": "d.npz"}), (("y", (3,), "f32"),), base=tmp_path), 0)
    with pytest.raises(LoaderError, match=r"d\.npz.*field `x` has records of shape \[3\].*says \[4\]"):
        Loader(spec(("npz", {"path": "d.npz"}), (("x", (4,), "f32"),), base=tmp_path), 0)
    with pytest.raises(LoaderError, match=r"d\.npz.*field `x` has dtype float32.*says i32"):
        Loader(spec(("npz", {"path": "d.npz"}), (("x", (3,), "i32"),), base=tmp_path), 0)
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 then not a zip")
    with pytest.raises(LoaderError, match=r"bad\.npz is not a readable \.npz"):
        Loader(spec(("npz", {"path": "bad.npz"}), (("x", (3,), "f32"),), base=tmp_path), 0)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_a_nan_or_infinite_value_in_a_floating_field_is_named_by_record_and_place(tmp_path, dtype):
    stored = np.float32 if dtype == "f32" else np.float16
    x = np.zeros((6, 3, 2), stored)
    x[4, 2, 1] = np.nan
    np.savez(tmp_path / "d.npz", x=x, y=np.full((6,), np.inf, stored))
    with pytest.raises(LoaderError) as e:
        Loader(spec(("npz", {"path": "d.npz"}), (("x", (3, 2), dtype),), base=tmp_path), 0)
    assert str(e.value) == (f"loader `data` ({tmp_path / 'd.npz'}): field `x` holds nan in record 4 at [2 1]; a NaN "
                            "or infinite input makes the losses that read it NaN: fix the data, or drop the record")
    with pytest.raises(LoaderError, match=r"field `y` holds inf in record 0; a NaN"):
        Loader(spec(("npz", {"path": "d.npz"}), (("y", (), dtype),), base=tmp_path), 0)
    x[4, 2, 1] = 0
    np.savez(tmp_path / "d.npz", x=x)
    assert Loader(spec(("npz", {"path": "d.npz"}), (("x", (3, 2), dtype),), base=tmp_path), 0).records == 6


def test_text_bytes_reads_the_standard_library():
    s = spec(("text-bytes", {"glob": "$STDLIB/json/*.py", "seq": 32}), (("bytes", (32,), "i32"),), batch=8)
    ld = Loader(s, 0)
    b = ld.batch(0)["bytes"]
    assert b.shape == (8, 32) and b.dtype == np.int32
    assert ld.records > 100
    text = bytes(b[0].astype(np.uint8)).decode("utf-8", errors="replace")
    src = "".join(open(p, encoding="utf-8").read() for p in sorted(__import__("glob").glob(sysconfig.get_paths()["stdlib"] + "/json/*.py")))
    assert text in src


def test_text_bytes_with_no_files_is_one_clear_error(tmp_path):
    with pytest.raises(LoaderError, match=r"no file matches .*nothing-here"):
        Loader(spec(("text-bytes", {"glob": "nothing-here/*.txt", "seq": 8}), (("b", (8,), "i32"),), base=tmp_path), 0)


def test_fewer_records_than_one_batch_is_one_error_naming_loader_file_count_and_batch(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((10, 3), np.float32))
    with pytest.raises(LoaderError) as e:
        Loader(spec(("npz", {"path": "d.npz"}), (("x", (3,), "f32"),), batch=64, base=tmp_path), 0)
    assert str(e.value) == (f"loader `data` ({tmp_path / 'd.npz'}) has 10 records, fewer than one batch of 64; "
                            "give it at least 64 records, or lower `:batch`")
    with pytest.raises(LoaderError, match=r"^loader `data` has 10 records, fewer than one batch of 64"):
        Loader(spec(("stride-rows", {"vocab": 16, "seq": 8, "records": 10}), (("row", (8,), "i32"),), batch=64), 0)
    assert Loader(spec(("npz", {"path": "d.npz"}), (("x", (3,), "f32"),), batch=10, base=tmp_path), 0).records == 10


def test_fields_with_different_record_counts_name_the_file_and_each_field(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((10, 3), np.float32), y=np.zeros(12, np.int32))
    with pytest.raises(LoaderError) as e:
        Loader(spec(("npz", {"path": "d.npz"}), (("x", (3,), "f32"), ("y", (), "i32")), base=tmp_path), 0)
    assert str(e.value) == f"loader `data` ({tmp_path / 'd.npz'}): fields have different record counts: `x` 10, `y` 12"


@pytest.mark.parametrize("source", [("npz", {"path": "$NOPE_VAR/d.npz"}),
                                    ("text-bytes", {"glob": "$NOPE_VAR/*.py", "seq": 8}),
                                    ("text-bytes", {"glob": "${NOPE_VAR}/*.py", "seq": 8})])
def test_an_unset_variable_in_a_data_path_is_named(source, monkeypatch):
    monkeypatch.delenv("NOPE_VAR", raising=False)
    written = source[1].get("path") or source[1]["glob"]
    with pytest.raises(LoaderError) as e:
        Loader(spec(source, (("x", (8,), "i32"),)), 0)
    assert str(e.value) == (f"loader `data`: the environment variable `NOPE_VAR` in \"{written}\" is not set; "
                            "set it, or write the path out")
    monkeypatch.setenv("NOPE_VAR", "")
    with pytest.raises(LoaderError, match="`NOPE_VAR` .* is empty"):
        Loader(spec(source, (("x", (8,), "i32"),)), 0)


def test_a_set_variable_and_stdlib_expand(tmp_path, monkeypatch):
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 3), np.float32))
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    assert Loader(spec(("npz", {"path": "$DATA_DIR/d.npz"}), (("x", (3,), "f32"),)), 0).records == 4
    assert Loader(spec(("text-bytes", {"glob": "${STDLIB}/json/__init__.py", "seq": 8}), (("b", (8,), "i32"),)), 0).records > 4


def test_a_fifo_or_a_device_a_glob_matches_is_named_for_what_it_is(tmp_path):
    import os
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(LoaderError) as e:
        Loader(spec(("text-tokens", {"glob": "fifo.jsonl", "tokenizer": "tok.json", "seq": 8}),
                    (("x", (8,), "i32"),), base=tmp_path), 0)
    assert str(e.value).endswith(f": cannot read {tmp_path / 'fifo.jsonl'}: it is a named pipe (FIFO), not a "
                                 "regular file; name regular files")
    with pytest.raises(LoaderError, match=r": cannot read .*fifo.jsonl \(.*/\*.jsonl matches it\): it is a named pipe"):
        Loader(spec(("text-bytes", {"glob": "*.jsonl", "seq": 8}), (("x", (8,), "i32"),), base=tmp_path), 0)
    for source in (("text-tokens", {"glob": "/dev/zero", "tokenizer": "tok.json", "seq": 8}),
                   ("text-bytes", {"glob": "/dev/zero", "seq": 8})):
        with pytest.raises(LoaderError, match=r": cannot read /dev/zero: it is a character device, not a "
                                              r"regular file; name regular files$"):
            Loader(spec(source, (("x", (8,), "i32"),), base=tmp_path), 0)
