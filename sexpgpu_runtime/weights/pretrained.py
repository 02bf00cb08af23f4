"""Parameters in .safetensors files: `:pretrained` values loaded at the start, `--export` written at the end.

A `:pretrained` model's parameters are read through its name mapping
(hf_layout.py; without `:names` each is the tensor named by its path below
the model joined with `.`). `export_params` writes the root model's
trainable parameters (and the frozen ones with `frozen=True`) to one file,
named by their paths joined with `.`, or, with a mapping, in the Hugging
Face layout (hf_layout.export_mapped). `content_hashes` fingerprints the
pretrained files, for checkpoints to refuse a resume with a changed
teacher. Errors are RunErrors naming the file and the tensor. It must not
import train.py.
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from sexpgpu_lang import ir
from sexpgpu_lang.name_mapping import layer_name, leaf, patterned

from .hf_layout import export_mapped, load_mapped
from ..data.files import first_nonfinite
from ..dtypes import jdt
from ..errors import RunError
from .lora import export_adapter, load_adapter, merged
from .params import fill_copies, flatten, init_params, merge, set_path
from ..paths import publish


def initial_params(program: ir.Program, seed: int) -> tuple[dict, dict]:
    """The run's (trainable, frozen) parameters before its first step: each drawn from the seed
    (params.init_params), except the `:pretrained` models', read from their checkpoints without
    drawing values they would replace. Every drawn leaf has the bits it has in a run without
    `:pretrained` (each leaf's key is its own place's). RunError as `load_pretrained`."""
    trainable, frozen = init_params(program.params, seed, tuple(spec.prefix for spec in program.pretrained))
    load_pretrained(program, trainable, frozen)
    fill_copies(program.params, trainable, frozen)
    return trainable, frozen


def frozen_params(program: ir.Program, seed: int) -> dict:
    """The frozen parameters alone, with the bits `initial_params` gives them: what a resume adds to
    a checkpoint, which holds none (checkpoint.py). Nothing trainable is drawn or read, so a resume
    holds the checkpoint's state and the frozen parameters, never a second copy of the trainable
    ones. A `:pretrained` model without frozen parameters is not opened. A `:copy` model's
    parameters are the starting values of the trainable ones it copies: those are drawn or read
    again, copied, and dropped. RunError as `load_pretrained`."""
    copied = {p.copy_of for p in program.params if p.copy_of is not None}
    needed = tuple(p for p in program.params if p.frozen or p.path in copied)
    starts, frozen = init_params(needed, seed, tuple(spec.prefix for spec in program.pretrained))
    for spec in program.pretrained:
        if any(spec.fills(p.path) for p in needed):
            load_mapped(spec, needed, {False: starts, True: frozen})
    load_adapters(program, {True: frozen}, frozen_only=True)
    fill_copies(needed, merge(starts, frozen), frozen)
    return frozen


def nonfinite_param(program: ir.Program, params: dict, kind: str = "frozen") -> str | None:
    """Which parameter of `params` (`kind`: "frozen", or "initial" for the trainable ones before any
    update) holds a NaN or infinite value, and where its values came from (a `:pretrained` file,
    else its initialiser), for the message of a NaN loss; None when all are finite. Frozen
    parameters never change, nor do initial ones before a step, so one found here is a cause, not
    a consequence. Reads every array once (only after a run has stopped on a bad value)."""
    for path, value in flatten(params).items():
        arr = np.asarray(value)
        first = first_nonfinite(arr)
        if first is None:
            continue
        at = f" at [{' '.join(map(str, first))}]" if first else ""
        spec = next((spec for spec in program.pretrained if spec.fills(path)), None)
        if spec is not None:
            src = dict(spec.names).get(".".join(path[len(spec.prefix):]))
            tensor = "" if src is None else f"tensor `{layer_name(leaf(src)[1], first[0]) if patterned(src) else leaf(src)[1]}` of "
            origin = f"its values are read from {tensor}{spec.path}: the checkpoint holds it; fix or replace the file"
        else:
            origin = "its initialiser drew it"
        return f"{kind} parameter `{'.'.join(path)}` holds {arr[first]}{at} ({origin})"
    return None


def load_pretrained(program: ir.Program, trainable: dict, frozen: dict) -> None:
    """Fill every `:pretrained` model's parameters with the checkpoint's tensors (replacing their initial
    values, or the places `init_params` left for them).

    The checker compared the checkpoint's headers with `:params` already; a
    file changed since is still refused here (RunError naming file and tensor).
    """
    for spec in program.pretrained:
        load_mapped(spec, program.params, {False: trainable, True: frozen})
    load_adapters(program, {False: trainable, True: frozen})


def load_adapters(program: ir.Program, trees: dict[bool, dict], frozen_only: bool = False) -> None:
    """The LoRA adapters whose `:lora` has `:pretrained` (a directory in PEFT's layout) read into
    `trees[p.frozen]` at their places (only the frozen ones with `frozen_only`), replacing their
    initial values. RunError naming the file and the tensor (lora.load_adapter)."""
    from ..errors import CheckpointError
    by_name = {".".join(p.path): p for p in program.params}
    for directory in dict.fromkeys(ad.pretrained for ad in program.adapters if ad.pretrained):
        try:
            values = load_adapter(dataclasses.replace(
                program, adapters=tuple(ad for ad in program.adapters if ad.pretrained == directory)), directory)
        except CheckpointError as e:
            raise RunError(str(e))
        for name, value in values.items():
            p = by_name[name]
            if frozen_only and not p.frozen:
                continue
            set_path(trees[p.frozen], p.path, jnp.asarray(value, dtype=jdt(p.dtype)))


def export_mapping(program: ir.Program, name: str) -> tuple[dict[str, tuple], str] | None:
    """The mapping `--export-names NAME` writes the root model's parameters through, inverted, and
    where it is written (for messages): the `:names` of the `:pretrained` of the run file's model
    NAME, else the standard library's mapping NAME (sexpgpu_lang/hf_names.sx); None when neither is."""
    from sexpgpu_lang.name_mapping import stdlib_names
    for spec in program.pretrained:
        if spec.model == name and spec.named:
            return dict(spec.names), f"the `:names` of `{name}`'s `:pretrained`"
    if name in stdlib_names():
        return stdlib_names()[name], "the mapping is written in sexpgpu_lang/hf_names.sx"
    return None


def content_hashes(program: ir.Program) -> dict[str, str]:
    """The SHA-256 of every file each `:pretrained` checkpoint reads (index and shards), and each
    adapter directory of `:lora`'s `:pretrained` (adapter_model.safetensors, adapter_config.json), by path."""
    from sexpgpu_lang.files.checkpoint_files import SourceError, files
    out = {}
    adapters = [str(Path(d) / name) for d in dict.fromkeys(ad.pretrained for ad in program.adapters if ad.pretrained)
                for name in ("adapter_model.safetensors", "adapter_config.json")]
    for spec in [*program.pretrained, *adapters]:
        if isinstance(spec, str):
            paths = [spec]
        else:
            try:
                paths = files(spec.path)
            except SourceError as e:
                raise RunError(f"cannot use {spec.path}: " + (f"{e.file}: " if e.file != spec.path else "") + str(e))
        for path in paths:
            h = hashlib.sha256()
            try:
                with open(path, "rb") as fh:
                    while chunk := fh.read(1 << 24):
                        h.update(chunk)
            except OSError as e:
                raise RunError(f"cannot read {path}: {e.strerror or e}")
            out[path] = h.hexdigest()
    return out


def _gathered(trainable: dict, frozen: dict):
    """The trees as whole host arrays (in a multi-process run every process gathers them, a
    collective); None on the processes other than 0, which write nothing."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        trainable, frozen = multihost_utils.process_allgather((trainable, frozen), tiled=True)
        if jax.process_index() != 0:
            return None
    return trainable, frozen


def export_params(path: Path, trainable: dict, frozen: dict, include_frozen: bool = False,
                  names: dict | None = None, max_shard_bytes: int = 5 * 10**9, extra: list = (),
                  run: str | None = None, program: ir.Program | None = None, adapter: bool = False) -> str | None:
    """Write the trainable parameters (and the frozen ones too with `include_frozen`) to a
    .safetensors file, each named by its path below the root model joined with `.`; or, with a
    mapping `names` (parameter path -> source), into the directory `path` in the Hugging Face
    layout (hf_layout.export_mapped: shards above `max_shard_bytes`, an index), with the files of
    `extra` ((name, writer) pairs: hf_export.export_extras) as one export of the run `run`
    (export_files.write_export: finished or saying so, an earlier export replaced file by file).
    Where `program` has LoRA adapters, that layout holds the merged model (each adapter folded into
    its frozen base, lora.merged), and with `adapter` the directory gets the adapters alone in PEFT's
    layout (lora.export_adapter, one export too). Returns the line naming the files such a directory
    held that the export left, or None.

    A file is written beside `path` under a temporary name, then renamed into place with the
    permissions a new file gets (safetensors alone makes it 0600), so a failed write never
    leaves a torn file. `check_options` proved the directory writable before training.
    """
    from safetensors.numpy import save_file
    got = _gathered(trainable, frozen)
    if got is None:
        return None
    trainable, frozen = got
    lora = program is not None and bool(program.adapters)
    leaves = {**flatten(trainable), **(flatten(frozen) if include_frozen or (lora and names is not None) else {})}
    tensors = {".".join(k): np.asarray(v) for k, v in leaves.items()}
    if adapter:   # `--export-adapter`: PEFT's layout
        return export_adapter(program, path, {".".join(k): np.asarray(v) for k, v in {**flatten(trainable),
                                                                                        **flatten(frozen)}.items()},
                              run)
    if lora and names is not None:   # the merged model: each adapter folded into its frozen base
        tensors = merged(program, tensors)
    if names is not None:
        missing = sorted(set(names) - set(tensors))
        if missing:
            raise RunError(f"cannot write {path} through the mapping: parameter `{missing[0]}` is "
                           + ("frozen (pass --export-frozen)" if missing[0] in {".".join(k) for k in flatten(frozen)}
                              else "not a parameter of the model"))
        return export_mapped(path, names, {k: v for k, v in tensors.items() if k in names}, max_shard_bytes,
                             extra, run).left_line()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file(tensors, str(tmp))
        publish(tmp, path)
    except Exception as e:  # safetensors raises its own error types besides OSError
        tmp.unlink(missing_ok=True)
        raise RunError(f"cannot write {path}: {e.strerror if isinstance(e, OSError) and e.strerror else e}")
    return None
