"""docs/ops.md is exactly what scripts/gen_ops_doc.py makes from the registries.

When an op, a special form or a doc line changes, regenerate the page with
`python scripts/gen_ops_doc.py --write` and commit it with the change.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sexpgpu_lang.check import SPECIAL_FORMS, TOP_FORMS
from sexpgpu_lang.ops import REGISTRY

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "ops.md"
SCRIPT = REPO / "scripts" / "gen_ops_doc.py"


def test_committed_ops_doc_equals_the_script_output():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert PAGE.is_file(), "docs/ops.md is missing: run python scripts/gen_ops_doc.py --write"
    assert PAGE.read_text(encoding="utf-8") == proc.stdout, \
        "docs/ops.md is stale: run python scripts/gen_ops_doc.py --write"


def test_every_op_and_form_is_on_the_page():
    text = PAGE.read_text(encoding="utf-8")
    for name in [*REGISTRY, *SPECIAL_FORMS, *TOP_FORMS]:
        assert f"| `{name}` |" in text, f"{name} is not in docs/ops.md"
    assert "(error)" not in text, "an op's example does not check"
