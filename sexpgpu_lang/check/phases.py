"""The phases on a batch: `prepare`, `objective`, and each evaluation `pass`.

`top_train` checks `prepare` and `objective` on the training loader's batch
(its fields and the generated names), `top_passes` each pass on its own
loader's batch; what they may read and return is decided by `contracts`.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from .. import ir
from ..language import FORM_KEYWORDS
from ..syntax import Kw, ListNode, Node, Sym, VecNode, keyword_value
from ..types import ErrorType, LoaderType, Type
from .context import CheckContext, near_miss
from .contracts import counters_effects, objective_result
from .facts import Definition
from .infer import ctx_type, infer, phase
from .keywords import const_int, keyword_args
from .program import all_reports
from .ranges import loader_ranges, value_range
from .scope import BatchType, Frame


def batch_for(ctx: CheckContext, loader: ir.LoaderIR, gen: ir.GenerateIR | None, runs_gen: bool,
              via: tuple | None = None) -> BatchType:
    """The batch a loader gives prepare: its fields, plus the generated names where the generator runs;
    `via` is a pass's (name, `:loader` range)."""
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
    broken = gen is None and bool(ctx.forms.get("defgenerate"))
    return BatchType(tuple(entries), loader.name, generated, missing, broken, via)


def top_train(ctx: CheckContext, train: ir.LoaderIR | None,
              gen: ir.GenerateIR | None) -> tuple[ir.Phase | None, ir.Phase | None]:
    """`prepare` and `objective` on the training loader's batch."""
    prep_forms, obj_forms = ctx.forms.get("prepare", []), ctx.forms.get("objective", [])
    if train is None:
        return None, None
    batch = batch_for(ctx, train, gen, True)
    prepare, inputs = None, batch
    ranges = loader_ranges(train)   # token ids: 0 ... :vocab - 1, as the loader declares
    if prep_forms:
        f = prep_forms[0]
        if len(f.items) != 2:
            ctx.err("E-FORM-003", f.span, "`prepare` takes one lambda: `(prepare (lambda (batch ctx) ...))`")
        else:
            frame = Frame("prepare")
            prepare = phase(ctx, "prepare", f.items[1], [batch, ctx_type(ctx, "prepare")], frame, "`prepare`",
                            [ranges])
            if prepare is not None:
                inputs = prepare.out
                ranges = _out_ranges(prepare, ranges)
                counters_effects(ctx, frame, "prepare")
    objective = None
    if obj_forms:
        f = obj_forms[0]
        if len(f.items) != 2:
            ctx.err("E-FORM-003", f.span, "`objective` takes one lambda: `(objective (lambda (inputs ctx) ...))`")
        else:
            objective = objective_phase(ctx, f.items[1], inputs, "objective", ranges)
    return prepare, objective


def _out_ranges(prepare: ir.Phase, batch_ranges: dict):
    """The ranges of what `prepare` returns (`ranges.value_range`), its batch's being `batch_ranges`."""
    return value_range(prepare.body, lambda n: batch_ranges if n == prepare.params[0] else None)


def objective_phase(ctx: CheckContext, node: Node, inputs: Type, name: str, ranges=None) -> ir.Phase | None:
    """`objective` checked on `inputs` (as phase `name`; `ranges`: their `ranges.value_range`), or
    None when it fails or does not return a float scalar (`contracts.objective_result`)."""
    frame = Frame("objective")
    ph = phase(ctx, name, node, [inputs, ctx_type(ctx, "objective")], frame, "`objective`", [ranges])
    if ph is None:
        return None
    counters_effects(ctx, frame, "objective")
    return ph if objective_result(ctx, ph) else None


def top_passes(ctx: CheckContext, train: ir.LoaderIR | None, gen: ir.GenerateIR | None) -> tuple[ir.PassIR, ...]:
    """Each `pass`: its loader, whether the generator runs on it, its prepare and objective."""
    out = []
    for f in ctx.forms.get("pass", []):
        if len(f.items) < 2 or not isinstance(f.items[1], Sym):
            ctx.err("E-FORM-002", f.span, "`pass` needs a name: `(pass eval :loader held-out :every 100)`")
            continue
        name = f.items[1].name
        ctx.facts.define(Definition(name, "pass", f.items[1].span, f.span, f"pass {name}"))
        kws = keyword_args(ctx, f, 2, FORM_KEYWORDS["pass"], "pass")
        if "loader" not in kws or "every" not in kws:
            ctx.err("E-FORM-005", f.items[1].span, "`pass` needs `:loader` and `:every`")
            continue
        lt = infer(ctx, kws["loader"][1], ctx.globals).type
        if not isinstance(lt, LoaderType):
            if not isinstance(lt, ErrorType):
                ctx.err("E-TYPE-001", kws["loader"][1].span, f"`:loader` must name a loader, got {lt.show()}")
            continue
        every = const_int(ctx, kws["every"][1], "`:every`", 1)
        batches = const_int(ctx, kws["batches"][1], "`:batches`", 1) if "batches" in kws else 1
        loader = ctx.loaders.get(lt.name)
        if loader is None or train is None or every is None or batches is None:
            continue
        runs_gen = gen is not None and loader.signature() == train.signature()
        batch = batch_for(ctx, loader, gen, runs_gen, (name, kws["loader"][1].span))
        prep_node = kws["prepare"][1] if "prepare" in kws else (
            ctx.forms["prepare"][0].items[1] if ctx.forms.get("prepare") and len(ctx.forms["prepare"][0].items) == 2 else None)
        prepare, inputs = None, batch
        ranges = loader_ranges(loader)
        if prep_node is not None:
            frame = Frame("prepare")
            prepare = phase(ctx, f"pass {name} prepare", prep_node, [batch, ctx_type(ctx, "prepare")], frame,
                            "`prepare`", [ranges])
            if prepare is None:
                continue
            inputs = prepare.out
            ranges = _out_ranges(prepare, ranges)
        obj = ctx.forms.get("objective")
        if not obj or len(obj[0].items) != 2:
            continue
        objective = objective_phase(ctx, obj[0].items[1], inputs, f"pass {name} objective", ranges)
        if objective is None:
            continue
        out.append(ir.PassIR(name, loader.name, every, batches, runs_gen, prepare, objective, f.span))
    return tuple(out)


#: The row keys every logged step has besides the file's metrics (docs/metrics.md).
BUILTIN_ROW_KEYS = ("loss", "lr")


def shown_metrics(ctx: CheckContext, objective: ir.Phase | None) -> None:
    """`:log (:show [...])` against the metrics a logged row has (`loss`, `lr` and each `metric`
    `objective` reports, models included): E-NAME-004 at a name no row has, with the nearest one."""
    runs = ctx.forms.get("run")
    log = keyword_value(runs[0], "log", 1) if runs else None
    show = keyword_value(log, "show", 0) if isinstance(log, ListNode) else None
    if objective is None or not isinstance(show, VecNode):
        return
    known = tuple(dict.fromkeys(BUILTIN_ROW_KEYS + all_reports(objective.body, "metric")))
    for item in show.items:
        if isinstance(item, Kw) and item.name not in known:
            hint = near_miss(item.name, known)
            ctx.err("E-NAME-004", item.span, f"no logged row has `:{item.name}`: the rows have "
                    + ", ".join(f"`:{k}`" for k in known) + (f"; did you mean `:{hint}`?" if hint else ""),
                    help="name `:loss`, `:lr` or a `(metric :name ...)` that `objective` reports")
