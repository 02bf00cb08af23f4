"""What changes from one trip of `:step` to the next, and W-RAND-003, a salt that does not.

`:step`'s state and trip change between trips; a `let*` binding or a
function's parameter computed from either changes too (`Binding.varies`).
A draw's bits are a pure function of the seed, its place and its salt
(docs/determinism), so a draw inside `:step` whose salt reads neither
draws the same bits at every trip. That is often meant (a new sample
every step, each trip reading another part of it), so it is information,
not a warning. A draw inside a model is not judged: a model's body is
checked once for its argument types, whatever changes between trips.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from typing import Callable

from .. import ir
from ..diagnostics import information
from .context import CheckContext, generator_param


def judged(ctx: CheckContext) -> bool:
    """Whether what changes between trips is followed here: in `:step`, outside any model."""
    return ctx.frame.phase == "generate.step" and all(a == "<fn>" for a in ctx.active)


def reads_varying(ctx: CheckContext, e: ir.Expr, varies: Callable[[str], bool]) -> bool:
    """Whether `e` reads a name that changes between trips (`varies(name)`); False where
    nothing is `judged`. A model call reads only its arguments (its body sees no local)."""
    if not judged(ctx):
        return False
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, ir.Var) and varies(n.name):
            return True
        stack.extend(n.args if isinstance(n, ir.ModelCall) else ir.children(n))
    return False


def salt_across_trips(ctx: CheckContext, draw: ir.Op, salt: ir.Expr, varies: Callable[[str], bool]) -> None:
    """W-RAND-003 (information) for a draw in `:step`, outside any model, whose `salt` reads
    neither the state nor the trip."""
    if not judged(ctx) or reads_varying(ctx, salt, varies):
        return
    ctx.report(information("W-RAND-003", salt.span,
                           f"this salt is the same at every trip of `:step`, so `{draw.name}` draws the same bits "
                           "at every trip", help="if each trip needs new bits, add the trip to the salt, e.g. "
                           f"`:salt (+ (* (getf ctx :step) 65536) {generator_param(ctx, 'step', 1, 'trip')})`"))
