"""Benchmark: the checker's types against JAX's, on random compositions of the registry's operations.

Each program is one expression: random ops of `sexpgpu_lang.ops.REGISTRY`
(random arity, keyword arguments such as `:axis`, `:axes`, `:keepdims`,
`:dtype`, `:salt`), nested up to `--depth`, over random names bound to
random shapes and dtypes, and literals. `check_expression` types it; when
the checker accepts it, the runtime's evaluator traces it with JAX
(`jax.eval_shape`), which compares every op's JAX result with the type
the checker inferred for that node, and the whole result with the
expression's type. A disagreement is an accepted program that fails to
lower, or a node whose JAX type differs. Prints how many programs were
accepted and rejected and the disagreements (goal 0); `--keep DIR` writes
each one as `expr` plus its names' types, for a regression test.

    .venv/bin/python benchmarks/differential.py [--n 2000] [--seed 0] [--depth 3] [--keep DIR]

Not yet covered (FIXME, issue 8): a rejected program is not run through
JAX, so "rejected although JAX could lower it" is not counted; programs are
single expressions, not whole `:step` and `objective` phases.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from pathlib import Path

import sexpgpu_runtime  # noqa: F401  (enables x64, as a run does)
import jax

from sexpgpu_lang.check import check_expression
from sexpgpu_lang.ops import REGISTRY
from sexpgpu_lang.types import PlistType, TensorType
from sexpgpu_runtime.dtypes import jdt, name_of
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, metavar="DIR")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    accepted = rejected = crashed = 0
    disagreements = []
    t0 = time.perf_counter()
    for i in range(a.n):
        env = random_env(rng)
        text = expr(rng, env, a.depth, top=True)
        try:
            e, diags = check_expression(text, env)
        except Exception as exc:  # noqa: BLE001 - the checker must never raise
            crashed += 1
            disagreements.append((text, env, f"checker raised {type(exc).__name__}: {exc}"))
            continue
        if e is None or any(d.is_error for d in diags):
            rejected += 1
            continue
        accepted += 1
        why = lower(e, env)
        if why:
            disagreements.append((text, env, why))
        if (i + 1) % 200 == 0:
            print(f"\r{i + 1}/{a.n}: {accepted} accepted, {len(disagreements)} disagreements", end="", file=sys.stderr)
    print(file=sys.stderr)
    for text, env, why in disagreements[:30]:
        names = " ".join(f"{k}:{list(t.shape)}{t.dtype}" for k, t in env.items())
        print(f"  {text}\n      with {names}\n      {why}")
    if a.keep and disagreements:
        a.keep.mkdir(parents=True, exist_ok=True)
        with open(a.keep / f"differential-{a.seed}.txt", "w", encoding="utf-8") as fh:
            for text, env, why in disagreements:
                fh.write(f"{text}\t{ {k: (list(t.shape), t.dtype) for k, t in env.items()} }\t{why}\n")
    print(f"{a.n} programs in {time.perf_counter() - t0:.0f} s: {accepted} accepted, {rejected} rejected, "
          f"{crashed} crashed the checker; {len(disagreements)} disagreements")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
