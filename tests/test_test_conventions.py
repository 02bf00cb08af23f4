"""How the tests build run files, held by counts: string surgery on whole run files (`variant()`
calls and `.replace()` of run-file text) stays at or under its ceiling, no test file defines its
own `run` (helpers.run trains a run file in this process; tests/runfile.py's `RunFile` changes a
run file by form name), and no test file evaluates an expression with the runtime's lowering
itself (helpers.evaluate_expression and helpers.lowered_expression check and evaluate one).

`python tests/test_test_conventions.py` prints the counts, file by file (what the ceilings were
set from). Lower a ceiling when a change brings its count down; a new test that needs a changed
run file uses `RunFile` (`set`, `drop`, `add`, `edit`, `mark`) or a `;; ^^^ CODE` marked file
through `helpers.check`.
"""
from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: The counts over tests/ (every .py below it) when the ceilings were last lowered.
VARIANT_CEILING = 72
REPLACE_CEILING = 170

#: Characters one of which a `.replace()`'s first argument has when it is run-file text (a form, a
#: keyword, two tokens); a literal without any (`"$0"`, `"PATH"`, `"-"`) is a placeholder or a
#: name, not surgery on a run file.
_RUN_FILE_CHARACTERS = set("(): \n")


def _calls(path: Path):
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)]


def is_variant(call: ast.Call) -> bool:
    """`variant(old, new[, text])` (tests/helpers.py): the first `old` in a run file replaced by `new`."""
    return isinstance(call.func, ast.Name) and call.func.id == "variant"


def is_run_file_replace(call: ast.Call) -> bool:
    """`x.replace(old, new)` where `old` is not a literal free of run-file characters (a
    placeholder such as `"PATH"` or `"$0"`, a path, a separator)."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "replace" and call.args):
        return False
    old = call.args[0]
    return not (isinstance(old, ast.Constant) and isinstance(old.value, str)
                and not _RUN_FILE_CHARACTERS & set(old.value))


def surgery_counts(root: Path = TESTS) -> dict[str, Counter]:
    """{"variant": per-file count, "replace": per-file count} over every .py below `root`."""
    out = {"variant": Counter(), "replace": Counter()}
    for path in sorted(root.rglob("*.py")):
        name = str(path.relative_to(root))
        for call in _calls(path):
            out["variant"][name] += is_variant(call)
            out["replace"][name] += is_run_file_replace(call)
    return out


def run_definitions(root: Path = TESTS) -> list[str]:
    """`file:line` of each function named `run` a test file defines (tests/helpers.py's is the one)."""
    found = []
    for path in sorted(root.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("run", "_run"):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_string_surgery_on_run_files_stays_under_its_ceiling():
    counts = surgery_counts()
    for kind, ceiling in (("variant", VARIANT_CEILING), ("replace", REPLACE_CEILING)):
        total = sum(counts[kind].values())
        assert total <= ceiling, (
            f"{total} {kind} calls on run-file text in tests/, over the ceiling of {ceiling}: build the new test's run "
            f"file with tests/runfile.py's RunFile (change a form by name) or a marked file through helpers.check; "
            f"the heaviest files: {counts[kind].most_common(5)}")


def own_evaluations(root: Path = TESTS) -> list[str]:
    """`file:line` of each place a test file evaluates an expression with the runtime's lowering
    itself: an import of its `evaluate` (`from sexpgpu_runtime.lowering.lowering import evaluate`)
    or a call of a function or method named `evaluate` (tests/helpers.py's is the one)."""
    found = []
    for path in sorted(root.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            imported = isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sexpgpu_runtime") \
                and any(a.name == "evaluate" for a in node.names)
            called = isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "evaluate")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "evaluate"))
            if imported or called:
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_test_file_defines_its_own_run():
    assert run_definitions() == [], "train a run file with helpers.run (in this process) instead of a file's own `run`"


def test_no_test_file_checks_and_evaluates_an_expression_itself():
    assert own_evaluations() == [], (
        "check and evaluate an expression with helpers.evaluate_expression (its value as NumPy) or "
        "helpers.lowered_expression (a function to jit or differentiate), not the lowering's `evaluate`")


def test_the_counters_see_what_they_count(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "t = variant('(a)', '(b)')\nu = t.replace(':every 1', ':every 2').replace('PATH', p)\n"
        "v = text.replace(old, new)\ndef run(x):\n    pass\n")
    (tmp_path / "test_y.py").write_text(
        "from sexpgpu_runtime.lowering.lowering import Effects, evaluate\n"
        "from sexpgpu_runtime.lowering import lowering\n"
        "out = lowering.evaluate(e, env, fx)\nhelpers.evaluate_expression('(sum x)', env)\n")
    counts = surgery_counts(tmp_path)
    assert (counts["variant"]["test_x.py"], counts["replace"]["test_x.py"]) == (1, 2)
    assert run_definitions(tmp_path) == ["test_x.py:4"]
    assert own_evaluations(tmp_path) == ["test_y.py:1", "test_y.py:3"]


if __name__ == "__main__":
    counts = surgery_counts()
    for kind in counts:
        print(f"{kind}: {sum(counts[kind].values())}")
        for name, n in counts[kind].most_common():
            if n:
                print(f"  {n:4d} {name}")
    print("run definitions:", run_definitions() or "none")
    print("own evaluations:", own_evaluations() or "none")
    sys.exit(0)
