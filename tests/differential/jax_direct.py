"""JAX's own verdict: each op as a JAX user writes it (`DIRECT`: the jnp, lax, jax.nn, jax.random function,
or optax's cross-entropy), with none of the runtime's conversions or checks, traced and lowered.

`jax_verdict` judges one expression; `phase_jax_verdicts` a whole run file phase by phase (the
generator as `lax.fori_loop` with the state as its carry, `jax.grad` of the objective). Nothing here
reads the checker's verdict or the runtime's lowering.
"""
from __future__ import annotations

import functools
import operator
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import optax
from jax import lax

from sexpgpu_lang.source import SourceText
from sexpgpu_lang.syntax import Kw, ListNode, Num, Str, Sym, VecNode, parse
from sexpgpu_lang.types import DTYPES
from sexpgpu_runtime.dtypes import JAX_DTYPES, jdt, name_of

from .run_files import BATCH, PhaseFile
from .decoding import DIRECT_DECODING


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
    "rsqrt": lax.rsqrt, "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "silu": jax.nn.silu, "sin": jnp.sin, "cos": jnp.cos,
    "gelu": lambda *a, **k: jax.nn.gelu(*a, approximate=True, **k),
    "=": jnp.equal, "!=": jnp.not_equal, "<": jnp.less, "<=": jnp.less_equal, ">": jnp.greater,
    ">=": jnp.greater_equal, "not": jnp.logical_not, "where": jnp.where,
    "sum": lambda x, **k: jnp.sum(x, **_axes(k)), "prod": lambda x, **k: jnp.prod(x, **_axes(k)),
    "max": lambda x, **k: jnp.max(x, **_axes(k)), "min": lambda x, **k: jnp.min(x, **_axes(k)),
    "mean": lambda x, **k: jnp.mean(x, **_axes(k)), "logsumexp": lambda x, **k: jax.nn.logsumexp(x, **_axes(k)),
    "cumsum": lambda x, *, axis=-1, **k: jnp.cumsum(x, axis=axis, **k),
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
    "dot-product-attention": lambda q, k, v, *a, causal=False, **kw: jax.nn.dot_product_attention(q, k, v, *a, is_causal=causal, **kw),
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


DIRECT.update(DIRECT_DECODING)   # dynamic-slice, dynamic-update-slice, at-set (decoding.py)

#: The ops the checker folds when every operand is a constant (`ops._fold`).
PYTHON_ARITHMETIC = {"+": lambda *a: sum(a), "*": lambda *a: functools.reduce(operator.mul, a),
                     "-": lambda a, b=None: -a if b is None else a - b, "/": operator.truediv, "mod": operator.mod}


def direct_eval(node, env, results=None):
    """Evaluate a syntax node with DIRECT: names from `env`, literals as Python numbers (weakly
    typed in JAX, as in the language), `[..]` as a Python list. Arguments are split into
    positional and keyword ones as the checker splits them (`check.infer.split_args`). Each
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


def first_line(exc: Exception, n: int = 200) -> str:
    """The error's type and first line; a JAX loop's carry error with the line naming the component."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    msg = " ".join(lines[:2]) if lines and "carry" in lines[0] else (lines[0] if lines else "")
    return f"{type(exc).__name__}: {msg[:n]}"


def direct_text(text: str, env: dict, results=None):
    """`direct_eval` of the expression `text`."""
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
    w = jax.ShapeDtypeStruct(((pf.layers,) if pf.layers else ()) + pf.param.shape, jdt(pf.param.dtype))
    ctx = {"step": jax.ShapeDtypeStruct((), jnp.int64)}

    rs: list = [None]   # while set, a list every call's result is added to (`nodes`)

    def _direct(text, env):
        return direct_text(text, env, rs[0])

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
        """`p`, the model's product: under `:precision :bf16` of the float operands cast to bf16; of a
        repeated block, `lax.scan` over the stacked `w` with `x` as the carry; under a remat policy,
        `jax.checkpoint` with `jax.checkpoint_policies`' policy of that name."""
        env, v = dict(env), _direct(x, env)
        if pf.precision == "bf16":
            w = w.astype(jnp.bfloat16)
            if jnp.issubdtype(jnp.result_type(v), jnp.floating):
                v = jnp.asarray(v, jnp.bfloat16)
        policy = getattr(jax.checkpoint_policies, pf.remat.replace("-", "_")) if pf.remat else None
        if pf.layers:
            def layer(h, wi):
                return jnp.multiply(wi, h), None
            body = jax.checkpoint(layer, policy=policy) if policy else layer
            env["p"] = lax.scan(body, v, w)[0]
        else:
            mul = jax.checkpoint(jnp.multiply, policy=policy) if policy else jnp.multiply
            env["p"] = mul(w, v)
        return env

    def gen(w, batch, ctx, host=False):
        state = {k: _direct(e, batch) for k, e in pf.init.items()}

        def body(t, state):
            env = with_p(w, {**state, "trip": jnp.asarray(t, jnp.int64), "k": ctx["step"]}, pf.step_x)
            return {k: _direct(e, env) for k, e in pf.step.items()}
        if trace is not None:
            trace.append(jax.eval_shape(body, jnp.int64(0), state))
        def until(state):
            return _direct(pf.until, {**state, "k": ctx["step"]})
        if host:   # every trip (with the freeze pattern, the bits of an early exit); `:until` traced each trip
            for t in range(pf.trips):
                state = body(jnp.int64(t), state)
                if pf.until:
                    until(state)
        elif pf.until:   # the loop a JAX user writes to stop early: the flag is the carry's, a bool scalar
            def more(c):
                return (c[0] < pf.trips) & ~c[2]
            def trip(c):
                state = body(c[0], c[1])
                return c[0] + 1, state, until(state)
            state = lax.while_loop(more, trip, (jnp.int64(0), state, jnp.bool_(False)))[1]
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
            out["generate"] = first_line(exc, 400)
        try:   # what the generator makes, its trips a host loop (as the runtime runs them): the objective's batch
            made = jax.eval_shape(functools.partial(gen, host=True), w, batch, ctx)
        except Exception:  # noqa: BLE001 - then JAX cannot judge the objective
            return out, carry
        # What the generator makes is the objective's batch, whose fields the language types strongly
        # (a literal's weak type, which `lax.scan` would let a repeated block's carry shed, ends there).
        made = jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), made)
        try:
            jax.jit(jax.grad(objective)).lower(w, {**batch, **made})
            jax.jit(nodes(objective)).lower(w, {**batch, **made})
            out["objective"] = None
        except Exception as exc:  # noqa: BLE001
            out["objective"] = first_line(exc, 400)
    return out, carry


def phase_jax_verdict(pf: PhaseFile) -> tuple[str | None, dict]:
    """JAX's first refusal (`phase: error`) of `phase_jax_verdicts`, or None; and the carry's types."""
    out, carry = phase_jax_verdicts(pf)
    bad = [f"{k}: {v}" for k, v in out.items() if v is not None and v is not NOT_JUDGED]
    return (bad[0] if bad else None), carry
