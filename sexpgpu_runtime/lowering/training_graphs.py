"""The training graphs of a step: the training graph of a group of microbatches (prepare,
objective, `jax.value_and_grad`), the running sum of the gradients across groups, the update
graph, and each evaluation pass's graph.

Each unstacked group after the first runs `train summing`, the training graph that adds its
gradients into the one running sum (donated to it) as its backward pass makes them
(sexpgpu_runtime.lowering.accumulate); after a stacked group the `accumulate` graph adds its
copies' gradients into the sum, in microbatch order; after the last group, one update graph scales
the sum and takes the optax step. So one gradient-sized buffer is held across groups however many
microbatches there are, and the additions are `((g0 + g1) + g2) + ...`, those of summing the list
of every gradient. The training graph also adds the counters to their totals and keeps the first
non-finite loss (`tally`), so nothing is read back to the host; from that step on the update keeps
the parameters as they were (`_update`), so the run's last state still holds the parameters the bad
step read, which the check of its intermediates re-runs it from (finite_check.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax import lax

from sexpgpu_lang import ir
from sexpgpu_lang.types import PlistType, TensorType

from .accumulate import add_into
from .context import Tracer, check_result, unpack_ctx
from ..dtypes import jdt
from .lora import needs_dropout
from .lowering import run_phase
from ..weights.params import merge
from .stacking import copy_of


class TrainingGraphs:
    """The jitted training graphs of one run: `grads` (a group's training graph), `grads_summing`
    (an unstacked later group's, adding into the running sum), `accumulate` and `accumulate first`
    (a group's gradients into the sum), `update`, and `passes` (name -> its graph). Built once."""

    def __init__(self, program: ir.Program, optimizer: optax.GradientTransformation, layout, tracer: Tracer,
                 donate: bool = False, dp=None):
        self.p = program
        self.dp = dp   # a sharding.DataParallel, or None on one device (then nothing below changes)
        self.opt = optimizer
        self.layout = layout
        self.tracer = tracer
        self.counter_types = counter_types(program)
        self.dropout = needs_dropout(program)   # LoRA dropout: the forward's adapters unmerged (lora.py)
        # `:samples` names computed in the graph by where (ir.SamplesIR.computed), their first rows one more
        # entry of the loss's aux; with none (no `:samples`, or only the batch's) the outputs are as without.
        self.keep, self.sample_rows = _keep(program.run.samples)
        self.last_kept: dict = {}   # the kept values of the last `train_group` of a step's first group
        # The names of the metrics and diagnostics the training graph reports, in row order, set when it
        # is traced: the record of the first non-finite one (`tally`) keeps its index into these.
        self.report_names: tuple[str, ...] = ()
        S = layout.stack
        dn = donate
        counted = tracer.counted
        self.grads = jax.jit(counted("train" + (" stacked" if S > 1 else ""), self._grads))
        self.grads_summing = jax.jit(counted("train summing", self._grads_summing),
                                     donate_argnums=(6,) if dn else ())
        # The new parameters and optimizer state are sharded as they came in: replicated (XLA all-reduced
        # the gradients inside the training graph, whose batch was split along the mesh's `data` axis),
        # or under FSDP or along `model` split as sharding.DataParallel.state_sharding says.
        if dp is not None and dp.splits_state:
            self.update = sharded_update(self, dn)
        else:
            out = {} if dp is None else {"out_shardings": dp.replicated}
            self.update = jax.jit(counted("update", self._update), donate_argnums=(0, 1) if dn else (), **out)
        # The running sum is donated to each add; the first group's first gradient starts it (no add of 0).
        self.accumulate = jax.jit(counted("accumulate", accumulate), donate_argnums=(0,) if dn else ())
        self.accumulate_first = jax.jit(counted("accumulate first", accumulate),
                                        donate_argnums=(0,) if dn else ())
        self.passes = {ps.name: jax.jit(counted(f"pass {ps.name}", self._eval_fn(ps))) for ps in program.passes}

    def zero_counters(self) -> dict:
        """Run-long counter totals at the start of a run."""
        return {c: jnp.zeros((), jdt(d)) for c, d in self.counter_types.items()}

    def no_bad(self) -> tuple:
        """The record the training graph keeps of the first non-finite loss and of the first non-finite
        metric or diagnostic (`tally`), before any step: (i64 -1, f32 0, i64 -1, the counters at 0,
        (i64 -1, i64 -1, f32 0)), committed to the device as the state is, or on every device of the mesh."""
        bad = (jnp.asarray(-1, jnp.int64), jnp.asarray(0.0, jnp.float32), jnp.asarray(-1, jnp.int64),
               self.zero_counters(),
               (jnp.asarray(-1, jnp.int64), jnp.asarray(-1, jnp.int64), jnp.asarray(0.0, jnp.float32)))
        return jax.device_put(bad, jax.devices()[0]) if self.dp is None else self.dp.put_replicated(bad)

    # -- training -----------------------------------------------------------------------------
    def _loss(self, prepare: ir.Phase | None, objective: ir.Phase, training: bool = False):
        """The loss of one microbatch: (loss, aux), aux (metrics, diagnostics, counter deltas), and with
        `:samples` names computed here the first rows of each as a fourth entry (name -> array). With
        `training` (the training step's, not a pass's), LoRA adapters with dropout are unmerged."""
        counters, keep = tuple(self.counter_types), self.keep
        dropout = training and self.dropout

        def loss(trainable, frozen, batch, ctx, base, sums=None, summed=None):
            params = merge(trainable, frozen)
            fx = self.tracer.fx(sums=sums,   # running sums for repeated blocks' backward scans (`_grads_summing`)
                                dropout_ctx=ctx if dropout else None)   # the microbatch's masks (lora.py)
            inputs = (run_phase(prepare, [batch, ctx], params, fx, keep.get("prepare", ()))
                      if prepare is not None else batch)
            if prepare is not None and isinstance(inputs, dict):
                fx.kept.update({n: inputs[n] for n in keep.get("inputs", ()) if n in inputs})
            deltas = {c: jnp.asarray(fx.counters.get(c, 0)).astype(jdt(self.counter_types[c])) for c in counters}
            octx = dict(ctx)
            octx.update({c: base[c] + deltas[c] for c in counters})
            value = run_phase(objective, [inputs, octx], params, fx, keep.get("objective", ()))
            check_result(objective.name, value, objective.out)
            if summed is not None:   # the paths whose backward scan added into their running sum
                summed.extend(p for p in sums if p not in fx.sums)
            kept = ({n: _first_rows(v, self.sample_rows) for n, v in fx.kept.items()},) if keep else ()
            return value.astype(jnp.float32), (fx.metrics, fx.diagnostics, deltas) + kept

        return loss

    def _group(self, trainable, frozen, batches, rows, base):
        """Per-copy loss, gradient, reports and counter deltas of one group, in microbatch order: one
        copy of the unstacked body per microbatch, traced side by side (stacking.py `copy_of`), copy i
        reading its own context row and the counter totals after the copies before it (each copy's
        deltas added one at a time, behind a barrier as in `tally`, so the totals are those the
        unstacked run passes from call to call)."""
        S = self.layout.stack
        vg = jax.value_and_grad(self._loss(self.p.prepare, self.p.objective, training=True), has_aux=True)
        if S == 1:
            (l, (m, d, dl, *kept)), g = vg(trainable, frozen, batches, unpack_ctx(rows), base)
            return [l], [g], [m], [d], [dl], kept
        out, first = [], []
        for i in range(S):
            (l, (m, d, dl, *kept)), g = vg(trainable, frozen, copy_of(batches, i), unpack_ctx(rows, i), base)
            out.append(lax.optimization_barrier((l, g, m, d, dl)))
            base = {c: base[c] + v for c, v in lax.optimization_barrier(dl).items()}
            first = first or kept   # the first copy's rows
        return tuple([o[k] for o in out] for k in range(5)) + (first,)

    def _grads(self, trainable, frozen, batches, rows, base, bad=None):
        """The training graph of one group: (losses, gradients, metrics, diagnostics, counter deltas), one
        entry per copy in microbatch order; `rows` are the group's context rows, [S 6] i64 (`unpack_ctx`).
        With `bad` (the trainer's record of the first non-finite loss, `no_bad`), the counter totals
        after the group and the updated record replace the deltas: (losses, gradients, metrics,
        diagnostics, totals, bad); see `tally`. With `:samples` names computed in the graph (`keep`),
        one more entry: the first copy's kept rows (name -> array)."""
        l, g, m, d, dl, kept = self._group(trainable, frozen, batches, rows, base)
        if self.dp is not None and self.dp.splits_state:
            # Each gradient split as its parameter is: XLA reduce-scatters instead of all-reducing.
            g = [self.dp.constrain_state(x) for x in g]
        if bad is None:
            return (l, g, m, d, dl) + tuple(kept)
        totals, bad = tally(base, dl, l, unpack_ctx(rows)["step"], bad, rows[:, 1], self._reports(m, d))
        return (l, g, m, d, totals, bad) + tuple(kept)

    def _grads_summing(self, trainable, frozen, batch, rows, base, bad, total):
        """The training graph of an unstacked group after the step's first: as `_grads` with `bad`,
        but the gradients added into `total` (the running sum, donated on an accelerator) as they are
        produced, so that no second gradient-sized buffer is live: a repeated block's stacked
        parameters in its backward scan (`accumulate.scan_summing`, through `Effects.sums`), every
        other parameter's gradient as it comes (`accumulate.add_into`). Each add is `total + g`
        elementwise, as `accumulate` makes it (the bits of summing the list of gradients).
        Returns (losses, total, metrics, diagnostics, totals, bad), one copy's entries in lists."""
        ctx = unpack_ctx(rows)
        loss = self._loss(self.p.prepare, self.p.objective, training=True)
        sums = {p: sub for p, sub in _subtrees(total, ()) if p}
        summed: list = []
        vg = jax.value_and_grad(loss, has_aux=True)
        (l, (m, d, dl, *_)), g = vg(trainable, frozen, batch, ctx, base, sums, summed)
        total = _sum_into(total, g, frozenset(summed), ())
        if self.dp is not None and self.dp.splits_state:
            total = self.dp.constrain_state(total)
        totals, bad = tally(base, [dl], [l], ctx["step"], bad, rows[:1, 1], self._reports([m], [d]))
        return [l], total, [m], [d], totals, bad

    def _reports(self, metrics: list, diagnostics: list) -> list:
        """Each copy's metrics then diagnostics as one list of scalars, in the order of `report_names`
        (set here, at trace time: a name is listed once, metrics first, as a row lists them)."""
        names = tuple(dict.fromkeys([k for m in metrics for k in m] + [k for d in diagnostics for k in d]))
        self.report_names = names
        both = [{**m, **d} for m, d in zip(metrics, diagnostics)]
        return [[r.get(n, jnp.zeros((), jnp.float32)) for n in names] for r in both]

    def train_group(self, total, trainable, frozen, batch, rows, counters, bad):
        """One group's training graph and the running sum of the gradients after it (`total` None
        for the step's first group): an unstacked later group's graph adds into the sum itself
        (`grads_summing`, traced as `train summing`), others return their gradients for `add_group`.
        Returns (losses, total, metrics, diagnostics, counter totals, bad) as `_grads` with `bad`
        returns them, the new sum in the gradients' place. Nothing here waits for the device. The step's
        first group (`total` None) leaves its kept `:samples` rows in `last_kept` (on the device)."""
        if total is not None and self.layout.stack == 1:
            return self.grads_summing(trainable, frozen, batch, rows, counters, bad, total)
        l, gs, m, d, counters, bad, *kept = self.grads(trainable, frozen, batch, rows, counters, bad)
        if total is None:
            self.last_kept = kept[0] if kept else {}
        return l, self.add_group(total, gs), m, d, counters, bad

    def add_group(self, total, grads: list):
        """The running sum after one group: `grads` (the group's gradients, in microbatch order) added
        to `total`, or, for the step's first group (`total` None), to its first gradient. One trace for
        the first group (`accumulate first`, none at all when it has one copy) and one for the others
        (`accumulate`); the sum is donated on an accelerator. Nothing here waits for the device."""
        if total is None:
            total, grads = grads[0], grads[1:]
            return self.accumulate_first(total, grads) if grads else total
        return self.accumulate(total, grads)

    def _update(self, trainable, opt_state, total, bad_step):
        """Average the microbatches' summed gradient (`add_group`) and take one optax step; once a
        loss was non-finite (`bad_step`, the record's i64 step, `tally`, is 0 or more) the trainable
        parameters stay as they were, so the state the run stops with holds those the first bad
        step read (its intermediates are checked from them: finite_check.py)."""
        scale = 1.0 / self.layout.microbatches
        total = jax.tree_util.tree_map(lambda g: g * jnp.asarray(scale, g.dtype), total)
        updates, opt_state = self.opt.update(total, opt_state, trainable)
        new = optax.apply_updates(trainable, updates)
        keep = bad_step >= 0
        return jax.tree_util.tree_map(lambda n, o: jnp.where(keep, o, n), new, trainable), opt_state

    # -- passes -------------------------------------------------------------------------------
    def _eval_fn(self, ps: ir.PassIR):
        loss = self._loss(ps.prepare, ps.objective)

        def evaluate(trainable, frozen, batch, rows, base):
            value, (metrics, diags, _, *kept) = loss(trainable, frozen, batch, unpack_ctx(rows), base)
            return (value, metrics) + tuple(kept)   # with `keep`: the pass's kept rows third
        return evaluate




def counter_types(program: ir.Program) -> dict[str, str]:
    """The dtype of each counter of `program` (its type in the objective's context; f32 if none)."""
    ctx_t = program.objective.param_types[1]
    out = {}
    for c in program.counters:
        t = ctx_t.get(c) if isinstance(ctx_t, PlistType) else None
        out[c] = t.dtype if isinstance(t, TensorType) else "f32"
    return out


def accumulate(total, grads):
    """`total` plus each gradient of `grads` (a list, in microbatch order), one add at a time:
    `((total + g0) + g1) + ...`, every add elementwise in the gradient's dtype. Its own graph, apart
    from the training graph, so that no add is fused into a matmul and a stacked and an unstacked run
    add exactly the same arrays in the same order."""
    for g in grads:
        total = jax.tree_util.tree_map(jnp.add, total, g)
    return total


def _keep(spec: ir.SamplesIR | None) -> tuple[dict[str, tuple[str, ...]], int]:
    """What the training graph keeps for `spec`: {where: names} of its computed names (`inputs`,
    `prepare`, `objective`; none empty), and the rows of each."""
    if spec is None:
        return {}, 0
    return {w: spec.computed_in(w) for w in ("inputs", "prepare", "objective") if spec.computed_in(w)}, spec.rows


def _first_rows(v, rows: int):
    """The first `rows` entries of a kept value's first axis (a scalar as it is), as an array."""
    v = jnp.asarray(v)
    return v if v.ndim == 0 else v[:rows]


def tally(counters, deltas, losses, step, bad, microbatches, reports=()):
    """A group's bookkeeping, traced inside its training graph (nothing is read back to the host):

    * `counters` (name -> scalar total) plus each copy's `deltas` (a list of such dicts, in
      microbatch order), added one copy at a time. The deltas pass an optimization barrier first:
      a delta XLA sees as a constant would be folded, `(t + c0) + c1` becoming `t + (c0 + c1)`,
      which rounds differently; so the totals are those of `counters[c] + delta[c]`, one add per
      copy, stacked or not, as when each add was its own call.
    * `bad`, (i64 step, f32 value, i64 microbatch, counters): the step (1-based, `step` the
      group's context `:step`, an i64 scalar), value and microbatch (`microbatches`, the copies'
      context `:microbatch`, i64 [S]) of the first non-finite entry of `losses` (f32 scalars in
      microbatch order), with the counter totals that microbatch started from, kept once set;
      step -1 while every loss so far was finite. The check of the bad step's intermediates
      re-runs that microbatch from them (finite_check.py).
    * `bad[4]`, (i64 step, i64 index, f32 value): the step, index (into each copy's list of
      `reports`, the metrics and diagnostics as scalars, one list per copy in microbatch order) and
      value of the first non-finite metric or diagnostic, kept once set; step -1 while all were
      finite. So a value of a step that is not logged is caught too (checks.py `check_records`).
    Returns (counters, bad).
    """
    starts = []
    for d in jax.lax.optimization_barrier(list(deltas)):
        starts.append(counters)
        counters = {c: counters[c] + d[c] for c in counters}
    vals = jnp.stack([jnp.asarray(v, jnp.float32) for v in losses])
    nonfinite = ~jnp.isfinite(vals)
    first = jnp.argmax(nonfinite)
    hit = jnp.any(nonfinite) & (bad[0] < 0)
    done = step.astype(jnp.int64) + 1
    began = {c: jnp.where(hit, jnp.stack([s[c] for s in starts])[first], bad[3][c]) for c in counters}
    metric = bad[4]
    if reports and reports[0]:
        rvals = jnp.stack([jnp.stack([jnp.asarray(v).astype(jnp.float32) for v in r]) for r in reports])  # [S R]
        rbad = ~jnp.isfinite(rvals)
        index = jnp.argmax(jnp.any(rbad, axis=0))          # the first name (row order) bad in any copy
        copy = jnp.argmax(rbad[:, index])                   # its first copy, in microbatch order
        mhit = jnp.any(rbad) & (metric[0] < 0)
        metric = (jnp.where(mhit, done, metric[0]), jnp.where(mhit, index.astype(jnp.int64), metric[1]),
                  jnp.where(mhit, rvals[copy, index], metric[2]))
    return counters, (jnp.where(hit, done, bad[0]), jnp.where(hit, vals[first], bad[1]),
                      jnp.where(hit, jnp.asarray(microbatches)[first].astype(jnp.int64), bad[2]), began, metric)



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


def sharded_update(graphs: "TrainingGraphs", donate: bool):
    """The update graph when the state is split (FSDP, the `model` axis): jitted at its first call (or
    `lower`), when the state's tree is known, with `out_shardings` the parameters' and optimizer
    state's shardings (sharding.DataParallel.state_shardings)."""
    jitted = []

    def graph(trainable, opt_state):
        if not jitted:
            out = graphs.dp.state_shardings((trainable, opt_state))
            jitted.append(jax.jit(graphs.tracer.counted("update", graphs._update), out_shardings=out,
                                  donate_argnums=(0, 1) if donate else ()))
        return jitted[0]

    def update(trainable, opt_state, total, bad):
        return graph(trainable, opt_state)(trainable, opt_state, total, bad)
    update.lower = lambda trainable, opt_state, *rest: graph(trainable, opt_state).lower(trainable, opt_state, *rest)
    return update
