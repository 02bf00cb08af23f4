"""The step's graphs: each phase of the IR traced into one jitted function, built once per run.

Per step and per group of microbatches: `generate.init`, `generate.step` (run `:trips` times, by
one compiled loop or a host loop: generator_graphs.py) and `generate.finish` (generator_graphs.py), then the training graph, the
running sum of the gradients and, after the last group, the update graph; each evaluation pass
has its own graph (training_graphs.py). A run that stacks `S` microbatches runs each generator
phase's unstacked body once per copy in a loop, and traces `S` copies of the training graph's
body side by side, inside each call (stacking.py), the parameters and (in the generator) the
context scalars shared, each copy's ops on the shapes of the unstacked run (not `jax.vmap`, whose
batched shapes XLA:CPU gives other kernels); each copy's gradient is added in microbatch order,
so the bits equal an unstacked run's.

Every graph that reads the context takes the group's context rows, one [S 6] i64 array
(context.py `unpack_ctx`), not six scalars. On one device `generate.init` (or, without a
generator, the training graph) takes the group's batch and rows as numpy, so its own call
transfers them: no separate call or graph puts a group on the device.

Here: the `Layout` of a step's microbatches (`layout_of`, `:stack :auto` included) and `Graphs`,
which builds both parts. `Graphs.traces` counts how often each graph was traced: once per run.
"""
from __future__ import annotations

from dataclasses import dataclass

import optax

from sexpgpu_lang import ir

from ..devices.device import device_budget
from .context import Tracer
from .generator_graphs import GeneratorGraphs
from .training_graphs import TrainingGraphs


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
        planned = program if dp is None else with_mesh(program, dp.devices, dp.fsdp, dp.model)
        stack, _ = choose_stack(planned, budget or 16 * 2**30)
    stack = stack if program.stackable else 1
    if run.microbatches % stack:
        stack = 1
    return Layout(run.microbatches, stack)



class Graphs:
    """The jitted graphs of one run. Build once; every call after the first reuses the trace.

    Two parts: `generator` (a `GeneratorGraphs`, None without `defgenerate`) and `training` (a
    `TrainingGraphs`); the graphs and methods the trainer and `explain --xla` call are named here
    too (`gen_init` ... `gen_finish_1` and `generate` the generator's; `grads`, `grads_summing`,
    `update`, `accumulate`, `passes`, `train_group`, `add_group`, `no_bad`, `zero_counters` the
    training's). `traces` counts how often each graph was traced: once per run.
    """

    def __init__(self, program: ir.Program, optimizer: optax.GradientTransformation,
                 selected: frozenset = frozenset(), donate: bool = False, dp=None, trip_loop: str = "host"):
        self.p = program
        self.dp = dp   # a sharding.DataParallel, or None on one device (then nothing below changes)
        self.layout = layout_of(program, dp)
        self.tracer = Tracer(program.run.seed, selected)
        self.traces = self.tracer.traces
        gen = None if program.generate is None else GeneratorGraphs(program, self.layout, self.tracer, dp, trip_loop)
        self.generator = gen
        if gen is not None:
            self.gen_init, self.gen_step, self.gen_finish = gen.gen_init, gen.gen_step, gen.gen_finish
            self.gen_init_1, self.gen_step_1, self.gen_finish_1 = gen.gen_init_1, gen.gen_step_1, gen.gen_finish_1
        t = self.training = TrainingGraphs(program, optimizer, self.layout, self.tracer, donate, dp)
        self.grads, self.grads_summing, self.update, self.passes = t.grads, t.grads_summing, t.update, t.passes
        self.accumulate, self.accumulate_first = t.accumulate, t.accumulate_first
        self.train_group, self.add_group, self.no_bad, self.zero_counters = (t.train_group, t.add_group, t.no_bad,
                                                                            t.zero_counters)
        self.counter_types = t.counter_types

    def generate(self, trainable, frozen, batch, rows, stacked: bool, on_trip=None, draw=None):
        """Run the generator on one group or batch (`GeneratorGraphs.generate`): (batch, rows, made)."""
        return self.generator.generate(trainable, frozen, batch, rows, stacked, on_trip, draw)

    def trips(self, trainable, frozen, state, rows, stacked: bool, on_trip=None, draw=None):
        """The generator's trip loop (`GeneratorGraphs.trips`): the state after the last trip."""
        return self.generator.trips(trainable, frozen, state, rows, stacked, on_trip, draw)

    @property
    def trips_run(self) -> int:
        """How many trips the last trip loop ran (`:until` may end it early): an int from the host loop,
        an i64 device scalar from the compiled one."""
        return self.generator.trips_run

    @property
    def draw_sites(self) -> tuple:
        """The generator's traced temperatures that the trips check (draw_check.py); () for none."""
        return self.generator.draw_sites if self.generator is not None else ()

    @property
    def draw(self):
        """The record of the first bad traced temperature after the last trip loop (None: nothing checked)."""
        return self.generator.draw if self.generator is not None else None
