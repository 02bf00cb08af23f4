"""The incremental check: results of parts of a file kept from one check of it to the next.

`CheckCache` holds the entries; `Tracker` is told what a computation reads
(a global name, a model's parameters) and calls (a model), the dependencies
an entry is kept with; `reuse(ctx, key, form, kind, compute)` runs a
computation (building a `defmodel`, or checking a model's `:apply` for
given argument types) or replays its entry when every read still gives
what it gave, moved by as much as its form moved. Nothing else of the
checker knows how entries are made, matched, moved or merged.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING, Callable

from .. import ir
from ..source import Span
from ..syntax import ListNode, Node
from .facts import Definition, Facts
from .scope import ALL_NAMES, Binding, Effect

if TYPE_CHECKING:
    from .context import CheckContext

#: A model read of the set of model names (a near-miss suggestion reads it).
ALL_MODELS = "\0every model"


class Tracker:
    """What the computation being recorded reads and calls (else nothing is kept): the global names
    it looks up, the models whose parameters it reads, whether it calls a model."""

    __slots__ = ("reads", "model_reads", "model_calls", "sigs")

    def __init__(self):
        self.reads: set | None = None         # while a computation is recorded, the global names it read
        self.model_reads: set | None = None   # ... and the models it read
        self.model_calls = 0                  # calls of a model so far: a reusable computation makes none
        self.sigs: dict | None = None         # `_model_sig` by model name, once every model is built

    def name_read(self, name: str) -> None:
        """A global name was looked up (`scope.ALL_NAMES`: the set of every global name was read)."""
        if self.reads is not None:
            self.reads.add(name)

    def model_read(self, name: str) -> None:
        """A model's parameters were read (`ALL_MODELS`: the set of model names was read)."""
        if self.model_reads is not None:
            self.model_reads.add(name)

    def model_called(self) -> None:
        """A model was called: what calls one is checked each time, never kept."""
        self.model_calls += 1

    def models_built(self) -> None:
        """Every model is built: their signatures change no more, and are kept once computed."""
        self.sigs = {}

    def _begin(self) -> tuple:
        saved = (self.reads, self.model_reads, self.model_calls)
        self.reads, self.model_reads = set(), set()
        return saved

    def _end(self, saved: tuple) -> tuple[set, set, bool]:
        """(names read, models read, whether a model was called) since `_begin`; an enclosing
        recording gets the reads too."""
        reads, mreads = self.reads, self.model_reads
        self.reads, self.model_reads = saved[0], saved[1]
        if self.reads is not None:
            self.reads |= reads
        if self.model_reads is not None:
            self.model_reads |= mreads
        return reads, mreads, self.model_calls != saved[2]


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


def _copy_model_state(state: dict) -> dict:
    """A model's state (`models.new_state`) whose tables are copies."""
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


_IR_FIELDS: dict[type, tuple[str, ...]] = {}


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


def reuse(ctx: CheckContext, key: tuple, form: ListNode, kind: str, compute: Callable):
    """`compute()`, or what it returned when the cache holds an entry under `key` whose reads still
    hold (its facts and diagnostics replayed, as running it would add them). `kind` is `build`
    (building the `defmodel` `form`: a model's state, `models.new_state`) or `apply` (a model's
    `:apply` in `form` checked for argument types: (body IR, effects))."""
    entry = _cached(ctx, key, form, kind)
    if entry is not None:
        _replay(ctx, entry)
        if kind == "apply":
            return entry.result
        state = _copy_model_state(entry.result)
        # This form's own nodes (the same text, so the same paths).
        state["params"] = {k: (t, init, _node_at(form, node.path)) for k, (t, init, node) in state["params"].items()}
        if state["apply"] is not None:
            state["apply"] = _node_at(form, state["apply"].path)
        if state["lora"] is not None:   # its nodes too: the adapters' diagnostics point at them
            lora = state["lora"]
            state["lora"] = replace(lora, node=_node_at(form, lora.node.path),
                                    rank_node=_node_at(form, lora.rank_node.path),
                                    targets=tuple((k, _node_at(form, n.path)) for k, n in lora.targets))
        return state
    out = []
    entry = _recorded(ctx, form, lambda: out.append(compute()))
    if entry is not None:
        entry.result = out[0] if kind == "apply" else _copy_model_state(out[0])
        ctx.cache.put(key, entry)
    return out[0]


def _binding_sig(ctx: CheckContext, b: Binding | None):
    """What a computation can learn from a global binding, comparable across checks."""
    if b is None:
        return None
    value = (type(b.ir.value), b.ir.value) if isinstance(b.ir, ir.Const) else b.ir is not None
    fn = None
    if b.fn is not None:   # the lambda node (compared by identity) and its scope
        fn = (b.fn[0], "globals" if b.fn[1] is ctx.globals else b.fn[1])
    return (b.type, _definition_sig(b.definition), value, fn, b.stdlib)


def _model_sig_of(ctx: CheckContext, name: str):
    """`_model_sig` of a model now (kept once every model is built: they change no more)."""
    if ctx.tracker.sigs is None:
        return _model_sig(ctx.models.get(name))
    sig = ctx.tracker.sigs.get(name, ctx)
    if sig is ctx:
        sig = ctx.tracker.sigs[name] = _model_sig(ctx.models.get(name))
    return sig


def _reads_hold(ctx: CheckContext, entry: _Entry) -> bool:
    """True when every read an entry recorded gives now what it gave then."""
    names = ctx.globals.names
    for name, sig in entry.reads:
        now = frozenset(names) if name == ALL_NAMES else _binding_sig(ctx, names.get(name))
        if now != sig:
            return False
    for name, sig in entry.model_reads:
        now = tuple(ctx.models) if name == ALL_MODELS else _model_sig_of(ctx, name)
        if now != sig:
            return False
    return True


def _cached(ctx: CheckContext, key, form: ListNode, kind: str) -> _Entry | None:
    """The cache's entry under `key` if every read it made still holds, moved to where
    `form` (the top-level form of the same text) now is; else None."""
    entry = ctx.cache.get(key)
    if entry is None or not _reads_hold(ctx, entry):
        return None
    if entry.start != form.span.start:
        if not form.closed:   # a form without its `)`: its nodes may reach outside its span
            return None
        entry, whole = _moved(ctx, entry, form, kind)
        if whole:
            ctx.cache.put(key, entry)
    return entry


def _moved(ctx: CheckContext, entry: _Entry, form: ListNode, kind: str) -> tuple[_Entry, bool]:
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
        result = (_shift_ir(body, shift) if ctx.build_ir else body,
                  [Effect(e.kind, e.name, shift(e.origin), shift(e.site), e.salted) for e in effects])
    else:
        # A model's state keeps its `repeat` entries' nodes (diagnostics point at them): this parse's.
        result = dict(entry.result, param_defs={k: moved[id(x)] for k, x in entry.result["param_defs"].items()},
                      repeats={k: (count, remat, _node_at(form, node.path))
                               for k, (count, remat, node) in entry.result["repeats"].items()})
    return _Entry(form.span.start, form.span.end, entry.reads, entry.model_reads,
                  {((a + d, b + d) if lo <= a and b <= hi else (a, b)): t for (a, b), t in entry.types.items()},
                  [moved[id(x)] for x in entry.definitions], uses,
                  {((a + d, b + d) if lo <= a and b <= hi else (a, b)): c for (a, b), c in entry.calls.items()},
                  diags, result), \
        kind != "apply" or ctx.build_ir


def _recorded(ctx: CheckContext, form: ListNode, compute) -> _Entry | None:
    """Run `compute()` with the facts and diagnostics it adds and the globals and models it
    reads kept apart, then add them to this check's; the cache entry for it, or None when it
    cannot be reused (it called a model, or used a definition made elsewhere)."""
    saved = (ctx.facts, ctx.diags, ctx.seen)
    f = ctx.facts
    ctx.facts = Facts(state_keys=f.state_keys, generated=f.generated, loader_fields=f.loader_fields,
                      counters=f.counters, phases=f.phases)
    ctx.diags, ctx.seen = [], set()
    outer = ctx.tracker._begin()
    try:
        compute()
    finally:
        facts, diags = ctx.facts, ctx.diags
        ctx.facts, ctx.diags, ctx.seen = saved
        reads, mreads, called = ctx.tracker._end(outer)
    entry = _Entry(form.span.start, form.span.end, (), (), facts.types, facts.definitions, (), facts.calls,
                   diags, None)
    _merge(ctx, entry, facts.uses)
    ctx.cache.misses += 1
    if called:
        return None
    uses = _use_refs(ctx, facts, mreads)
    if uses is None:
        return None
    names = ctx.globals.names
    entry.reads = tuple((n, frozenset(names) if n == ALL_NAMES else _binding_sig(ctx, names.get(n)))
                        for n in sorted(reads))
    entry.model_reads = tuple((n, tuple(ctx.models) if n == ALL_MODELS else _model_sig_of(ctx, n))
                              for n in sorted(mreads))
    entry.uses = uses
    return entry


def _use_refs(ctx: CheckContext, facts: Facts, mreads: set) -> tuple | None:
    """The uses a computation recorded, each definition named so that a later check finds its
    own: made by the computation (kept), a global's, or a model parameter's; None otherwise."""
    local = {id(d) for d in facts.definitions}
    names = ctx.globals.names
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
            m = ctx.models.get(mname) if mname != ALL_MODELS else None
            key = next((k for k, pd in m["param_defs"].items() if pd is d), None) if m else None
            if key is not None:
                out.append((span, "param", (mname, key)))
                break
        else:
            return None
    return tuple(out)


def _replay(ctx: CheckContext, entry: _Entry) -> None:
    """Add a cached computation's facts and diagnostics to this check's, as running it would."""
    ctx.cache.hits += 1
    uses = []
    for span, kind, ref in entry.uses:
        if kind is None:
            uses.append((span, ref))
        elif kind == "global":
            uses.append((span, ctx.globals.names[ref].definition))
        else:
            uses.append((span, ctx.models[ref[0]]["param_defs"][ref[1]]))
    _merge(ctx, entry, uses)
    for n, _ in entry.reads:   # replayed inside a computation being recorded: its reads too
        ctx.tracker.name_read(n)
    for n, _ in entry.model_reads:
        ctx.tracker.model_read(n)


def _merge(ctx: CheckContext, entry: _Entry, uses) -> None:
    """Add an entry's types, calls, definitions, uses and diagnostics to this check's."""
    # `setdefault` of each entry in order, as the computation did (first type wins);
    # `update` where no key is there yet, which is the same.
    for mine, theirs in ((ctx.facts.types, entry.types), (ctx.facts.calls, entry.calls)):
        if mine.keys().isdisjoint(theirs):
            mine.update(theirs)
        else:
            for k, v in theirs.items():
                mine.setdefault(k, v)
    ctx.facts.definitions.extend(entry.definitions)
    ctx.facts.uses.extend(uses)
    for d in entry.diags:
        ctx.report(d)
