"""The mesh in the report (`data` x `model`): each graph input's and generator state entry's sharding,
and the memory and peak per device (docs/sharding.md).

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

import math

from .. import ir
from ..mesh import param_dims, shard_overrides, spec_text
from .split import spec
from ..types import TensorType


def mesh_report(program: ir.Program, plan: dict, stack: int = 1, target: str = "accelerator") -> dict | None:
    """With `:devices N` in `run` (or `--mesh data=N`; docs/sharding.md): the data-parallel mesh, each
    graph input's sharding, and the peak per device. Everything that scales with the records a device
    holds (the batch, the generator's state, the activations) is divided by N. Parameters, optimizer
    state and held gradients are whole on every device; under `:shard-params :fsdp` each array that N
    divides along some axis (sexpgpu_lang.mesh.fsdp_dim) is 1/N, and the parameters gathered for the
    computation are counted whole once more. With `:model-parallel M` (`--mesh ...,model=M`) each
    parameter that the `model` axis splits (sexpgpu_lang.mesh.model_dim: heads, MLP width, vocabulary) is
    1/M more, its optimizer state and gradients with it, and what the phases hold is one device's share
    along `model` too: each graph traced again counting per device (`step_graphs(..., model=M)`, the
    split of every value propagated from the parameters': attention activations and KV caches by heads,
    the MLP's hidden by width, logits by vocabulary where the output is split; whole where the heads were
    replicated), then divided by N for the records. `state_shardings`: each generator state entry's
    PartitionSpec (a cache split by heads). An estimate: XLA's collective buffers are not counted.
    `target`: the compiler whose live sets the plans model. None without a mesh."""
    n = getattr(program.run, "devices", None) or 1
    model = getattr(program.run, "model_parallel", 1) or 1
    if n == 1 and model == 1:
        return None
    fsdp = getattr(program.run, "shard_params", "replicated") == "fsdp"
    fixed = plan["params"] + plan["optimizer"] + plan["gradients_held"]
    out = {"axis": "data", "devices": n, "model": model, "shard_params": "fsdp" if fsdp else "replicated",
           "records_per_device": {name: ld.batch // n for name, ld in program.loaders.items()}}
    records = "P('data')" if stack <= 1 else "P(None, 'data')"
    if not fsdp and model == 1:
        out["shardings"] = {"batch": records, "generator state": records, "params": "P()", "optimizer": "P()",
                            "ctx": "P()"}
        out["params_per_device"], out["optimizer_per_device"] = plan["params"], plan["optimizer"]
        out["peak_per_device"] = fixed + -(-max(plan["peak"] - fixed, 0) // n)
        out["memory_per_device"] = _memory_per_device(plan, n, plan["params"], 1.0, out["peak_per_device"])
        return out
    over = shard_overrides(program, model)
    dims = {p.path: param_dims(".".join(p.path), tuple(p.shape), n, model, fsdp, over) for p in program.params}
    device = plan
    if model > 1:   # the phases counted per device along `model`
        from .graphs import step_graphs   # (here: both import this module, through text and memory)
        from .memory import memory_plan
        graphs = step_graphs(program, stack, target, model=model)
        device = memory_plan(program, graphs, stack, plan["donate"], model=model)
        if program.generate is not None:
            out["state_shardings"] = _state_shardings(program, graphs["generate.step"].splits, n, stack)
        out["graphs_per_device"] = {name: _graph_per_device(g, n) for name, g in graphs.items() if name != "update"}
        update_live = graphs["update"].live   # (not traced: the whole trainable state, scaled below)

    def mine(p, gathered: bool = False) -> int:   # bytes of one parameter a device holds (or gathers)
        d, m = dims[p.path]
        b = TensorType(p.shape, p.dtype).nbytes
        return b // (n if d is not None and not gathered else 1) // (model if m is not None else 1)
    params_pd = sum(mine(p) for p in program.params)
    trainable_pd = sum(mine(p) for p in program.params if not p.frozen)
    share = trainable_pd / plan["trainable"] if plan["trainable"] else 1.0   # optimizer state and gradients
    fixed_pd = params_pd + math.ceil(plan["optimizer"] * share) + math.ceil(plan["gradients_held"] * share)
    gathered = sum(mine(p, True) for p in program.params) - params_pd if fsdp else 0
    parts = []
    if model > 1:
        split_m = sum(dims[p.path][1] is not None for p in program.params)
        parts.append(f"{split_m} of {len(program.params)} split along model={model} by heads, MLP width or "
                     "vocabulary")
    if fsdp:
        split = sum(dims[p.path][0] is not None for p in program.params)
        parts.append(f"FSDP: {split} of {len(program.params)} split on their largest axis {n} divides")
    state = records
    cut = {k: v for k, v in out.get("state_shardings", {}).items() if "'model'" in v}
    if cut:   # the caches the trips keep split by heads
        state += "; along model " + ", ".join(f"`{k}` {v}" for k, v in cut.items())
    out["shardings"] = {"batch": records, "generator state": state, "params": "; ".join(parts),
                        "optimizer": "as its parameter", "ctx": "P()"}
    out["param_shardings"] = {".".join(p.path): spec_text(dims[p.path]) for p in program.params}
    out["params_per_device"] = params_pd
    out["optimizer_per_device"] = math.ceil(plan["optimizer"] * share)
    if "graphs_per_device" in out:   # the update reads and writes the trainable state: its share of it
        out["graphs_per_device"]["update"] = {"live": math.ceil(update_live * share), "temps": 0,
                                              "params": trainable_pd}
    dfixed = device["params"] + device["optimizer"] + device["gradients_held"]
    out["peak_per_device"] = fixed_pd + gathered + -(-max(device["peak"] - dfixed, 0) // n)
    out["memory_per_device"] = _memory_per_device(plan, n, params_pd, share, out["peak_per_device"], device)
    return out


def _state_shardings(program: ir.Program, splits: dict, n: int, stack: int) -> dict[str, str]:
    """Each generator state entry's PartitionSpec on the mesh: its records along `data` (the first axis, or
    the second under stacking) where `data` has more than one device, its split along `model` (a KV
    cache by heads) as the trips keep it."""
    out = {}
    batch = program.loaders[program.run.loader].batch
    for k, t in program.generate.state.entries:
        if not isinstance(t, TensorType):
            continue
        lead = 1 if stack > 1 else 0
        split = tuple(a + lead for a in splits.get(f"state:{k}", ()))
        rec = lead if n > 1 and t.rank and t.shape[0] == batch else None
        out[k] = spec(split, t.rank + lead, rec)
    return out


def _graph_per_device(g, n: int) -> dict:
    """One traced graph's live set on one device (bytes; `live` compares with `explain --xla`'s per-device
    `live`): its parameters' share along `model` as the trace counted them, the rest (records,
    activations) 1/n for the `data` axis."""
    rest = g.live - g.param_args
    return {"live": g.param_args + -(-rest // n), "temps": -(-g.temps // n), "params": g.param_args}


#: Which of `mesh["shardings"]` each named input of a graph (`_graph_dict`'s `inputs`) takes.
_INPUT_SHARDING = {"batch": "batch", "state": "generator state", "params": "params", "optimizer": "optimizer",
                   "gradients": "params", "ctx": "ctx", "trip": "ctx"}


def graph_shardings(mesh: dict, graph: dict) -> dict[str, str]:
    """Each input of one graph of the report (`graph["inputs"]`) and its sharding on the mesh (a
    `PartitionSpec` as text, or the FSDP rule): the batch and the generator state split along `data`,
    the trip and the context scalars replicated, the parameters (and the gradients and optimizer state
    that follow them) replicated or split as `:shard-params` says (docs/sharding.md)."""
    return {i["name"]: mesh["shardings"][_INPUT_SHARDING.get(i["name"], "ctx")] for i in graph["inputs"]}


def _memory_per_device(plan: dict, n: int, params: int, share: float, peak: int, device: dict | None = None) -> dict:
    """The `memory` line per device of an `n`-device mesh (bytes): what the phases hold scales with the
    records a device holds (1/n, rounded up); `params` is what one device keeps of the parameters (all,
    or its FSDP shards) and `share` the fraction of the optimizer state and of the gradients it keeps (1
    replicated; its shards' bytes over the trainable bytes under FSDP); `peak` is `mesh_report`'s;
    `device`: the plan counted per device along `model` (the phases' activations), else `plan`."""
    device = device or plan

    def per(k: str) -> int:
        return -(-device[k] // n)
    return {"params": params, "optimizer": math.ceil(plan["optimizer"] * share),
            "gradients_held": math.ceil(plan["gradients_held"] * share), "generation": per("generation"),
            "train": per("train"), "update": math.ceil(plan["update"] * share), "passes": per("passes"),
            "peak": peak}
