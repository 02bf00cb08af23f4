"""Benchmark: the checker against JAX in both directions, on random programs over the registry's operations.

Well-typed direction. Random compositions of `sexpgpu_lang.ops.REGISTRY`'s
ops (random arity, keywords such as `:axis`, `:axes`, `:keepdims`,
`:dtype`, `:salt`), nested up to `--depth`, over random names bound to
random shapes and dtypes, and literals. `check_expression` types each;
when the checker accepts one, the runtime's evaluator traces it with JAX
(`jax.eval_shape`) and compares every op's JAX result with the type the
checker inferred for that node, and the whole result with the
expression's type: an accepted program that fails to lower, or a node
whose JAX type differs, is a disagreement.

Ill-typed direction. `ill_typed` writes a call of each op in turn with
one fault drawn from its family's (shapes that do not broadcast, a
scalar where an axis is needed, an axis out of range or not constant,
repeated axes, bool or integer operands, a bad dtype, a negative size, a
matmul inner-size mismatch, a wrong einsum, a non-permutation, an index
out of range...) or a generic one (too few or too many arguments, an
unknown keyword, a string or a vector for a tensor); operands are sometimes wrapped
in type-preserving ops and the call in another op. The random
compositions the checker rejects count here too.

JAX's own verdict. Every program, accepted or not, is also evaluated
with `DIRECT`: each op as a JAX user writes it (the jnp, lax, jax.nn,
jax.random function, or optax's cross-entropy), with none of the
runtime's conversions or type checks, traced and lowered with
`jax.jit(...).lower`. A rejected program JAX also refuses is an
agreement; one JAX lowers is a deliberate strictness when a rule of
`STRICT` explains each of its errors (docs/language.md, "Where the
checker is stricter than JAX"), else a disagreement. An accepted program
JAX's function refuses is explained by a rule of `LENIENT` (the
language converts, e.g. integers to f32 for `sigmoid`) or is a
disagreement.

Whole run files (`--phases`). `phase_file` writes a run file: a loader
of random fields (shapes, dtypes), a model `m` multiplying a trainable
parameter by its argument, a generator whose `:init` makes a state from
the fields, whose `:step` reads the state, the trip, `(getf ctx :step)`
and a model call and returns a state that keeps each key's shape and
dtype (`keep`), changes one, drops one or adds one (`drift`), or is
random compositions as they come (`raw`), an optional `:finish`, and an
`objective` reading every field and generated name (`field` or `getf`),
calling the model, and returning an f32 scalar loss with the parameter
in it (`ok`), an unreduced one, one cast to a non-float (or bf16) dtype,
or a composition as it comes. The compositions are random calls of the
registry's ops, mostly ones the checker types alone. When the checker
accepts a file (`analyze`: no error, an IR), `phase_runtime` lowers every
graph of its step as `sexpgpu run` builds them (`Graphs`:
`generate.init`, `.step`, `.finish`, `train` with its gradient, `update`)
from `jax.ShapeDtypeStruct`s and compares JAX's types of the state, the
made record, the loss and the gradient with the checker's (tracing, the
runtime compares each node's too: `InternalTypeError`). Every file,
accepted or not, is also run as a JAX user writes it, phase by phase
(`phase_jax_verdicts`: `DIRECT` ops, the generator as `lax.fori_loop`
with the state as its carry, `jax.grad` of the objective on what the
generator makes), and each phase is judged alone (`PhaseTally.judge`): a
phase the checker rejects and JAX runs is explained by a rule of `STRICT`
or `PHASE_STRICT`, one it accepts and JAX refuses by `LENIENT` or
`PHASE_LENIENT`, or it is a disagreement.

Prints the counts per category, both directions, and the unexplained
disagreements (goal 0; exit status 1 otherwise). `--keep DIR` writes
each one as `expr` plus its names' types, or as a run file, for a regression case.

    .venv/bin/python benchmarks/differential.py [--n 3000] [--ill 2000] [--phases 1000] [--seed 0] [--depth 3]
        [--phase-depth 2] [--keep DIR]

One file in five runs under `:precision :bf16`, one in five stacks two
microbatches (the stacked generator and training graphs are lowered too).

Not covered by the random files: `prepare`, evaluation passes, curriculum
stages, sub-models, frozen or pretrained parameters, and `def`'d functions.
"""
from __future__ import annotations

import argparse
import functools
import operator
import random
import re
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import sexpgpu_runtime  # noqa: F401  (enables x64, as a run does)
import jax
import jax.numpy as jnp
import optax
from jax import lax

from sexpgpu_lang.check import check_expression
from sexpgpu_lang.ops import REGISTRY
from sexpgpu_lang.source import SourceText
from sexpgpu_lang.syntax import Kw, ListNode, Num, Str, Sym, VecNode, parse
from sexpgpu_lang.types import DTYPES, PlistType, TensorType
from sexpgpu_runtime.dtypes import JAX_DTYPES, jdt, name_of
from sexpgpu_runtime.lowering import Effects, evaluate

SHAPES = [(), (3,), (2, 3), (3, 4), (2, 3, 4), (4,)]
DTYPES = ["f32", "f32", "bf16", "i32", "i64", "bool"]
SHAPE_OPS = {"broadcast-to", "full", "iota", "normal", "ones", "zeros", "uniform", "reshape"}
EINSUMS = ["ij,jk->ik", "ij->ji", "i,i->", "ij,j->i", "bij,bjk->bik", "ij->"]


def random_env(rng: random.Random) -> dict[str, TensorType]:
    return {name: TensorType(rng.choice(SHAPES), rng.choice(DTYPES)) for name in "abcdef"[:rng.randint(2, 6)]}


def vec(rng: random.Random) -> str:
    return "[" + " ".join(str(rng.choice([2, 3, 4, -1] if rng.random() < 0.2 else [2, 3, 4])) for _ in range(rng.randint(0, 3))) + "]"


def leaf(rng: random.Random, env) -> str:
    r = rng.random()
    if r < 0.75:
        return rng.choice(list(env))
    if r < 0.88:
        return str(rng.randint(-2, 5))
    return rng.choice(["0.5", "2.0", "-1.5"])


def kwarg(rng: random.Random, key: str) -> str:
    if key == "axis":
        return f":axis {rng.randint(-2, 2)}"
    if key == "axes":
        return f":axes [{' '.join(str(rng.randint(-1, 2)) for _ in range(rng.randint(1, 2)))}]"
    if key in ("keepdims", "descending"):
        return f":{key} {rng.choice(['true', 'false'])}"
    if key == "dtype":
        return f":dtype :{rng.choice(['f32', 'i32', 'bf16', 'i64'])}"
    if key == "salt":
        return f":salt {rng.randint(0, 3)}"
    if key in ("std", "mean", "min", "max", "temperature"):
        return f":{key} {rng.choice(['0.5', '1.0', '2'])}"
    if key in ("start", "end"):
        return f":{key} {rng.randint(0, 3)}"
    return ""


def expr(rng: random.Random, env, depth: int, top: bool = False) -> str:
    """A random expression; `top`: an op call (a bare literal alone is a weak constant, never lowered)."""
    if depth <= 0 or (not top and rng.random() < 0.25):
        return leaf(rng, env)
    name = rng.choice(sorted(REGISTRY))
    spec = REGISTRY[name]
    sub = lambda: expr(rng, env, depth - 1)  # noqa: E731
    if name in SHAPE_OPS:
        if name == "reshape":
            args = [sub(), vec(rng)]
        elif name == "full":
            args = [vec(rng), sub()]
        else:
            args = [vec(rng)] + ([f":{rng.choice(['f32', 'i32'])}"] if spec.max_args and spec.max_args > 1 and rng.random() < 0.3 else [])
    elif name == "cast":
        args = [sub(), f":{rng.choice(['f32', 'bf16', 'i32', 'i64', 'bool'])}"]
    elif name == "einsum":
        spec_text = rng.choice(EINSUMS)
        args = [f'"{spec_text}"'] + [sub() for _ in range(spec_text.split("->")[0].count(",") + 1)]
    elif name in ("concat", "stack"):
        args = ["[" + " ".join(sub() for _ in range(rng.randint(1, 3))) + "]"]
    elif name in ("axis-size", "one-hot", "top-k", "transpose"):
        args = [sub(), str(rng.randint(-1, 3))] if name != "transpose" or rng.random() < 0.5 else [sub()]
        if name == "transpose" and len(args) == 2:
            args[1] = rng.choice(["[1 0]", "[0 1]", "[2 0 1]", "[0]"])
    else:
        hi = min(spec.max_args if spec.max_args is not None else 3, 3)
        args = [sub() for _ in range(rng.randint(spec.min_args, max(spec.min_args, hi)))]
    kws = [kwarg(rng, k) for k in spec.kwargs if rng.random() < 0.35]
    if spec.draw and not any(k.startswith(":salt") for k in kws) and rng.random() < 0.8:
        kws.append(kwarg(rng, "salt"))
    return "(" + " ".join([name] + args + [k for k in kws if k]) + ")"


def lower(e, env_types) -> str | None:
    """None when JAX agrees with the checker on every node, else why not."""
    fx = Effects(seed_key=jax.random.key(0))
    structs = {k: jax.ShapeDtypeStruct(t.shape, jdt(t.dtype)) for k, t in env_types.items()}
    try:
        out = jax.eval_shape(lambda env: evaluate(e, env, fx), structs)
    except Exception as exc:  # noqa: BLE001 - any failure to lower an accepted program is a disagreement
        lines = [ln for ln in traceback.format_exception_only(type(exc), exc)[0].strip().splitlines() if ln.strip()]
        return lines[0][:300]
    t = e.type
    if isinstance(t, TensorType):
        got = (tuple(out.shape), name_of(out.dtype))
        if got != (t.shape, t.dtype):
            return f"result: checker {t.shape} {t.dtype}, JAX {got[0]} {got[1]}"
    elif isinstance(t, PlistType):
        for k, kt in t.entries:
            got = (tuple(out[k].shape), name_of(out[k].dtype))
            if got != (kt.shape, kt.dtype):
                return f"entry {k}: checker {kt.shape} {kt.dtype}, JAX {got}"
    return None


# --------------------------------------------------------------------------- JAX's own verdict


class DType(str):
    """A keyword such as `:f32` read as a dtype name; JAX is given the dtype it names, or the
    name itself when the language has no such dtype (`:float32`), so NumPy judges it."""


def _dt(d):
    return jnp.dtype(JAX_DTYPES.get(d, str(d)))


def _fold(f):
    """`+`, `*`, `and`, `or` take any number of operands (the language's n-ary form), folded with
    JAX's binary function; one operand is itself."""
    def call(*a, **kw):
        if not a:
            raise TypeError("no operands")
        out = jnp.asarray(a[0]) if len(a) == 1 else a[0]
        for x in a[1:]:
            out = f(out, x, **kw)
        return out
    return call


def _key(kw):
    key = jax.random.key(0)
    return jax.random.fold_in(key, kw.pop("salt")) if "salt" in kw else key


def _axes(kw):
    if "axes" in kw:
        a = kw.pop("axes")
        kw["axis"] = tuple(a) if isinstance(a, list) else a
    return kw


def _dtype_kw(kw, default):
    """`:dtype` as JAX's `dtype=` (the language's default when neither it nor a positional dtype is given)."""
    if "dtype" in kw:
        kw["dtype"] = _dt(kw["dtype"])
    elif default:
        kw["dtype"] = _dt(default)
    return kw


def _idx(i):
    return jnp.asarray(i) if isinstance(i, list) else i


#: Each op as a JAX user writes it: the jnp/lax/jax.nn/jax.random function, called with the
#: language's positional arguments and keywords (`:axes` is `axis=`, a dtype keyword is the dtype)
#: and the language's defaults (argmax along the last axis, take along axis 0...), and nothing
#: else: no conversion, no check. What this cannot trace or lower is what JAX refuses.
DIRECT: dict[str, Callable] = {
    "+": _fold(jnp.add), "*": _fold(jnp.multiply), "and": _fold(jnp.logical_and), "or": _fold(jnp.logical_or),
    "-": lambda *a, **k: jnp.negative(*a, **k) if len(a) == 1 else jnp.subtract(*a, **k),
    "/": jnp.true_divide, "mod": jnp.mod, "pow": jnp.power, "maximum": jnp.maximum, "minimum": jnp.minimum,
    "neg": jnp.negative, "abs": jnp.abs, "relu": jax.nn.relu, "exp": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt, "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "silu": jax.nn.silu,
    "gelu": lambda *a, **k: jax.nn.gelu(*a, approximate=True, **k),
    "=": jnp.equal, "!=": jnp.not_equal, "<": jnp.less, "<=": jnp.less_equal, ">": jnp.greater,
    ">=": jnp.greater_equal, "not": jnp.logical_not, "where": jnp.where,
    "sum": lambda x, **k: jnp.sum(x, **_axes(k)), "prod": lambda x, **k: jnp.prod(x, **_axes(k)),
    "max": lambda x, **k: jnp.max(x, **_axes(k)), "min": lambda x, **k: jnp.min(x, **_axes(k)),
    "mean": lambda x, **k: jnp.mean(x, **_axes(k)), "logsumexp": lambda x, **k: jax.nn.logsumexp(x, **_axes(k)),
    "argmax": lambda x, *, axis=-1, **k: jnp.argmax(x, axis=axis, **k),
    "argmin": lambda x, *, axis=-1, **k: jnp.argmin(x, axis=axis, **k),
    "reshape": lambda x, shape, /, **k: jnp.reshape(x, shape, **k),
    "transpose": lambda x, *perm, **k: jnp.transpose(x, *perm, **k),
    "concat": lambda xs, *, axis=0, **k: jnp.concatenate(xs, axis=axis, **k),
    "stack": lambda xs, *, axis=0, **k: jnp.stack(xs, axis=axis, **k),
    "expand-dims": lambda x, *, axis=0, **k: jnp.expand_dims(x, axis, **k),
    "squeeze": lambda x, **k: jnp.squeeze(x, **_axes(k)),
    "broadcast-to": lambda x, shape, /, **k: jnp.broadcast_to(x, shape, **k),
    "slice": lambda x, *, axis=0, start=None, end=None, **k: lax.slice_in_dim(x, start, end, axis=axis, **k),
    "take": lambda x, i, *, axis=0, **k: jnp.take(x, _idx(i), axis=axis, **k),
    "take-along-axis": lambda x, i, *, axis=-1, **k: jnp.take_along_axis(x, _idx(i), axis=axis, **k),
    "one-hot": lambda x, n, *, dtype=DType("f32"), **k: jax.nn.one_hot(x, n, dtype=_dt(dtype), **k),
    "iota": lambda shape, *, axis=0, dtype=DType("i32"), **k: lax.broadcasted_iota(_dt(dtype), shape, axis, **k),
    "zeros": lambda shape, *dt, **k: jnp.zeros(shape, *[_dt(d) for d in dt], **_dtype_kw(k, None if dt else "f32")),
    "ones": lambda shape, *dt, **k: jnp.ones(shape, *[_dt(d) for d in dt], **_dtype_kw(k, None if dt else "f32")),
    "full": lambda shape, v, *dt, **k: jnp.full(shape, v, *[_dt(d) for d in dt], **_dtype_kw(k, None)),
    "axis-size": lambda x, axis, /, **k: jnp.shape(x, **k)[axis],
    "size": jnp.size,
    "matmul": jnp.matmul, "einsum": jnp.einsum,
    "softmax": lambda x, *, axis=-1, **k: jax.nn.softmax(x, axis=axis, **k),
    "log-softmax": lambda x, *, axis=-1, **k: jax.nn.log_softmax(x, axis=axis, **k),
    "cross-entropy": optax.softmax_cross_entropy_with_integer_labels,
    "sort": lambda x, *, axis=-1, **k: jnp.sort(x, axis=axis, **k),
    "argsort": lambda x, *, axis=-1, **k: jnp.argsort(x, axis=axis, **k),
    "top-k": lambda *a, **k: dict(zip(("values", "indices"), lax.top_k(*a, **k))),   # a plist: a dict pytree
    "cast": lambda x, dtype, /, **k: jnp.asarray(x).astype(_dt(dtype), **k),
    "stop-gradient": lax.stop_gradient,
    "uniform": lambda shape, *, min=0.0, max=1.0, dtype=DType("f32"), **k:
        jax.random.uniform(_key(k), shape, _dt(dtype), min, max, **k),
    "normal": lambda shape, *, std=1.0, mean=0.0, dtype=DType("f32"), **k:
        jax.random.normal(_key(k), shape, _dt(dtype), **k) * std + mean,
    "categorical": lambda lg, *, temperature=None, **k:
        jax.random.categorical(_key(k), lg if temperature is None else lg / temperature, **k),
    "bernoulli": lambda p, **k: jax.random.bernoulli(_key(k), p, **k),
}


#: The ops the checker folds when every operand is a constant (`ops._fold`).
PYTHON_ARITHMETIC = {"+": lambda *a: sum(a), "*": lambda *a: functools.reduce(operator.mul, a),
                     "-": lambda a, b=None: -a if b is None else a - b, "/": operator.truediv, "mod": operator.mod}


def direct_eval(node, env, results=None):
    """Evaluate a syntax node with DIRECT: names from `env`, literals as Python numbers (weakly
    typed in JAX, as in the language), `[..]` as a Python list. Arguments are split into
    positional and keyword ones as the checker splits them (`check.Checker.split_args`). Each
    call's result is appended to `results`, so that every node is lowered, even one only
    `size` reads."""
    if isinstance(node, (Num, Str)):
        return node.value
    if isinstance(node, Kw):
        return DType(node.name)
    if isinstance(node, Sym):
        if node.name in ("true", "false"):
            return node.name == "true"
        return env[node.name]
    if isinstance(node, VecNode):
        return [direct_eval(i, env, results) for i in node.items]
    if isinstance(node, ListNode):
        fn = DIRECT[node.head]
        args, kw, items, i = [], {}, node.items[1:], 0
        while i < len(items):
            it = items[i]
            if isinstance(it, Kw) and it.name not in DTYPES and i + 1 < len(items):
                if it.name in kw:   # Python's verdict on f(axis=0, axis=1)
                    raise TypeError(f"keyword argument repeated: {it.name}")
                kw[it.name] = direct_eval(items[i + 1], env, results)
                i += 2
            else:
                args.append(direct_eval(it, env, results))
                i += 1
        out = None
        if node.head in PYTHON_ARITHMETIC and not kw and args and all(type(a) in (int, float) for a in args):
            try:   # constants: a JAX user computes them in Python (`2 * 3`), as the checker folds them
                out = PYTHON_ARITHMETIC[node.head](*args)
            except (ArithmeticError, TypeError):
                pass
        if out is None:
            out = fn(*args, **kw)
        if results is not None:
            results.append(out)
        return out
    raise TypeError(f"cannot evaluate {type(node).__name__}")


def jax_verdict(text: str, env_types) -> str | None:
    """None when JAX itself traces and lowers `text` (jax.jit(...).lower over abstract inputs of
    the names' types, every call's result an output), else JAX's error, first line."""
    form = parse(SourceText(text)).forms[0]
    structs = {k: jax.ShapeDtypeStruct(t.shape, jdt(t.dtype)) for k, t in env_types.items()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jax.jit(lambda env: (lambda rs: (direct_eval(form, env, rs), rs)[1])([])).lower(structs)
    except Exception as exc:  # noqa: BLE001 - any failure is JAX's verdict "cannot lower"
        msg = str(exc).strip()
        return f"{type(exc).__name__}: {msg.splitlines()[0][:200] if msg else ''}"
    return None


# --------------------------------------------------------------------------- ill-typed programs


NUMERIC = ["f32", "bf16", "i32", "i64"]
FLOATS = ["f32", "bf16"]
INTS = ["i32", "i64"]
BAD_DTYPES = ["f64", "int32", "float", "u8", "x"]


class Builder:
    """Names bound to chosen types, for one program; `t` returns a name, sometimes wrapped in a
    type-preserving op, so the faulty call's operands are themselves compositions."""

    def __init__(self, rng: random.Random):
        self.rng, self.env = rng, {}

    def t(self, shape, dtype, wrap=True) -> str:
        name = "abcdefghijklmnopqrstuvwxyz"[len(self.env)]
        self.env[name] = TensorType(tuple(shape), dtype)
        r = self.rng.random() if wrap else 1.0
        if r < 0.15:
            return f"(stop-gradient {name})"
        if r < 0.25 and len(shape) >= 1:
            return f"(reshape {name} [{' '.join(map(str, shape))}])"
        if r < 0.32 and dtype != "bool":
            return f"(cast {name} :{dtype})"
        return name

    def shape(self, lo=0, hi=3):
        """Sizes 2 to 4, now and then 0 (an empty tensor)."""
        return tuple(self.rng.choice([2, 3, 4] * 10 + [0]) for _ in range(self.rng.randint(lo, hi)))

    def partner(self, s):
        """A shape that broadcasts with `s`."""
        k = self.rng.randint(0, len(s))
        return tuple(1 if self.rng.random() < 0.3 else d for d in s[len(s) - k:])

    def clash(self, s):
        """A shape that does not broadcast with `s` (rank >= 1)."""
        k = self.rng.randint(1, len(s))
        out = list(s[len(s) - k:])
        j = self.rng.randrange(len(out))
        out[j] = {0: 2, 4: 5}.get(out[j], out[j] + 1)
        return tuple(out)

    def pick(self, xs):
        return self.rng.choice(xs)


def _vec(dims) -> str:
    return "[" + " ".join(map(str, dims)) + "]"


def _bad_axis(rng, rank: int) -> int:
    return rng.choice([rank, rank + 1, -rank - 1])


def _axis_kw(b: Builder, fault: str | None, rank: int, *, name="axis") -> list[str]:
    """`:axis` (or `:axes`) for an op over `rank` axes, right, or wrong the way `fault` says."""
    rng = b.rng
    if fault == "axis-out-of-range":
        v = _bad_axis(rng, rank)
        return [f":{name} " + (f"[{v}]" if name == "axes" else str(v))]
    if fault == "axis-not-constant":
        return [f":{name} " + b.t((), "i32", wrap=False)]
    if fault == "axis-float":
        return [f":{name} 1.5"]
    if fault == "axes-repeated" and name == "axes" and rank:
        a = rng.randrange(rank)
        return [f":axes [{a} {a - rank}]"]
    if rank == 0 or rng.random() < 0.4:
        return []
    if name == "axes":
        return [f":axes [{' '.join(str(a) for a in sorted(rng.sample(range(rank), rng.randint(1, rank))))}]"]
    return [f":axis {rng.randint(-rank, rank - 1)}"]


AXIS_FAULTS = ["axis-out-of-range", "axis-not-constant", "axis-float"]


def _elementwise(b: Builder, op: str, fault):
    n = {"+": 2, "*": 2, "-": 2, "and": 2, "or": 2, "not": 1, "where": 3}.get(op, REGISTRY[op].min_args)
    s = b.shape()
    logic, compare = op in ("and", "or", "not"), op in ("=", "!=", "<", "<=", ">", ">=")
    dts = ["bool"] if logic else (NUMERIC + ["bool"] if compare else NUMERIC)
    dt = b.pick(dts)
    shapes = [s] + [b.partner(s) for _ in range(n - 1)]
    dtypes = [dt] * n
    if op == "where":
        dtypes[0] = "bool"
        dtypes[1:] = [b.pick(NUMERIC), b.pick(NUMERIC)]
    if fault == "shapes-clash" and s and n > 1:
        shapes[b.rng.randrange(1, n)] = b.clash(s)
    elif fault == "bool-operand":
        dtypes[b.rng.randrange(n)] = "bool"
    elif fault == "not-bool" :
        dtypes[0] = b.pick(NUMERIC)
    elif fault == "int-operand":
        dtypes[b.rng.randrange(n)] = b.pick(INTS)
    args = [b.t(sh, d) for sh, d in zip(shapes, dtypes)]
    if fault == "literal-operand":
        args[b.rng.randrange(n)] = b.pick(["2", "-1.5", "true", "2147483648", "-2147483649"])
    if fault == "negative-power":
        args[1] = b.pick(["-1", "-2"])
    return args, []


def _reduction(b: Builder, op: str, fault):
    arg = op in ("argmax", "argmin")
    s = b.shape(0 if not arg else 1, 3) if fault != "scalar" else ()
    if fault == "empty-axis":
        s = (0,) + b.shape(0, 2)
        return [b.t(s, b.pick(NUMERIC))], [":axis 0" if arg else ":axes [0]"]
    x = b.t(s, b.pick(NUMERIC if fault != "bool-operand" else ["bool"]))
    kws = _axis_kw(b, fault, len(s), name="axis" if arg else "axes")
    if fault == "keepdims-not-bool":
        kws.append(f":keepdims {b.pick(['1', '0.5', b.t((), 'bool', wrap=False)])}")
    elif b.rng.random() < 0.3:
        kws.append(f":keepdims {b.pick(['true', 'false'])}")
    return [x], kws


def _unary_network(b: Builder, op: str, fault):
    s = b.shape(1, 3) if fault != "scalar" else ()
    dt = "bool" if fault == "bool-operand" else b.pick(NUMERIC)
    return [b.t(s, dt)], _axis_kw(b, fault, len(s))


def _sortish(b: Builder, op: str, fault):
    args, kws = _unary_network(b, op, fault)
    if fault == "keepdims-not-bool":
        kws.append(f":descending {b.pick(['1', '0.5'])}")
    return args, kws


def _shape_op(b: Builder, op: str, fault):
    rng = b.rng
    s = b.shape(1, 3) if fault != "scalar" else ()
    r = len(s)
    dt = b.pick(NUMERIC + ["bool"])
    if op == "reshape":
        x = b.t(s, dt)
        n = 1
        for d in s:
            n *= d
        if fault == "size-mismatch":
            return [x, _vec((n + 1,))], []
        if fault == "two-wildcards":
            return [x, "[-1 -1]"], []
        if fault == "negative-size":
            return [x, _vec((-n,))], []
        if fault == "not-constant":
            return [x, b.t((1,), "i32", wrap=False)], []
        return [x, rng.choice([_vec(s[::-1]), "[-1]", _vec((n,))])], []
    if op == "transpose":
        x = b.t(s, dt)
        perm = list(range(r))
        rng.shuffle(perm)
        if fault == "not-a-permutation":
            perm = perm[:-1] if rng.random() < 0.5 else perm + [0]
        elif fault == "axis-out-of-range":
            perm[0] = _bad_axis(rng, r)
        return ([x, _vec(perm)] if rng.random() < 0.8 or fault else [x]), []
    if op in ("concat", "stack"):
        k = rng.randint(1, 3)
        shapes = [s] * k
        ax = rng.randrange(r + (op == "stack")) if r + (op == "stack") else 0
        if op == "concat" and r:
            shapes = [s[:ax] + (rng.choice([1, 2, 3]),) + s[ax + 1:] for _ in range(k)]
        if fault == "shapes-clash":
            shapes = shapes[:1] + [b.clash(shapes[0]) if rng.random() < 0.5 else shapes[0] + (2,)]
        if fault == "empty":
            return ["[]"], []
        if fault == "not-a-vector":
            return [b.t(s, dt)], []
        items = [b.t(sh, b.pick(NUMERIC) if rng.random() < 0.3 else dt) for sh in shapes]
        kws = _axis_kw(b, fault, r + (op == "stack")) if fault in AXIS_FAULTS else [f":axis {ax}"]
        return ["[" + " ".join(items) + "]"], kws
    if op == "expand-dims":
        return [b.t(s, dt)], _axis_kw(b, fault, r + 1)
    if op == "squeeze":
        j = rng.randrange(r + 1)
        s1 = s[:j] + (1,) + s[j:]
        x = b.t(s1, dt)
        if fault == "not-size-one" and r:
            k = rng.choice([k for k, d in enumerate(s1) if d != 1])
            return [x], [f":axes [{k}]"]
        if fault in AXIS_FAULTS + ["axes-repeated"]:
            return [x], _axis_kw(b, fault, r + 1, name="axes")
        return [x], ([f":axes [{j}]"] if rng.random() < 0.6 else [])
    if op == "broadcast-to":
        p = b.partner(s)
        x = b.t(p, dt)
        if fault == "shapes-clash":
            return [b.t(b.clash(s), dt)], []
        if fault == "negative-size":
            return [x, _vec(s[:-1] + (-1,))], []
        if fault == "not-constant":
            return [x, b.t((r,), "i32", wrap=False)], []
        if fault == "rank-down" and p:
            return [b.t(s + (2,), dt), _vec(s)], []
        return [x, _vec(s)], []
    if op == "slice":
        ax = rng.randrange(r) if r else 0
        n = s[ax] if r else 0
        start, end = rng.randint(0, n), None
        end = rng.randint(start, n)
        if fault == "out-of-range":
            start, end = rng.choice([(0, n + 1), (n, n + 2), (-n - 1, n), (2, 1)])
        kws = _axis_kw(b, fault, r) if fault in AXIS_FAULTS else [f":axis {ax}"]
        if fault == "not-constant":
            kws.append(":start " + b.t((), "i32", wrap=False))
        else:
            kws += [f":start {start}", f":end {end}"]
        return [b.t(s, dt)], kws
    if op in ("take", "take-along-axis"):
        x = b.t(s, dt)
        ax = rng.randrange(r) if r else 0
        along = op == "take-along-axis"
        ishape = tuple(d if k != ax else rng.choice([1, 2, 3]) for k, d in enumerate(s)) if along else b.shape(0, 2)
        idt = b.pick(INTS)
        if fault == "float-indices":
            idt = b.pick(FLOATS + ["bool"])
        if fault == "rank-mismatch":
            ishape = ishape + (2,)
        if fault == "shapes-clash" and along and r > 1:
            k = rng.choice([k for k in range(r) if k != ax])
            ishape = ishape[:k] + (ishape[k] + 1,) + ishape[k + 1:]
        idx = b.t(ishape, idt)
        if fault == "static-index-out-of-range" and not along and r:
            idx = _vec([0, s[ax] + rng.randint(0, 2)])
        elif not along and rng.random() < 0.3 and r and s[ax]:
            idx = _vec([rng.randrange(s[ax]) for _ in range(rng.randint(1, 3))])
        kws = _axis_kw(b, fault, r) if fault in AXIS_FAULTS else [f":axis {ax}"]
        return [x, idx], kws
    if op == "one-hot":
        idt = b.pick(FLOATS) if fault == "float-indices" else b.pick(INTS)
        n = {"zero-size": 0, "negative-size": -2}.get(fault, rng.randint(1, 5))
        kws = [f":dtype :{b.pick(BAD_DTYPES)}"] if fault == "bad-dtype" else ([f":dtype :{b.pick(NUMERIC)}"] if rng.random() < 0.3 else [])
        nn = b.t((), "i32", wrap=False) if fault == "not-constant" else str(n)
        return [b.t(b.shape(0, 2), idt), nn], kws
    if op in ("iota", "zeros", "ones", "full", "uniform", "normal"):
        dims = list(b.shape(0 if op not in ("iota",) else 1, 3))
        if fault == "negative-size" and dims:
            dims[rng.randrange(len(dims))] = rng.choice([-1, -2])
        shape = _vec(dims) if fault != "not-constant" else b.t((max(len(dims), 1),), "i32", wrap=False)
        args, kws = [shape], []
        if op == "full":
            vs = () if fault != "not-scalar" else b.shape(1, 2)
            args.append(b.t(vs, b.pick(NUMERIC)) if rng.random() < 0.7 else b.pick(["2", "0.5"]))
        if op == "iota":
            kws += _axis_kw(b, fault, len(dims)) if fault in AXIS_FAULTS else []
        dtypes = FLOATS if op in ("uniform", "normal") else NUMERIC + ["bool"]
        if fault == "bad-dtype":
            dtypes = BAD_DTYPES
        if fault == "int-dtype":
            dtypes = INTS + ["bool"]
        if rng.random() < 0.5 or fault in ("bad-dtype", "int-dtype"):
            d = b.pick(dtypes)
            if op in ("zeros", "ones", "full") and rng.random() < 0.5:
                args.append(f":{d}")
            else:
                kws.append(f":dtype :{d}")
        if op in ("uniform", "normal"):
            kws += _salt(b, fault)
            if fault == "param-not-constant":
                kws.append(f":{b.pick(['min', 'max'] if op == 'uniform' else ['std', 'mean'])} " + b.t((), "f32", wrap=False))
        return args, kws
    if op == "axis-size":
        x = b.t(s, dt)
        if fault == "axis-out-of-range":
            return [x, str(_bad_axis(rng, r))], []
        if fault == "axis-not-constant":
            return [x, b.t((), "i32", wrap=False)], []
        return [x, str(rng.randint(-r, r - 1) if r else 0)], []
    if op == "size":
        return [b.t(s, dt)], []
    raise KeyError(op)


def _salt(b: Builder, fault) -> list[str]:
    if fault == "salt-float":
        return [f":salt {b.pick(['0.5', b.t((), 'f32', wrap=False)])}"]
    if fault == "salt-not-scalar":
        return [":salt " + b.t((2,), "i32", wrap=False)]
    return [f":salt {b.pick(['1', b.t((), 'i32', wrap=False)])}"] if b.rng.random() < 0.8 else []


def _linalg(b: Builder, op: str, fault):
    rng = b.rng
    m, k, n = (rng.choice([2, 3, 4]) for _ in range(3))
    dt = [b.pick(NUMERIC), b.pick(NUMERIC)]
    if op == "matmul":
        batch = b.shape(0, 1)
        sa, sb = batch + (m, k), (k, n)
        if rng.random() < 0.2:
            sa = (k,)
        if rng.random() < 0.2:
            sb = (k,)
        if fault == "inner-mismatch":
            sb = (k + 1,) + sb[1:]
        elif fault == "scalar":
            sa = ()
        elif fault == "shapes-clash":
            sa, sb = (2, m, k), (3, k, n)
        return [b.t(sa, dt[0]), b.t(sb, dt[1])], []
    # einsum
    spec, shapes = rng.choice([("ij,jk->ik", [(m, k), (k, n)]), ("ij->ji", [(m, k)]), ("i,i->", [(k,), (k,)]),
                               ("bij,bjk->bik", [(2, m, k), (2, k, n)]), ("ij->", [(m, k)])])
    if fault == "operand-count":
        shapes = shapes + [shapes[0]] if rng.random() < 0.5 else shapes[:-1]
    elif fault == "rank-mismatch":
        shapes = [shapes[0] + (2,)] + shapes[1:]
    elif fault == "shapes-clash" and "," in spec:
        shapes = [shapes[0], tuple(d + 1 if d != 2 else 5 for d in shapes[1])]
    elif fault == "bad-output":
        spec = spec.split("->")[0] + "->" + rng.choice(["z", "iz", "ii"])
    elif fault == "implicit-output":
        spec = spec.split("->")[0]
    elif fault == "ellipsis":
        spec = "..." + spec.replace(",", ",...").replace("->", "->...")
    elif fault == "not-a-string":
        return [":ij"] + [b.t(s, b.pick(NUMERIC)) for s in shapes], []
    return [f'"{spec}"'] + [b.t(s, b.pick(NUMERIC)) for s in shapes], []


def _network(b: Builder, op: str, fault):
    rng = b.rng
    if op in ("softmax", "log-softmax"):
        return _unary_network(b, op, fault)
    if op == "cross-entropy":
        lead = b.shape(0, 2)
        v = rng.choice([2, 3, 4])
        lg_dt, lb_dt = b.pick(FLOATS), b.pick(INTS)
        lg, lb = lead + (v,), lead
        if fault == "int-operand":
            lg_dt = b.pick(INTS)
        elif fault == "float-indices":
            lb_dt = b.pick(FLOATS)
        elif fault == "shapes-clash":
            lb = lead + (v,) if rng.random() < 0.5 else (lead[:-1] + (lead[-1] + 1,) if lead else (2,))
        elif fault == "scalar":
            lg = ()
        return [b.t(lg, lg_dt), b.t(lb, lb_dt)], []
    raise KeyError(op)


def _selection(b: Builder, op: str, fault):
    rng = b.rng
    if op in ("sort", "argsort"):
        return _sortish(b, op, fault)
    s = b.shape(1, 3) if fault != "scalar" else ()
    k = rng.randint(1, s[-1]) if s and s[-1] else 1
    if fault == "k-out-of-range":
        k = rng.choice([0, -1, (s[-1] if s else 0) + 1])
    kk = b.t((), "i32", wrap=False) if fault == "not-constant" else str(k)
    return [b.t(s, b.pick(NUMERIC)), kk], []


def _misc(b: Builder, op: str, fault):
    rng = b.rng
    s = b.shape()
    if op == "cast":
        d = b.pick(BAD_DTYPES) if fault == "bad-dtype" else b.pick(NUMERIC + ["bool"])
        return [b.t(s, b.pick(NUMERIC + ["bool"])), f":{d}" if fault != "not-a-dtype" else "1"], []
    if op == "stop-gradient":
        if fault == "plist-operand":
            return [f"(top-k {b.t((3,), 'f32')} 2)"], []
        return [b.t(s, b.pick(NUMERIC + ["bool"]))], []
    if op == "categorical":
        lg = b.shape(1, 3) if fault != "scalar" else ()
        if fault == "empty-axis":
            lg = b.shape(0, 2) + (0,)
        dt = b.pick(INTS + ["bool"]) if fault == "int-operand" else b.pick(FLOATS)
        kws = _salt(b, fault)
        if fault == "temperature-not-scalar":
            kws.append(":temperature " + b.t((2,), "f32", wrap=False))
        elif rng.random() < 0.3:
            kws.append(":temperature 0.5")
        return [b.t(lg, dt)], kws
    if op == "bernoulli":
        p = b.pick(["1", "0", b.t(s, b.pick(INTS + ["bool"]))]) if fault == "int-operand" else b.t(s, b.pick(FLOATS))
        return [p], _salt(b, fault)
    raise KeyError(op)


#: Each op's family: the template that builds a well-typed call of it and the faults that make it
#: ill-typed (besides the ones every op gets: GENERIC_FAULTS).
FAMILIES = {
    "elementwise": (_elementwise, None),   # by arity and kind: elementwise_faults
    "reduction": (_reduction, AXIS_FAULTS + ["axes-repeated", "keepdims-not-bool", "scalar", "bool-operand", "empty-axis"]),
    "shape": (_shape_op, None),   # per op: OP_FAULTS
    "linalg": (_linalg, ["inner-mismatch", "scalar", "shapes-clash", "operand-count", "rank-mismatch", "bad-output",
                         "implicit-output", "ellipsis", "not-a-string"]),
    "network": (_network, AXIS_FAULTS + ["scalar", "bool-operand", "int-operand", "float-indices", "shapes-clash"]),
    "selection": (_selection, AXIS_FAULTS + ["scalar", "k-out-of-range", "not-constant", "keepdims-not-bool",
                                             "bool-operand"]),
    "misc": (_misc, None),    # per op: OP_FAULTS
}
#: The faults of each op of the families whose ops differ too much to share a list (the draws
#: `uniform` and `normal` use the shape ops' template).
OP_FAULTS = {
    "cast": ["bad-dtype", "not-a-dtype"],
    "stop-gradient": ["plist-operand"],
    "categorical": ["scalar", "int-operand", "temperature-not-scalar", "salt-float", "salt-not-scalar", "empty-axis"],
    "bernoulli": ["int-operand", "salt-float", "salt-not-scalar"],
    "reshape": ["size-mismatch", "two-wildcards", "negative-size", "not-constant"],
    "transpose": ["not-a-permutation", "axis-out-of-range"],
    "concat": AXIS_FAULTS + ["shapes-clash", "empty", "not-a-vector", "scalar"],
    "stack": AXIS_FAULTS + ["shapes-clash", "empty", "not-a-vector"],
    "expand-dims": AXIS_FAULTS,
    "squeeze": AXIS_FAULTS + ["axes-repeated", "not-size-one"],
    "broadcast-to": ["shapes-clash", "negative-size", "not-constant", "rank-down"],
    "slice": AXIS_FAULTS + ["out-of-range", "not-constant", "scalar"],
    "take": AXIS_FAULTS + ["float-indices", "static-index-out-of-range", "scalar"],
    "take-along-axis": AXIS_FAULTS + ["float-indices", "rank-mismatch", "shapes-clash", "scalar"],
    "one-hot": ["float-indices", "zero-size", "negative-size", "bad-dtype", "not-constant"],
    "iota": AXIS_FAULTS + ["negative-size", "bad-dtype", "not-constant", "int-dtype"],
    "zeros": ["negative-size", "bad-dtype", "not-constant"],
    "ones": ["negative-size", "bad-dtype", "not-constant"],
    "full": ["negative-size", "bad-dtype", "not-constant", "not-scalar"],
    "uniform": ["negative-size", "bad-dtype", "not-constant", "param-not-constant", "int-dtype", "salt-float",
                "salt-not-scalar"],
    "normal": ["negative-size", "bad-dtype", "not-constant", "param-not-constant", "int-dtype", "salt-float",
               "salt-not-scalar"],
    "axis-size": ["axis-out-of-range", "axis-not-constant", "scalar"],
    "size": ["scalar"],
}
GENERIC_FAULTS = ["too-few-arguments", "too-many-arguments", "unknown-keyword", "string-operand", "vector-operand"]


def elementwise_faults(op: str) -> list[str]:
    if op in ("and", "or", "not", "where"):
        return ["shapes-clash", "not-bool", "int-operand", "literal-operand"][op == "not":]
    if op in ("=", "!=", "<", "<=", ">", ">="):
        return ["shapes-clash", "literal-operand"]
    if REGISTRY[op].min_args == 1 and op not in ("+", "*", "-"):
        return ["bool-operand", "literal-operand"]
    return ["shapes-clash", "bool-operand", "literal-operand"] + (["negative-power"] if op == "pow" else [])


def family_of(op: str) -> str:
    spec = REGISTRY[op]
    if op in ("cast", "stop-gradient", "categorical", "bernoulli"):
        return "misc"
    if op in ("uniform", "normal"):
        return "shape"
    if spec.family == "tensor":
        return "elementwise"
    return spec.family


def ill_typed(rng: random.Random, op: str | None = None) -> tuple[str, dict, str, str]:
    """A call of `op` (random when None) with one fault: (text, names' types, op, fault).

    The fault is one of the op's family's (a clash of shapes, a bool operand, an axis out of
    range...) or a generic one (arity, an unknown keyword, a string or vector for a tensor); some faults
    do not apply to every op of a family, and those programs come out well-typed, which the
    benchmark counts as accepted.
    """
    op = op or rng.choice(sorted(REGISTRY))
    template, faults = FAMILIES[family_of(op)]
    faults = faults or (elementwise_faults(op) if template is _elementwise else OP_FAULTS[op])
    fault = rng.choice(faults + GENERIC_FAULTS)
    b = Builder(rng)
    args, kws = template(b, op, None if fault in GENERIC_FAULTS else fault)
    spec = REGISTRY[op]
    if fault == "too-few-arguments":
        args = args[:max(spec.min_args - 1, 0)] if spec.min_args else args
    elif fault == "too-many-arguments":
        args = args + [args[-1]] * ((spec.max_args or len(args)) + 1 - len(args)) if spec.max_args is not None else args
    elif fault == "unknown-keyword":
        kws = kws + [rng.choice([":bogus 1", ":salt 1", ":dtype :f32", ":axis 0", ":keepdims true"])]
    elif fault == "string-operand" and args:
        args = ['"x"'] + args[1:]
    elif fault == "vector-operand" and args:
        args = [rng.choice(["[0 1]", "[2]", "[]"])] + args[1:]
    text = "(" + " ".join([op] + args + kws) + ")"
    if rng.random() < 0.3 and op != "top-k":
        text = rng.choice(["(stop-gradient {})", "(expand-dims {} :axis 0)", "(size {})"]).format(text)
    return text, b.env, op, fault


# --------------------------------------------------------------------------- where the checker differs from JAX by design


@dataclass(frozen=True)
class Rule:
    """A deliberate difference from JAX: `name`; for a strict rule the diagnostic `code` and a
    `pattern` of its message, for a lenient one a `pattern` of JAX's error; why; and an example
    (text and names' types, written `name:[dims]dtype`) that the test checks shows the difference."""

    name: str
    code: str | None
    pattern: str
    reason: str
    example: str
    names: str = ""


#: The checker rejects, JAX traces and lowers: the language is stricter by design. Listed in
#: docs/language.md ("Where the checker is stricter than JAX"); tests/test_differential.py checks
#: that each example is rejected with the rule's code and that JAX lowers it.
STRICT = [
    Rule("bool-arithmetic", "E-TYPE-002", r"needs numbers, got bool",
         "JAX computes with bool as 0 and 1 (`jnp.add` of two masks is their `or`, `jnp.exp(True)` is e, "
         "`softmax` of a mask is not refused everywhere); in a run file that is a missing comparison or `cast`",
         "(+ m m)", "m:[4]bool"),
    Rule("logic-needs-bool", "E-TYPE-002", r"^`(and|or|not)` needs bool operands",
         "`jnp.logical_and`/`or`/`not` read any number as a truth value (nonzero is true); the language asks "
         "for a comparison, so a float or integer tensor is not taken for a mask", "(not x)", "x:[4]f32"),
    Rule("where-needs-bool", "E-TYPE-002", r"^`where` needs a bool condition",
         "`jnp.where` treats a nonzero number as true; the condition must be a comparison",
         "(where (- i 1) x 0)", "i:[4]i32 x:[4]f32"),
    Rule("integer-indices", "E-TYPE-002", r"needs integer indices",
         "`jax.nn.one_hot` compares float indices with `arange` (2.5 gives a row of zeros), `jnp.take` "
         "takes bool indices as 0 and 1; indices must be i32 or i64", "(one-hot x 4)", "x:[2]f32"),
    Rule("float-logits", "E-TYPE-002", r"^`categorical` needs float logits",
         "`jax.random.categorical` refuses bool logits, but divided by a `:temperature` they are floats (0 and 2) "
         "and JAX draws from them; the logits must be float whatever the temperature",
         "(categorical m :salt 1 :temperature 0.5)", "m:[2 3]bool"),
    Rule("integer-salt", "E-TYPE-002", r"`:salt` must be an integer scalar",
         "`jax.random.fold_in` converts a float salt to an integer (0.5 and 0 give the same bits)",
         "(uniform [2] :salt 0.5)"),
    Rule("boolean-flags", "E-TYPE-003", r"must be `true` or `false`",
         "JAX reads `keepdims` and `descending` as Python truth values (1, 0.5); the language takes `true` or `false`",
         "(sum x :keepdims 1)", "x:[2 3]f32"),
    Rule("dtype-names", "E-TYPE-002", r"needs a dtype, one of",
         "a dtype is one of the language's six (`bool i32 i64 f16 bf16 f32`); NumPy's names are refused even "
         "where JAX takes them (`:float32`; `:float` is float64 in NumPy), with a suggestion",
         "(cast x :float32)", "x:[2]i32"),
    Rule("full-scalar-value", "E-SHAPE-005", r"^`full` needs a scalar value",
         "`jnp.full` broadcasts a tensor value to the shape; the language keeps that for `broadcast-to`",
         "(full [2 3] v)", "v:[3]f32"),
    Rule("non-empty-selection", None, r"^`top-k`: k = 0 |^`one-hot` needs 1 or more classes, got 0",
         "`lax.top_k(x, 0)` and `jax.nn.one_hot(i, 0)` give empty tensors; selecting nothing is taken for a mistake",
         "(top-k x 0)", "x:[4]f32"),
    Rule("stop-gradient-of-a-tensor", "E-TYPE-001", r"^`stop-gradient` needs a tensor",
         "`lax.stop_gradient` maps over any pytree; in the language ops take tensors, so a plist's entries are "
         "stopped one by one", "(stop-gradient (top-k x 2))", "x:[4]f32"),
    Rule("explicit-einsum-output", "E-FORM-002", r"need an explicit `->` output",
         "`jnp.einsum` without `->` outputs the letters that appear once, in alphabetical order, which hides "
         "the summed axes", '(einsum "ij,jk" a b)', "a:[2 3]f32 b:[3 4]f32"),
    Rule("no-einsum-ellipsis", "E-FORM-002", r"name every axis with a letter",
         "`jnp.einsum` reads `...` as the axes a subscript does not name; the language names every axis, so each "
         "operand's rank is checked", '(einsum "...j->j" x)', "x:[2 3]f32"),
    Rule("einsum-equal-sizes", "E-SHAPE-005", r"^`einsum`: axis '.' has sizes (1 and \d+|\d+ and 1)$",
         "`jnp.einsum` broadcasts a letter's size-1 axis against a larger one; in the language a letter names one "
         "size (`broadcast-to` first)", '(einsum "ij,jk->ik" a b)', "a:[2 1]f32 b:[3 4]f32"),
    Rule("exact-label-shape", "E-SHAPE-005", r"^`cross-entropy`: logits \[[\d ]*\] need labels",
         "optax's cross-entropy broadcasts labels against the logits' leading axes (labels `[1]` for logits "
         "`[3 4]`); the labels must have exactly the logits' leading shape", "(cross-entropy x l)", "x:[3 4]f32 l:[1]i32"),
    Rule("tensor-operands", "E-TYPE-001", r"needs a tensor here, got (string|\[[-\d ]*\] shape|\(:)|needs a vector of tensors like",
         "NumPy takes a string, a list or a dict for an array (`jnp.size(\"x\")` is 1, `jnp.asarray([0 1])`), and "
         "`jnp.stack`/`jnp.concatenate` iterate over a tensor's first axis; in the language `[0 1]` is a constant "
         "shape or list of axes, an op wants a tensor, and `stack` and `concat` a vector `[a b]`",
         "(stack x)", "x:[2 3]f32"),
    Rule("constant-draw-parameters", "E-TYPE-003", r"^`:(min|max|std|mean)` of `(uniform|normal)` must be a compile-time",
         "`jax.random.uniform` and `normal` take traced bounds; in the language a draw's distribution is fixed when "
         "the file is checked (scale a draw by a tensor instead: `(* s (normal [2] :salt 1))`)",
         "(uniform [2] :min s :salt 1)", "s:[]f32"),
    Rule("scalar-temperature", "E-SHAPE-005", r"^`:temperature` must be a scalar",
         "dividing the logits by a tensor broadcasts in JAX; a draw's temperature is one number",
         "(categorical x :salt 1 :temperature t)", "x:[2 3]f32 t:[3]f32"),
    Rule("integer-constants", "E-TYPE-003", r"needs a compile-time integer here, got \[\] (f|bf)",
         "`lax.broadcasted_iota` truncates a float dimension (1.5 is axis 1); an axis, a count or a size is an "
         "integer", "(iota [2 3] :axis 1.5)"),
    Rule("i32-literals", "E-TYPE-002", r"does not fit in i32, the dtype of an integer literal",
         "an integer literal is an i32 in the language; JAX wraps a bigger one silently when it meets an i32 "
         "(`x + 2147483648` is `x - 2147483648`) and makes an i64 of it alone", "(+ i 2147483648)", "i:[2]i32"),
    Rule("signature-keywords", "E-NAME-003", r"has no keyword",
         "an op takes the keywords its signature lists, even where the JAX function behind it takes more "
         "(`jnp.sum(x, axis=0)`: the language spells it `:axes`, and says so)", "(sum x :axis 0)", "x:[2 3]f32"),
    Rule("static-index-range", "E-SHAPE-003", r"^`take`: index .* is outside",
         "`jnp.take` fills (or clamps) an index out of range; a constant index known to be out of range is a mistake",
         "(take x [0 5])", "x:[4]f32"),
]

#: The checker accepts and the runtime lowers, but the JAX function a user would call refuses: the
#: language defines the conversion. Matched on JAX's error.
LENIENT = [
    Rule("integers-to-float", None, r"does not accept dtype int",
         "float-only ops (`sigmoid`, `silu`, `rsqrt`, `softmax`...) turn integers into f32, as `jnp.exp` does; "
         "`jax.nn.sigmoid`, `jax.nn.silu` and `lax.rsqrt` refuse integers", "(sigmoid i)", "i:[4]i32"),
    Rule("integer-as-vector", None, r"'int' object is not iterable",
         "where a vector of sizes or axes is expected, one integer counts as a vector of one (`(transpose x 0)` is "
         "`(transpose x [0])`); `jnp.transpose` wants a sequence", "(transpose x 0)", "x:[2]f32"),
    Rule("negative-axis", None, r"iota dimension must be between",
         "a negative axis counts from the end in every op; `lax.broadcasted_iota` takes only 0 to rank - 1",
         "(iota [2 3] :axis -1)"),
]


def names_of(spec: str) -> dict[str, TensorType]:
    """`"a:[2 3]f32 b:[]i32"` as names' types."""
    return {name: TensorType(tuple(int(d) for d in dims.split()), dtype)
            for name, dims, dtype in re.findall(r"([\w-]+):\[([-\d ]*)\](\w+)", spec)}


def strict_rule(errors) -> str | None:
    """The strict rule that explains every error of a rejected program JAX lowers, or None."""
    names = []
    for d in errors:
        rule = next((r for r in STRICT if (r.code is None or r.code == d.code) and re.search(r.pattern, d.message)), None)
        if rule is None:
            return None
        names.append(rule.name)
    return names[0] if names else None


def lenient_rule(jax_error: str) -> str | None:
    return next((r.name for r in LENIENT if re.search(r.pattern, jax_error)), None)


# --------------------------------------------------------------------------- both directions


@dataclass
class Tally:
    """Counts of one run: the well-typed direction (programs the checker accepts) and the
    ill-typed one (programs it rejects), and every unexplained disagreement."""

    programs: int = 0
    accepted: int = 0
    runtime_fails: int = 0
    accepted_jax_agrees: int = 0
    lenient: Counter = field(default_factory=Counter)
    rejected: int = 0
    rejected_jax_refuses: int = 0
    strict: Counter = field(default_factory=Counter)
    covered: Counter = field(default_factory=Counter)
    disagreements: list = field(default_factory=list)

    def judge(self, text: str, env, source: str) -> str:
        """Check `text`, then ask the runtime (accepted) and JAX itself (both); returns the verdict."""
        self.programs += 1
        try:
            e, diags = check_expression(text, env)
        except Exception as exc:  # noqa: BLE001 - the checker must never raise
            self.disagreements.append((text, env, f"checker raised {type(exc).__name__}: {exc}"))
            return "unexplained"
        errors = [d for d in diags if d.is_error]
        verdict = jax_verdict(text, env)
        if e is None or errors:
            self.rejected += 1
            if source:
                self.covered[source] += 1
            if verdict is not None:
                self.rejected_jax_refuses += 1
                return "agree"
            rule = strict_rule(errors)
            if rule is None:
                self.disagreements.append((text, env, "rejected ("
                                           + "; ".join(f"{d.code} {d.message}" for d in errors) + "), JAX lowers it"))
                return "unexplained"
            self.strict[rule] += 1
            return f"strict:{rule}"
        self.accepted += 1
        why = lower(e, env)
        if why:
            self.runtime_fails += 1
            self.disagreements.append((text, env, f"accepted, the runtime disagrees: {why}"))
            return "unexplained"
        if verdict is None:
            self.accepted_jax_agrees += 1
            return "agree"
        rule = lenient_rule(verdict)
        if rule is None:
            self.disagreements.append((text, env, f"accepted, JAX refuses: {verdict}"))
            return "unexplained"
        self.lenient[rule] += 1
        return f"lenient:{rule}"

    def report(self) -> str:
        lines = [f"well-typed direction: {self.accepted} programs the checker accepts",
                 f"  the runtime lowers it, JAX's type at every node: {self.accepted - self.runtime_fails}",
                 f"  JAX's own functions lower it too (agree): {self.accepted_jax_agrees}"]
        lines += [f"  intentional-lenient {k}: {n}" for k, n in sorted(self.lenient.items())]
        lines += [f"ill-typed direction: {self.rejected} programs the checker rejects",
                  f"  JAX refuses it too (agree): {self.rejected_jax_refuses}"]
        lines += [f"  intentional-strict {k}: {n}" for k, n in sorted(self.strict.items())]
        lines.append(f"unexplained disagreements: {len(self.disagreements)}")
        return "\n".join(lines)


def run(n_random: int, n_ill: int, seed: int, depth: int = 3, progress=None) -> Tally:
    """`n_random` random compositions (mostly the well-typed direction) and `n_ill` ill-typed calls
    (each op in turn, one fault each), judged by the checker, the runtime and JAX."""
    rng = random.Random(seed)
    tally = Tally()
    ops = sorted(REGISTRY)
    for i in range(n_random):
        env = random_env(rng)
        tally.judge(expr(rng, env, depth, top=True), env, "")
        if progress and (i + 1) % 500 == 0:
            progress(f"random {i + 1}/{n_random}")
    for i in range(n_ill):
        text, env, op, fault = ill_typed(rng, ops[i % len(ops)])
        tally.judge(text, env, op)
        if progress and (i + 1) % 500 == 0:
            progress(f"ill-typed {i + 1}/{n_ill}")
    return tally


# --------------------------------------------------------------------------- whole run files: `:step` and `objective`


FIELD_SHAPES = [(), (3,), (2, 3), (3, 4), (4,)]
PARAM_SHAPES = [(), (3,), (4,), (3, 4)]
BATCH = 2
STEP_KINDS = ["keep", "keep", "keep", "drift", "raw"]
LOSS_KINDS = ["ok", "ok", "ok", "not-reduced", "not-float", "raw"]


@dataclass
class PhaseFile:
    """One random run file, and what it was built from, so that JAX can run the same phases directly.

    The loader gives `fields` (per-record types); the model `m` multiplies its parameter `w`
    (`param`) by its argument. `:init` binds each field to its name and makes `init` (state key ->
    expression); `:step` binds each state key to its name, `k` to `(getf ctx :step)` and `p` to
    `(m step_x)`, and returns `step` (key -> expression; a key it drops is absent, one it adds
    present); `:finish`, when there is one, binds the state keys and returns `finish`. `objective`
    reads each field and generated name (`field` or `getf`), binds `p` to `(m obj_x)` and returns `loss`.
    The run has `precision` (under `bf16` a model call computes in bf16) and stacks `stack` microbatches.
    """

    text: str
    step_kind: str
    loss_kind: str
    fields: dict
    param: TensorType
    trips: int
    init: dict
    step: dict
    step_x: str
    finish: dict | None
    obj_x: str
    loss: str
    precision: str = "f32"
    stack: int = 1


def _dims(shape) -> str:
    return "[" + " ".join(map(str, shape)) + "]"


def _typed(text: str, env: dict):
    """The checker's type of one expression over `env` (None when it rejects it)."""
    try:
        e, diags = check_expression(text, env)
    except Exception:  # noqa: BLE001 - judged again as part of the whole file
        return None
    if e is None or any(d.is_error for d in diags) or not isinstance(e.type, TensorType):
        return None
    return e.type


def _broadcasts(src, dst) -> bool:
    return len(src) <= len(dst) and all(a in (1, b) for a, b in zip(reversed(src), reversed(dst)))


def _in_model(t: TensorType, precision: str) -> TensorType:
    """A float parameter or argument as a model sees it: bf16 under `:precision :bf16`."""
    return TensorType(t.shape, "bf16") if precision == "bf16" and t.dtype in ("f32", "bf16", "f16") else t


def _model_type(x: str, env: dict, param: TensorType, precision: str):
    """The checker's type of `(m x)`: the parameter times `x`, each as the model sees it."""
    xt = env.get(x, TensorType((), "f32", True))
    return _typed("(* w x)", {"w": _in_model(param, precision), "x": _in_model(xt, precision)})


def _model_arg(rng, env: dict, param: TensorType, precision: str = "f32") -> str:
    """A name `(m x)` multiplies the parameter by, preferring one the checker accepts (else `1.0`)."""
    names = list(env)
    rng.shuffle(names)
    ok = [n for n in names if _model_type(n, env, param, precision) is not None]
    if ok and rng.random() < 0.9:
        return ok[0]
    return names[0] if names and rng.random() < 0.5 else "1.0"


def _keep(rng, text: str, t, want: TensorType, key: str) -> str:
    """`text` (of checker type `t`, or None) made into a value of type `want`, the state key's."""
    if t is None:
        return key if rng.random() < 0.5 else text
    if t.shape != want.shape:
        text = (f"(broadcast-to {text} {_dims(want.shape)})" if _broadcasts(t.shape, want.shape) and rng.random() < 0.7
                else f"(broadcast-to ({rng.choice(['sum', 'mean', 'max'])} (cast {text} :f32)) {_dims(want.shape)})")
    if t.dtype != want.dtype or t.weak or rng.random() < 0.2:
        text = f"(cast {text} :{want.dtype})"
    if rng.random() < 0.3:
        text = f"(where (> trip {rng.randint(0, 2)}) {text} {key})"
    return text


def _drift(rng, text: str, want: TensorType) -> str:
    """A value of another type than `want`: another dtype, or another shape."""
    r = rng.random()
    if r < 0.4:
        return f"(cast {text} :{rng.choice([d for d in ('f32', 'bf16', 'i32', 'i64', 'bool') if d != want.dtype])})"
    if r < 0.6:
        return f"(expand-dims {text} :axis 0)"
    if r < 0.8 and want.shape:
        return f"(broadcast-to (mean (cast {text} :f32)) {_dims(want.shape[1:])})"
    return f"(+ {text} {rng.choice(['1.0', '(cast trip :i64)', '(cast 1 :i64)', 'k'])})"


def phase_file(rng: random.Random, depth: int = 2) -> PhaseFile:
    """A random run file whose `:step` and `objective` hold random compositions of the registry's ops.

    Mostly (`typed`) each composition is one the checker types alone, so that what is wrong with a
    file, if anything, is how its phases fit: a `:step` that keeps the state (`keep`: each value made
    into its key's shape and dtype with `broadcast-to`, a reduction, `cast`, `where` on the trip),
    that changes one key's dtype or shape or drops or adds a key (`drift`), or that returns
    compositions as they come (`raw`); a loss reduced to an f32 scalar with the parameter in it
    (`ok`), not reduced, cast to a non-float (or bf16) dtype, or a composition as it comes (`raw`).
    Otherwise compositions are taken as they come, ill-typed or not.
    """
    typed = rng.random() < 0.85

    def expr(rng, env, depth, top=True):
        for _ in range(30 if typed else 1):
            text = globals()["expr"](rng, env, depth, top=top)
            if _typed(text, env) is not None:
                break
        return text
    fields = {f"f{i}": TensorType(rng.choice(FIELD_SHAPES), rng.choice(DTYPES)) for i in range(rng.randint(1, 3))}
    batch = {k: TensorType((BATCH,) + t.shape, t.dtype) for k, t in fields.items()}
    param = TensorType(rng.choice(PARAM_SHAPES), "f32")
    precision = "bf16" if rng.random() < 0.2 else "f32"
    stack = 2 if rng.random() < 0.2 else 1
    trips = rng.randint(1, 3)
    init = {}
    for i in range(rng.randint(1, 3)):
        init[f"s{i}"] = rng.choice(list(batch)) if rng.random() < 0.4 else expr(rng, batch, depth, top=True)
    state = {k: _typed(e, batch) for k, e in init.items()}
    state = {k: (t.strong() if t is not None else None) for k, t in state.items()}
    step_kind = rng.choice(STEP_KINDS)
    env = {k: t for k, t in state.items() if t is not None}
    env.update(trip=TensorType((), "i64"), k=TensorType((), "i64"))
    step_x = _model_arg(rng, {n: t for n, t in env.items() if n != "k"}, param, precision)
    p = _model_type(step_x, env, param, precision)
    if p is not None:
        env["p"] = p
    step = {}
    for key in init:
        text = key if rng.random() < 0.3 else expr(rng, env, depth, top=True)
        if step_kind == "raw":
            step[key] = text
        elif state[key] is None:
            step[key] = key
        else:
            step[key] = _keep(rng, text, _typed(text, env), state[key], key)
    if step_kind == "drift":
        key = rng.choice(list(init))
        r = rng.random()
        if r < 0.15:
            del step[key]
        elif r < 0.3:
            step["extra"] = key
        elif state[key] is not None:
            step[key] = _drift(rng, step[key], state[key])
    finish = None
    if rng.random() < 0.5:
        senv = {k: t for k, t in state.items() if t is not None} or {"s0": TensorType((), "f32")}
        finish = {f"g{i}": expr(rng, senv, depth, top=True) if rng.random() < 0.7 else rng.choice(list(init))
                  for i in range(rng.randint(1, 2))}
    out_types = state if finish is None else {k: _typed(e, {k2: t for k2, t in state.items() if t is not None})
                                              for k, e in finish.items()}
    oenv = dict(batch)
    oenv.update({k: t for k, t in out_types.items() if t is not None})
    obj_x = _model_arg(rng, oenv, param, precision)
    p = _model_type(obj_x, oenv, param, precision)
    if p is not None:
        oenv["p"] = p
    loss_kind = rng.choice(LOSS_KINDS)
    e = expr(rng, oenv, depth, top=True)
    pl = "(mean (cast p :f32))"
    loss = {"ok": f"(+ ({rng.choice(['mean', 'sum', 'max'])} (cast {e} :f32)) {pl})",
            "not-reduced": f"(+ (cast {e} :f32) {pl})",
            "not-float": f"(cast (+ (mean (cast {e} :f32)) {pl}) :{rng.choice(['i32', 'i64', 'bool', 'bf16'])})",
            "raw": e}[loss_kind]
    generated = list(finish or init)
    text = phase_text(fields, param, trips, init, step, step_x, finish, generated, obj_x, loss, rng, precision, stack)
    return PhaseFile(text, step_kind, loss_kind, fields, param, trips, init, step, step_x, finish, obj_x, loss,
                     precision, stack)


def phase_text(fields, param, trips, init, step, step_x, finish, generated, obj_x, loss, rng,
               precision="f32", stack=1) -> str:
    def plist(d):
        return "(list " + " ".join(f":{k} {v}" for k, v in d.items()) + ")"

    state_binds = " ".join(f"({k} (getf state :{k}))" for k in init)
    reads = " ".join(f"({k} ({rng.choice(['field', 'getf'])} batch :{k}))" for k in list(fields) + generated)
    lines = [
        "(loader train",
        '  :source (npz "d.npz")',
        f"  :batch {BATCH}",
        "  :fields (" + " ".join(f":{k} {_dims(t.shape)} :{t.dtype}" for k, t in fields.items()) + "))",
        "",
        "(defmodel m",
        f"  :params (:w (normal {_dims(param.shape)} :std 0.1))",
        "  :apply (lambda (self x) (* (getf self :w) x)))",
        "",
        "(model m)",
        "",
        f"(defgenerate :trips {trips}",
        "  :init (lambda (batch ctx)",
        "          (let* (" + " ".join(f"({k} (field batch :{k}))" for k in fields) + ")",
        f"            {plist(init)}))",
        "  :step (lambda (state trip ctx)",
        f"          (let* ({state_binds} (k (getf ctx :step)) (p (m {step_x})))",
        f"            {plist(step)}))",
    ]
    if finish is not None:
        lines += ["  :finish (lambda (state ctx)",
                  f"            (let* ({state_binds})",
                  f"              {plist(finish)}))"]
    lines[-1] += ")"
    lines += ["",
              "(objective (lambda (batch ctx)",
              f"  (let* ({reads} (p (m {obj_x})))",
              f"    {loss})))",
              "",
              f"(run :loader train :steps 1 :microbatches {stack} :stack {stack} :precision :{precision} :seed 0",
              "     :optimizer (adam :lr 1e-3))", ""]
    return "\n".join(lines)


def _first_line(exc: Exception, n: int = 200) -> str:
    """The error's type and first line; a JAX loop's carry error with the line naming the component."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    msg = " ".join(lines[:2]) if lines and "carry" in lines[0] else (lines[0] if lines else "")
    return f"{type(exc).__name__}: {msg[:n]}"


def _direct(text: str, env: dict, results=None):
    return direct_eval(parse(SourceText(text)).forms[0], env, results)


NOT_JUDGED = "not judged"


def phase_jax_verdicts(pf: PhaseFile) -> tuple[dict, dict]:
    """JAX's verdict on each phase, each op called as a JAX user calls it (`DIRECT`), jitted and
    lowered over abstract inputs: `generate`, the generator as `lax.fori_loop` over the trips with
    the state as its carry (the loop a JAX user writes for a state kept on the device: each trip's
    state must have the type the previous one had), and `objective`, `jax.grad` of the objective
    with respect to the parameter, on the batch with what the generator makes (its trips a host
    loop); None where JAX runs it, else JAX's error, `NOT_JUDGED` for the objective when JAX cannot
    run the generator even so. And `carry`: each state
    key's JAX type as `:init` makes it and as one trip of `:step` returns it (dtype name, dtype
    name, whether the first is weakly typed: a literal, a size; JAX's loop lets such a carry take
    the step's dtype), where JAX computes them."""
    batch = {k: jax.ShapeDtypeStruct((BATCH,) + t.shape, jdt(t.dtype)) for k, t in pf.fields.items()}
    w = jax.ShapeDtypeStruct(pf.param.shape, jdt(pf.param.dtype))
    ctx = {"step": jax.ShapeDtypeStruct((), jnp.int64)}

    rs: list = [None]   # while set, a list every call's result is added to (`nodes`)

    def _direct(text, env):
        return globals()["_direct"](text, env, rs[0])

    def nodes(fn):
        """`fn` returning, besides its value, every call's result: each node is lowered, even one only a
        `size` reads or a state no later phase reads (JAX drops dead values before lowering)."""
        def run(*args):
            rs[0] = []
            try:
                return fn(*args), rs[0]
            finally:
                rs[0] = None
        return run

    def with_p(w, env, x):
        """`p`, the model's product: under `:precision :bf16` of the float operands cast to bf16."""
        env, v = dict(env), _direct(x, env)
        if pf.precision == "bf16":
            w = w.astype(jnp.bfloat16)
            if jnp.issubdtype(jnp.result_type(v), jnp.floating):
                v = jnp.asarray(v, jnp.bfloat16)
        env["p"] = jnp.multiply(w, v)
        return env

    def gen(w, batch, ctx, host=False):
        state = {k: _direct(e, batch) for k, e in pf.init.items()}

        def body(t, state):
            env = with_p(w, {**state, "trip": jnp.asarray(t, jnp.int64), "k": ctx["step"]}, pf.step_x)
            return {k: _direct(e, env) for k, e in pf.step.items()}
        if trace is not None:
            trace.append(jax.eval_shape(body, jnp.int64(0), state))
        if host:
            for t in range(pf.trips):
                state = body(jnp.int64(t), state)
        else:
            state = lax.fori_loop(jnp.int64(0), jnp.int64(pf.trips), body, state)
        if pf.finish is None:
            return state
        return {k: _direct(e, state) for k, e in pf.finish.items()}

    def objective(w, batch):
        return _direct(pf.loss, with_p(w, batch, pf.obj_x))

    carry, trace, out = {}, None, {"generate": None, "objective": NOT_JUDGED}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            made = jax.eval_shape(lambda b: {k: _direct(e, b) for k, e in pf.init.items()}, batch)
            trace = []
            jax.eval_shape(gen, w, batch, ctx)
        except Exception:  # noqa: BLE001 - lowered below, for the verdict
            made = {}
        stepped = trace[0] if trace else {}
        for k, v in made.items():
            if hasattr(v, "dtype") and hasattr(stepped.get(k), "dtype"):
                carry[k] = (name_of(v.dtype), name_of(stepped[k].dtype), bool(getattr(v, "weak_type", False)))
        trace = None
        try:
            jax.jit(gen).lower(w, batch, ctx)
            jax.jit(nodes(functools.partial(gen, host=True))).lower(w, batch, ctx)
        except Exception as exc:  # noqa: BLE001 - any failure is JAX's verdict "cannot run"
            out["generate"] = _first_line(exc, 400)
        try:   # what the generator makes, its trips a host loop (as the runtime runs them): the objective's batch
            made = jax.eval_shape(functools.partial(gen, host=True), w, batch, ctx)
        except Exception:  # noqa: BLE001 - then JAX cannot judge the objective
            return out, carry
        try:
            jax.jit(jax.grad(objective)).lower(w, {**batch, **made})
            jax.jit(nodes(objective)).lower(w, {**batch, **made})
            out["objective"] = None
        except Exception as exc:  # noqa: BLE001
            out["objective"] = _first_line(exc, 400)
    return out, carry


def phase_jax_verdict(pf: PhaseFile) -> tuple[str | None, dict]:
    """JAX's first refusal (`phase: error`) of `phase_jax_verdicts`, or None; and the carry's types."""
    out, carry = phase_jax_verdicts(pf)
    bad = [f"{k}: {v}" for k, v in out.items() if v is not None and v is not NOT_JUDGED]
    return (bad[0] if bad else None), carry


def _differs(out, want: PlistType, lead: int = 0) -> str | None:
    """Why a graph's output structs differ from the checker's plist type (each with a leading axis of
    `lead` copies when stacked), or None."""
    if not isinstance(out, dict) or set(out) != set(want.keys):
        return f"keys {sorted(out) if isinstance(out, dict) else type(out).__name__}, checker {sorted(want.keys)}"
    for k, t in want.entries:
        got = (tuple(out[k].shape), name_of(out[k].dtype))
        if got != (((lead,) if lead else ()) + t.shape, t.dtype):
            return f":{k}: checker {list(t.shape)} {t.dtype}, JAX {list(got[0])} {got[1]}"
    return None


def phase_runtime(program) -> str | None:
    """None when the runtime lowers every graph of the step (`generate.init`, `.step`, `.finish`,
    `train` with its gradient, `update`) from abstract inputs and JAX's type of each phase's output
    (the state's entries, the made record, the loss, the gradient) is the checker's; else why not."""
    from sexpgpu_runtime.graphs import Graphs
    from sexpgpu_runtime.lowering import run_phase
    from sexpgpu_runtime.optim import make_optimizer
    from sexpgpu_runtime.params import merge
    from sexpgpu_runtime.xla_report import _params, _rows, _tree
    from sexpgpu_lang.explain import RUNTIME_CTX

    g = Graphs(program, make_optimizer(program.run.optimizer))
    trainable, frozen = _params(program)
    batch = _tree(program.loaders[program.run.loader].batch_type(), 1)
    gen = program.generate
    trip = jax.ShapeDtypeStruct((), jnp.int64)
    state = _tree(gen.state, 1)
    graphs = [("generate.init", g.gen_init_1, (trainable, frozen, batch, _rows(1)), gen.state, 0),
              ("generate.step", g.gen_step_1, (trainable, frozen, state, trip, _rows(1)), gen.state, 0),
              ("generate.finish", g.gen_finish_1, (trainable, frozen, state, _rows(1)), gen.out, 0)]
    S = g.layout.stack    # a run that stacks S microbatches vmaps every phase: each copy has the checker's types
    if S > 1:
        sb, ss = _tree(program.loaders[program.run.loader].batch_type(), S), _tree(gen.state, S)
        graphs += [("generate.init stacked", g.gen_init, (trainable, frozen, sb, _rows(S)), gen.state, S),
                   ("generate.step stacked", g.gen_step, (trainable, frozen, ss, trip, _rows(S)), gen.state, S),
                   ("generate.finish stacked", g.gen_finish, (trainable, frozen, ss, _rows(S)), gen.out, S)]
    name = "?"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, fn, args, want, lead in graphs:
                out = fn.lower(*args).out_info
                if name.startswith("generate.init"):   # (the group's batch, its context rows, the state)
                    out = out[2]
                why = _differs(out, want, lead)
                if why:
                    return f"{name} returns {why}"
            tbatch = {**batch, **_tree(gen.out, 1)}
            name = "objective"
            ctx1 = {k: jax.ShapeDtypeStruct((), jdt(d)) for k, d in RUNTIME_CTX}
            def objective(tr, fr, b, c):
                fx, params = g._fx(), merge(tr, fr)
                inputs = run_phase(program.prepare, [b, c], params, fx) if program.prepare is not None else b
                octx = {**c, **{k: jnp.zeros((), jdt(d)) for k, d in g.counter_types.items()}}
                return run_phase(program.objective, [inputs, octx], params, fx)
            loss = jax.eval_shape(objective, trainable, frozen, tbatch, ctx1)
            want = program.objective.out
            if (tuple(loss.shape), name_of(loss.dtype)) != (want.shape, want.dtype):
                return f"objective: checker {list(want.shape)} {want.dtype}, JAX {list(loss.shape)} {name_of(loss.dtype)}"
            name = "train"    # the training graph takes S microbatches stacked (a run file's `:stack`)
            sbatch = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(((S,) if S > 1 else ()) + x.shape, x.dtype),
                                            tbatch)
            base = {c: jax.ShapeDtypeStruct((), jdt(d)) for c, d in g.counter_types.items()}
            losses, grads, *_ = g.grads.lower(trainable, frozen, sbatch, _rows(S), base).out_info
            if (losses[0].shape, name_of(losses[0].dtype)) != ((), "f32"):
                return f"train: the loss is {losses[0]}"
            got = jax.tree_util.tree_map(lambda s: (tuple(s.shape), name_of(s.dtype)), grads[0])
            if got != jax.tree_util.tree_map(lambda s: (tuple(s.shape), name_of(s.dtype)), trainable):
                return f"train: gradient {got}"
            name = "update"
            opt_state = jax.eval_shape(g.opt.init, trainable)
            g.update.lower(trainable, opt_state, [trainable] * program.run.microbatches)
    except Exception as exc:  # noqa: BLE001 - an accepted file the runtime cannot lower is a disagreement
        return f"{name}: {_first_line(exc)}"
    return None


@dataclass(frozen=True)
class PhaseRule:
    """A deliberate difference from JAX in how phases fit together: `name`, why, and an example: what
    `:init` and `:step` return in `PHASE_EXAMPLE` (tests/test_differential.py checks it shows the
    difference). A strict one explains an E-GEN-002 of a dtype when `applies(want, got, jax_init,
    jax_step, weak)` holds (the checker's dtypes of the key as `:init` made it and as `:step` returns it,
    JAX's, and whether JAX's `:init` value is weakly typed); a lenient one matches JAX's error (`pattern`),
    and the file and JAX's error (`applies(pf, error)`) where it has `applies`. A strict rule of another
    `code` explains an error whose message matches its `pattern`."""

    name: str
    reason: str
    init: str
    step: str
    applies: Callable | None = None
    pattern: str = ""
    code: str = "E-GEN-002"


_WIDE = {"i32": {"i32", "i64"}, "f32": {"f32", "float64"}}
_THIRTY_TWO = ("a literal alone is an `i32` or `f32` (with a tensor, the tensor's dtype: `(maximum (gelu -1.5) x)` is "
               "`bf16` for a `bf16` `x`), an index (`argmax`, `argsort`) an `i32`, and a float-only op "
               "turns integers into `f32`; JAX, with 64-bit types enabled (a run needs them for `i64`), makes `int64` "
               "or `float64` there (`jnp.sum(2.0)`, `jnp.argmax`, `jnp.exp` of an `i64`), so the state's dtype can "
               "change between trips in one and not in the other")

#: Listed in docs/language.md with the expression-level rules.
PHASE_STRICT = [
    PhaseRule("strong-state", "`:init` fixes each state entry's dtype, even one computed from literals and sizes alone "
              "(weakly typed, as `(size x)` or `(>= -1.5 0.5)`); JAX's `fori_loop` lets a weakly typed carry take the "
              "dtype the step gives it (that dtype, or its 64-bit counterpart: see `32-bit-defaults`)", "(list :s0 (size f0))", "(list :s0 (zeros []))",
              applies=lambda want, got, ji, js, weak: weak and js in _WIDE.get(got, {got})),
    PhaseRule("32-bit-defaults", _THIRTY_TWO, "(list :s0 (argmax f0))", "(list :s0 (+ s0 (cast 1 :i64)))",
              applies=lambda want, got, ji, js, weak: (ji == js and ji in _WIDE.get(want, {want})
                                                       and js in _WIDE.get(got, {got}) and (ji, js) != (want, got))),
    PhaseRule("tensor-entries", "a generator phase returns a flat plist of tensors (E-GEN-001): a state or made "
              "record entry is a tensor, not a plist such as `top-k`'s; JAX's loop carries any pytree, nested dicts too",
              "(list :s0 (top-k f0 2))", "(list :s0 s0)", code="E-GEN-001", pattern=r"every entry must be a tensor"),
]


def _widened(pf, error: str) -> bool:
    """JAX's loop refuses a carry that changes between a type and its 64-bit counterpart (`float64`,
    `int64`), of the same kind and shape."""
    m = re.search(r"has type (\w+)(\[[\d,]*\]) but the corresponding output carry component has type (\w+)\2", error)
    if m is None or m.group(1) == m.group(3):
        return False
    kind = lambda t: "float" if "float" in t else "int" if t.startswith("int") else t  # noqa: E731
    return kind(m.group(1)) == kind(m.group(3)) and bool({m.group(1), m.group(3)} & {"float64", "int64"})


PHASE_LENIENT = [
    PhaseRule("32-bit-defaults", _THIRTY_TWO, "(list :s0 (sum 2.0))", "(list :s0 (cast s0 :f32))",
              applies=_widened, pattern=r"carry input and carry output must have equal types"),
    PhaseRule("f32-cross-entropy", "`cross-entropy` computes in `f32` and returns `f32` whatever its logits' float "
              "dtype (see Precision below); optax's `softmax_cross_entropy_with_integer_labels` returns the logits' "
              "dtype, so JAX's loop sees a state the language keeps `f32` become `bfloat16`",
              "(list :s0 (sum f0))", "(list :s0 (cross-entropy (cast (broadcast-to s0 [3]) :bf16) 0))",
              applies=lambda pf, error: any("cross-entropy" in e for e in pf.step.values()),
              pattern=r"has type float32(\[[\d,]*\]) but the corresponding output carry component has type bfloat16\1"),
]

#: The file the phase rules' examples change (`(list :s0 (sum f0))` and `(list :s0 (+ s0 1.0))`).
PHASE_EXAMPLE = """(loader train :source (npz "d.npz") :batch 2 :fields (:f0 [3] :f32))
(defmodel m :params (:w (normal [3] :std 0.1)) :apply (lambda (self x) (* (getf self :w) x)))
(model m)
(defgenerate :trips 2
  :init (lambda (batch ctx) (let* ((f0 (field batch :f0))) (list :s0 (sum f0))))
  :step (lambda (state trip ctx) (let* ((s0 (getf state :s0)) (p (m 1.0))) (list :s0 (+ s0 1.0)))))
(objective (lambda (batch ctx) (let* ((f0 (field batch :f0)) (s0 (field batch :s0)) (p (m f0)))
  (+ (mean (cast s0 :f32)) (mean (cast p :f32))))))
(run :loader train :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
"""


def phase_example(rule: PhaseRule) -> PhaseFile:
    """`PHASE_EXAMPLE` with the rule's `:init` and `:step`, as a `PhaseFile` the judge reads."""
    text = PHASE_EXAMPLE.replace("(list :s0 (sum f0))", rule.init).replace("(list :s0 (+ s0 1.0))", rule.step)
    body = lambda t: t[len("(list :s0 "):-1]  # noqa: E731
    return PhaseFile(text, "example", "ok", {"f0": TensorType((3,), "f32")}, TensorType((3,), "f32"), 2,
                     {"s0": body(rule.init)}, {"s0": body(rule.step)}, "1.0", None, "f0",
                     "(+ (mean (cast s0 :f32)) (mean (cast p :f32)))")


def phase_rule(errors, carry: dict) -> str | None:
    """The rule (expression-level `STRICT` or phase-level `PHASE_STRICT`) explaining every error, or None;
    `carry`: JAX's types of the state keys (`phase_jax_verdict`)."""
    names = []
    for d in errors:
        rule = next((r.name for r in STRICT if (r.code is None or r.code == d.code) and re.search(r.pattern, d.message)),
                    None)
        data = d.data or {}
        if rule is None and d.code == "E-GEN-002" and data.get("what") == "dtype" and data.get("key") in carry:
            rule = next((r.name for r in PHASE_STRICT if r.code == d.code
                         and r.applies(data["want_dtype"], data["got_dtype"], *carry[data["key"]])), None)
        if rule is None:
            rule = next((r.name for r in PHASE_STRICT if r.code != "E-GEN-002" and r.code == d.code
                         and re.search(r.pattern, d.message)), None)
        if rule is None:
            return None
        names.append(rule)
    return names[0] if names else None


def phase_lenient_rule(jax_error: str, pf: PhaseFile | None = None) -> str | None:
    """The lenient rule explaining JAX's refusal of a phase the checker accepts (a phase rule's
    `applies(pf)`, where it has one, must hold too), or None."""
    return next((r.name for r in LENIENT + PHASE_LENIENT if re.search(r.pattern, jax_error)
                 and (getattr(r, "applies", None) is None or (pf is not None and r.applies(pf, jax_error)))), None)


def generator_only(text: str) -> str:
    """The file with a trivial objective (the model's product, reduced): what the checker says of
    its generator alone."""
    head, rest = text.split("(objective", 1)
    return head + "(objective (lambda (batch ctx) (let* ((p (m 1.0))) (mean (cast p :f32)))))\n\n" + rest[rest.index("(run "):]


@dataclass
class PhaseTally:
    """Counts over whole run files, per kind of file, and per phase (`generate`, `objective`) the
    checker's verdict against JAX's; and the unexplained disagreements."""

    files: int = 0
    accepted: Counter = field(default_factory=Counter)      # kind ("step keep", "loss ok"...) -> files
    rejected: Counter = field(default_factory=Counter)
    runtime_ok: int = 0
    codes: Counter = field(default_factory=Counter)
    phases: Counter = field(default_factory=Counter)        # (phase, outcome) -> count
    disagreements: list = field(default_factory=list)

    def judge(self, pf: PhaseFile) -> str:
        """The checker's verdict on each phase against JAX's: the generator's errors are those the
        file gives with a trivial objective (`generator_only`); the objective is judged when the
        checker accepts the generator (so no error is hidden behind it), all the file's errors its own.
        Returns the first outcome other than agreement, else "agree"."""
        from sexpgpu_lang import analyze
        self.files += 1
        kinds = (f"step {pf.step_kind}", f"loss {pf.loss_kind}", f"precision {pf.precision}", f"stack {pf.stack}")
        try:
            res = analyze(pf.text, "phases.sx")
            errors = [d for d in res.diagnostics if d.is_error]
            accepted = not errors and res.program is not None
            gen_errors = [] if accepted else [d for d in analyze(generator_only(pf.text), "g.sx").diagnostics
                                              if d.is_error]
        except Exception as exc:  # noqa: BLE001 - the checker must never raise
            self.disagreements.append((pf.text, f"checker raised {_first_line(exc)}"))
            return "unexplained"
        verdicts, carry = phase_jax_verdicts(pf)
        outcomes = []
        (self.accepted if accepted else self.rejected).update(kinds)
        if accepted:
            why = phase_runtime(res.program)
            if why:
                self.disagreements.append((pf.text, f"accepted, the runtime disagrees: {why}"))
                outcomes.append("unexplained")
            else:
                self.runtime_ok += 1
        else:
            self.codes.update({d.code for d in errors})
        judged = {"generate": gen_errors} if gen_errors else {"generate": [], "objective": errors}
        for phase, errs in judged.items():
            v = verdicts[phase]
            if v is NOT_JUDGED:
                self.phases[(phase, "not judged: JAX cannot run the generator")] += 1
                continue
            if errs and v is not None:
                outcome = "agree: both refuse"
            elif not errs and v is None:
                outcome = "agree: both run"
            elif errs:
                rule = phase_rule(errs, carry if phase == "generate" else {})
                outcome = f"strict:{rule}" if rule else "unexplained"
                why = "rejected (" + "; ".join(f"{d.code} {d.message}" for d in errs) + "), JAX runs it"
            else:
                rule = phase_lenient_rule(v, pf)
                outcome = f"lenient:{rule}" if rule else "unexplained"
                why = f"accepted, JAX refuses: {v}"
            if outcome == "unexplained":
                self.disagreements.append((pf.text, f"{phase}: {why}"))
            self.phases[(phase, outcome)] += 1
            outcomes.append(outcome)
        return next((o for o in outcomes if not o.startswith("agree")), "agree")

    def report(self) -> str:
        acc, rej = sum(self.accepted.values()) // 4, sum(self.rejected.values()) // 4
        kinds = sorted(set(self.accepted) | set(self.rejected))
        lines = [f"{self.files} run files: {acc} the checker accepts (the runtime lowers every graph, JAX's type "
                 f"for every phase output: {self.runtime_ok}), {rej} it rejects ("
                 + ", ".join(f"{c} {n}" for c, n in self.codes.most_common()) + ")",
                 "per kind, accepted / rejected:"]
        lines += [f"  {k}: {self.accepted[k]} / {self.rejected[k]}" for k in kinds]
        names = {"agree: both run": "checker accepts, JAX runs it (agree)",
                 "agree: both refuse": "checker rejects, JAX refuses it (agree)"}
        for phase in ("generate", "objective"):
            lines.append(f"{phase} phase:")
            for (ph, o), n in sorted(self.phases.items()):
                if ph == phase:
                    label = names.get(o) or (f"intentional-{o.replace(':', ' ', 1)}" if ":" in o and not o.startswith("not")
                                             else o)
                    lines.append(f"  {label}: {n}")
        lines.append(f"unexplained disagreements: {len(self.disagreements)}")
        return "\n".join(lines)


def run_phases(n: int, seed: int, depth: int = 2, progress=None) -> PhaseTally:
    """`n` random run files, each judged by the checker, the runtime and JAX."""
    rng = random.Random(seed)
    tally = PhaseTally()
    for i in range(n):
        tally.judge(phase_file(rng, depth))
        if progress and (i + 1) % 50 == 0:
            progress(f"files {i + 1}/{n}")
    return tally


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="random compositions (default 3000)")
    ap.add_argument("--ill", type=int, default=2000, help="ill-typed calls, each op in turn (default 2000)")
    ap.add_argument("--phases", type=int, default=1000, help="whole run files, `:step` and `objective` (default 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--phase-depth", type=int, default=2, help="depth of the compositions in run files (default 2)")
    ap.add_argument("--keep", type=Path, default=None, metavar="DIR")
    a = ap.parse_args()
    progress = lambda s: print(f"\r{s}", end="", file=sys.stderr)  # noqa: E731
    bad = 0
    if a.n or a.ill:
        t0 = time.perf_counter()
        tally = run(a.n, a.ill, a.seed, a.depth, progress=progress)
        print(file=sys.stderr)
        for text, env, why in tally.disagreements[:30]:
            names = " ".join(f"{k}:{list(t.shape)}{t.dtype}" for k, t in env.items())
            print(f"  {text}\n      with {names}\n      {why}")
        if a.keep and tally.disagreements:
            a.keep.mkdir(parents=True, exist_ok=True)
            with open(a.keep / f"differential-{a.seed}.txt", "w", encoding="utf-8") as fh:
                for text, env, why in tally.disagreements:
                    fh.write(f"{text}\t{ {k: (list(t.shape), t.dtype) for k, t in env.items()} }\t{why}\n")
        uncovered = sorted(set(REGISTRY) - set(tally.covered))
        print(f"{tally.programs} programs ({a.n} random compositions, {a.ill} ill-typed calls; seed {a.seed}) "
              f"in {time.perf_counter() - t0:.0f} s; each op's calls rejected at least "
              f"{min(tally.covered[o] for o in REGISTRY)} times" + (f"; never rejected: {uncovered}" if uncovered else ""))
        print(tally.report())
        bad += len(tally.disagreements)
    if a.phases:
        t0 = time.perf_counter()
        pt = run_phases(a.phases, a.seed, a.phase_depth, progress=progress)
        print(file=sys.stderr)
        for text, why in pt.disagreements[:10]:
            print(f"{text}\n  {why}\n")
        if a.keep and pt.disagreements:
            a.keep.mkdir(parents=True, exist_ok=True)
            for i, (text, why) in enumerate(pt.disagreements):
                (a.keep / f"phases-{a.seed}-{i}.sx").write_text(f";; {why}\n{text}", encoding="utf-8")
        print(f"whole run files (seed {a.seed}, depth {a.phase_depth}) in {time.perf_counter() - t0:.0f} s")
        print(pt.report())
        bad += len(pt.disagreements)
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
