"""Shared test helpers: the fixture, run-file variants, and a quiet training call."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"
SHARED_CASES = ROOT.parent / "shared" / "cases"


def fixture_text() -> str:
    """The tiny-generate run file."""
    return FIXTURE.read_text()


def variant(old: str, new: str, text: str | None = None) -> str:
    """The fixture with one exact piece of text replaced (asserting it was there)."""
    text = fixture_text() if text is None else text
    assert old in text, old
    return text.replace(old, new, 1)


def program_of(text: str, path: str = "variant.sx"):
    """Check `text` and return its IR, failing the test with the diagnostics when it has errors."""
    from sexpgpu_lang import analyze
    res = analyze(text, path)
    assert res.program is not None, [f"{d.code}: {d.message}" for d in res.diagnostics]
    return res.program


def train_quiet(text: str, steps: int, run_dir: Path, **kw):
    """Train a run file's text for `steps` steps without terminal output."""
    from sexpgpu_runtime.train import RunOptions, train
    return train(program_of(text, str(run_dir / "run.sx")), RunOptions(steps=steps, run_dir=run_dir, quiet=True, **kw))
