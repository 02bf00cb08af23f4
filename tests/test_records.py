"""The front end's dataclasses generate only what their use needs (sexpgpu_lang/records.py): one
shared `__repr__`, `frozen` only with value equality, and the trees and the IR, which are not
frozen, left as they were built by a check and by a run."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

import sexpgpu_lang
from helpers import FIXTURE, program_of, run
from sexpgpu_lang import ir
from sexpgpu_lang.diagnostics import Diagnostic, Related, Severity
from sexpgpu_lang.records import Record, fields_repr
from sexpgpu_lang.source import SourceText, Span
from sexpgpu_lang.syntax import Node, parse
from sexpgpu_lang.types import TensorType


def front_end_dataclasses() -> list[type]:
    """Every dataclass defined in a module of sexpgpu_lang (each module imported)."""
    out = []
    for info in pkgutil.walk_packages(sexpgpu_lang.__path__, "sexpgpu_lang."):
        module = importlib.import_module(info.name)
        out += [v for v in vars(module).values()
                if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == info.name]
    return out


def test_every_dataclass_takes_the_shared_repr_and_is_frozen_only_with_value_equality():
    classes = front_end_dataclasses()
    assert len(classes) > 60
    generated = [c.__qualname__ for c in classes if not issubclass(c, Record) or c.__repr__ is not fields_repr]
    assert not generated, f"declare these repr=False with a Record base (sexpgpu_lang/records.py): {generated}"
    frozen_by_identity = [c.__qualname__ for c in classes
                          if c.__dataclass_params__.frozen and not c.__dataclass_params__.eq]
    assert not frozen_by_identity, f"frozen without value equality pays for nothing: {frozen_by_identity}"


@pytest.mark.parametrize("base", [Node, ir.Expr, ir.Program, ir.Phase])
def test_trees_and_the_ir_compare_by_identity_and_are_not_frozen(base):
    classes = [c for c in front_end_dataclasses() if issubclass(c, base)]
    assert classes
    for c in classes:
        assert not c.__dataclass_params__.frozen and not c.__dataclass_params__.eq, c


def test_the_shared_repr_writes_what_a_generated_one_does():
    assert repr(Span(3, 7)) == "Span(start=3, end=7)"
    assert repr(TensorType((2,), "f32")) == "TensorType(shape=(2,), dtype='f32', weak=False, value=None)"
    d = Diagnostic("E-TYPE-001", Severity.ERROR, "bad", Span(0, 1), (Related(Span(2, 3), "here"),))
    assert repr(d) == ("Diagnostic(code='E-TYPE-001', severity=<Severity.ERROR: 1>, message='bad', "
                       "span=Span(start=0, end=1), related=(Related(span=Span(start=2, end=3), message='here'),), "
                       "help=None, data={})")
    sym = parse(SourceText("(def x 1)")).forms[0].items[1]
    assert repr(sym) == "Sym(span=Span(start=5, end=6), name='x')"   # `path` is declared repr=False


def snapshot(x, seen: dict | None = None):
    """Everything reachable from `x` through dataclass fields, lists, tuples and dicts, as nested
    tuples (a dataclass as its type and fields, each object once: a second sight is its index)."""
    seen = {} if seen is None else seen
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        if id(x) in seen:
            return ("seen", seen[id(x)])
        seen[id(x)] = len(seen)
        return (type(x).__name__,) + tuple(snapshot(getattr(x, f.name), seen) for f in dataclasses.fields(x))
    if isinstance(x, (tuple, list)):
        return (type(x).__name__,) + tuple(snapshot(i, seen) for i in x)
    if isinstance(x, dict):
        return ("dict",) + tuple((snapshot(k, seen), snapshot(v, seen)) for k, v in x.items())
    return x if isinstance(x, (int, float, str, bool, bytes, type(None), frozenset, Severity)) else ("other", id(x))


def test_a_check_leaves_the_syntax_tree_as_the_parse_built_it():
    parsed = parse(SourceText(FIXTURE.read_text(), str(FIXTURE)))
    before = snapshot(parsed)
    from sexpgpu_lang.check import check
    result = check(parsed)
    assert result.program is not None and not result.has_errors
    assert snapshot(parsed) == before


@pytest.mark.slow
def test_a_run_leaves_the_ir_as_the_check_built_it(tmp_path):
    text = FIXTURE.read_text()
    program = program_of(text)
    before = snapshot(program)
    run(text, tmp_path, 2, program=program)
    assert snapshot(program) == before
