"""The ids a run's data give against the tables they index, checked before training (run/id_tables.py)."""
import json

import numpy as np
import pytest

from helpers import SMALL, program_of


def lm(source: str, fields: str, objective: str) -> str:
    """A run file over loader `train` (`source`, `fields`), a model of a 16-row embedding, `objective`."""
    return f"""\
(loader train
  :source {source}
  :batch 2
  :fields {fields})
(defmodel lm
  :params (:embed (normal [16 8] :std 0.1) :out (normal [8 16] :std 0.1))
  :apply (lambda (self x) (matmul (embedding (getf self :embed) x) (getf self :out))))
(model lm)
(objective (lambda (batch ctx) {objective}))
(run :loader train :steps 1)
"""


def loaders(text, tmp_path):
    from sexpgpu_runtime.run.batches import open_loaders
    path = tmp_path / "run.sx"
    path.write_text(text)
    return open_loaders(program_of(text, str(path)))


def test_a_field_is_followed_to_the_tables_it_indexes():
    from sexpgpu_runtime.run.id_tables import index_limits
    program = program_of(SMALL, "run.sx")
    [(name, limits)] = index_limits(program).items()
    assert name == "train" and list(limits) == ["row"]   # `:y` is arithmetic on the ids: not followed
    assert (limits["row"].size, limits["row"].op) == (16, "take")
    assert limits["row"].describe(program).startswith("the 16 rows of the table `take` at run.sx:9:")


def test_a_token_past_the_embedding_is_named_with_its_position_and_the_table(tmp_path):
    from sexpgpu_runtime import DataError
    ids = np.arange(40, dtype=np.uint16) % 16
    ids[21] = 1023
    ids.tofile(tmp_path / "t.bin")
    text = lm('(tokens "t.bin" :dtype :uint16 :seq 4)', "(:x [4] :i32 :y [4] :i32)",
              "(mean (cross-entropy (model (field batch :x)) (field batch :y)))")
    with pytest.raises(DataError) as e:
        loaders(text, tmp_path)
    assert str(e.value) == (
        f"loader `train` ({tmp_path / 't.bin'}): field `x` has token 1023 at position 21 of {tmp_path / 't.bin'} "
        f"(record 5 and on), outside the 16 rows of the table `take` inside `embedding`, called at "
        f"{tmp_path / 'run.sx'}:7:35 reads (ids 0 to 15); make the data's ids 0 to 15 (tokenize with the "
        "model's tokenizer), or the table 1024 or more long")


def test_hugging_faces_ignored_label_in_a_jsonl_is_named_with_its_record(tmp_path):
    from sexpgpu_runtime import DataError
    rows = [{"x": [1, 2, 3, 4], "y": [2, 3, 4, 5]}, {"x": [5, 6, 7, 8], "y": [-100, -100, 8, 9]}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = lm('(jsonl "p.jsonl")', "(:x [4] :i32 :y [4] :i32)",
              "(mean (cross-entropy (model (field batch :x)) (field batch :y)))")
    with pytest.raises(DataError) as e:
        loaders(text, tmp_path)
    line = text.splitlines().index(next(s for s in text.splitlines() if "cross-entropy" in s)) + 1
    assert str(e.value) == (
        f"loader `train` ({tmp_path / 'p.jsonl'}): field `y` has token -100 in record 1 (0-based), outside the 16 "
        f"classes of `cross-entropy` at {tmp_path / 'run.sx'}:{line}:38 (ids 0 to 15); `cross-entropy` has no "
        "ignored label (Hugging Face's -100 is read as a class): give the positions to leave out any label in "
        "range and multiply their loss by 0 (a mask) before the mean")


def test_ids_inside_the_table_and_ids_changed_by_arithmetic_are_not_refused(tmp_path):
    rows = [{"x": [1, 2, 3, 16], "y": [2, 3, 4, 5]}, {"x": [5, 6, 7, 8], "y": [1, 1, 8, 9]}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # x reaches 16, but the model reads x - 1 (0 to 15): the trail ends at the arithmetic; y's -100 is
    # replaced where it is negative (`where` ends the trail too)
    rows[1]["y"][0] = -100
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = lm('(jsonl "p.jsonl")', "(:x [4] :i32 :y [4] :i32)",
              "(let* ((y (field batch :y))) (mean (cross-entropy (model (- (field batch :x) 1)) "
              "(where (>= y 0) y 0))))")
    assert loaders(text, tmp_path).training["train"].records == 2


def test_a_token_file_whose_vocab_bounds_its_ids_inside_the_table_is_not_read_again(tmp_path, monkeypatch):
    import sexpgpu_runtime.run.id_tables as id_tables
    (np.arange(40, dtype=np.uint16) % 16).tofile(tmp_path / "t.bin")
    text = lm('(tokens "t.bin" :dtype :uint16 :seq 4 :vocab 16)', "(:x [4] :i32 :y [4] :i32)",
              "(mean (cross-entropy (model (field batch :x)) (field batch :y)))")
    read = []
    monkeypatch.setattr(id_tables, "first_outside", lambda *a: read.append(a))
    loaders(text, tmp_path)
    assert read == []


# -- a token file's dtype (W-LOADER-002's evidence, refused by the run) ---------------------------------


@pytest.mark.parametrize("suffix", [".bin", ".npy"])
def test_an_int32_file_read_as_uint16_is_refused_before_training_naming_the_dtype(tmp_path, suffix):
    from sexpgpu_runtime import DataError
    ids = (np.arange(1, 2000) % 16).astype("<i4")
    path = tmp_path / f"t{suffix}"
    if suffix == ".npy":   # an int32 array viewed as uint16 and saved: the header says uint16
        np.save(path, ids.view("<u2"))
    else:
        ids.tofile(path)
    text = lm(f'(tokens "t{suffix}" :dtype :uint16 :seq 4)', "(:x [4] :i32 :y [4] :i32)",
              "(mean (cross-entropy (model (field batch :x)) (field batch :y)))")
    with pytest.raises(DataError) as e:
        loaders(text, tmp_path)
    assert str(e.value) == (f"loader `train`: {path} read as `:uint16`: every other id of its first 3998 is 0, as "
                            "when a file of 4-byte ids (`:int32`) is read as 2-byte ones: the run would train on "
                            "those zeros; give the dtype the file was written with, likely `:dtype :int32`")



@pytest.mark.parametrize("bad", [-100, -1])
def test_a_negative_id_into_one_hot_is_told_to_be_masked_never_a_longer_table(tmp_path, bad):
    from sexpgpu_runtime import DataError
    rows = [{"x": [1, 2, 3, 4], "y": [2, 3, 4, 5]}, {"x": [5, 6, 7, 8], "y": [bad, 3, 8, 9]}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = lm('(jsonl "p.jsonl")', "(:x [4] :i32 :y [4] :i32)",
              "(mean (* (one-hot (field batch :y) 16) (model (field batch :x))))")
    with pytest.raises(DataError) as e:
        loaders(text, tmp_path)
    msg = str(e.value)
    assert f"field `y` has token {bad} in record 1 (0-based), outside the 16 classes of `one-hot`" in msg
    assert "or more long" not in msg and "the table" not in msg.split(";")[-1]
    assert msg.endswith("give those positions an id 0 to 15, e.g. `(where (>= y 0) y 0)`, and mask their "
                        "values out (multiply them by 0) where they reach the loss")
