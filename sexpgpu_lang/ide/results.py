"""The answers of the editor queries, as plain data: front-end offsets and `Span`s, kinds as short
strings. `lsp/convert.py` turns them into LSP objects.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import Diagnostic
from ..records import Record
from ..source import Span


@dataclass(frozen=True, repr=False)
class HoverInfo(Record):
    """Markdown for the node at `span`."""

    span: Span
    markdown: str


@dataclass(frozen=True, repr=False)
class Target(Record):
    """A definition: `span` is its name, `full` the range of the whole definition."""

    span: Span
    full: Span


@dataclass(frozen=True, repr=False)
class Ref(Record):
    """A place a name occurs; `write` for its definition (and for a state key, `:step` writing it)."""

    span: Span
    write: bool


@dataclass(frozen=True, repr=False)
class Edit(Record):
    """Replace `span` of the text with `text`."""

    span: Span
    text: str


@dataclass(frozen=True, repr=False)
class Symbol(Record):
    """A document symbol; `kind` is an LSP SymbolKind name in lower case (`class`, `field`...)."""

    name: str
    kind: str
    span: Span
    selection: Span
    detail: str = ""
    children: tuple["Symbol", ...] = ()


@dataclass(frozen=True, repr=False)
class Fold(Record):
    """A foldable range; `kind` is `region` or `comment`."""

    span: Span
    kind: str


@dataclass(frozen=True, repr=False)
class Completion(Record):
    """A completion item. `kind` is an LSP CompletionItemKind name in lower case;
    `text` is inserted in place of the word being typed."""

    label: str
    kind: str
    detail: str = ""
    doc: str = ""
    text: str = ""


@dataclass(frozen=True, repr=False)
class Completions(Record):
    """Completion items and the range (the word being typed) they replace."""

    span: Span
    items: tuple[Completion, ...]


@dataclass(frozen=True, repr=False)
class Signature(Record):
    """An operation's signature; `params` are (start, end) offsets into `label`,
    `active` the index of the parameter at the cursor (None: none)."""

    label: str
    doc: str
    params: tuple[tuple[int, int], ...]
    active: int | None


@dataclass(frozen=True, repr=False)
class InlayHint(Record):
    """A label shown at `offset` (a type after a name)."""

    offset: int
    label: str


@dataclass(frozen=True, repr=False)
class Token(Record):
    """A semantic token: `type` from TOKEN_TYPES, `modifiers` from TOKEN_MODIFIERS."""

    span: Span
    type: str
    modifiers: tuple[str, ...] = ()


@dataclass(frozen=True, repr=False)
class Fix(Record):
    """A quick fix for `diagnostic`: a title and the edits that apply it."""

    title: str
    diagnostic: Diagnostic
    edits: tuple[Edit, ...]
    preferred: bool = False


class RenameError(ValueError):
    """A rename that cannot be done: the message says why (shown to the user)."""


#: Semantic token types and modifiers, by their LSP names (LSP 3.17, "Semantic Tokens").
TOKEN_TYPES = ("keyword", "function", "class", "namespace", "variable", "parameter", "property", "type",
               "number", "string", "comment", "enumMember")
TOKEN_MODIFIERS = ("declaration", "readonly", "defaultLibrary")
