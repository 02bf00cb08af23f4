"""docs/errors.md's examples are what is tested.

For every `## CODE: title` section of docs/errors.md:

- each case file the section links (under **Case**) lints, in-process, to
  that code, and to exactly the codes its `;; expect:` header names (a case
  whose mistake also breaks something else says so in its header);
- every line of the section's ```lisp snippets, with its `;` comment
  dropped and whitespace normalised, appears in one of those linked cases
  (an elision `...` in a snippet line stands for any text), so the example
  the page shows is an excerpt of a file that really gives the code.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import ERRORS_DOC as DOC
from helpers import errors_doc_sections, expected_codes, linked_cases
from sexpgpu_lang import Severity, analyze_file


def snippets(body: str) -> list[str]:
    return re.findall(r"```lisp\n(.*?)```", body, flags=re.S)


def drop_comment(line: str) -> str:
    """The line without its `;` comment (a `;` inside a string stays)."""
    in_string = False
    i = 0
    while i < len(line):
        c = line[i]
        if in_string and c == "\\":
            i += 2
            continue
        if c == '"':
            in_string = not in_string
        elif c == ";" and not in_string:
            return line[:i]
        i += 1
    return line


def normalise(text: str) -> str:
    return " ".join(text.split())


def line_pattern(line: str) -> re.Pattern:
    """A snippet line as a pattern over normalised text: `...` is any text."""
    parts = [re.escape(p.strip()) for p in normalise(line).split("...")]
    return re.compile(r".*?".join(p for p in parts))


def codes_of(path: Path) -> list[str]:
    """The codes of the errors and warnings a case gives, and of the information and hints its
    header names (as tests/test_cases.py compares them)."""
    res = analyze_file(str(path), read_files=path.parent.name == "cases-files")  # as `sexpgpu run` checks them
    named = expected_codes(path)
    return sorted(d.code for d in res.diagnostics if d.severity in (Severity.ERROR, Severity.WARNING) or d.code in named)


SECTIONS = {code: section["body"] for code, section in errors_doc_sections().items()}


def test_the_page_has_sections():
    assert len(SECTIONS) >= 30


@pytest.mark.parametrize("code", sorted(SECTIONS))
def test_linked_cases_give_exactly_the_code(code):
    cases = linked_cases(SECTIONS[code])
    assert cases, f"{code}: no linked case"
    for case in cases:
        got = codes_of(case)
        assert code in got, f"{code}: {case.name} gives {got}, not {code}"
        assert set(got) == expected_codes(case), \
            f"{code}: {case.name} gives {got}, its header expects {sorted(expected_codes(case))}"


@pytest.mark.parametrize("code", sorted(SECTIONS))
def test_snippet_is_an_excerpt_of_a_linked_case(code):
    body = SECTIONS[code]
    texts = [normalise(c.read_text(encoding="utf-8")) for c in linked_cases(body)]
    blocks = snippets(body)
    assert blocks, f"{code}: no ```lisp snippet"
    missing = []
    for block in blocks:
        for line in block.splitlines():
            code_part = drop_comment(line)
            if not code_part.strip() or normalise(code_part) == "...":
                continue
            pat = line_pattern(code_part)
            if not any(pat.search(t) for t in texts):
                missing.append(line.strip())
    assert not missing, (f"{code}: these lines of the docs/errors.md snippet are in none of its linked cases "
                         f"{[c.name for c in linked_cases(body)]}:\n  " + "\n  ".join(missing))


def test_every_section_shows_the_message_its_case_gives():
    """Each section has its **Message:** line (tests/test_generated_files.py checks that each is
    what linting its first case prints today; scripts/gen_error_messages.py --write rewrites them)."""
    assert DOC.read_text(encoding="utf-8").count("**Message:**") == len(SECTIONS)
