"""Stacked graphs as copies: the unstacked graph's body run once per copy, in a loop, in one jitted call.

A stacked call takes its per-copy inputs stacked on a new leading axis ([S B ...]) and returns its
per-copy outputs the same way. Inside, the unstacked body is traced once, as the body of a
`lax.scan` over the stack axis: every op of a copy has exactly the shape it has in the unstacked
run, so XLA picks the same kernel for it. `jax.vmap` would batch each op instead, and XLA:CPU's
choice of kernel depends on the shape: a reduction over at least some thousands of f32 elements
(and a dot of some shapes) goes to its YNNPACK library, whose order of accumulation differs from
XLA's own loops; a vmapped layer-norm's row means then round differently from the same rows' means
one microbatch at a time (docs/runtime.md, "Stacking").

A loop, not S copies of the body traced side by side: side by side, XLA's common-subexpression
pass merges the copies' equal broadcasts of a constant (gelu's four) into one buffer every copy
reads, which no library fusion takes in, so each became a buffer of the activations' size
(examples/stdlib-bytes.sx's stacked `generate.step`: 17.8 MB of temporaries against 4.5 MB
unstacked; in a loop 7.3 MB); and each copy held its own temporaries while the others ran. In the
loop one copy's temporaries are live at a time, and the body is compiled once, not S times.
"""
from __future__ import annotations

from jax import lax


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
