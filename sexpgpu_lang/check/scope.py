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
from dataclasses import dataclass, field
from functools import lru_cache

from ..ir import Expr
from ..language import CONTEXT_KEYS
from ..source import SourceText, Span
from ..syntax import ListNode, Sym, parse as parse_text
from ..types import FunctionType, PlistType, TensorType, Type, scalar
from .facts import Definition

#: The context keys every phase sees and their types (docs/dev/design.md#forms-and-the-context, docs/dev/design.md#generation).
CTX_KEYS: dict[str, TensorType] = {name: scalar(dtype) for name, dtype in CONTEXT_KEYS}

#: A name read of the set of every name in a scope (a near-miss suggestion reads it).
ALL_NAMES = "\0every global name"


@dataclass
class Binding:
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


@dataclass
class Effect:
    """Something an expression does besides computing a value: a report, a counter,
    a draw, a context read. `site` is where it shows in the phase being checked (a
    call of a model that does it, or the form itself); `origin` is the form itself."""

    kind: str        # metric | diagnostic | counter | draw | ctx
    name: str
    origin: Span
    site: Span
    salted: bool = True


@dataclass
class Frame:
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


@lru_cache(maxsize=1)
def prelude_scope() -> Scope:
    """The standard library's functions (prelude.sx), in a scope every file's globals sit in."""
    parsed = parse_text(SourceText(PRELUDE.read_text(encoding="utf-8"), str(PRELUDE)))
    assert not parsed.diagnostics, parsed.diagnostics
    scope = Scope()
    for form in parsed.forms:
        if isinstance(form, ListNode) and form.head == "def" and len(form.items) == 3 and isinstance(form.items[1], Sym):
            lam = form.items[2]
            name = form.items[1].name
            scope.names[name] = Binding(FunctionType(len(lam.items[1].items), name), None, fn=(lam, scope), stdlib=name)
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
