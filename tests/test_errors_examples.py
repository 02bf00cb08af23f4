"""The diagnostic records' examples are what is tested.

For every record of `sexpgpu_lang.diagnostic_docs` (one per code):

- each of its marked examples (`CODE.sx`, `CODE.SLUG.sx`) gives exactly the
  diagnostics its `;; ^^^ CODE` markers show (every severity; `tests/helpers.check`),
  its own code among them;
- each tests/cases-files case that expects the code lints, with the files read, to
  exactly the codes its `;; expect:` header names;
- every line of the record's ```lisp excerpts, with its `;` comment dropped and
  whitespace normalised, appears in one of its examples (an elision `...` in an
  excerpt line stands for any text), so the example the page shows is an excerpt of a
  file that really gives the code.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import ERRORS_DOC as DOC
from helpers import ROOT, check, expected_codes, unmarked
from sexpgpu_lang import Severity, analyze_file
from sexpgpu_lang.diagnostic_docs import excerpt_lines, normalise, records

RECORDS = records()
FILE_CASES = ROOT / "tests" / "cases-files"


def file_cases(code: str) -> list[Path]:
    return [p for p in sorted(FILE_CASES.glob("*.sx")) if code in expected_codes(p)]


def snippets(text: str) -> list[str]:
    return re.findall(r"```lisp\n(.*?)```", text, flags=re.S)


def codes_of(path: Path) -> list[str]:
    """The codes of the errors and warnings a file case gives with its files read (as `sexpgpu run`
    checks it), and of the information and hints its header names (as tests/test_cases.py does)."""
    res = analyze_file(str(path), read_files=True)
    named = expected_codes(path)
    return sorted(d.code for d in res.diagnostics if d.severity in (Severity.ERROR, Severity.WARNING) or d.code in named)


EXAMPLES = [pytest.param(rec.code, p, id=p.name) for rec in RECORDS.values() for p in rec.examples]


def test_the_records_have_examples():
    assert len(EXAMPLES) >= len(RECORDS) - 10


@pytest.mark.parametrize("code,path", EXAMPLES)
def test_example_gives_exactly_its_markers(code, path):
    text = path.read_text(encoding="utf-8")
    res = check(text, str(path))
    assert code in {d.code for d in res.diagnostics}, f"{path.name} does not give {code}"


@pytest.mark.parametrize("code", sorted(c for c in RECORDS if file_cases(c)))
def test_file_cases_give_exactly_their_header(code):
    for case in file_cases(code):
        got = codes_of(case)
        assert code in got, f"{code}: {case.name} gives {got}, not {code}"
        assert set(got) == expected_codes(case), \
            f"{code}: {case.name} gives {got}, its header expects {sorted(expected_codes(case))}"


@pytest.mark.parametrize("code", sorted(RECORDS))
def test_excerpt_is_part_of_an_example(code):
    rec = RECORDS[code]
    files = [*rec.examples, *file_cases(code)]
    texts = [normalise(unmarked(f.read_text(encoding="utf-8"))) for f in files]
    blocks = snippets(rec.explanation + "\n" + rec.fix)
    assert blocks, f"{code}: no ```lisp excerpt"
    missing = [line for line, pat in excerpt_lines(rec.explanation + "\n" + rec.fix)
               if not any(pat.search(t) for t in texts)]
    assert not missing, (f"{code}: these lines of the record's excerpts are in none of its examples "
                         f"{[f.name for f in files]}:\n  " + "\n  ".join(missing))


def test_every_section_shows_the_message_its_example_gives():
    """Each section has its **Message:** line (scripts/gen_errors_doc.py writes what linting its first
    example prints today; tests/test_generated_files.py checks the page is its output)."""
    assert DOC.read_text(encoding="utf-8").count("**Message:**") == len(RECORDS)


def code_span_text(span: str) -> str:
    """What a Markdown code span renders as (CommonMark): the text between its backtick runs, less one
    space at each end where it has one at both (and is not all spaces)."""
    m = re.fullmatch(r"(`+)(.*?)\1", span, flags=re.S)
    assert m and not m.group(2).startswith("`") and not m.group(2).endswith("`"), f"not one code span: {span}"
    text = m.group(2)
    if len(text) >= 2 and text[0] == text[-1] == " " and text.strip():
        text = text[1:-1]
    return text


def page_messages() -> dict[str, str]:
    """Each section's code and what its **Message:** line renders as."""
    out = {}
    for sec in re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)[1:]:
        code = sec.split(":", 1)[0]
        msg = re.search(r"^\*\*Message:\*\* (.*)$", sec, flags=re.M)
        if msg:
            out[code] = code_span_text(msg.group(1))
    return out


def test_code_span_text():
    assert code_span_text("`a 'b'`") == "a 'b'"
    assert code_span_text("``a `b` c``") == "a `b` c"
    assert code_span_text("`` `b` ``") == "`b`"


@pytest.mark.parametrize("code", sorted(RECORDS))
def test_the_page_s_message_is_what_lint_prints(code, monkeypatch):
    """The **Message:** line renders as exactly the first line `sexpgpu lint` prints for the code's first
    example (run in its directory, with `--read-files` for a tests/cases-files case), backticks and all."""
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    files = [*RECORDS[code].examples, *file_cases(code)]
    shown = page_messages().get(code)
    if not files:
        assert shown is None, f"{code}: a message with no example"
        return
    monkeypatch.chdir(files[0].parent)
    r = CliRunner().invoke(app, ["lint", *(["--read-files"] if files[0].parent == FILE_CASES else []), files[0].name])
    printed = [ln for ln in r.output.splitlines() if f"[{code}]: " in ln and ln.startswith(files[0].name + ":")]
    assert printed, f"{code}: lint prints no line of it for {files[0].name}:\n{r.output}"
    assert shown == printed[0], f"{code}: the page shows\n  {shown}\nlint prints\n  {printed[0]}"
