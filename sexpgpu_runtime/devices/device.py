"""What the default JAX device offers a run: its memory (the budget `:stack :auto` and `explain` plan
against) and the schedule target (`sexpgpu_lang.explain.TARGETS`) of its compiler.

Read by graphs.py (the stack degree) and xla_report.py (`explain --xla`); it imports neither, nor
anything of the runtime but JAX.
"""
from __future__ import annotations

import jax


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
