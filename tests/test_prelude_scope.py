"""The standard library's scope (check/scope.py `prelude_scope`) parses each function when a file first
calls it: the names, arities and lambda nodes are those of a parse of the whole prelude.sx."""
from __future__ import annotations

from sexpgpu_lang import analyze
from sexpgpu_lang.check.scope import PRELUDE, StdlibNames, prelude_scope
from sexpgpu_lang.source import SourceText
from sexpgpu_lang.syntax import ListNode, Node, Sym, parse, parse_region
from sexpgpu_lang.types import FunctionType

from helpers import FIXTURE


def shape(node: Node):
    """A node as comparable data: its class, span, path and fields, its items recursively."""
    items = getattr(node, "items", None)
    rest = {k: getattr(node, k) for k in ("name", "value", "closed") if hasattr(node, k)}
    return (type(node).__name__, node.span, node.path, rest, None if items is None else [shape(i) for i in items])


def whole_prelude() -> dict[str, ListNode]:
    parsed = parse(SourceText(PRELUDE.read_text(encoding="utf-8"), str(PRELUDE)))
    assert not parsed.diagnostics
    return {f.items[1].name: f.items[2] for f in parsed.forms
            if isinstance(f, ListNode) and f.head == "def" and len(f.items) == 3 and isinstance(f.items[1], Sym)}


def test_every_function_is_the_whole_files_parse_of_it():
    whole = whole_prelude()
    names = prelude_scope().names
    assert isinstance(names, StdlibNames) and len(whole) > 50
    assert list(names) == list(whole) and len(names) == len(whole)
    for name, lam in whole.items():
        b = names[name]
        assert b.type == FunctionType(len(lam.items[1].items), name) and b.stdlib == name
        assert shape(b.fn[0]) == shape(lam), name
        assert b.fn[1] is prelude_scope() and names[name] is b   # built once: incremental checks compare by identity


def test_a_function_is_parsed_when_first_looked_up():
    names = StdlibNames(PRELUDE.read_text(encoding="utf-8"), prelude_scope())
    assert "linear" in names and "no-such-layer" not in names and not names._built
    names["mlp"]
    assert set(names._built) == {"mlp"}


def test_a_region_gives_the_whole_texts_nodes_and_its_own_diagnostics():
    text = "(def a 1)\n;; note\n(def b (f [1 2]))\n(def c 3)\n"
    whole = parse(SourceText(text)).forms
    start, end = text.index("(def b"), text.index("(def c")
    forms, diags = parse_region(text, start, end)
    assert [shape(f) for f in forms] == [shape(whole[1])] and diags == ()
    forms, diags = parse_region("(f (g 1)\n", 0, 9)
    assert [d.code for d in diags] == ["E-SYNTAX-001"]


def test_a_file_checks_alike_with_the_library_parsed_lazily():
    res = analyze(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE))
    assert not res.diagnostics and res.program is not None
