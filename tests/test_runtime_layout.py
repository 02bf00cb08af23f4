"""The runtime's layout: its import graph has no cycle, its sub-packages are layers, and no class in
it is over 200 lines.

The graph is built from the source with `ast`, so it holds every import a module makes: at
module level, inside a function (an import put there to dodge a cycle is still an edge) and under
`if TYPE_CHECKING:`. An edge goes from a module of `sexpgpu_runtime` to each module of
`sexpgpu_runtime` it names (`from .x import y`, `from ..pkg import x`, `import sexpgpu_runtime.x`);
a package's `__init__` counts as a module. What sits outside the runtime is no edge.

The layers, lowest first (ARCHITECTURE.md): the top-level modules (`errors`, `dtypes`, `paths`),
`data`, `devices`, `weights`, `lowering`, `run`, and on top the surface (the package's own
`__init__.py`, which re-exports what callers use); a module imports only its own sub-package's
modules and those of lower layers, so no module of the runtime imports the surface.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "sexpgpu_runtime"
MAX_CLASS_LINES = 200
#: "": the modules at the top of the runtime; "surface": `sexpgpu_runtime/__init__.py`.
LAYERS = ("", "data", "devices", "weights", "lowering", "run", "surface")


def module_name(path: Path, root: Path = ROOT) -> str:
    """`sexpgpu_runtime/run/train.py` -> `sexpgpu_runtime.run.train` (a package: its `__init__`'s name)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the runtime under `root` by its dotted name."""
    return {module_name(p, root): p for p in sorted((root / "sexpgpu_runtime").rglob("*.py"))}


def imported(path: Path, known: dict[str, Path], root: Path = ROOT) -> set[str]:
    """The runtime modules (of `known`) that the module at `path` imports anywhere in its body."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from pkg import mod` names a module; `from mod import name` names `mod`.
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:   # `import sexpgpu_runtime.run.train` also runs the packages above
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each runtime module under `root` and the runtime modules it imports."""
    known = modules(root)
    return {name: imported(path, known, root) for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `edges` as the list of its modules (the first repeated at the end), or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_graph_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "sexpgpu_runtime"
    (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "a.py", "sub/__init__.py", "sub/b.py", "sub/c.py"):
        (pkg / f).write_text("")
    (pkg / "sub/b.py").write_text("def f():\n    from ..a import x\n    from . import c\n")
    (pkg / "a.py").write_text("import sexpgpu_runtime.sub.b\nfrom sexpgpu_lang import ir\n")
    edges = graph(tmp_path)
    assert edges["sexpgpu_runtime.sub.b"] == {"sexpgpu_runtime.a", "sexpgpu_runtime.sub.c"}
    assert edges["sexpgpu_runtime.a"] == {"sexpgpu_runtime.sub.b"}
    assert find_cycle(edges) == ["sexpgpu_runtime.a", "sexpgpu_runtime.sub.b", "sexpgpu_runtime.a"]


def test_the_runtime_imports_have_no_cycle():
    edges = graph()
    assert "sexpgpu_runtime.run.train" in edges and edges["sexpgpu_runtime.run.train"]
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def layer(module: str) -> str:
    """`sexpgpu_runtime.run.train` -> "run"; a top-level module (`sexpgpu_runtime.errors`) -> "";
    the package itself (`sexpgpu_runtime`) -> "surface"."""
    parts = module.split(".")
    if len(parts) == 1:
        return "surface"
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else ""


def test_the_sub_packages_are_layers():
    edges = graph()
    assert {layer(m) for m in edges} == set(LAYERS), {layer(m) for m in edges}
    upward = sorted(f"{a} -> {b}" for a, bs in edges.items() for b in bs
                    if LAYERS.index(layer(b)) > LAYERS.index(layer(a)))
    assert not upward, upward


def test_no_runtime_class_is_over_200_lines():
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                size = node.end_lineno - first + 1
                if size > MAX_CLASS_LINES:
                    long.append(f"{name}.{node.name}: {size} lines")
    assert not long, long
