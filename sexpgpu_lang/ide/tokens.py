"""Semantic tokens: a token type and modifiers for every atom and comment of a file.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

from ..check import stdlib_docs
from ..language import OPTIMIZERS, SOURCES, SPECIAL_FORMS, TOP_FORMS
from ..ops import INITIALIZERS, REGISTRY
from ..syntax import Kw, ListNode, Node, Num, Str, Sym, keyword_value
from ..types import DTYPES
from .index import Index
from .results import Token


def semantic_tokens(ix: Index) -> list[Token]:
    """A token for every atom and comment, sorted by position: forms (and
    `repeat` in `:params`) as `keyword`, operations and the standard
    library's layers as `function` (`defaultLibrary`), models as
    `class`, loaders as `namespace`, lambda parameters as `parameter`,
    other names as `variable`, keywords as `property` (dtypes as `type`),
    literals as `number` and `string`."""
    out: list[Token] = [Token(c, "comment") for c in ix.result.parse.comments]
    for a in ix.atoms:
        out.append(_token(ix, a))
    return sorted((t for t in out if t is not None), key=lambda t: t.span.start)


def _token(ix: Index, a: Node) -> Token | None:
    if isinstance(a, Num):
        return Token(a.span, "number")
    if isinstance(a, Str):
        return Token(a.span, "string")
    if isinstance(a, Kw):
        return Token(a.span, "type" if a.name in DTYPES else "property")
    if not isinstance(a, Sym):
        return None
    if a.name in ("true", "false", "nil"):
        return Token(a.span, "enumMember", ("readonly",))
    target = ix.target.get(a.span)
    d = ix.defs.get(target) if target is not None else None
    if d is not None:
        decl = ("declaration",) if a.span == d.span else ()
        if d.kind in ("model", "model-binding"):
            return Token(a.span, "class", decl)
        if d.kind == "loader":
            return Token(a.span, "namespace", decl)
        if d.kind == "function":
            return Token(a.span, "function", decl)
        if d.kind == "def":
            return Token(a.span, "variable", decl + ("readonly",))
        lam = ix.node(d.form_span)
        if isinstance(lam, ListNode) and lam.head == "lambda":
            return Token(a.span, "parameter", decl)
        return Token(a.span, "variable", decl)
    parent = ix.parent(a)
    is_head = isinstance(parent, ListNode) and parent.items and parent.items[0] is a
    if is_head and ((ix.parent(parent) is None and a.name in TOP_FORMS) or a.name in SPECIAL_FORMS
                    or a.name == "stage"):
        return Token(a.span, "keyword")
    if is_head and a.name == "repeat" and _in_params(ix, parent):
        return Token(a.span, "keyword")
    if is_head and (a.name in REGISTRY or a.name in INITIALIZERS or a.name in OPTIMIZERS or a.name in SOURCES):
        return Token(a.span, "function", ("defaultLibrary",))
    if a.name in stdlib_docs():  # a standard-library layer (prelude.sx) the file does not define
        return Token(a.span, "function", ("defaultLibrary",))
    return Token(a.span, "variable")


def _in_params(ix: Index, node: Node) -> bool:
    """True for an entry of a `defmodel`'s `:params` plist."""
    p = ix.parent(node)
    gp = ix.parent(p) if isinstance(p, ListNode) else None
    return isinstance(gp, ListNode) and gp.head == "defmodel" and keyword_value(gp, "params", 2) is p
