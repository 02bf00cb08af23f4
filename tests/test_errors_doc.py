"""docs/errors.md and the codes agree, and every code has a run-file case.

Each code in `sexpgpu_lang.diagnostics.CODES` has a section in docs/errors.md
headed `## CODE: title` (its title as in CODES), preceded by an explicit
`<a id="code"></a>` so that the link every diagnostic carries
(`docs/errors.md#e-gen-002`) lands on it; every code the doc has a section
for exists; each section links at least one case file that expects its code;
and every code is expected by some case in tests/cases or tests/cases-files.
"""
from __future__ import annotations

import pytest

from helpers import ERRORS_DOC as DOC
from helpers import ROOT, errors_doc_sections as sections, expected_codes, linked_cases
from sexpgpu_lang.diagnostics import CODES, doc_anchor

CASE_DIRS = (ROOT / "tests" / "cases", ROOT / "tests" / "cases-files")
FAMILIES = ("syntax", "names", "forms", "types", "shapes", "generation", "contract", "models", "warnings")


def test_every_code_has_its_section():
    got = sections()
    missing = [c for c in CODES if c not in got]
    assert not missing, f"docs/errors.md has no section for {missing}"


def test_every_section_is_a_code():
    unknown = [c for c in sections() if c not in CODES]
    assert not unknown, f"docs/errors.md has sections for codes not in CODES: {unknown}"


@pytest.mark.parametrize("code", list(CODES))
def test_section_heading_anchor_and_case(code):
    sec = sections().get(code)
    assert sec is not None, f"docs/errors.md has no section for {code}"
    assert sec["title"] == CODES[code], f"{code}: heading title {sec['title']!r}, CODES says {CODES[code]!r}"
    assert sec["anchor"] == doc_anchor(code), \
        f'{code}: put `<a id="{doc_anchor(code)}"></a>` on the line before its heading'
    assert "```lisp" in sec["body"], f"{code}: the section has no ```lisp snippet"
    assert "**Fix:**" in sec["body"], f"{code}: the section does not say how to fix it"
    cases = linked_cases(sec["body"])
    assert cases, f"{code}: the section links no case under tests/cases"
    for case in cases:
        link = case.relative_to(ROOT)
        assert case.is_file(), f"{code}: linked case {link} does not exist"
        assert code in expected_codes(case), f"{code}: linked case {link} does not expect {code}"


def test_family_anchors():
    text = DOC.read_text(encoding="utf-8")
    for fam in FAMILIES:
        assert f'<a id="{fam}"></a>' in text, f"docs/errors.md has no `#{fam}` anchor"


def test_every_code_has_a_case():
    seen: set[str] = set()
    for d in CASE_DIRS:
        for f in sorted(d.glob("*.sx")):
            seen |= expected_codes(f)
    missing = [c for c in CODES if c not in seen]
    assert not missing, f"no case in tests/cases or tests/cases-files expects {missing}"
