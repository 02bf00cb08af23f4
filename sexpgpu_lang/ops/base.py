"""The registry's building blocks: `RuleError`, `RuleCall` (what a rule sees, with its helpers
for constants, axes and dtypes), `OpSpec`, `REGISTRY`, the `op` decorator, `EXAMPLE_ENV` and
NumPy broadcasting (`broadcast_shapes`). The families' modules register their rules here.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..records import Record
from ..types import DTYPES, KeywordType, NilType, ShapeType, TensorType, Type, dtype_hint


class RuleError(Exception):
    """A shape or dtype mistake found by a rule: `code` (E-SHAPE-*, E-TYPE-*),
    a message quoting the shapes seen, and `arg`, the positional index or
    keyword name of the argument at fault (None: the whole call)."""

    def __init__(self, code: str, message: str, arg: int | str | None = None, help: str | None = None):
        super().__init__(message)
        self.code, self.message, self.arg, self.help = code, message, arg, help


@dataclass(eq=False, repr=False)
class RuleCall(Record):
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


@dataclass(eq=False, repr=False)
class OpSpec(Record):
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
    "q": TensorType((2, 4, 4, 8), "f32"), "kv": TensorType((2, 3, 2, 8), "f32"),
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
