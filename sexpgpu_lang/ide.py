"""Editor queries over one checked file, as plain data.

The language server (`lsp/`) answers every request through this module:
hover, definitions and references, rename, symbols, folding, completion,
signature help, inlay hints, semantic tokens and quick fixes. Everything
here speaks the front end's terms: code-point offsets and `Span`s, types as
text, kinds as short strings (`"function"`, `"field"`); `lsp/convert.py`
turns them into LSP positions and objects. No check is repeated: types,
definitions and uses all come from `CheckResult.facts`; this module only
finds the node under the cursor and reads those facts.

Build one `Index` per checked file (`index(analyze(text))`) and ask it any
number of queries. No query raises for any text or offset; an offset that
points at nothing gives an empty answer.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from .check import (stdlib_docs, CTX_KEYS, OPTIMIZERS, RUN_KEYS, SOURCES, SPECIAL_FORMS, TOP_FORMS, BatchType, CheckResult,
                    CtxType, Definition)
from .diagnostics import Diagnostic
from .ops import INITIALIZERS, REGISTRY
from .source import Span
from .syntax import Kw, ListNode, Node, Num, Str, Sym, VecNode, keyword_value, plist_pairs, result_node, walk
from .types import DTYPES, ErrorType, FunctionType, ModelType, PlistType, SelfType, ShapeType, TensorType, Type

# --------------------------------------------------------------------------- tables

#: The keywords each keyword-taking form accepts. FIXME: check.py spells the
#: lists of `loader`, `defmodel`, `defgenerate`, `pass` and `stage` inline in
#: its methods; they are repeated here until it exports them.
FORM_KEYWORDS: dict[str, tuple[str, ...]] = {
    "loader": ("source", "batch", "fields"),
    "defmodel": ("params", "apply", "frozen", "pretrained"),
    "defgenerate": ("trips", "init", "step", "finish"),
    "run": RUN_KEYS,
    "pass": ("loader", "every", "batches", "prepare"),
    "stage": ("loader", "records"),
}
#: The keywords of a parameter initialiser in `:params` (check.py `model_param`).
INITIALIZER_KEYWORDS = {"normal": ("std", "mean", "dtype"), "uniform": ("min", "max", "dtype"),
                        "zeros": ("dtype",), "ones": ("dtype",)}
#: Data plists that are the value of a settings keyword (check.py `top_run`).
PLIST_KEYWORDS = {"log": ("every", "tensorboard"), "checkpoint": ("every", "dir", "keep")}
#: Keywords whose value is itself a keyword from a fixed set.
KEYWORD_VALUES = {"precision": ("f32", "bf16"), "stack": ("auto",), "dtype": DTYPES, "shard-params": ("replicated", "fsdp")}

#: One-line docs of the keywords of `defgenerate` (spec/generation.md) and the other forms.
KEYWORD_DOCS: dict[tuple[str, str], str] = {
    ("defgenerate", "trips"): "how many times `:step` runs, 1 or more",
    ("defgenerate", "init"): "the batch and the context to the state: a plist of tensors",
    ("defgenerate", "step"): "the state, the trip (`[] i64`) and the context to the next state, "
                             "with the keys, shapes and dtypes `:init` made",
    ("defgenerate", "finish"): "optional: the last state and the context, once, to any plist of tensors",
    ("loader", "source"): "where records come from: `(stride-rows ...)`, `(npz ...)`, `(text-bytes ...)`",
    ("loader", "batch"): "records per batch",
    ("loader", "fields"): "each field's per-record shape and dtype: `(:name [shape] :dtype ...)`",
    ("defmodel", "params"): "the parameters: initialisers or sub-models",
    ("defmodel", "apply"): "`(lambda (self x ...) ...)`: how the model applies",
    ("defmodel", "frozen"): "`true`: the parameters are never updated",
    ("defmodel", "pretrained"): "a file the parameters are loaded from",
    ("run", "loader"): "the training loader",
    ("run", "steps"): "optimizer steps",
    ("run", "microbatches"): "microbatches per step; gradients accumulate over them",
    ("run", "stack"): "microbatches vmapped into one call (`:auto`: all of them)",
    ("run", "precision"): "`:f32` or `:bf16`",
    ("run", "seed"): "the seed every draw derives from",
    ("run", "optimizer"): "`(adam :lr ...)`, `(adamw ...)`, `(sgd ...)`, `(lion ...)`",
    ("run", "devices"): "data parallel over this many devices; divides every loader's `:batch`",
    ("run", "shard-params"): "`:replicated` (every device holds every parameter) or `:fsdp` (each split over the mesh)",
    ("pass", "loader"): "the loader the pass reads",
    ("pass", "every"): "run the pass every this many steps",
}

_SYMBOL_RE = re.compile(r'[^\s()\[\]";:0-9][^\s()\[\]";]*\Z')
_KEYWORD_RE = re.compile(r'[^\s()\[\]";]+\Z')
_NUMBER_START = re.compile(r"[+-]?(\d|\.\d)")
_SIG_TOKEN = re.compile(r'\[[^\]]*\]|\((?:[^()]|\([^()]*\))*\)|"[^"]*"|[^\s()\[\]]+')
_DELIMS = set(" \t\r\n\f\v()[]\";")
_REST_OF_LINE = re.compile(r"[ \t]*(\r\n|\r|\n)?")

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class HoverInfo:
    """Markdown for the node at `span`."""

    span: Span
    markdown: str


@dataclass(frozen=True)
class Target:
    """A definition: `span` is its name, `full` the range of the whole definition."""

    span: Span
    full: Span


@dataclass(frozen=True)
class Ref:
    """A place a name occurs; `write` for its definition (and for a state key, `:step` writing it)."""

    span: Span
    write: bool


@dataclass(frozen=True)
class Edit:
    """Replace `span` of the text with `text`."""

    span: Span
    text: str


@dataclass(frozen=True)
class Symbol:
    """A document symbol; `kind` is an LSP SymbolKind name in lower case (`class`, `field`...)."""

    name: str
    kind: str
    span: Span
    selection: Span
    detail: str = ""
    children: tuple["Symbol", ...] = ()


@dataclass(frozen=True)
class Fold:
    """A foldable range; `kind` is `region` or `comment`."""

    span: Span
    kind: str


@dataclass(frozen=True)
class Completion:
    """A completion item. `kind` is an LSP CompletionItemKind name in lower case;
    `text` is inserted in place of the word being typed."""

    label: str
    kind: str
    detail: str = ""
    doc: str = ""
    text: str = ""


@dataclass(frozen=True)
class Completions:
    """Completion items and the range (the word being typed) they replace."""

    span: Span
    items: tuple[Completion, ...]


@dataclass(frozen=True)
class Signature:
    """An operation's signature; `params` are (start, end) offsets into `label`,
    `active` the index of the parameter at the cursor (None: none)."""

    label: str
    doc: str
    params: tuple[tuple[int, int], ...]
    active: int | None


@dataclass(frozen=True)
class InlayHint:
    """A label shown at `offset` (a type after a name)."""

    offset: int
    label: str


@dataclass(frozen=True)
class Token:
    """A semantic token: `type` from TOKEN_TYPES, `modifiers` from TOKEN_MODIFIERS."""

    span: Span
    type: str
    modifiers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fix:
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

# --------------------------------------------------------------------------- the index


@dataclass
class _Item:
    """A complete item of an open list while scanning text: its text and range."""

    text: str
    start: int
    end: int


@dataclass
class _Frame:
    """An open bracket before the cursor, and the complete items after it."""

    open: int
    bracket: str
    items: list[_Item] = field(default_factory=list)


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
            param = _param_name(lam, 0, "") if lam is not None else ""
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


# --------------------------------------------------------------------------- syntax helpers


def _result_siblings(body: tuple[Node, ...]) -> tuple[Node, ...]:
    """The body (a lambda's, or the innermost `let*`'s) whose last item is the result."""
    while body and isinstance(body[-1], ListNode) and body[-1].head == "let*" and len(body[-1].items) >= 3:
        body = body[-1].items[2:]
    return body


# --------------------------------------------------------------------------- type text


def show_type(t: Type | None) -> str:
    """A type's short form; a plist one key a line."""
    if t is None:
        return "?"
    if isinstance(t, PlistType) and len(t.entries) > 1:
        prefix = "ctx " if isinstance(t, CtxType) else "batch " if isinstance(t, BatchType) else ""
        lines = [f":{k} {v.show()}" for k, v in t.entries]
        return prefix + "(" + "\n ".join(lines) + ")"
    return t.show()


def _code(text: str) -> str:
    return f"```sexpgpu\n{text}\n```"


def _model_params(ix: Index, model: str) -> list[str]:
    form = next((d.form_span for d in ix.defs.values() if d.kind == "model" and d.name == model), None)
    if form is None:
        return []
    out = []
    for d in sorted(ix.defs.values(), key=lambda d: d.span.start):
        if d.kind == "param" and form.contains(d.span):
            out.append(f":{d.name} " + d.detail.split(f":{d.name} ", 1)[-1])
    return out


def _describe(ix: Index, d: Definition, t: Type | None) -> str:
    """Hover text for a name with its definition."""
    if d.kind == "model":
        params = _model_params(ix, d.name)
        return _code(f"(defmodel {d.name}" + "".join(f"\n  {p}" for p in params) + ")") + "\n\nmodel"
    if d.kind == "model-binding":
        return _code(d.detail) + "\n\n" + TOP_FORMS["model"][1]
    if d.kind in ("param", "state-key", "generated", "field", "loader"):
        return _code(d.detail)
    if d.kind == "function":
        return _code(f"{d.name}: {d.detail}") + "\n\nfunction"
    shown = show_type(t) if t is not None else d.detail
    what = {"def": "constant", "binding": "binding"}.get(d.kind, d.kind)
    return _code(f"{d.name}: {shown}") + f"\n\n{what}"


# --------------------------------------------------------------------------- hover


def hover(ix: Index, offset: int) -> HoverInfo | None:
    """What the node at `offset` is: its inferred type and, for a call or a
    form, the operation's or form's signature and one-line doc."""
    node = ix.node_at(offset)
    if node is None:
        return None
    parent = ix.parent(node)
    t = ix.type_at(node)
    if isinstance(node, Sym):
        if isinstance(parent, ListNode) and parent.items and parent.items[0] is node:
            return HoverInfo(node.span, _hover_call(ix, parent, node))
        d = ix.definition_at(offset)
        if d is not None:
            return HoverInfo(node.span, _describe(ix, d, t))
        if t is not None:
            return HoverInfo(node.span, _code(f"{node.name}: {show_type(t)}"))
        return None
    if isinstance(node, Kw):
        return _hover_keyword(ix, node, parent, t)
    if isinstance(node, (Num, Str)):
        return HoverInfo(node.span, _code(show_type(t))) if t is not None else None
    if isinstance(node, ListNode) and node.head:
        return HoverInfo(node.span, _hover_call(ix, node, node.items[0]))
    if t is not None:
        return HoverInfo(node.span, _code(show_type(t)))
    return None


def _hover_call(ix: Index, call: ListNode, head: Node) -> str:
    name = call.head or ""
    out_t = ix.type_at(call)
    arrow = f"\n→ {show_type(out_t)}" if out_t is not None and not isinstance(out_t, ErrorType) else ""
    d = ix.definition_at(head.span.start)
    if d is not None and d.kind not in ("model-binding",):
        return _describe(ix, d, ix.type_at(head))
    if ix.parent(call) is None and name in TOP_FORMS:
        sig, doc = TOP_FORMS[name]
        return _code(sig) + f"\n\n{doc}"
    if d is not None:  # (model x): the model `model` binds
        model = d.detail.split()[-1]
        return _code(f"(model ...) = ({model} ...){arrow}") + "\n\n" + TOP_FORMS["model"][1]
    if name in SPECIAL_FORMS:
        sig, doc = SPECIAL_FORMS[name]
        return _code(sig + arrow) + f"\n\n{doc}"
    if name in INITIALIZERS and _in_params(ix, call):
        sig, doc = INITIALIZERS[name]
        return _code(sig + arrow) + f"\n\nparameter initialiser: {doc}"
    if name in REGISTRY:
        spec = REGISTRY[name]
        return _code(spec.signature + arrow) + f"\n\n{spec.doc}"
    if name in stdlib_docs() and not any(d.name == name for d in ix.defs.values()):
        sig, doc = stdlib_docs()[name]
        return _code(sig + arrow) + f"\n\n{doc}"
    if name in OPTIMIZERS:
        return _code(f"({name} " + " ".join(f":{k} ..." for k in OPTIMIZERS[name]) + ")") + "\n\noptimizer"
    if name in SOURCES:
        return _code(f"({name} " + " ".join(f":{k} ..." for k in SOURCES[name]) + ")") + "\n\nloader source"
    if out_t is not None:
        return _code(show_type(out_t))
    return _code(f"({name} ...)")


def _in_params(ix: Index, node: Node) -> bool:
    """True inside a `defmodel`'s `:params` plist."""
    p = ix.parent(node)
    if not isinstance(p, ListNode):
        return False
    gp = ix.parent(p)
    return isinstance(gp, ListNode) and gp.head == "defmodel" and keyword_value(gp, "params", 2) is p


def _hover_keyword(ix: Index, node: Kw, parent: Node | None, t: Type | None) -> HoverInfo | None:
    d = ix.definition_at(node.span.start)
    if d is not None and d.kind in ("param", "state-key", "generated", "field"):
        doc = {"state-key": "state key, made by `:init`", "generated": "generated name, made by `:finish`",
               "param": "model parameter", "field": "loader field"}[d.kind]
        return HoverInfo(node.span, _code(d.detail) + f"\n\n{doc}")
    if isinstance(parent, ListNode):
        head = parent.head
        idx = next((i for i, it in enumerate(parent.items) if it is node), -1)
        if head in ("getf", "field") and idx == 2:
            pt = ix.type_at(parent)
            obj = ix.type_at(parent.items[1])
            where = "the context" if isinstance(obj, CtxType) else "the batch" if isinstance(obj, BatchType) else "the plist"
            if pt is not None:
                return HoverInfo(node.span, _code(f":{node.name} {show_type(pt)}") + f"\n\nkey of {where}")
        if head in REGISTRY and node.name in REGISTRY[head].kwargs:
            vt = ix.type_at(parent.items[idx + 1]) if idx + 1 < len(parent.items) else None
            return HoverInfo(node.span, _code(f":{node.name} {show_type(vt) if vt else ''}".rstrip())
                             + f"\n\nkeyword of `{head}`: {REGISTRY[head].signature}")
        if (head, node.name) in KEYWORD_DOCS:
            vt = ix.type_at(parent.items[idx + 1]) if idx + 1 < len(parent.items) else None
            shown = f" {show_type(vt)}" if isinstance(vt, (TensorType, PlistType)) else ""
            return HoverInfo(node.span, _code(f":{node.name}{shown}") + f"\n\n{KEYWORD_DOCS[(head, node.name)]}")
    if node.name in DTYPES:
        return HoverInfo(node.span, _code(f":{node.name}") + f"\n\ndtype `{node.name}`")
    if t is not None and not isinstance(t, (ErrorType,)) and not t.show().endswith("keyword"):
        return HoverInfo(node.span, _code(f":{node.name} {show_type(t)}"))
    return None


# --------------------------------------------------------------------------- navigation


def definition(ix: Index, offset: int) -> list[Target]:
    """Where the name at `offset` is defined: a def, loader, model, binding,
    model parameter, loader field, the state key `:init` made, or the name
    `:finish` generated. Empty when it is built in or unknown."""
    d = ix.definition_at(offset)
    if d is None:
        return []
    full = Span(min(d.span.start, d.form_span.start), max(d.span.end, d.form_span.end))
    return [Target(d.span, full)]


def references(ix: Index, offset: int, include_declaration: bool = True) -> list[Ref]:
    """Every occurrence of the name at `offset`, sorted by position."""
    d = ix.definition_at(offset)
    if d is None:
        return []
    refs = ix.refs.get(d.span, {})
    return [Ref(s, w) for s, w in sorted(refs.items(), key=lambda x: x[0].start)
            if include_declaration or s != d.span]


def highlights(ix: Index, offset: int) -> list[Ref]:
    """The occurrences to highlight for the name at `offset` (LSP `documentHighlight`)."""
    return references(ix, offset, True)


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
        if not _SYMBOL_RE.match(new) or _NUMBER_START.match(new):
            raise RenameError(f"`{new_name}` is not a valid name")
        if new in REGISTRY or new in SPECIAL_FORMS or new in TOP_FORMS or new in ("model", "true", "false", "nil"):
            raise RenameError(f"`{new}` is a built-in name")
        for s in ix.refs.get(d.span, {}):
            other = ix.visible(s.start).get(new)
            if other is not None and other.span != d.span:
                raise RenameError(f"`{new}` is already defined here")
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


# --------------------------------------------------------------------------- outline


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


# --------------------------------------------------------------------------- text context


def _scan(text: str, offset: int) -> tuple[list[_Frame], str, int] | None:
    """The brackets open at `offset`, with their complete items, the word being
    typed there and its start. None when `offset` is inside a string or a
    comment. Reads the text itself (not the tree) from the start of the
    top-level form, so it sees half-typed code as the user does: a `(` in
    column 1 starts a top-level form, as in the parser."""
    offset = max(0, min(offset, len(text)))
    start = max(text.rfind("\n(", 0, offset), text.rfind("\r(", 0, offset)) + 1
    frames: list[_Frame] = []
    i = start
    n = len(text)
    while i < offset:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] not in '"\r\n':
                j += 2 if text[j] == "\\" else 1
            if j >= offset:
                return None
            end = j + 1 if j < n and text[j] == '"' else j
            if frames:
                frames[-1].items.append(_Item(text[i:end], i, end))
            i = end
        elif c == ";":
            j = i
            while j < n and text[j] not in "\r\n":
                j += 1
            if j >= offset:
                return None
            i = j
        elif c in "([":
            frames.append(_Frame(i, c))
            i += 1
        elif c in ")]":
            if frames:
                f = frames.pop()
                if frames:
                    frames[-1].items.append(_Item(text[f.open:i + 1], f.open, i + 1))
            i += 1
        elif c in _DELIMS:
            i += 1
        else:
            j = i
            while j < n and text[j] not in _DELIMS:
                j += 1
            if j >= offset:
                return frames, text[i:offset], i
            if frames:
                frames[-1].items.append(_Item(text[i:j], i, j))
            i = j
    return frames, "", offset


def _key_before(frames: list[_Frame], k: int) -> str | None:
    """The keyword just before frame `k`'s opening bracket in its parent frame."""
    if k <= 0 or not frames[k - 1].items:
        return None
    t = frames[k - 1].items[-1].text
    return t[1:] if t.startswith(":") else None


def _head(frames: list[_Frame], k: int) -> str | None:
    f = frames[k]
    if f.bracket == "(" and f.items and not f.items[0].text.startswith((":", "(", "[", '"')):
        return f.items[0].text
    return None


# --------------------------------------------------------------------------- completion


def completions(ix: Index, offset: int) -> Completions | None:
    """What may be typed at `offset`: operations and forms at a call's head,
    the keywords each form and operation takes, context keys in `(getf ctx`,
    state keys in `(getf state`, batch fields (loader fields and generated
    names) in `(field batch`, dtypes, and the names in scope. None inside a
    string or a comment."""
    ctx = _scan(ix.text, offset)
    if ctx is None:
        return None
    frames, prefix, pstart = ctx
    span = Span(pstart, offset)
    if prefix and _NUMBER_START.match(prefix):
        return Completions(span, ())
    if not frames:
        return Completions(span, ())
    items = _complete(ix, frames, prefix, offset)
    seen, unique = set(), []
    for it in items:
        if it.label not in seen:
            seen.add(it.label)
            unique.append(it)
    return Completions(span, tuple(unique))


def _kw(name: str, kind: str = "property", detail: str = "", doc: str = "") -> Completion:
    return Completion(f":{name}", kind, detail, doc, f":{name}")


def _complete(ix: Index, frames: list[_Frame], prefix: str, offset: int) -> list[Completion]:
    k = len(frames) - 1
    fr = frames[k]
    args = fr.items
    key = _key_before(frames, k)
    if fr.bracket == "[":
        return [] if prefix.startswith(":") else _values(ix, offset)
    if not args:
        if prefix.startswith(":"):
            return _data_keys(key, args)
        return _heads(ix, frames, offset)
    head = _head(frames, k)
    if head is None:
        return _data_keys(key, args) if args[0].text.startswith(":") else _values(ix, offset)
    prev = args[-1].text
    used = {a.text[1:] for a in args[1:] if a.text.startswith(":")}
    if prev.startswith(":") and len(args) > 1 and prev[1:] in KEYWORD_VALUES and (not prefix or prefix.startswith(":")):
        return [_kw(v, "enumMember", "dtype" if prev == ":dtype" else prev) for v in KEYWORD_VALUES[prev[1:]]]
    if head in ("getf", "field") and len(args) == 2:
        return _keys_of(ix, head, args[1], offset)
    if head == "cast" and len(args) == 2 or head in ("zeros", "ones") and len(args) == 2 \
            or head == "full" and len(args) == 3:
        return [_kw(d, "enumMember", "dtype") for d in DTYPES]
    keywords = _form_keywords(ix, frames, k, head)
    if prefix.startswith(":") or (keywords and not prefix and _expects_key(head, args, keywords)):
        out = [_kw(w, "property", f"keyword of `{head}`", KEYWORD_DOCS.get((head, w), "")) for w in keywords
               if w not in used]
        if head == "list" and ix.phase_at(offset) == "generate.step":
            out += [_kw(s, "field", d.detail) for s, d in ix.facts.state_keys.items() if s not in used]
        if not out and prefix.startswith(":") and head in REGISTRY:
            out = [_kw(d, "enumMember", "dtype") for d in DTYPES]
        return out
    return _values(ix, offset)


def _expects_key(head: str, args: list[_Item], keywords: tuple[str, ...]) -> bool:
    """True when the next item is a keyword: right after the head (and the
    name, for a named form), or after a complete `:key value` pair."""
    if len(args) == (2 if head in ("loader", "defmodel", "pass") else 1):
        return head in FORM_KEYWORDS
    if args[-1].text.startswith(":"):
        return False
    kws = [i for i, a in enumerate(args) if a.text[1:] in keywords and a.text.startswith(":")]
    return bool(kws) and kws[-1] == len(args) - 2


def _form_keywords(ix: Index, frames: list[_Frame], k: int, head: str) -> tuple[str, ...]:
    key = _key_before(frames, k)
    if key == "params" or (k >= 2 and _key_before(frames, k - 1) == "params"):
        if head in INITIALIZER_KEYWORDS:
            return INITIALIZER_KEYWORDS[head]
    if k == 0 and head in FORM_KEYWORDS:
        return FORM_KEYWORDS[head]
    if head == "stage":
        return FORM_KEYWORDS["stage"]
    if key == "source" and head in SOURCES:
        return SOURCES[head]
    if key == "optimizer" and head in OPTIMIZERS:
        return OPTIMIZERS[head]
    if head in REGISTRY:
        return REGISTRY[head].kwargs
    return ()


def _data_keys(key: str | None, args: list[_Item]) -> list[Completion]:
    used = {a.text[1:] for a in args if a.text.startswith(":")}
    if key in PLIST_KEYWORDS:
        return [_kw(w, "property", f"`:{key}` setting") for w in PLIST_KEYWORDS[key] if w not in used]
    if key == "fields" and len(args) % 3 == 2:
        return [_kw(d, "enumMember", "dtype") for d in DTYPES]
    return []


def _heads(ix: Index, frames: list[_Frame], offset: int) -> list[Completion]:
    k = len(frames) - 1
    if k == 0:
        return [Completion(n, "keyword", sig, doc, n) for n, (sig, doc) in TOP_FORMS.items()]
    key = _key_before(frames, k)
    if key == "source":
        return [Completion(n, "function", "loader source") for n in SOURCES]
    if key == "optimizer":
        return [Completion(n, "function", "optimizer", ", ".join(f":{a}" for a in OPTIMIZERS[n])) for n in OPTIMIZERS]
    if k >= 1 and _key_before(frames, k - 1) == "params":
        out = [Completion(n, "constructor", sig, doc, n) for n, (sig, doc) in INITIALIZERS.items()]
        return out + [Completion(d.name, "class", "sub-model") for d in ix.defs.values() if d.kind == "model"]
    if _head(frames, k - 1) == "curriculum":
        return [Completion("stage", "keyword", "(stage :loader l :records n)")]
    out = [Completion(n, "keyword", sig, doc, n) for n, (sig, doc) in SPECIAL_FORMS.items()]
    out += [Completion(n, "function", s.signature, s.doc, n) for n, s in REGISTRY.items()]
    out += [Completion(n, "function", sig, doc, n) for n, (sig, doc) in stdlib_docs().items()]
    for name, d in ix.visible(offset).items():
        if d.kind in ("model", "model-binding", "function") or isinstance(ix.type_at(d.span), (ModelType, FunctionType)):
            out.append(Completion(name, "class" if d.kind.startswith("model") else "function", d.detail, "", name))
    return out


def _values(ix: Index, offset: int) -> list[Completion]:
    out = []
    for name, d in ix.visible(offset).items():
        kind = {"def": "constant", "loader": "module", "model": "class", "model-binding": "class",
                "function": "function"}.get(d.kind, "variable")
        t = ix.type_at(d.span)
        out.append(Completion(name, kind, t.show() if t is not None else d.detail, "", name))
    out += [Completion(v, "keyword", "bool" if v != "nil" else "nil", "", v) for v in ("true", "false", "nil")]
    return out


def _keys_of(ix: Index, head: str, obj: _Item, offset: int) -> list[Completion]:
    """The keys `(getf obj :` or `(field obj :` may read."""
    t = ix.type_at(Span(obj.start, obj.end))
    if t is None:
        d = ix.visible(offset).get(obj.text)
        t = ix.type_at(d.span) if d is not None else None
    if isinstance(t, SelfType):
        return [_kw(p.split()[0][1:], "field", p) for p in _model_params(ix, t.model)]
    if isinstance(t, BatchType):
        out = []
        for k, v in t.entries:
            gen = k in t.generated
            out.append(_kw(k, "field", f"{v.show()} " + ("generated by `:finish`" if gen else f"field of `{t.loader}`")))
        return out
    if isinstance(t, CtxType):
        return [_kw(k, "field", f"{v.show()} " + ("counter" if k in ix.facts.counters else "context"))
                for k, v in t.entries]
    if isinstance(t, PlistType):
        state = obj.text == "state" and ix.facts.state_keys
        return [_kw(k, "field", f"{v.show()}" + (" state" if state else "")) for k, v in t.entries]
    # Unknown type (the file does not check yet): fall back on the names the parameter usually has.
    if obj.text == "ctx":
        phase = ix.phase_at(offset)
        out = [_kw(k, "field", f"{v.show()} context") for k, v in CTX_KEYS.items()]
        if phase == "objective":
            out += [_kw(c, "field", "[] f32 counter") for c in ix.facts.counters]
        return out
    if obj.text == "state":
        return [_kw(k, "field", d.detail) for k, d in ix.facts.state_keys.items()]
    if head == "field":
        out = [_kw(f, "field", f"field of `{ld}`") for ld, fs in ix.facts.loader_fields.items() for f in fs]
        return out + [_kw(g, "field", d.detail) for g, d in ix.facts.generated.items()]
    return []


# --------------------------------------------------------------------------- signature help


def _signature_for(ix: Index, frames: list[_Frame], k: int, head: str, offset: int) -> tuple[str, str, tuple[str, ...]] | None:
    key = _key_before(frames, k)
    if k >= 1 and _key_before(frames, k - 1) == "params" and head in INITIALIZERS:
        sig, doc = INITIALIZERS[head]
        return sig, doc, INITIALIZER_KEYWORDS[head]
    if key == "optimizer" and head in OPTIMIZERS:
        return f"({head} " + " ".join(f":{a} x" for a in OPTIMIZERS[head]) + ")", "optimizer", OPTIMIZERS[head]
    if key == "source" and head in SOURCES:
        return f"({head} " + " ".join(f":{a} x" for a in SOURCES[head]) + ")", "loader source", SOURCES[head]
    d = ix.visible(offset).get(head)
    if d is not None and d.kind == "model":
        lam = _apply_lambda(ix, d)
        params = [p.name for p in lam.items[1].items if isinstance(p, Sym)][1:] if lam is not None else ["x"]
        return f"({head} {' '.join(params)})", "model", ()
    if d is not None and d.kind == "function":
        form = ix.node(d.form_span)
        lam = form.items[2] if isinstance(form, ListNode) and len(form.items) == 3 else None
        params = [p.name for p in lam.items[1].items if isinstance(p, Sym)] \
            if isinstance(lam, ListNode) and len(lam.items) > 1 and isinstance(lam.items[1], ListNode) else []
        return f"({head} {' '.join(params)})", "function", ()
    if k == 0 and head in TOP_FORMS:
        sig, doc = TOP_FORMS[head]
        return sig, doc, FORM_KEYWORDS.get(head, ())
    if head in SPECIAL_FORMS:
        sig, doc = SPECIAL_FORMS[head]
        return sig, doc, ()
    if head in REGISTRY:
        spec = REGISTRY[head]
        return spec.signature, spec.doc, spec.kwargs
    if head in stdlib_docs():
        sig, doc = stdlib_docs()[head]
        return sig, doc, ()
    return None


def _apply_lambda(ix: Index, d: Definition) -> ListNode | None:
    form = ix.node(d.form_span)
    lam = keyword_value(form, "apply", 2) if isinstance(form, ListNode) else None
    if isinstance(lam, ListNode) and len(lam.items) > 1 and isinstance(lam.items[1], ListNode):
        return lam
    return None


def _sig_params(label: str, kwargs: tuple[str, ...]) -> list[tuple[int, int, str | None]]:
    """The parameters of a signature label: (start, end, keyword or None); a
    keyword the form takes and its value make one parameter (`:axis 0`)."""
    inner_start = label.find(" ")
    if not label.startswith("(") or inner_start < 0:
        return []
    toks = [(m.start(), m.end(), m.group()) for m in _SIG_TOKEN.finditer(label, inner_start, len(label) - 1)]
    out, i = [], 0
    while i < len(toks):
        s, e, t = toks[i]
        if t.startswith(":") and t[1:] in kwargs and i + 1 < len(toks) and toks[i + 1][2][1:] not in kwargs:
            out.append((s, toks[i + 1][1], t[1:]))
            i += 2
        else:
            out.append((s, e, None))
            i += 1
    return out


def signature_help(ix: Index, offset: int) -> Signature | None:
    """The signature of the call around `offset` and the parameter being
    written: positional arguments by count, a keyword argument by its
    keyword. Inside a nested list or vector, the argument it is. None
    outside a call, or inside a string or a comment."""
    ctx = _scan(ix.text, offset)
    if ctx is None:
        return None
    frames, prefix, _ = ctx
    for k in range(len(frames) - 1, -1, -1):
        head = _head(frames, k)
        if head is None:
            continue
        found = _signature_for(ix, frames, k, head, offset)
        if found is None:
            continue
        label, doc, kwargs = found
        params = _sig_params(label, kwargs)
        typing = prefix if k == len(frames) - 1 else ""
        active = _active_param(label, params, frames[k].items[1:], typing, kwargs)
        return Signature(label, doc, tuple((s, e) for s, e, _ in params), active)
    return None


def _active_param(label: str, params, items: list[_Item], prefix: str, kwargs) -> int | None:
    """The parameter the cursor is at, after the complete `items` and with `prefix` typed."""
    pos, pending = 0, None
    i = 0
    while i < len(items):
        t = items[i].text
        if t.startswith(":") and t[1:] in kwargs:
            if i + 1 < len(items):
                i += 2
                continue
            pending = t[1:]
            i += 1
            continue
        pos += 1
        i += 1
    if pending is not None:
        return next((j for j, p in enumerate(params) if p[2] == pending), None)
    if prefix.startswith(":"):
        hit = next((j for j, p in enumerate(params) if p[2] and p[2].startswith(prefix[1:])), None)
        if hit is not None:
            return hit
    positional = [j for j, p in enumerate(params) if p[2] is None]
    if pos < len(positional):
        return positional[pos]
    if positional and label[params[positional[-1]][0]:params[positional[-1]][1]] == "...":
        return positional[-1]
    return None


# --------------------------------------------------------------------------- inlay hints


def inlay_hints(ix: Index, span: Span | None = None) -> list[InlayHint]:
    """The type after every `let*` binding's name, after each state key
    `:init` makes and `:step` returns, and after each name `:finish`
    generates; only those inside `span` when given."""
    out: list[InlayHint] = []
    for node in ix.nodes.values():
        if isinstance(node, ListNode) and node.head == "let*" and len(node.items) > 1 and isinstance(node.items[1], ListNode):
            for b in node.items[1].items:
                if isinstance(b, ListNode) and len(b.items) == 2 and isinstance(b.items[0], Sym):
                    t = ix.type_at(b.items[0])
                    if t is not None:
                        out.append(InlayHint(b.items[0].span.end, ": " + t.show()))
    for phase in ("generate.init", "generate.step", "generate.finish"):
        res = ix.phase_result(phase)
        if res is None:
            continue
        for k, v in plist_pairs(res):
            t = ix.type_at(v)
            if isinstance(t, TensorType):
                out.append(InlayHint(k.span.end, ": " + t.strong().show()))
    if span is not None:
        out = [h for h in out if span.start <= h.offset <= span.end]
    return sorted(out, key=lambda h: h.offset)


# --------------------------------------------------------------------------- semantic tokens


def semantic_tokens(ix: Index) -> list[Token]:
    """A token for every atom and comment, sorted by position: forms as
    `keyword`, operations as `function` (`defaultLibrary`), models as
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
    if is_head and (a.name in REGISTRY or a.name in INITIALIZERS or a.name in OPTIMIZERS or a.name in SOURCES):
        return Token(a.span, "function", ("defaultLibrary",))
    return Token(a.span, "variable")


# --------------------------------------------------------------------------- quick fixes


def quick_fixes(ix: Index, span: Span) -> list[Fix]:
    """Fixes for the diagnostics that overlap `span`:

    * a near miss (`data["replace"]`): replace the name with the suggestion;
    * E-GEN-002 on a dtype: wrap the entry in `(cast ... :dtype)` with the
      dtype `:init` made; E-GEN-002 for a dropped key: return it unchanged;
    * E-CONTRACT-010: move the counter into `prepare` (making one if the
      file has none);
    * E-GEN-004: return the value from the generator (in the state, or as a
      generated name from `:finish`), pass it through `prepare`, and report
      it from `objective` (spec/generation.md, "What a generator may not do").
    """
    out: list[Fix] = []
    for d in ix.result.diagnostics:
        if not (d.span.start <= span.end and span.start <= d.span.end):
            continue
        try:
            out.extend(_fixes_for(ix, d))
        except (IndexError, KeyError, ValueError, AttributeError):  # a fix is optional: never fail the request
            continue
    return out


def _fixes_for(ix: Index, d: Diagnostic) -> list[Fix]:
    data = d.data or {}
    out = []
    if data.get("replace"):
        new = data["replace"]
        old = ix.text[d.span.start:d.span.end]
        out.append(Fix(f"replace `{old}` with `{new}`", d, (Edit(d.span, new),), True))
    if d.code == "E-GEN-002" and data.get("what") == "dtype" and data.get("want_dtype"):
        want = data["want_dtype"]
        old = ix.text[d.span.start:d.span.end]
        out.append(Fix(f"cast `:{data.get('key', '')}` back to {want}", d,
                       (Edit(d.span, f"(cast {old} :{want})"),), True))
    elif d.code == "E-GEN-002" and "what" not in data and data.get("key") in ix.facts.state_keys:
        key = data["key"]
        res = ix.phase_result("generate.step")
        state = _param_name(ix.phase_node("generate.step"), 0, "state")
        if res is not None:
            out.append(Fix(f"return `:{key}` unchanged", d, (_append_entry(ix, res, key, f"(getf {state} :{key})"),)))
    if d.code == "E-CONTRACT-010":
        fix = _move_counter(ix, d)
        if fix is not None:
            out.append(fix)
    if d.code == "E-GEN-004":
        fix = _report_from_objective(ix, d)
        if fix is not None:
            out.append(fix)
    return out


def _param_name(lam: ListNode | None, i: int, default: str) -> str:
    if lam is not None and len(lam.items) > 1 and isinstance(lam.items[1], ListNode) and len(lam.items[1].items) > i:
        p = lam.items[1].items[i]
        if isinstance(p, Sym):
            return p.name
    return default


def _append_entry(ix: Index, lst: ListNode, key: str, value: str) -> Edit:
    """Add `:key value` at the end of a `(list ...)`, on a line of its own when the list has several."""
    at = lst.span.end - 1 if lst.closed else lst.span.end
    src = ix.result.source
    pairs = plist_pairs(lst)
    if pairs and src.line_col(pairs[0][0].span.start)[0] != src.line_col(pairs[-1][0].span.start)[0]:
        col = src.line_col(pairs[0][0].span.start)[1]
        return Edit(Span(at, at), f"{ix.eol()}{' ' * col}:{key} {value}")
    return Edit(Span(at, at), f" :{key} {value}")


def _delete_statement(ix: Index, span: Span) -> Edit:
    """Delete a form and the layout around it: its whole line when it stands alone."""
    text = ix.text
    line_start, before = ix.line_indent(span.start)
    m = _REST_OF_LINE.match(text, span.end)
    if not before.strip() and (m.group(1) or m.end() == len(text)):
        return Edit(Span(line_start, m.end()), "")
    start = span.start
    while start > 0 and text[start - 1] in " \t\r\n":
        start -= 1
    return Edit(Span(start, span.end), "")


def _insert_before(ix: Index, node: Node, stmt: str) -> Edit:
    """Insert a statement before a body item, on its own line with its indentation."""
    line_start, before = ix.line_indent(node.span.start)
    if not before.strip():
        return Edit(Span(line_start, line_start), f"{before}{stmt}{ix.eol()}")
    return Edit(Span(node.span.start, node.span.start), f"{stmt} ")


def _origin_form(ix: Index, d: Diagnostic, head: str) -> ListNode | None:
    """The form a generator effect reports: the diagnostic's own range, unless a model reports it."""
    if d.related:
        return None
    node = ix.node(d.span)
    return node if isinstance(node, ListNode) and node.head == head else None


def _move_counter(ix: Index, d: Diagnostic) -> Fix | None:
    counter = _origin_form(ix, d, "counter")
    if counter is None:
        return None
    stmt = ix.text[counter.span.start:counter.span.end]
    prep = ix.phase_node("prepare")
    edits = [_delete_statement(ix, counter.span)]
    if prep is not None:
        body = _result_siblings(prep.items[2:])
        if not body:
            return None
        edits.append(_insert_before(ix, body[-1], stmt))
    else:
        objective = next((f for f in ix.forms if isinstance(f, ListNode) and f.head == "objective"), None)
        if objective is None:
            return None
        eol = ix.eol()
        new = f"(prepare (lambda (batch ctx){eol}  {stmt}{eol}  batch)){eol}{eol}"
        edits.append(Edit(Span(objective.span.start, objective.span.start), new))
    return Fix("move the counter into `prepare`", d, tuple(sorted(edits, key=lambda e: e.span.start)))


def _report_from_objective(ix: Index, d: Diagnostic) -> Fix | None:
    metric = _origin_form(ix, d, "metric")
    if metric is None or len(metric.items) != 3 or not isinstance(metric.items[1], Kw):
        return None
    name = metric.items[1].name
    value = metric.items[2]
    t = ix.type_at(value)
    phase = ix.phase_at(metric.span.start)
    if not isinstance(t, TensorType) or phase not in ("generate.init", "generate.step", "generate.finish"):
        return None
    if name in ix.facts.state_keys or name in ix.facts.generated or \
            any(name in fs for fs in ix.facts.loader_fields.values()):
        return None
    vtext = ix.text[value.span.start:value.span.end]
    init, step, finish = (ix.phase_result(f"generate.{p}") for p in ("init", "step", "finish"))
    has_finish = ix.phase_node("generate.finish") is not None
    edits = [_delete_statement(ix, metric.span)]

    def carry(phase_name: str) -> str:
        return f"(getf {_param_name(ix.phase_node(phase_name), 0, 'state')} :{name})"

    t = t.strong()
    zeros = f"(zeros [{' '.join(map(str, t.shape))}] :{t.dtype})"
    plan = {"generate.init": [(init, vtext), (step, carry("generate.step"))],
            "generate.step": [(init, zeros), (step, vtext)],
            "generate.finish": [(finish, vtext)]}[phase]
    if phase != "generate.finish" and has_finish:
        plan.append((finish, carry("generate.finish")))
    for lst, text in plan:
        if lst is None:
            return None
        edits.append(_append_entry(ix, lst, name, text))
    prep = ix.phase_result("prepare")
    obj = ix.phase_node("objective")
    inputs = _param_name(obj, 0, "inputs")
    if ix.phase_node("prepare") is not None:
        if prep is None:
            return None
        batch = _param_name(ix.phase_node("prepare"), 0, "batch")
        edits.append(_append_entry(ix, prep, name, f"(field {batch} :{name})"))
    if obj is not None:
        body = _result_siblings(obj.items[2:])
        if body:
            edits.append(_insert_before(ix, body[-1], f"(metric :{name} (getf {inputs} :{name}))"))
    edits.sort(key=lambda e: e.span.start)
    for a, b in zip(edits, edits[1:]):
        if a.span.end > b.span.start:
            return None
    return Fix(f"return `:{name}` from the generator and report it from `objective`", d, tuple(edits))
