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

The run's parts receive what they use: no runtime class's attribute is assigned from outside the
class, the step loop reads only the `LoopParts` it is handed, the loop, the run's start and the
checkpoints never name the trainer, and only the checkpoint policy saves a checkpoint.
"""
from __future__ import annotations

import ast
import textwrap
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


# --------------------------------------------------------------------------- the run's parts

#: The product code whose assignments are checked: the runtime and the CLI (tests and benchmarks may
#: put a double in a part's place).
ASSIGNERS = ("sexpgpu_runtime", "sexpgpu_cli")


def class_attributes(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Each attribute a class of `trees` owns (assigned as `self.X` in its methods, or declared in its
    body: a dataclass field, a class variable), and the classes (`module.Class`) that own it."""
    owners: dict[str, set[str]] = {}
    for name, tree in trees.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            owned = set()
            for stmt in cls.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] \
                    if isinstance(stmt, ast.AnnAssign) else []
                owned |= {t.id for t in targets if isinstance(t, ast.Name)}
            for node in ast.walk(cls):
                for t in assigned(node):
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        owned.add(t.attr)
            for attr in owned:
                owners.setdefault(attr, set()).add(f"{name}.{cls.name}")
    return owners


def assigned(node: ast.AST) -> list[ast.expr]:
    """The targets `node` assigns (tuples and lists taken apart)."""
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        targets = [node.optional_vars]
    else:
        return []
    out = []
    while targets:
        t = targets.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            targets += t.elts
        elif isinstance(t, ast.Starred):
            targets.append(t.value)
        else:
            out.append(t)
    return out


def outside_assignments(owners: dict[str, set[str]], trees: dict[str, ast.Module]) -> list[str]:
    """Every `obj.X = ...` in `trees` where X is an attribute a runtime class owns (`owners`) and `obj`
    is not `self` (nor `cls` in a classmethod): an attribute set from outside its class."""
    out = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            for t in assigned(node):
                if isinstance(t, ast.Attribute) and t.attr in owners and not (
                        isinstance(t.value, ast.Name) and t.value.id in ("self", "cls")):
                    out.append(f"{name}:{t.lineno}: {ast.unparse(t)} = ... ({', '.join(sorted(owners[t.attr]))} own it)")
    return out


def parsed(packages=ASSIGNERS, root: Path = ROOT) -> dict[str, ast.Module]:
    return {module_name(p, root): ast.parse(p.read_text(encoding="utf-8"))
            for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def test_the_outside_assignment_check_sees_each_form():
    runtime = ast.parse(textwrap.dedent("""
        class Part:
            size: int = 0
            def __init__(self):
                self.done = None
                self.bad, self.draw = None, None
            def step(self):
                self.done = 1
    """))
    user = ast.parse(textwrap.dedent("""
        def run(part, other):
            part.done = 2
            other.inner.bad, x = 1, 2
            part.size += 1
            with open("f") as part.draw:
                pass
            other.unrelated = 3
            self_like = part
    """))
    owners = class_attributes({"rt.part": runtime})
    assert owners["done"] == {"rt.part.Part"} and "size" in owners
    found = outside_assignments(owners, {"rt.part": runtime, "user": user})
    assert [f.split(":")[1] for f in found] == ["3", "4", "5", "6"], found


def test_no_runtime_class_s_attribute_is_set_from_outside_it():
    """A part's attributes are set by the part alone: what it uses comes in through its constructor
    (or a method's arguments), never by another object writing into it."""
    owners = class_attributes(parsed(("sexpgpu_runtime",)))
    found = outside_assignments(owners, parsed())
    assert not found, "\n".join(found)


def names_used(tree: ast.AST) -> set[str]:
    """Every identifier `tree` uses: names, arguments, attributes, imported modules and names."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            out |= {node.module or ""} | {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_the_loop_start_and_checkpoints_know_nothing_of_the_trainer():
    """loop.py, start.py and the checkpoint modules are handed what they use; none names the trainer
    (train.py builds them and hands it over), so none can reach into its attributes."""
    for module in ("loop", "start", "checkpoint", "checkpoint_meta", "checkpoint_policy"):
        tree = ast.parse((RUNTIME / "run" / f"{module}.py").read_text(encoding="utf-8"))
        assert not {"train", "Trainer", "trainer", "tr"} & names_used(tree), module


def test_the_loop_reads_only_the_parts_it_is_handed():
    """Every attribute `Loop` reads of its `parts` is a field of the frozen `LoopParts`; the loop's
    other collaborators (reporter, checkpoint policy, sample log) are its constructor's arguments."""
    import dataclasses

    from sexpgpu_runtime.run.loop import Loop, LoopParts
    fields = {f.name for f in dataclasses.fields(LoopParts)}
    assert LoopParts.__dataclass_params__.frozen
    tree = ast.parse((RUNTIME / "run" / "loop.py").read_text(encoding="utf-8"))
    loop = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Loop")
    read = set()
    for fn in (n for n in loop.body if isinstance(n, ast.FunctionDef)):
        aliases = {"self.parts"}
        for node in ast.walk(fn):   # `parts = self.parts` (or in a tuple): an alias of the parts
            if isinstance(node, ast.Assign):
                pairs = zip(node.targets[0].elts, node.value.elts) if isinstance(node.targets[0], ast.Tuple) \
                    and isinstance(node.value, ast.Tuple) else [(node.targets[0], node.value)]
                aliases |= {ast.unparse(t) for t, v in pairs if ast.unparse(v) in aliases}
        read |= {node.attr for node in ast.walk(fn)
                 if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases}
    assert read and read <= fields, read - fields
    import inspect
    assert list(inspect.signature(Loop).parameters) == ["parts", "reporter", "last", "checkpoints", "samples"]


def test_the_checkpoint_policy_is_the_one_caller_of_a_store_s_save():
    """When and what to save is decided in checkpoint_policy.py alone: no other module of the
    runtime calls a checkpoint store's `save` (checkpoint.py's own orbax manager aside)."""
    callers = []
    for name, tree in parsed(("sexpgpu_runtime",)).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "save":
                callers.append(f"{name}: {ast.unparse(node.func)}")
    assert sorted(callers) == ["sexpgpu_runtime.run.checkpoint: self.manager.save",
                               "sexpgpu_runtime.run.checkpoint_policy: self.save",
                               "sexpgpu_runtime.run.checkpoint_policy: self.save",
                               "sexpgpu_runtime.run.checkpoint_policy: self.store.save"], callers
