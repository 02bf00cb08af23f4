"""The runtime's surface (`sexpgpu_runtime/__init__.py`, ARCHITECTURE.md "The runtime's surface"):
what it exports, and who may reach past it.

The rule, checked on the source with `ast` (imports inside functions included):
- the CLI (`sexpgpu_cli/`) imports the runtime only as `sexpgpu_runtime`, never a module inside it;
- the front end (`sexpgpu_lang/`) and the language server (`lsp/`) never import the runtime;
- the tests, the benchmarks and the scripts import every name the surface exports from the surface;
  a module inside the runtime is imported only for what the surface leaves out (the unit a test
  tests: `Loader` of data/loaders.py, `evaluate` of lowering/lowering.py, ...), by its module
  (`from sexpgpu_runtime.run import checkpoint`) or a name of it that the surface does not export.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "sexpgpu_runtime"


def surface_names() -> set[str]:
    """`__all__` of sexpgpu_runtime/__init__.py, read from the source (no JAX imported)."""
    tree = ast.parse((RUNTIME / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("sexpgpu_runtime/__init__.py has no __all__")


def is_module(dotted: str) -> bool:
    """Whether `sexpgpu_runtime.x.y` names a module or package of the runtime."""
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def runtime_imports(source: str) -> list[tuple[int, str, str | None]]:
    """Every import of the runtime in `source`: (line, module, name imported from it or None)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "sexpgpu_runtime"]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] == "sexpgpu_runtime":
            out += [(node.lineno, node.module, a.name) for a in node.names]
    return out


def past_the_surface(source: str, surface: set[str]) -> list[str]:
    """The imports of `source` that break the rule for tests, benchmarks and scripts: a name the
    surface exports, imported from a module inside the runtime."""
    bad = []
    for line, module, name in runtime_imports(source):
        if module != "sexpgpu_runtime" and name in surface and not is_module(f"{module}.{name}"):
            bad.append(f"{line}: from {module} import {name}")
    return bad


def deep(source: str) -> list[str]:
    """The imports of `source` that name a module inside the runtime (anything but `sexpgpu_runtime`)."""
    return [f"{line}: {module}" + (f" import {name}" if name else "")
            for line, module, name in runtime_imports(source)
            if module != "sexpgpu_runtime" or (name is not None and is_module(f"{module}.{name}"))]


def sources(*folders: str) -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
            for folder in folders for p in sorted((ROOT / folder).rglob("*.py")) if "__pycache__" not in p.parts}


def test_the_rule_sees_each_kind_of_import():
    surface = {"train", "RunOptions"}
    src = ("import sexpgpu_runtime\n"
           "from sexpgpu_runtime import RunOptions, train\n"
           "def f():\n"
           "    from sexpgpu_runtime.run.train import RunOptions, Trainer\n"   # RunOptions: past the surface
           "    from sexpgpu_runtime.run import train\n"                       # the module, not the function
           "    import sexpgpu_runtime.run.loop as loop\n")
    assert past_the_surface(src, surface) == ["4: from sexpgpu_runtime.run.train import RunOptions"]
    assert deep(src) == ["4: sexpgpu_runtime.run.train import RunOptions", "4: sexpgpu_runtime.run.train import Trainer",
                         "5: sexpgpu_runtime.run import train", "6: sexpgpu_runtime.run.loop"]


def test_the_surface_exports_what_it_says_and_defines_nothing():
    tree = ast.parse((RUNTIME / "__init__.py").read_text(encoding="utf-8"))
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    names = surface_names()
    assert names <= imported, names - imported
    assert {"train", "RunOptions", "RunResult", "RunError", "OptionError", "RunStopped", "RunFinished", "MeshError",
            "parse_mesh", "device_budget", "xla_report"} <= names
    assert not [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


def test_the_cli_imports_only_the_surface():
    found = {path: deep(text) for path, text in sources("sexpgpu_cli").items()}
    found = {path: bad for path, bad in found.items() if bad}
    assert not found, found
    assert any(runtime_imports(text) for text in sources("sexpgpu_cli").values())   # (it does use the runtime)


def test_the_front_end_and_the_server_import_no_runtime():
    found = {path: runtime_imports(text) for path, text in sources("sexpgpu_lang", "lsp").items()}
    assert not {path: i for path, i in found.items() if i}


@pytest.mark.parametrize("folder", ["tests", "benchmarks", "scripts"])
def test_what_the_surface_exports_is_imported_from_it(folder):
    surface = surface_names()
    found = {path: past_the_surface(text, surface) for path, text in sources(folder).items()}
    found = {path: bad for path, bad in found.items() if bad}
    assert not found, found


def test_the_surface_in_a_process():
    """The names are there once imported (the source check above reads no module)."""
    import sexpgpu_runtime
    assert set(sexpgpu_runtime.__all__) == surface_names()
    assert all(getattr(sexpgpu_runtime, n, None) is not None for n in sexpgpu_runtime.__all__)
