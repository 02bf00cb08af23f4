"""ARCHITECTURE.md's code map names every module, and the rules it states about the code hold.

The code map: every .py under sexpgpu_lang, sexpgpu_runtime, sexpgpu_cli and lsp is named, in
backticks, in the section of its folder (a `### `/`#### ` heading naming the folder, such as
`` `sexpgpu_runtime/run/` ``): as `name.py` where the folder has its own section, or, for a
folder described in a row of its parent's section (`` `ide/` ``), as `name` or `name.py` on
that row.

The rules: every exception class of the runtime is defined in `sexpgpu_runtime/errors.py`; product
code imports no private module of a dependency (`typer._coercion`, `jax._src`, ...), but for the
one named below with its reason.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sexpgpu_lang", "sexpgpu_runtime", "sexpgpu_cli", "lsp")
OURS = set(PACKAGES)
#: Private modules of a dependency still imported, each with why: XLA's cost analysis of one
#: computation of a compiled module's text has no public API (`explain --xla` only). The import is
#: guarded (a jax without them counts each loop once and says so) and the versions are pinned
#: (`PINNED`, checked below).
PRIVATE_IMPORTS_LEFT = {("sexpgpu_runtime/lowering/xla_loops.py", "jax._src.lib"),
                        ("sexpgpu_runtime/lowering/xla_loops.py", "jaxlib._hlo")}
#: The distributions whose private modules `PRIVATE_IMPORTS_LEFT` names: each needs an upper bound.
PINNED = ("jax", "jaxlib")


def code_map_sections(text: str) -> dict[str, list[str]]:
    """The code map's sections by the folder their heading names (`sexpgpu_runtime/run`), each as its lines."""
    body = text.split("## Code map", 1)[1].split("\n## ", 1)[0]
    sections: dict[str, list[str]] = {}
    current = None
    for line in body.splitlines():
        m = re.match(r"#{3,4} `([\w/]+?)/?`", line)
        if m:
            current = sections.setdefault(m.group(1), [])
        elif line.startswith("#"):
            current = None
        elif current is not None:
            current.append(line)
    return sections


def missing_from(sections: dict[str, list[str]], module: Path) -> bool:
    """Whether `module` (a path relative to the repository) is not named where the code map says it is."""
    folder = module.parent.as_posix()
    name = module.name
    stem = module.stem
    ancestor = folder
    while ancestor and ancestor not in sections:
        ancestor = ancestor.rpartition("/")[0]
    if not ancestor:
        return True
    lines = sections[ancestor]
    if ancestor == folder:
        return not any(re.search(rf"`{re.escape(name)}`", line) for line in lines)
    sub = folder[len(ancestor) + 1:]
    return not any(f"`{sub}/`" in line and re.search(rf"`{re.escape(stem)}(\.py)?`", line) for line in lines)


def product_modules() -> list[Path]:
    return sorted(p.relative_to(ROOT) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                  if "__pycache__" not in p.parts)


def test_every_module_is_in_the_code_map():
    sections = code_map_sections((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert {"sexpgpu_lang", "sexpgpu_runtime/run", "sexpgpu_cli", "lsp"} <= set(sections)
    missing = [m.as_posix() for m in product_modules() if m.name != "__init__.py" and missing_from(sections, m)]
    assert not missing, f"not in ARCHITECTURE.md's code map: {missing}"


def test_the_code_map_check_sees_a_missing_module():
    sections = code_map_sections("## Code map\n\n### `pkg/`\n\n| `a.py` | ... |\n| `sub/` | `b`, `c` |\n\n## Next\n")
    assert not missing_from(sections, Path("pkg/a.py")) and not missing_from(sections, Path("pkg/sub/b.py"))
    assert missing_from(sections, Path("pkg/d.py")) and missing_from(sections, Path("pkg/sub/d.py"))
    assert missing_from(sections, Path("other/a.py"))


def test_every_runtime_exception_is_defined_in_errors():
    elsewhere = []
    for path in sorted((ROOT / "sexpgpu_runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and path.name != "errors.py":
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & {"Exception", "BaseException", "AssertionError", "ValueError", "RuntimeError"} or \
                        any(b.endswith("Error") for b in bases):
                    elsewhere.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not elsewhere, elsewhere


def test_no_private_module_of_a_dependency_is_imported():
    found = set()
    for module in product_modules():
        for node in ast.walk(ast.parse((ROOT / module).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [(a.name, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [(node.module, f"{node.module}.{a.name}") for a in node.names]   # `from jaxlib import _hlo`
            else:
                continue
            for shown, name in names:
                parts = name.split(".")
                if parts[0] not in OURS and parts[0] not in sys.stdlib_module_names \
                        and any(p.startswith("_") and p != "__future__" for p in parts):
                    found.add((module.as_posix(), shown if any(p.startswith("_") for p in shown.split(".")) else name))
    assert found == PRIVATE_IMPORTS_LEFT, found ^ PRIVATE_IMPORTS_LEFT


#: Private attributes of a dependency still used, each with why: the same computation of a compiled
#: module as `PRIVATE_IMPORTS_LEFT` (xla_loops.py, guarded and pinned).
PRIVATE_ATTRIBUTES_LEFT = {("sexpgpu_runtime/lowering/xla_loops.py", "xla_client._xla")}


def test_no_private_attribute_of_a_dependency_is_used():
    """`x._name` where no product module defines `_name` (a function, class, attribute it assigns,
    name or parameter): a dependency's private attribute (`self._send_response` in a subclass of
    pygls's protocol was one). A standard-library module's (`os._exit`, documented) is allowed."""
    trees = {m: ast.parse((ROOT / m).read_text(encoding="utf-8")) for m in product_modules()}
    ours = set()
    for tree in trees.values():
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ours.add(n.name)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                ours.add(n.attr)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                ours.add(n.id)
            elif isinstance(n, ast.arg):
                ours.add(n.arg)
    found = set()
    for m, tree in trees.items():
        for n in ast.walk(tree):
            if (isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
                    and n.attr not in ours
                    and not (isinstance(n.value, ast.Name) and n.value.id in sys.stdlib_module_names)):
                found.add((m.as_posix(), ast.unparse(n)))
    assert found == PRIVATE_ATTRIBUTES_LEFT, found ^ PRIVATE_ATTRIBUTES_LEFT


def test_a_dependency_whose_private_module_is_imported_has_an_upper_bound_the_installed_one_meets():
    import tomllib
    from importlib.metadata import version
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    for dist in PINNED:
        spec = next(d for d in deps if re.match(rf"{dist}\b(?![-\w])", d))
        m = re.search(r"<(\d+)\.(\d+)", spec)
        assert m, f"{spec!r}: give {dist} an upper bound (`<0.N`), the versions its private API was tested with"
        major, minor = (int(x) for x in version(dist).split(".")[:2])
        assert (major, minor) < (int(m.group(1)), int(m.group(2))), (dist, version(dist), spec)


#: Files of the design this project was started from, which live outside the repository: the code
#: and its docs cite docs/dev/ (this project's own words) instead.
OUTSIDE = ("DESIGN.md", "STYLE.md", "spec/generation.md")


def test_no_code_or_doc_cites_a_file_outside_the_repository():
    places = [p for pkg in (*PACKAGES, "tests", "scripts", "benchmarks") for p in (ROOT / pkg).rglob("*")
              if p.suffix in (".py", ".lark", ".sx", ".md") and p.is_file()]
    places += [*(ROOT / "docs").rglob("*.md"), ROOT / "ARCHITECTURE.md", ROOT / "README.md", ROOT / "BENCHMARKS.md"]
    cited = [f"{p.relative_to(ROOT)}: {name}" for p in places for name in OUTSIDE
             if name in p.read_text(encoding="utf-8", errors="replace") and p.name != Path(__file__).name]
    assert cited == [], "cite docs/dev/design.md or docs/dev/style.md instead:\n" + "\n".join(cited)


def test_a_context_row_is_spelled_in_one_place():
    """The order of a context row's values is `lowering/context.context_row`'s alone: no other module
    builds a row tuple by position."""
    spelled = [str(m) for m in product_modules() if m.parts[0] == "sexpgpu_runtime"
               and m.as_posix() != "sexpgpu_runtime/lowering/context.py"
               and re.search(r"np\.array\(\[\(step", (ROOT / m).read_text(encoding="utf-8"))]
    assert spelled == []
    from sexpgpu_lang.language import CONTEXT_KEYS
    from sexpgpu_runtime.lowering.context import context_row, make_ctx
    assert list(make_ctx(3, 1, 64, 2, 16, 1)) == [k for k, _ in CONTEXT_KEYS]
    assert context_row(3, 1, 64) == (3, 1, 64, 0, 64, 0)
