"""The index of one checked file that every editor query reads: nodes by position and parent,
definitions by name range, every reference of each definition, and the names in scope.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

import bisect
import re

from ..check import BatchType, CheckResult, Definition
from ..source import Span
from ..syntax import Kw, ListNode, Node, Sym, VecNode, keyword_value, plist_pairs, result_node, walk
from ..types import ErrorType, ShapeType, Type


class Index:
    """One checked file, indexed for queries: nodes by position and parent,
    definitions by name range, and every reference of each definition.

    Definitions come from `facts.definitions` (grouped by their name's range:
    a lambda checked at several calls defines its parameters once per call),
    uses from `facts.uses`. Two kinds of reference the checker does not
    record are added here: the keys of the state `:step` returns (writes of
    the state keys `:init` made), and loader fields read with `field`.
    """

    def __init__(self, result: CheckResult):
        self.result = result
        self.text = result.source.text
        self.facts = result.facts
        self.forms = result.parse.forms
        self.parents: dict[int, Node | None] = {}
        self.nodes: dict[tuple[int, int], Node] = {}
        self.atoms: list[Node] = []
        for form in self.forms:
            self._walk(form, None)
        self.atoms.sort(key=lambda n: n.span.start)
        self.atom_starts = [a.span.start for a in self.atoms]
        self.defs: dict[Span, Definition] = {}
        self.refs: dict[Span, dict[Span, bool]] = {}
        self.target: dict[Span, Span] = {}
        for d in self.facts.definitions:
            self._define(d)
        for use, d in self.facts.uses:
            if d is not None and d.span in self.defs:
                self._ref(d.span, use, False)
        self._state_refs()
        self._loader_fields()
        self._scopes: tuple[dict[str, Definition], list[tuple[Span, Definition]]] | None = None

    # -- building ---------------------------------------------------------------
    def _walk(self, node: Node, parent: Node | None) -> None:
        stack = [(node, parent)]
        while stack:
            n, p = stack.pop()
            self.parents[id(n)] = p
            self.nodes.setdefault((n.span.start, n.span.end), n)
            if isinstance(n, (ListNode, VecNode)):
                stack.extend((c, n) for c in n.items)
            else:
                self.atoms.append(n)

    def _define(self, d: Definition) -> None:
        if d.span not in self.defs:
            self.defs[d.span] = d
        self._ref(d.span, d.span, True)

    def _ref(self, def_span: Span, span: Span, write: bool) -> None:
        refs = self.refs.setdefault(def_span, {})
        refs[span] = refs.get(span, False) or write
        self.target.setdefault(span, def_span)

    def _state_refs(self) -> None:
        """The state keys `:step` returns, and `(getf s :key)` on the state
        parameter of `:step` or `:finish` whatever its name (the checker
        records the reads only when the parameter is called `state`)."""
        result = self.phase_result("generate.step")
        for k, _v in plist_pairs(result) if result is not None else ():
            d = self.facts.state_keys.get(k.name)
            if d is not None:
                self._ref(d.span, k.span, True)
        for phase in ("generate.step", "generate.finish"):
            lam = self.phase_node(phase)
            param = param_name(lam, 0, "") if lam is not None else ""
            if not param:
                continue
            for node in walk(lam):
                if (isinstance(node, ListNode) and node.head == "getf" and len(node.items) == 3
                        and isinstance(node.items[1], Sym) and node.items[1].name == param
                        and isinstance(node.items[2], Kw) and node.items[2].name in self.facts.state_keys):
                    self._ref(self.facts.state_keys[node.items[2].name].span, node.items[2].span, False)

    def _loader_fields(self) -> None:
        fields: dict[tuple[str, str], Definition] = {}
        for form in self.forms:
            if not (isinstance(form, ListNode) and form.head == "loader" and len(form.items) > 1
                    and isinstance(form.items[1], Sym)):
                continue
            name = form.items[1].name
            value = keyword_value(form, "fields", 2)
            if not isinstance(value, ListNode):
                like = keyword_value(form, "like", 2)   # `:like L`: L's fields are this loader's
                if isinstance(like, Sym):
                    fields.update({(name, k): d for (ld, k), d in list(fields.items()) if ld == like.name})
                continue
            items = value.items
            for i in range(0, len(items) - 2, 3):
                k, shape, dtype = items[i], items[i + 1], items[i + 2]
                if not isinstance(k, Kw):
                    continue
                st = self.type_at(shape)
                dims = " ".join(map(str, st.dims)) if isinstance(st, ShapeType) else "?"
                dt = dtype.name if isinstance(dtype, Kw) else "?"
                d = Definition(k.name, "field", k.span, Span(k.span.start, dtype.span.end),
                               f"field :{k.name} of loader {name}: [{dims}] {dt} per record")
                fields[(name, k.name)] = d
                self._define(d)
        for node in self.nodes.values():
            if not (isinstance(node, ListNode) and node.head == "field" and len(node.items) == 3
                    and isinstance(node.items[2], Kw)):
                continue
            t = self.type_at(node.items[1])
            key = node.items[2]
            if isinstance(t, BatchType) and key.name not in t.generated:
                d = fields.get((t.loader, key.name))
                if d is not None:
                    self._ref(d.span, key.span, False)

    # -- lookups ----------------------------------------------------------------
    def type_at(self, node: Node | Span | None) -> Type | None:
        """The inferred type of a node (or range), None when it has none or an error."""
        if node is None:
            return None
        span = node if isinstance(node, Span) else node.span
        t = self.facts.types.get((span.start, span.end))
        return None if isinstance(t, ErrorType) else t

    def parent(self, node: Node) -> Node | None:
        """The list or vector holding `node`, None for a top-level form."""
        return self.parents.get(id(node))

    def node(self, span: Span) -> Node | None:
        """The node with exactly this range."""
        return self.nodes.get((span.start, span.end))

    def node_at(self, offset: int) -> Node | None:
        """The innermost node at `offset`: an atom that holds it or ends there,
        else the innermost list or vector whose brackets enclose it."""
        i = bisect.bisect_right(self.atom_starts, offset) - 1
        if i >= 0:
            a = self.atoms[i]
            if a.span.start <= offset < a.span.end or a.span.end == offset:
                return a
        best: Node | None = None
        nodes = self.forms
        while True:
            inner = None
            for n in nodes:
                if n.span.start <= offset < n.span.end and isinstance(n, (ListNode, VecNode)):
                    inner = n
                    break
            if inner is None:
                return best
            best = inner
            nodes = inner.items

    def definition_at(self, offset: int) -> Definition | None:
        """The definition the name at `offset` defines or refers to."""
        node = self.node_at(offset)
        if node is None:
            return None
        span = self.target.get(node.span)
        return self.defs.get(span) if span is not None else None

    def phase_node(self, phase: str) -> ListNode | None:
        """The lambda of a phase (`generate.step`, `prepare`, ...)."""
        span = self.facts.phases.get(phase)
        n = self.node(span) if span is not None else None
        return n if isinstance(n, ListNode) else None

    def phase_result(self, phase: str) -> ListNode | None:
        """The `(list ...)` a phase's lambda returns, looking through `let*`; None when it is not a literal list."""
        lam = self.phase_node(phase)
        if lam is None:
            return None
        res = result_node(lam.items[2:])
        return res if isinstance(res, ListNode) and res.head == "list" else None

    def phase_at(self, offset: int) -> str | None:
        """The phase whose lambda holds `offset`."""
        for name, span in self.facts.phases.items():
            if span.start <= offset < span.end and not name.startswith("pass "):
                return name
        return None

    def visible(self, offset: int) -> dict[str, Definition]:
        """The names in scope at `offset`: globals, then lambda parameters and
        `let*` bindings whose scope holds it (inner ones shadow outer ones)."""
        if self._scopes is None:
            glob: dict[str, Definition] = {}
            scoped: list[tuple[Span, Definition]] = []
            for d in self.defs.values():
                if d.kind in ("def", "function", "loader", "model", "model-binding"):
                    glob[d.name] = d
                elif d.kind == "binding":
                    scope = self.binding_scope(d)
                    if scope is not None:
                        scoped.append((scope, d))
            scoped.sort(key=lambda x: (x[0].start, x[1].span.start))
            self._scopes = (glob, scoped)
        glob, scoped = self._scopes
        out = dict(glob)
        for scope, d in scoped:
            if scope.start <= offset < scope.end:
                out[d.name] = d
        return out

    def binding_scope(self, d: Definition) -> Span | None:
        """Where a binding is visible: its lambda, or the rest of its `let*`."""
        form = self.node(d.form_span)
        if isinstance(form, ListNode) and form.head == "lambda":
            return form.span
        bindings = self.parent(form) if form is not None else None
        let = self.parent(bindings) if bindings is not None else None
        if isinstance(let, ListNode) and let.head == "let*":
            return Span(d.form_span.end, let.span.end)
        return None

    def line_indent(self, offset: int) -> tuple[int, str]:
        """The start of `offset`'s line and the text between it and `offset`."""
        start = max(self.text.rfind("\n", 0, offset), self.text.rfind("\r", 0, offset)) + 1
        return start, self.text[start:offset]

    def eol(self) -> str:
        """The file's line ending (its first line break), `\\n` by default."""
        m = re.search(r"\r\n|\r|\n", self.text)
        return m.group(0) if m else "\n"


def index(result: CheckResult) -> Index:
    """Index a checked file for queries."""
    return Index(result)


def param_name(lam: ListNode | None, i: int, default: str) -> str:
    """The name of parameter `i` of lambda `lam`, or `default` when it has none there."""
    if lam is not None and len(lam.items) > 1 and isinstance(lam.items[1], ListNode) and len(lam.items[1].items) > i:
        p = lam.items[1].items[i]
        if isinstance(p, Sym):
            return p.name
    return default
