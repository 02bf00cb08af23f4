"""Parameters: initialised from the models' `:params`, split into trainable and frozen trees.

Trees are nested dicts keyed like the root model's `:params` (a sub-model's
parameters under its key). Each leaf's initial bits are a pure function of
the seed and the leaf's place (`fold_in(key(seed), place)`; each layer of a
stacked leaf folds its index in too).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from sexpgpu_lang.ir import ParamIR

from ..dtypes import jdt


def init_leaf(p: ParamIR, seed_key) -> jax.Array:
    """One parameter's initial value, with its declared shape and dtype. A leaf stacked by
    `(repeat block N)` (`p.layers` N) is N draws of the per-layer shape, layer `i`'s key
    `fold_in(fold_in(key(seed), place), i)`, stacked on the leading axis: layers differ."""
    key = jax.random.fold_in(seed_key, jnp.uint32(p.place))
    if p.layers:
        return jnp.stack([_draw(p, jax.random.fold_in(key, jnp.uint32(i)), p.shape[1:]) for i in range(p.layers)])
    return _draw(p, key, p.shape)


def _draw(p: ParamIR, key, shape: tuple[int, ...]) -> jax.Array:
    """`p`'s initialiser drawn from `key` at `shape`, in `p.dtype`. ValueError for an unknown one.

    Traced inside `init_params`' one graph, each op behind an optimization barrier: XLA would
    otherwise fuse `normal * std + mean` into one multiply-add, which rounds otherwise than the
    two ops one at a time; so the bits are those of the ops run one by one (eagerly)."""
    kind, args = p.init
    dt = jdt(p.dtype)
    b = lax.optimization_barrier
    if kind == "normal":
        x = b(b(jax.random.normal(key, shape, jnp.float32)) * float(args.get("std", 1.0)))
        return b(x + float(args.get("mean", 0.0))).astype(dt)
    if kind == "uniform":
        return b(jax.random.uniform(key, shape, jnp.float32, float(args.get("min", 0.0)),
                                    float(args.get("max", 1.0)))).astype(dt)
    if kind == "zeros":
        return jnp.zeros(shape, dt)
    if kind == "ones":
        return jnp.ones(shape, dt)
    raise ValueError(f"unknown initialiser {kind}")


def set_path(tree: dict, path: tuple, value) -> None:
    """Store `value` at `path` in a nested dict, creating levels as needed."""
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def init_params(params: tuple[ParamIR, ...], seed: int, skip: tuple[tuple[str, ...], ...] = ()) -> tuple[dict, dict]:
    """(trainable, frozen) trees of freshly initialised parameters. The leaves below a path in
    `skip` (the `:pretrained` models', which a checkpoint fills: pretrained.initial_params) are
    not drawn: their places hold None, for hf_layout.load_mapped to fill; but a LoRA adapter's
    (`KEY.lora-a`, `KEY.lora-b`), which no checkpoint of the base holds, is. Each leaf's key is its
    own place's, so skipping some leaves leaves the others' bits as they are. A `:copy` leaf is its
    drawn source's value in a buffer of its own, or None where a checkpoint fills the source
    (`fill_copies` copies it once it is read)."""
    drawn = [p for p in params if p.copy_of is None and not (any(p.path[:len(s)] == s for s in skip)
                                                             and not p.path[-1].endswith((".lora-a", ".lora-b")))]
    # One graph draws them all (one compile, kept by the persistent cache), not one per op and shape.
    values = jax.jit(lambda: [init_leaf(p, jax.random.key(seed)) for p in drawn])() if drawn else []
    trainable: dict = {}
    frozen: dict = {}
    for p in params:
        set_path(frozen if p.frozen else trainable, p.path, None)
    for p, v in zip(drawn, values, strict=True):
        set_path(frozen if p.frozen else trainable, p.path, v)
    fill_copies(params, merge(trainable, frozen), frozen)
    return trainable, frozen


def param_shapes(params: tuple[ParamIR, ...]) -> tuple[dict, dict]:
    """(trainable, frozen) trees shaped as `init_params` makes them, each leaf a `jax.ShapeDtypeStruct`
    of its declared shape and dtype: nothing drawn or traced (the state's shapes before a restore)."""
    trainable: dict = {}
    frozen: dict = {}
    for p in params:
        set_path(frozen if p.frozen else trainable, p.path, jax.ShapeDtypeStruct(tuple(p.shape), jdt(p.dtype)))
    return trainable, frozen


def fill_copies(params: tuple[ParamIR, ...], sources: dict, frozen: dict) -> None:
    """Give each `:copy` leaf of `params` (`p.copy_of`) that is still None its own buffer holding
    the starting value of its source leaf, found in `sources` (the tree, trainable or frozen, that
    holds the sources' starting values), where that is known (not None): a reference model is the
    student before its first update, drawn or loaded. Its own buffer, so that donating the
    trainable tree to an update leaves it as it is."""
    for p in params:
        if p.copy_of is None:
            continue
        node, value = frozen, sources
        for k in p.path[:-1]:
            node = node.get(k, {}) if isinstance(node, dict) else {}
        for k in p.copy_of:
            value = value.get(k) if isinstance(value, dict) else None
        if node.get(p.path[-1]) is None and value is not None:
            set_path(frozen, p.path, jnp.copy(value))


def merge(a: dict, b: dict) -> dict:
    """The union of two nested dicts with disjoint leaves (trainable and frozen)."""
    out = dict(a)
    for k, v in b.items():
        if k in out and isinstance(out[k], dict) and isinstance(v, dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def flatten(tree: dict, prefix: tuple = ()) -> dict[tuple, jax.Array]:
    """Leaves of a nested dict by path."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out
