"""The front end's layout: each diagnostic code of the generator and of the phases' contracts has one home,
and the checker's modules and the language's schema stay small.

Covered: every E-GEN-001..005 is given as the code of a diagnostic (a string literal passed to a
call) in `sexpgpu_lang/check/generate.py` only, and every E-CONTRACT code of `diagnostics.CODES`
in `sexpgpu_lang/check/contracts.py` only, every E-SAMPLE code in `check/samples.py` only, every E-REWARD
code in `check/reward.py` only (a code compared or listed elsewhere, as
`diagnostics.CODES` and the quick fixes do, decides nothing); every special form of
`language.SPECIAL_FORMS` has one rule in `check/infer.py`; and each module of `sexpgpu_lang/check/`
and `sexpgpu_lang/language.py` has at most 800 lines (the other modules of `sexpgpu_lang` are
outside this test).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from sexpgpu_lang.check.infer import SPECIAL_RULES
from sexpgpu_lang.diagnostics import CODES
from sexpgpu_lang.language import SPECIAL_FORMS

ROOT = Path(__file__).resolve().parents[1]
LANG = ROOT / "sexpgpu_lang"
CODE = re.compile(r"E-(GEN|CONTRACT|SAMPLE|REWARD)-\d{3}\Z")
MAX_LINES = 800


def decided_codes() -> dict[str, set[str]]:
    """Each E-GEN, E-CONTRACT and E-SAMPLE code given as a string literal argument of a call in `sexpgpu_lang`,
    with the modules (paths relative to the package) that give it."""
    out: dict[str, set[str]] = {}
    for path in sorted(LANG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and CODE.match(arg.value):
                    out.setdefault(arg.value, set()).add(path.relative_to(LANG).as_posix())
    return out


def test_each_generator_code_is_decided_in_generate_only():
    codes = decided_codes()
    for n in range(1, 7):
        assert codes.get(f"E-GEN-00{n}") == {"check/generate.py"}, (f"E-GEN-00{n}", codes.get(f"E-GEN-00{n}"))
    assert {c for c in codes if c.startswith("E-GEN-")} == {f"E-GEN-00{n}" for n in range(1, 7)}


def test_each_contract_code_is_decided_in_contracts_only():
    codes = {c: where for c, where in decided_codes().items() if c.startswith("E-CONTRACT-")}
    assert set(codes) == {c for c in CODES if c.startswith("E-CONTRACT-")}
    for code, where in codes.items():
        assert where == {"check/contracts.py"}, (code, where)


def test_each_samples_code_is_decided_in_samples_only():
    codes = {c: where for c, where in decided_codes().items() if c.startswith("E-SAMPLE-")}
    assert set(codes) == {c for c in CODES if c.startswith("E-SAMPLE-")} == {"E-SAMPLE-001", "E-SAMPLE-002",
                                                                             "E-SAMPLE-003"}
    for code, where in codes.items():
        assert where == {"check/samples.py"}, (code, where)


def test_each_reward_code_is_decided_in_reward_only():
    codes = {c: where for c, where in decided_codes().items() if c.startswith("E-REWARD-")}
    assert set(codes) == {c for c in CODES if c.startswith("E-REWARD-")} == {f"E-REWARD-00{n}" for n in range(1, 5)}
    for code, where in codes.items():
        assert where == {"check/reward.py"}, (code, where)


def test_every_special_form_has_one_rule():
    assert list(SPECIAL_RULES) == list(SPECIAL_FORMS)


def test_the_checker_and_the_schema_are_small_modules():
    paths = sorted((LANG / "check").glob("*.py")) + [LANG / "language.py"]
    assert len(paths) > 10
    for path in paths:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines"
