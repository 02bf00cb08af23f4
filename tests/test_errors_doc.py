"""The diagnostic records (`sexpgpu_lang.diagnostic_docs`), the codes and docs/errors.md agree,
and every code has a checked example.

Each code in `sexpgpu_lang.diagnostics.CODES` has one record (its family's folder
holds `CODE.md`), and every record is a code. Each record explains the code with a
```lisp excerpt and says how to fix it, and has at least one example: a marked run
file beside it (`CODE.sx`, `CODE.SLUG.sx`) or a case under tests/cases-files whose
header expects the code. On the generated page (scripts/gen_errors_doc.py) each code
has a section headed `## CODE: title` (its title as in CODES), preceded by an explicit
`<a id="code"></a>` so that the link every diagnostic carries
(`docs/errors.md#e-gen-002`) lands on it, and each family its anchor.
"""
from __future__ import annotations

import pytest

from helpers import ERRORS_DOC as DOC
from helpers import ROOT, errors_doc_sections as sections, expected_codes, linked_cases
from sexpgpu_lang.diagnostic_docs import FAMILIES, HERE, family, records
from sexpgpu_lang.diagnostics import CODES, doc_anchor

FILE_CASES = ROOT / "tests" / "cases-files"
RECORDS = records()


def file_cases(code: str) -> list:
    return [p for p in sorted(FILE_CASES.glob("*.sx")) if code in expected_codes(p)]


def test_every_code_has_a_record():
    missing = [c for c in CODES if c not in RECORDS]
    assert not missing, f"no record in sexpgpu_lang/diagnostic_docs/FAMILY/CODE.md for {missing}"


def test_every_folder_is_a_family_and_every_file_a_record_or_example():
    folders = sorted(p.name for p in HERE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(FAMILIES), f"families {sorted(FAMILIES)}, folders {folders}"
    for name in FAMILIES:
        assert family(name).title, name
        for p in (HERE / name).iterdir():
            if p.is_dir():
                continue          # files the examples read (config/checkpoints/)
            stem = p.name.split(".")[0]
            assert p.name == "_family.md" or (stem in RECORDS and p.suffix in (".md", ".sx")), \
                f"{name}/{p.name} is neither a record, an example of one, nor _family.md"


@pytest.mark.parametrize("code", list(CODES))
def test_record_explains_fixes_and_has_an_example(code):
    rec = RECORDS[code]
    assert "```lisp" in rec.explanation, f"{code}: the record has no ```lisp excerpt"
    assert rec.fix, f"{code}: the record does not say how to fix it"
    assert rec.examples or file_cases(code), f"{code}: no example ({code}.sx beside the record)"
    for case in file_cases(code):
        assert code in expected_codes(case)


def test_every_section_is_a_code():
    unknown = [c for c in sections() if c not in CODES]
    assert not unknown, f"docs/errors.md has sections for codes not in CODES: {unknown}"


@pytest.mark.parametrize("code", list(CODES))
def test_section_heading_anchor_and_examples(code):
    sec = sections().get(code)
    assert sec is not None, f"docs/errors.md has no section for {code}: run python scripts/gen_errors_doc.py --write"
    assert sec["title"] == CODES[code], f"{code}: heading title {sec['title']!r}, CODES says {CODES[code]!r}"
    assert sec["anchor"] == doc_anchor(code), \
        f'{code}: the section needs `<a id="{doc_anchor(code)}"></a>` on the line before its heading'
    assert "**Fix:**" in sec["body"], f"{code}: the section does not say how to fix it"
    links = linked_cases(sec["body"])
    assert links == [*RECORDS[code].examples, *file_cases(code)], f"{code}: the section links {links}"
    for link in links:
        assert link.is_file(), f"{code}: linked example {link} does not exist"


def test_family_anchors():
    text = DOC.read_text(encoding="utf-8")
    for fam in FAMILIES:
        assert f'<a id="{fam}"></a>' in text, f"docs/errors.md has no `#{fam}` anchor"


def test_every_code_is_exercised():
    """Every code is marked in a record's example (tests/test_errors_examples.py checks each gives
    exactly its markers) or expected by a case under tests/cases or tests/cases-files."""
    seen: set[str] = set()
    for d in (ROOT / "tests" / "cases", FILE_CASES):
        for f in sorted(d.glob("*.sx")):
            seen |= expected_codes(f)
    for rec in RECORDS.values():
        for example in rec.examples:
            if f" {rec.code}" in example.read_text(encoding="utf-8"):
                seen.add(rec.code)
    missing = [c for c in CODES if c not in seen]
    assert not missing, f"no example or case expects {missing}"
