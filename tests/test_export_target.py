"""`--export` never replaces a file that is not an export: an existing path that is not a safetensors
file (a text file, /etc/passwd), or a directory that holds no export, is refused before the run
starts (run/options.check_options); an earlier export is replaced, as `save_pretrained` does."""
from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from helpers import SMALL, program_of
from sexpgpu_runtime import OptionError, RunOptions, check_options


def options(tmp_path, export, **kw):
    return RunOptions(steps=1, run_dir=tmp_path / "run", quiet=True, export=export, **kw)


def test_a_file_that_is_not_an_export_is_refused(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(OptionError, match="it exists and is not a safetensors file"):
        check_options(program_of(SMALL), options(tmp_path, notes))
    assert notes.read_text() == "my notes\n"


def test_an_earlier_export_and_a_new_path_are_accepted_and_left_as_they_are(tmp_path):
    """Checking the options accepts both targets and writes nothing: the earlier export keeps its
    bytes (the run replaces it only when it exports) and the new path is not made."""
    earlier = tmp_path / "earlier.safetensors"
    save_file({"embed": np.zeros((2, 2), np.float32)}, str(earlier))
    before = earlier.read_bytes()
    assert check_options(program_of(SMALL), options(tmp_path, earlier)) is None
    assert earlier.read_bytes() == before
    new = tmp_path / "new.safetensors"
    assert check_options(program_of(SMALL), options(tmp_path, new)) is None
    assert not new.exists() and not (tmp_path / "run").exists()


def test_a_directory_that_holds_no_export_is_refused_in_the_hf_layout(tmp_path):
    other = tmp_path / "project"
    other.mkdir()
    (other / "README").write_text("not an export\n")
    with pytest.raises(OptionError, match="a directory that holds no export"):
        check_options(program_of(SMALL), options(tmp_path, other, export_names="gpt2"))
    assert (other / "README").read_text() == "not an export\n"
