"""docs/errors.md and the codes agree, and every code has a run-file case.

Each code in `sexpgpu_lang.diagnostics.CODES` has a section in docs/errors.md
headed `## CODE: title` (its title as in CODES), preceded by an explicit
`<a id="code"></a>` so that the link every diagnostic carries
(`docs/errors.md#e-gen-002`) lands on it; every code the doc has a section
for exists; each section links at least one case file that expects its code;
and every code is expected by some case in tests/cases or tests/cases-files.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sexpgpu_lang.diagnostics import CODES, doc_anchor

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "errors.md"
CASE_DIRS = (REPO / "tests" / "cases", REPO / "tests" / "cases-files")
FAMILIES = ("syntax", "names", "forms", "types", "shapes", "generation", "contract", "models", "warnings")


def sections() -> dict[str, dict]:
    """Code -> {title, anchor (the `<a id>` on the line before, or None), body}."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
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


def expected_codes(path: Path) -> set[str]:
    codes = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith(";;"):
            break
        m = re.match(r";;\s*expect:\s*(\S+)", line)
        if m and m.group(1) != "clean":
            codes.add(m.group(1))
    return codes


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
    links = re.findall(r"\]\((\.\./tests/cases(?:-files)?/[^)]+\.sx)\)", sec["body"])
    assert links, f"{code}: the section links no case under tests/cases"
    for link in links:
        case = (DOC.parent / link).resolve()
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
