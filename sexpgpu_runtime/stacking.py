"""Stacked graphs as copies: `S` copies of an unstacked graph's body traced into one jitted function.

A stacked call takes its per-copy inputs stacked on a new leading axis ([S B ...]) and returns its
per-copy outputs the same way (or as a list, for the training graph's gradients). Inside, copy `i`
is the unstacked body traced once more on `copy_of(x, i)`: every op of a copy has exactly the shape
it has in the unstacked run, so XLA picks the same kernel for it. `jax.vmap` would batch each op
instead, and XLA:CPU's choice of kernel depends on the shape: a reduction over at least some
thousands of f32 elements (and a dot of some shapes) goes to its YNNPACK library, whose order of
accumulation differs from XLA's own loops; a vmapped layer-norm's row means then round differently
from the same rows' means one microbatch at a time (docs/runtime.md, "Stacking").

Each copy's inputs and outputs pass an optimization barrier, so that no slice of the stacked input
and no stacking of the outputs is fused into a copy's ops: a copy reads and writes whole buffers of
the unstacked shapes, as the unstacked graph reads its arguments and writes its results. The
copies share nothing but the parameters (and values computed from them alone, which XLA may
compute once: the same op on the same operands).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def copy_of(tree, i: int):
    """Copy `i` of a stacked tree (every array leaf [S ...]): each leaf's slice `[i]`, behind an
    optimization barrier (a buffer of the unstacked shape, which no op of the copy fuses into).
    One barrier per leaf, so that a leaf no copy reads is dropped from the graph's arguments, as
    the unstacked graph drops it (`jax.jit`'s `keep_unused=False`; one barrier over the whole tree
    would read every leaf)."""
    return jax.tree_util.tree_map(lambda x: lax.optimization_barrier(x[i]), tree)


def restack(copies: list):
    """The copies' outputs (trees of one structure, in copy order) stacked on a new leading axis,
    each copy's behind an optimization barrier first (so no stacking is fused into its ops)."""
    done = [lax.optimization_barrier(c) for c in copies]
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *done)


def over_copies(fn, copies: int, stacked: tuple[int, ...]):
    """`fn` applied to each of `copies` copies, its arguments at positions `stacked` stacked ([S ...]
    leaves, sliced per copy by `copy_of`), the others shared; the results stacked (`restack`).
    What `jax.vmap(fn, in_axes=...)` computes, with each copy's ops on the unstacked shapes."""
    def run(*args):
        outs = []
        for i in range(copies):
            outs.append(fn(*[copy_of(a, i) if k in stacked else a for k, a in enumerate(args)]))
        return restack(outs)
    run.__name__ = getattr(fn, "__name__", "copies")
    return run
