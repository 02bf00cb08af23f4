"""docs/ops.md names every op and form, and every example on it checks (tests/test_generated_files.py
checks that it is exactly what scripts/gen_ops_doc.py makes from the registries).

When an op, a special form or a doc line changes, regenerate the page with
`python scripts/gen_ops_doc.py --write` and commit it with the change.
"""
from __future__ import annotations

from pathlib import Path

from sexpgpu_lang.check import SPECIAL_FORMS, TOP_FORMS
from sexpgpu_lang.ops import REGISTRY

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "ops.md"


def test_every_op_and_form_is_on_the_page():
    text = PAGE.read_text(encoding="utf-8")
    for name in [*REGISTRY, *SPECIAL_FORMS, *TOP_FORMS]:
        assert f"| `{name}` |" in text, f"{name} is not in docs/ops.md"
    assert "(error)" not in text, "an op's example does not check"
