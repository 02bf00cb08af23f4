"""Rename: which names may be renamed, and the edits that rename one everywhere in the file.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

import re

from ..check import Definition
from ..language import RESERVED_NAMES, SPECIAL_FORMS, TOP_FORMS
from ..ops import REGISTRY
from ..source import Span
from .index import Index
from .results import Edit, RenameError
from .text import NUMBER_START

_SYMBOL_RE = re.compile(r'[^\s()\[\]";:0-9][^\s()\[\]";]*\Z')
_KEYWORD_RE = re.compile(r'[^\s()\[\]";]+\Z')


RENAMEABLE = ("binding", "def", "function", "model", "loader", "state-key", "generated", "param")


def prepare_rename(ix: Index, offset: int) -> Span | None:
    """The range of the renameable name at `offset`, or None."""
    node = ix.node_at(offset)
    d = ix.definition_at(offset)
    if node is None or d is None or d.kind not in RENAMEABLE:
        return None
    return node.span


def rename(ix: Index, offset: int, new_name: str) -> list[Edit]:
    """Edits that rename the name at `offset` (a binding, def, function, model,
    loader, model parameter, state key or generated name) everywhere in the
    file. Raises RenameError with a message for the user when the name cannot
    be renamed or `new_name` is not a valid new name."""
    d = ix.definition_at(offset)
    if d is None:
        raise RenameError("there is no renameable name here")
    if d.kind not in RENAMEABLE:
        raise RenameError(f"`{d.name}` cannot be renamed")
    keyword = d.kind in ("state-key", "generated", "param")
    new = new_name[1:] if keyword and new_name.startswith(":") else new_name
    if keyword:
        if not _KEYWORD_RE.match(new) or new.startswith(":"):
            raise RenameError(f"`{new_name}` is not a valid key")
        taken = _taken_keys(ix, d)
        if new in taken:
            raise RenameError(f"`:{new}` is already {taken[new]}")
    else:
        if not _SYMBOL_RE.match(new) or NUMBER_START.match(new):
            raise RenameError(f"`{new_name}` is not a valid name")
        if new in REGISTRY or new in SPECIAL_FORMS or new in TOP_FORMS or new in RESERVED_NAMES:
            raise RenameError(f"`{new}` is a built-in name")
        for s in ix.refs.get(d.span, {}):
            other = ix.visible(s.start).get(new)
            if other is not None and other.span != d.span:
                line, col = ix.result.source.line_col(other.span.start)
                raise RenameError(f"`{new}` is already defined at line {line + 1}, column {col + 1}, "
                                  f"and `{d.name}` is used where it is visible")
    text = f":{new}" if keyword else new
    return [Edit(s, text) for s in sorted(ix.refs.get(d.span, {}), key=lambda s: s.start)]


def _taken_keys(ix: Index, d: Definition) -> dict[str, str]:
    if d.kind == "state-key":
        return {k: "a state key" for k in ix.facts.state_keys}
    if d.kind == "generated":
        out = {k: "a generated name" for k in ix.facts.generated}
        for loader, names in ix.facts.loader_fields.items():
            out.update({n: f"a field of loader `{loader}`" for n in names})
        return out
    model = next((m for m in ix.defs.values() if m.kind == "model" and m.form_span.contains(d.span)), None)
    return {p.name: "a parameter of this model" for p in ix.defs.values()
            if p.kind == "param" and model is not None and model.form_span.contains(p.span)}
