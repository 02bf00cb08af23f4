"""The run's optimizer as an optax GradientTransformation (`:optimizer (adamw :lr ... :decay-mask ...)`).

`make_optimizer` builds it from the checked `(name, settings)` of `ir.RunIR.optimizer`
(sexpgpu_lang/check/optimizer.py); `learning_rate` is the schedule it follows, a function of the
optimizer step (0 for the first update), which the loop logs as `lr`; `decay_mask` is the tree of
parameters that `adamw` and `lion` decay (docs/runtime.md "Optimizers").
"""
from __future__ import annotations

from typing import Callable

import optax

from sexpgpu_lang import ir

from .params import set_path

#: Each schedule of `language.SCHEDULES`: the optax function and, per setting, its argument's name.
_SCHEDULES: dict[str, tuple[Callable, dict[str, str]]] = {
    "constant": (optax.constant_schedule, {"value": "value"}),
    "linear": (optax.linear_schedule, {"init-value": "init_value", "end-value": "end_value",
                                       "transition-steps": "transition_steps", "transition-begin": "transition_begin"}),
    "cosine-decay": (optax.cosine_decay_schedule, {"init-value": "init_value", "decay-steps": "decay_steps",
                                                   "alpha": "alpha", "exponent": "exponent"}),
    "warmup-cosine-decay": (optax.warmup_cosine_decay_schedule,
                            {"init-value": "init_value", "peak-value": "peak_value", "warmup-steps": "warmup_steps",
                             "decay-steps": "decay_steps", "end-value": "end_value", "exponent": "exponent"}),
    "warmup-constant": (optax.warmup_constant_schedule, {"init-value": "init_value", "peak-value": "peak_value",
                                                         "warmup-steps": "warmup_steps"}),
}


def schedule(lr) -> float | optax.Schedule:
    """`:lr` as optax takes it: a float, or for `(name, settings)` the optax schedule of that name
    (`warmup-cosine-decay` is `optax.warmup_cosine_decay_schedule`) with the settings as its arguments."""
    if not isinstance(lr, tuple):
        return float(lr)
    name, settings = lr
    fn, names = _SCHEDULES[name]
    return fn(**{names[k]: v for k, v in settings.items()})


def learning_rate(spec: tuple[str, dict]) -> Callable[[int], float]:
    """The learning rate the optimizer `spec` uses at optimizer step `count` (0 for the first update,
    as optax counts): the `lr` of the metrics row of step `count + 1`."""
    lr = schedule(spec[1].get("lr", 1e-3))
    if callable(lr):
        return lambda count: float(lr(count))
    return lambda count: lr


def decay_mask(program: ir.Program, how) -> dict:
    """The trainable parameters' tree of bools that `adamw` and `lion` decay, for `:decay-mask` `how`:

    * `matrices` (the default; nanoGPT's and Levanter's rule): every parameter of rank 2 or more,
      except an embedding table, a parameter read as the table of `take` along axis 0 (the standard
      library's `embedding`); gains, biases and other vectors never decay (a parameter stacked by
      `(repeat block N)` by the rank of one layer's slice);
    * `all`: every trainable parameter (optax's own default);
    * a tuple of keys: exactly the parameters whose key (the last of their path) is one of them.
    """
    tables = embedding_tables(program) if how == "matrices" else set()
    tree: dict = {}
    for p in program.params:
        if p.frozen:
            continue
        if how == "all":
            decays = True
        elif how == "matrices":
            decays = len(p.shape) - (1 if p.layers else 0) >= 2 and p.path not in tables   # a layer's rank
        else:
            decays = p.path[-1] in how
        set_path(tree, p.path, decays)
    return tree


class _Reads(ir.Interpreter):
    """Which parameters the program reads as the table of `take` along axis 0: the IR evaluated with a
    parameter's value its path and every other value None (`embedding_tables`)."""

    def __init__(self):
        super().__init__()
        self.tables: set[tuple[str, ...]] = set()

    def op(self, e: ir.Op, env: dict):
        args = [self.eval(a, env) for a in e.args]
        kwargs = {k: self.eval(v, env) for k, v in e.kwargs}
        axis = kwargs.get("axis", e.static.get("axis", 0))
        if e.name == "take" and isinstance(args[0], _Path) and axis in (0, None):
            self.tables.add(args[0].path)
        return None

    def getf(self, obj, key: str):
        return obj.get(key) if isinstance(obj, dict) else None

    def model_self(self, e: ir.ModelCall, params, args: list):
        for k in e.path:
            params = params.get(k, {}) if isinstance(params, dict) else {}
        return params, args

    def repeat(self, e: ir.Repeat, params, args: list):
        # Every layer reads the same paths: one layer's body finds the tables of all.
        return self.call(e, params, args)

    def report(self, e: ir.Report, value) -> None:
        return None


class _Path:
    """A parameter's value in `_Reads`: where it sits in the tree."""

    def __init__(self, path: tuple[str, ...]):
        self.path = path


def embedding_tables(program: ir.Program) -> set[tuple[str, ...]]:
    """The paths of the parameters some phase reads as the table of `take` along axis 0 (an embedding
    lookup), directly or through `let*` names and function arguments."""
    tree: dict = {}
    for p in program.params:
        set_path(tree, p.path, _Path(p.path))
    reads = _Reads()
    phases = [program.prepare, program.objective]
    if program.generate is not None:
        phases += [program.generate.init, program.generate.step, program.generate.finish]
    for ps in program.passes:
        phases += [ps.prepare, ps.objective]
    for ph in phases:
        if ph is not None:
            reads.eval(ph.body, {ir.Interpreter.PARAMS: tree, **{n: None for n in ph.params}})
    return reads.tables


def make_optimizer(spec: tuple[str, dict], program: ir.Program | None = None) -> optax.GradientTransformation:
    """Build `(adam|adamw|sgd|lion :lr ... )`; `:lr` a number or a schedule (`schedule`); `adamw` and
    `lion` decay the parameters `decay_mask` picks from `program` (every parameter without one);
    `:clip` adds global-norm clipping first."""
    name, a = spec
    lr = schedule(a.get("lr", 1e-3))
    mask = None
    if name in ("adamw", "lion") and program is not None:
        mask = decay_mask(program, a.get("decay-mask", "matrices"))
    if name == "adam":
        opt = optax.adam(lr, b1=float(a.get("b1", 0.9)), b2=float(a.get("b2", 0.999)), eps=float(a.get("eps", 1e-8)))
    elif name == "adamw":
        opt = optax.adamw(lr, b1=float(a.get("b1", 0.9)), b2=float(a.get("b2", 0.999)), eps=float(a.get("eps", 1e-8)),
                          weight_decay=float(a.get("weight-decay", 1e-4)), mask=mask)
    elif name == "sgd":
        m = a.get("momentum")
        opt = optax.sgd(lr, momentum=float(m) if m is not None else None)
    elif name == "lion":
        opt = optax.lion(lr, b1=float(a.get("b1", 0.9)), b2=float(a.get("b2", 0.99)),
                         weight_decay=float(a.get("weight-decay", 1e-3)), mask=mask)
    else:  # the checker admits only the names above
        raise ValueError(f"unknown optimizer {name}")
    if a.get("clip") is not None:
        opt = optax.chain(optax.clip_by_global_norm(float(a["clip"])), opt)
    return opt
