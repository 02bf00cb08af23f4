"""Random draws (`uniform`, `normal`, `categorical`, `bernoulli`) and the parameter initialisers.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import math

from ..types import TensorType, is_float, is_int
from .base import RuleError, _show, op


def _salt(call):
    if "salt" in call.kwargs:
        s = call.tensor("salt")
        if s.shape != () or not is_int(s.dtype):
            raise RuleError("E-TYPE-002", f"`:salt` must be an integer scalar, got {s.show()}", "salt")


def _float_draw(**floats: float):
    """The rule of a draw of floats of a given shape (`uniform`, `normal`): `:salt` an integer
    scalar, `:dtype` a float dtype (f32 when absent), and each keyword of `floats` a float constant
    (its default when absent), kept in `static` with the shape and dtype for the lowering."""
    def rule(call):
        _salt(call)
        dims = call.sizes(0)
        dt = call.dtype_arg("dtype", "f32")
        if not is_float(dt):
            raise RuleError("E-TYPE-002", f"`{call.op}` draws floats; `:dtype` must be a float dtype, got `:{dt}`",
                            "dtype", help="draw floats and `cast` them, or use `categorical` or `bernoulli` for "
                                          "integers and bools")
        call.static.update(shape=dims, dtype=dt, **{k: call.const_float(k, d) for k, d in floats.items()})
        return TensorType(dims, dt)
    return rule


op("uniform", "(uniform [shape] :salt s :min 0 :max 1)", "uniform f32 draw in [min, max); bits from the seed, "
   "the draw's place and its salt", args=(1, 1), kwargs=("salt", "min", "max", "dtype"), draw=True,
   example="(uniform [2 3] :salt n)", family="random")(_float_draw(min=0.0, max=1.0))
op("normal", "(normal [shape] :salt s :std 1)", "normal f32 draw with mean 0; bits from the seed, the draw's "
   "place and its salt", args=(1, 1), kwargs=("salt", "std", "mean", "dtype"), draw=True,
   example="(normal [2 3] :salt 3)", family="random")(_float_draw(std=1.0, mean=0.0))


@op("categorical", "(categorical logits :salt s :temperature 1 :top-k k :top-p p)", "one i32 index per row of "
    "logits [... V], drawn from softmax(logits / temperature) over the k largest logits (`:top-k`) and the "
    "smallest set of them whose probabilities reach p (`:top-p`, nucleus); temperature 0 is the argmax",
    args=(1, 1), kwargs=("salt", "temperature", "top-k", "top-p"), draw=True,
    example="(categorical x :salt n :top-k 2 :top-p 0.9)", family="random")
def _categorical(call):
    _salt(call)
    lg = call.tensor(0)
    if not is_float(lg.dtype) or lg.rank == 0:
        raise RuleError("E-TYPE-002", f"`categorical` needs float logits [... V], got {lg.show()}", 0)
    classes = lg.shape[-1]
    if classes == 0:
        raise RuleError("E-SHAPE-004", f"`categorical` needs 1 or more classes, the logits are {_show(lg.shape)}", 0)
    if "temperature" in call.kwargs:
        t = call.tensor("temperature")
        if t.shape != ():
            raise RuleError("E-SHAPE-005", "`:temperature` must be a scalar", "temperature")
        if not is_float(t.dtype) and not is_int(t.dtype):
            raise RuleError("E-TYPE-002", f"`:temperature` must be a number, got {t.show()}", "temperature")
        if t.value is not None and not (isinstance(t.value, (int, float)) and math.isfinite(t.value) and t.value >= 0):
            raise RuleError("E-RAND-001", f"`:temperature` of `categorical` is {t.value}; it must be finite and 0 "
                            "or more", "temperature", help="write `:temperature 0` for the argmax (greedy), "
                            "1 for the logits' own distribution")
        if t.value is not None:
            call.static["greedy"] = t.value == 0   # a traced temperature: 0 is the argmax at run time
    if "top-k" in call.kwargs:
        k = call.const_int("top-k")
        if not 1 <= k <= classes:
            raise RuleError("E-RAND-001", f"`:top-k` of `categorical` is {k}; it must be from 1 to the {classes} "
                            f"classes of {_show(lg.shape)}", "top-k", help="`:top-k 1` is the argmax; leave "
                            "`:top-k` out to sample from every class")
        call.static["top_k"] = k
    if "top-p" in call.kwargs:
        p = call.const_float("top-p", 1.0)
        if not 0 < p <= 1:
            raise RuleError("E-RAND-001", f"`:top-p` of `categorical` is {p:g}; it must be in (0, 1]", "top-p",
                            help="`:top-p 0.9` keeps the most likely classes until their probability reaches 0.9")
        call.static["top_p"] = p
    return TensorType(lg.shape[:-1], "i32")


@op("bernoulli", "(bernoulli p :salt s)", "true with probability p, elementwise", args=(1, 1), kwargs=("salt",),
    draw=True, example="(bernoulli p :salt 1)", family="random")
def _bernoulli(call):
    _salt(call)
    p = call.tensor(0)
    if not is_float(p.dtype):   # JAX refuses integer probabilities, literals included (`(bernoulli 1)`)
        raise RuleError("E-TYPE-002", f"`bernoulli` needs float probabilities, got {p.show()}", 0)
    return TensorType(p.shape, "bool")


#: Parameter initialisers allowed in a `defmodel`'s `:params` (not ops: they run once, at start-up).
INITIALIZERS = {
    "normal": ("(normal [shape] :std 1 :mean 0 :dtype :f32)", "normally distributed initial values"),
    "uniform": ("(uniform [shape] :min 0 :max 1 :dtype :f32)", "uniformly distributed initial values"),
    "zeros": ("(zeros [shape] :dtype)", "zeros"),
    "ones": ("(ones [shape] :dtype)", "ones"),
}
