"""Shared test helpers: the fixture, run-file variants and case copies, a case's `;; expect:`
header, docs/errors.md's sections, a quiet training call, and the modules a fresh interpreter
imported."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"
ERRORS_DOC = ROOT / "docs" / "errors.md"


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


_EXPECT = re.compile(r";;\s*expect:\s*(\S+)(?:\s+(\d+)(?::\d+)?)?\s*$")


def case_expectations(path: Path) -> tuple[list[tuple[str, int | None]], bool]:
    """The `(code, line)` pairs and the `clean` flag of a case's `;; expect:` header.

    The header is the file's leading `;;` lines; the rules are those of
    `../shared/tools/check_cases.py` (tests/cases/README.md). Stricter than that tool in
    one way: an `;; expect` line that does not parse, or a file with no expectation at
    all, is an error here instead of being skipped.
    """
    out: list[tuple[str, int | None]] = []
    clean = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith(";;"):
            break
        if not re.match(r";;\s*expect", line):
            continue
        m = _EXPECT.match(line)
        if m is None:
            raise AssertionError(f"{path.name}: malformed expectation {line!r}")
        if m.group(1) == "clean":
            clean = True
        else:
            out.append((m.group(1), int(m.group(2)) if m.group(2) else None))
    if not out and not clean:
        raise AssertionError(f"{path.name}: no `;; expect:` line in its header")
    if out and clean:
        raise AssertionError(f"{path.name}: `;; expect: clean` beside other expectations")
    return out, clean


def expected_codes(path: Path) -> set[str]:
    """The codes (or `CODE-*` families) a case's header expects."""
    return {code for code, _ in case_expectations(path)[0]}


def errors_doc_sections() -> dict[str, dict]:
    """docs/errors.md's `## CODE: title` sections: code -> {title, anchor (the `<a id>` on the
    line before the heading, or None), body (the lines up to the next heading or anchor)}."""
    lines = ERRORS_DOC.read_text(encoding="utf-8").splitlines()
    out: dict[str, dict] = {}
    for i, line in enumerate(lines):
        m = re.match(r"## ([EW]-[A-Z]+-\d{3}): (.+)$", line)
        if not m:
            continue
        assert m.group(1) not in out, f"two sections for {m.group(1)}"
        prev = lines[i - 1] if i else ""
        a = re.fullmatch(r'<a id="([^"]+)"></a>', prev.strip())
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("#") or lines[j].startswith("<a id=")),
                   len(lines))
        out[m.group(1)] = {"title": m.group(2), "anchor": a.group(1) if a else None,
                           "body": "\n".join(lines[i + 1:end])}
    return out


def linked_cases(body: str) -> list[Path]:
    """The case files (under tests/cases or tests/cases-files) a docs/errors.md section links."""
    return [(ERRORS_DOC.parent / link).resolve()
            for link in re.findall(r"\]\((\.\./tests/cases(?:-files)?/[^)]+\.sx)\)", body)]


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


def modules_after(code: str) -> set[str]:
    """Every name in `sys.modules` once `code` has run in a fresh interpreter started in the
    repository root (`python -c`); fails the test with the interpreter's output when `code`
    fails. The list is printed without importing anything more."""
    script = code + "\nimport sys\nprint('modules:', ' '.join(sorted(sys.modules)))\n"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("modules: "), r.stdout
    return set(last.removeprefix("modules: ").split())
