"""Whether a run's step can fit its device, decided before anything is allocated (`refuse_never_fits`),
and the one line a device that runs out of memory during the run ends in (`out_of_memory`).

`sexpgpu lint` cannot know the device; `sexpgpu run` can. Before the run dir is made or a
parameter drawn, the memory plan `sexpgpu explain` prints (activations included) at the runtime's
own stacking degree and mesh is held to the memory one device has (devices/device.py
`memory_available`: the device's `bytes_limit`, or on the CPU the host's available memory), and a
step that could never fit is a RunError naming its largest tensor and the sizes
(`device.fit_verdict`). Where the estimate misses and XLA still runs out of memory, the
`RESOURCE_EXHAUSTED` error becomes one RunError naming the step and the last checkpoint, from which
`--resume` continues.
"""
from __future__ import annotations

import jax

from sexpgpu_lang import ir
from sexpgpu_lang.mesh import with_mesh

from ..devices.device import backend_target, fit_verdict, memory_available
from ..devices.sharding import DataParallel
from ..errors import MeshError, RunError
from ..lowering.graphs import layout_of
from .options import RunOptions


def refuse_never_fits(program: ir.Program, options: RunOptions) -> None:
    """RunError when the run's step could never fit one device's memory (`device.fit_verdict`, on the
    mesh and at the stacking degree the run would use; on the CPU the host's memory, shared by the
    mesh's devices in this process); nothing when it may fit, when no memory figure is known, or when
    the mesh cannot be built (the trainer then says why)."""
    budget, where = memory_available()
    if budget is None:
        return
    try:
        dp = DataParallel.of(program, options.devices, options.fsdp, options.model)
    except MeshError:
        return
    planned = program if dp is None else with_mesh(program, dp.devices, dp.fsdp, dp.model)
    cpu = jax.default_backend() == "cpu"
    shared = min(dp.devices * dp.model, jax.local_device_count()) if (cpu and dp is not None) else 1
    why = fit_verdict(planned, budget, where, layout_of(program, dp).stack, backend_target(), donate=not cpu,
                      shared=shared)
    if why is not None:
        raise RunError(why)


def is_out_of_memory(e: BaseException) -> bool:
    """Whether `e` is XLA running out of device memory (`RESOURCE_EXHAUSTED`, "Out of memory")."""
    text = str(e)
    return isinstance(e, jax.errors.JaxRuntimeError) and ("RESOURCE_EXHAUSTED" in text or "Out of memory" in text)


def out_of_memory(e: BaseException, step: int | None, saved: int | None, where: str) -> RunError:
    """The one line a run that ran out of device memory ends in: the step it was in, XLA's own first
    line, and the checkpoint `--resume` continues from (`saved`, in `where`; None: none was saved)."""
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "out of memory")
    at = f" in step {step}" if step is not None else ""
    back = (f"the last checkpoint is step {saved} in {where}, which --resume continues from" if saved is not None
            else "no checkpoint was saved")
    return RunError(f"the device ran out of memory{at} ({first[:300]}), beyond the memory plan's estimate: make the "
                    f"step smaller (a smaller `:batch`, `:remat` on a repeated block, `:bf16`; `sexpgpu explain` "
                    f"shows the plan); {back}")
