"""Names, types and the phase checks: syntax tree to typed IR and diagnostics.

`check(parse_result)` walks the top-level forms (DESIGN.md section 2) in the
order the runtime runs them: loader fields, `:init`, `:step` (whose result
must equal the state `:init` made: the check across trips,
spec/generation.md), `:finish`, `prepare`, `objective`, then each pass. It
never raises for a user's mistake: every problem becomes a `Diagnostic`,
and an expression already reported gets `ERROR` as its type so nothing that
depends on it is reported again.

Besides the IR, it records what an editor needs as plain data (`Facts`):
the type of every expression by range, every definition and every use.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import difflib
import os
import pathlib
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache

# hashlib's own blake2s (what `hashlib.blake2s` is); importing hashlib loads OpenSSL, 2-3 ms of `sexpgpu lint`.
from _blake2 import blake2s

from . import ir
from .diagnostics import Diagnostic, Related, error, warning
from .ops import INITIALIZERS, REGISTRY, RuleCall, RuleError
from .source import SourceText, Span
from .syntax import ErrorNode, Kw, ListNode, Node, Num, ParseResult, Str, Sym, VecNode, form_key, parse as parse_text, plist_pairs, result_node, walk
from .types import (DTYPES, dtype_hint, ERROR, NIL, ErrorType, FunctionType, KeywordType, LoaderType, ModelType,
                    NilType, PlistType, SelfType, ShapeType, StringType, TensorType, TupleType, Type,
                    is_float, same_tensor, scalar)

#: The context keys every phase sees (DESIGN.md section 2, spec "What a generator may read").
CTX_KEYS: dict[str, TensorType] = {
    "step": scalar("i64"), "microbatch": scalar("i32"), "records": scalar("i64"),
    "stage": scalar("i32"), "stage-records": scalar("i64"),
}
#: Context keys that move between the microbatches of one stacked call (W-STACK-001).
PER_MICROBATCH_KEYS = ("microbatch", "records", "stage-records")
#: ... and, in a run with a curriculum, `:stage` too: a stage can end inside a group of microbatches.
PER_MICROBATCH_KEYS_CURRICULUM = PER_MICROBATCH_KEYS + ("stage",)

SPECIAL_FORMS = {
    "let*": ("(let* ((name value) ...) body ...)", "bind names in order, then evaluate the body"),
    "lambda": ("(lambda (param ...) body ...)", "a function; its parameters are typed at each call"),
    "list": ("(list :key value ...)", "a plist of values, a keyword before each"),
    "getf": ("(getf plist :key)", "the entry of a plist, the context, or a model's parameter"),
    "field": ("(field batch :name)", "a loader field or a generated name of the batch"),
    "counter": ("(counter :name value)", "add value to a run-long total that `objective` reads as `(getf ctx :name)`; only in `prepare`"),
    "metric": ("(metric :name value)", "report a value at every logged step; not inside a generator"),
    "diagnostic": ("(diagnostic :name value)", "report a value only when selected with `:diagnostics`"),
}

TOP_FORMS = {
    "def": ("(def name value)", "a compile-time constant: integer, float, shape, dtype keyword, or a function"),
    "loader": ("(loader name :source (...) :batch n :fields (:name [shape] :dtype ...))", "a named loader: where records come from and what they hold"),
    "defmodel": ("(defmodel name :params (...) :apply (lambda (self x) ...))", "a named model: its parameters and how it applies"),
    "model": ("(model name)", "binds `model`: the model objective trains"),
    "defgenerate": ("(defgenerate :trips n :init f :step f :finish f)", "make records on the device inside each step"),
    "prepare": ("(prepare (lambda (batch ctx) ...))", "batch to the plist objective reads; declares counters"),
    "objective": ("(objective (lambda (inputs ctx) ...))", "inputs to a float scalar loss"),
    "pass": ("(pass name :loader l :every n :batches k :prepare f)", "an evaluation pass: prepare and objective, no gradient"),
    "run": ("(run :loader l :steps n :microbatches m :stack s :precision :f32 :seed 0 :optimizer (...))", "the run's settings"),
    "curriculum": ("(curriculum (stage :loader l :records n) ...)", "switch the training loader as records are consumed"),
}

SOURCES = {
    "stride-rows": ("vocab", "seq", "records"),
    "npz": ("path",),
    "text-bytes": ("glob", "seq", "stride"),
}
OPTIMIZERS = {
    "adam": ("lr", "b1", "b2", "eps", "clip"),
    "adamw": ("lr", "b1", "b2", "eps", "weight-decay", "clip"),
    "sgd": ("lr", "momentum", "clip"),
    "lion": ("lr", "b1", "b2", "weight-decay", "clip"),
}
RUN_KEYS = ("loader", "steps", "microbatches", "stack", "precision", "seed", "optimizer", "log",
            "checkpoint", "diagnostics", "devices", "shard-params")


@lru_cache(maxsize=1 << 16)
def place_hash(path: tuple) -> int:
    """The 32-bit place of a draw: a hash of its structural path in its top-level form."""
    digest = blake2s(repr(path).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def near_miss(name: str, candidates) -> str | None:
    """The closest candidate to a misspelt name, or None."""
    got = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return got[0] if got else None


# --------------------------------------------------------------------------- facts for editors


@dataclass
class Definition:
    """A named thing the file defines: `kind` is def, loader, model, param, binding, state-key, generated, ..."""

    name: str
    kind: str
    span: Span          # the name's range
    form_span: Span     # the whole defining form
    detail: str = ""


@dataclass
class Facts:
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

    def define(self, d: Definition) -> Definition:
        """Record a definition and return it."""
        self.definitions.append(d)
        return d


@dataclass
class CheckResult:
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


# --------------------------------------------------------------------------- scopes and frames


@dataclass
class Binding:
    """One name in scope: its type, where it was defined, and for functions the lambda and its scope."""

    type: Type
    definition: Definition | None = None
    ir: ir.Expr | None = None
    fn: tuple | None = None       # (lambda node, scope) for functions
    stdlib: str | None = None     # the name, for a function of the standard library (prelude.sx)


class Scope:
    """A chain of name tables; `lookup` walks outwards."""

    def __init__(self, parent: "Scope | None" = None):
        self.parent, self.names = parent, {}
        # While a cached computation runs (`CheckCache`), the names looked up in this
        # scope (the file's globals), its dependencies; else None.
        self.reads: set | None = None

    def lookup(self, name: str) -> Binding | None:
        """The binding of `name` here or in an enclosing scope, or None."""
        s = self
        while s is not None:
            if s.reads is not None:
                s.reads.add(name)
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
            if s.reads is not None:
                s.reads.add(_ALL_NAMES)
            out |= set(s.names)
            s = s.parent
        return out


# --------------------------------------------------------------------------- results kept across checks

_ALL_NAMES = "\0every global name"   # a read of the set of global names (a near-miss suggestion)
_ALL_MODELS = "\0every model"        # a read of the set of model names


def _definition_sig(d: Definition | None):
    # Not where it is: a cached use of a global is re-pointed to this check's definition
    # (`_replay`), and nothing else of a global's definition reaches a cached result.
    return None if d is None else (d.name, d.kind, d.detail)


def _model_sig(m: dict | None):
    """What `(getf self :key)` reads of a model (`getf_self`), comparable across checks. Not
    where the parameters are defined: a use of one is re-pointed to this check's definition."""
    if m is None:
        return None
    return (tuple((k, v[0]) for k, v in m["params"].items()), tuple(m["subs"].items()), frozenset(m["failed"]),
            m["params_known"], tuple((k, _definition_sig(d)) for k, d in m["param_defs"].items()))


_MODEL_STATE = ("params_known", "frozen", "pretrained", "params", "subs", "failed", "param_defs", "apply")


def _copy_model_state(state: dict) -> dict:
    return {k: (v.copy() if isinstance(v, (dict, set)) else v) for k, v in state.items()}


class _Entry:
    """One cached computation: where its top-level form was (`start`, `end`), what it read,
    what it added, what it returned."""

    __slots__ = ("start", "end", "reads", "model_reads", "types", "definitions", "uses", "calls", "diags", "result")

    def __init__(self, start, end, reads, model_reads, types, definitions, uses, calls, diags, result):
        self.start, self.end, self.reads, self.model_reads = start, end, reads, model_reads
        self.types, self.definitions, self.uses, self.calls = types, definitions, uses, calls
        self.diags, self.result = diags, result


def _node_at(form: Node, path: tuple) -> Node:
    """The node of `form` at a path (the form's key, then child indices; `syntax.Node.path`)."""
    node = form
    for i in path[1:]:
        node = node.items[i]
    return node


_IR_FIELDS: dict[type, tuple[str, ...]] = {}


def _shift_ir(e, shift):
    """An IR tree with every span moved by `shift` (a function of a Span)."""
    if isinstance(e, ir.Expr):
        names = _IR_FIELDS.get(type(e))
        if names is None:
            names = _IR_FIELDS[type(e)] = tuple(f.name for f in fields(e))
        return type(e)(*[_shift_ir(getattr(e, n), shift) for n in names])
    if isinstance(e, Span):
        return shift(e)
    if isinstance(e, tuple):
        return tuple(_shift_ir(x, shift) for x in e)
    return e


class CheckCache:
    """Results of checking parts of one file, kept from one check of it to the next.

    The language server keeps one per open document and passes it to
    `check`, so that an edit re-checks only what it touched. Two kinds of
    computation are kept: building a `defmodel` form (its parameters and
    `:apply`), and checking a model's `:apply` body for given argument types
    (when the body calls no other model and its arguments are tensors).
    An entry holds what the computation added to the facts and diagnostics,
    what it returned, and what it read from the rest of the file: every
    global name it looked up (with the binding found) and every model whose
    parameters it read. It is found by the text of its top-level form and
    the path of its node in it, and reused when every one of those reads
    gives what it gave: its additions are replayed in order, moved by as
    much as the form moved; so a check with a cache gives exactly the
    result of a check without one. Entries that a check does not use are
    dropped after the next check.
    """

    def __init__(self):
        self._old: dict = {}
        self._new: dict = {}
        self.hits = 0
        self.misses = 0

    def get(self, key) -> _Entry | None:
        """The entry under `key`, kept for the next check too; None if there is none."""
        e = self._new.get(key)
        if e is None:
            e = self._old.get(key)
            if e is not None:
                self._new[key] = e
        return e

    def put(self, key, entry: _Entry) -> None:
        """Keep an entry."""
        self._new[key] = entry

    def rotate(self) -> None:
        """End of a check: entries neither used nor made by it are dropped at the end of the next one."""
        self._old, self._new = self._new, {}

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


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
                 unknown_generated: bool = False):
        object.__setattr__(self, "unknown_generated", unknown_generated)
        object.__setattr__(self, "entries", tuple(entries))
        object.__setattr__(self, "loader", loader)
        object.__setattr__(self, "generated", generated)
        object.__setattr__(self, "missing_generated", missing_generated)

    def show(self) -> str:
        return "batch " + PlistType.show(self)


# --------------------------------------------------------------------------- the checker


class Checker:
    """Checks one parsed file. Use `check()` rather than this class directly."""

    def __init__(self, parsed: ParseResult, read_files: bool = False, cache: CheckCache | None = None):
        self.parsed = parsed
        self.cache = cache             # results of an earlier check of this file (`CheckCache`), or None
        self._model_calls = 0          # calls of `call_model` so far: a cached computation makes none
        self._model_reads: set | None = None   # while a cached computation runs, the models it read
        self._sigs: dict | None = None          # `_model_sig` by model name, once every model is built
        self._build_ir = True                   # `run(build_ir)`: without the IR, cached model bodies keep
                                                # their IR's old ranges (`_moved`)
        self.read_files = read_files   # open `:pretrained` files (`sexpgpu run`); lint and the server never do
        self.src = parsed.source
        self.diags: list[Diagnostic] = list(parsed.diagnostics)
        self._seen: set = set()
        self.facts = Facts()
        self.globals = Scope(prelude_scope())
        self._redirect: tuple[Span, str, str] | None = None
        self._contract005: set[int] = set()
        self.forms: dict[str, list[ListNode]] = {}
        self.loaders: dict[str, ir.LoaderIR] = {}
        self.models: dict[str, dict] = {}
        self.root_model: str | None = None
        self.reachable: dict[str, tuple[str, ...]] = {}
        self.params: list[ir.ParamIR] = []
        self.precision = "f32"
        self.frame = Frame("top")
        self._memo: dict = {}
        self._active: list[str] = []
        self.run_ir: ir.RunIR | None = None
        self.counter_names: tuple[str, ...] = ()
        self.lost_heads: set[str] = set()   # forms written without their `(`: reported, not also missing
        self._state_type: PlistType | None = None
        self.pretrained_files: list[tuple[tuple[str, ...], str]] = []
        self.stages: list[tuple[str, int | None]] = []

    # -- reporting ------------------------------------------------------------
    def report(self, d: Diagnostic) -> None:
        """Record a diagnostic once per (code, range); inside a standard-library layer, at the user's call."""
        if self._redirect is not None:
            # A mistake inside a standard-library layer shows at the user's call of it.
            span, name, expects = self._redirect
            d = replace(d, span=span, message=f"in `{name}` (standard library): {d.message}", related=(),
                        help=expects)
        key = (d.code, d.span.start, d.span.end)
        if key not in self._seen:
            self._seen.add(key)
            self.diags.append(d)

    def err(self, code, span, message, **kw) -> ErrorType:
        """Report an error and return ERROR, the type that silences follow-on errors."""
        self.report(error(code, span, message, **kw))
        return ERROR

    def note_type(self, node: Node, t: Type) -> None:
        """Remember a node's type for hover (the first type wins)."""
        self.facts.types.setdefault((node.span.start, node.span.end), t)

    # -- keyword arguments of forms ------------------------------------------
    def keyword_args(self, node: ListNode, start: int, allowed, what: str) -> dict[str, tuple[Kw, Node]]:
        """The `:key value` pairs of a form from item `start`; unknown keys are E-NAME-003 (read as their near miss)."""
        out: dict[str, tuple[Kw, Node]] = {}
        items = node.items[start:]
        present = {it.name for it in items if isinstance(it, Kw)}
        i = 0
        while i < len(items):
            k = items[i]
            if not isinstance(k, Kw):
                self.err("E-FORM-002", k.span, f"`{what}` takes keyword arguments here; this is not a keyword",
                         help="write `:name value` pairs")
                i += 1
                continue
            if i + 1 >= len(items):
                self.err("E-FORM-002", k.span, f"`:{k.name}` of `{what}` has no value")
                break
            if allowed is not None and k.name not in allowed:
                hint = near_miss(k.name, allowed)
                self.err("E-NAME-003", k.span, f"`{what}` has no keyword `:{k.name}`"
                         + (f"; did you mean `:{hint}`?" if hint else ""),
                         help="it takes " + ", ".join(f"`:{a}`" for a in allowed),
                         data={"replace": f":{hint}"} if hint else None)
                if hint is not None and hint not in present:
                    # Read it as the keyword it most likely is: the form is still checked,
                    # and not also reported as missing `:hint` (E-FORM-005).
                    out[hint] = (k, items[i + 1])
                    present.add(hint)
            elif k.name in out:
                self.err("E-NAME-002", k.span, f"`:{k.name}` is given twice")
            else:
                out[k.name] = (k, items[i + 1])
            i += 2
        return out

    def const_keyword(self, kws: dict, key: str, choices: tuple[str, ...], help: str | None = None) -> str:
        """The keyword a setting `:key` names, one of `choices` (the first is the default, taken when the
        setting is absent); anything else is E-FORM-002 naming the choices, and gives the default."""
        if key not in kws:
            return choices[0]
        node = kws[key][1]
        if isinstance(node, Kw) and node.name in choices:
            return node.name
        names = [f"`:{c}`" for c in choices]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        self.err("E-FORM-002", node.span, f"`:{key}` is {listed}", help=help)
        return choices[0]

    def const_int(self, node: Node, what: str, minimum: int | None = None, code="E-TYPE-003") -> int | None:
        """A compile-time integer (at least `minimum`), or None after reporting why not."""
        t = self.infer(node, self.globals).type
        if isinstance(t, ErrorType):
            return None
        if isinstance(t, TensorType) and isinstance(t.value, int) and not isinstance(t.value, bool):
            if minimum is not None and t.value < minimum:
                self.err(code, node.span, f"{what} must be {minimum} or more, got {t.value}")
                return None
            return t.value
        self.err(code, node.span, f"{what} must be a compile-time integer, got {t.show()}")
        return None

    def const_value(self, node: Node):
        """A compile-time constant's Python value (number, string, keyword name, shape), or None after reporting."""
        t = self.infer(node, self.globals).type
        if isinstance(t, TensorType) and t.value is not None:
            return t.value
        if isinstance(t, StringType):
            return t.value
        if isinstance(t, KeywordType):
            return t.name
        if isinstance(t, ShapeType):
            return t.dims
        if isinstance(t, ErrorType):
            return None
        self.err("E-TYPE-003", node.span, f"this must be a compile-time constant, got {t.show()}")
        return None

    def config_plist(self, node: Node, kinds: dict[str, str], what: str) -> dict:
        """A data plist like `(:every 50 :tensorboard true)`. `kinds` maps each allowed key to
        `count` (an integer of 1 or more), `bool` or `string`; a value of another kind is
        E-TYPE-003 and left out."""
        if not isinstance(node, ListNode) or (node.items and not isinstance(node.items[0], Kw)):
            self.err("E-FORM-002", node.span, f"`{what}` takes a plist like `(:every 50)`")
            return {}
        out = {}
        for k, (kw, v) in self.keyword_args(node, 0, tuple(kinds), what).items():
            if kinds[k] == "count":
                val = self.const_int(v, f"`:{k}` of `{what}`", 1)
            else:
                val = self.const_value(v)
                ok = isinstance(val, bool) if kinds[k] == "bool" else isinstance(val, str)
                if val is not None and not ok:
                    self.err("E-TYPE-003", v.span, f"`:{k}` of `{what}` must be "
                             + ("`true` or `false`" if kinds[k] == "bool" else "a string"))
                    val = None
            if val is not None:
                out[k] = val
        return out

    # -- top level ------------------------------------------------------------
    def run(self, build_ir: bool = True) -> CheckResult:
        """Check every form in the runtime's order and build the result (the IR only when there is no
        error, and only with `build_ir`: the language server needs none)."""
        self._build_ir = build_ir
        try:
            return self._run(build_ir)
        finally:
            if self.cache is not None:
                self.cache.rotate()

    def _run(self, build_ir: bool) -> CheckResult:
        # A run of items outside any form (a form that lost its `(`, say) is reported at
        # its first item only, up to the next form.
        stray = False
        for form in self.parsed.forms:
            if not isinstance(form, ListNode) or not form.head:
                if not stray and isinstance(form, Sym) and form.name in TOP_FORMS:
                    self.lost_heads.add(form.name)
                    self.err("E-FORM-004", form.span, f"`{form.name}` is outside any list: the form has lost its `(`",
                             help=f"write `({form.name}` in column 1")
                elif not stray:
                    self.err("E-FORM-004", form.span, "a top-level form must be a list like `(def name value)`",
                             help="if a form lost its `(`, put it back; what follows up to the next form is not reported again")
                stray = True
                continue
            head = form.head
            if head not in TOP_FORMS:
                hint = near_miss(head, TOP_FORMS)
                if stray and hint is None:
                    continue
                stray = False
                self.err("E-FORM-004", form.items[0].span, f"unknown top-level form `{head}`"
                         + (f"; did you mean `{hint}`?" if hint else ""),
                         data={"replace": hint} if hint else None)
                if hint is None:
                    continue
                # Check it as the form it most likely is, so that what it defines
                # is not reported again as missing or unbound.
                head = hint
            stray = False
            self.forms.setdefault(head, []).append(form)
            self.facts.calls[(form.span.start, form.span.end)] = head
        for head in ("model", "defgenerate", "prepare", "objective", "run", "curriculum"):
            for extra in self.forms.get(head, [])[1:]:
                first = self.forms[head][0]
                self.err("E-NAME-002", extra.items[0].span, f"a second `{head}` form; a run file has one",
                         related=[Related(first.items[0].span, "the first one")])
        self.scan_counters()
        for f in self.forms.get("def", []):
            self.top_def(f)
        for f in self.forms.get("loader", []):
            self.top_loader(f)
        for f in self.forms.get("defmodel", []):
            self.declare_model(f)
        self.top_model_binding()
        for f in self.forms.get("defmodel", []):
            self.build_model(f)
        self._sigs = {}   # the models are built: their signatures are final (`_model_sig_of`)
        self.collect_params()
        self.top_run()
        train = self.loaders.get(self.run_ir.loader) if self.run_ir else None
        if train is None and self.loaders and self.forms.get("run"):
            # `run` is broken (reported already): check the phases against the first loader
            # rather than not at all, so their own mistakes still show.
            train = next(iter(self.loaders.values()))
        gen = self.top_generate(train)
        prepare, objective = self.top_train(train, gen)
        passes = self.top_passes(train, gen)
        self.top_curriculum(train)
        self.missing_forms()
        self.diags.sort(key=lambda d: (d.span.start, d.code))
        program = None
        if build_ir and not any(d.is_error for d in self.diags) and objective is not None and self.run_ir and train:
            program = self.program(gen, prepare, objective, passes)
        return CheckResult(self.src, self.parsed, self.diags, self.facts, program)

    def missing_forms(self):
        """E-FORM-001 naming every required top-level form the file lacks."""
        # One diagnostic naming every missing form, at the first form's `(` (or the start of
        # a file with no form): several at one range would be merged into the first by `report`.
        needs = {"loader": "add a `(loader ...)` form",
                 "model": "add `(model NAME)` naming the model objective trains",
                 "objective": "add `(objective (lambda (inputs ctx) loss))`",
                 "run": "add `(run :loader train :steps 100 :optimizer (adam :lr 1e-3))`"}
        missing = [h for h in needs if h not in self.forms and h not in self.lost_heads]
        if not missing:
            return
        start = self.parsed.forms[0].span.start if self.parsed.forms else 0
        names = [f"`{h}`" for h in missing]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        self.err("E-FORM-001", Span(start, start + 1 if self.parsed.forms else start),
                 f"the file has no {listed} form", help="; ".join(needs[h] for h in missing))

    def scan_counters(self):
        """The names `prepare` declares with `counter` (read before the generator is checked, for its nil reasons)."""
        names = []
        for f in self.forms.get("prepare", []):
            for n in walk(f):
                if isinstance(n, ListNode) and n.head == "counter" and len(n.items) > 1 and isinstance(n.items[1], Kw):
                    names.append(n.items[1].name)
        self.counter_names = tuple(dict.fromkeys(names))
        self.facts.counters = self.counter_names

    def define_global(self, name_node: Node, kind: str, form: Node, t: Type, **kw) -> Definition | None:
        """Bind a top-level name, reporting a duplicate or a built-in name (E-NAME-002)."""
        if not isinstance(name_node, Sym):
            self.err("E-FORM-002", name_node.span, f"`{kind}` needs a name here")
            return None
        name = name_node.name
        prev = self.globals.names.get(name)
        if prev is not None and prev.definition is not None:
            self.err("E-NAME-002", name_node.span, f"`{name}` is already defined",
                     related=[Related(prev.definition.span, "first defined here")])
            return None
        if name in REGISTRY or name in SPECIAL_FORMS or name in ("model", "true", "false", "nil"):
            self.err("E-NAME-002", name_node.span, f"`{name}` is a built-in name; choose another")
            return None
        d = self.facts.define(Definition(name, kind, name_node.span, form.span, t.show()))
        self.globals.names[name] = Binding(t, d, **kw)
        self.note_type(name_node, t)
        return d

    def top_def(self, f: ListNode):
        """`(def name value)`: a constant or a function."""
        # A `def` that fails still binds its name, typed ERROR, so its uses are not reported again.
        if len(f.items) != 3:
            self.err("E-FORM-003", f.span, "`def` takes a name and a value: `(def name value)`")
            if len(f.items) > 1 and isinstance(f.items[1], Sym):
                self.define_global(f.items[1], "def", f, ERROR)
            return
        val = f.items[2]
        if isinstance(val, ListNode) and val.head == "lambda":
            params = self.lambda_params(val, None, "def")
            if params is None:
                self.define_global(f.items[1], "function", f, ERROR)
                return
            self.define_global(f.items[1], "function", f, FunctionType(len(params), f.items[1].name if isinstance(f.items[1], Sym) else "lambda"),
                               fn=(val, self.globals))
            return
        e = self.infer(val, self.globals)
        if not isinstance(e.type, ErrorType) and not _is_constant(e.type):
            self.err("E-TYPE-003", val.span, f"`def` needs a compile-time constant, got {e.type.show()}")
            self.define_global(f.items[1], "def", f, ERROR)
            return
        self.define_global(f.items[1], "def", f, e.type, ir=e)

    # -- loaders ---------------------------------------------------------------
    def top_loader(self, f: ListNode):
        """`(loader name :source :batch :fields)` to a LoaderIR."""
        if len(f.items) < 2:
            self.err("E-FORM-003", f.span, "`loader` needs a name")
            return
        kws = self.keyword_args(f, 2, ("source", "batch", "fields"), "loader")
        for need in ("source", "batch", "fields"):
            if need not in kws:
                self.err("E-FORM-005", f.items[1].span if len(f.items) > 1 else f.span, f"`loader` needs `:{need}`")
        if not all(k in kws for k in ("source", "batch", "fields")):
            self.define_global(f.items[1], "loader", f, LoaderType(getattr(f.items[1], "name", "?")))
            return
        source = self.loader_source(kws["source"][1])
        batch = self.const_int(kws["batch"][1], "`:batch`", 1)
        fields = self.loader_fields(kws["fields"][1])
        name = getattr(f.items[1], "name", "?")
        d = self.define_global(f.items[1], "loader", f, LoaderType(name))
        if d is None or source is None or batch is None or fields is None:
            return
        base = os.path.dirname(os.path.abspath(self.src.path)) if self.src.path and not self.src.path.startswith("<") else "."
        self.loaders[name] = ir.LoaderIR(name, source, batch, fields, f.span, base)
        self.facts.loader_fields[name] = tuple(n for n, _, _ in fields)
        d.detail = f"loader {name}: batch {batch}, " + " ".join(f":{n} [{' '.join(map(str, s))}] {dt}" for n, s, dt in fields)

    def loader_source(self, node: Node):
        """A loader's `:source` form to (kind, constant arguments)."""
        if not isinstance(node, ListNode) or node.head not in SOURCES:
            hint = near_miss(node.head, SOURCES) if isinstance(node, ListNode) and node.head else None
            self.err("E-FORM-002", node.span, "`:source` must be one of "
                     + ", ".join(f"`({s} ...)`" for s in SOURCES) + (f"; did you mean `{hint}`?" if hint else ""),
                     data={"replace": hint} if hint else None)
            return None
        kind = node.head
        args: dict = {}
        rest = node.items[1:]
        if rest and not isinstance(rest[0], Kw):
            args[SOURCES[kind][0]] = self.const_value(rest[0])
            start = 2
        else:
            start = 1
        for k, (kw, v) in self.keyword_args(node, start, SOURCES[kind], kind).items():
            args[k] = self.const_value(v)
        return (kind, args)

    def loader_fields(self, node: Node):
        """`:fields (:name [shape] :dtype ...)` to (name, shape, dtype) triples."""
        if not isinstance(node, ListNode):
            self.err("E-FORM-002", node.span, "`:fields` takes `(:name [shape] :dtype ...)`")
            return None
        items, out, i = node.items, [], 0
        while i < len(items):
            k = items[i]
            if not isinstance(k, Kw) or i + 2 >= len(items):
                self.err("E-FORM-002", k.span, "`:fields` takes triples `:name [shape] :dtype`")
                return None
            shape_t = self.infer(items[i + 1], self.globals).type
            dt = items[i + 2]
            if not isinstance(shape_t, ShapeType):
                if not isinstance(shape_t, ErrorType):
                    self.err("E-TYPE-003", items[i + 1].span, f"a field's shape must be a constant vector like `[seq]`, got {shape_t.show()}")
                return None
            if not isinstance(dt, Kw) or dt.name not in DTYPES:
                hint = dtype_hint(dt.name) if isinstance(dt, Kw) else None
                self.err("E-TYPE-002", dt.span, "a field's dtype must be one of " + ", ".join(f"`:{d}`" for d in DTYPES)
                         + (f"; did you mean `:{hint}`?" if hint else ""), data={"replace": f":{hint}"} if hint else None)
                return None
            out.append((k.name, shape_t.dims, dt.name))
            i += 3
        return tuple(out)

    # -- models ------------------------------------------------------------------
    def declare_model(self, f: ListNode):
        """Bind a `defmodel`'s name before any model is built (models may name each other)."""
        if len(f.items) < 2 or not isinstance(f.items[1], Sym):
            self.err("E-FORM-002", f.span, "`defmodel` needs a name: `(defmodel name :params (...) :apply (lambda (self x) ...))`")
            return
        name = f.items[1].name
        d = self.define_global(f.items[1], "model", f, ModelType(name))
        if d is None:
            return
        kws = self.keyword_args(f, 2, ("params", "apply", "frozen", "pretrained"), "defmodel")
        self.models[name] = {"form": f, "kws": kws, "def": d, "params": {}, "param_defs": {}, "subs": {}, "failed": set(), "params_known": True, "apply": None,
                             "frozen": False, "pretrained": None}

    def top_model_binding(self):
        """`(model NAME)`: binds `model` to the root model."""
        # Until a good `(model NAME)` binds it, `model` is ERROR: its calls are not reported
        # again after the missing or bad form is.
        self.globals.names["model"] = Binding(ERROR)
        forms = self.forms.get("model", [])
        if not forms:
            return
        f = forms[0]
        if len(f.items) != 2 or not isinstance(f.items[1], Sym):
            self.err("E-FORM-003", f.span, "`model` takes one model name: `(model student)`")
            return
        name = f.items[1].name
        b = self.globals.lookup(name)
        if b is not None and isinstance(b.type, ErrorType):
            return
        if b is None or not isinstance(b.type, ModelType):
            hint = near_miss(name, self.models)
            self.err("E-NAME-001", f.items[1].span, f"`{name}` is not a model" + (f"; did you mean `{hint}`?" if hint else ""),
                     data={"replace": hint} if hint else None)
            if hint is None:
                return
            # Check the run as the model it most likely names, so mistakes elsewhere still show.
            name, b = hint, self.globals.lookup(hint)
        self.root_model = name
        self.facts.uses.append((f.items[1].span, b.definition))
        d = self.facts.define(Definition("model", "model-binding", f.items[0].span, f.span, f"model {name}"))
        self.globals.names["model"] = Binding(ModelType(name), d)

    def build_model(self, f: ListNode):
        """A `defmodel`'s `:params`, `:apply`, `:frozen` and `:pretrained` (from the cache when it holds them)."""
        name = getattr(f.items[1], "name", None) if len(f.items) > 1 else None
        m = self.models.get(name)
        if m is None or m["form"] is not f:
            return
        if self.cache is None:
            self._build_model(f, name, m)
            return
        key = ("build", self.src.text[f.span.start:f.span.end], f.path)
        entry = self._cached(key, f, "build")
        if entry is not None:
            self._replay(entry)
            state = _copy_model_state(entry.result)
            # This form's own nodes (the same text, so the same paths).
            state["params"] = {k: (t, init, _node_at(f, node.path)) for k, (t, init, node) in state["params"].items()}
            if state["apply"] is not None:
                state["apply"] = _node_at(f, state["apply"].path)
            m.update(state)
            return
        entry = self._recorded(f, lambda: self._build_model(f, name, m))
        if entry is not None:
            entry.result = _copy_model_state({k: m[k] for k in _MODEL_STATE})
            self.cache.put(key, entry)

    def _build_model(self, f: ListNode, name: str, m: dict):
        kws = m["kws"]
        if "params" not in kws:
            self.err("E-FORM-005", f.items[1].span, f"`defmodel {name}` needs `:params`")
            m["params_known"] = False
        if "apply" not in kws:
            self.err("E-FORM-005", f.items[1].span, f"`defmodel {name}` needs `:apply (lambda (self x) ...)`")
        if "frozen" in kws:
            m["frozen"] = bool(self.const_value(kws["frozen"][1]))
        if "pretrained" in kws:
            m["pretrained"] = self.const_value(kws["pretrained"][1])
        if "params" in kws:
            pnode = kws["params"][1]
            if not isinstance(pnode, ListNode) or (pnode.items and not isinstance(pnode.items[0], Kw)):
                self.err("E-FORM-002", pnode.span, "`:params` takes `(:name (normal [shape] :std 0.1) ...)`")
                m["params_known"] = False
            else:
                for k, (kw, v) in self.keyword_args(pnode, 0, None, ":params").items():
                    self.model_param(m, name, kw, v)
                    if k not in m["params"] and k not in m["subs"]:
                        m["failed"].add(k)   # reported; `(getf self :k)` is ERROR, not reported again
        if "apply" in kws:
            lam = kws["apply"][1]
            params = self.lambda_params(lam, None, f"`:apply` of `{name}`")
            if params is not None:
                if len(params) < 1:
                    self.err("E-FORM-003", lam.span, "`:apply` takes `self` first: `(lambda (self x) ...)`")
                else:
                    m["apply"] = lam

    def model_param(self, m, model_name, kw: Kw, v: Node):
        """One `:params` entry: an initialiser (a parameter) or a model name (a sub-model)."""
        if isinstance(v, Sym):
            b = self.globals.lookup(v.name)
            if b is None or not isinstance(b.type, ModelType):
                if self._model_reads is not None:
                    self._model_reads.add(_ALL_MODELS)
                hint = near_miss(v.name, self.models)
                self.err("E-NAME-001", v.span, f"`{v.name}` is not a model" + (f"; did you mean `{hint}`?" if hint else ""))
                return
            self.facts.uses.append((v.span, b.definition))
            m["subs"][kw.name] = v.name
            self.facts.define(Definition(kw.name, "param", kw.span, v.span, f"sub-model {v.name}"))
            return
        if not isinstance(v, ListNode) or v.head not in INITIALIZERS:
            hint = near_miss(v.head, INITIALIZERS) if isinstance(v, ListNode) and v.head else None
            self.err("E-FORM-002", v.span, "a parameter is an initialiser (" + ", ".join(f"`{i}`" for i in INITIALIZERS)
                     + ") or the name of another model" + (f"; did you mean `{hint}`?" if hint else ""),
                     data={"replace": hint} if hint else None)
            return
        kind = v.head
        if len(v.items) < 2:
            self.err("E-FORM-003", v.span, f"`{kind}` needs a shape: `({kind} [d ...])`")
            return
        shape_t = self.infer(v.items[1], self.globals).type
        if not isinstance(shape_t, ShapeType):
            if not isinstance(shape_t, ErrorType):
                self.err("E-TYPE-003", v.items[1].span, f"a parameter's shape must be a constant vector, got {shape_t.show()}")
            return
        start, dtype = 2, "f32"
        if len(v.items) > 2 and isinstance(v.items[2], Kw) and v.items[2].name in DTYPES:
            dtype, start = v.items[2].name, 3
        allowed = {"normal": ("std", "mean", "dtype"), "uniform": ("min", "max", "dtype"),
                   "zeros": ("dtype",), "ones": ("dtype",)}[kind]
        args = {}
        for k, (kk, vv) in self.keyword_args(v, start, allowed, kind).items():
            if k == "dtype":
                if isinstance(vv, Kw) and vv.name in DTYPES:
                    dtype = vv.name
                else:
                    self.err("E-TYPE-002", vv.span, "`:dtype` must be a dtype keyword like `:f32`")
            else:
                args[k] = self.const_value(vv)
        t = TensorType(shape_t.dims, dtype)
        m["params"][kw.name] = (t, (kind, args), v)
        self.note_type(kw, t)
        self.note_type(v, t)
        m["param_defs"][kw.name] = self.facts.define(
            Definition(kw.name, "param", kw.span, v.span, f"{model_name} :{kw.name} {t.show()}"))

    def collect_params(self):
        """Walk the models reachable from `model`: their paths and parameter leaves."""
        if self.root_model is None:
            return
        order = [(self.root_model, ())]
        stack: list[str] = []

        def visit(name, path, frozen):
            if name in stack:
                m = self.models[name]
                self.err("E-MODEL-002", m["def"].span, f"model `{name}` contains itself through `:params`")
                return
            if name in self.reachable:
                return
            m = self.models.get(name)
            if m is None:
                return
            self.reachable[name] = path
            frozen = frozen or m["frozen"]
            stack.append(name)
            for key, (t, init, node) in m["params"].items():
                self.params.append(ir.ParamIR(path + (key,), t.shape, t.dtype, init, frozen, place_hash(node.path)))
            for key, sub in m["subs"].items():
                visit(sub, path + (key,), frozen)
            stack.pop()

        try:
            visit(*order[0], False)
        finally:
            # `visit` refers to itself: without this the checker would live in a reference
            # cycle, freed only by a full collection (the language server avoids those).
            del visit
        self.check_pretrained()

    def check_pretrained(self):
        """Each reachable model's `:pretrained` file: its tensors' names, shapes and dtypes
        against `:params` (read from the safetensors header; no tensor data is read).
        Only with `read_files`: otherwise the file is recorded for the runtime, not opened."""
        self.pretrained_files: list[tuple[tuple[str, ...], str]] = []
        for name, path in self.reachable.items():
            m = self.models[name]
            rel = m["pretrained"]
            if rel is None:
                continue
            node = m["kws"]["pretrained"][1]
            if not isinstance(rel, str):
                self.err("E-FORM-002", node.span, "`:pretrained` takes a file name string")
                continue
            base = os.path.dirname(os.path.abspath(self.src.path)) if not self.src.path.startswith("<") else "."
            full = rel if os.path.isabs(rel) else os.path.join(base, rel)
            if not self.read_files:
                self.pretrained_files.append((path, full))
                continue
            from .safetensors_header import HeaderError, read_header   # (json, struct): only when reading
            try:
                header = read_header(full)
            except HeaderError as e:
                self.err("E-MODEL-003", node.span, f"cannot use `{rel}`: {e}")
                continue
            want = {".".join(p.path[len(path):]): p for p in self.params if p.path[:len(path)] == path}
            # One diagnostic per file listing every mismatch (several at the same range
            # would be merged into the first by `report`).
            wrong = []
            for tname, p in want.items():
                got = header.get(tname)
                shape = "[" + " ".join(map(str, p.shape)) + "]"
                if got is None:
                    wrong.append(f"has no tensor `{tname}` (expected {shape} {p.dtype})")
                elif got != (p.shape, p.dtype):
                    gshape = "[" + " ".join(map(str, got[0])) + "]"
                    wrong.append(f"tensor `{tname}` is {gshape} {got[1]}, `:params` of `{name}` expects {shape} {p.dtype}")
            if wrong:
                self.err("E-MODEL-003", node.span, f"`{rel}`: " + "; ".join(wrong))
            else:
                self.pretrained_files.append((path, full))

    # -- the run -----------------------------------------------------------------
    def top_run(self):
        """The `run` form's settings to a RunIR."""
        forms = self.forms.get("run", [])
        if not forms:
            return
        f = forms[0]
        kws = self.keyword_args(f, 1, RUN_KEYS, "run")
        cfg: dict = {}
        if "loader" not in kws:
            self.err("E-FORM-005", f.items[0].span, "`run` needs `:loader`")
            return
        lnode = kws["loader"][1]
        lt = self.infer(lnode, self.globals).type
        if not isinstance(lt, LoaderType):
            if not isinstance(lt, ErrorType):
                self.err("E-TYPE-001", lnode.span, f"`:loader` must name a loader, got {lt.show()}")
            return
        cfg["loader"] = lt.name
        if "steps" not in kws:
            self.err("E-FORM-005", f.items[0].span, "`run` needs `:steps`")
            return
        steps = self.const_int(kws["steps"][1], "`:steps`", 1)
        mb = self.const_int(kws["microbatches"][1], "`:microbatches`", 1) if "microbatches" in kws else 1
        stack, stack_auto = 1, False
        if "stack" in kws:
            sn = kws["stack"][1]
            if isinstance(sn, Kw) and sn.name == "auto":
                stack_auto, stack = True, mb or 1
            else:
                stack = self.const_int(sn, "`:stack`", 1)
                if stack and mb and mb % stack:
                    self.err("E-FORM-002", sn.span, f"`:stack {stack}` must divide `:microbatches {mb}`")
                    stack = 1
        precision = self.const_keyword(kws, "precision", ("f32", "bf16"))
        self.precision = precision
        seed = self.const_int(kws["seed"][1], "`:seed`", 0) if "seed" in kws else 0
        devices = None
        if "devices" in kws:
            # Data parallel: every batch is split evenly along the mesh's `data` axis (docs/sharding.md).
            dn = kws["devices"][1]
            devices = self.const_int(dn, "`:devices`", 1)
            for lname, ld in (self.loaders.items() if devices else ()):
                if ld.batch % devices:
                    self.err("E-FORM-002", dn.span,
                             f"`:devices {devices}` does not divide `:batch {ld.batch}` of loader `{lname}`: "
                             "each device takes an equal slice of every batch",
                             help=f"make `:batch` a multiple of {devices}, or use a device count that divides it")
        # Parameters and optimizer state whole on every device, or split FSDP-style (docs/sharding.md).
        shard_params = self.const_keyword(
            kws, "shard-params", ("replicated", "fsdp"),
            help="`:fsdp` splits every parameter and its optimizer state along the mesh's `data` axis")
        opt = ("adam", {"lr": 1e-3})
        if "optimizer" in kws:
            on = kws["optimizer"][1]
            if not isinstance(on, ListNode) or on.head not in OPTIMIZERS:
                hint = near_miss(on.head, OPTIMIZERS) if isinstance(on, ListNode) and on.head else None
                self.err("E-FORM-002", on.span, "`:optimizer` is one of " + ", ".join(f"`({o} :lr ...)`" for o in OPTIMIZERS)
                         + (f"; did you mean `{hint}`?" if hint else ""), data={"replace": hint} if hint else None)
            else:
                okw = self.keyword_args(on, 1, OPTIMIZERS[on.head], on.head)
                args = {k: self.const_value(v) for k, (kw, v) in okw.items()}
                lr = args.get("lr")
                if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr <= 0:
                    self.err("E-FORM-002", okw["lr"][1].span, f"`:lr` must be greater than 0, got {lr}",
                             help="a typical learning rate is `3e-4` to `3e-3`")
                opt = (on.head, args)
                self.facts.calls[(on.span.start, on.span.end)] = on.head
        log = self.config_plist(kws["log"][1], {"every": "count", "tensorboard": "bool"}, ":log") if "log" in kws else {}
        ckpt = (self.config_plist(kws["checkpoint"][1], {"every": "count", "dir": "string", "keep": "count"}, ":checkpoint")
                if "checkpoint" in kws else None)
        diag_sel: tuple[str, ...] = ()
        if "diagnostics" in kws:
            dn = kws["diagnostics"][1]
            if isinstance(dn, VecNode) and all(isinstance(i, Kw) for i in dn.items):
                diag_sel = tuple(i.name for i in dn.items)
            else:
                self.err("E-FORM-002", dn.span, "`:diagnostics` takes a vector of names like `[:grad-norm]`")
        if steps is None or mb is None or stack is None or seed is None:
            return
        self.run_ir = ir.RunIR(cfg["loader"], steps, mb, stack, stack_auto, seed, precision, opt,
                               int(log.get("every") or 50), log, ckpt, diag_sel, devices,
                               shard_params=shard_params)

    # -- phases --------------------------------------------------------------------
    def lambda_params(self, node: Node, count: int | None, what: str) -> list[Sym] | None:
        """A lambda's parameter symbols (`count` of them when given), or None after reporting."""
        if not (isinstance(node, ListNode) and node.head == "lambda" and len(node.items) >= 3
                and isinstance(node.items[1], ListNode)):
            self.err("E-FORM-002", node.span, f"{what} must be a `(lambda (params ...) body)`")
            return None
        params = list(node.items[1].items)
        for p in params:
            if not isinstance(p, Sym):
                self.err("E-FORM-002", p.span, "a lambda parameter must be a name")
                return None
        if count is not None and len(params) != count:
            self.err("E-FORM-003", node.items[1].span, f"{what} takes {count} parameters, this lambda has {len(params)}")
            return None
        return params  # type: ignore[return-value]

    def phase(self, name: str, node: Node, param_types: list[Type], frame: Frame, what: str,
              param_kinds=None) -> ir.Phase | None:
        """Check a phase's lambda with its parameters bound to `param_types`; its effects go to `frame`."""
        params = self.lambda_params(node, len(param_types), what)
        if params is None:
            return None
        scope = self.globals.child()
        for p, t in zip(params, param_types):
            d = self.facts.define(Definition(p.name, "binding", p.span, node.span, t.show()))
            scope.names[p.name] = Binding(t, d)
            self.note_type(p, t)
        saved, self.frame = self.frame, frame
        try:
            body = self.infer_body(node.items[2:], scope, node.span)
        finally:
            self.frame = saved
        self.facts.phases[name] = node.span
        return ir.Phase(name, tuple(p.name for p in params), tuple(param_types), body, node.span)

    def ctx_type(self, phase: str) -> CtxType:
        """The context plist a phase sees (objective also sees the counters)."""
        entries = list(CTX_KEYS.items())
        if phase == "objective":
            entries += [(c, scalar("f32")) for c in self.counter_names]
        return CtxType(tuple(entries))

    def generator_frame(self, phase: str) -> Frame:
        """A frame for a generator phase: counters are nil there (spec: What a generator may read)."""
        reason = ("counter `:{}` is declared by `prepare`, which is traced after the generator, "
                  "so `(getf ctx :{})` is nil inside a generator")
        return Frame(phase, {c: reason.format(c, c) for c in self.counter_names})

    def top_generate(self, train: ir.LoaderIR | None):
        """`defgenerate`: its three phases, the check across trips, and what it makes (spec/generation.md)."""
        forms = self.forms.get("defgenerate", [])
        if not forms:
            return None
        f = forms[0]
        kws = self.keyword_args(f, 1, ("trips", "init", "step", "finish"), "defgenerate")
        trips = None
        if "trips" not in kws:
            self.err("E-FORM-005", f.items[0].span, "`defgenerate` needs `:trips`")
        else:
            tn = kws["trips"][1]
            t = self.infer(tn, self.globals).type
            if isinstance(t, TensorType) and isinstance(t.value, int) and not isinstance(t.value, bool) and t.value >= 1:
                trips = t.value
            elif not isinstance(t, ErrorType):
                self.err("E-GEN-005", tn.span, f"`:trips` must be an integer of 1 or more, got "
                         + (str(t.value) if isinstance(t, TensorType) and t.value is not None else t.show()),
                         help="`:step` runs `:trips` times; write `:trips 1` or more")
        for need in ("init", "step"):
            if need not in kws:
                self.err("E-FORM-005", f.items[0].span, f"`defgenerate` needs `:{need}`")
        if train is None or "init" not in kws or "step" not in kws:
            return None
        batch = BatchType(train.batch_type().entries, train.name)
        init_frame = self.generator_frame("generate.init")
        init = self.phase("generate.init", kws["init"][1], [batch, self.ctx_type("generate")], init_frame,
                          "`:init`")
        if init is None:
            return None
        state = self.check_plist_of_tensors(init, "`:init`")
        if state is None:
            return None
        state = PlistType(tuple((k, t.strong() if isinstance(t, TensorType) else t) for k, t in state.entries))
        self._state_type = state   # `getf` on this very object reads a state key (whatever the parameter's name)
        # Definitions of the state keys, where :init made them.
        init_list = result_node(kws["init"][1].items[2:])
        key_defs: dict[str, Definition] = {}
        if isinstance(init_list, ListNode) and init_list.head == "list":
            for k, v in plist_pairs(init_list):
                key_defs[k.name] = self.facts.define(Definition(k.name, "state-key", k.span, v.span,
                                                                f"state :{k.name} {state.get(k.name)}"))
        self.facts.state_keys = key_defs
        step_frame = self.generator_frame("generate.step")
        step = self.phase("generate.step", kws["step"][1], [state, scalar("i64"), self.ctx_type("generate")],
                          step_frame, "`:step`")
        if step is not None:
            self.check_across_trips(step, state, kws["step"][1], key_defs)
        finish = None
        out = state
        frames = [init_frame, step_frame]
        if "finish" in kws:
            fin_frame = self.generator_frame("generate.finish")
            finish = self.phase("generate.finish", kws["finish"][1], [state, self.ctx_type("generate")],
                                fin_frame, "`:finish`")
            frames.append(fin_frame)
            if finish is not None:
                got = self.check_plist_of_tensors(finish, "`:finish`")
                out = got if got is not None else PlistType(())
            else:
                out = PlistType(())
        self.check_generated_names(out, kws.get("finish", kws["step"])[1], train)
        gen_node = kws.get("finish", kws["step"])[1]
        fin_list = result_node(gen_node.items[2:]) if isinstance(gen_node, ListNode) else None
        if isinstance(fin_list, ListNode) and fin_list.head == "list":
            for k, v in plist_pairs(fin_list):
                self.facts.generated[k.name] = self.facts.define(
                    Definition(k.name, "generated", k.span, v.span, f"generated :{k.name} {out.get(k.name)}"))
        ctx_keys = set()
        for fr in frames:
            self.generator_effects(fr)
            ctx_keys |= {e.name for e in fr.effects if e.kind == "ctx"}
        if step is None:
            return None
        out = PlistType(tuple((k, t.strong() if isinstance(t, TensorType) else t) for k, t in out.entries))
        return ir.GenerateIR(trips or 0, init, step, finish, state, out, frozenset(ctx_keys))

    def check_plist_of_tensors(self, phase: ir.Phase, what: str) -> PlistType | None:
        """E-GEN-001 unless a phase returns a plist of tensors; returns the plist."""
        t = phase.out
        site = _result_span(phase.body)
        if isinstance(t, ErrorType):
            return None
        if not isinstance(t, PlistType):
            self.err("E-GEN-001", site, f"{what} returns {t.show()}, not a plist of tensors",
                     help="return `(list :name tensor ...)`")
            return None
        ok = True
        for k, v in t.entries:
            if isinstance(v, ErrorType):
                ok = False
            elif not isinstance(v, TensorType):
                self.err("E-GEN-001", _entry_span(phase.body, k, site),
                         f"{what} returns `:{k}` as {v.show()}; every entry must be a tensor",
                         help="flatten nested plists into entries of their own")
                ok = False
        # An entry already reported stays, typed ERROR, so that reading it later
        # (`getf` in `:step`, `field` in `prepare`) is not reported again.
        return t if ok else PlistType(tuple((k, v if isinstance(v, TensorType) else ERROR) for k, v in t.entries))

    def check_across_trips(self, step: ir.Phase, state: PlistType, node: ListNode, key_defs):
        """E-GEN-002: `:step` must return exactly the keys, shapes and dtypes `:init` made."""
        t = step.out
        site = _result_span(step.body)
        if isinstance(t, ErrorType):
            return
        if not isinstance(t, PlistType):
            self.err("E-GEN-001", site, f"`:step` returns {t.show()}, not a plist of tensors",
                     help="return the next state: " + "`(list " + " ".join(f":{k} ..." for k in state.keys) + ")`")
            return

        def rel(k):
            return [Related(key_defs[k].span, f"`:init` made `:{k}` here")] if k in key_defs else []
        for k, want in state.entries:
            got = t.get(k)
            if isinstance(want, ErrorType):
                continue
            if got is None:
                self.err("E-GEN-002", site, f"`:step` drops `:{k}`, which `:init` made as {want.show()}",
                         related=rel(k), help=f"return `:{k}` in the state, e.g. `:{k} (getf state :{k})`",
                         data={"key": k})
            elif isinstance(got, ErrorType):
                continue
            elif not isinstance(got, TensorType):
                self.err("E-GEN-001", _entry_span(step.body, k, site),
                         f"`:step` returns `:{k}` as {got.show()}; every entry must be a tensor")
            elif not same_tensor(got, want):
                what = "dtype" if got.shape == want.shape else "shape"
                self.err("E-GEN-002", _entry_span(step.body, k, site),
                         f"`:step` returns `:{k}` as `{got.strong().show()}`, but `:init` made it `{want.show()}`",
                         related=rel(k),
                         help=(f"cast it back: `(cast ... :{want.dtype})`" if what == "dtype" else
                               "the state has static shapes: write into a fixed-size tensor with `where`"),
                         data={"key": k, "want_dtype": want.dtype, "got_dtype": got.dtype, "what": what})
        for k, got in t.entries:
            if state.get(k) is None:
                self.err("E-GEN-002", _entry_key_span(step.body, k, site),
                         f"`:step` adds `:{k}`, which `:init` did not make",
                         help=f"make `:{k}` in `:init`, or drop it here")

    def check_generated_names(self, out: PlistType, node: Node, train: ir.LoaderIR):
        """E-GEN-003: a generated name may not be a field of the training loader or a pass's loader."""
        loaders = [train] + [self.loaders[l] for l in self._pass_loaders() if l in self.loaders]
        for k, _ in out.entries:
            for ld in loaders:
                if any(n == k for n, _, _ in ld.fields):
                    body = node.items[2:] if isinstance(node, ListNode) else ()
                    res = result_node(body)
                    span = res.span if res is not None else node.span
                    if isinstance(res, ListNode) and res.head == "list":
                        for kk, _v in plist_pairs(res):
                            if kk.name == k:
                                span = kk.span
                    self.err("E-GEN-003", span, f"the generated name `:{k}` is a field of loader `{ld.name}`",
                             help=f"rename it, e.g. `:{k}-generated`, and read that in `prepare`",
                             related=[Related(ld.span, f"loader `{ld.name}` declares `:{k}`")])
                    break

    def _pass_loaders(self):
        out = []
        for f in self.forms.get("pass", []):
            for i, it in enumerate(f.items):
                if isinstance(it, Kw) and it.name == "loader" and i + 1 < len(f.items) and isinstance(f.items[i + 1], Sym):
                    out.append(f.items[i + 1].name)
        return out

    def per_microbatch_keys(self) -> tuple[str, ...]:
        """The context keys whose value can differ between the copies of one stacked group: a generator
        that reads one keeps the run unstacked (W-STACK-001; its copies share the first copy's context)."""
        return PER_MICROBATCH_KEYS_CURRICULUM if self.forms.get("curriculum") else PER_MICROBATCH_KEYS

    def generator_effects(self, frame: Frame):
        """E-GEN-004, E-CONTRACT-010, W-RAND-001 and W-STACK-001 from what a generator phase does."""
        stacks = self.run_ir is not None and (self.run_ir.stack > 1 or self.run_ir.stack_auto)
        where = f"`:{frame.phase.split('.')[-1]}`"
        for e in frame.effects:
            rel = [Related(e.origin, "reported here")] if e.origin != e.site else []
            if e.kind == "metric":
                self.err("E-GEN-004", e.site, f"a `metric` inside {where}: a generator may not report"
                         + (f" (the model it runs reports `:{e.name}`)" if rel else f" `:{e.name}`"),
                         related=rel, help=f"return the value in the state and report it from `objective`",
                         data={"name": e.name})
            elif e.kind == "counter":
                self.err("E-CONTRACT-010", e.site, f"a `counter` inside {where}: counters belong to `prepare`",
                         related=rel, help="move the counter into `prepare`", data={"name": e.name})
            elif e.kind == "draw" and not e.salted:
                self.report(warning("W-RAND-001", e.site, f"an unsalted draw inside {where} draws the same bits "
                                    "at every step and microbatch", related=rel,
                                    help="salt it, e.g. `:salt (getf ctx :step)`"))
            elif e.kind == "ctx" and e.name in self.per_microbatch_keys() and stacks:
                moves = ("can move between the microbatches of a group (a curriculum stage can end inside one)"
                         if e.name == "stage" else "moves between microbatches")
                self.report(warning("W-STACK-001", e.site, f"{where} reads `:{e.name}`, which {moves}, so the "
                                    "run stays unstacked", related=rel,
                                    help=f"drop the read of `:{e.name}` to let the run stack its microbatches"))

    def batch_for(self, loader: ir.LoaderIR, gen: ir.GenerateIR | None, runs_gen: bool) -> BatchType:
        """The batch a loader gives prepare: its fields, plus the generated names where the generator runs."""
        entries = list(loader.batch_type().entries)
        generated: tuple[str, ...] = ()
        missing: tuple[str, ...] = ()
        if gen is not None:
            if runs_gen:
                entries += list(gen.out.entries)
                generated = gen.out.keys
            else:
                missing = gen.out.keys
        # A generator that failed to check: what it makes is unknown, so reading
        # an unknown name is not reported again (one mistake, one diagnostic).
        broken = gen is None and bool(self.forms.get("defgenerate"))
        return BatchType(tuple(entries), loader.name, generated, missing, broken)

    def top_train(self, train, gen):
        """`prepare` and `objective` on the training loader's batch."""
        prep_forms, obj_forms = self.forms.get("prepare", []), self.forms.get("objective", [])
        if train is None:
            return None, None
        batch = self.batch_for(train, gen, True)
        prepare, inputs = None, batch
        if prep_forms:
            f = prep_forms[0]
            if len(f.items) != 2:
                self.err("E-FORM-003", f.span, "`prepare` takes one lambda: `(prepare (lambda (batch ctx) ...))`")
            else:
                frame = Frame("prepare")
                prepare = self.phase("prepare", f.items[1], [batch, self.ctx_type("prepare")], frame, "`prepare`")
                if prepare is not None:
                    inputs = prepare.out
                    self.counters_effects(frame, "prepare")
        objective = None
        if obj_forms:
            f = obj_forms[0]
            if len(f.items) != 2:
                self.err("E-FORM-003", f.span, "`objective` takes one lambda: `(objective (lambda (inputs ctx) ...))`")
            else:
                objective = self.objective_phase(f.items[1], inputs, "objective")
        return prepare, objective

    def objective_phase(self, node, inputs, name):
        """Check `objective` on `inputs`: it must return a float scalar (E-CONTRACT-002)."""
        frame = Frame("objective")
        ph = self.phase(name, node, [inputs, self.ctx_type("objective")], frame, "`objective`")
        if ph is None:
            return None
        self.counters_effects(frame, "objective")
        t = ph.out
        if not isinstance(t, ErrorType) and not (isinstance(t, TensorType) and t.shape == () and is_float(t.dtype)):
            self.err("E-CONTRACT-002", _result_span(ph.body), f"`objective` must return a float scalar loss, got {t.show()}",
                     help="reduce the loss, e.g. `(mean (cross-entropy logits labels))`")
            return None
        return ph

    def counters_effects(self, frame: Frame, where: str):
        """Effects of `prepare` or `objective`: a counter outside prepare, an unsalted draw."""
        for e in frame.effects:
            if e.kind == "draw" and not e.salted:
                rel = [Related(e.origin, "drawn here")] if e.origin != e.site else []
                self.report(warning("W-RAND-002", e.site, f"an unsalted draw in `{where}` draws the same bits at "
                                    "every step: a dropout mask or noise that never changes", related=rel,
                                    help="salt it, e.g. `:salt (getf ctx :step)`, or with the microbatch too"))
            if e.kind == "counter" and where != "prepare":
                rel = [Related(e.origin, "declared here")] if e.origin != e.site else []
                self.err("E-CONTRACT-010", e.site, f"a `counter` inside `{where}`: counters belong to `prepare`",
                         related=rel, help="move the counter into `prepare`", data={"name": e.name})

    def top_passes(self, train, gen):
        """Each `pass`: its loader, whether the generator runs on it, its prepare and objective."""
        out = []
        for f in self.forms.get("pass", []):
            if len(f.items) < 2 or not isinstance(f.items[1], Sym):
                self.err("E-FORM-002", f.span, "`pass` needs a name: `(pass eval :loader held-out :every 100)`")
                continue
            name = f.items[1].name
            d = self.facts.define(Definition(name, "pass", f.items[1].span, f.span, f"pass {name}"))
            kws = self.keyword_args(f, 2, ("loader", "every", "batches", "prepare"), "pass")
            if "loader" not in kws or "every" not in kws:
                self.err("E-FORM-005", f.items[1].span, "`pass` needs `:loader` and `:every`")
                continue
            lt = self.infer(kws["loader"][1], self.globals).type
            if not isinstance(lt, LoaderType):
                if not isinstance(lt, ErrorType):
                    self.err("E-TYPE-001", kws["loader"][1].span, f"`:loader` must name a loader, got {lt.show()}")
                continue
            every = self.const_int(kws["every"][1], "`:every`", 1)
            batches = self.const_int(kws["batches"][1], "`:batches`", 1) if "batches" in kws else 1
            loader = self.loaders.get(lt.name)
            if loader is None or train is None or every is None or batches is None:
                continue
            runs_gen = gen is not None and loader.signature() == train.signature()
            batch = self.batch_for(loader, gen, runs_gen)
            prep_node = kws["prepare"][1] if "prepare" in kws else (
                self.forms["prepare"][0].items[1] if self.forms.get("prepare") and len(self.forms["prepare"][0].items) == 2 else None)
            prepare, inputs = None, batch
            if prep_node is not None:
                frame = Frame("prepare")
                prepare = self.phase(f"pass {name} prepare", prep_node, [batch, self.ctx_type("prepare")], frame, "`prepare`")
                if prepare is None:
                    continue
                inputs = prepare.out
            obj = self.forms.get("objective")
            if not obj or len(obj[0].items) != 2:
                continue
            objective = self.objective_phase(obj[0].items[1], inputs, f"pass {name} objective")
            if objective is None:
                continue
            out.append(ir.PassIR(name, loader.name, every, batches, runs_gen, prepare, objective, f.span))
        return tuple(out)

    def top_curriculum(self, train):
        """`curriculum` stages: each stage's loader must match the training loader."""
        self.stages: list[tuple[str, int | None]] = []
        for f in self.forms.get("curriculum", [])[:1]:
            for st in f.items[1:]:
                if not (isinstance(st, ListNode) and st.head == "stage"):
                    self.err("E-FORM-002", st.span, "`curriculum` takes `(stage :loader l :records n)` forms")
                    continue
                kws = self.keyword_args(st, 1, ("loader", "records"), "stage")
                if "loader" in kws:
                    lt = self.infer(kws["loader"][1], self.globals).type
                    ld = self.loaders.get(lt.name) if isinstance(lt, LoaderType) else None
                    if ld is not None and train is not None and ld.signature() != train.signature():
                        self.err("E-CONTRACT-001", kws["loader"][1].span,
                                 f"stage loader `{ld.name}` does not have the training loader `{train.name}`'s fields and batch size",
                                 related=[Related(train.span, "the training loader")])
                    records = self.const_int(kws["records"][1], "`:records`", 1) if "records" in kws else None
                    if ld is not None:
                        self.stages.append((ld.name, records))
                else:
                    self.err("E-FORM-005", st.span, "`stage` needs `:loader`")

    # -- expressions -----------------------------------------------------------------
    def infer_body(self, nodes, scope: Scope, span: Span) -> ir.Expr:
        """A body of expressions; its value is the last one's."""
        if not nodes:
            return ir.Const(NIL, span, None)
        exprs = tuple(self.infer(n, scope) for n in nodes)
        if len(exprs) == 1:
            return exprs[0]
        return ir.Seq(exprs[-1].type, span, exprs)

    def infer(self, node: Node, scope: Scope) -> ir.Expr:
        """The typed IR of one expression (and its type remembered for hover)."""
        e = self._infer(node, scope)
        self.note_type(node, e.type)
        return e

    def _infer(self, node: Node, scope: Scope) -> ir.Expr:
        if isinstance(node, Num):
            t = scalar("f32" if node.is_float else "i32", node.value, weak=True)
            return ir.Const(t, node.span, node.value)
        if isinstance(node, Str):
            return ir.Const(StringType(node.value), node.span, node.value)
        if isinstance(node, Kw):
            return ir.Const(KeywordType(node.name), node.span, node.name)
        if isinstance(node, Sym):
            return self.infer_symbol(node, scope)
        if isinstance(node, VecNode):
            items = [self.infer(i, scope) for i in node.items]
            if any(isinstance(i.type, ErrorType) for i in items):
                return ir.Const(ERROR, node.span)
            if all(isinstance(i.type, TensorType) and i.type.shape == () and isinstance(i.type.value, int)
                   and not isinstance(i.type.value, bool) for i in items):
                dims = tuple(i.type.value for i in items)
                return ir.Const(ShapeType(dims), node.span, dims)
            return ir.Vector(TupleType(tuple(i.type for i in items)), node.span, tuple(items))
        if isinstance(node, ErrorNode):
            return ir.Const(ERROR, node.span)   # not read (E-SYNTAX-005): already reported
        assert isinstance(node, ListNode)
        if not node.items:
            return ir.Const(NIL, node.span, None)
        head = node.items[0]
        if isinstance(head, Kw):
            return ir.Const(self.err("E-FORM-002", node.span, "a plist literal like `(:a 1)` is data for settings; "
                                     "build a value with `(list :a 1)`"), node.span)
        if not isinstance(head, Sym):
            self.infer(head, scope)
            return ir.Const(self.err("E-TYPE-004", head.span, "this cannot be called; a call starts with a name"), node.span)
        name = head.name
        self.facts.calls.setdefault((node.span.start, node.span.end), name)
        b = scope.lookup(name)
        if b is not None:
            if b.definition is not None:
                self.facts.uses.append((head.span, b.definition))
            self.note_type(head, b.type)
            if isinstance(b.type, ModelType):
                return self.call_model(node, b.type.name, scope)
            if isinstance(b.type, FunctionType) and b.fn is not None:
                return self.call_function(node, b, scope)
            if isinstance(b.type, ErrorType):
                for a in node.items[1:]:
                    self.infer(a, scope)
                return ir.Const(ERROR, node.span)
            return ir.Const(self.err("E-TYPE-004", head.span, f"`{name}` is {b.type.show()}, not something to call"), node.span)
        special = getattr(self, "form_" + name.replace("*", "_star").replace("-", "_"), None) if name in SPECIAL_FORMS else None
        if special is not None:
            return special(node, scope)
        if name in REGISTRY:
            return self.call_op(node, REGISTRY[name], scope)
        if name in TOP_FORMS:
            return ir.Const(self.err("E-FORM-002", head.span, f"`{name}` is a top-level form; it cannot appear inside an expression"), node.span)
        self.unbound(head, scope, callable_=True)
        for a in node.items[1:]:
            self.infer(a, scope)
        return ir.Const(ERROR, node.span)

    def unbound(self, sym: Sym, scope: Scope, callable_: bool) -> ErrorType:
        """E-NAME-001 for an unbound name, with a near-miss suggestion."""
        cands = set(scope.all_names()) | {"true", "false", "nil"}
        if callable_:
            cands |= set(REGISTRY) | set(SPECIAL_FORMS)
        hint = near_miss(sym.name, cands)
        return self.err("E-NAME-001", sym.span, f"`{sym.name}` is not defined" + (f"; did you mean `{hint}`?" if hint else ""),
                        help=f"replace it with `{hint}`" if hint else "define it with `def`, `let*` or a lambda parameter",
                        data={"replace": hint} if hint else None)

    def infer_symbol(self, node: Sym, scope: Scope) -> ir.Expr:
        """A symbol: a constant, a binding, a model or loader name, or `true`/`false`/`nil`."""
        name = node.name
        if name in ("true", "false"):
            v = name == "true"
            return ir.Const(scalar("bool", v), node.span, v)
        if name == "nil":
            return ir.Const(NIL, node.span, None)
        b = scope.lookup(name)
        if b is None:
            if name in REGISTRY or name in SPECIAL_FORMS:
                return ir.Const(self.err("E-TYPE-004", node.span, f"`{name}` is an operation; call it: `({name} ...)`"), node.span)
            return ir.Const(self.unbound(node, scope, callable_=False), node.span)
        if b.definition is not None:
            self.facts.uses.append((node.span, b.definition))
        if b.ir is not None and isinstance(b.ir, ir.Const):
            return ir.Const(b.type, node.span, b.ir.value)
        if isinstance(b.type, (ModelType, LoaderType, FunctionType)):
            return ir.Const(b.type, node.span, name)
        return ir.Var(b.type, node.span, name)

    # -- special forms -----------------------------------------------------------------
    def form_let_star(self, node: ListNode, scope: Scope) -> ir.Expr:
        """`(let* ((name value) ...) body ...)`: bindings in order."""
        if len(node.items) < 3 or not isinstance(node.items[1], ListNode):
            return ir.Const(self.err("E-FORM-002", node.span, "`let*` takes `((name value) ...)` and a body"), node.span)
        inner = scope.child()
        names, values = [], []
        for b in node.items[1].items:
            if not (isinstance(b, ListNode) and len(b.items) == 2 and isinstance(b.items[0], Sym)):
                self.err("E-FORM-002", b.span, "a `let*` binding is `(name value)`")
                if isinstance(b, ListNode) and b.items and isinstance(b.items[0], Sym):
                    for extra in b.items[1:]:
                        self.infer(extra, inner)
                    # The name is still bound, typed ERROR, so its uses are not reported again.
                    inner.names[b.items[0].name] = Binding(ERROR)
                continue
            v = self.infer(b.items[1], inner)
            d = self.facts.define(Definition(b.items[0].name, "binding", b.items[0].span, b.span, v.type.show()))
            self.note_type(b.items[0], v.type)
            fn = None
            if isinstance(b.items[1], ListNode) and b.items[1].head == "lambda":
                fn = (b.items[1], inner)
            inner.names[b.items[0].name] = Binding(v.type, d, ir=v if isinstance(v, ir.Const) else None, fn=fn)
            names.append(b.items[0].name)
            values.append(v)
        body = self.infer_body(node.items[2:], inner, node.span)
        return ir.Let(body.type, node.span, tuple(names), tuple(values),
                      body.body if isinstance(body, ir.Seq) else (body,))

    def form_lambda(self, node: ListNode, scope: Scope) -> ir.Expr:
        """A lambda as a value (it is typed at each call)."""
        params = self.lambda_params(node, None, "`lambda`")
        if params is None:
            return ir.Const(ERROR, node.span)
        return ir.Const(FunctionType(len(params)), node.span, None)

    def form_list(self, node: ListNode, scope: Scope) -> ir.Expr:
        """`(list :key value ...)`: a plist."""
        keys, values, entries = [], [], []
        items = node.items[1:]
        if len(items) % 2:
            self.err("E-FORM-002", node.span, "`list` takes `:key value` pairs; one is missing its value")
        for k, v in zip(items[0::2], items[1::2]):
            e = self.infer(v, scope)
            if not isinstance(k, Kw):
                self.err("E-FORM-002", k.span, "a plist key must be a keyword like `:row`")
                continue
            if k.name in keys:
                self.err("E-NAME-002", k.span, f"`:{k.name}` appears twice in this plist")
                continue
            keys.append(k.name)
            values.append(e)
            entries.append((k.name, e.type))
            self.note_type(k, e.type)
        return ir.Plist(PlistType(tuple(entries)), node.span, tuple(keys), tuple(values))

    def _key_arg(self, node: ListNode, form: str) -> Kw | None:
        if len(node.items) != 3 or not isinstance(node.items[2], Kw):
            self.err("E-FORM-003", node.span, f"`{form}` takes a value and a keyword: `({form} x :name)`")
            return None
        return node.items[2]

    def form_getf(self, node: ListNode, scope: Scope) -> ir.Expr:
        """`(getf obj :key)` on a plist, the context, or a model's self."""
        key = self._key_arg(node, "getf")
        if key is None:
            for a in node.items[1:]:
                self.infer(a, scope)
            return ir.Const(ERROR, node.span)
        obj = self.infer(node.items[1], scope)
        t = obj.type
        k = key.name
        if isinstance(t, ErrorType):
            return ir.Const(ERROR, node.span)
        if isinstance(t, CtxType):
            self.frame.effects.append(Effect("ctx", k, node.span, node.span))
            got = t.get(k)
            if got is None and k in self.frame.ctx_nil:
                return ir.Const(NilType(self.frame.ctx_nil[k]), node.span, None)
            if got is None:
                hint = near_miss(k, t.keys)
                return ir.Const(self.err("E-NAME-004", key.span, f"the context has no key `:{k}`"
                                         + (f"; did you mean `:{hint}`?" if hint else ""),
                                         help="it has " + ", ".join(f"`:{x}`" for x in t.keys)), node.span)
            return ir.GetF(got, node.span, obj, k)
        if isinstance(t, SelfType):
            return self.getf_self(node, obj, t, key)
        if isinstance(t, PlistType):
            got = t.get(k)
            if got is None:
                hint = near_miss(k, t.keys)
                return ir.Const(self.err("E-NAME-004", key.span, f"this plist has no key `:{k}`"
                                         + (f"; did you mean `:{hint}`?" if hint else ""),
                                         help="its keys are " + ", ".join(f"`:{x}`" for x in t.keys) if t.keys else None,
                                         data={"replace": f":{hint}"} if hint else None), node.span)
            if t is self._state_type and k in self.facts.state_keys:
                self.facts.uses.append((key.span, self.facts.state_keys[k]))
            return ir.GetF(got, node.span, obj, k)
        return ir.Const(self.err("E-TYPE-001", node.items[1].span, f"`getf` needs a plist, got {t.show()}"), node.span)

    def getf_self(self, node, obj, t: SelfType, key: Kw) -> ir.Expr:
        """`(getf self :key)`: a parameter (bf16 under `:precision :bf16`) or a sub-model."""
        m = self.models[t.model]
        if self._model_reads is not None:
            self._model_reads.add(t.model)
        k = key.name
        if k in m["params"]:
            pt = m["params"][k][0]
            self.facts.uses.append((key.span, m["param_defs"][k]))
            if self.precision == "bf16" and is_float(pt.dtype):
                pt = TensorType(pt.shape, "bf16")
            return ir.GetF(pt, node.span, obj, k)
        if k in m["subs"]:
            return ir.Const(ModelType(m["subs"][k]), node.span, m["subs"][k])
        if k in m["failed"] or not m["params_known"]:
            return ir.Const(ERROR, node.span)   # already reported where the parameter is declared
        hint = near_miss(k, list(m["params"]) + list(m["subs"]))
        return ir.Const(self.err("E-NAME-004", key.span, f"model `{t.model}` has no parameter `:{k}`"
                                 + (f"; did you mean `:{hint}`?" if hint else ""),
                                 data={"replace": f":{hint}"} if hint else None), node.span)

    def form_field(self, node: ListNode, scope: Scope) -> ir.Expr:
        """`(field batch :name)`: a loader field or a generated name (E-CONTRACT-001, E-CONTRACT-005)."""
        key = self._key_arg(node, "field")
        if key is None:
            return ir.Const(ERROR, node.span)
        obj = self.infer(node.items[1], scope)
        t = obj.type
        if isinstance(t, ErrorType):
            return ir.Const(ERROR, node.span)
        if not isinstance(t, BatchType):
            if isinstance(t, PlistType):
                got = t.get(key.name)
                if got is not None:
                    return ir.GetF(got, node.span, obj, key.name)
            return ir.Const(self.err("E-TYPE-001", node.items[1].span, f"`field` reads a batch, got {t.show()}"), node.span)
        k = key.name
        got = t.get(k)
        if got is not None:
            if k in t.generated and k in self.facts.generated:
                self.facts.uses.append((key.span, self.facts.generated[k]))
            return ir.GetF(got, node.span, obj, k)
        if k in t.missing_generated:
            if id(t) in self._contract005:
                return ir.Const(ERROR, node.span)   # one diagnostic per pass: the first generated name read
            self._contract005.add(id(t))
            rel = [Related(self.facts.generated[k].span, "`:finish` makes it here")] if k in self.facts.generated else []
            return ir.Const(self.err("E-CONTRACT-005", key.span,
                                     f"`:{k}` is generated, but the generator does not run on loader `{t.loader}`, "
                                     "whose fields or batch size differ from the training loader's",
                                     related=rel, help=f"give the pass a `:prepare` that reads only `{t.loader}`'s fields, "
                                     "or give its loader the training loader's fields and batch size"), node.span)
        if t.unknown_generated:
            return ir.Const(ERROR, node.span)
        hint = near_miss(k, t.keys)
        return ir.Const(self.err("E-CONTRACT-001", key.span, f"the batch has no field `:{k}`: neither loader `{t.loader}` "
                                 "nor the generator provides it" + (f"; did you mean `:{hint}`?" if hint else ""),
                                 help="the batch has " + ", ".join(f"`:{x}`" for x in t.keys),
                                 data={"replace": f":{hint}"} if hint else None), node.span)

    def _report(self, node: ListNode, scope: Scope, kind: str) -> ir.Expr:
        if len(node.items) != 3 or not isinstance(node.items[1], Kw):
            for a in node.items[1:]:
                self.infer(a, scope)
            return ir.Const(self.err("E-FORM-003", node.span, f"`{kind}` takes a name and a value: `({kind} :name value)`"), node.span)
        v = self.infer(node.items[2], scope)
        name = node.items[1].name
        self.frame.effects.append(Effect(kind, name, node.span, node.span))
        if not isinstance(v.type, (TensorType, ErrorType)):
            self.err("E-TYPE-001", node.items[2].span, f"`{kind}` needs a tensor value, got {v.type.show()}")
        return ir.Report(NIL, node.span, kind, name, v)

    def form_counter(self, node, scope):
        """`(counter :name value)`."""
        return self._report(node, scope, "counter")

    def form_metric(self, node, scope):
        """`(metric :name value)`."""
        return self._report(node, scope, "metric")

    def form_diagnostic(self, node, scope):
        """`(diagnostic :name value)`."""
        return self._report(node, scope, "diagnostic")

    # -- calls ---------------------------------------------------------------------------
    def split_args(self, node: ListNode, spec_kwargs, what: str):
        """An op call's positional arguments and keyword arguments (unknown keywords are E-NAME-003)."""
        pos, kw = [], {}
        items = node.items[1:]
        i = 0
        while i < len(items):
            it = items[i]
            # A keyword is positional when it is a dtype, or last and looks like one
            # (`:float32`), so the rule can say which dtype was meant.
            trailing_dtype = i + 1 >= len(items) and isinstance(it, Kw) and dtype_hint(it.name) is not None
            if isinstance(it, Kw) and it.name not in DTYPES and it.name != "auto" and not trailing_dtype:
                if i + 1 >= len(items):
                    self.err("E-FORM-002", it.span, f"`:{it.name}` of `{what}` has no value")
                    i += 1
                    continue
                if it.name not in spec_kwargs:
                    hint = near_miss(it.name, spec_kwargs)
                    self.err("E-NAME-003", it.span, f"`{what}` has no keyword `:{it.name}`"
                             + (f"; did you mean `:{hint}`?" if hint else ""),
                             help=("it takes " + ", ".join(f"`:{a}`" for a in spec_kwargs)) if spec_kwargs else f"`{what}` takes no keywords",
                             data={"replace": f":{hint}"} if hint else None)
                    if hint is not None and hint not in kw:
                        # Read it as the keyword it most likely is, so the call's type is
                        # what the user meant and nothing downstream is reported again.
                        kw[hint] = (it, items[i + 1])
                elif it.name in kw:
                    self.err("E-NAME-002", it.span, f"`:{it.name}` is given twice")
                else:
                    kw[it.name] = (it, items[i + 1])
                i += 2
            else:
                pos.append(it)
                i += 1
        return pos, kw

    def call_op(self, node: ListNode, spec, scope: Scope) -> ir.Expr:
        """A registry op: its arguments, then its shape-and-dtype rule (ops.py)."""
        pos, kws = self.split_args(node, spec.kwargs, spec.name)
        args = [self.infer(a, scope) for a in pos]
        kwargs = {k: self.infer(v, scope) for k, (kw, v) in kws.items()}
        n = len(args)
        if n < spec.min_args or (spec.max_args is not None and n > spec.max_args):
            want = (f"{spec.min_args}" if spec.min_args == spec.max_args else
                    f"{spec.min_args} or more" if spec.max_args is None else f"{spec.min_args} to {spec.max_args}")
            return ir.Const(self.err("E-FORM-003", node.span, f"`{spec.name}` takes {want} arguments, got {n}: `{spec.signature}`"), node.span)
        if any(isinstance(a.type, ErrorType) for a in args) or any(isinstance(a.type, ErrorType) for a in kwargs.values()):
            return ir.Const(ERROR, node.span)
        call = RuleCall(spec.name, [a.type for a in args], {k: v.type for k, v in kwargs.items()})
        try:
            out = spec.rule(call)
        except RuleError as e:
            if isinstance(e.arg, int) and e.arg < len(pos):
                span = pos[e.arg].span
            elif isinstance(e.arg, str) and e.arg in kws:
                span = kws[e.arg][1].span
            else:
                span = node.span
            return ir.Const(self.err(e.code, span, e.message, help=e.help), node.span)
        static = dict(call.static)
        if spec.draw:
            static["place"] = place_hash(node.path)
            self.frame.effects.append(Effect("draw", spec.name, node.span, node.span, salted="salt" in kwargs))
        dyn_kwargs = tuple((k, v) for k, v in kwargs.items() if k == "salt" or k == "temperature")
        return ir.Op(out, node.span, spec.name, tuple(args), dyn_kwargs, static)

    def _resite(self, effects: list[Effect], site: Span) -> None:
        for e in effects:
            self.frame.effects.append(Effect(e.kind, e.name, e.origin, site, e.salted))

    def call_model(self, node: ListNode, name: str, scope: Scope) -> ir.Expr:
        """A model call: reachability (E-MODEL-001), then its `:apply` checked for these argument types."""
        self._model_calls += 1
        args = [self.infer(a, scope) for a in node.items[1:]]
        m = self.models.get(name)
        if m is None:
            return ir.Const(ERROR, node.span)
        if self.root_model is not None and name not in self.reachable:
            return ir.Const(self.err("E-MODEL-001", node.span,
                                     f"`{name}` is called, but `model` (`{self.root_model}`) cannot reach it through `:params`, "
                                     "so it has no parameters in this run",
                                     related=[Related(m["def"].span, f"`{name}` is defined here")],
                                     help=f"add it to a reachable model's `:params`, e.g. `:{name} {name}`"), node.span)
        if self.root_model is None or m["apply"] is None:
            return ir.Const(ERROR, node.span)
        lam = m["apply"]
        params = [p.name for p in lam.items[1].items]
        if len(args) != len(params) - 1:
            return ir.Const(self.err("E-FORM-003", node.span, f"model `{name}` takes {len(params) - 1} arguments, got {len(args)}",
                                     related=[Related(lam.items[1].span, "its `:apply` parameters")]), node.span)
        if any(isinstance(a.type, ErrorType) for a in args):
            return ir.Const(ERROR, node.span)
        compute = "bf16" if self.precision == "bf16" else None
        arg_types = [TensorType(a.type.shape, "bf16") if compute and isinstance(a.type, TensorType) and is_float(a.type.dtype)
                     else a.type for a in args]
        key = (name, tuple(t.show() if not isinstance(t, TensorType) else (t.shape, t.dtype) for t in arg_types))
        if name in self._active:
            return ir.Const(self.err("E-MODEL-002", node.span, f"model `{name}` calls itself"), node.span)
        if key not in self._memo:
            self._memo[key] = self.model_body(name, lam, params, arg_types, m["form"])
        body, effects = self._memo[key]
        self._resite(effects, node.span)
        out = body.type
        return ir.ModelCall(out, node.span, name, self.reachable[name], params[0], tuple(params[1:]), tuple(args),
                            body.body if isinstance(body, ir.Seq) else (body,), compute)

    def model_body(self, name: str, lam: ListNode, params: list[str], arg_types: list[Type], form: ListNode) -> tuple:
        """A model's `:apply` body (`lam`, in the `defmodel` `form`) checked for these argument
        types: (body IR, its effects). From the cache when the body calls no other model and
        its arguments are tensors."""
        if self.cache is None or self._redirect is not None or not all(type(t) is TensorType for t in arg_types):
            return self._model_body(name, lam, params, arg_types)
        key = ("apply", self.src.text[form.span.start:form.span.end], lam.path, name, tuple(arg_types),
               self.precision, self.frame.phase, tuple(self.frame.ctx_nil.items()), len(self._active))
        entry = self._cached(key, form, "apply")
        if entry is not None:
            self._replay(entry)
            return entry.result
        out = []
        entry = self._recorded(form, lambda: out.append(self._model_body(name, lam, params, arg_types)))
        if entry is not None:
            entry.result = out[0]
            self.cache.put(key, entry)
        return out[0]

    def _model_body(self, name: str, lam: ListNode, params: list[str], arg_types: list[Type]) -> tuple:
        scope_m = self.globals.child()
        scope_m.names[params[0]] = Binding(SelfType(name), self.facts.define(
            Definition(params[0], "binding", lam.items[1].items[0].span, lam.span, f"self of {name}")))
        for p, t, pn in zip(params[1:], arg_types, lam.items[1].items[1:]):
            scope_m.names[p] = Binding(t, self.facts.define(Definition(p, "binding", pn.span, lam.span, t.show())))
            self.note_type(pn, t)
        saved, self.frame = self.frame, Frame(self.frame.phase, self.frame.ctx_nil)
        self._active.append(name)
        try:
            body = self.infer_body(lam.items[2:], scope_m, lam.span)
        finally:
            self._active.pop()
            inner, self.frame = self.frame, saved
        return (body, inner.effects)

    # -- the cache (`CheckCache`) ----------------------------------------------------------------
    def _binding_sig(self, b: Binding | None):
        """What a computation can learn from a global binding, comparable across checks."""
        if b is None:
            return None
        value = (type(b.ir.value), b.ir.value) if isinstance(b.ir, ir.Const) else b.ir is not None
        fn = None
        if b.fn is not None:   # the lambda node (compared by identity) and its scope
            fn = (b.fn[0], "globals" if b.fn[1] is self.globals else b.fn[1])
        return (b.type, _definition_sig(b.definition), value, fn, b.stdlib)

    def _model_sig_of(self, name: str):
        """`_model_sig` of a model now (kept once every model is built: they change no more)."""
        if self._sigs is None:
            return _model_sig(self.models.get(name))
        sig = self._sigs.get(name, self)
        if sig is self:
            sig = self._sigs[name] = _model_sig(self.models.get(name))
        return sig

    def _reads_hold(self, entry: _Entry) -> bool:
        """True when every read an entry recorded gives now what it gave then."""
        names = self.globals.names
        for name, sig in entry.reads:
            now = frozenset(names) if name == _ALL_NAMES else self._binding_sig(names.get(name))
            if now != sig:
                return False
        for name, sig in entry.model_reads:
            now = tuple(self.models) if name == _ALL_MODELS else self._model_sig_of(name)
            if now != sig:
                return False
        return True

    def _cached(self, key, form: ListNode, kind: str) -> _Entry | None:
        """The cache's entry under `key` if every read it made still holds, moved to where
        `form` (the top-level form of the same text) now is; else None."""
        entry = self.cache.get(key)
        if entry is None or not self._reads_hold(entry):
            return None
        if entry.start != form.span.start:
            if not form.closed:   # a form without its `)`: its nodes may reach outside its span
                return None
            entry, whole = self._moved(entry, form, kind)
            if whole:
                self.cache.put(key, entry)
        return entry

    def _moved(self, entry: _Entry, form: ListNode, kind: str) -> tuple[_Entry, bool]:
        """An entry moved with its form: every range inside where the form was moves by as
        much; a range elsewhere (a `def`'d function's body, which the reads show unmoved) stays.
        Without `build_ir` a model body's IR is not moved (no result shows it: the checks read
        a model call's type and its effects, never the ranges inside its body), and the
        moved entry, not whole, is not kept. Returns (the entry, whether it is whole)."""
        lo, hi, d = entry.start, entry.end, form.span.start - entry.start

        def shift(s: Span) -> Span:
            return Span(s.start + d, s.end + d) if lo <= s.start and s.end <= hi else s

        moved = {}
        for x in entry.definitions:
            moved[id(x)] = Definition(x.name, x.kind, shift(x.span), shift(x.form_span), x.detail)
        uses = tuple((shift(span), kind_, moved[id(ref)] if kind_ is None and ref is not None else ref)
                     for span, kind_, ref in entry.uses)
        diags = [replace(g, span=shift(g.span), related=tuple(replace(r, span=shift(r.span)) for r in g.related))
                 for g in entry.diags]
        if kind == "apply":
            body, effects = entry.result
            result = (_shift_ir(body, shift) if self._build_ir else body,
                      [Effect(e.kind, e.name, shift(e.origin), shift(e.site), e.salted) for e in effects])
        else:
            result = dict(entry.result, param_defs={k: moved[id(x)] for k, x in entry.result["param_defs"].items()})
        return _Entry(form.span.start, form.span.end, entry.reads, entry.model_reads,
                      {((a + d, b + d) if lo <= a and b <= hi else (a, b)): t for (a, b), t in entry.types.items()},
                      [moved[id(x)] for x in entry.definitions], uses,
                      {((a + d, b + d) if lo <= a and b <= hi else (a, b)): c for (a, b), c in entry.calls.items()},
                      diags, result), \
            kind != "apply" or self._build_ir

    def _recorded(self, form: ListNode, compute) -> _Entry | None:
        """Run `compute()` with the facts and diagnostics it adds and the globals and models it
        reads kept apart, then add them to this check's; the cache entry for it, or None when it
        cannot be reused (it called a model, or used a definition made elsewhere)."""
        saved = (self.facts, self.diags, self._seen, self.globals.reads, self._model_reads)
        f = self.facts
        self.facts = Facts(state_keys=f.state_keys, generated=f.generated, loader_fields=f.loader_fields,
                           counters=f.counters, phases=f.phases)
        self.diags, self._seen, self.globals.reads, self._model_reads = [], set(), set(), set()
        calls = self._model_calls
        try:
            compute()
        finally:
            facts, diags, reads, mreads = self.facts, self.diags, self.globals.reads, self._model_reads
            self.facts, self.diags, self._seen, self.globals.reads, self._model_reads = saved
            if self.globals.reads is not None:
                self.globals.reads |= reads
            if self._model_reads is not None:
                self._model_reads |= mreads
        entry = _Entry(form.span.start, form.span.end, (), (), facts.types, facts.definitions, (), facts.calls,
                       diags, None)
        self._merge(entry, facts.uses)
        self.cache.misses += 1
        if self._model_calls != calls:
            return None
        uses = self._use_refs(facts, mreads)
        if uses is None:
            return None
        names = self.globals.names
        entry.reads = tuple((n, frozenset(names) if n == _ALL_NAMES else self._binding_sig(names.get(n)))
                            for n in sorted(reads))
        entry.model_reads = tuple((n, tuple(self.models) if n == _ALL_MODELS else self._model_sig_of(n))
                                  for n in sorted(mreads))
        entry.uses = uses
        return entry

    def _use_refs(self, facts: Facts, mreads: set) -> tuple | None:
        """The uses a computation recorded, each definition named so that a later check finds its
        own: made by the computation (kept), a global's, or a model parameter's; None otherwise."""
        local = {id(d) for d in facts.definitions}
        names = self.globals.names
        out = []
        for span, d in facts.uses:
            if d is None or id(d) in local:
                out.append((span, None, d))
                continue
            b = names.get(d.name)
            if b is not None and b.definition is d:
                out.append((span, "global", d.name))
                continue
            for mname in mreads:
                m = self.models.get(mname) if mname != _ALL_MODELS else None
                key = next((k for k, pd in m["param_defs"].items() if pd is d), None) if m else None
                if key is not None:
                    out.append((span, "param", (mname, key)))
                    break
            else:
                return None
        return tuple(out)

    def _replay(self, entry: _Entry) -> None:
        """Add a cached computation's facts and diagnostics to this check's, as running it would."""
        self.cache.hits += 1
        uses = []
        for span, kind, ref in entry.uses:
            if kind is None:
                uses.append((span, ref))
            elif kind == "global":
                uses.append((span, self.globals.names[ref].definition))
            else:
                uses.append((span, self.models[ref[0]]["param_defs"][ref[1]]))
        self._merge(entry, uses)
        if self.globals.reads is not None:   # replayed inside a computation being recorded
            self.globals.reads.update(n for n, _ in entry.reads)
        if self._model_reads is not None:
            self._model_reads.update(n for n, _ in entry.model_reads)

    def _merge(self, entry: _Entry, uses) -> None:
        # `setdefault` of each entry in order, as the computation did (first type wins);
        # `update` where no key is there yet, which is the same.
        for mine, theirs in ((self.facts.types, entry.types), (self.facts.calls, entry.calls)):
            if mine.keys().isdisjoint(theirs):
                mine.update(theirs)
            else:
                for k, v in theirs.items():
                    mine.setdefault(k, v)
        self.facts.definitions.extend(entry.definitions)
        self.facts.uses.extend(uses)
        for d in entry.diags:
            self.report(d)

    def call_function(self, node: ListNode, b: Binding, scope: Scope) -> ir.Expr:
        """A `def`'d or standard-library function, inlined for these argument types."""
        lam, fscope = b.fn
        params = [p.name for p in lam.items[1].items]
        args = [self.infer(a, scope) for a in node.items[1:]]
        if len(args) != len(params):
            name = node.items[0].name if isinstance(node.items[0], Sym) else "this function"
            return ir.Const(self.err("E-FORM-003", node.span,
                                     f"`{name}` takes {_count(len(params), 'argument')} "
                                     f"`({name} {' '.join(params)})`, got {len(args)}"), node.span)
        if any(isinstance(a.type, ErrorType) for a in args):
            return ir.Const(ERROR, node.span)
        if len(self._active) > 32:
            return ir.Const(self.err("E-FORM-002", node.span, "functions call each other too deeply (recursion is not supported)"), node.span)
        redirect = b.stdlib is not None and self._redirect is None
        if redirect:
            # The layer's text is not in this file: its facts are not this file's, and
            # its diagnostics show at this call.
            saved_facts, self.facts = self.facts, Facts()
            sig, doc = stdlib_docs()[b.stdlib]
            got = ", ".join(f"{p} {a.type.show()}" for p, a in zip(params, args))
            self._redirect = (node.span, b.stdlib, f"`{sig}` takes {doc.removesuffix(' (standard library)')}; "
                                                   f"this call gives {got}")
        inner = fscope.child()
        for p, a, pn in zip(params, args, lam.items[1].items):
            inner.names[p] = Binding(a.type, self.facts.define(Definition(p, "binding", pn.span, lam.span, a.type.show())))
        saved, self.frame = self.frame, Frame(self.frame.phase, self.frame.ctx_nil)
        self._active.append("<fn>")
        try:
            body = self.infer_body(lam.items[2:], inner, lam.span)
        finally:
            self._active.pop()
            fr, self.frame = self.frame, saved
            if redirect:
                self.facts, self._redirect = saved_facts, None
        self._resite(fr.effects, node.span)
        return ir.Apply(body.type, node.span, tuple(params), tuple(args), body.body if isinstance(body, ir.Seq) else (body,))

    # -- program ---------------------------------------------------------------------------
    def program(self, gen, prepare, objective, passes) -> ir.Program:
        """The Program IR of a file without errors."""
        run = self.run_ir
        stackable = True
        if gen is not None and gen.ctx_keys & set(self.per_microbatch_keys()):
            stackable = False
        metrics, diags = [], []
        for n in _all_reports(objective.body, "metric"):
            metrics.append(n)
        for n in _all_reports(objective.body, "diagnostic"):
            diags.append(n)
        return ir.Program(self.src.path, dict(self.loaders), tuple(self.params), self.root_model, gen, prepare,
                          objective, passes, run, identity(self.parsed), stackable,
                          tuple(dict.fromkeys(metrics)), tuple(dict.fromkeys(diags)), self.counter_names,
                          tuple(self.stages), tuple(self.pretrained_files), self.src.text)


# --------------------------------------------------------------------------- helpers


def _count(n: int, noun: str) -> str:
    """`1 argument`, `3 arguments`."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _is_constant(t: Type) -> bool:
    return (isinstance(t, TensorType) and t.value is not None) or isinstance(t, (ShapeType, KeywordType, StringType))


def _result_expr(e: ir.Expr) -> ir.Expr:
    while True:
        if isinstance(e, ir.Let) and e.body:
            e = e.body[-1]
        elif isinstance(e, ir.Seq) and e.body:
            e = e.body[-1]
        else:
            return e


def _result_span(e: ir.Expr) -> Span:
    return _result_expr(e).span


def _entry_span(e: ir.Expr, key: str, default: Span) -> Span:
    r = _result_expr(e)
    if isinstance(r, ir.Plist):
        for k, v in zip(r.keys, r.values):
            if k == key:
                return v.span
    return default


def _entry_key_span(e: ir.Expr, key: str, default: Span) -> Span:
    return _entry_span(e, key, default)


def _all_reports(e, kind):
    """Names of every report of `kind` in an IR tree (models included)."""
    out = []
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, ir.Report) and n.kind == kind:
            out.append(n.name)
        for attr in ("args", "values", "body", "items"):
            v = getattr(n, attr, None)
            if isinstance(v, tuple):
                stack.extend(x for x in v if isinstance(x, ir.Expr))
        for attr in ("obj", "value"):
            v = getattr(n, attr, None)
            if isinstance(v, ir.Expr):
                stack.append(v)
        if isinstance(n, ir.Op):
            stack.extend(v for _, v in n.kwargs)
    return out


def identity(parsed: ParseResult) -> str:
    """A hash of the file's forms, not its comments or layout (a checkpoint's identity with the seed)."""
    def canon(n):
        if isinstance(n, ListNode):
            return "(" + " ".join(canon(i) for i in n.items) + ")"
        if isinstance(n, VecNode):
            return "[" + " ".join(canon(i) for i in n.items) + "]"
        if isinstance(n, Kw):
            return ":" + n.name
        if isinstance(n, Sym):
            return n.name
        if isinstance(n, Str):
            return repr(n.value)
        if isinstance(n, Num):
            return repr(n.value)
        return "?"
    import hashlib
    text = "\n".join(canon(f) for f in parsed.forms)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


PRELUDE = pathlib.Path(__file__).with_name("prelude.sx")


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


def check(parsed: ParseResult, read_files: bool = False, cache: CheckCache | None = None,
          build_ir: bool = True) -> CheckResult:
    """Check a parsed file: diagnostics, editor facts, and the IR when there is no error. Never raises for user input.

    Opens no file unless `read_files` (then each `:pretrained` file's header, for E-MODEL-003).
    `cache`, kept from the check of an earlier version of the same file, makes the check
    incremental (the result is the same); `build_ir=False` leaves `program` None."""
    return Checker(parsed, read_files, cache).run(build_ir)


def check_expression(text: str, names: dict[str, Type]) -> tuple[ir.Expr | None, list[Diagnostic]]:
    """Check one expression with `names` bound to the given types (tests, hover experiments).

    Returns the IR (None when the text holds no expression) and the diagnostics.
    """
    from .syntax import parse as _parse
    parsed = _parse(SourceText(text))
    checker = Checker(parsed)
    scope = checker.globals.child()
    for n, t in names.items():
        scope.names[n] = Binding(t)
    if not parsed.forms:
        return None, list(parsed.diagnostics)
    e = checker.infer(parsed.forms[0], scope)
    return e, checker.diags
