"""Parameters in .safetensors files: `:pretrained` values loaded at the start, `--export` written at the end.

A tensor is named by its parameter's path below a model joined with `.`
(`export_params` writes every parameter below the root model; a
`:pretrained` model reads the names below itself). Errors are RunErrors
naming the file and the tensor. It must not import train.py.
"""
from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from sexpgpu_lang import ir

from .dtypes import jdt
from .options import RunError
from .params import flatten, set_path
from .paths import publish


def load_pretrained(program: ir.Program, trainable: dict, frozen: dict) -> None:
    """Replace the initial values of every `:pretrained` model's parameters with the file's tensors.

    The checker compared the file's header with `:params` already; a file
    changed since is still refused here (RunError naming file and tensor).
    """
    if not program.pretrained:
        return
    from safetensors.numpy import load_file
    import jax.numpy as jnp
    by_path = {p.path: p for p in program.params}
    for prefix, path in program.pretrained:
        try:
            tensors = load_file(path)
        except Exception as e:  # safetensors raises its own error types
            raise RunError(f"cannot load {path}: {e}")
        for p in program.params:
            if p.path[:len(prefix)] != prefix:
                continue
            name = ".".join(p.path[len(prefix):])
            if name not in tensors:
                raise RunError(f"{path}: no tensor `{name}` (expected [{' '.join(map(str, p.shape))}] {p.dtype})")
            arr = tensors[name]
            if tuple(arr.shape) != p.shape:
                raise RunError(f"{path}: tensor `{name}` is {list(arr.shape)}, expected {list(p.shape)}")
            set_path(frozen if by_path[p.path].frozen else trainable, p.path, jnp.asarray(arr).astype(jdt(p.dtype)))


def export_params(path: Path, trainable: dict, frozen: dict) -> None:
    """Write every parameter to a .safetensors file, named by its path below the root model joined with `.`.

    Written beside `path` under a temporary name, then renamed into place with
    the permissions a new file gets (safetensors alone makes it 0600), so a
    failed write never leaves a torn file. `check_options` proved the
    directory writable before training.
    """
    from safetensors.numpy import save_file
    if jax.process_count() > 1:   # every process gathers the whole arrays (a collective); process 0 writes
        from jax.experimental import multihost_utils
        trainable, frozen = multihost_utils.process_allgather((trainable, frozen), tiled=True)
        if jax.process_index() != 0:
            return
    tensors = {".".join(k): np.asarray(v) for k, v in {**flatten(trainable), **flatten(frozen)}.items()}
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file(tensors, str(tmp))
        publish(tmp, path)
    except Exception as e:  # safetensors raises its own error types besides OSError
        tmp.unlink(missing_ok=True)
        raise RunError(f"cannot write {path}: {e.strerror if isinstance(e, OSError) and e.strerror else e}")
