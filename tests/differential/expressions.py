"""Random compositions of the registry's ops (the well-typed direction): names bound to random shapes
and dtypes, literals, op calls with random arity and keywords, nested to a depth.

Text only: nothing here checks, lowers or imports JAX (judge.py asks the checker, runtime_check.py
the runtime, jax_direct.py JAX itself).
"""
from __future__ import annotations

import random

from sexpgpu_lang.ops import REGISTRY
from sexpgpu_lang.types import TensorType

from .decoding_calls import DECODING_OPS, decoding_args


SHAPES = [(), (3,), (2, 3), (3, 4), (2, 3, 4), (4,)]
DTYPES = ["f32", "f32", "bf16", "i32", "i64", "bool"]
SHAPE_OPS = {"broadcast-to", "full", "iota", "normal", "ones", "zeros", "uniform", "reshape"}
EINSUMS = ["ij,jk->ik", "ij->ji", "i,i->", "ij,j->i", "bij,bjk->bik", "ij->"]
#: The query, key and value shape of a generated `dot-product-attention` ([B T N H]): the random
#: shapes (), (4,), (3 4) and (2 3 4) broadcast to it; one key head ([2 2 1 4]) is grouped-query.
ATTENTION = ["[2 2 3 4]", "[2 2 1 4]"]


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
    if key == "causal":
        return f":causal {rng.choice(['true', 'false'])}"
    if key == "scale":
        return f":scale {rng.choice(['0.5', '2.0', '1'])}"
    if key == "mask":   # [T S] of dot-product-attention's operands (ATTENTION)
        return ":mask " + rng.choice(["(>= (iota [2 2] :axis 0) (iota [2 2] :axis 1))", "(= (iota [2 1 2 2]) 0)"])
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
    elif name == "dot-product-attention":   # one float dtype; the operands broadcast to rank 4
        dt, kv = rng.choice(["f32", "bf16"]), rng.choice(ATTENTION)
        args = [f"(cast (broadcast-to {sub()} {shape}) :{dt})" for shape in (ATTENTION[0], kv, kv)]
    elif name in ("concat", "stack"):
        args = ["[" + " ".join(sub() for _ in range(rng.randint(1, 3))) + "]"]
    elif name in ("axis-size", "one-hot", "top-k", "transpose"):
        args = [sub(), str(rng.randint(-1, 3))] if name != "transpose" or rng.random() < 0.5 else [sub()]
        if name == "transpose" and len(args) == 2:
            args[1] = rng.choice(["[1 0]", "[0 1]", "[2 0 1]", "[0]"])
    elif name in DECODING_OPS:   # dynamic-slice, dynamic-update-slice, at-set
        args = decoding_args(name, rng, sub)
    else:
        hi = min(spec.max_args if spec.max_args is not None else 3, 3)
        args = [sub() for _ in range(rng.randint(spec.min_args, max(spec.min_args, hi)))]
    kws = [kwarg(rng, k) for k in spec.kwargs if rng.random() < 0.35]
    if spec.draw and not any(k.startswith(":salt") for k in kws) and rng.random() < 0.8:
        kws.append(kwarg(rng, "salt"))
    return "(" + " ".join([name] + args + [k for k in kws if k]) + ")"
