"""The step's graphs: each phase of the IR traced into one jitted function.

Per step and per group of microbatches (DESIGN.md section 5):
`generate.init`, `generate.step` (called `:trips` times from the host loop,
the trip an i64 array so it never retraces), `generate.finish`, then the
training graph (prepare, objective, `jax.value_and_grad`; it also adds the
counters to their totals and keeps the first non-finite loss); each unstacked
group after the first runs `train summing`, the training graph that adds its
gradients into the one running sum (donated to it) as its backward pass makes
them (sexpgpu_runtime.lowering.accumulate), and after a stacked group the `accumulate`
graph adds its copies' gradients into the sum, in microbatch order; after the last group, one update graph
scales the sum and takes the optax step. So one gradient-sized buffer is held
across groups however many microbatches there are, and the additions are
`((g0 + g1) + g2) + ...`, those of summing the list of every gradient. A run that stacks `S` microbatches
runs each generator phase's unstacked body once per copy in a loop, and traces `S` copies of the
training graph's body side by side, inside each call (stacking.py), the parameters and (in the
generator) the context scalars shared, each copy's ops on the shapes of the unstacked run (not
`jax.vmap`, whose batched shapes XLA:CPU gives other kernels); each copy's gradient is added in
microbatch order, so the bits equal an unstacked run's.

Every graph that reads the context takes the group's context rows, one [S 6]
i64 array (`unpack_ctx`), not six scalars. On one device `generate.init`
(or, without a generator, the training graph) takes the group's batch and
rows as numpy, so its own call transfers them: no separate call or graph
puts a group on the device.

`Graphs.traces` counts how often each graph was traced: once per run.
"""
from __future__ import annotations

import collections
from collections import Counter
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from sexpgpu_lang import ir
from sexpgpu_lang.language import CONTEXT_KEYS
from sexpgpu_lang.types import PlistType, TensorType

from .accumulate import add_into
from ..devices.device import device_budget
from .draw_check import no_draw, note_draws, temperatures, traced_temperatures
from .dtypes import JAX_DTYPES, jdt, mismatch
from ..errors import InternalTypeError
from .lowering import Effects, run_phase
from ..weights.params import merge
from .stacking import copy_of, over_copies


#: How many trips late the trip loop reads `:until`'s flag (`Graphs.trips`): trip t's flag is read
#: before trip t + UNTIL_LAG is dispatched, while trips t+1 ... t+UNTIL_LAG-1 are queued.
UNTIL_LAG = 3

#: The context keys and their numpy dtypes, in the order of a context row (`language.CONTEXT_KEYS`).
_CTX_FIELDS = tuple((k, np.dtype(JAX_DTYPES[d])) for k, d in CONTEXT_KEYS)


def make_ctx(step: int, microbatch: int, records: int, stage: int = 0, stage_records: int | None = None,
             pass_number: int = 0) -> dict:
    """The context scalars of one microbatch, keyed and typed as `language.CONTEXT_KEYS` says (`:step`
    i64, `:microbatch` i32, ...; DESIGN.md section 2): the values of one context row, unpacked.
    `pass_number` is `:pass`: 0 in training, k for the file's k-th evaluation pass."""
    values = (step, microbatch, records, stage, records if stage_records is None else stage_records, pass_number)
    return {k: dt.type(v) for (k, dt), v in zip(_CTX_FIELDS, values, strict=True)}


def unpack_ctx(rows, copy: int = 0) -> dict:
    """Traced inside every graph that reads the context: the context scalars of copy `copy`, unpacked
    from the context rows `rows`, [S 6] i64 (one row of `make_ctx`'s values per copy of a stacked group,
    [1 6] else), with their dtypes (`make_ctx`). A stacked training graph unpacks each copy's row; the
    generator's copies share the first copy's (the step's context). One [S 6] array per call instead
    of six scalars: on one device the rows go over with the batch in `generate.init`'s call (or the
    training graph's), and no separate graph unpacks them."""
    return {k: rows[copy, i].astype(dt) for i, (k, dt) in enumerate(_CTX_FIELDS)}


def _check(name: str, value, t) -> None:
    why = mismatch(value, t)
    if why:
        raise InternalTypeError(f"internal error: graph `{name}` returns a value whose type differs from the IR: {why}")


@dataclass(frozen=True)
class Layout:
    """How a step's microbatches are grouped: `stack` copies per call, `groups` calls."""

    microbatches: int
    stack: int

    @property
    def groups(self) -> int:
        """Calls per step: microbatches / stack."""
        return self.microbatches // self.stack


def layout_of(program: ir.Program, dp=None) -> Layout:
    """Stack `:stack` microbatches per call when the generator allows it (W-STACK-001 otherwise).

    `:stack :auto` takes the largest degree whose estimated peak memory fits
    the device (sexpgpu_lang.explain.choose_stack; 16 GiB where the backend
    reports no limit, as the CPU does); on the mesh `dp` (a
    sharding.DataParallel), the peak one device of it holds.
    """
    run = program.run
    stack = run.stack
    if run.stack_auto:
        from sexpgpu_lang.explain import choose_stack
        from sexpgpu_lang.mesh import with_mesh
        budget, _ = device_budget()
        planned = program if dp is None else with_mesh(program, dp.devices, dp.fsdp)
        stack, _ = choose_stack(planned, budget or 16 * 2**30)
    stack = stack if program.stackable else 1
    if run.microbatches % stack:
        stack = 1
    return Layout(run.microbatches, stack)


class Graphs:
    """The jitted graphs of one run. Build once; every call after the first reuses the trace."""

    def __init__(self, program: ir.Program, optimizer: optax.GradientTransformation,
                 selected: frozenset = frozenset(), donate: bool = False, dp=None):
        self.p = program
        self.dp = dp   # a sharding.DataParallel, or None on one device (then nothing below changes)
        self.opt = optimizer
        self.selected = selected
        self.layout = layout_of(program, dp)
        self.traces: Counter = Counter()
        self.seed = program.run.seed
        self.counter_types = self._counter_types()
        S = self.layout.stack
        gen = program.generate
        dn = donate
        # The traced temperatures the trips check (draw_check.py): none, and the graphs are as without it.
        self.draw_sites = traced_temperatures(gen) if gen is not None else ()
        self.draw = None   # the record of the first bad one after the last `trips` (None: nothing checked)
        if gen is not None:
            init, step, finish = self._gen_fns(gen)
            checked = self._draw_checked if self.draw_sites else (lambda f: f)
            # generate.init also returns the group's batch and context rows: on one device they arrive as
            # numpy, and this call's copies on the device are what the group's later calls read.
            self.gen_init_1 = jax.jit(self._counted("generate.init", self._start(init)))
            self.gen_step_1 = jax.jit(self._counted("generate.step", checked(step)), donate_argnums=(2,) if dn else ())
            self.gen_finish_1 = jax.jit(self._counted("generate.finish", finish))
            if S > 1:
                # each phase once per copy, the batch and the state stacked, the rest shared (stacking.py).
                self.gen_init = jax.jit(self._counted("generate.init stacked", self._start(over_copies(init, S, (2,)))))
                stacked_step = over_copies(step, S, (2,))
                if gen.until is not None:   # the group's trips end once every copy's `:until` holds
                    stacked_step = self._all_done(stacked_step)
                self.gen_step = jax.jit(self._counted("generate.step stacked", checked(stacked_step)),
                                        donate_argnums=(2,) if dn else ())
                self.gen_finish = jax.jit(self._counted("generate.finish stacked", over_copies(finish, S, (2,))))
            else:
                self.gen_init, self.gen_step, self.gen_finish = self.gen_init_1, self.gen_step_1, self.gen_finish_1
        self.grads = jax.jit(self._counted("train" + (" stacked" if S > 1 else ""), self._grads))
        self.grads_summing = jax.jit(self._counted("train summing", self._grads_summing),
                                     donate_argnums=(6,) if dn else ())
        # The new parameters and optimizer state are sharded as they came in: replicated (XLA all-reduced
        # the gradients inside the training graph, whose batch was split along the mesh's `data` axis),
        # or under FSDP split as sharding.DataParallel.state_sharding says.
        if dp is not None and dp.fsdp:
            self.update = self._sharded_update(dn)
        else:
            out = {} if dp is None else {"out_shardings": dp.replicated}
            self.update = jax.jit(self._counted("update", self._update), donate_argnums=(0, 1) if dn else (), **out)
        # The running sum is donated to each add; the first group's first gradient starts it (no add of 0).
        self.accumulate = jax.jit(self._counted("accumulate", self._accumulate), donate_argnums=(0,) if dn else ())
        self.accumulate_first = jax.jit(self._counted("accumulate first", self._accumulate),
                                        donate_argnums=(0,) if dn else ())
        self.passes = {ps.name: jax.jit(self._counted(f"pass {ps.name}", self._eval_fn(ps))) for ps in program.passes}

    # -- bookkeeping --------------------------------------------------------------------------
    def _counted(self, name, fn):
        def traced(*args):
            self.traces[name] += 1
            return fn(*args)
        traced.__name__ = name.replace(" ", "_").replace(".", "_")
        return traced

    def _fx(self, in_generator=False) -> Effects:
        return Effects(seed_key=jax.random.key(self.seed), selected=self.selected, in_generator=in_generator)

    def _counter_types(self) -> dict[str, str]:
        ctx_t = self.p.objective.param_types[1]
        out = {}
        for c in self.p.counters:
            t = ctx_t.get(c) if isinstance(ctx_t, PlistType) else None
            out[c] = t.dtype if isinstance(t, TensorType) else "f32"
        return out

    def zero_counters(self) -> dict:
        """Run-long counter totals at the start of a run."""
        return {c: jnp.zeros((), jdt(d)) for c, d in self.counter_types.items()}

    def no_bad(self) -> tuple:
        """The record the training graph keeps of the first non-finite loss (`_tally`), before any
        step: (i64 -1, f32 0), on the device (every device of the mesh)."""
        bad = (jnp.asarray(-1, jnp.int64), jnp.asarray(0.0, jnp.float32))
        return bad if self.dp is None else self.dp.put_replicated(bad)

    @staticmethod
    def _tally(counters, deltas, losses, step, bad):
        """A group's bookkeeping, traced inside its training graph (nothing is read back to the host):

        * `counters` (name -> scalar total) plus each copy's `deltas` (a list of such dicts, in
          microbatch order), added one copy at a time. The deltas pass an optimization barrier first:
          a delta XLA sees as a constant would be folded, `(t + c0) + c1` becoming `t + (c0 + c1)`,
          which rounds differently; so the totals are those of `counters[c] + delta[c]`, one add per
          copy, stacked or not, as when each add was its own call.
        * `bad`, (i64 step, f32 value): the step (1-based, `step` the group's context `:step`, an
          i64 scalar) and value of the first non-finite entry of `losses` (f32 scalars in
          microbatch order), kept once set; step -1 while every loss so far was finite.
        Returns (counters, bad).
        """
        for d in jax.lax.optimization_barrier(list(deltas)):
            counters = {c: counters[c] + d[c] for c in counters}
        vals = jnp.stack([jnp.asarray(v, jnp.float32) for v in losses])
        nonfinite = ~jnp.isfinite(vals)
        hit = jnp.any(nonfinite) & (bad[0] < 0)
        done = step.astype(jnp.int64) + 1
        return counters, (jnp.where(hit, done, bad[0]), jnp.where(hit, vals[jnp.argmax(nonfinite)], bad[1]))

    # -- generator ----------------------------------------------------------------------------
    def _records(self, state):
        """The generator's state stays split along the mesh's `data` axis, one slice of records per device."""
        if self.dp is None:
            return state
        return self.dp.constrain_records(state, self.p.loaders[self.p.run.loader].batch)

    def _all_done(self, stacked_step):
        """A stacked trip whose `:until` flag is whether every copy's holds (the temperatures, with
        `draw_sites`, passed on)."""
        def all_done(out):
            st, done = out
            return st, jnp.all(done)

        def step(*args):
            out = stacked_step(*args)
            return (all_done(out[0]), out[1]) if self.draw_sites else all_done(out)
        return step

    def _draw_checked(self, step):
        """The trip graph of a generator with traced temperatures (`draw_sites`): `step`'s output and
        the run's record of the first bad one (`draw_check.no_draw`, one more argument), updated."""
        def checked(trainable, frozen, state, trip, rows, draw):
            out, temps = step(trainable, frozen, state, trip, rows)
            return out, note_draws(draw, temps, rows[0, 0], trip)
        return checked

    def _gen_fns(self, gen: ir.GenerateIR):
        sites = self.draw_sites

        def init(trainable, frozen, batch, rows):
            out = run_phase(gen.init, [batch, unpack_ctx(rows)], merge(trainable, frozen), self._fx(True))
            out = {k: out[k] for k in gen.state.keys}
            _check("generate.init", out, gen.state)
            return self._records(out)

        def step(trainable, frozen, state, trip, rows):
            """The new state (and, with `sites`, the trip's temperatures: `draw_check.temperatures`)."""
            fx = self._fx(True)
            out = run_phase(gen.step, [state, trip, unpack_ctx(rows)], merge(trainable, frozen), fx)
            out = {k: out[k] for k in gen.state.keys}
            _check("generate.step", out, gen.state)
            return (self._records(out), temperatures(fx, sites)) if sites else self._records(out)

        def step_until(trainable, frozen, state, trip, rows):
            """`:step`, then `:until` on the new state: (state, bool scalar), one graph per trip."""
            out = next_state(trainable, frozen, state, trip, rows)
            out, temps = out if sites else (out, None)
            done = run_phase(gen.until, [out, unpack_ctx(rows)], merge(trainable, frozen), self._fx(True))
            flagged = (out, jnp.asarray(done, jnp.bool_))
            return (flagged, temps) if sites else flagged

        next_state = step
        if gen.until is not None:
            step = step_until

        def finish(trainable, frozen, state, rows):
            if gen.finish is None:
                return state
            out = run_phase(gen.finish, [state, unpack_ctx(rows)], merge(trainable, frozen), self._fx(True))
            _check("generate.finish", out, gen.out)
            return self._records(out)

        return init, step, finish

    @staticmethod
    def _start(init):
        def start(trainable, frozen, batch, rows):
            return batch, rows, init(trainable, frozen, batch, rows)
        return start

    def generate(self, trainable, frozen, batch, rows, stacked: bool, on_trip=None, draw=None):
        """Run the generator on one group (or one batch): `generate.init`, the trips, `generate.finish`.

        `batch` holds the loader's fields ([S B ...] when stacked) and `rows` the context rows, [S 6]
        i64 (`make_ctx`'s values per copy; `unpack_ctx`), as numpy on one device: `generate.init`'s call
        puts both on the device and returns the device copies, which every later call of the group
        reads (one transfer per group); on a mesh they come already placed. Returns (batch, rows,
        made), device arrays; nothing here waits for the device. `draw`: see `trips`."""
        init, finish = (self.gen_init, self.gen_finish) if stacked else (self.gen_init_1, self.gen_finish_1)
        batch, rows, state = init(trainable, frozen, batch, rows)
        state = self.trips(trainable, frozen, state, rows, stacked, on_trip, draw)
        return batch, rows, finish(trainable, frozen, state, rows)

    def trips(self, trainable, frozen, state, rows, stacked: bool, on_trip=None, draw=None):
        """The trip loop: for each trip t, `on_trip(t)` (the trainer's stop check) and one call of the
        jitted `generate.step` (stacked or not) with the trip as an i64 device array, the state staying on
        the device. Returns the state after the last trip (the generator's state keys, device arrays).
        Nothing here waits for the device: each call is queued (asynchronous dispatch).

        With `:until`, each trip's call also returns whether `:until` holds after it; the loop reads
        trip t's flag only before trip t + UNTIL_LAG, so it waits for a trip that finished while
        later ones are queued, never for the one just dispatched, and stops dispatching once a flag
        holds. The trips run after the flag held (at most UNTIL_LAG - 1) see a state whose finished
        rows the file freezes, so the result is the bits of all `:trips` (docs/language.md).
        `self.trips_run` is how many trips the last call ran.

        With traced temperatures to check (`draw_sites`), each trip also takes and returns the
        record of the first bad one (`draw_check.no_draw`): `draw`, a fresh one when None; `self.draw`
        is the record after the last trip, still on the device (read with `draw_check.bad_draw`)."""
        step = self.gen_step if stacked else self.gen_step_1
        until = self.p.generate.until is not None
        if self.draw_sites and draw is None:
            draw = no_draw(self.dp)
        flags: collections.deque = collections.deque()
        self.trips_run = 0
        for t, trip in enumerate(self.trip_values):
            if until and len(flags) >= UNTIL_LAG and bool(flags.popleft()):
                break
            if on_trip is not None:
                on_trip(t)
            if self.draw_sites:
                state, draw = step(trainable, frozen, state, trip, rows, draw)
            else:
                state = step(trainable, frozen, state, trip, rows)
            if until:
                state, done = state
                flags.append(done)
            self.trips_run = t + 1
        self.draw = draw if self.draw_sites else None
        return state

    @property
    def trip_values(self):
        """The trips as i64 device arrays, made once (a Python int would retrace)."""
        if not hasattr(self, "_trips"):
            self._trips = [jnp.asarray(t, dtype=jnp.int64) for t in range(self.p.generate.trips)]
        return self._trips

    # -- training -----------------------------------------------------------------------------
    def _loss(self, prepare: ir.Phase | None, objective: ir.Phase):
        counters = tuple(self.counter_types)

        def loss(trainable, frozen, batch, ctx, base, sums=None, summed=None):
            params = merge(trainable, frozen)
            fx = self._fx()
            if sums:   # running sums for repeated blocks' backward scans (`_grads_summing`)
                fx.sums = dict(sums)
            inputs = run_phase(prepare, [batch, ctx], params, fx) if prepare is not None else batch
            deltas = {c: jnp.asarray(fx.counters.get(c, 0)).astype(jdt(self.counter_types[c])) for c in counters}
            octx = dict(ctx)
            octx.update({c: base[c] + deltas[c] for c in counters})
            value = run_phase(objective, [inputs, octx], params, fx)
            _check(objective.name, value, objective.out)
            if summed is not None:   # the paths whose backward scan added into their running sum
                summed.extend(p for p in sums if p not in fx.sums)
            return value.astype(jnp.float32), (fx.metrics, fx.diagnostics, deltas)

        return loss

    def _group(self, trainable, frozen, batches, rows, base):
        """Per-copy loss, gradient, reports and counter deltas of one group, in microbatch order: one
        copy of the unstacked body per microbatch, traced side by side (stacking.py `copy_of`), copy i
        reading its own context row and the counter totals after the copies before it (each copy's
        deltas added one at a time, behind a barrier as in `_tally`, so the totals are those the
        unstacked run passes from call to call)."""
        S = self.layout.stack
        vg = jax.value_and_grad(self._loss(self.p.prepare, self.p.objective), has_aux=True)
        if S == 1:
            (l, (m, d, dl)), g = vg(trainable, frozen, batches, unpack_ctx(rows), base)
            return [l], [g], [m], [d], [dl]
        out = []
        for i in range(S):
            (l, (m, d, dl)), g = vg(trainable, frozen, copy_of(batches, i), unpack_ctx(rows, i), base)
            out.append(lax.optimization_barrier((l, g, m, d, dl)))
            base = {c: base[c] + v for c, v in lax.optimization_barrier(dl).items()}
        return tuple([o[k] for o in out] for k in range(5))

    def _grads(self, trainable, frozen, batches, rows, base, bad=None):
        """The training graph of one group: (losses, gradients, metrics, diagnostics, counter deltas), one
        entry per copy in microbatch order; `rows` are the group's context rows, [S 6] i64 (`unpack_ctx`).
        With `bad` (the trainer's record of the first non-finite loss, `no_bad`), the counter totals
        after the group and the updated record replace the deltas: (losses, gradients, metrics,
        diagnostics, totals, bad); see `_tally`."""
        l, g, m, d, dl = self._group(trainable, frozen, batches, rows, base)
        if self.dp is not None and self.dp.fsdp:
            # Each gradient split as its parameter is: XLA reduce-scatters instead of all-reducing.
            g = [self.dp.constrain_state(x) for x in g]
        if bad is None:
            return l, g, m, d, dl
        totals, bad = self._tally(base, dl, l, unpack_ctx(rows)["step"], bad)
        return l, g, m, d, totals, bad

    def _grads_summing(self, trainable, frozen, batch, rows, base, bad, total):
        """The training graph of an unstacked group after the step's first: as `_grads` with `bad`,
        but the gradients added into `total` (the running sum, donated on an accelerator) as they are
        produced, so that no second gradient-sized buffer is live: a repeated block's stacked
        parameters in its backward scan (`accumulate.scan_summing`, through `Effects.sums`), every
        other parameter's gradient as it comes (`accumulate.add_into`). Each add is `total + g`
        elementwise, as `_accumulate` makes it (the bits of summing the list of gradients).
        Returns (losses, total, metrics, diagnostics, totals, bad), one copy's entries in lists."""
        ctx = unpack_ctx(rows)
        loss = self._loss(self.p.prepare, self.p.objective)
        sums = {p: sub for p, sub in _subtrees(total, ()) if p}
        summed: list = []
        vg = jax.value_and_grad(loss, has_aux=True)
        (l, (m, d, dl)), g = vg(trainable, frozen, batch, ctx, base, sums, summed)
        total = _sum_into(total, g, frozenset(summed), ())
        if self.dp is not None and self.dp.fsdp:
            total = self.dp.constrain_state(total)
        totals, bad = self._tally(base, [dl], [l], ctx["step"], bad)
        return [l], total, [m], [d], totals, bad

    def train_group(self, total, trainable, frozen, batch, rows, counters, bad):
        """One group's training graph and the running sum of the gradients after it (`total` None
        for the step's first group): an unstacked later group's graph adds into the sum itself
        (`grads_summing`, traced as `train summing`), others return their gradients for `add_group`.
        Returns (losses, total, metrics, diagnostics, counter totals, bad) as `_grads` with `bad`
        returns them, the new sum in the gradients' place. Nothing here waits for the device."""
        if total is not None and self.layout.stack == 1:
            return self.grads_summing(trainable, frozen, batch, rows, counters, bad, total)
        l, gs, m, d, counters, bad = self.grads(trainable, frozen, batch, rows, counters, bad)
        return l, self.add_group(total, gs), m, d, counters, bad

    def _sharded_update(self, donate: bool):
        """The update graph under FSDP: jitted at its first call, when the state's tree is known, with
        `out_shardings` the parameters' and optimizer state's FSDP shardings."""
        jitted = []

        def update(trainable, opt_state, total):
            if not jitted:
                out = self.dp.state_shardings((trainable, opt_state))
                jitted.append(jax.jit(self._counted("update", self._update), out_shardings=out,
                                      donate_argnums=(0, 1) if donate else ()))
            return jitted[0](trainable, opt_state, total)
        return update

    @staticmethod
    def _accumulate(total, grads):
        """`total` plus each gradient of `grads` (a list, in microbatch order), one add at a time:
        `((total + g0) + g1) + ...`, every add elementwise in the gradient's dtype. Its own graph, apart
        from the training graph, so that no add is fused into a matmul and a stacked and an unstacked run
        add exactly the same arrays in the same order."""
        for g in grads:
            total = jax.tree_util.tree_map(jnp.add, total, g)
        return total

    def add_group(self, total, grads: list):
        """The running sum after one group: `grads` (the group's gradients, in microbatch order) added
        to `total`, or, for the step's first group (`total` None), to its first gradient. One trace for
        the first group (`accumulate first`, none at all when it has one copy) and one for the others
        (`accumulate`); the sum is donated on an accelerator. Nothing here waits for the device."""
        if total is None:
            total, grads = grads[0], grads[1:]
            return self.accumulate_first(total, grads) if grads else total
        return self.accumulate(total, grads)

    def _update(self, trainable, opt_state, total):
        """Average the microbatches' summed gradient (`add_group`) and take one optax step."""
        scale = 1.0 / self.layout.microbatches
        total = jax.tree_util.tree_map(lambda g: g * jnp.asarray(scale, g.dtype), total)
        updates, opt_state = self.opt.update(total, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state

    # -- passes -------------------------------------------------------------------------------
    def _eval_fn(self, ps: ir.PassIR):
        loss = self._loss(ps.prepare, ps.objective)

        def evaluate(trainable, frozen, batch, rows, base):
            value, (metrics, diags, _) = loss(trainable, frozen, batch, unpack_ctx(rows), base)
            return value, metrics
        return evaluate


def _subtrees(tree, path: tuple):
    """Every (path, subtree) of a nested dict, `tree` itself first (path ())."""
    yield path, tree
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _subtrees(v, path + (k,))


def _sum_into(total, g, summed: frozenset, path: tuple):
    """`total + g` leaf by leaf (`accumulate.add_into`), but `g` itself under a path of `summed` (there
    the backward scan made the sum already)."""
    if path in summed:
        return g
    if isinstance(total, dict):
        return {k: _sum_into(v, g[k], summed, path + (k,)) for k, v in total.items()}
    return add_into(total, g)
