"""The checking context: the state one check of a file reads and writes, and how it reports.

Every piece of the checker (`forms`, `models`, `infer`, `generate`, `phases`,
`contracts`, `program`, `incremental`) is a function taking a `CheckContext`
first. It holds the parsed file, the diagnostics so far, the editor facts,
the global scope, what the top-level forms defined (loaders, models, the
run's settings), the phase being checked, and the dependency tracker of the
incremental check (`incremental.Tracker`). Also here: the near-miss
suggestion and where a diagnostic about a phase's result points.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import difflib
from dataclasses import replace

from .. import ir
from ..cancel import CancelToken
from ..diagnostics import Diagnostic, error
from ..source import Span
from ..syntax import ListNode, Node, ParseResult, Sym, keyword_value
from ..types import ERROR, ErrorType, PlistType, Type
from .facts import Facts
from .incremental import CheckCache, Tracker
from .scope import Frame, Scope, prelude_scope


class CheckContext:
    """The state of one check of one parsed file (`check()` makes one and runs `toplevel.check_file` on it)."""

    def __init__(self, parsed: ParseResult, read_files: bool | str = False, cache: CheckCache | None = None,
                 cancel: CancelToken | None = None):
        self.parsed = parsed
        self.cancel = cancel           # looked at before each top-level form (`poll`): the server's token
        self.cache = cache             # results of an earlier check of this file (`CheckCache`), or None
        self.tracker = Tracker()       # what a cached computation reads and calls (`incremental`)
        # `toplevel.check_file(build_ir)`: without the IR, cached model bodies keep their IR's old ranges
        self.build_ir = True
        # the `:pretrained` files' headers: read (True: `sexpgpu run`, `lint --read-files`), read where
        # the checkpoint is on this machine ("local": the language server), or never opened (False)
        self.read_files = read_files
        self.src = parsed.source
        self.diags: list[Diagnostic] = list(parsed.diagnostics)
        self.seen: set = set()         # (code, start, end) of every diagnostic reported
        self.facts = Facts()
        self.globals = Scope(prelude_scope())
        if cache is not None:
            self.globals.tracker = self.tracker
        self.redirect: tuple[Span, str, str] | None = None   # inside a standard-library layer: its call
        self.redirect_args: dict[int, list[str]] = {}   # there: the layer's arguments by their type's id
        self.contract005: set[int] = set()   # the batches (by id) a generated name was read from (E-CONTRACT-005)
        self.forms: dict[str, list[ListNode]] = {}
        self.loaders: dict[str, ir.LoaderIR] = {}
        self.models: dict[str, dict] = {}
        self.root_model: str | None = None
        self.reachable: dict[str, tuple[str, ...]] = {}
        self.repeats: dict[str, tuple] = {}   # a repeated block: (count, remat policy, its `repeat` entry)
        self.stacked: dict[str, tuple] = {}   # a model under a repeat: (block, count, the `repeat` entry)
        self.params: list[ir.ParamIR] = []
        self.adapters: dict[str, dict[str, tuple[float, float]]] = {}   # an adapted model: each `:lora` target key -> (scale, dropout)
        self.lora_params: list[tuple] = []   # (base path, input axes, LoraSetting, the `:lora` model), check/lora.py
        self.frozen_models: set[str] = set()   # the reachable models whose parameters are frozen
        self.precision = "f32"
        self.remat: str | None = None   # `(run ... :remat p)`: the default policy of every repeated block
        self.frame = Frame("top")
        self.memo: dict = {}           # a model's `:apply` checked for argument types: (body, effects)
        self.active: list[str] = []    # the models and functions being checked, innermost last
        self.run_ir: ir.RunIR | None = None
        self.counter_names: tuple[str, ...] = ()
        self.lost_heads: set[str] = set()   # forms written without their `(`: reported, not also missing
        self.trips: int | None = None   # the generator's `:trips`, where it is a valid integer
        self.state_type: PlistType | None = None   # the generator's state (`getf` on it reads a state key)
        self.pretrained_files: list = []   # ir.PretrainedIR, by check/pretrained.py
        self.pretrained_mapped: list = []   # every `:pretrained` whose mapping fits, its files read or not
        self.refused_configs: set = set()   # (config.json, why): a config whose family is refused, reported once
        # each `:pretrained` model read through a standard-library mapping, compared with its config.json once
        # the phases are checked (the values folded in the models' bodies are known then): check/config.py
        self.stated_configs: list = []
        self.stages: list[tuple[str, int | None]] = []
        self.expanded: set[int] = set()   # the `defmodel` forms a one form expanded into (by id: check/one_form.py)

    def adapters_of(self, name: str) -> tuple[tuple[str, float, float], ...]:
        """`ir.ModelCall.adapters` of a call of model `name`: each LoRA target key, its scale and dropout."""
        return tuple((k, scale, p) for k, (scale, p) in self.adapters.get(name, {}).items())

    def poll(self) -> None:
        """Between two top-level forms: raise `cancel.Cancelled` when the check was cancelled."""
        if self.cancel is not None:
            self.cancel.check()

    def report(self, d: Diagnostic) -> None:
        """Record a diagnostic once per (code, range); inside a standard-library layer, at the user's call."""
        if self.redirect is not None:
            # A mistake inside a standard-library layer shows at the user's call of it.
            span, name, expects = self.redirect
            d = replace(d, span=span, message=f"in `{name}` (standard library): {d.message}", related=(),
                        help=expects)
        key = (d.code, d.span.start, d.span.end)
        if key not in self.seen:
            self.seen.add(key)
            self.diags.append(d)

    def err(self, code, span, message, **kw) -> ErrorType:
        """Report an error and return ERROR, the type that silences follow-on errors."""
        self.report(error(code, span, message, **kw))
        return ERROR

    def note_type(self, node: Node, t: Type) -> None:
        """Remember a node's type for hover (the first type wins)."""
        self.facts.types.setdefault((node.span.start, node.span.end), t)


def near_miss(name: str, candidates) -> str | None:
    """The closest candidate to a misspelt name, or None."""
    got = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return got[0] if got else None


def generator_param(ctx: CheckContext, phase: str, i: int, default: str) -> str:
    """The name of parameter `i` of the generator's `phase` (`init`, `step`, `finish`) lambda, else `default`."""
    forms = ctx.forms.get("defgenerate")
    lam = keyword_value(forms[0], phase) if forms else None
    params = lam.items[1].items if isinstance(lam, ListNode) and len(lam.items) > 1 and isinstance(lam.items[1], ListNode) else ()
    return params[i].name if len(params) > i and isinstance(params[i], Sym) else default


def listed(names: list[str]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def result_expr(e: ir.Expr) -> ir.Expr:
    """The expression a body's value comes from: the last of a `let*` or a sequence."""
    while True:
        if isinstance(e, ir.Let) and e.body:
            e = e.body[-1]
        elif isinstance(e, ir.Seq) and e.body:
            e = e.body[-1]
        else:
            return e


def result_span(e: ir.Expr) -> Span:
    """Where a diagnostic about a body's value points: the expression it comes from."""
    return result_expr(e).span


def entry_span(e: ir.Expr, key: str, default: Span) -> Span:
    """The value of entry `key` of the plist a body returns, else `default`."""
    r = result_expr(e)
    if isinstance(r, ir.Plist):
        for k, v in zip(r.keys, r.values):
            if k == key:
                return v.span
    return default
