"""Write, in each docs/errors.md section, the message its first linked case gives.

Each `## CODE: title` section links case files under **Case:**; this lints
the first one (in-process, with `read_files` for tests/cases-files) and puts
the first diagnostic of that code, as `sexpgpu lint` prints its first line,
in a `**Message:**` line just before **Case:**. `--check` exits 1 when the
page differs (tests/test_errors_examples.py runs it).

    python scripts/gen_error_messages.py --write | --check
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DOC = REPO / "docs" / "errors.md"

from sexpgpu_lang import analyze_file  # noqa: E402


def message_for(code: str, case: Path) -> str | None:
    res = analyze_file(str(case), read_files="cases-files" in str(case))
    for d in res.diagnostics:
        if d.code == code:
            line, col = res.source.line_col(d.span.start)
            return f"{case.name}:{line + 1}:{col + 1}: {d.severity.label}[{d.code}]: {d.message}"
    return None


def rewritten(text: str) -> str:
    lines, skip = [], False
    for l in text.splitlines():
        if l.startswith("**Message:**"):
            skip = True          # drop it and the blank line after it: they are written anew
            continue
        if skip and l == "":
            skip = False
            continue
        skip = False
        lines.append(l)
    out, code = [], None
    for line in lines:
        m = re.match(r"## ([EW]-[A-Z]+-\d{3}): ", line)
        if m:
            code = m.group(1)
        if line.startswith("**Case:**") and code:
            link = re.search(r"\]\((\.\./tests/cases(?:-files)?/[^)]+\.sx)\)", line)
            msg = message_for(code, (DOC.parent / link.group(1)).resolve()) if link else None
            if msg:
                out += ["**Message:** `" + msg.replace("`", "'") + "`", ""]
        out.append(line)
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    a = ap.parse_args()
    new = rewritten(DOC.read_text(encoding="utf-8"))
    if a.write:
        DOC.write_text(new, encoding="utf-8")
        return 0
    return 0 if new == DOC.read_text(encoding="utf-8") else 1


if __name__ == "__main__":
    sys.exit(main())
