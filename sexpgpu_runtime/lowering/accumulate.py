"""Gradient accumulation inside the training graph: a later microbatch's gradients are added into the
running sum as the backward pass produces them, so no second gradient-sized buffer is ever live.

The training graph of every group after the step's first takes the running sum (donated to it on an
accelerator) and returns the new sum (sexpgpu_runtime.lowering.graphs `Graphs.train_group`):

* a repeated block's stacked parameters (`ir.Repeat`, lowered to one `lax.scan`) get their sum from
  `scan_summing`, a custom VJP around the scan whose backward scan carries the running sum and adds
  each layer's gradient slice into it in place (a one-slice scatter-add on the carry), so the stacked
  `[N ...]` gradient of the microbatch is never made;
* every other parameter's gradient is added to its sum as it is produced (`add_into`).

Each add is `sum + g` elementwise in the gradient's dtype, `g` behind an optimization barrier (so no
add is fused into the matmul that makes `g`), microbatch by microbatch: the additions, and the bits,
of `((g0 + g1) + g2) + ...`, as when each add was its own graph. The layer's gradient `g` is the one
`jax.vjp` of the layer body gives, with the residuals `jax.vjp` keeps under the layer's remat policy
(those that are the layer's own inputs read from the stack and the closed-over arguments, not
stored again), so the backward scan does the work and holds the memory of JAX's own transposed scan.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from sexpgpu_lang import ir


def add_into(total, g):
    """`total + g` elementwise (arrays of one dtype and shape), `g` behind an optimization barrier:
    the add is its own operation, never fused into the op that made `g`."""
    return total + lax.optimization_barrier(g)


def summable(e: ir.Repeat) -> bool:
    """Whether repeated block `e`'s body reads no parameters but its own layer's (every model call
    inside it is at a path under `e.path`) and holds no repeated block itself: then its backward scan
    can add into the running sum (`scan_summing`), the body being a function of the layer's slice,
    the carry and the other arguments alone."""
    n = len(e.path)
    todo, seen = list(e.body), set(map(id, e.body))
    while todo:
        x = todo.pop()
        if isinstance(x, ir.Repeat):
            return False
        if isinstance(x, ir.ModelCall) and tuple(x.path[:n]) != tuple(e.path):
            return False
        for c in ir.children(x):
            if id(c) not in seen:
                seen.add(id(c))
                todo.append(c)
    return True


def scan_summing(layer: Callable, count: int, carry, stacked, rest: list, sums, indexed: bool = False):
    """`count` layers in sequence, as `lax.scan(layer, carry, stacked)` would run them: layer `i` is
    `layer(p_i, h, rest)` with `p_i` slice `i` of every leaf of `stacked` ([count ...] arrays) and `h`
    the carry (with `indexed`, `layer(p_i, h, rest, i)`, `i` the layer's index as a traced i32
    scalar: LoRA dropout's masks differ by layer); returns the last carry.

    Differentiated, the cotangent it gives `stacked` is `sums + g` (`sums` has `stacked`'s tree,
    shapes and dtypes; `g` the layers' gradient), made by the backward scan adding layer `i`'s
    gradient into slice `i` of `sums` in place, as it is produced (one layer's gradient live at a
    time); `rest` (arrays: those of a float dtype get a cotangent, summed over the layers in reverse
    order as `lax.scan`'s transpose sums them) and `carry` get theirs as from `lax.scan`. `sums`
    itself is not differentiated. The residuals are those `jax.vjp` of `layer` keeps (its remat
    policy's), stacked over the layers, less those that are the layer's slice or an argument of
    `rest`: read from `stacked` and `rest` again, as `lax.scan`'s partial evaluation forwards them.
    """
    meta: dict = {}
    index = jnp.arange(count, dtype=jnp.int32) if indexed else None   # (None: no input scanned)

    def at(i):
        return layer if i is None else (lambda p, h, r: layer(p, h, r, i))

    def fwd_layer(rest, h, p, i):
        out, vjp = jax.vjp(at(i), p, h, rest)
        leaves, tree = jax.tree_util.tree_flatten(vjp)
        p_leaves, r_leaves = jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(rest)
        kinds, saved = [], []
        for x in leaves:
            k = next((("p", i) for i, y in enumerate(p_leaves) if y is x), None) or \
                next((("r", i) for i, y in enumerate(r_leaves) if y is x), None)
            if k is None:
                k = ("s", len(saved))
                saved.append(x)
            kinds.append(k)
        meta["tree"], meta["kinds"] = tree, kinds
        return out, saved

    @jax.custom_vjp
    def run(stacked, carry, rest, sums):
        return lax.scan(lambda h, xs: (at(xs[1])(xs[0], h, rest), None), carry, (stacked, index), length=count)[0]

    def fwd(stacked, carry, rest, sums):
        out, saved = lax.scan(lambda h, xs: fwd_layer(rest, h, *xs), carry, (stacked, index), length=count)
        return out, (stacked, rest, sums, saved)

    def bwd(res, ct):
        stacked, rest, sums, saved = res
        r_leaves, r_tree = jax.tree_util.tree_flatten(rest)
        floats = [jnp.issubdtype(x.dtype, jnp.inexact) for x in r_leaves]

        def bwd_layer(c, xs):
            ct_h, sums, ct_r = c
            i, saved_i = xs
            p_leaves = [lax.dynamic_index_in_dim(s, i, keepdims=False) for s in jax.tree_util.tree_leaves(stacked)]
            pick = {"p": p_leaves, "r": r_leaves, "s": saved_i}
            vjp = jax.tree_util.tree_unflatten(meta["tree"], [pick[k][j] for k, j in meta["kinds"]])
            gp, gh, gr = vjp(ct_h)
            # slice i of the sum plus the layer's gradient, in place: a scatter-add of one slice (one add
            # an element; XLA updates the carry's buffer, where a slice, add and update copies a layer)
            sums = jax.tree_util.tree_map(lambda a, g: a.at[i].add(lax.optimization_barrier(g)), sums, gp)
            ct_r = [a + g if f else a for a, g, f in zip(ct_r, jax.tree_util.tree_leaves(gr), floats)]
            return (gh, sums, ct_r), None

        ct_r0 = [jnp.zeros_like(x) if f else None for x, f in zip(r_leaves, floats)]
        (ct_carry, sums, ct_r), _ = lax.scan(bwd_layer, (ct, sums, ct_r0), (jnp.arange(count), saved), reverse=True)
        return sums, ct_carry, jax.tree_util.tree_unflatten(r_tree, ct_r), None

    run.defvjp(fwd, bwd)
    return run(stacked, carry, rest, sums)
