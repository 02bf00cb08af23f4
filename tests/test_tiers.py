"""The `slow` tier (tests/conftest.py): the marker is registered and strict, `spawned_kind` names
what belongs to the tier, and a test without the marker cannot start it."""
from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from conftest import SlowTierError, spawned_kind
from helpers import ROOT


def test_the_slow_marker_is_registered_and_markers_are_strict():
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in ini["addopts"].split()
    assert [m.split(":", 1)[0] for m in ini["markers"]] == ["slow"]


@pytest.mark.parametrize("argv,kind", [
    (["/x/.venv/bin/sexpgpu", "run", "a.sx", "--steps", "2"], "`sexpgpu run`"),
    ([sys.executable, "-m", "sexpgpu_cli.main", "run", "a.sx"], "`sexpgpu run`"),
    ([sys.executable, "-m", "sexpgpu_cli", "run", "a.sx"], "`sexpgpu run`"),
    ([sys.executable, "-c", "from sexpgpu_cli.main import main; main()", "run", "a.sx"], "`sexpgpu run`"),
    ("sexpgpu run a.sx", "`sexpgpu run`"),
    (["nvim", "--headless"], "the editor nvim"),
    (["/usr/bin/emacs", "--batch"], "the editor emacs"),
    (["/x/node", "entry.js"], "the editor node"),
    (["/x/.venv/bin/sexpgpu", "lint", "a.sx"], None),
    (["/x/.venv/bin/sexpgpu", "lsp"], None),
    ([sys.executable, "-m", "sexpgpu_cli.main", "fmt", "run.sx"], None),
    ([sys.executable, "-c", "import sexpgpu_lang"], None),
    (["bash", "script", "run"], None),
])
def test_spawned_kind(argv, kind):
    assert spawned_kind(argv) == kind


def test_an_unmarked_test_cannot_start_sexpgpu_run(tmp_path):
    with pytest.raises(SlowTierError, match=r"test_tiers\.py::test_an_unmarked_test_cannot_start_sexpgpu_run "
                                            r"starts `sexpgpu run` but is not marked slow"):
        subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", str(tmp_path / "none.sx")])
    # other processes start as usual
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"


@pytest.mark.slow
def test_a_slow_test_can():
    r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "run [OPTIONS] FILE" in r.stdout
