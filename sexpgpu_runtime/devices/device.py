"""What the default JAX device offers a run: its memory (the budget `:stack :auto` and `explain` plan
against; `memory_available`, what `sexpgpu run` holds its memory plan to; `fit_verdict`, the run
it refuses before allocating anything) and the schedule target (`sexpgpu_lang.explain.TARGETS`) of
its compiler.

Read by lowering/graphs.py (the stack degree), lowering/xla_report.py (`explain --xla`) and
run/fits.py (the check `sexpgpu run` makes before it allocates); it imports nothing of the
runtime, only JAX and the front end's cost model.
"""
from __future__ import annotations

import os

import jax

from sexpgpu_lang import ir

#: `run` refuses a step whose memory plan exceeds the memory available by more than this factor: the
#: plan is within 0.57-1.20 of XLA's own live sets (docs/explain.md, "Checked against XLA"), so a plan
#: up to 1.25 times the memory may still fit and is left to run.
FIT_MARGIN = 1.25


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


def host_memory() -> int | None:
    """The memory this process can still take on the host (bytes): Linux's `MemAvailable`
    (/proc/meminfo), capped by the cgroup's limit less its usage where one is set
    (/sys/fs/cgroup/memory.max); else `os.sysconf`'s available pages. None where neither says."""
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            return None
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if limit != "max":
            avail = min(avail, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return avail


def memory_available() -> tuple[int | None, str]:
    """The memory one device of the run may fill (bytes) and where the figure came from: the device's
    `bytes_limit` (`device_budget`); on a backend that reports none (the CPU), the host's available
    memory (`host_memory`), which every CPU device of the process shares. (None, why) where nothing
    says."""
    budget, where = device_budget()
    if budget is not None:
        return budget, where
    host = host_memory()
    if host is None:
        return None, f"{jax.default_backend()} backend and host report no memory limit"
    return host, "host memory available"


def _largest_param(program: ir.Program) -> str:
    """The largest parameter of `program` in the words of the file: "`policy.embed` [300000 64] f32
    (73.2 MiB), declared at grpo.sx:20:18" (its place where the IR has its span)."""
    from sexpgpu_lang.explain import fmt_bytes
    from sexpgpu_lang.types import TensorType
    p = max(program.params, key=lambda q: TensorType(q.shape, q.dtype).nbytes)
    t = TensorType(p.shape, p.dtype)
    at = ""
    if p.span is not None and program.path:
        line, col = program.line_col(p.span.start)
        at = f", declared at {program.path}:{line}:{col}"
    return f"`{'.'.join(p.path)}` {t.show()} ({fmt_bytes(t.nbytes)}){at}"


def _tensor(program: ir.Program, node) -> str:
    """One node of the estimate's trace in the words of the file: what it is, its place, shape and dtype."""
    t = node.type.show()
    if node.op == "param":
        return f"the parameter `{'.'.join(node.static.get('path', ()))}` {t}"
    if node.op == "arg":
        role, _, key = node.role.partition(":")
        return f"the {role} entry `:{key}` {t}" if key else f"the `{role}` argument {t}"
    if node.op == "grad":
        return f"a gradient {t}"
    if node.span is not None and program.path:
        line, col = program.line_col(node.span.start)
        return f"the `{node.op}` at {program.path}:{line}:{col}, {t}"
    return f"a `{node.op}` value {t}"


def fit_verdict(program: ir.Program, budget: int, where: str, stack: int = 1, target: str = "accelerator",
                donate: bool = True, shared: int = 1) -> str | None:
    """Why a run could never fit `budget` bytes of one device's memory (`where` says whose), or None.

    `program` carries its mesh (`sexpgpu_lang.mesh.with_mesh`), `stack` is the runtime's stacking
    degree, `target` the compiler the live sets model, `donate` whether the runtime donates buffers
    (not on the CPU), `shared` how many of the run's devices share the memory (the CPU devices of a
    process share the host's). Two checks, in this order: the parameters and optimizer state alone
    (exact sizes, split over the mesh with FSDP) exceed it; or the peak of the memory plan `sexpgpu
    explain` prints (`sexpgpu_lang.explain.memory_plan`: parameters, optimizer state, the batch,
    the generator's state and every graph's activations) exceeds it by more than `FIT_MARGIN`. The
    line names the largest tensor of the step (its place in the file, shape, dtype, bytes), the sizes
    and the fix. Pure: it reads no device, so a test gives it any `budget`.
    """
    from sexpgpu_lang.explain import device_peak, fmt_bytes, memory_plan, optimizer_bytes, param_bytes, step_graphs
    n = program.run.devices or 1
    split = program.run.shard_params == "fsdp"
    resident = (param_bytes(program) + optimizer_bytes(program)) // (n if split else 1)
    if resident * shared > budget:
        return (f"the parameters and optimizer state take {fmt_bytes(resident)} per device, more than the "
                f"{fmt_bytes(budget)} of {where}: the run could never fit; its largest parameter is "
                f"{_largest_param(program)} (see `sexpgpu explain`)")
    graphs = step_graphs(program, stack, target)
    plan = memory_plan(program, graphs, stack, donate)
    need = device_peak(program, plan, stack) * shared
    if need <= budget * FIT_MARGIN:
        return None
    phase = max(plan["phases"], key=lambda p: p["live"])["phase"]
    size, node = max((g.biggest for g in graphs.values() if g.biggest is not None), key=lambda b: b[0])
    devices = f" on its {shared} devices together" if shared > 1 else (" per device" if n > 1 else "")
    return (f"the step needs about {fmt_bytes(need)}{devices} by the memory plan of `sexpgpu explain` (parameters, "
            f"optimizer state and the `{phase}` phase's activations), more than the {fmt_bytes(budget)} of {where}: "
            f"its largest tensor is {_tensor(program, node)} ({fmt_bytes(size)}); make the step smaller "
            f"(a smaller `:batch` or the sizes of that tensor, `:microbatches` to keep the records per step, "
            f"`:remat` on a repeated block, `:bf16`) and check it with `sexpgpu explain {program.path or 'FILE'} "
            f"--memory-budget {fmt_bytes(budget).replace(' ', '')}`")
