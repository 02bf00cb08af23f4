"""What the default JAX device offers a run: its memory (the budget `:stack :auto` and `explain` plan
against; `never_fits`, the run `sexpgpu run` refuses before allocating anything) and the schedule
target (`sexpgpu_lang.explain.TARGETS`) of its compiler.

Read by lowering/graphs.py (the stack degree), lowering/xla_report.py (`explain --xla`) and the CLI's `run`;
it imports nothing of the runtime, only JAX and the front end's cost model.
"""
from __future__ import annotations

import jax

from sexpgpu_lang import ir


def device_budget() -> tuple[int | None, str]:
    """The default device's memory in bytes (`bytes_limit` of its memory stats) and where it came from.

    (None, why) where the backend reports no limit (the CPU does not).
    """
    dev = jax.devices()[0]
    try:
        stats = dev.memory_stats() or {}
    except Exception:  # some backends raise instead of returning None
        stats = {}
    limit = stats.get("bytes_limit")
    if limit:
        return int(limit), f"{dev.device_kind} memory"
    return None, f"{dev.platform} backend reports no memory limit; assumed 16 GiB"


def backend_target() -> str:
    """The schedule target (`sexpgpu_lang.explain.TARGETS`) of JAX's default backend: "cpu" for XLA's
    CPU backend, "accelerator" for any other, so that `--xla` compares the estimate made for the
    compiler it runs on."""
    return "cpu" if jax.default_backend() == "cpu" else "accelerator"


def never_fits(program: ir.Program, devices: int | None, fsdp: bool | None) -> str | None:
    """Why the run could never fit on its device, or None: its parameters and optimizer state
    (exact sizes, split over the mesh with FSDP) alone exceed the device's memory, so `run` refuses
    it before anything is allocated. None where the device reports no limit (the CPU)."""
    from sexpgpu_lang.explain.graphs import optimizer_bytes, param_bytes
    from sexpgpu_lang.explain.text import fmt_bytes
    budget, where = device_budget()
    if budget is None:
        return None
    n = devices or program.run.devices or 1
    split = fsdp if fsdp is not None else program.run.shard_params == "fsdp"
    resident = (param_bytes(program) + optimizer_bytes(program)) // (n if split else 1)
    if resident <= budget:
        return None
    return (f"the parameters and optimizer state take {fmt_bytes(resident)} per device, more than the "
            f"{fmt_bytes(budget)} of {where}: the run could never fit (see `sexpgpu explain`)")
