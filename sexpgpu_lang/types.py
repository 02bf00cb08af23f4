"""Types of SexpGPU values: tensors (static shape, dtype, weak flag), plists,
models, functions, nil, and the error type that silences follow-on errors.

Types are small immutable values with one short printed form used
everywhere (hover, messages, `explain`): `[64 8] i32`, `[] i64`,
`(:row [64 8] i32 :stride [64 1] i32)`.

Dtype promotion follows JAX's type promotion lattice
(jax/_src/dtypes.py, `_type_promotion_lattice`; JAX docs "Type promotion
semantics") restricted to the dtypes SexpGPU has: `bool i32 i64 f16 bf16 f32`.
Python-literal operands are weakly typed (`i*`, `f*`); a weak type left after
promotion is materialised as i32 or f32, our defaults.

Imports nothing outside the standard library; never JAX.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass
from functools import lru_cache

from .records import Record

DTYPES = ("bool", "i32", "i64", "f16", "bf16", "f32")

#: The names other libraries use, for "did you mean" (`:int32` -> `:i32`).
DTYPE_ALIASES = {"int32": "i32", "int64": "i64", "float16": "f16", "bfloat16": "bf16", "float32": "f32",
                 "float": "f32", "int": "i32", "half": "f16", "bool_": "bool", "boolean": "bool", "f64": "f32",
                 "float64": "f32", "i8": "i32", "u8": "i32", "uint8": "i32"}


def dtype_hint(name: str) -> str | None:
    """The SexpGPU dtype a mistyped dtype keyword most likely means, or None."""
    if name in DTYPE_ALIASES:
        return DTYPE_ALIASES[name]
    import difflib
    got = difflib.get_close_matches(name, DTYPES, n=1, cutoff=0.6)
    return got[0] if got else None
FLOAT_DTYPES = ("f16", "bf16", "f32")
INT_DTYPES = ("i32", "i64")

#: Byte width of each dtype (for memory estimates).
ITEMSIZE = {"bool": 1, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4}

# The lattice: each node's immediate supertypes. `i*` and `f*` are the weak
# integer and float types of Python literals.
_LATTICE = {
    "bool": ("i*",),
    "i*": ("i32", "f*"),
    "i32": ("i64",),
    "i64": ("f*",),
    "f*": ("f16", "bf16"),
    "f16": ("f32",),
    "bf16": ("f32",),
    "f32": (),
}


@lru_cache(maxsize=None)
def _upper(node: str) -> frozenset[str]:
    out = {node}
    for up in _LATTICE[node]:
        out |= _upper(up)
    return frozenset(out)


def _node(dtype: str, weak: bool) -> str:
    if weak and dtype in INT_DTYPES:
        return "i*"
    if weak and dtype in FLOAT_DTYPES:
        return "f*"
    return dtype


def promote(a: tuple[str, bool], b: tuple[str, bool]) -> tuple[str, bool]:
    """Join two (dtype, weak) pairs on JAX's promotion lattice.

    `promote(("i32", False), ("f32", True))` is `("f32", True)`: an i32 array
    plus a Python float is a weak float, as in JAX. Never raises: the lattice
    has a join for every pair.
    """
    na, nb = _node(*a), _node(*b)
    common = _upper(na) & _upper(nb)
    # The join is the element of `common` below all the others.
    join = next(c for c in common if all(o in _upper(c) for o in common))
    if join == "i*":
        return ("i32", True)
    if join == "f*":
        return ("f32", True)
    return (join, False)


def is_float(dtype: str) -> bool:
    """True for f16, bf16 and f32."""
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    """True for i32 and i64."""
    return dtype in INT_DTYPES


class Type(Record):
    """Base class of all SexpGPU types. Every type prints in one short form."""

    def show(self) -> str:  # pragma: no cover - overridden
        """The short printed form used in hover, messages and reports."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.show()


SHOWN_ITEMS = 16
"""The most entries of a vector's type, or sizes of a shape, that `show` writes out; past it,
how many more (`shown_items`): a vector of 40,000 values has a short type in a message."""


_WHOLE = contextvars.ContextVar("whole", default=False)


def shown_items(items, show=str, sep: str = " ") -> str:
    """The first SHOWN_ITEMS of `items`, each written by `show`, joined by `sep`, then `… N more`
    when there are more (all of them inside `exact`)."""
    more = len(items) - SHOWN_ITEMS
    if more <= 0 or _WHOLE.get():
        return sep.join(show(i) for i in items)
    return sep.join(show(i) for i in items[:SHOWN_ITEMS]) + (f"{sep}… {more:,} more" if more > 0 else "")


def exact(t: "Type") -> str:
    """`t.show()` with every entry and size written out: a type's identity where two types are
    compared or keyed by their text (`show` cuts a long vector or shape for messages)."""
    token = _WHOLE.set(True)
    try:
        return t.show()
    finally:
        _WHOLE.reset(token)


@dataclass(frozen=True, slots=True, repr=False)
class TensorType(Type):
    """A tensor: static `shape` (ints), `dtype` (one of DTYPES), `weak` for
    Python-literal types, and `value` when the scalar is a compile-time
    constant (a literal, a `def`, a `size`)."""

    shape: tuple[int, ...]
    dtype: str
    weak: bool = False
    value: int | float | bool | None = None

    def show(self) -> str:
        dims = shown_items(self.shape)
        return f"[{dims}] {self.dtype}" + ("*" if self.weak else "")

    @property
    def rank(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes the tensor occupies."""
        return self.size * ITEMSIZE[self.dtype]

    def strong(self) -> "TensorType":
        """The same type without the weak flag or constant value (how it is materialised)."""
        return TensorType(self.shape, self.dtype)


@dataclass(frozen=True, slots=True, repr=False)
class ShapeType(Type):
    """A vector of compile-time integers: a shape or an axis list, `[8 64]`."""

    dims: tuple[int, ...]

    def show(self) -> str:
        return "[" + shown_items(self.dims) + "] shape"


@dataclass(frozen=True, slots=True, repr=False)
class TupleType(Type):
    """A vector of values that are not all constants: `[row guess]` for `concat`."""

    items: tuple[Type, ...]

    def show(self) -> str:
        return "[" + shown_items(self.items, lambda t: t.show(), ", ") + "]"


@dataclass(frozen=True, slots=True, repr=False)
class KeywordType(Type):
    """A keyword used as a value: a dtype (`:i32`) or a plist key."""

    name: str

    def show(self) -> str:
        return f":{self.name} keyword"


@dataclass(frozen=True, slots=True, repr=False)
class StringType(Type):
    """A string constant."""

    value: str

    def show(self) -> str:
        return "string"


@dataclass(frozen=True, slots=True, repr=False)
class PlistType(Type):
    """A plist: keys (without colons) to types, in order."""

    entries: tuple[tuple[str, Type], ...]

    def show(self) -> str:
        return "(" + " ".join(f":{k} {t.show()}" for k, t in self.entries) + ")"

    def get(self, key: str) -> Type | None:
        """The type stored under `key`, or None."""
        for k, t in self.entries:
            if k == key:
                return t
        return None

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys, in order."""
        return tuple(k for k, _ in self.entries)


@dataclass(frozen=True, slots=True, repr=False)
class ModelType(Type):
    """A model (`defmodel`); calling it runs its `:apply`."""

    name: str

    def show(self) -> str:
        return f"model {self.name}"


@dataclass(frozen=True, slots=True, repr=False)
class SelfType(Type):
    """A model's `self`: `(getf self :key)` reads a parameter or a sub-model."""

    model: str

    def show(self) -> str:
        return f"self of {self.model}"


@dataclass(frozen=True, slots=True, repr=False)
class FunctionType(Type):
    """A `lambda` value; its parameters are typed at each call."""

    arity: int
    name: str = "lambda"

    def show(self) -> str:
        return f"function of {self.arity}"


@dataclass(frozen=True, slots=True, repr=False)
class LoaderType(Type):
    """A named loader, as a value."""

    name: str

    def show(self) -> str:
        return f"loader {self.name}"


@dataclass(frozen=True, slots=True, repr=False)
class NilType(Type):
    """`nil`, or an absent value; `reason` says why it is nil, for messages."""

    reason: str = ""

    def show(self) -> str:
        return "nil"


@dataclass(frozen=True, slots=True, repr=False)
class ErrorType(Type):
    """The type of an expression already reported: silences follow-on errors."""

    def show(self) -> str:
        return "{error}"


ERROR = ErrorType()
NIL = NilType()


def scalar(dtype: str, value=None, weak: bool = False) -> TensorType:
    """A rank-0 tensor type."""
    return TensorType((), dtype, weak, value)


def same_tensor(a: Type, b: Type) -> bool:
    """Shape and dtype equal, the weak flag and constant value ignored (how E-GEN-002 compares)."""
    return (isinstance(a, TensorType) and isinstance(b, TensorType)
            and a.shape == b.shape and a.dtype == b.dtype)
