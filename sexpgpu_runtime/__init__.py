"""sexpgpu_runtime: the checked IR of sexpgpu_lang, lowered to JAX and trained.

Depends on sexpgpu_lang, never the other way around. Importing it enables
JAX's 64-bit types (the trip and `:step` are i64; docs/dev/design.md#types).

This module is the runtime's surface: what the command line, the tests and
the benchmarks use of the runtime, re-exported here (`__all__`), so that a
move inside the runtime changes no caller. A run: `train(program, options)`
with `RunOptions` (checked alone by `check_options`), giving a `RunResult`;
the option helpers of `sexpgpu run` (`shard_bytes`, `resume_command`,
`reward_note`); the errors a caller sees (`RunError` and its kinds,
`RunStopped`, `RunFinished`, `MeshError`); the mesh (`parse_mesh`,
`initialize`); the device (`device_budget`, `backend_target`); and
`explain --xla`'s report (`xla_report`). The parts (data/, devices/,
weights/, lowering/, run/) are not part of it: a test of a part imports
that part (ARCHITECTURE.md, "The runtime's surface").
"""
import jax

jax.config.update("jax_enable_x64", True)

from .errors import (BadDraw, BadValue, DataError, MeshError, OptionError, RewardError,  # noqa: E402
                     RunDirInUse, RunError, RunFinished, RunStopped, SampleError)
from .devices.device import backend_target, device_budget  # noqa: E402
from .devices.sharding import initialize, parse_mesh  # noqa: E402
from .lowering.xla_report import xla_report  # noqa: E402
from .run.options import RunOptions, check_options, resume_command, shard_bytes  # noqa: E402
from .run.rewards import reward_note  # noqa: E402
from .run.state import RunResult  # noqa: E402
from .run.train import train  # noqa: E402

__all__ = [
    # a run
    "train", "RunOptions", "RunResult", "check_options", "shard_bytes", "resume_command", "reward_note",
    # the errors a caller of the surface sees
    "RunError", "DataError", "OptionError", "RunDirInUse", "SampleError", "RewardError", "BadValue", "BadDraw",
    "RunStopped", "RunFinished", "MeshError",
    # the mesh and the device
    "parse_mesh", "initialize", "device_budget", "backend_target",
    # explain --xla
    "xla_report",
]
