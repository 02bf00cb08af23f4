"""A bad line of a `jsonl` loader's file: the error names the loader (as the run file does), the file,
the line and the column where JSON's parse failed (a tester found column 1 for a row cut short, and no
loader); a byte-order mark is no error, a directory one clear line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sexpgpu_lang.ir import LoaderIR
from sexpgpu_lang.source import Span
from sexpgpu_runtime.data.loaders import Loader
from sexpgpu_runtime.errors import LoaderError

SEXPGPU = str(Path(sys.executable).with_name("sexpgpu"))
FIELDS = (("prompt", (3,), "i32"),)


def error_of(tmp_path: Path, text: str, name: str = "prompts") -> str:
    (tmp_path / "p.jsonl").write_text(text, encoding="utf-8")
    with pytest.raises(LoaderError) as e:
        Loader(LoaderIR(name, ("jsonl", {"path": "p.jsonl"}), 1, FIELDS, Span(0, 0), str(tmp_path)), 0)
    assert "\n" not in str(e.value)
    return str(e.value)


def column_of(line: str) -> int:
    """The 1-based column Python's own parser gives for `line` (a row without its newline)."""
    with pytest.raises(json.JSONDecodeError) as e:
        json.loads(line)
    return e.value.colno


@pytest.mark.parametrize("row", ['{"prompt": [2', '{"prompt": [1], "a" 2}', '{"prompt": [1],}', '{"prompt": [1, 2]]}'])
@pytest.mark.parametrize("eol", ["\n", "\r\n", ""])
def test_a_line_that_is_not_json_names_the_loader_the_file_its_line_and_the_real_column(tmp_path, row, eol):
    col = column_of(row)
    assert col > 1
    got = error_of(tmp_path, '{"prompt": [1]}\n' + row + eol)
    assert got.startswith(f"loader `prompts`: {tmp_path / 'p.jsonl'}:2:{col}: not JSON (")
    assert got.endswith("); each line of a .jsonl file is one JSON object")


def test_every_error_about_a_row_names_the_loader(tmp_path):
    p = tmp_path / "p.jsonl"
    assert error_of(tmp_path, '{"prompt": [1]}\n[1, 2]\n', "qa") == (
        f"loader `qa`: {p}:2: a JSON list, not an object; each line of a .jsonl file is one object like "
        '{"prompt": ...}')
    assert error_of(tmp_path, '{"prompt": [1]}\n\n{"other": 1}\n', "qa") == (
        f"loader `qa`: {p}:3: the row has no `prompt` (or it is null); give every row the field")


def test_a_byte_order_mark_is_read_and_a_directory_is_one_line(tmp_path):
    (tmp_path / "p.jsonl").write_bytes(b'\xef\xbb\xbf{"prompt": [1, 2, 3]}\n')
    ld = Loader(LoaderIR("prompts", ("jsonl", {"path": "p.jsonl"}), 1, FIELDS, Span(0, 0), str(tmp_path)), 0)
    assert ld.source.table["prompt"].tolist() == [[1, 2, 3]]
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(LoaderError) as e:
        Loader(LoaderIR("prompts", ("jsonl", {"path": "d.jsonl"}), 1, FIELDS, Span(0, 0), str(tmp_path)), 0)
    assert str(e.value) == f"loader `prompts` ({tmp_path / 'd.jsonl'}): cannot read {tmp_path / 'd.jsonl'}: it is a directory, not a regular file; name a regular file"


@pytest.mark.slow
def test_at_the_command_line_run_s_check_says_it_at_the_path_and_exits_1(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"prompt": [1, 2, 3]}\n{"prompt": [4, 5\n')
    f = tmp_path / "r.sx"
    f.write_text("""(loader prompts
  :source (jsonl "p.jsonl")
  :batch 1
  :fields (:prompt [3] :i32))
(defmodel m :params (:w (zeros [1])) :apply (lambda (self x) (* x (getf self :w))))
(model m)
(objective (lambda (batch ctx) (mean (model (cast (field batch :prompt) :f32)))))
(run :loader prompts :steps 1)
""")
    proc = subprocess.run([SEXPGPU, "run", str(f), "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    col = column_of('{"prompt": [4, 5')
    assert proc.stdout.splitlines()[0] == (   # the runtime's reason, found by the check `run` starts with
        f"{f}:2:18: error[E-LOADER-001]: `jsonl`'s file `p.jsonl` has a row `run` refuses: p.jsonl:2:{col}: not JSON "
        "(Expecting ',' delimiter)")
    assert proc.stderr.strip().splitlines()[-1] == f"sexpgpu: error: {f} has 1 error; fix them before running"
