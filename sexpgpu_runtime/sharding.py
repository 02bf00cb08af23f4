"""Data parallelism with jax.sharding: one `Mesh` with a `data` axis, batches split along it.

`DataParallel(n)` builds a 1-D mesh over the first `n` devices. Every batch
(and the generator's state, which holds one entry per record) is sharded
along the batch axis: the first axis, or the second under stacking (the
first is then the stack). Parameters, optimizer state, the context scalars
and the counter totals are replicated. The graphs are the same jitted
functions as on one device; XLA sees sharded inputs and replicated
parameters and inserts the gradient all-reduce itself.

With one device there is no mesh at all (`DataParallel.of(program, None)`
returns None when one device is asked for), so a one-device run is the
same program, bit for bit, as before sharding existed.

Multi-host: `initialize(coordinator, num_processes, process_id)` calls
`jax.distributed.initialize` before anything else touches JAX; the mesh
then spans every process's devices, and each process puts its own slice of
each global batch (`make_array_from_process_local_data`).

This module knows nothing of the training loop; train.py and graphs.py
call it.
"""
from __future__ import annotations

import numpy as np

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "data"


class MeshError(Exception):
    """A mesh that cannot be built: more devices than JAX sees, a batch that does not divide."""


def parse_mesh(text: str) -> int:
    """`--mesh data=N` (or just `N`) to the data axis size N; ValueError with a one-line reason."""
    t = text.strip()
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


def initialize(coordinator: str | None, num_processes: int | None, process_id: int | None) -> None:
    """Join a multi-process run through `jax.distributed.initialize` (before any other JAX call).

    With none of the three given, nothing happens (JAX's own environment
    variables are read only when `jax.distributed.initialize()` is called,
    which a single-process run never does).
    """
    if coordinator is None and num_processes is None and process_id is None:
        return
    if coordinator is None or num_processes is None or process_id is None:
        raise MeshError("a multi-process run needs all of --coordinator HOST:PORT, --num-processes N and --process-id I")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)


class DataParallel:
    """The mesh of a data-parallel run and the shardings of what goes into its graphs."""

    def __init__(self, devices: int):
        available = jax.devices()
        if devices > len(available):
            raise MeshError(f"the run asks for {devices} devices, but JAX sees {len(available)} "
                            f"({jax.default_backend()}); lower `:devices` in `run` or `--mesh data=N`")
        self.devices = devices
        self.mesh = Mesh(np.array(available[:devices]), (AXIS,))
        self.replicated = NamedSharding(self.mesh, P())
        self.batch = NamedSharding(self.mesh, P(AXIS))
        self.stacked_batch = NamedSharding(self.mesh, P(None, AXIS))

    @staticmethod
    def of(program, devices: int | None) -> "DataParallel | None":
        """The run's mesh: `devices` (the command line's `--mesh`), else the file's `:devices`, else every
        device (as many as divide every loader's `:batch`). None when that is one device: a one-device
        run uses no mesh at all."""
        n = devices if devices is not None else getattr(program.run, "devices", None)
        if n is None:
            # Every device, or as many as split every batch evenly (6 GPUs and `:batch 64`: 4 of them).
            batches = [ld.batch for ld in program.loaders.values()]
            n = max(d for d in range(1, len(jax.devices()) + 1) if all(b % d == 0 for b in batches))
        if n == 1:
            return None
        dp = DataParallel(n)
        dp.check_batches(program)
        return dp

    def check_batches(self, program) -> None:
        """Every loader's `:batch` must divide by the device count (lint says so when `:devices` is in
        the file; a `--mesh` from the command line is checked here)."""
        for name, ld in program.loaders.items():
            if ld.batch % self.devices:
                raise MeshError(f"loader `{name}` has `:batch {ld.batch}`, which does not divide by the "
                                f"{self.devices} devices of the mesh; make `:batch` a multiple of {self.devices}")

    def describe(self) -> str:
        """One line: the mesh's axis, size and devices."""
        kinds = sorted({d.platform for d in self.mesh.devices.flat})
        return f"mesh data={self.devices} over {self.devices} {'/'.join(kinds)} devices ({jax.process_count()} processes)"

    # -- placing values -------------------------------------------------------------------------
    def put_replicated(self, tree):
        """Parameters, optimizer state, contexts, counters: the whole value on every device."""
        return jax.device_put(tree, self.replicated)

    def put_batch(self, tree, stacked: bool):
        """A batch (every leaf with the batch axis first, or second when stacked) split along `data`."""
        sharding = self.stacked_batch if stacked else self.batch
        if jax.process_count() == 1:
            return jax.device_put(tree, sharding)
        return jax.tree_util.tree_map(lambda x: self._from_process_local(np.asarray(x), sharding, stacked), tree)

    def _from_process_local(self, x: np.ndarray, sharding, stacked: bool):
        """Multi-host: every process has built the global batch (the loader is a pure function of the
        position); each gives JAX only its own rows, the slice its devices hold."""
        axis = 1 if stacked else 0
        n, k = jax.process_count(), jax.process_index()
        rows = x.shape[axis] // n
        local = np.take(x, np.arange(k * rows, (k + 1) * rows), axis=axis)
        return jax.make_array_from_process_local_data(sharding, local, x.shape)

    def constrain_records(self, tree, batch: int):
        """Inside a traced (per-copy) function: keep every per-record value (first axis == batch)
        split along `data`; under vmap the stack axis stays unsplit."""
        def one(x):
            if getattr(x, "ndim", 0) >= 1 and x.shape[0] == batch:
                return jax.lax.with_sharding_constraint(x, self.batch)
            return x
        return jax.tree_util.tree_map(one, tree)
