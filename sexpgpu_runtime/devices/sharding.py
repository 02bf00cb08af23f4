"""Data parallelism with jax.sharding: one `Mesh` with a `data` axis, batches split along it.

`DataParallel(n)` builds a 1-D mesh over `n` devices. Every batch (and the
generator's state, which holds one entry per record) is sharded along the
batch axis: the first axis, or the second under stacking (the first is
then the stack). The context scalars and the counter totals are replicated.
The parameters and the optimizer state are replicated, or with
`fsdp=True` (`:shard-params :fsdp`, `--fsdp`) each array is split along its
largest axis the mesh size divides (sexpgpu_lang.mesh.fsdp_dim; whole on
every device when none does). The graphs are the same jitted functions as
on one device: XLA sees the inputs' shardings and the update graph's
`out_shardings` and inserts the gradient all-reduce (or, under FSDP, the
parameter all-gathers and the gradient reduce-scatters) itself.

With one device there is no mesh at all (`DataParallel.of(program, None)`
returns None when one device is asked for), so a one-device run is the
same program, bit for bit, as before sharding existed.

Multi-host: `initialize(coordinator, num_processes, process_id)` calls
`jax.distributed.initialize` before anything else touches JAX; the mesh
then spans every process's devices, an equal number from each, in process
order, so process `k` holds rows `[k*B/P, (k+1)*B/P)` of every global batch
of B records. Each process reads only those records (`read`) and gives them
to JAX (`make_array_from_process_local_data`), so the global batch is the
one a single process reads.

This module knows nothing of the training loop; train.py and graphs.py
call it.
"""
from __future__ import annotations

import numpy as np

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from sexpgpu_lang.mesh import AXIS, MODEL_AXIS, param_dims, parse_mesh  # noqa: F401  (parse_mesh: the CLI's import)

from ..errors import MeshError


def initialize(coordinator: str | None, num_processes: int | None, process_id: int | None,
               detect: bool = False) -> None:
    """Join a multi-process run through `jax.distributed.initialize` (before any other JAX call).

    `coordinator` (HOST:PORT of process 0), `num_processes` and `process_id`
    are the command line's; any left out JAX finds itself where it can: the
    coordinator in `JAX_COORDINATOR_ADDRESS`, all three under SLURM, Open
    MPI, Kubernetes or on Cloud TPU. Nothing happens (a one-process run) when
    none is given, `JAX_COORDINATOR_ADDRESS` is not set and `detect`
    (`--distributed`) is not asked. MeshError (one line) when JAX cannot
    complete them, or cannot join.
    """
    import os
    if coordinator is None and num_processes is None and process_id is None and not detect \
            and not os.environ.get("JAX_COORDINATOR_ADDRESS"):
        return
    from sexpgpu_lang.mesh import check_coordinator
    try:
        if coordinator is not None:
            check_coordinator(coordinator)
        elif os.environ.get("JAX_COORDINATOR_ADDRESS"):
            check_coordinator(os.environ["JAX_COORDINATOR_ADDRESS"], "JAX_COORDINATOR_ADDRESS")
    except ValueError as e:
        raise MeshError(str(e)) from None
    if process_id is not None and num_processes is not None and process_id >= num_processes:
        raise MeshError(f"--process-id {process_id} is not below --num-processes {num_processes}; "
                        f"number the processes 0 to {num_processes - 1}")
    try:
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
    except (ValueError, RuntimeError) as e:   # JAX's own: a missing setting, a coordinator that never answered
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise MeshError(f"cannot join a multi-process run: {first.rstrip('.')}; give --coordinator HOST:PORT, "
                        "--num-processes N and --process-id I (or run where JAX finds them: JAX_COORDINATOR_ADDRESS, "
                        "SLURM, Open MPI, Kubernetes, Cloud TPU)") from None


def mesh_devices(devices: int) -> list:
    """The `devices` devices of the mesh, in mesh order: the first `devices` JAX lists in one process;
    with P processes the first `devices / P` of each process, process 0's first. MeshError when there
    are not enough, or `devices` does not divide by P."""
    available = jax.devices()
    if devices > len(available):
        raise MeshError(f"the run asks for {devices} devices, but JAX sees {len(available)} "
                        f"({jax.default_backend()}); lower `:devices` in `run` or `--mesh data=N`")
    procs = jax.process_count()
    if procs == 1:
        return available[:devices]
    if devices % procs:
        raise MeshError(f"a mesh of {devices} devices cannot take the same number from each of the {procs} "
                        f"processes; make `:devices`/`--mesh data=N` a multiple of {procs}")
    per = devices // procs
    out = []
    for k in range(procs):
        mine = sorted((d for d in available if d.process_index == k), key=lambda d: d.id)
        if len(mine) < per:
            raise MeshError(f"the mesh needs {per} devices from each process, but process {k} has {len(mine)}")
        out += mine[:per]
    return out


def run_devices(dp: "DataParallel | None") -> str:
    """What `sexpgpu run` says at its start: the devices it trains on and its mesh, in one line,
    e.g. `1 gpu device (NVIDIA H200) of the 8 JAX sees; no mesh`."""
    if dp is not None:
        return dp.describe()
    return f"{_devices(jax.devices()[:1])} of the {len(jax.devices())} JAX sees; no mesh"


def _devices(devs: list) -> str:
    """`1 cpu device`, `4 gpu devices (NVIDIA H200)`: the platform, and the kind where it says more."""
    platforms = "/".join(sorted({d.platform for d in devs}))
    kinds = ", ".join(sorted({d.device_kind for d in devs} - {d.platform for d in devs}))
    return f"{len(devs)} {platforms} device{'s' if len(devs) != 1 else ''}" + (f" ({kinds})" if kinds else "")


def _leaf_name(path) -> str:
    """The dictionary keys on a tree path, dotted (a parameter's path, `teacher.layers.wq`; an optimizer
    moment's is its parameter's), "" when there is none."""
    return ".".join(k.key for k in path if isinstance(getattr(k, "key", None), str))


class DataParallel:
    """The mesh of a data-parallel run and the shardings of what goes into its graphs.

    `fsdp`: split the parameters and the optimizer state along `data` (else replicated).
    """

    def __init__(self, devices: int, fsdp: bool = False, model: int = 1, overrides: dict | None = None):
        self.devices = devices   # the `data` axis
        self.model = model       # the `model` (tensor-parallel) axis
        self.fsdp = fsdp
        self.overrides = dict(overrides or {})
        self.mesh = Mesh(np.array(mesh_devices(devices * model)).reshape(devices, model), (AXIS, MODEL_AXIS))
        self.replicated = NamedSharding(self.mesh, P())
        self.batch = NamedSharding(self.mesh, P(AXIS))
        self.stacked_batch = NamedSharding(self.mesh, P(None, AXIS))

    @staticmethod
    def of(program, devices: int | None, fsdp: bool | None = None, model: int | None = None) -> "DataParallel | None":
        """The run's mesh: `devices` (the command line's `--mesh`), else the file's `:devices`, else every
        device (as many as divide every loader's `:batch`, and a multiple of the process count). `fsdp`
        (`--fsdp`) overrides the file's `:shard-params`. None when that is one device: a one-device run
        uses no mesh at all. MeshError when the mesh cannot be built."""
        n = devices if devices is not None else getattr(program.run, "devices", None)
        procs = jax.process_count()
        m = model if model is not None else getattr(program.run, "model_parallel", 1) or 1
        if model is not None:
            from sexpgpu_lang.mesh import check_model_axis
            try:
                check_model_axis(program, m)
            except ValueError as e:
                raise MeshError(str(e)) from None
        if n is None and m > 1:
            n = 1
        if n is None:
            # Every device, or as many as split every batch evenly (6 GPUs and `:batch 64`: 4 of them).
            batches = [ld.batch for ld in program.loaders.values()]
            fits = [d for d in range(procs, len(jax.devices()) + 1, procs) if all(b % d == 0 for b in batches)]
            if not fits:
                raise MeshError(f"no mesh over the {procs} processes divides every loader's `:batch` "
                                f"({', '.join(map(str, batches))}); make each `:batch` a multiple of {procs}")
            n = max(fits)
        if n == 1 and m == 1 and procs == 1:
            return None
        if fsdp is None:
            fsdp = getattr(program.run, "shard_params", "replicated") == "fsdp"
        from sexpgpu_lang.mesh import shard_overrides
        dp = DataParallel(n, fsdp, m, shard_overrides(program, m))
        dp.check_batches(program)
        return dp

    def check_batches(self, program) -> None:
        """Every loader's `:batch` must divide by the device count (lint says so when `:devices` is in
        the file; a `--mesh` from the command line is checked here). MeshError otherwise."""
        for name, ld in program.loaders.items():
            if ld.batch % self.devices:
                raise MeshError(f"loader `{name}` has `:batch {ld.batch}`, which does not divide by the "
                                f"{self.devices} devices of the mesh; make `:batch` a multiple of {self.devices}")

    def describe(self) -> str:
        """One line: the mesh's axis, size and devices."""
        how = "parameters split (FSDP)" if self.fsdp else "parameters replicated"
        if self.model > 1:
            how = f"parameters split by heads, MLP width and vocabulary along model={self.model}" + (
                ", and FSDP along data" if self.fsdp else "")
        procs = jax.process_count()
        axes = f"data={self.devices}" + (f",model={self.model}" if self.model > 1 else "")
        return (f"{_devices(list(self.mesh.devices.flat))} of the {len(jax.devices())} JAX sees"
                + (f" in {procs} processes" if procs > 1 else "") + f"; mesh {axes}, {how}")

    @property
    def splits_state(self) -> bool:
        """Whether any parameter may be split (FSDP along `data`, or a `model` axis): the update graph's
        outputs and the gradients are then pinned to the state's shardings, not replicated."""
        return self.fsdp or self.model > 1

    # -- the state: parameters, optimizer state, counters ---------------------------------------
    def state_sharding(self, shape: tuple[int, ...], name: str = "") -> NamedSharding:
        """Where an array of the state named `name` (its dotted path in the tree: `teacher.layers.wq`)
        lives: along `model` the axis its structure says (sexpgpu_lang.mesh.model_dim: heads, MLP width,
        vocabulary), under FSDP along `data` its largest other axis the data size divides; replicated
        otherwise, and for scalars."""
        if name not in self.overrides:   # (an optimizer's or checkpoint's tree wraps the parameters' paths)
            name = next((k for k in self.overrides if name.endswith("." + k)), name)
        d, m = param_dims(name, tuple(shape), self.devices, self.model, self.fsdp, self.overrides)
        if d is None and m is None:
            return self.replicated
        last = max(x for x in (d, m) if x is not None)
        return NamedSharding(self.mesh, P(*[AXIS if i == d else MODEL_AXIS if i == m else None
                                            for i in range(last + 1)]))

    def state_shardings(self, tree):
        """A tree of `state_sharding`s, one per leaf of `tree` (arrays or `jax.ShapeDtypeStruct`s), each
        by its shape and the last name on its path (an optimizer's moments are split as their parameter)."""
        return jax.tree_util.tree_map_with_path(
            lambda path, x: self.state_sharding(tuple(getattr(x, "shape", ())), _leaf_name(path)), tree)

    def put_state(self, tree):
        """Parameters, optimizer state, counters onto the mesh (every process passes the same values)."""
        return jax.device_put(tree, self.state_shardings(tree))

    def constrain_state(self, tree):
        """Inside a traced function: pin each leaf (a gradient, say) to its state sharding, so under FSDP
        XLA reduce-scatters a gradient rather than all-reducing it."""
        return jax.tree_util.tree_map(jax.lax.with_sharding_constraint, tree, self.state_shardings(tree))

    def put_replicated(self, tree):
        """Contexts and other small values: the whole value on every device."""
        return jax.device_put(tree, self.replicated)

    # -- batches --------------------------------------------------------------------------------
    def rows(self, batch: int) -> tuple[int, int]:
        """The rows `[lo, hi)` of a global batch of `batch` records that this process's devices hold
        (all of them in a one-process run)."""
        if jax.process_count() == 1:
            return 0, batch
        spans = [idx[0] for idx in self.batch.addressable_devices_indices_map((batch,)).values()]
        lo, hi = min(s.start or 0 for s in spans), max(batch if s.stop is None else s.stop for s in spans)
        return lo, hi

    def read(self, loader, position: int) -> dict:
        """This process's records of the global batch at `position` (loaders.Loader.batch): the whole
        batch in one process; in several, only the rows its devices hold, so no host reads another's."""
        if jax.process_count() == 1:
            return loader.batch(position)
        lo, hi = self.rows(loader.spec.batch)
        return loader.batch(position, lo, hi)

    def put_batch(self, tree, stacked: bool):
        """A batch (every leaf with the batch axis first, or second when stacked) split along `data`.
        In a multi-process run `tree` holds only this process's rows (`read`); the global array is
        built from every process's rows (`jax.make_array_from_process_local_data`)."""
        sharding = self.stacked_batch if stacked else self.batch
        if jax.process_count() == 1:
            return jax.device_put(tree, sharding)
        axis = 1 if stacked else 0
        procs = jax.process_count()

        def one(x):
            x = np.asarray(x)
            shape = list(x.shape)
            shape[axis] *= procs   # every process holds an equal, contiguous share (mesh_devices)
            return jax.make_array_from_process_local_data(sharding, x, tuple(shape))
        return jax.tree_util.tree_map(one, tree)

    def constrain_records(self, tree, batch: int):
        """Inside a traced (per-copy) function: keep every per-record value (first axis == batch)
        split along `data`; under stacking each copy's state is constrained, the stack axis unsplit. With a
        `model` axis its other axes are left unconstrained (XLA keeps a KV cache split by heads)."""
        def one(x):
            if getattr(x, "ndim", 0) >= 1 and x.shape[0] == batch:
                if self.model == 1:
                    return jax.lax.with_sharding_constraint(x, self.batch)
                # along `model` left to XLA: a cache a split `wk` wrote stays split by heads
                rest = [P.UNCONSTRAINED] * (x.ndim - 1)
                return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, P(AXIS, *rest)))
            return x
        return jax.tree_util.tree_map(one, tree)
