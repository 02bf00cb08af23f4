"""The contracts between the phases: every E-CONTRACT code is decided here and nowhere else.

What `prepare` and a pass may read of a batch (E-CONTRACT-001 a field
nobody provides, E-CONTRACT-005 a generated name where the generator does
not run), that a curriculum stage's loader is the training loader's kind
(E-CONTRACT-001), that `objective` returns a float scalar (E-CONTRACT-002),
and that counters live in `prepare` only (E-CONTRACT-010). The phases are
walked elsewhere (`phases`, `generate`, `forms`, `infer`); each asks here.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from .. import ir
from ..diagnostics import Related, warning
from ..source import Span
from ..syntax import Kw, ListNode, Node, keyword_value, plist_pairs, result_node
from ..types import ERROR, ErrorType, TensorType, is_float
from .context import CheckContext, near_miss, result_span
from .scope import BatchType, Effect, Frame


def batch_field(ctx: CheckContext, node: Node, obj: ir.Expr, key: Kw) -> ir.Expr:
    """`(field batch :name)` on a batch (`obj`, of a `BatchType`): a loader field or a generated
    name; a generated name where the generator does not run is E-CONTRACT-005 (once per batch),
    a name nobody provides E-CONTRACT-001."""
    t: BatchType = obj.type
    k = key.name
    got = t.get(k)
    if got is not None:
        if k in t.generated and k in ctx.facts.generated:
            ctx.facts.uses.append((key.span, ctx.facts.generated[k]))
        return ir.GetF(got, node.span, obj, k)
    if k in t.missing_generated:
        if id(t) in ctx.contract005:
            return ir.Const(ERROR, node.span)   # one diagnostic per pass: the first generated name read
        ctx.contract005.add(id(t))
        rel = [Related(ctx.facts.generated[k].span, "`:finish` makes it here")] if k in ctx.facts.generated else []
        if t.via is not None:
            rel.insert(0, Related(t.via[1], f"pass `{t.via[0]}` runs on loader `{t.loader}`, whose fields or "
                                            "batch size differ from the training loader's"))
        return ir.Const(ctx.err("E-CONTRACT-005", key.span,
                                f"`:{k}` is generated, but the generator does not run on loader `{t.loader}`, "
                                "whose fields or batch size differ from the training loader's",
                                related=rel, help=f"give the pass a `:prepare` that reads only `{t.loader}`'s fields, "
                                "or give its loader the training loader's fields and batch size"), node.span)
    if t.unknown_generated:
        return ir.Const(ERROR, node.span)
    later = made_later(ctx, k) if ctx.frame.phase == "generate.init" else None
    if later is not None:
        where, span = later
        return ir.Const(ctx.err("E-CONTRACT-001", key.span,
                                f"`:init` reads `:{k}`, which the generator makes later ({where} returns it): "
                                f"the batch `:init` reads has only loader `{t.loader}`'s fields",
                                related=[Related(span, f"{where} makes `:{k}` here")],
                                help=f"read a field of `{t.loader}` here ("
                                     + ", ".join(f"`:{x}`" for x in t.keys) + f"); `prepare` reads `:{k}`"),
                        node.span)
    hint = near_miss(k, t.keys)
    return ir.Const(ctx.err("E-CONTRACT-001", key.span, f"the batch has no field `:{k}`: neither loader `{t.loader}` "
                            "nor the generator provides it" + (f"; did you mean `:{hint}`?" if hint else ""),
                            help="the batch has " + ", ".join(f"`:{x}`" for x in t.keys),
                            data={"replace": f":{hint}"} if hint else None), node.span)


def made_later(ctx: CheckContext, k: str) -> tuple[str, Span] | None:
    """Where the generator makes `:k` after `:init` has read the batch (`:finish`, or the state
    `:init` or `:step` returns), read from the `defgenerate` form: (the phase, the key's range)."""
    forms = ctx.forms.get("defgenerate")
    if not forms:
        return None
    for name in ("finish", "init", "step"):
        lam = keyword_value(forms[0], name)
        res = result_node(lam.items[2:]) if isinstance(lam, ListNode) else None
        if isinstance(res, ListNode) and res.head == "list":
            for kw, _ in plist_pairs(res):
                if kw.name == k:
                    return f"`:{name}`", kw.span
    return None


def stage_loader(ctx: CheckContext, node: Node, stage: ir.LoaderIR, train: ir.LoaderIR) -> None:
    """E-CONTRACT-001 unless a curriculum stage's loader (named at `node`) has the training
    loader's fields and batch size."""
    if stage.signature() != train.signature():
        ctx.err("E-CONTRACT-001", node.span,
                f"stage loader `{stage.name}` does not have the training loader `{train.name}`'s fields and batch size",
                related=[Related(train.span, "the training loader")])


def objective_result(ctx: CheckContext, ph: ir.Phase) -> bool:
    """E-CONTRACT-002 unless `objective` (checked as `ph`) returns a float scalar; True when it does
    (or its result is already reported)."""
    t = ph.out
    if not isinstance(t, ErrorType) and not (isinstance(t, TensorType) and t.shape == () and is_float(t.dtype)):
        ctx.err("E-CONTRACT-002", result_span(ph.body), f"`objective` must return a float scalar loss, got {t.show()}",
                help="reduce the loss, e.g. `(mean (cross-entropy logits labels))`")
        return False
    return True


def counters_effects(ctx: CheckContext, frame: Frame, where: str) -> None:
    """Effects of `prepare` or `objective`: a counter outside prepare (E-CONTRACT-010), an unsalted
    draw (W-RAND-002)."""
    for e in frame.effects:
        if e.kind == "draw" and not e.salted:
            rel = [Related(e.origin, "drawn here")] if e.origin != e.site else []
            ctx.report(warning("W-RAND-002", e.site, f"an unsalted draw in `{where}` draws the same bits at "
                               "every step: a dropout mask or noise that never changes", related=rel,
                               help="salt it, e.g. `:salt (getf ctx :step)`, or with the microbatch too"))
        if e.kind == "counter" and where != "prepare":
            rel = [Related(e.origin, "declared here")] if e.origin != e.site else []
            ctx.err("E-CONTRACT-010", e.site, f"a `counter` inside `{where}`: counters belong to `prepare`",
                    related=rel, help="move the counter into `prepare`", data={"name": e.name})


def counter_in_generator(ctx: CheckContext, e: Effect, where: str, related: list[Related]) -> None:
    """E-CONTRACT-010 for a counter (effect `e`) inside the generator phase `where`."""
    ctx.err("E-CONTRACT-010", e.site, f"a `counter` inside {where}: counters belong to `prepare`",
            related=related, help="move the counter into `prepare`", data={"name": e.name})
