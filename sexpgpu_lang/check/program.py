"""Assembling the `ir.Program` of a file without errors from what the forms' checks built.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from .. import ir
from .context import CheckContext
from .generate import per_microbatch_keys
from .identity import identity


def program(ctx: CheckContext, gen: ir.GenerateIR | None, prepare: ir.Phase | None, objective: ir.Phase,
            passes: tuple[ir.PassIR, ...]) -> ir.Program:
    """The Program IR of a file without errors: stackable unless the generator reads a context key
    that moves between microbatches; the metrics and diagnostics `objective` reports."""
    from .config import stated_settings   # (with hf_config: not imported by `sexpgpu lint`, which builds no IR)
    stackable = not (gen is not None and gen.ctx_keys & set(per_microbatch_keys(ctx)))
    return ir.Program(ctx.src.path, dict(ctx.loaders), tuple(ctx.params), ctx.root_model, gen, prepare,
                      objective, passes, ctx.run_ir, identity(ctx.parsed), stackable,
                      all_reports(objective.body, "metric"), all_reports(objective.body, "diagnostic"),
                      ctx.counter_names, tuple(ctx.stages), tuple(ctx.pretrained_files), ctx.src.text,
                      identity(ctx.parsed, apart_from_steps=True), adapters=_adapters(ctx),
                      settings=stated_settings(ctx))


def _adapters(ctx: CheckContext) -> tuple[ir.AdapterIR, ...]:
    """The LoRA adapters check/lora.py added, for the runtime's export."""
    return tuple(ir.AdapterIR(path, k, ctx.reachable[model], lora.rank, lora.alpha, lora.rslora,
                                 lora.pretrained, lora.dropout)
                 for path, k, lora, model in ctx.lora_params)


def all_reports(e: ir.Expr, kind: str) -> tuple[str, ...]:
    """The names of every report of `kind` in an IR tree (models included), each once: the last in
    evaluation order first, a report before the reports inside its value (the order `sexpgpu run`
    lists them in)."""
    found = []
    for i, n in enumerate(ir.walk(e)):
        if isinstance(n, ir.Report) and n.kind == kind:
            last = i + sum(1 for _ in ir.walk(n)) - 1   # where its subtree ends in `ir.walk`'s order
            found.append((-last, i, n.name))
    return tuple(dict.fromkeys(name for _, _, name in sorted(found)))
