"""Elementwise ops, logic and `where`: broadcasting, promotion on JAX's lattice, folding of constants.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..types import TensorType, is_float, is_int, promote
from .base import RuleCall, RuleError, _const_of, broadcast_shapes, op


def _elementwise(call: RuleCall, *, to_float=False, to_bool=False, bool_ok=True) -> TensorType:
    ts = [call.tensor(i) for i in range(len(call.args))]
    shape = broadcast_shapes([t.shape for t in ts], call.op)
    dt = (ts[0].dtype, ts[0].weak)
    for t in ts[1:]:
        dt = promote(dt, (t.dtype, t.weak))
    if not bool_ok and dt[0] == "bool":
        raise RuleError("E-TYPE-002", f"`{call.op}` needs numbers, got bool", 0,
                        help="cast the operand with `(cast x :i32)` or `(cast x :f32)`")
    call.static["dtype"] = dt[0]  # operands are converted to this before the op
    if to_bool:
        return TensorType(shape, "bool")
    if to_float and not is_float(dt[0]):
        dt = ("f32", dt[1])   # a weak integer (a literal, a `dim`) gives a weak float, as in JAX
    return TensorType(shape, dt[0], dt[1])


def _fold(call, out: TensorType, fn) -> TensorType:
    ts = [a for a in call.args if isinstance(a, TensorType)]
    v = _const_of(ts, fn) if fn else None
    if v is not None and out.shape == ():
        if out.dtype in ("i32", "i64"):
            v = int(v)
        return TensorType(out.shape, out.dtype, out.weak, v)
    return out


@op("+", "(+ a b ...)", "add, broadcasting; any number of operands", args=(1, None), example="(+ x i 1)")
def _add(call):
    return _fold(call, _elementwise(call, bool_ok=False), lambda *v: sum(v))


@op("-", "(- a [b])", "subtract b from a, or negate a", args=(1, 2), example="(- x 2)")
def _sub(call):
    fn = (lambda a: -a) if len(call.args) == 1 else (lambda a, b: a - b)
    return _fold(call, _elementwise(call, bool_ok=False), fn)


@op("*", "(* a b ...)", "multiply, broadcasting; any number of operands", args=(1, None), example="(* i 3)")
def _mul(call):
    def prod(*v):
        out = 1
        for x in v:
            out = out * x
        return out
    return _fold(call, _elementwise(call, bool_ok=False), prod)


@op("/", "(/ a b)", "true division, broadcasting; integers give f32", args=(2, 2), example="(/ i 2)")
def _div(call):
    return _fold(call, _elementwise(call, to_float=True, bool_ok=False), lambda a, b: a / b)


@op("mod", "(mod a b)", "remainder with the sign of b (Python's `%`), broadcasting", args=(2, 2), example="(mod i 5)")
def _mod(call):
    return _fold(call, _elementwise(call, bool_ok=False), lambda a, b: a % b)


@op("pow", "(pow a b)", "a to the power b, broadcasting", args=(2, 2), example="(pow x 2.0)")
def _pow(call):
    out = _elementwise(call, bool_ok=False)
    e = call.args[1]
    if is_int(out.dtype) and e.value is not None and e.value < 0:   # JAX: "Integers cannot be raised to negative powers"
        raise RuleError("E-TYPE-002", f"`pow`: an integer to the negative power {e.value} is not an integer", 1,
                        help="compute in floats, e.g. `(pow (cast x :f32) -1)`")
    return out


for _name, _doc in (("maximum", "elementwise maximum, broadcasting"), ("minimum", "elementwise minimum, broadcasting")):
    op(_name, f"({_name} a b)", _doc, args=(2, 2), example=f"({_name} x i)")(lambda call: _elementwise(call, bool_ok=False))

op("neg", "(neg a)", "negate", example="(neg i)")(lambda call: _elementwise(call, bool_ok=False))
op("abs", "(abs a)", "absolute value", example="(abs x)")(lambda call: _elementwise(call, bool_ok=False))
op("relu", "(relu a)", "max(a, 0)", example="(relu x)")(lambda call: _elementwise(call, bool_ok=False))

for _name, _doc in (("exp", "e to the power a"), ("log", "natural logarithm"), ("sqrt", "square root"),
                    ("rsqrt", "1 / sqrt(a)"), ("tanh", "hyperbolic tangent"), ("sigmoid", "logistic sigmoid"),
                    ("gelu", "GELU activation (tanh approximation, as jax.nn.gelu)"),
                    ("silu", "SiLU (swish) activation: a * sigmoid(a)"), ("sin", "sine (radians)"),
                    ("cos", "cosine (radians)")):
    op(_name, f"({_name} a)", _doc + "; integers give f32", example=f"({_name} p)")(
        lambda call: _elementwise(call, to_float=True, bool_ok=False))

for _name, _doc in (("=", "equal"), ("!=", "not equal"), ("<", "less than"), ("<=", "less or equal"),
                    (">", "greater than"), (">=", "greater or equal")):
    op(_name, f"({_name} a b)", f"{_doc}, broadcasting, to bool", args=(2, 2), example=f"({_name} i 1)")(
        lambda call: _elementwise(call, to_bool=True))


def _logic(call):
    ts = [call.tensor(i) for i in range(len(call.args))]
    for k, t in enumerate(ts):
        if t.dtype != "bool":
            raise RuleError("E-TYPE-002", f"`{call.op}` needs bool operands, got {t.show()}", k,
                            help="compare first, e.g. `(> x 0)`")
    return TensorType(broadcast_shapes([t.shape for t in ts], call.op), "bool")


op("and", "(and a b ...)", "logical and of bool tensors, broadcasting", args=(1, None), example="(and b b)")(_logic)
op("or", "(or a b ...)", "logical or of bool tensors, broadcasting", args=(1, None), example="(or b b)")(_logic)
op("not", "(not a)", "logical not of a bool tensor", example="(not b)")(_logic)


@op("where", "(where cond a b)", "a where cond is true, else b; all three broadcast", args=(3, 3), example="(where b x 0)")
def _where(call):
    c, a, b = (call.tensor(i) for i in range(3))
    if c.dtype != "bool":
        raise RuleError("E-TYPE-002", f"`where` needs a bool condition, got {c.show()}", 0,
                        help="compare first, e.g. `(= column at)`")
    shape = broadcast_shapes([c.shape, a.shape, b.shape], "where")
    dt = promote((a.dtype, a.weak), (b.dtype, b.weak))
    call.static["dtype"] = dt[0]
    return TensorType(shape, dt[0], dt[1])
