"""The run-time check of a generator's traced `categorical` temperature.

A constant `:temperature` that is negative, infinite or NaN is E-RAND-001 at
lint time; one the file computes (traced) can only be seen at run time. Only
a generator whose `:step` has such a draw (`traced_temperatures`) is
checked, and its trip graph then takes and returns one more output beside
the state: the run's record of the first bad temperature (`no_draw`,
updated by `note_draws` inside the graph). The trainer reads that record
when it reads the step's other records (the NaN-loss record, at a logged
row, a checkpoint, a pass and the end), never once per trip; `bad_draw`
turns a set record into the error. A generator without one compiles to the
graphs it always had.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sexpgpu_lang import ir

from .lowering import REMAT, Effects
from ..errors import BadDraw


def traced_temperatures(gen: ir.GenerateIR) -> tuple[tuple[int, int], ...]:
    """The `categorical` draws of the generator's `:step` (its model calls included) whose
    `:temperature` is traced, not a constant (a constant is checked at lint time: E-RAND-001):
    (draw place, source offset of the draw) in order of place, once per place. Draws inside a
    `repeat` block or a `:remat` model are left out: they are traced inside a `lax.scan` or
    `jax.checkpoint`, whose values cannot leave it. Empty: the generator is not checked."""
    found: dict[int, int] = {}
    stack = [gen.step.body]
    while stack:
        e = stack.pop()
        if isinstance(e, ir.Op) and e.name == "categorical" and "temperature" in dict(e.kwargs) \
                and "greedy" not in e.static:
            found.setdefault(e.static["place"], e.span.start)
        if isinstance(e, ir.Repeat) or (isinstance(e, ir.ModelCall) and e.remat in REMAT):
            stack.extend(e.args)   # the body runs in a scan or under a checkpoint
        else:
            stack.extend(ir.children(e))
    return tuple(sorted(found.items()))


def _fine(t):
    return jnp.isfinite(t) & (t >= 0)


def temperatures(fx: Effects, sites: tuple[tuple[int, int], ...]):
    """Traced inside the trip graph: the trip's temperature at each site of `sites`
    (`traced_temperatures`), f32 [len(sites)]: of a draw traced more than once (a `lambda`
    called twice), the first bad one, else the first; 0 (fine) for a draw that was not traced."""
    out = []
    for place, _ in sites:
        seen = fx.temperatures.get(place, [jnp.float32(0)])
        t = seen[0]
        for u in seen[1:]:
            t = jnp.where(_fine(t), u, t)
        out.append(t)
    return jnp.stack(out)


def no_draw(dp=None) -> tuple:
    """The record of the first bad traced temperature before any trip: (the context's `:step`
    when it was drawn, i64, -1 while every temperature so far was finite and 0 or more; the trip,
    i64; the site's index in `traced_temperatures`, i32; the temperature, f32), on the device (on
    every device of the mesh `dp`)."""
    rec = (jnp.asarray(-1, jnp.int64), jnp.asarray(-1, jnp.int64), jnp.asarray(-1, jnp.int32),
           jnp.asarray(0.0, jnp.float32))
    return rec if dp is None else dp.put_replicated(rec)


def draw_like() -> tuple:
    """`no_draw`'s shapes and dtypes (jax.ShapeDtypeStruct), to lower a checked trip graph abstractly."""
    return jax.eval_shape(no_draw)


def note_draws(record: tuple, temps, step, trip) -> tuple:
    """Traced inside the trip graph: `record` (`no_draw`) kept once set, else set to this trip's
    first bad temperature of `temps` (`temperatures`: [n], or [S n] for a stacked group, whose
    copies share the site; the first site in order of place, then the first copy). `step` is the
    context's `:step` (i64 scalar), `trip` the trip (i64 scalar)."""
    t = jnp.reshape(temps, (-1, temps.shape[-1]))
    bad = ~_fine(t)
    site_bad = jnp.any(bad, axis=0)
    site = jnp.argmax(site_bad).astype(jnp.int32)
    value = t[jnp.argmax(bad[:, site]), site]
    hit = jnp.any(site_bad) & (record[0] < 0)
    new = (jnp.asarray(step, jnp.int64), jnp.asarray(trip, jnp.int64), site, value)
    return tuple(jnp.where(hit, n, r) for n, r in zip(new, record))


def bad_draw(record: tuple, program: ir.Program, sites: tuple, pass_name: str | None = None) -> BadDraw | None:
    """The error a set `record` (`note_draws`) stands for, or None; reading it waits for the
    device. The step is 1-based as in metrics.jsonl (the context's `:step` + 1 in training; a pass,
    `pass_name`, runs at the step it follows, its context's `:step`)."""
    step, trip, site, value = (np.asarray(v).item() for v in jax.device_get(record))
    if step < 0:
        return None
    line, col = program.line_col(sites[site][1])
    where = f"{program.path}:{line}:{col}"
    return BadDraw(step if pass_name else step + 1, where, trip, value, pass_name)
