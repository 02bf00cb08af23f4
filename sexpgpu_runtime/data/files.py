"""What the loaders' sources share: a data path resolved, a data file opened, dtypes by name,
the first non-finite entry of an array, whether bytes are text.

Used by `loaders` (the in-memory tables), `token_loaders`, `prompt_files`, and by
`weights.pretrained` (a checkpoint's tensors checked as a loader's fields are). Errors are
`LoaderError`s naming the loader and the fix.
"""
from __future__ import annotations

import os
import re

import numpy as np

from sexpgpu_lang.files.bounded_read import NotRegularFile, no_regular_match, open_regular
from sexpgpu_lang.ir import LoaderIR

from ..errors import LoaderError

#: The numpy dtypes of SexpGPU's dtype names (`bf16` is ml_dtypes': `np_dtype`).
NP_DTYPES = {"bool": np.bool_, "i32": np.int32, "i64": np.int64, "f16": np.float16, "f32": np.float32}


def np_dtype(name: str):
    """The numpy dtype of a SexpGPU dtype name (`i32` -> int32; `bf16`: ml_dtypes' bfloat16)."""
    if name == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return NP_DTYPES[name]


def first_nonfinite(arr: np.ndarray) -> tuple[int, ...] | None:
    """The index of the first NaN or infinite entry of a floating array (f16, bf16, f32, f64; any
    shape, `()` for a scalar), or None when every entry is finite or the array is not floating."""
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        return None
    bad = ~np.isfinite(arr.astype(np.float32) if arr.dtype.itemsize < 4 else arr)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None


_VAR = re.compile(r"\$(?:(\w+)|\{([^}]*)\})")


def resolve_path(spec: LoaderIR, path: str) -> str:
    """A data path: `$STDLIB` is the Python standard library's directory, other `$VARS`
    and `~` expand; a relative path is relative to the run file.

    A variable that is not set (or is empty) is a LoaderError naming it: expanded
    as it stands, `$DATA/*.npz` would silently become `/*.npz`, or stay literal.
    """
    import sysconfig
    written = path
    path = re.sub(r"\$(?:STDLIB\b|\{STDLIB\})", lambda m: sysconfig.get_paths()["stdlib"], path)
    for m in _VAR.finditer(path):
        name = m.group(1) or m.group(2)
        if not os.environ.get(name):
            state = "is empty" if name in os.environ else "is not set"
            raise LoaderError(f"loader `{spec.name}`: the environment variable `{name}` in \"{written}\" {state}; "
                              "set it, or write the path out")
    path = os.path.expanduser(os.path.expandvars(path))
    return path if os.path.isabs(path) else os.path.join(spec.base_dir, path)


def open_data(path: str, where: str):
    """`path` opened for reading bytes; a missing or unreadable file, or one that is not a regular
    file (a FIFO, /dev/zero, a directory: sexpgpu_lang.files.bounded_read), is LoaderError, `where`
    (``loader `name` ``) first, naming the path and the fix."""
    try:
        return open_regular(path)   # a FIFO or a device is refused, never waited on
    except FileNotFoundError:
        raise LoaderError(f"{where}: no file {path}; make it, or fix the path (relative to the run file)") from None
    except NotRegularFile as e:
        raise LoaderError(f"{where}: cannot read {path}: {e}; name a regular file") from None
    except OSError as e:
        raise LoaderError(f"{where}: cannot read {path}: {e.strerror or e}") from None


def glob_files(pattern: str, where: str) -> list[str]:
    """The regular files `pattern` matches (`**` recursive, within bounded_read.glob_bounded's limits:
    past one, LoaderError naming it), sorted. None is LoaderError, `where`
    (``loader `name` ``) first: naming what the first match is when something matches but is not a
    regular file (a FIFO, /dev/zero, a directory: sexpgpu_lang.files.bounded_read's words), else saying
    that no file matches."""
    from sexpgpu_lang.files.bounded_read import glob_bounded
    try:
        matches = glob_bounded(pattern)
    except OSError as e:   # GlobTooLarge: the limit, in one line
        raise LoaderError(f"{where}: {e.strerror}") from None
    files = [f for f in matches if os.path.isfile(f)]
    if files:
        return files
    why = no_regular_match(pattern, matches)
    if why is not None:
        raise LoaderError(f"{where}: {why}")
    raise LoaderError(f"{where}: no file matches {pattern}")
