"""What the front end's dataclasses share instead of generating it class by class.

Python 3.11 and 3.12 compile every method a `@dataclass` generates when its module is imported
(one `exec` each: `__init__`, `__repr__`, `__eq__`, `__hash__`, and a frozen class's
`__setattr__` and `__delattr__`), 0.05-0.5 ms a method by its number of fields. All of them, for
the 59 dataclasses on `sexpgpu lint`'s path, take 18 ms, most of the front end's import and of
`sexpgpu lint`'s start-up beyond typer's (benchmarks/cli_startup.py); what these need, 10 ms.
So each dataclass of `sexpgpu_lang` generates only what its use needs:

- Every one is declared `repr=False` and takes `Record.__repr__` (`fields_repr`): the text a
  generated `__repr__` writes, built when a repr is asked for.
- Values, compared or hashed by what they hold (types, spans, diagnostics, the results the
  editor features return), keep `eq` and `frozen` (so a `__hash__`).
- Trees and records, built once and then read (syntax nodes, the typed IR, the op registry's
  entries, a one-form model's expansion), compare by identity (`eq=False`) and are not frozen:
  nothing assigns to them after they are built.
- What the checker fills in as it goes (its facts, bindings and effects) is not frozen either,
  and keeps its generated `__eq__`.

tests/test_records.py holds every dataclass of the package to these rules, and checks that a
check leaves the syntax tree, and a run the IR, as they were built.
"""
from __future__ import annotations

from dataclasses import fields


def fields_repr(self) -> str:
    """`Name(field=value, ...)`, what a dataclass's generated `__repr__` writes (the class's
    qualified name; the fields declared `repr=False` left out)."""
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
    return f"{type(self).__qualname__}({shown})"


class Record:
    """The base of `sexpgpu_lang`'s dataclasses: their one `__repr__` (`fields_repr`). Has no
    slots of its own (`__slots__ = ()`), so a `slots=True` dataclass keeps only its fields'."""

    __slots__ = ()
    __repr__ = fields_repr
