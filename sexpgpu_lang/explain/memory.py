"""The memory plan (the bytes live on the device in each phase of the step) and the run policy that
reads it: `choose_stack`, the degree `:stack :auto` picks, the largest whose peak fits the budget.

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

from .. import ir
from ..types import ITEMSIZE
from .graphs import optimizer_bytes, param_bytes, plist_bytes, split_bytes, step_graphs
from .mesh import mesh_report
from .schedule import GraphEstimate
from ..language import CONTEXT_KEYS

#: Memory budget assumed without a device to ask (bytes): 16 GiB.
DEFAULT_BUDGET = 16 * 1024 ** 3


def memory_plan(program: ir.Program, graphs: dict[str, GraphEstimate], stack: int, donate: bool = True,
                model: int = 1) -> dict:
    """Bytes live on the device in each phase of the step, beside the resident parameters and optimizer state.

    Each generator graph is a phase: its temporaries beside the batch
    `:init` read (held until the training graph reads it) and the state the
    trips carry; what `:finish` made lives until the training graph reads
    it. `generate.init` returns a copy of the batch (the later graphs read it), so
    during that call the batch is held twice. The gradients are summed into one
    running buffer as each group's training graph produces them (the
    `accumulate` phase: the sum, the group's gradients, and the new sum unless
    donated), so across groups one gradient-sized buffer is held
    (`gradients_held`), whatever `:microbatches` is, and `update` reads that one
    sum. Unstacked, a later group's training graph adds into the sum itself
    as its backward pass makes the gradients (the `train summing` phase,
    sexpgpu_runtime.lowering.graphs `Graphs.train_group`: the sum donated in and
    written in place, a repeated block's layer by layer), so with the sum held
    it holds what the first group's graph holds with its gradients out: the
    peak does not grow with `:microbatches`; stacked, the group's copies'
    gradients come out and a separate `accumulate` adds them.
    `donate`: the runtime donates the state to each trip, the running sum
    to each add, and the parameters and optimizer state to `update`, on an
    accelerator (not on the CPU).
    `model` > 1: what one device of a `model` axis of that size holds (`graphs` from `step_graphs` with
    the same `model`): the parameters, optimizer state and gradients it splits, and the generator state
    entries the trips keep split (a KV cache by heads), 1/model.
    Returns the totals (bytes) and `phases`, each `{phase, parts, live}`.
    """
    M = program.run.microbatches
    gen = program.generate
    trainable = param_bytes(program, frozen=False, model=model)
    params = param_bytes(program, model=model)
    opt = optimizer_bytes(program, model)
    batch = plist_bytes(program.loaders[program.run.loader].batch_type()) * stack
    state = split_bytes(gen.state, graphs["generate.step"].splits, "state", model) * stack if gen else 0
    made = split_bytes(gen.out, graphs["generate.finish"].splits, "made", model) * stack if gen else 0
    ctx = ITEMSIZE["i64"] * len(CONTEXT_KEYS)   # one row of the context rows per copy (`_ctx_io`)
    phases: list[dict] = []

    def add(name, **parts):
        parts = {k.replace("_", " "): v for k, v in parts.items()}
        phases.append({"phase": name, "parts": parts, "live": sum(parts.values())})

    if gen is not None:
        # init's arguments (the batch and the context rows) and the copies it returns, which the group's
        # later graphs read
        add("generate.init", batch=batch, ctx=ctx * stack, copies=batch + ctx * stack,
            temps=graphs["generate.init"].temps, state=state)
        add("generate.step", batch=batch, state=state, state_out=0 if donate else state,
            temps=graphs["generate.step"].temps, trip_and_ctx=8 + ctx * stack)
        add("generate.finish", batch=batch, state=state, temps=graphs["generate.finish"].temps, made=made)
    t = graphs["train"]
    add("train", batch=batch, made=made, temps=t.temps, gradients_out=trainable * stack,
        ctx_and_reports=max(t.outputs - trainable * stack, 0) + ctx * stack)
    summing = M > 1 and stack == 1
    if summing:   # `Graphs.grads_summing`: the sum (`held`) in and out, no gradients beside it
        add("train summing", batch=batch, made=made, temps=t.temps, sum_out=0 if donate else trainable,
            ctx_and_reports=max(t.outputs - trainable, 0) + ctx)
    elif M > 1:   # sexpgpu_runtime.lowering.graphs `Graphs.accumulate`: the first group's copies, or the sum and a group's
        add("accumulate", sum=trainable if M > stack else 0, gradients=trainable * stack,
            sum_out=0 if donate else trainable)
    add("update", gradients=trainable, params_out=0 if donate else trainable, optimizer_out=0 if donate else opt)
    for ps in program.passes:
        pbatch = plist_bytes(program.loaders[ps.loader].batch_type())
        pmade = 0
        if ps.runs_generator and gen is not None:  # unstacked: state in and out, temporaries, what finish made
            gen1 = [graphs[f"pass {ps.name} generate.{w}"] for w in ("init", "step", "finish")]
            add(f"pass {ps.name} generate", batch=pbatch, generator=max(g.live - g.param_args for g in gen1))
            pmade = plist_bytes(gen.out)
        add(f"pass {ps.name}", batch=pbatch, made=pmade, temps=graphs[f"pass {ps.name}"].temps)
    live = {p["phase"]: p["live"] for p in phases}
    generation = max((v for k, v in live.items() if k.startswith("generate.")), default=0)
    passes = max((v for k, v in live.items() if k.startswith("pass ")), default=0)
    held = trainable if M > stack else 0   # the running sum, while a later group's graphs run
    later = live["train summing"] if summing else live["train"]   # a later group's training graph, the sum held
    peak = params + opt + max(held + max(generation, later), live["train"], live.get("accumulate", 0), live["update"],
                              passes)
    return {"params": params, "trainable": trainable, "frozen": params - trainable, "optimizer": opt,
            "gradients_held": held, "generation": generation, "train": live["train"], "update": live["update"],
            "passes": passes, "peak": peak, "phases": phases, "donate": donate}


def device_peak(program: ir.Program, plan: dict, stack: int, target: str = "accelerator") -> int:
    """The peak one device holds (bytes): the plan's peak, or on a mesh `mesh_report`'s peak per device;
    what a device's memory budget is compared with."""
    mesh = mesh_report(program, plan, stack, target)
    return plan["peak"] if mesh is None else mesh["peak_per_device"]


def choose_stack(program: ir.Program, budget: int, target: str = "accelerator") -> tuple[int, list[dict]]:
    """For `:stack :auto`: the largest degree dividing `:microbatches` whose peak fits `budget` bytes
    (live sets as `target` makes them; on a mesh, the peak per device, as `budget` is one device's).

    Returns (degree, candidates), each candidate `{degree, peak, fits}` (bytes);
    the degree is 1 when none fits (the report then says the run does not fit).
    """
    M = program.run.microbatches
    cands = []
    for s in (d for d in range(1, M + 1) if M % d == 0):
        peak = device_peak(program, memory_plan(program, step_graphs(program, s, target), s), s, target)
        cands.append({"degree": s, "peak": peak, "fits": peak <= budget})
    fitting = [c["degree"] for c in cands if c["fits"]]
    return (max(fitting) if fitting else 1), cands
