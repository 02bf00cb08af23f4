"""LoRA adapters lowered: folded into their weight, or unmerged on a dropped-out input in training.

A model call with adapters (`ir.ModelCall.adapters`: each target `KEY`, its scale and dropout p,
sexpgpu_lang/check/lora.py) reads `KEY` through `adapted`:

- **folded** (the generator, every evaluation pass, a training step whose adapters have no dropout):
  `KEY + scale * reshape(A @ B)`, A `KEY.lora-a` `[in r]`, B `KEY.lora-b` `[r out]`, the product in
  f32 cast to KEY's dtype; one matmul per call (per layer inside a scan), the gradient reaching A
  and B through the product;
- **unmerged** (the training step's forward where p > 0): a `LoraWeight`, which the contraction
  that reads it (`contract`: `matmul` or a two-operand `einsum` with the weight as one operand)
  lowers as peft's `Linear.forward` does in training, `x W + scale * (dropout(x) A) B`, x the other
  operand, `dropout(x)` = `where(mask, x / (1 - p), 0)` and the mask `bernoulli(1 - p)` of x's shape.
  Where the weight's input axes are contracted with x and its output axes are the result's, the
  adapter is two small contractions (`[... in] -> [... r] -> [... out]`); any other contraction adds
  `x' (scale * reshape(A B))` (the same value, bilinearity). Any other op reading the weight reads it
  folded, without dropout (as peft applies no dropout to an embedding's adapter).

The mask's key (`dropout_key`, `target_key`) is a pure function of the run's seed, the step, the
microbatch, the target's path and the layer of each repeated block around the call: a new mask every
step, microbatch, target and layer, the same in a stacked run and in a resume. Every call of one
adapted model in one microbatch's forward draws the same mask for a target (an input of the same
shape gets the same elements dropped). Imports JAX, sexpgpu_lang and the runtime's dtypes only.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from sexpgpu_lang.check.lora import low_rank_subscripts

from ..dtypes import jdt

#: Folded into the run's key before the step and microbatch: the stream LoRA dropout draws from.
DROPOUT_STREAM = zlib.crc32(b"sexpgpu lora dropout")


@dataclass(frozen=True)
class LoraWeight:
    """An adapted weight read unmerged (module docstring): the base `w`, the adapters `a` `[in r]`
    and `b` `[r out]` (one layer's, inside a scan), the mask's `key`, `scale`, the dropout `p` and
    `in_axes` (how many leading axes of `w` are the projection's input, flattened into `a`'s first).
    A pytree over (w, a, b, key): a cast of the call's floats (`:bf16`) casts w, a and b."""

    w: Any
    a: Any
    b: Any
    key: Any
    scale: float
    p: float
    in_axes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.w.shape)

    def delta(self, dtype) -> jax.Array:
        """`scale * reshape(A @ B)` to the weight's shape, the product in f32, in `dtype`."""
        d = jnp.matmul(self.a, self.b, preferred_element_type=jnp.float32) * jnp.float32(self.scale)
        return d.reshape(self.w.shape).astype(dtype)

    def folded(self) -> jax.Array:
        """`w + scale * reshape(A @ B)` in w's dtype: what `adapted` gives where nothing is dropped."""
        return self.w + self.delta(self.w.dtype)

    def dropped(self, x) -> jax.Array:
        """`x` with each element kept with probability 1 - p and scaled by 1 / (1 - p), else 0 (torch's
        `nn.Dropout` in training), the mask drawn from `key` in x's shape; x itself where p is 0."""
        if self.p == 0.0:
            return x
        mask = jax.random.bernoulli(self.key, 1.0 - self.p, x.shape)
        return jnp.where(mask, x / jnp.asarray(1.0 - self.p, x.dtype), jnp.zeros((), x.dtype))


jax.tree_util.register_dataclass(LoraWeight, data_fields=["w", "a", "b", "key"],
                                 meta_fields=["scale", "p", "in_axes"])


def dropout_key(seed_key, ctx: dict):
    """The key of one microbatch's LoRA dropout: the run's key folded with `DROPOUT_STREAM`, the
    step and the microbatch (`ctx`'s `step` i64 and `microbatch` i32 scalars, traced)."""
    key = jax.random.fold_in(seed_key, jnp.uint32(DROPOUT_STREAM))
    key = jax.random.fold_in(key, jnp.asarray(ctx["step"]).astype(jnp.uint32))
    return jax.random.fold_in(key, jnp.asarray(ctx["microbatch"]).astype(jnp.uint32))


def target_key(key, path: tuple[str, ...], layers: tuple = ()):
    """The mask key of the target at `path` (its base parameter's, from the root) under the
    microbatch's `key`, folded with each enclosing repeated block's layer index (outermost first)."""
    key = jax.random.fold_in(key, jnp.uint32(zlib.crc32("/".join(path).encode())))
    for i in layers:
        key = jax.random.fold_in(key, jnp.asarray(i).astype(jnp.uint32))
    return key


def needs_dropout(program) -> bool:
    """Whether the training step's forward of `program` (an `ir.Program`) applies adapters unmerged:
    some `:lora` has a dropout over 0."""
    return any(ad.dropout > 0 for ad in program.adapters)


def adapted(me: dict, adapters, path: tuple[str, ...], key=None, layers: tuple = (), unmerged: bool = False) -> dict:
    """A model's parameters `me` (at `path` of the tree) with each LoRA target `KEY` of `adapters`
    ((key, scale, dropout) triples) read folded, or, given the microbatch's dropout `key`, as a
    `LoraWeight` where its dropout is over 0 (or every one with `unmerged`: the unmerged form at any
    p, which a test and the benchmark compare with the folded one). `layers`: the layer index of
    each repeated block around the call. The base itself is not changed."""
    out = dict(me)
    for k, scale, p in adapters:
        w, a, b = me[k], me[k + ".lora-a"], me[k + ".lora-b"]
        lw = LoraWeight(w, a, b, None, scale, p, _in_axes(w.shape, a.shape[0]))
        if key is not None and (p > 0 or unmerged):
            out[k] = LoraWeight(w, a, b, target_key(key, path + (k,), layers), scale, p, lw.in_axes)
        else:
            out[k] = lw.folded()
    return out


def _in_axes(shape: tuple[int, ...], fan_in: int) -> int:
    """How many leading axes of a weight of `shape` make its input of `fan_in` (check/lora.py's `in`)."""
    for k in range(1, len(shape)):
        if math.prod(shape[:k]) == fan_in:
            return k
    return 1


def contract(name: str, args: list, static: dict):
    """The value of op `name` (`matmul` or `einsum`, `args` evaluated, the rule's `static`) where one
    operand is a `LoraWeight`: `x W + scale * (dropout(x) A) B` (module docstring), in the op's dtype.
    None where the op is not such a contraction (the caller folds the weight instead)."""
    dt = jdt(static["dtype"])
    operands = args if name == "matmul" else args[1:]
    if name not in ("matmul", "einsum") or len(operands) != 2:
        return None
    at = [i for i, o in enumerate(operands) if isinstance(o, LoraWeight)]
    if len(at) != 1:
        return None
    lw, x = operands[at[0]], jnp.asarray(operands[1 - at[0]], dt)
    w, a, b = (jnp.asarray(t, dt) for t in (lw.w, lw.a, lw.b))
    subs = static["subscripts"] if name == "einsum" else None
    base = _pair(name, subs, at[0], x, w)
    xd = lw.dropped(x)
    low = _low_rank(name, subs, at[0], xd, lw, a, b)
    if low is None:
        low = _pair(name, subs, at[0], xd, lw.delta(dt))
        return base + low
    return base + low * jnp.asarray(lw.scale, dt)


def _pair(name: str, subs: str | None, w_at: int, x, w):
    """The op on `x` and a weight `w` in the weight's operand place `w_at`."""
    ops = (x, w) if w_at == 1 else (w, x)
    return jnp.matmul(*ops) if name == "matmul" else jnp.einsum(subs, *ops)


def _low_rank(name: str, subs: str | None, w_at: int, xd, lw: LoraWeight, a, b):
    """`(xd A) B` as two contractions (check/lora.py `low_rank_subscripts`), else None."""
    plan = low_rank_subscripts(name, subs, w_at, len(lw.shape), xd.ndim, lw.in_axes)
    if plan is None:
        return None
    k, r = lw.in_axes, a.shape[-1]
    u = jnp.einsum(plan[0], xd, a.reshape(lw.shape[:k] + (r,)))
    return jnp.einsum(plan[1], u, b.reshape((r,) + lw.shape[k:]))
