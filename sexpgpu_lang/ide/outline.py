"""The outline of a file: document symbols (one per top-level form, with its members) and folding
ranges.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

import bisect

from ..check import Definition
from ..language import TOP_FORMS
from ..source import Span
from ..syntax import Kw, ListNode, Node, Sym, VecNode
from .index import Index
from .results import Fold, Symbol


_FORM_SYMBOL_KIND = {"def": "constant", "loader": "struct", "defmodel": "class", "model": "variable",
                     "defgenerate": "event", "prepare": "function", "objective": "function", "pass": "object",
                     "run": "module", "curriculum": "array"}


def document_symbols(ix: Index) -> list[Symbol]:
    """One symbol per top-level form, with a model's parameters and the
    generator's phases and state keys as children."""
    out = []
    members = sorted((d for d in ix.defs.values() if d.kind in ("param", "field")), key=lambda d: d.span.start)
    starts = [d.span.start for d in members]

    def inside(form: Node, kind: str) -> list[Definition]:
        lo, hi = bisect.bisect_left(starts, form.span.start), bisect.bisect_left(starts, form.span.end)
        return [d for d in members[lo:hi] if d.kind == kind]

    for form in ix.forms:
        if not isinstance(form, ListNode) or form.head not in TOP_FORMS:
            continue
        head = form.head
        kind = _FORM_SYMBOL_KIND.get(head, "object")
        name_node = form.items[1] if len(form.items) > 1 and isinstance(form.items[1], Sym) else None
        named = head in ("def", "loader", "defmodel", "pass") and name_node is not None
        name = name_node.name if named else head
        selection = name_node.span if named else form.items[0].span
        d = ix.defs.get(selection)
        detail = d.detail if d is not None else ""
        children: list[Symbol] = []
        if head == "def" and d is not None and d.kind == "function":
            kind = "function"
        if head == "model" and name_node is not None:
            detail = f"model {name_node.name}"
        if head == "defmodel":
            for p in inside(form, "param"):
                children.append(Symbol(p.name, "field", Span(p.span.start, p.form_span.end), p.span,
                                       p.detail.split(f":{p.name} ", 1)[-1]))
        if head == "loader":
            for f in inside(form, "field"):
                children.append(Symbol(f.name, "field", f.form_span, f.span, f.detail.split(": ", 1)[-1]))
        if head == "defgenerate":
            for phase in ("init", "step", "finish"):
                lam = ix.phase_node(f"generate.{phase}")
                key = _key_node(form, phase)
                if lam is not None and key is not None:
                    kids = ()
                    if phase == "init":
                        kids = tuple(Symbol(s.name, "field", Span(s.span.start, s.form_span.end), s.span,
                                            s.detail.split(f":{s.name} ", 1)[-1])
                                     for s in ix.facts.state_keys.values())
                    if phase == "finish":
                        kids = tuple(Symbol(g.name, "field", Span(g.span.start, g.form_span.end), g.span,
                                            g.detail.split(f":{g.name} ", 1)[-1])
                                     for g in ix.facts.generated.values())
                    children.append(Symbol(f":{phase}", "method", Span(key.span.start, lam.span.end), key.span,
                                           "", kids))
        out.append(Symbol(name, kind, form.span, selection, detail, tuple(children)))
    return out


def _key_node(form: ListNode, key: str) -> Kw | None:
    for it in form.items:
        if isinstance(it, Kw) and it.name == key:
            return it
    return None


def folding_ranges(ix: Index) -> list[Fold]:
    """Every list or vector that spans lines, and each run of two or more
    comment lines."""
    src = ix.result.source
    out = []
    for node in ix.nodes.values():
        if isinstance(node, (ListNode, VecNode)):
            if src.line_col(node.span.start)[0] < src.line_col(max(node.span.end - 1, node.span.start))[0]:
                out.append(Fold(node.span, "region"))
    run: list[Span] = []
    last_line = -2
    for c in sorted(ix.result.parse.comments):
        line, col = src.line_col(c.start)
        own_line = not src.line_text(line)[:col].strip()
        if own_line and line == last_line + 1 and run:
            run.append(c)
        else:
            if len(run) > 1:
                out.append(Fold(Span(run[0].start, run[-1].end), "comment"))
            run = [c] if own_line else []
        last_line = line if own_line else -2
    if len(run) > 1:
        out.append(Fold(Span(run[0].start, run[-1].end), "comment"))
    return sorted(out, key=lambda f: (f.span.start, -f.span.end))
