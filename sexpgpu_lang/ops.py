"""The operation registry: one shape-and-dtype rule per op name.

Each `OpSpec` holds an op's signature, its one-line doc (shown on hover and
in completion), the keyword arguments it takes, which arguments must be
compile-time constants, and its rule: a pure function from argument types
to the result type, as JAX's shape and dtype rules are
(jax/_src/lax/lax.py). The runtime registers exactly one lowering per name
(`sexpgpu_runtime/lowering.py`); a test asserts the two key sets are equal
and that JAX's result types equal the rules' on each op's `example`.

A rule reports a mistake by raising `RuleError(code, message, arg)`, where
`arg` is the index of the positional argument (or the keyword) to point at.
A rule also fills `call.static` with the normalised constants the lowering
needs (axes, dtypes, sizes), so the lowering never infers them again.

Dtype rules follow DESIGN.md section 3: promotion on JAX's lattice, a
reduction keeps its input dtype (`sum` of i32 is i32), `argmax` gives i32,
`size` gives i64, float-only ops turn integers into f32.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from .types import (DTYPES, dtype_hint, ERROR, FLOAT_DTYPES, KeywordType, NilType, PlistType, ShapeType,
                    StringType, TensorType, TupleType, Type, is_float, is_int, promote, scalar)


class RuleError(Exception):
    """A shape or dtype mistake found by a rule: `code` (E-SHAPE-*, E-TYPE-*),
    a message quoting the shapes seen, and `arg`, the positional index or
    keyword name of the argument at fault (None: the whole call)."""

    def __init__(self, code: str, message: str, arg: int | str | None = None, help: str | None = None):
        super().__init__(message)
        self.code, self.message, self.arg, self.help = code, message, arg, help


@dataclass
class RuleCall:
    """What a rule sees: the op name, argument types, keyword types, and the
    `static` dict it fills for the lowering."""

    op: str
    args: list[Type]
    kwargs: dict[str, Type]
    static: dict = field(default_factory=dict)

    # -- helpers for rules -------------------------------------------------
    def tensor(self, i: int | str) -> TensorType:
        """Argument `i` (index or keyword) as a tensor, or a RuleError E-TYPE-001."""
        t = self.args[i] if isinstance(i, int) else self.kwargs[i]
        if isinstance(t, TensorType):
            if t.weak and isinstance(i, int) and type(t.value) is int and not -2**31 <= t.value < 2**31:
                # An integer literal given to an op is an i32 (the runtime materialises it so); JAX
                # refuses to make an i32 of it ("Python integer ... out of bounds for int32").
                raise RuleError("E-TYPE-002", f"`{self.op}`: the integer {t.value} does not fit in i32, the dtype of an "
                                "integer literal", i, help="write it as a float (`3e9`), or build it in i64, "
                                "e.g. `(* (cast 65536 :i64) 65536)`")
            return t
        what = "nil" if isinstance(t, NilType) else t.show()
        why = f" ({t.reason})" if isinstance(t, NilType) and t.reason else ""
        raise RuleError("E-TYPE-001", f"`{self.op}` needs a tensor here, got {what}{why}", i)

    def const_int(self, i: int | str) -> int:
        """Argument `i` as a compile-time integer, or a RuleError E-TYPE-003."""
        t = self.args[i] if isinstance(i, int) else self.kwargs[i]
        if isinstance(t, TensorType) and t.shape == () and isinstance(t.value, int) and not isinstance(t.value, bool):
            return t.value
        raise RuleError("E-TYPE-003", f"`{self.op}` needs a compile-time integer here, got {t.show()}", i)

    def const_float(self, name: str, default: float) -> float:
        """Keyword `name` as a compile-time number (default when absent)."""
        if name not in self.kwargs:
            return default
        t = self.kwargs[name]
        if isinstance(t, TensorType) and t.shape == () and isinstance(t.value, (int, float)) and not isinstance(t.value, bool):
            return float(t.value)
        raise RuleError("E-TYPE-003", f"`:{name}` of `{self.op}` must be a compile-time number, got {t.show()}", name)

    def const_bool(self, name: str, default: bool) -> bool:
        """Keyword `name` as `true`/`false` (default when absent)."""
        if name not in self.kwargs:
            return default
        t = self.kwargs[name]
        if isinstance(t, TensorType) and isinstance(t.value, bool):
            return t.value
        raise RuleError("E-TYPE-003", f"`:{name}` of `{self.op}` must be `true` or `false`", name)

    def shape_arg(self, i: int | str) -> tuple[int, ...]:
        """Argument `i` as a constant shape `[d ...]` (a single integer counts as `[d]`)."""
        t = self.args[i] if isinstance(i, int) else self.kwargs[i]
        if isinstance(t, ShapeType):
            return t.dims
        if isinstance(t, TensorType) and t.shape == () and isinstance(t.value, int) and not isinstance(t.value, bool):
            return (t.value,)
        raise RuleError("E-TYPE-003", f"`{self.op}` needs a constant shape like `[64 8]` here, got {t.show()}", i)

    def sizes(self, i: int | str) -> tuple[int, ...]:
        """Argument `i` as the shape of a tensor to make: a constant shape of sizes 0 or more."""
        dims = self.shape_arg(i)
        bad = [d for d in dims if d < 0]
        if bad:
            raise RuleError("E-SHAPE-004", f"`{self.op}`: a size must be 0 or more, got {bad[0]} in {_show(dims)}", i)
        return dims

    def dtype_arg(self, i: int | str, default: str | None = None) -> str:
        """Argument `i` as a dtype keyword (`:f32`), or `default` when absent."""
        if isinstance(i, int) and i >= len(self.args) or isinstance(i, str) and i not in self.kwargs:
            if default is None:
                raise RuleError("E-FORM-003", f"`{self.op}` needs a dtype like `:f32`")
            return default
        t = self.args[i] if isinstance(i, int) else self.kwargs[i]
        if isinstance(t, KeywordType) and t.name in DTYPES:
            return t.name
        hint = dtype_hint(t.name) if isinstance(t, KeywordType) else None
        raise RuleError("E-TYPE-002", f"`{self.op}` needs a dtype, one of "
                        + ", ".join(f"`:{d}`" for d in DTYPES) + f"; got {t.show()}"
                        + (f"; did you mean `:{hint}`?" if hint else ""), i)

    def axis(self, rank: int, value: int, where: int | str) -> int:
        """Normalise an axis (negative counts from the end) or raise E-SHAPE-003."""
        if -rank <= value < rank:
            return value % rank if rank else 0
        raise RuleError("E-SHAPE-003", f"`{self.op}`: axis {value} is out of range for rank {rank} "
                        f"(axes {-rank} to {rank - 1})" if rank else f"`{self.op}`: axis {value} is out of range for a scalar",
                        where)

    def axes_kw(self, rank: int, name: str = "axes") -> tuple[int, ...] | None:
        """The `:axes` keyword normalised, or None when absent (all axes)."""
        if name not in self.kwargs:
            return None
        dims = self.shape_arg(name)
        axes = [self.axis(rank, a, name) for a in dims]
        if len(set(axes)) != len(axes):
            # JAX refuses a repeated axis (`jnp.sum(x, axis=(0, 0))`), so the checker does too.
            raise RuleError("E-SHAPE-003", f"`{self.op}`: `:{name}` {_show(dims)} names an axis twice", name)
        return tuple(sorted(axes))


@dataclass(frozen=True)
class OpSpec:
    """One registry entry. `rule(call) -> Type`; `example` is a SexpGPU
    expression over the sample names of `EXAMPLE_ENV`, used by the test that
    checks this rule against the op's JAX lowering."""

    name: str
    signature: str
    doc: str
    rule: Callable[[RuleCall], Type]
    min_args: int
    max_args: int | None
    kwargs: tuple[str, ...] = ()
    example: str = ""
    draw: bool = False
    family: str = "tensor"


REGISTRY: dict[str, OpSpec] = {}

#: Sample names for each op's `example` (name -> type), shared by the tests.
EXAMPLE_ENV: dict[str, TensorType] = {
    "x": TensorType((2, 3), "f32"), "y": TensorType((3, 4), "f32"), "v": TensorType((3,), "f32"),
    "i": TensorType((2, 3), "i32"), "j": TensorType((2,), "i32"), "l": TensorType((2, 3), "i64"),
    "b": TensorType((2, 3), "bool"), "h": TensorType((2, 3), "bf16"), "s": TensorType((), "f32"),
    "n": TensorType((), "i64"), "p": TensorType((2, 3), "f32"),
}


def op(name, signature, doc, *, args=(1, 1), kwargs=(), example="", draw=False, family="tensor"):
    """Decorator registering a rule under `name`."""
    def deco(fn):
        REGISTRY[name] = OpSpec(name, signature, doc, fn, args[0], args[1], tuple(kwargs), example, draw, family)
        return fn
    return deco


# --------------------------------------------------------------------------- broadcasting


def broadcast_shapes(shapes: list[tuple[int, ...]], op: str, where=None) -> tuple[int, ...]:
    """NumPy broadcasting of `shapes`, or RuleError E-SHAPE-001 quoting them."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        size = 1
        for s in shapes:
            d = s[len(s) - rank + k] if len(s) - rank + k >= 0 else 1
            if d != 1:
                if size != 1 and size != d:
                    shown = " and ".join("[" + " ".join(map(str, s)) + "]" for s in shapes)
                    raise RuleError("E-SHAPE-001", f"`{op}`: shapes {shown} do not broadcast: "
                                    f"axis {k - rank} has sizes {size} and {d}", where)
                size = d
        out.append(size)
    return tuple(out)


def _show(shape) -> str:
    return "[" + " ".join(map(str, shape)) + "]"


def _const_of(ts: list[TensorType], fn):
    if all(t.value is not None and t.shape == () for t in ts):
        try:
            return fn(*[t.value for t in ts])
        except Exception:
            return None
    return None


# --------------------------------------------------------------------------- elementwise

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
                    ("silu", "SiLU (swish) activation: a * sigmoid(a)")):
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


# --------------------------------------------------------------------------- reductions


def _reduce(call, *, out_dtype=None, float_only=False):
    x = call.tensor(0)
    axes = call.axes_kw(x.rank)
    keep = call.const_bool("keepdims", False)
    axes = tuple(range(x.rank)) if axes is None else axes
    shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape)) if keep else \
        tuple(d for k, d in enumerate(x.shape) if k not in axes)
    if call.op in ("max", "min") and any(x.shape[k] == 0 for k in axes):   # JAX: "zero-size array ... has no identity"
        raise RuleError("E-SHAPE-004", f"`{call.op}` over an axis of size 0 has no value ({_show(x.shape)})", 0)
    dtype = out_dtype or x.dtype
    if dtype == "bool" and call.op in ("sum", "prod"):
        dtype = "i32"
    if float_only and not is_float(dtype):
        dtype = "f32"
    call.static.update(axes=axes, keepdims=keep, dtype=dtype)
    return TensorType(shape, dtype)


for _name, _doc, _kw in (("sum", "sum over `:axes` (default all); keeps the dtype (bool gives i32)", {}),
                         ("prod", "product over `:axes` (default all); keeps the dtype", {}),
                         ("max", "maximum over `:axes` (default all)", {}),
                         ("min", "minimum over `:axes` (default all)", {}),
                         ("mean", "mean over `:axes` (default all); integers give f32", {"float_only": True}),
                         ("logsumexp", "log of the sum of exponentials over `:axes`; integers give f32", {"float_only": True})):
    op(_name, f"({_name} x :axes [..] :keepdims false)", _doc, kwargs=("axes", "keepdims"), family="reduction",
       example=f"({_name} i :axes [1])")((lambda kw: lambda call: _reduce(call, **kw))(_kw))


def _arg_reduce(call):
    x = call.tensor(0)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", f"`{call.op}` needs at least one axis, got a scalar", 0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    if x.shape[ax] == 0:   # JAX: "attempt to get argmax of an empty sequence"
        raise RuleError("E-SHAPE-004", f"`{call.op}` along axis {ax} of {_show(x.shape)}, of size 0, has no index", 0)
    keep = call.const_bool("keepdims", False)
    shape = tuple(1 if k == ax else d for k, d in enumerate(x.shape)) if keep else \
        tuple(d for k, d in enumerate(x.shape) if k != ax)
    call.static.update(axis=ax, keepdims=keep)
    return TensorType(shape, "i32")


op("argmax", "(argmax x :axis -1)", "index of the largest entry along `:axis` (default the last), as i32",
   kwargs=("axis", "keepdims"), example="(argmax x)", family="reduction")(_arg_reduce)
op("argmin", "(argmin x :axis -1)", "index of the smallest entry along `:axis` (default the last), as i32",
   kwargs=("axis", "keepdims"), example="(argmin l :axis 0)", family="reduction")(_arg_reduce)


# --------------------------------------------------------------------------- shape


@op("reshape", "(reshape x [shape])", "the same entries in a new shape; one size may be -1", args=(2, 2),
    example="(reshape x [3 -1])", family="shape")
def _reshape(call):
    x = call.tensor(0)
    dims = list(call.shape_arg(1))
    if dims.count(-1) > 1:
        raise RuleError("E-SHAPE-004", "`reshape` takes at most one -1", 1)
    known = 1
    for d in dims:
        if d != -1:
            known *= d
    if -1 in dims:
        if known == 0 or x.size % known:
            raise RuleError("E-SHAPE-004", f"`reshape` cannot fit {x.size} entries of {_show(x.shape)} into {_show(dims)}", 1)
        dims[dims.index(-1)] = x.size // known
    elif known != x.size:
        raise RuleError("E-SHAPE-004", f"`reshape` of {_show(x.shape)} ({x.size} entries) to {_show(dims)} "
                        f"({known} entries) changes the size", 1)
    call.static["shape"] = tuple(dims)
    return TensorType(tuple(dims), x.dtype, x.weak)


@op("transpose", "(transpose x [perm])", "permute the axes (default: reverse them)", args=(1, 2),
    example="(transpose x [1 0])", family="shape")
def _transpose(call):
    x = call.tensor(0)
    perm = tuple(range(x.rank))[::-1] if len(call.args) < 2 else tuple(call.axis(x.rank, a, 1) for a in call.shape_arg(1))
    if sorted(perm) != list(range(x.rank)):
        raise RuleError("E-SHAPE-003", f"`transpose` needs a permutation of the {x.rank} axes, got {_show(perm)}", 1)
    call.static["perm"] = perm
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype, x.weak)


def _tensor_list(call) -> list[TensorType]:
    t = call.args[0]
    if isinstance(t, TupleType):
        items = list(t.items)
    elif isinstance(t, ShapeType):
        items = [scalar("i32", d, True) for d in t.dims]
    else:
        raise RuleError("E-TYPE-001", f"`{call.op}` needs a vector of tensors like `[a b]`, got {t.show()}", 0)
    out = []
    for t in items:
        if not isinstance(t, TensorType):
            raise RuleError("E-TYPE-001", f"`{call.op}` needs tensors, got {t.show()}", 0)
        out.append(t)
    if not out:
        raise RuleError("E-FORM-003", f"`{call.op}` needs at least one tensor", 0)
    return out


@op("concat", "(concat [a b ...] :axis 0)", "join tensors along an existing axis", args=(1, 1), kwargs=("axis",),
    example="(concat [x p] :axis 1)", family="shape")
def _concat(call):
    ts = _tensor_list(call)
    rank = ts[0].rank
    ax = call.axis(rank, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    for t in ts[1:]:
        if t.rank != rank or any(a != b for k, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if k != ax):
            raise RuleError("E-SHAPE-005", f"`concat` along axis {ax}: {_show(ts[0].shape)} and {_show(t.shape)} "
                            f"differ on another axis", 0)
    dt = (ts[0].dtype, ts[0].weak)
    for t in ts[1:]:
        dt = promote(dt, (t.dtype, t.weak))
    shape = list(ts[0].shape)
    shape[ax] = sum(t.shape[ax] for t in ts)
    call.static.update(axis=ax, dtype=dt[0])
    return TensorType(tuple(shape), dt[0], dt[1])


@op("stack", "(stack [a b ...] :axis 0)", "join same-shaped tensors along a new axis", args=(1, 1), kwargs=("axis",),
    example="(stack [x p] :axis 1)", family="shape")
def _stack(call):
    ts = _tensor_list(call)
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise RuleError("E-SHAPE-005", f"`stack`: {_show(ts[0].shape)} and {_show(t.shape)} differ", 0)
    ax = call.axis(ts[0].rank + 1, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    dt = (ts[0].dtype, ts[0].weak)
    for t in ts[1:]:
        dt = promote(dt, (t.dtype, t.weak))
    shape = list(ts[0].shape)
    shape.insert(ax, len(ts))
    call.static.update(axis=ax, dtype=dt[0])
    return TensorType(tuple(shape), dt[0], dt[1])


@op("expand-dims", "(expand-dims x :axis 0)", "insert an axis of size 1", kwargs=("axis",),
    example="(expand-dims x :axis 1)", family="shape")
def _expand(call):
    x = call.tensor(0)
    ax = call.axis(x.rank + 1, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    shape = list(x.shape)
    shape.insert(ax, 1)
    call.static["axis"] = ax
    return TensorType(tuple(shape), x.dtype, x.weak)


@op("squeeze", "(squeeze x :axes [..])", "remove axes of size 1 (default: all of them)", kwargs=("axes",),
    example="(squeeze (expand-dims x :axis 0) :axes [0])", family="shape")
def _squeeze(call):
    x = call.tensor(0)
    axes = call.axes_kw(x.rank)
    if axes is None:
        axes = tuple(k for k, d in enumerate(x.shape) if d == 1)
    for a in axes:
        if x.shape[a] != 1:
            raise RuleError("E-SHAPE-005", f"`squeeze`: axis {a} of {_show(x.shape)} has size {x.shape[a]}, not 1", "axes")
    call.static["axes"] = axes
    return TensorType(tuple(d for k, d in enumerate(x.shape) if k not in axes), x.dtype, x.weak)


@op("broadcast-to", "(broadcast-to x [shape])", "broadcast to a larger shape", args=(2, 2),
    example="(broadcast-to v [2 3])", family="shape")
def _broadcast_to(call):
    x = call.tensor(0)
    dims = call.sizes(1)
    out = broadcast_shapes([x.shape, dims], "broadcast-to", 1)
    if out != tuple(dims):
        raise RuleError("E-SHAPE-001", f"`broadcast-to`: {_show(x.shape)} does not broadcast to {_show(dims)}", 1)
    call.static["shape"] = tuple(dims)
    return TensorType(tuple(dims), x.dtype, x.weak)


@op("slice", "(slice x :axis 0 :start 0 :end n)", "entries start..end-1 along one axis (static bounds)",
    kwargs=("axis", "start", "end"), example="(slice x :axis 1 :start 1 :end 3)", family="shape")
def _slice(call):
    x = call.tensor(0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    n = x.shape[ax]
    start = call.const_int("start") if "start" in call.kwargs else 0
    end = call.const_int("end") if "end" in call.kwargs else n
    start, end = (start + n if start < 0 else start), (end + n if end < 0 else end)
    if not 0 <= start <= end <= n:
        raise RuleError("E-SHAPE-003", f"`slice` {start}..{end} is outside axis {ax} of size {n}", "start")
    call.static.update(axis=ax, start=start, end=end)
    shape = list(x.shape)
    shape[ax] = end - start
    return TensorType(tuple(shape), x.dtype, x.weak)


def _index_tensor(call, i) -> TensorType:
    t = call.args[i]
    if isinstance(t, ShapeType):
        call.static["indices"] = t.dims
        return TensorType((len(t.dims),), "i32")
    t = call.tensor(i)
    if not is_int(t.dtype):
        raise RuleError("E-TYPE-002", f"`{call.op}` needs integer indices, got {t.show()}", i,
                        help="cast them with `(cast idx :i32)`")
    return t


@op("take", "(take x indices :axis 0)", "gather entries of x along `:axis` (default 0, not flattened)", args=(2, 2),
    kwargs=("axis",), example="(take x j :axis 1)", family="shape")
def _take(call):
    x = call.tensor(0)
    idx = _index_tensor(call, 1)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", "`take` needs at least one axis, got a scalar", 0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    bad = [i for i in call.static.get("indices", ()) if not 0 <= i < x.shape[ax]]
    if bad:
        raise RuleError("E-SHAPE-003", f"`take`: index {bad[0]} is outside axis {ax} of {_show(x.shape)} "
                        f"(0 to {x.shape[ax] - 1})", 1)
    call.static["axis"] = ax
    return TensorType(x.shape[:ax] + idx.shape + x.shape[ax + 1:], x.dtype, x.weak)


@op("take-along-axis", "(take-along-axis x indices :axis -1)", "gather with indices shaped like x (numpy take_along_axis)",
    args=(2, 2), kwargs=("axis",), example="(take-along-axis x (argsort x) :axis 1)", family="shape")
def _take_along(call):
    x, idx = call.tensor(0), _index_tensor(call, 1)
    if idx.rank != x.rank:
        raise RuleError("E-SHAPE-005", f"`take-along-axis`: indices {_show(idx.shape)} and x {_show(x.shape)} "
                        "need the same rank", 1)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    shape = []
    for k, (a, b) in enumerate(zip(x.shape, idx.shape)):
        if k == ax:
            shape.append(b)
        else:
            shape.append(broadcast_shapes([(a,), (b,)], "take-along-axis", 1)[0])
    call.static["axis"] = ax
    return TensorType(tuple(shape), x.dtype, x.weak)


@op("one-hot", "(one-hot indices n :dtype :f32)", "one-hot vectors of length n along a new last axis", args=(2, 2),
    kwargs=("dtype",), example="(one-hot j 4)", family="shape")
def _one_hot(call):
    idx = call.tensor(0)
    if not is_int(idx.dtype):
        raise RuleError("E-TYPE-002", f"`one-hot` needs integer indices, got {idx.show()}", 0)
    n = call.const_int(1)
    if n < 1:
        raise RuleError("E-SHAPE-004", f"`one-hot` needs 1 or more classes, got {n}", 1)
    dt = call.dtype_arg("dtype", "f32")
    call.static.update(n=n, dtype=dt)
    return TensorType(idx.shape + (n,), dt)


@op("iota", "(iota [shape] :axis 0 :dtype :i32)", "each entry's index along `:axis`", args=(1, 1),
    kwargs=("axis", "dtype"), example="(iota [2 3] :axis 1)", family="shape")
def _iota(call):
    dims = call.sizes(0)
    ax = call.axis(len(dims), call.const_int("axis") if "axis" in call.kwargs else 0, "axis")
    dt = call.dtype_arg("dtype", "i32")
    if dt == "bool":   # lax.broadcasted_iota refuses bool
        raise RuleError("E-TYPE-002", "`iota` counts in numbers; `:dtype` cannot be `:bool`", "dtype",
                        help="compare the count instead, e.g. `(= (iota [4]) 0)`")
    call.static.update(shape=dims, axis=ax, dtype=dt)
    return TensorType(dims, dt)


def _dtype_once(call, i: int):
    """A dtype given both as argument `i` and as `:dtype` is a mistake (JAX: "multiple values for 'dtype'")."""
    if len(call.args) > i and "dtype" in call.kwargs:
        raise RuleError("E-NAME-002", f"`{call.op}`: the dtype is given twice, as an argument and as `:dtype`", "dtype")


def _fill(call, value):
    dims = call.sizes(0)
    _dtype_once(call, 1)
    dt = call.dtype_arg(1, None) if len(call.args) > 1 else call.dtype_arg("dtype", "f32")
    call.static.update(shape=dims, dtype=dt, value=value)
    return TensorType(dims, dt)


op("zeros", "(zeros [shape] :dtype)", "a tensor of zeros (dtype default f32)", args=(1, 2), kwargs=("dtype",),
   example="(zeros [2 3] :bf16)", family="shape")(lambda call: _fill(call, 0))
op("ones", "(ones [shape] :dtype)", "a tensor of ones (dtype default f32)", args=(1, 2), kwargs=("dtype",),
   example="(ones [2 3] :i32)", family="shape")(lambda call: _fill(call, 1))


@op("full", "(full [shape] value :dtype)", "a tensor filled with a scalar value", args=(2, 3), kwargs=("dtype",),
    example="(full [2 3] s)", family="shape")
def _full(call):
    dims = call.sizes(0)
    v = call.tensor(1)
    if v.shape != ():
        raise RuleError("E-SHAPE-005", f"`full` needs a scalar value, got {v.show()}", 1)
    _dtype_once(call, 2)
    dt = call.dtype_arg(2, None) if len(call.args) > 2 else call.dtype_arg("dtype", v.dtype)
    call.static.update(shape=dims, dtype=dt)
    return TensorType(dims, dt)


@op("axis-size", "(axis-size x axis)", "the size of one axis of x, as a compile-time integer (weakly typed, like a literal)",
    args=(2, 2), example="(axis-size x -1)", family="shape")
def _dim(call):
    x = call.tensor(0)
    ax = call.axis(x.rank, call.const_int(1), 1)
    call.static["value"] = x.shape[ax]
    return scalar("i32", x.shape[ax], weak=True)


@op("size", "(size x)", "the number of entries of x, as an i64 constant", example="(size x)", family="shape")
def _size(call):
    x = call.tensor(0)
    call.static["value"] = x.size
    return scalar("i64", x.size)


# --------------------------------------------------------------------------- linear algebra, networks


@op("matmul", "(matmul a b)", "matrix product with numpy's batching and broadcasting rules", args=(2, 2),
    example="(matmul x y)", family="linalg")
def _matmul(call):
    a, b = call.tensor(0), call.tensor(1)
    if a.rank == 0 or b.rank == 0:
        raise RuleError("E-SHAPE-002", f"`matmul` needs tensors of rank 1 or more, got {a.show()} and {b.show()}")
    ash = (1,) + a.shape if a.rank == 1 else a.shape
    bsh = b.shape + (1,) if b.rank == 1 else b.shape
    if ash[-1] != bsh[-2]:
        raise RuleError("E-SHAPE-002", f"`matmul` of {_show(a.shape)} and {_show(b.shape)}: the inner sizes "
                        f"{ash[-1]} and {bsh[-2]} differ", None,
                        help="the last axis of the first operand must equal the second-to-last of the second")
    batch = broadcast_shapes([ash[:-2], bsh[:-2]], "matmul")
    shape = batch + (ash[-2], bsh[-1])
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    dt = promote((a.dtype, a.weak), (b.dtype, b.weak))
    call.static["dtype"] = dt[0]
    return TensorType(shape, dt[0])


_EINSUM = re.compile(r"^([a-zA-Z,]*)->([a-zA-Z]*)$")


@op("einsum", '(einsum "ij,jk->ik" a b ...)', "Einstein summation with an explicit output", args=(2, None),
    example='(einsum "ij,jk->ik" x y)', family="linalg")
def _einsum(call):
    spec = call.args[0]
    if not isinstance(spec, StringType):
        raise RuleError("E-TYPE-003", "`einsum` needs a subscripts string like \"ij,jk->ik\" first", 0)
    if "." in spec.value:   # JAX reads `...` as the axes not named; the language names every axis
        raise RuleError("E-FORM-002", f"`einsum` subscripts {spec.value!r}: name every axis with a letter (no `...`)", 0)
    m = _EINSUM.match(spec.value.replace(" ", ""))
    if not m:
        raise RuleError("E-FORM-002", f"`einsum` subscripts {spec.value!r} need an explicit `->` output", 0)
    if len(set(m.group(2))) != len(m.group(2)):   # JAX: "appeared more than once in the output"
        raise RuleError("E-FORM-002", f"`einsum` output {m.group(2)!r} names an axis twice", 0)
    ins = m.group(1).split(",")
    ts = [call.tensor(i + 1) for i in range(len(call.args) - 1)]
    if len(ins) != len(ts):
        raise RuleError("E-FORM-003", f"`einsum` subscripts name {len(ins)} operands, got {len(ts)}", 0)
    sizes: dict[str, int] = {}
    for k, (sub, t) in enumerate(zip(ins, ts)):
        if len(sub) != t.rank:
            raise RuleError("E-SHAPE-005", f"`einsum` operand {k + 1} is {_show(t.shape)}, but {sub!r} names {len(sub)} axes", k + 1)
        for c, d in zip(sub, t.shape):
            if sizes.setdefault(c, d) != d:
                raise RuleError("E-SHAPE-005", f"`einsum`: axis {c!r} has sizes {sizes[c]} and {d}", k + 1)
    for c in m.group(2):
        if c not in sizes:
            raise RuleError("E-FORM-002", f"`einsum` output axis {c!r} is not an input axis", 0)
    dt = (ts[0].dtype, ts[0].weak)
    for t in ts[1:]:
        dt = promote(dt, (t.dtype, t.weak))
    call.static.update(subscripts=spec.value.replace(" ", ""), dtype=dt[0])
    return TensorType(tuple(sizes[c] for c in m.group(2)), dt[0])


def _softmaxish(call):
    x = call.tensor(0)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", f"`{call.op}` normalises along an axis; a scalar has none", 0)
    if x.dtype == "bool":
        raise RuleError("E-TYPE-002", f"`{call.op}` needs numbers, got bool", 0,
                        help="cast the operand with `(cast x :f32)`")
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    dt = x.dtype if is_float(x.dtype) else "f32"
    call.static.update(axis=ax, dtype=dt)
    return TensorType(x.shape, dt)


op("softmax", "(softmax x :axis -1)", "softmax along `:axis`; integers give f32", kwargs=("axis",),
   example="(softmax x)", family="network")(_softmaxish)
op("log-softmax", "(log-softmax x :axis -1)", "log of softmax along `:axis`; integers give f32", kwargs=("axis",),
   example="(log-softmax h)", family="network")(_softmaxish)


@op("cross-entropy", "(cross-entropy logits labels)", "per-position cross-entropy of float logits [... V] and "
    "integer labels [...], computed and returned in f32", args=(2, 2), example="(cross-entropy x j)", family="network")
def _xent(call):
    lg, lb = call.tensor(0), call.tensor(1)
    if not is_float(lg.dtype):
        raise RuleError("E-TYPE-002", f"`cross-entropy` needs float logits, got {lg.show()}", 0)
    if not is_int(lb.dtype):
        raise RuleError("E-TYPE-002", f"`cross-entropy` needs integer labels, got {lb.show()}", 1,
                        help="labels are class indices; cast them with `(cast labels :i32)`")
    if lg.rank == 0 or lg.shape[:-1] != lb.shape:
        raise RuleError("E-SHAPE-005", f"`cross-entropy`: logits {_show(lg.shape)} need labels "
                        f"{_show(lg.shape[:-1])}, got {_show(lb.shape)}", 1)
    return TensorType(lb.shape, "f32")


# --------------------------------------------------------------------------- selection


def _sortish(call, index: bool):
    x = call.tensor(0)
    if x.rank == 0:
        raise RuleError("E-SHAPE-003", f"`{call.op}` needs at least one axis", 0)
    ax = call.axis(x.rank, call.const_int("axis") if "axis" in call.kwargs else -1, "axis")
    desc = call.const_bool("descending", False)
    call.static.update(axis=ax, descending=desc)
    return TensorType(x.shape, "i32" if index else x.dtype)


op("sort", "(sort x :axis -1 :descending false)", "sorted along `:axis`", kwargs=("axis", "descending"),
   example="(sort x)", family="selection")(lambda call: _sortish(call, False))
op("argsort", "(argsort x :axis -1 :descending false)", "indices that sort x along `:axis`, as i32",
   kwargs=("axis", "descending"), example="(argsort x :axis 0)", family="selection")(lambda call: _sortish(call, True))


@op("top-k", "(top-k x k)", "the k largest entries along the last axis: the plist `:values :indices`", args=(2, 2),
    example="(top-k x 2)", family="selection")
def _top_k(call):
    x = call.tensor(0)
    k = call.const_int(1)
    if x.rank == 0 or not 0 < k <= x.shape[-1]:
        raise RuleError("E-SHAPE-003", f"`top-k`: k = {k} needs 1 <= k <= the last axis size of {_show(x.shape)}", 1)
    call.static["k"] = k
    shape = x.shape[:-1] + (k,)
    return PlistType((("values", TensorType(shape, x.dtype)), ("indices", TensorType(shape, "i32"))))


# --------------------------------------------------------------------------- cast, gradient


@op("cast", "(cast x :dtype)", "convert to a dtype", args=(2, 2), example="(cast x :bf16)")
def _cast(call):
    x = call.tensor(0)
    dt = call.dtype_arg(1)
    call.static["dtype"] = dt
    return TensorType(x.shape, dt)


@op("stop-gradient", "(stop-gradient x)", "x, with no gradient flowing back through it", example="(stop-gradient x)")
def _stop(call):
    return call.tensor(0).strong() if call.tensor(0).value is None else call.tensor(0)


# --------------------------------------------------------------------------- random draws


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


@op("categorical", "(categorical logits :salt s :temperature 1)", "one i32 index per row of logits [... V], "
    "drawn from softmax(logits / temperature)", args=(1, 1), kwargs=("salt", "temperature"), draw=True,
    example="(categorical x :salt n)", family="random")
def _categorical(call):
    _salt(call)
    lg = call.tensor(0)
    if not is_float(lg.dtype) or lg.rank == 0:
        raise RuleError("E-TYPE-002", f"`categorical` needs float logits [... V], got {lg.show()}", 0)
    if lg.shape[-1] == 0:
        raise RuleError("E-SHAPE-004", f"`categorical` needs 1 or more classes, the logits are {_show(lg.shape)}", 0)
    if "temperature" in call.kwargs:
        t = call.tensor("temperature")
        if t.shape != ():
            raise RuleError("E-SHAPE-005", "`:temperature` must be a scalar", "temperature")
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

__all__ = ["REGISTRY", "OpSpec", "RuleCall", "RuleError", "EXAMPLE_ENV", "INITIALIZERS", "broadcast_shapes", "ERROR"]
