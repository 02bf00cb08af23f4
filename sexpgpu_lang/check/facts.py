"""The editor data model: what one check found, as plain data.

`Definition` (a named thing the file defines), `Facts` (types by range,
definitions, uses, calls, state keys, generated names: what hover, go to
definition, rename and the other editor features read) and `CheckResult`
(diagnostics, facts and the IR of a file without errors).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir
from ..diagnostics import Diagnostic
from ..records import Record
from ..source import SourceText, Span
from ..syntax import ParseResult
from ..types import Type


@dataclass(repr=False)
class Definition(Record):
    """A named thing the file defines: `kind` is def, loader, model, param, binding, state-key, generated,
    reward (the batch name of `:reward`'s rewards), ..."""

    name: str
    kind: str
    span: Span          # the name's range
    form_span: Span     # the whole defining form
    detail: str = ""


@dataclass(repr=False)
class Checkpoint(Record):
    """A reachable model's `:pretrained` as the check saw it, for hover and completion:
    the path as written and resolved, `:file-dtype`, each parameter path below the
    model (`layers.wq`) with its dtype and the file tensors it reads (name and the
    shape the mapping expects there; none when the mapping does not fit), every
    parameter path (`params`), and, once the checkpoint's headers were read
    (the language server, `lint --read-files`), each tensor's file shape, dtype and
    file; `header` is None when they were not."""

    model: str
    rel: str
    path: str
    file_dtype: str | None
    reads: dict[str, tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]]   # param path -> (dtype, reads)
    params: tuple[str, ...] = ()   # every parameter path below the model, mapped or not
    owners: dict[str, str] = field(default_factory=dict)   # param path -> the model whose `:params` names it
    header: dict[str, tuple[tuple[int, ...], str, str]] | None = None


@dataclass(repr=False)
class Facts(Record):
    """What the editor features read: types by range, definitions, uses."""

    types: dict[tuple[int, int], Type] = field(default_factory=dict)
    definitions: list[Definition] = field(default_factory=list)
    uses: list[tuple[Span, Definition]] = field(default_factory=list)
    calls: dict[tuple[int, int], str] = field(default_factory=dict)   # call range -> op/form/model name
    state_keys: dict[str, Definition] = field(default_factory=dict)
    generated: dict[str, Definition] = field(default_factory=dict)
    loader_fields: dict[str, tuple[str, ...]] = field(default_factory=dict)
    counters: tuple[str, ...] = ()
    phases: dict[str, Span] = field(default_factory=dict)   # phase name -> lambda range
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)   # model name -> its `:pretrained`
    sample_names: dict[str, str] = field(default_factory=dict)   # what `:samples` may show -> its type and source
    # a model made from its checkpoint in one form -> check/one_form.OneForm (its family, settings, expansion)
    one_forms: dict[str, object] = field(default_factory=dict)
    entries: dict[str, dict[str, str]] = field(default_factory=dict)   # model name -> entry key -> its call

    def define(self, d: Definition) -> Definition:
        """Record a definition and return it."""
        self.definitions.append(d)
        return d


@dataclass(repr=False)
class CheckResult(Record):
    """The outcome of checking one file: diagnostics, facts for editors, and the IR when there is no error."""

    source: SourceText
    parse: ParseResult
    diagnostics: list[Diagnostic]
    facts: Facts
    program: ir.Program | None

    @property
    def has_errors(self) -> bool:
        """True when any diagnostic is an error."""
        return any(d.is_error for d in self.diagnostics)
