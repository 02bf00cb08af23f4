"""The `:optimizer` setting of `run`: the optimizer, its numeric settings, a learning-rate schedule
as `:lr`, and `:decay-mask` (docs/runtime.md "Optimizers").

`run_optimizer` reads `(adamw :lr (warmup-cosine-decay ...) :decay-mask :matrices ...)` to the
`(name, settings)` pair `ir.RunIR.optimizer` holds: each number a Python number; `:lr` a number or
`(schedule, {setting: value})` with every setting of `language.SCHEDULES` filled in (its default
where the file leaves it out); `:decay-mask` a keyword of `language.DECAY_MASKS` or a tuple of
parameter keys. A schedule the runtime would reject or that does not do what the file says is
reported here, at the setting: an unknown schedule (E-OPT-001), a missing setting (E-FORM-005), a
value out of range or a warmup not shorter than `:decay-steps` (E-OPT-002), a warmup longer than the
run (W-OPT-001); a mask naming no parameter is E-OPT-003.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..diagnostics import warning
from ..language import DECAY_MASKS, DEFAULT_OPTIMIZER, OPTIMIZERS, SCHEDULES
from ..syntax import Kw, ListNode, Node, VecNode
from .context import CheckContext, listed, near_miss
from .keywords import const_int, const_value, keyword_args

#: Ranges of the numeric optimizer settings: (lowest, highest, whether the lowest is allowed, whether
#: the highest is: a decay of 1 never forgets, and adam's bias correction divides by 0).
_RANGES: dict[str, tuple[float, float | None, bool, bool]] = {
    "b1": (0.0, 1.0, True, False), "b2": (0.0, 1.0, True, False), "momentum": (0.0, 1.0, True, False),
    "eps": (0.0, None, False, True), "weight-decay": (0.0, None, True, True), "clip": (0.0, None, False, True),
}
#: What each kind of schedule setting must be (`language.SCHEDULES`), for the message.
_KIND_HELP = {"rate": "a learning rate, 0 or more", "positive": "a number greater than 0",
              "fraction": "a fraction of the initial rate, from 0 to 1"}
#: optax's defaults of the optimizers' numeric settings, for the help of a value out of range.
_DEFAULTS = {"b1": "0.9", "b2": "0.999 (lion: 0.99)", "momentum": "0.9", "eps": "1e-8", "weight-decay": "1e-4",
             "clip": "1.0"}
_EXAMPLE = "(warmup-cosine-decay :peak-value 3e-4 :warmup-steps 100 :decay-steps 1000 :end-value 3e-5)"


def run_optimizer(ctx: CheckContext, on: Node, steps: int | None) -> tuple[str, dict]:
    """The `:optimizer` form `on` of a run of `steps` steps (None when `:steps` is broken) to
    `(name, settings)`; the default optimizer after reporting a form that names none."""
    if not isinstance(on, ListNode) or on.head not in OPTIMIZERS:
        hint = near_miss(on.head, OPTIMIZERS) if isinstance(on, ListNode) and on.head else None
        ctx.err("E-FORM-002", on.span, "`:optimizer` is one of " + ", ".join(f"`({o} :lr ...)`" for o in OPTIMIZERS)
                + (f"; did you mean `{hint}`?" if hint else ""), data={"replace": hint} if hint else None)
        return DEFAULT_OPTIMIZER[0], dict(DEFAULT_OPTIMIZER[1])
    ctx.facts.calls[(on.span.start, on.span.end)] = on.head
    args: dict = {}
    for k, (kw, v) in keyword_args(ctx, on, 1, OPTIMIZERS[on.head], on.head).items():
        if k == "lr":
            val = learning_rate(ctx, v, steps)
        elif k == "decay-mask":
            val = decay_mask(ctx, v)
        else:
            val = _number(ctx, v, f"`:{k}` of `{on.head}`", *_RANGES[k], help=f"optax's usual `:{k}` is {_DEFAULTS[k]}")
        if val is not None:
            args[k] = val
    return on.head, args


def _number(ctx: CheckContext, node: Node, what: str, low: float, high: float | None, low_ok: bool,
            high_ok: bool = True, help: str | None = None):
    """A compile-time number from `low` to `high` (each excluded unless `low_ok`, `high_ok`), or None
    after reporting."""
    val = const_value(ctx, node)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        ctx.err("E-TYPE-003", node.span, f"{what} must be a number, got {val!r}")
        return None
    if val < low or (val == low and not low_ok) or (high is not None and (val > high or (val == high and not high_ok))):
        rng = (f"from {low:g} to {high:g}" + ("" if high_ok else f", {high:g} excluded") if high is not None else
               f"{low:g} or more" if low_ok else f"greater than {low:g}")
        ctx.err("E-OPT-002", node.span, f"{what} must be {rng}, got {val:g}", help=help)
        return None
    return val


def learning_rate(ctx: CheckContext, node: Node, steps: int | None):
    """`:lr`: a number greater than 0, or a schedule `(name :setting value ...)` to `(name, settings)`."""
    if not isinstance(node, ListNode):
        lr = const_value(ctx, node)
        if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr <= 0:
            ctx.err("E-FORM-002", node.span, f"`:lr` must be greater than 0, got {lr}",
                    help="a typical learning rate is `3e-4` to `3e-3`")
            return None
        return lr
    name = node.head
    if name not in SCHEDULES:
        # optax's own spelling (`warmup_cosine_decay_schedule`) is read as the schedule it names
        plain = (name or "").replace("_", "-").removesuffix("-schedule")
        hint = plain if plain in SCHEDULES else near_miss(plain, SCHEDULES)
        where = node.items[0].span if node.items else node.span
        ctx.err("E-OPT-001", where, f"`{name}` is not a learning-rate schedule"
                + (f"; did you mean `{hint}`?" if hint else ""),
                help="`:lr` is a number or one of " + listed([f"`({s} ...)`" for s in SCHEDULES])
                + f", e.g. `{_EXAMPLE}`", data={"replace": hint} if hint else None)
        return None
    spec = SCHEDULES[name]
    kws = keyword_args(ctx, node, 1, tuple(spec), name)
    out: dict = {}
    ok = True
    for key, (kind, default) in spec.items():
        if key not in kws:
            if default is None:
                ctx.err("E-FORM-005", node.items[0].span, f"`{name}` needs `:{key}`",
                        help=f"write it like `{_EXAMPLE if name == 'warmup-cosine-decay' else _example(name)}`")
                ok = False
            else:
                out[key] = default
            continue
        v = kws[key][1]
        what = f"`:{key}` of `{name}`"
        if kind in ("steps", "begin"):
            val = const_int(ctx, v, what)
            low = 1 if kind == "steps" else 0
            if val is not None and val < low:
                ctx.err("E-OPT-002", v.span, f"{what} must be {low} or more, got {val}",
                        help=f"a count of optimizer steps, like `:{key} {1000 if kind == 'steps' else 100}`")
                val = None
        else:
            high = 1.0 if kind == "fraction" else None
            val = _number(ctx, v, what, 0.0, high, kind != "positive",
                          help=f"{_KIND_HELP[kind]}, like `:{key} {'0.1' if kind == 'fraction' else '3e-4'}`")
        if val is None:
            ok = False
        out[key] = val
    if not ok:
        return None
    if name == "warmup-cosine-decay" and out["warmup-steps"] >= out["decay-steps"]:
        ctx.err("E-OPT-002", kws["warmup-steps"][1].span,
                f"`:warmup-steps {out['warmup-steps']}` must be less than `:decay-steps {out['decay-steps']}`: "
                "optax counts `:decay-steps` from step 0, the warmup included",
                help="make `:decay-steps` the length of the whole schedule, usually the run's `:steps`")
        return None
    if "warmup-steps" in out and steps is not None and out["warmup-steps"] > steps:
        ctx.report(warning("W-OPT-001", kws["warmup-steps"][1].span,
                           f"`:warmup-steps {out['warmup-steps']}` is longer than the run's `:steps {steps}`: "
                           "the learning rate never reaches `:peak-value`",
                           help="shorten the warmup (a few percent of the run is usual), or raise `:steps`"))
    return name, out


def _example(name: str) -> str:
    """A schedule form with its required settings, for a help line."""
    filler = {"rate": "1e-3", "positive": "1e-3", "steps": "1000", "begin": "100", "fraction": "0.1"}
    return f"({name} " + " ".join(f":{k} {filler[kind]}" for k, (kind, d) in SCHEDULES[name].items() if d is None) + ")"


def decay_mask(ctx: CheckContext, node: Node):
    """`:decay-mask`: a keyword of `DECAY_MASKS`, or a vector of the keys of trainable parameters
    (each the last key of a parameter's path, every parameter with that key decays)."""
    if isinstance(node, Kw) and node.name in DECAY_MASKS:
        return node.name
    if isinstance(node, VecNode) and all(isinstance(i, Kw) for i in node.items):
        keys = list(dict.fromkeys(p.path[-1] for p in ctx.params if not p.frozen))
        ok = True
        for item in node.items:
            if item.name not in keys:
                hint = near_miss(item.name, keys)
                ctx.err("E-OPT-003", item.span, f"`:{item.name}` in `:decay-mask` is not the key of a trainable "
                        "parameter" + (f"; did you mean `:{hint}`?" if hint else ""),
                        help="the trainable parameters' keys are " + (", ".join(f"`:{k}`" for k in keys) or "none"),
                        data={"replace": f":{hint}"} if hint else None)
                ok = False
        return tuple(i.name for i in node.items) if ok else None
    ctx.err("E-OPT-003", node.span, "`:decay-mask` is " + ", ".join(f"`:{m}`" for m in DECAY_MASKS)
            + " or a vector of parameter keys like `[:w1 :w2]`",
            help="`:matrices` (the default) decays parameters of rank 2 or more that are not embedding tables")
    return None
