"""Shared test helpers: the fixture, run-file variants and case copies, and a quiet training call."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"


def fixture_text() -> str:
    """The tiny-generate run file."""
    return FIXTURE.read_text()


def variant(old: str, new: str, text: str | None = None) -> str:
    """The fixture with one exact piece of text replaced (asserting it was there)."""
    text = fixture_text() if text is None else text
    assert old in text, old
    return text.replace(old, new, 1)


def fixture_case(header: str, *edits: tuple[str, str]) -> str:
    """The fixture with its leading `;;` header replaced by `header` (whole lines) and each
    `(old, new)` edit applied once, as most `../shared/cases` files are written."""
    text = fixture_text()
    body = text.split("\n\n", 1)[1]
    text = header.rstrip("\n") + "\n\n" + body
    for old, new in edits:
        text = variant(old, new, text)
    return text


#: The project's own copies of the `../shared/cases` files that tests read, byte for byte, so
#: that the suite passes on a clone without `../shared` (`.ci/run` checks the originals).
CASE_COPIES = {
    "gen-002-dtype-drift.sx": fixture_case(
        ";; expect: E-GEN-002 40\n;; E-GEN-002: :step turns the i32 row into f32.",
        ("(list :row (where (= column at) guess row)", "(list :row (cast (where (= column at) guess row) :f32)")),
    "warn-unsalted-draw.sx": fixture_case(
        ";; expect: W-RAND-001 37\n"
        ";; W-RAND-001: the student samples without a salt, so it draws the same bits at every step.",
        ("(argmax (model row))", "(categorical (model row))")),
    "warn-stack-microbatch.sx": fixture_case(
        ";; expect: W-STACK-001 32\n"
        ";; W-STACK-001: :init reads :microbatch, so the run cannot stack its two microbatches.",
        (":stride (field batch :stride)))", ":stride (+ (field batch :stride) (* 0 (getf ctx :microbatch)))))")),
    "teacher-reachable-clean.sx": fixture_case(
        ";; expect: clean\n;; clean: a frozen teacher reachable from model labels the rows the student wrote.",
        ("(model student)", "(defmodel teacher\n  :frozen true\n  :params (:embed (normal [vocab dim] :std 0.1)\n"
                            "           :out (normal [dim vocab] :std 0.1))\n"
                            "  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))\n\n"
                            "(defmodel pair\n  :params (:student student :teacher teacher)\n"
                            "  :apply (lambda (self row) (student row)))\n\n(model pair)"),
        (":label (mod (+ row stride) vocab)", ":label (argmax (teacher row))")),
}


def write_case(name: str, directory: Path) -> Path:
    """Write the copy of `../shared/cases/<name>` (see CASE_COPIES) into `directory`; return its path."""
    path = directory / name
    path.write_text(CASE_COPIES[name])
    return path


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
