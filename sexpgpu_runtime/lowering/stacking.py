"""Stacked graphs as copies of the unstacked graph's body, each copy's ops on the unstacked shapes.

A stacked call takes its per-copy inputs stacked on a new leading axis ([S B ...]). `jax.vmap`
would batch each op instead, and XLA:CPU's choice of kernel depends on the shape: a reduction over
at least some thousands of f32 elements (and a dot of some shapes) goes to its YNNPACK library,
whose order of accumulation differs from XLA's own loops; a vmapped layer-norm's row means then
round differently from the same rows' means one microbatch at a time (docs/runtime.md,
"Stacking"). Two ways of running the copies, each where it keeps the bits:

* The generator's phases (`over_copies`): the unstacked body traced once, as the body of a
  `lax.scan` over the stack axis. One copy's temporaries are live at a time and the body is
  compiled once. Traced side by side instead, XLA's common-subexpression pass merged the copies'
  equal broadcast constants (gelu's four) into one buffer every copy read, which no library
  fusion takes in, so each became a buffer of the activations' size (examples/stdlib-bytes.sx's
  stacked `generate.step`: 17.8 MB of temporaries side by side, 7.3 MB in the loop).
* The training graph (`copy_of`, training_graphs.py `_group`): S copies of the unstacked body traced side by
  side, each copy's inputs behind optimization barriers. In a loop the gradient of an embedding
  (a scatter-add) inside the scan's body came out in other bits than unstacked, on one of 25
  random run files (tests/differential/stacking.py, seed 0, file 6); side by side it keeps
  them.
"""
from __future__ import annotations

import jax
from jax import lax


def copy_of(tree, i: int):
    """Copy `i` of a stacked tree (every array leaf [S ...]): each leaf's slice `[i]`, behind an
    optimization barrier (a buffer of the unstacked shape, which no op of the copy fuses into).
    One barrier per leaf, so that a leaf no copy reads is dropped from the graph's arguments, as
    the unstacked graph drops it (`jax.jit`'s `keep_unused=False`; one barrier over the whole tree
    would read every leaf)."""
    return jax.tree_util.tree_map(lambda x: lax.optimization_barrier(x[i]), tree)


def over_copies(fn, copies: int, stacked: tuple[int, ...]):
    """`fn` applied to each of `copies` copies, its arguments at positions `stacked` stacked ([S ...]
    leaves, S == `copies`; copy i reads each leaf's slice [i]), the others shared; the results
    stacked on a new leading axis. What `jax.vmap(fn, in_axes=...)` computes, with each copy's ops
    on the unstacked shapes (the body of a `lax.scan` of `copies` trips)."""
    def run(*args):
        def body(_, xs):
            it = iter(xs)
            return None, fn(*[next(it) if k in stacked else a for k, a in enumerate(args)])
        return lax.scan(body, None, [args[k] for k in stacked], length=copies)[1]
    run.__name__ = getattr(fn, "__name__", "copies")
    return run
