"""The check of a step's intermediates after a non-finite loss: which op's value went non-finite first.

The training graph keeps only the first non-finite loss (training_graphs.tally), so a run pays
nothing for this check until a loss is NaN or infinite. Then the run re-runs that microbatch
(`first_nonfinite_op`) from the same parameters (the update kept them from that step on), batch,
context and counter totals: the generator's phases (every trip), `prepare` and `objective`, op by op
and not jitted (`FiniteCheck`, the runtime's lowering with each op's value looked at as it is
made): a repeated block's layers one after another, no `jax.checkpoint`. Every floating value is
kept with the values it was made from, so the origin is found from the loss backwards: the loss's
op, then the first of its non-finite inputs' ops, and so on, to an op whose inputs were all finite
(a NaN a `where` hid does not count). Without such a chain (the loss is finite op by op, as XLA's
fused graph can round otherwise), the first non-finite value in evaluation order is named, or none.

An op of the standard library is named with the call of it in the run file (`rsqrt` inside
`rms-norm` at the call), since its own place is in prelude.sx.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from sexpgpu_lang import ir

from .context import Tracer, unpack_ctx
from .lora import needs_dropout
from .lowering import _Lowering, _materialise, _replace
from ..dtypes import jdt
from ..weights.params import merge


#: What most often makes each op's value non-finite from finite inputs, said after it.
LIKELY = {"/": "likely a division by 0", "log": "likely a log of 0 or of a negative",
          "sqrt": "likely a square root of a negative", "rsqrt": "likely the inverse root of 0 or of a negative",
          "pow": "likely 0 to a negative power, or an overflow", "exp": "likely an overflow: too large an exponent",
          "cross-entropy": "likely a label outside 0 to V-1, V the logits' last axis"}


@dataclass(frozen=True)
class Origin:
    """Where a step's values first went non-finite: op `op` (its registry name) at `offset` into the
    run file (the standard-library call's place when `stdlib` names the function it is inside), in
    phase `phase` (`objective`, `generate.finish` ...), giving `value` (its first non-finite entry:
    nan, inf or -inf); `from_finite` says every input it read was finite (it made the value)."""

    op: str
    offset: int
    stdlib: str | None
    phase: str
    value: float
    from_finite: bool
    trip: int | None = None

    def describe(self, program: ir.Program) -> str:
        """One clause: "`/` at run.sx:58:34 (in `generate.finish`) gave nan from finite inputs (likely a
        division by 0)"."""
        line, col = program.line_col(self.offset)
        what = f"`{self.op}` inside `{self.stdlib}`, called" if self.stdlib else f"`{self.op}`"
        phase = self.phase + (f", trip {self.trip}" if self.trip is not None else "")
        likely = LIKELY.get(self.op)
        made = (f"from finite inputs ({likely})" if likely else "from finite inputs") if self.from_finite else \
            "(an input was already non-finite)"
        return f"{what} at {program.path}:{line}:{col} (in `{phase}`) gave {self.value} {made}"


@dataclass
class _Made:
    """One op's evaluation: its node, place, outputs and inputs (floating arrays), and whether an
    output holds a non-finite entry (and the first such entry)."""

    e: ir.Op
    stdlib: tuple | None
    phase: str
    trip: int | None
    outs: list
    ins: list
    bad: float | None


def _leaves(v) -> list:
    return [x for x in jax.tree_util.tree_leaves(v) if isinstance(x, jax.Array)]


def _first_bad(x) -> float | None:
    """The first non-finite entry of a floating array, or None (None for any other)."""
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return None
    a = np.asarray(jax.device_get(x))
    bad = ~np.isfinite(a)
    return float(a.reshape(-1)[int(np.argmax(bad.reshape(-1)))]) if bad.any() else None


class FiniteCheck(_Lowering):
    """The runtime's lowering run op by op, outside `jax.jit`: each op's output is looked at as it is
    made (`made`, in evaluation order, keeping every floating value alive for the walk back); a
    repeated block is its layers in a Python loop, a remat policy ignored."""

    def __init__(self, fx, made: list, phase: str, trip: int | None = None):
        super().__init__(fx)
        self.made, self.phase, self.trip = made, phase, trip

    def op(self, e: ir.Op, env: dict):
        args = [_materialise(a, self.eval(a, env)) for a in e.args]
        kwargs = {k: self.eval(v, env) for k, v in e.kwargs}
        out = self.lowered(e, args, kwargs)
        outs = _leaves(out)
        bad = next((b for b in map(_first_bad, outs) if b is not None), None)
        self.made.append(_Made(e, self.stdlib_site, self.phase, self.trip, outs, _leaves([args, kwargs]), bad))
        return out

    def call(self, e: ir.ModelCall, params, args: list):
        return ir.Interpreter.call(self, e, params, args)   # no jax.checkpoint: nothing is differentiated

    def repeat(self, e: ir.Repeat, params, args: list):
        stacked = params
        for k in e.path:
            stacked = stacked[k]
        carry, rest = args[0], list(args[1:])
        for layer in range(e.count):
            sliced = jax.tree_util.tree_map(lambda x: x[layer], stacked)
            index = jnp.asarray(layer, jnp.int32) if self.fx.dropout_key is not None else None   # LoRA dropout's
            carry = self._in_layer(index, lambda: self.call(e, _replace(params, e.path, sliced), [carry] + rest))
        return carry


def _phase(phase: ir.Phase, args: list, params, fx, made: list, trip: int | None = None):
    env = {ir.Interpreter.PARAMS: params}
    env.update(zip(phase.params, args))
    return FiniteCheck(fx, made, phase.name, trip).eval(phase.body, env)


def _origin(made: list[_Made], loss) -> _Made | None:
    """The op whose non-finite value reached the loss first (the walk back from the loss), else the
    first op in evaluation order with a non-finite value, else None."""
    by_id = {}
    for m in made:
        for x in m.outs:
            by_id[id(x)] = m
    at = by_id.get(id(loss)) if isinstance(loss, jax.Array) else None
    seen = set()
    while at is not None and at.bad is not None and id(at) not in seen:
        seen.add(id(at))
        before = [by_id[id(x)] for x in at.ins if id(x) in by_id and by_id[id(x)].bad is not None]
        if not before:
            return at
        at = before[0]
    return next((m for m in made if m.bad is not None), None)


def first_nonfinite_op(program: ir.Program, tracer: Tracer, trainable, frozen, batch: dict, gen_rows,
                       rows, base: dict, counter_types: dict, joined=None) -> Origin | None:
    """Re-run one microbatch op by op and say where its values first went non-finite (`Origin`), or
    None when every value was finite. `batch` is the loader's batch (numpy), `gen_rows` the context
    row the generator read ([1 6] i64: a stacked group's first copy's), `rows` the microbatch's own
    ([1 6] i64), `base` the counter totals it started from, `counter_types` their dtypes (name ->
    dtype name), `joined` the batch after the generator to the batch with what the host adds (the
    `:reward` rewards: run/rewards.py), or None. Deterministic: the same state, batch and draws as the
    training graph's."""
    params = merge(trainable, frozen)
    made: list[_Made] = []
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    gen = program.generate
    if gen is not None:
        gctx = unpack_ctx(jnp.asarray(gen_rows))
        state = _phase(gen.init, [batch, gctx], params, tracer.fx(True), made)
        state = {k: state[k] for k in gen.state.keys}
        for t in range(gen.trips):   # every trip: the rows `:until` finished keep their bits (docs/language.md)
            out = _phase(gen.step, [state, jnp.asarray(t, jnp.int64), gctx], params, tracer.fx(True), made, t)
            state = {k: out[k] for k in gen.state.keys}
        out = _phase(gen.finish, [state, gctx], params, tracer.fx(True), made) if gen.finish is not None else state
        batch = {**batch, **out}
        if joined is not None:
            batch = joined(batch)
    ctx = unpack_ctx(jnp.asarray(rows))
    fx = tracer.fx(dropout_ctx=ctx if needs_dropout(program) else None)   # the masks the training graph drew (lora.py)
    inputs = _phase(program.prepare, [batch, ctx], params, fx, made) if program.prepare is not None else batch
    octx = dict(ctx)
    octx.update({c: base[c] + jnp.asarray(fx.counters.get(c, 0)).astype(jdt(d)) for c, d in counter_types.items()})
    loss = _phase(program.objective, [inputs, octx], params, fx, made)
    m = _origin(made, loss)
    if m is None:
        return None
    offset, stdlib = (m.e.span.start, None) if m.stdlib is None else (m.stdlib[1].start, m.stdlib[0])
    return Origin(m.e.name, offset, stdlib, m.phase, m.bad, not any(
        b is not None for b in map(_first_bad, m.ins)), m.trip)
