"""The data-parallel mesh's rules, without JAX: the `--mesh` spelling and FSDP's choice of axis.

Both `sexpgpu explain` (static, never imports JAX) and the runtime
(sexpgpu_runtime/devices/sharding.py) use these, so the shardings explain prints are
the ones a run uses (docs/sharding.md).
"""
from __future__ import annotations

from dataclasses import replace

AXIS = "data"
#: `:shard-params` values: `:replicated` (every device holds every parameter) or `:fsdp`.
SHARD_PARAMS = ("replicated", "fsdp")


def parse_mesh(text: str) -> int:
    """`--mesh data=N` (or just `N`) to the data axis size N; ValueError with a one-line reason."""
    t = text.strip()
    if "," in t:
        raise ValueError(f"--mesh takes one axis, `data=N`; got `{text}` (a model axis is not supported: "
                         "use --fsdp to split the parameters along `data`)")
    name, _, value = t.rpartition("=")
    if name and name.strip() != AXIS:
        raise ValueError(f"--mesh names the axis `{name.strip()}`; the one axis is `{AXIS}` (e.g. --mesh data=8)")
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"--mesh takes `data=N` with N a whole number of devices, got `{text}`") from None
    if n < 1:
        raise ValueError(f"--mesh data=N needs N >= 1, got {n}")
    return n


def fsdp_dim(shape: tuple[int, ...], devices: int) -> int | None:
    """The axis FSDP splits an array of `shape` along over `devices` devices: its largest axis whose
    size `devices` divides (the first of equal ones); None (the array stays whole on every device)
    when no axis divides, for a scalar, or for one device."""
    if devices <= 1:
        return None
    best = None
    for i, size in enumerate(shape):
        if size % devices == 0 and size >= devices and (best is None or size > shape[best]):
            best = i
    return best


def fsdp_spec(shape: tuple[int, ...], devices: int) -> str:
    """FSDP's PartitionSpec for `shape`, written as JAX prints it: `P(None, 'data')`, or `P()`."""
    d = fsdp_dim(shape, devices)
    if d is None:
        return "P()"
    return "P(" + ", ".join("'data'" if i == d else "None" for i in range(d + 1)) + ")"


def check_batches(program, devices: int) -> None:
    """ValueError (one line) when a loader's `:batch` does not divide by `devices`."""
    for name, ld in program.loaders.items():
        if ld.batch % devices:
            raise ValueError(f"loader `{name}` has `:batch {ld.batch}`, which does not divide by the "
                             f"{devices} devices of the mesh; make `:batch` a multiple of {devices}")


def with_mesh(program, devices: int | None, fsdp: bool | None = None):
    """`program` with the command line's `--mesh data=N` (and `--fsdp`/`--no-fsdp`) in place of the file's
    `:devices` (and `:shard-params`), for `sexpgpu explain`. ValueError when a batch does not divide."""
    run = program.run
    if devices is not None:
        check_batches(program, devices)
        run = replace(run, devices=devices)
    if fsdp is not None:
        run = replace(run, shard_params="fsdp" if fsdp else "replicated")
    return program if run is program.run else replace(program, run=run)


def explain_mesh(program, mesh: str | None, fsdp: bool | None):
    """`program` as `sexpgpu explain --mesh MESH --fsdp/--no-fsdp` explains it (`with_mesh`; `mesh` the
    `--mesh` text or None). ValueError (one line) for a bad `--mesh`, a batch that does not divide, or
    `--fsdp` on a run with one device (nothing to split the parameters over)."""
    program = with_mesh(program, parse_mesh(mesh) if mesh is not None else None, fsdp)
    if fsdp and (program.run.devices or 1) == 1:
        raise ValueError("--fsdp splits the parameters over a mesh, and this run has none: give --mesh data=N "
                         "(or `:devices N` in `run`)")
    return program


def check_coordinator(address: str, where: str = "--coordinator") -> None:
    """A multi-process run's coordinator address, `HOST:PORT` (`[V6ADDR]:PORT` too) with PORT 1-65535,
    as `jax.distributed.initialize` needs it; ValueError with a one-line reason otherwise. `where`
    names the setting it came from in the message."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{where} takes HOST:PORT, the address and port of process 0 with a port from 1 to "
                         f"65535 (e.g. 10.0.0.1:1234), got `{address}`")
