"""A `:copy` model's calls: its source's call on the copy's parameters.

`(defmodel ref :copy student)` (check/models.py `_build_copy`, `place_copies`) is
called as its source is; `call_copy` checks the call as the source's
(`infer.call_model`) and moves the source's parameter places, and those of its
trainable sub-models, below the copy's (`ir.rebased`). Imports nothing outside
`sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import dataclasses

from .. import ir
from ..diagnostics import Related
from ..syntax import ListNode
from ..types import ERROR
from .context import CheckContext
from .scope import Scope


def call_copy(ctx: CheckContext, node: ListNode, name: str, m: dict, scope: Scope) -> ir.Expr:
    """A call of a `:copy` model: its source's call (its `:apply` or entry, checked as the source's),
    on the copy's parameters (`ir.rebased`): the source's own and its trainable sub-models' places
    moved below the copy's; frozen sub-models shared; a copy of a model with `:lora`, the source's
    base without adapters (lora.call_base). E-MODEL-001 when the source is not reachable."""
    from .infer import call_model, infer   # (infer.call_model calls this for a copy)
    src = m["copy_of"]
    if src in ctx.reachable and ctx.models[src].get("lora") is not None:
        from .lora import call_base
        return call_base(ctx, node, name, src, scope)   # a LoRA model's copy: its base, read in place
    if ctx.root_model is not None and name not in ctx.reachable:
        for a in node.items[1:]:
            infer(ctx, a, scope)
        if src in ctx.reachable:   # the copy could not be placed: said at its `:copy`
            return ir.Const(ERROR, node.span)
        return ir.Const(ctx.err("E-MODEL-001", node.span,
                                f"`{name}` is a copy of `{src}`, which `model` (`{ctx.root_model}`) cannot reach "
                                "through `:params`, so there are no parameters to copy",
                                related=[Related(m["def"].span, f"`{name}` is defined here")],
                                help=f"copy the model `model` trains (`:copy {ctx.root_model}`), or reach `{src}` "
                                     "from it"), node.span)
    e = call_model(ctx, node, src, scope)
    if not isinstance(e, ir.ModelCall) or src in ctx.frozen_models:
        return e   # an error, or a copy of a frozen model: the same parameters
    return ir.rebased(dataclasses.replace(e, model=name), ctx.reachable[src], ctx.reachable[name],
                      frozenset(ctx.frozen_models - {name}))
