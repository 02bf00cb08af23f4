"""The data-parallel mesh in the report: each graph input's sharding, and the memory and peak per
device (docs/sharding.md).

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

import math

from .. import ir
from ..mesh import param_dims, shard_overrides, spec_text
from ..types import TensorType


def mesh_report(program: ir.Program, plan: dict, stack: int = 1) -> dict | None:
    """With `:devices N` in `run` (or `--mesh data=N`; docs/sharding.md): the data-parallel mesh, each
    graph input's sharding, and the peak per device. Everything that scales with the records a device
    holds (the batch, the generator's state, the activations) is divided by N. Parameters, optimizer
    state and held gradients are whole on every device; under `:shard-params :fsdp` each array that N
    divides along some axis (sexpgpu_lang.mesh.fsdp_dim) is 1/N, and the parameters gathered for the
    computation are counted whole once more. With `:model-parallel M` (`--mesh ...,model=M`) each
    parameter that the `model` axis splits (sexpgpu_lang.mesh.model_dim: heads, MLP width, vocabulary) is
    1/M more, its optimizer state and gradients with it; the activations are counted whole along `model`
    (an upper bound: the attention's and the MLP's are 1/M). An estimate: XLA's collective buffers are
    not counted. None without a mesh."""
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
    over = shard_overrides(program)
    dims = {p.path: param_dims(".".join(p.path), tuple(p.shape), n, model, fsdp, over) for p in program.params}

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
    out["shardings"] = {"batch": records, "generator state": records, "params": "; ".join(parts),
                        "optimizer": "as its parameter", "ctx": "P()"}
    out["param_shardings"] = {".".join(p.path): spec_text(dims[p.path]) for p in program.params}
    out["params_per_device"] = params_pd
    out["optimizer_per_device"] = math.ceil(plan["optimizer"] * share)
    out["peak_per_device"] = fixed_pd + gathered + -(-max(plan["peak"] - fixed, 0) // n)
    out["memory_per_device"] = _memory_per_device(plan, n, params_pd, share, out["peak_per_device"])
    return out


#: Which of `mesh["shardings"]` each named input of a graph (`_graph_dict`'s `inputs`) takes.
_INPUT_SHARDING = {"batch": "batch", "state": "generator state", "params": "params", "optimizer": "optimizer",
                   "gradients": "params", "ctx": "ctx", "trip": "ctx"}


def graph_shardings(mesh: dict, graph: dict) -> dict[str, str]:
    """Each input of one graph of the report (`graph["inputs"]`) and its sharding on the mesh (a
    `PartitionSpec` as text, or the FSDP rule): the batch and the generator state split along `data`,
    the trip and the context scalars replicated, the parameters (and the gradients and optimizer state
    that follow them) replicated or split as `:shard-params` says (docs/sharding.md)."""
    return {i["name"]: mesh["shardings"][_INPUT_SHARDING.get(i["name"], "ctx")] for i in graph["inputs"]}


def _memory_per_device(plan: dict, n: int, params: int, share: float, peak: int) -> dict:
    """The `memory` line per device of an `n`-device mesh (bytes): what the phases hold scales with the
    records a device holds (1/n, rounded up); `params` is what one device keeps of the parameters (all,
    or its FSDP shards) and `share` the fraction of the optimizer state and of the gradients it keeps (1
    replicated; its shards' bytes over the trainable bytes under FSDP); `peak` is `mesh_report`'s."""
    def per(k: str) -> int:
        return -(-plan[k] // n)
    return {"params": params, "optimizer": math.ceil(plan["optimizer"] * share),
            "gradients_held": math.ceil(plan["gradients_held"] * share), "generation": per("generation"),
            "train": per("train"), "update": math.ceil(plan["update"] * share), "passes": per("passes"),
            "peak": peak}
