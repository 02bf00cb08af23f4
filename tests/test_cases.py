"""Run-file cases: every `.sx` under `tests/cases` gives exactly the diagnostics its
`;; expect:` header names, as `sexpgpu lint` checks them (opening no other file);
every `.sx` under `tests/cases-files` does so checked as `sexpgpu run` checks
(`read_files=True`: their `:pretrained` files are read, for E-MODEL-003).

The header rules are those of `../shared/tools/check_cases.py` (see
`tests/cases/README.md`): `;; expect: CODE LINE` is an error or warning with
that code whose range starts on that 1-based line (`LINE:COL` is allowed, the
column is ignored), `CODE` alone matches any line, `CODE-*` matches a family, and
`;; expect: clean` means no error and no warning. The errors and warnings the
file gives must be exactly the expected multiset: nothing missing, nothing more.
Information and hints are compared only where the header names their code (a
W- code reported as information or a hint, such as W-RAND-003, has a case of
its own); check_cases.py compares errors and warnings only.

Each case runs in-process through `sexpgpu_lang.analyze_file` (one test per
file); one more test reads `sexpgpu lint --format json` on tests/cases, as
check_cases.py reads it, so the CLI's JSON is checked too. The shared cases
(`../shared/cases`, not in a clone of the project) are checked by `.ci/run`
with `check_cases.py` itself.
"""
from __future__ import annotations

import fnmatch
import json
import subprocess
from pathlib import Path

import pytest

from helpers import case_expectations, sexpgpu_program
from sexpgpu_lang import analyze_file

REPO = Path(__file__).resolve().parents[1]
OUR_CASES = REPO / "tests" / "cases"
FILE_CASES = REPO / "tests" / "cases-files"

def compared(severity: str, code: str, header: set[str]) -> bool:
    """Whether a diagnostic is compared with a case's header (`header`: the codes it names):
    every error and warning, and information or a hint whose code the header names."""
    return severity in ("error", "warning") or code in header


def reported(path: Path, read_files: bool = False) -> list[tuple[str, int, str]]:
    """(code, 1-based line, message) of every diagnostic the checker gives that is `compared`."""
    res = analyze_file(str(path), read_files)
    header = {code for code, _ in case_expectations(path)[0]}
    return [(d.code, res.source.line_col(d.span.start)[0] + 1, d.message)
            for d in res.diagnostics if compared(d.severity.label, d.code, header)]


def unmatched(expected, got) -> tuple[list, list]:
    """Expected entries with no diagnostic, and diagnostics nothing expected.

    Exact codes are matched before family patterns, so `E-GEN-002 40` and
    `E-GEN-* 40` on one line both find their diagnostic whatever their order."""
    left = list(got)
    missing = []
    for code, line in sorted(expected, key=lambda e: "*" in e[0]):
        hit = next((g for g in left if fnmatch.fnmatchcase(g[0], code) and (line is None or g[1] == line)), None)
        if hit is None:
            missing.append((code, line))
        else:
            left.remove(hit)
    return missing, left


def case_files() -> list:
    return ([pytest.param(p, id=f"ours/{p.name}") for p in sorted(OUR_CASES.glob("*.sx"))]
            + [pytest.param(p, id=f"files/{p.name}") for p in sorted(FILE_CASES.glob("*.sx"))])


@pytest.mark.parametrize("path", case_files())
def test_case(path: Path):
    expected, _clean = case_expectations(path)
    got = reported(path, read_files=path.parent == FILE_CASES)
    missing, extra = unmatched(expected, [(c, l, m) for c, l, m in got])
    if missing or extra:
        lines = [f"{path}:"]
        lines += [f"  missing  {c} {'any line' if l is None else f'line {l}'}" for c, l in missing]
        lines += [f"  extra    {c} line {l}: {m}" for c, l, m in extra]
        lines += ["  all diagnostics:"] + [f"    {c} line {l}: {m}" for c, l, m in got]
        pytest.fail("\n".join(lines), pytrace=False)


def test_our_cases_exist():
    assert len(list(OUR_CASES.glob("*.sx"))) > 0, f"no cases in {OUR_CASES}"
    assert len(list(FILE_CASES.glob("*.sx"))) > 0, f"no cases in {FILE_CASES}"


def test_file_cases_are_silent_when_no_file_is_read():
    # what `sexpgpu lint` sees: the `:pretrained` files are not opened, so nothing is reported (the server
    # reads the headers of the checkpoints on its machine: tests/test_lsp_pretrained.py)
    for path in sorted(FILE_CASES.glob("*.sx")):
        assert not [c for c, _, _ in reported(path) if c == "E-MODEL-003"], path.name


def test_lint_json_gives_every_case_its_expectations():
    """`sexpgpu lint --format json` on every case of tests/cases at once, each error and
    warning read as check_cases.py reads it (`file`, `code`, `line`, `severity`)."""
    paths = sorted(OUR_CASES.glob("*.sx"))
    program = sexpgpu_program()
    assert program, "the `sexpgpu` command is not installed (pip install -e . in the venv)"
    proc = subprocess.run([program, "lint", "--format", "json", *map(str, paths)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), f"sexpgpu lint exited {proc.returncode}\n{proc.stderr}"
    got: dict[str, list] = {str(p): [] for p in paths}
    headers = {str(p): {code for code, _ in case_expectations(p)[0]} for p in paths}
    for d in json.loads(proc.stdout):
        if compared(d["severity"], d["code"], headers[d["file"]]):
            got[d["file"]].append((d["code"], d["line"], d["message"]))
    wrong = {}
    for path in paths:
        missing, extra = unmatched(case_expectations(path)[0], got[str(path)])
        if missing or extra:
            wrong[path.name] = {"missing": missing, "extra": extra}
    assert not wrong, wrong
