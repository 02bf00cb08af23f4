"""Scopes, phases' frames and effects, the context and batch types, and the standard library.

`Scope` is a chain of name tables (`Binding`s); the file's globals sit in
the standard library's scope (`prelude_scope`, from prelude.sx). A `Frame`
is the phase being checked and the `Effect`s seen in it (reports,
counters, draws, context reads). `CtxType` and `BatchType` are the plists a
phase receives; `CTX_KEYS` the context keys' types (from
`language.CONTEXT_KEYS`).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from ..ir import Expr
from ..language import CONTEXT_KEYS
from ..records import Record
from ..source import Span
from ..syntax import parse_region
from ..types import FunctionType, PlistType, TensorType, Type, scalar
from .facts import Definition

#: The context keys every phase sees and their types (docs/dev/design.md#forms-and-the-context, docs/dev/design.md#generation).
CTX_KEYS: dict[str, TensorType] = {name: scalar(dtype) for name, dtype in CONTEXT_KEYS}

#: A name read of the set of every name in a scope (a near-miss suggestion reads it).
ALL_NAMES = "\0every global name"


@dataclass(repr=False)
class Binding(Record):
    """One name in scope: its type, where it was defined, and for functions the lambda and its scope."""

    type: Type
    definition: Definition | None = None
    ir: Expr | None = None
    fn: tuple | None = None       # (lambda node, scope) for functions
    stdlib: str | None = None     # the name, for a function of the standard library (prelude.sx)
    range: tuple | None = None    # an integer value's (lo, hi, exact), where known (`ranges.value_range`)
    varies: bool = False          # it changes between trips of `:step` (`trips`)
    trip_form: tuple | None = None  # (a, b): an integer that is a * trip + b in `:step` (`ranges.trip_form`)


class Scope:
    """A chain of name tables; `lookup` walks outwards."""

    def __init__(self, parent: "Scope | None" = None):
        self.parent, self.names = parent, {}
        # The dependency tracker told of every name looked up here (the file's globals,
        # in a check with a cache: `incremental.Tracker`); else None.
        self.tracker = None

    def lookup(self, name: str) -> Binding | None:
        """The binding of `name` here or in an enclosing scope, or None."""
        s = self
        while s is not None:
            if s.tracker is not None:
                s.tracker.name_read(name)
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def child(self) -> "Scope":
        """A new scope inside this one."""
        return Scope(self)

    def all_names(self):
        """Every name visible here (for near-miss suggestions)."""
        s, out = self, set()
        while s is not None:
            if s.tracker is not None:
                s.tracker.name_read(ALL_NAMES)
            out |= set(s.names)
            s = s.parent
        return out


@dataclass(repr=False)
class Effect(Record):
    """Something an expression does besides computing a value: a report, a counter,
    a draw, a context read. `site` is where it shows in the phase being checked (a
    call of a model that does it, or the form itself); `origin` is the form itself."""

    kind: str        # metric | diagnostic | counter | draw | ctx
    name: str
    origin: Span
    site: Span
    salted: bool = True


@dataclass(repr=False)
class Frame(Record):
    """The phase being checked: its name, the context's type, and the effects seen."""

    phase: str
    ctx_nil: dict[str, str] = field(default_factory=dict)
    effects: list[Effect] = field(default_factory=list)


class CtxType(PlistType):
    """The context plist; a phase-specific set of keys."""

    def show(self) -> str:
        return "ctx " + PlistType.show(self)


class BatchType(PlistType):
    """A batch: loader fields and, where the generator runs, the generated names."""

    def __init__(self, entries, loader: str, generated: tuple[str, ...] = (), missing_generated: tuple[str, ...] = (),
                 unknown_generated: bool = False, via: tuple[str, Span] | None = None):
        object.__setattr__(self, "unknown_generated", unknown_generated)
        object.__setattr__(self, "via", via)   # a pass's batch: (its name, its `:loader`'s range)
        object.__setattr__(self, "entries", tuple(entries))
        object.__setattr__(self, "loader", loader)
        object.__setattr__(self, "generated", generated)
        object.__setattr__(self, "missing_generated", missing_generated)

    def show(self) -> str:
        return "batch " + PlistType.show(self)


PRELUDE = pathlib.Path(__file__).parent.parent / "prelude.sx"
#: A standard-library function's first line in prelude.sx: `(def NAME (lambda (PARAMS ...)`.
_STDLIB_DEF = re.compile(r"^\(def ([^\s()]+) \(lambda \(([^()]*)\)", re.M)


class StdlibNames(Mapping):
    """The standard library's bindings (prelude.sx) by name, as a `Scope`'s `names`.

    Each function's name and arity are read from its first line, `(def NAME (lambda (PARAMS ...)`;
    its lambda is parsed (`syntax.parse_region`, the nodes a parse of the whole file gives) when the
    name is first looked up, and the binding kept: a file calls a few of the library's functions,
    and parsing all of them was most of the check of a small file (`sexpgpu lint`'s start-up)."""

    def __init__(self, text: str, scope: Scope):
        self._text, self._scope = text, scope
        starts = list(_STDLIB_DEF.finditer(text))
        ends = [m.start() for m in starts[1:]] + [len(text)]
        self._where = {m.group(1): (m.start(), end, len(m.group(2).split())) for m, end in zip(starts, ends)}
        self._built: dict[str, Binding] = {}

    def __getitem__(self, name: str) -> Binding:
        b = self._built.get(name)
        if b is None:
            start, end, arity = self._where[name]
            forms, diags = parse_region(self._text, start, end)
            assert not diags and len(forms) == 1, (name, diags)
            lam = forms[0].items[2]
            assert len(lam.items[1].items) == arity, name
            b = self._built[name] = Binding(FunctionType(arity, name), None, fn=(lam, self._scope), stdlib=name)
        return b

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


@lru_cache(maxsize=1)
def prelude_scope() -> Scope:
    """The standard library's functions (prelude.sx), in a scope every file's globals sit in."""
    scope = Scope()
    scope.names = StdlibNames(PRELUDE.read_text(encoding="utf-8"), scope)
    return scope


@lru_cache(maxsize=1)
def stdlib_docs() -> dict[str, tuple[str, str]]:
    """Each standard-library function's signature and the comment above it in prelude.sx (hover, completion)."""
    lines = PRELUDE.read_text(encoding="utf-8").splitlines()
    out = {}
    for i, line in enumerate(lines):
        if line.startswith("(def ") and "(lambda (" in line:
            name = line.split()[1]
            params = line.split("(lambda (", 1)[1].split(")", 1)[0]
            doc, j = [], i - 1
            while j >= 0 and lines[j].startswith(";;"):
                doc.insert(0, lines[j][2:].strip())
                j -= 1
            out[name] = (f"({name} {params})", " ".join(doc) + " (standard library)")
    return out
