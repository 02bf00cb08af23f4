"""The standard library's settings checked at the call: the numbers a post-training function is
tuned by, and `repeat-prompts`' fill.

`check/stdlib_args.py` checks the tensors' layouts; this module the scalars beside them, each
at its own argument, before the body is inlined:

- GRPO's KL weight `beta` 0 or more, its clip range `eps-low` from 0 to below 1 and `eps-high`
  0 or more (`grpo-objective`, `clipped-surrogate`, the GRPO losses, `grpo-metrics`): a
  negative `eps-low` clips the ratio above 1, so even the unchanged policy's ratio 1 is clipped
  and its gradient lost; a negative `beta` rewards drifting from the reference (TRL's
  `GRPOConfig` takes `beta` >= 0 and `epsilon` in [0, 1));
- GKD's `beta` from 0 to 1 (`gkd-objective`, `generalized-jsd`; TRL's `GKDConfig`): outside it
  the mixture `beta p_t + (1 - beta) p_s` is no distribution and the log of it NaN;
- each a number scalar: a string is E-TYPE-001, a tensor of more than one entry E-SHAPE-005, a
  constant outside its range E-TYPE-003 (a computed one, a schedule, is not checked);
- `repeat-prompts`' prompt integer ids (or a bool padding mask) and its fill a scalar of the
  prompt's dtype (an integer constant for an integer prompt, `true`/`false` for a bool one): a
  float fill would make the rows float, and the model's `take` of them fail far from the call
  (E-TYPE-002, E-TYPE-001, E-SHAPE-005).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import math

from .. import ir
from ..diagnostics import shown_value
from ..types import ErrorType, StringType, TensorType, is_float, is_int
from .context import CheckContext

#: (lowest, its bound included, highest or None, its bound included, where the range comes from)
_GRPO_BETA = (0.0, True, None, False, "the KL's weight; TRL's `beta`, 0.0 for no KL term")
_EPS_LOW = (0.0, True, 1.0, False, "the ratio is clipped below at 1 - eps-low; TRL's `epsilon`, e.g. 0.2")
_EPS_HIGH = (0.0, True, None, False, "the ratio is clipped above at 1 + eps-high; TRL's `epsilon_high`, e.g. 0.28")
_GKD_BETA = (0.0, True, 1.0, True, "GKD's mixture weight: 0 is forward-kl, 1 reverse-kl; TRL's `beta`, e.g. 0.5")
_CLIP = {"eps-low": _EPS_LOW, "eps-high": _EPS_HIGH}

#: function -> {parameter: its range}
RANGES: dict[str, dict[str, tuple]] = {
    "grpo-objective": {"beta": _GRPO_BETA, **_CLIP},
    "clipped-surrogate": _CLIP,
    "grpo-loss": _CLIP,
    "bnpo-loss": _CLIP,
    "dr-grpo-loss": _CLIP,
    "grpo-metrics": _CLIP,
    "gkd-objective": {"beta": _GKD_BETA},
    "generalized-jsd": {"beta": _GKD_BETA},
}


def settings_fit(ctx: CheckContext, fn: str, by_name: dict[str, ir.Expr]) -> bool:
    """`fn`'s settings (`RANGES`) and `repeat-prompts`' fill: the first that breaks its rule
    reported at that argument (E-TYPE-001, E-TYPE-002, E-TYPE-003, E-SHAPE-005), False; True when
    all hold."""
    if fn == "repeat-prompts":
        return _fill_fits(ctx, by_name.get("prompt"), by_name.get("fill"))
    for p, rule in RANGES.get(fn, {}).items():
        a = by_name.get(p)
        if a is not None and not _in_range(ctx, fn, p, a, rule):
            return False
    return True


def _range_words(rule: tuple) -> str:
    lo, lo_in, hi, hi_in, _ = rule
    if hi is None:
        return f"{lo:g} or more" if lo_in else f"more than {lo:g}"
    return f"from {lo:g} to {'' if hi_in else 'below '}{hi:g}"


def _in_range(ctx: CheckContext, fn: str, p: str, a: ir.Expr, rule: tuple) -> bool:
    """A setting: a number scalar, and a constant one within `rule`."""
    t = a.type
    if isinstance(t, ErrorType):
        return True
    words = _range_words(rule)
    if not isinstance(t, TensorType):
        shown = shown_value(t.value) if isinstance(t, StringType) else t.show()
        ctx.err("E-TYPE-001", a.span, f"`{fn}`'s `{p}` is a number {words}; got {shown}",
                help=f"write the number without quotes: {rule[4]}")
        return False
    if t.shape != () and math.prod(t.shape) != 1:
        ctx.err("E-SHAPE-005", a.span, f"`{fn}`'s `{p}` is one number {words} for every token; got {t.show()}",
                help=rule[4])
        return False
    v = t.value
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return True   # computed (a schedule): the run's value is its own
    lo, lo_in, hi, hi_in, why = rule
    inside = (v >= lo if lo_in else v > lo) and (hi is None or (v <= hi if hi_in else v < hi))
    if inside and math.isfinite(v):
        return True
    ctx.err("E-TYPE-003", a.span, f"`{fn}`'s `{p}` must be {words}; got {v:g}", help=why)
    return False


def _fill_fits(ctx: CheckContext, prompt: ir.Expr | None, fill: ir.Expr | None) -> bool:
    """`repeat-prompts`' prompt integer ids or a bool mask, and its fill a scalar of the prompt's dtype
    (a constant integer fits any integer prompt)."""
    if prompt is None or fill is None or not isinstance(prompt.type, TensorType) or isinstance(fill.type, ErrorType):
        return True
    pt, ft = prompt.type, fill.type
    if is_float(pt.dtype):
        ctx.err("E-TYPE-002", prompt.span, f"`repeat-prompts`' `prompt` is token ids [B P], integers (or a prompt's "
                f"padding mask, bool); got {pt.show()}", help="pass the loader's integer field as it is; a float "
                "row cannot be fed to a model's `take`")
        return False
    need = f"a scalar of the prompt's dtype ({pt.dtype}, the prompt {pt.show()})"
    if not isinstance(ft, TensorType):
        shown = shown_value(ft.value) if isinstance(ft, StringType) else ft.show()
        ctx.err("E-TYPE-001", fill.span, f"`repeat-prompts`' `fill` is {need}; got {shown}",
                help="give the padding id the trips overwrite, e.g. 0")
        return False
    if ft.shape != ():
        ctx.err("E-SHAPE-005", fill.span, f"`repeat-prompts`' `fill` is {need}, one value for every new column; "
                f"got {ft.show()}", help="give the padding id the trips overwrite, e.g. 0")
        return False
    same = ft.dtype == pt.dtype
    literal_int = is_int(pt.dtype) and is_int(ft.dtype) and isinstance(ft.value, int) and not isinstance(ft.value, bool)
    if same or literal_int:
        return True
    ctx.err("E-TYPE-002", fill.span, f"`repeat-prompts`' `fill` is {need}; got {ft.show()}, which would make "
            f"the rows {ft.dtype}", help="give the padding id the trips overwrite, e.g. 0 (token ids stay integers)"
            if is_int(pt.dtype) else "give `true` (the new columns real) or `false`")
    return False
