"""The mesh's rules, without JAX: the `--mesh` spelling, FSDP's choice of axis and tensor parallelism's.

The mesh has two axes: `data` (batches split along it; under FSDP the parameters too) and `model`
(tensor parallelism: attention split by heads, the MLP by its hidden width, the embedding and the output
by vocabulary, as MaxText's logical axes `heads`, `mlp` and `vocab` map to its `tensor` axis). Which
axis of a parameter `model` splits is chosen from the parameter's name and shape (`model_dim`), the
names of the standard library's blocks and of the one form's families (hf_config.py).

Both `sexpgpu explain` (static, never imports JAX) and the runtime
(sexpgpu_runtime/devices/sharding.py) use these, so the shardings explain prints are
the ones a run uses (docs/sharding.md).
"""
from __future__ import annotations

from dataclasses import replace

AXIS = "data"
#: The tensor-parallel axis (`--mesh data=N,model=M`, `(run ... :model-parallel M)`).
MODEL_AXIS = "model"
#: `:shard-params` values: `:replicated` (every device holds every parameter) or `:fsdp`.
SHARD_PARAMS = ("replicated", "fsdp")


def parse_mesh(text: str) -> tuple[int, int]:
    """`--mesh data=N,model=M` (either axis may be left out: 1; a bare `N` is `data=N`) to (N, M);
    ValueError with a one-line reason."""
    sizes = {AXIS: None, MODEL_AXIS: None}
    for part in text.split(","):
        name, _, value = part.strip().rpartition("=")
        name = name.strip() or AXIS
        if name not in sizes:
            raise ValueError(f"--mesh names the axis `{name}`; the axes are `{AXIS}` and `{MODEL_AXIS}` "
                             "(e.g. --mesh data=2,model=4)")
        if sizes[name] is not None:
            raise ValueError(f"--mesh names the axis `{name}` twice, in `{text}`")
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"--mesh takes `data=N,model=M` with N and M whole numbers of devices, "
                             f"got `{text}`") from None
        if n < 1:
            raise ValueError(f"--mesh {name}=N needs N >= 1, got {n}")
        sizes[name] = n
    return sizes[AXIS] or 1, sizes[MODEL_AXIS] or 1


#: The parameters tensor parallelism splits, by name: the axis split (counted from the last, so a
#: repeated block's leading layer axis does not move it) and what that axis is. `kv-heads` are
#: replicated when the axis size does not divide them (MaxText's rule for fewer KV heads than the
#: tensor axis: each device computes every KV head); `vocab` too (GPT-2's 50257 divides by nothing).
#: Any other name (norms, output biases, position tables) is whole on every device.
MODEL_SPLITS: dict[str, tuple[int, str]] = {
    "wq": (-2, "heads"), "bq": (-2, "heads"),                 # [D N H], [N H]
    "wk": (-2, "kv-heads"), "wv": (-2, "kv-heads"),           # [D K H]
    "bk": (-2, "kv-heads"), "bv": (-2, "kv-heads"),           # [K H]
    "wo": (-3, "heads"),                                      # [N H D]
    "w-gate": (-1, "hidden"), "w-up": (-1, "hidden"), "w1": (-1, "hidden"), "b1": (-1, "hidden"),
    "w-down": (-2, "hidden"), "w2": (-2, "hidden"),           # [F D]
    "embed": (-2, "vocab"), "wte": (-2, "vocab"),             # [V D]
    "lm-head": (-1, "vocab"), "out": (-1, "vocab"),           # [D V]
}
#: What a size the model axis does not divide does: `error` (the checker refuses it) or `replicate`.
UNDIVIDED = {"heads": "error", "hidden": "error", "kv-heads": "replicate", "vocab": "replicate"}


def model_split(name: str, shape: tuple[int, ...], override: dict | None = None) -> tuple[int, str] | None:
    """The axis (counted from the front) of a parameter `name` (its dotted path, `teacher.layers.wq`, or
    its last name) of `shape` that the `model` axis would split, and what it is (`heads`, `kv-heads`,
    `hidden`, `vocab`, or `given` for the file's override); None when the parameter is whole on every
    device. `override`: the file's `:shard`, as the checker resolves it per parameter (dotted path -> the
    axis counted from the last, -1 the last, or None to replicate), which wins over the names."""
    if override and name in override:
        d = override[name]
        return None if d is None or -d > len(shape) else (len(shape) + d, "given")
    rule = MODEL_SPLITS.get(name.rsplit(".", 1)[-1])
    if rule is None or len(shape) < -rule[0]:
        return None
    return len(shape) + rule[0], rule[1]


def model_dim(name: str, shape: tuple[int, ...], model: int, override: dict | None = None) -> int | None:
    """The axis of a parameter `name` of `shape` that a `model` axis of size `model` splits, or None (whole
    on every device): `model_split`'s axis when `model` divides its size; a KV head count or vocabulary
    it does not divide is replicated; a head count or hidden width it does not divide is None here too
    (the checker refuses it first: `undivided`)."""
    if model <= 1:
        return None
    split = model_split(name, shape, override)
    if split is None or shape[split[0]] % model:
        return None
    return split[0]


def undivided(name: str, shape: tuple[int, ...], model: int, override: dict | None = None) -> str | None:
    """Why a `model` axis of size `model` cannot split the parameter `name` of `shape` as its structure asks
    (a head count or MLP width it does not divide), in one clause; None when it can or need not."""
    split = model_split(name, shape, override)
    if model <= 1 or split is None or shape[split[0]] % model == 0:
        return None
    d, what = split
    if UNDIVIDED.get(what, "error") == "replicate":
        return None
    return (f"the `model` axis of {model} devices does not divide `{name.rsplit('.', 1)[-1]}`'s {what} ({shape[d]}, axis {d} of "
            f"{list(shape)})")


def param_dims(name: str, shape: tuple[int, ...], data: int, model: int, fsdp: bool,
               override: dict | None = None) -> tuple[int | None, int | None]:
    """(the axis `data` splits under FSDP, the axis `model` splits) of a parameter; either None. FSDP takes
    the largest axis `data` divides other than the one `model` splits."""
    m = model_dim(name, shape, model, override)
    d = None
    if fsdp and data > 1:
        rest = tuple(1 if i == m else s for i, s in enumerate(shape))
        d = fsdp_dim(rest, data)
    return d, m


def spec_text(ndim_dims: tuple[int | None, int | None]) -> str:
    """A PartitionSpec as JAX prints it from (data axis, model axis): `P(None, 'model')`, `P()`."""
    d, m = ndim_dims
    last = max((x for x in (d, m) if x is not None), default=-1)
    parts = ["'data'" if i == d else "'model'" if i == m else "None" for i in range(last + 1)]
    return "P(" + ", ".join(parts) + ")"


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


def with_mesh(program, devices: int | None, fsdp: bool | None = None, model: int | None = None):
    """`program` with the command line's `--mesh data=N,model=M` (and `--fsdp`/`--no-fsdp`) in place of the
    file's `:devices`, `:model-parallel` (and `:shard-params`). ValueError when a batch does not divide, or
    the model axis does not divide a parameter's heads or width (`check_model_axis`)."""
    run = program.run
    if devices is not None:
        check_batches(program, devices)
        run = replace(run, devices=devices)
    if model is not None:
        check_model_axis(program, model)
        run = replace(run, model_parallel=model)
    if fsdp is not None:
        run = replace(run, shard_params="fsdp" if fsdp else "replicated")
    return program if run is program.run else replace(program, run=run)


def explain_mesh(program, mesh: str | None, fsdp: bool | None):
    """`program` as `sexpgpu explain --mesh MESH --fsdp/--no-fsdp` explains it (`with_mesh`; `mesh` the
    `--mesh` text or None). ValueError (one line) for a bad `--mesh`, a batch that does not divide, or
    `--fsdp` on a run with one device (nothing to split the parameters over)."""
    data, model = parse_mesh(mesh) if mesh is not None else (None, None)
    program = with_mesh(program, data, fsdp, model)
    if fsdp and (program.run.devices or 1) == 1:
        raise ValueError("--fsdp splits the parameters over a mesh, and this run has none: give --mesh data=N "
                         "(or `:devices N` in `run`)")
    return program


def check_model_axis(program, model: int) -> None:
    """ValueError (one line) naming the first parameter whose heads or MLP width a `model` axis of `model`
    devices does not divide."""
    over = shard_overrides(program, model)
    for path, shape in param_shapes(program):
        why = undivided(".".join(path), shape, model, over)
        if why:
            raise ValueError(f"{why}, parameter `{'.'.join(path)}`; pick a model axis that divides it")


def shard_overrides(program, model: int | None = None) -> dict:
    """The run file's `(run ... :shard (:name axis ...))` resolved per parameter, `model_split`'s overrides
    (dotted path -> axis counted from the last, or None: replicated), with each LoRA adapter's split
    beside it for a `model` axis of `model` devices (the run's `:model-parallel` when None):
    `adapter_overrides`. An adapter the file names itself keeps the file's word."""
    over = dict(getattr(program.run, "shard", None) or {})
    m = model if model is not None else getattr(program.run, "model_parallel", 1) or 1
    for name, axis in adapter_overrides(program, m, over).items():
        over.setdefault(name, axis)
    return over


def adapter_overrides(program, model: int, over: dict | None = None) -> dict[str, int | None]:
    """Each LoRA adapter's split along a `model` axis of `model` devices, as `model_split`'s overrides
    (`KEY.lora-a`'s and `KEY.lora-b`'s dotted paths -> the axis counted from the last, or None: whole on
    every device). The adapters split with their base, as MaxText's and tunix's LoRA do: the base `[in
    out]` (its input axes first, `ir.AdapterIR.in_axes` of them) is `base + scale * (A @ B)` with A `[in
    r]` and B `[r out]`, so a base split on its first output axis (`wq` by heads, `w-up` by width,
    `lm-head` by vocabulary) splits B on its output axis and keeps A whole, and a base split on its first
    input axis (`wo` by heads, `w-down` by width, `embed` by vocabulary) splits A on its input axis and
    keeps B whole: each device's share of `A @ B` is its share of the base, and nothing is gathered to
    add them. A base kept whole (a KV head count the axis does not divide, an override), or split on an
    axis inside its input or output group (whose share of the flattened group is not contiguous), keeps
    both adapters whole."""
    if model <= 1 or not getattr(program, "adapters", ()):
        return {}
    params = {tuple(p.path): p for p in program.params}
    out: dict[str, int | None] = {}
    for a in program.adapters:
        base = params.get(tuple(a.path))
        if base is None:
            continue
        dotted = ".".join(a.path)
        lead = 1 if base.layers else 0
        d = model_dim(dotted, tuple(base.shape), model, over)
        out[dotted + ".lora-a"] = -2 if d == lead else None
        out[dotted + ".lora-b"] = -1 if d is not None and d == lead + a.in_axes else None
    return out


def param_shapes(program) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """Every parameter of `program` as (its path of names, its shape), a repeated block's with the layer axis."""
    out = []
    for p in program.params:
        out.append((tuple(p.path), tuple(p.shape)))
    return out


def check_coordinator(address: str, where: str = "--coordinator") -> None:
    """A multi-process run's coordinator address, `HOST:PORT` (`[V6ADDR]:PORT` too) with PORT 1-65535,
    as `jax.distributed.initialize` needs it; ValueError with a one-line reason otherwise. `where`
    names the setting it came from in the message."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{where} takes HOST:PORT, the address and port of process 0 with a port from 1 to "
                         f"65535 (e.g. 10.0.0.1:1234), got `{address}`")
