"""The examples on real data: each is clean and trains a few steps through the real loaders."""
from pathlib import Path

import pytest

from sexpgpu_lang import analyze_file
from sexpgpu_runtime.train import RunOptions, train

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.sx"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_clean_and_trains(path, tmp_path):
    res = analyze_file(str(path))
    assert [d for d in res.diagnostics if d.severity <= 2] == []
    out = train(res.program, RunOptions(steps=3, run_dir=tmp_path, quiet=True))
    assert out.history[-1]["step"] == 3
    assert all(n == 1 for n in out.traces.values()), out.traces
