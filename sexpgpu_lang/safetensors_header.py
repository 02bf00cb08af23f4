"""Read a .safetensors file's header (names, shapes, dtypes) without reading its tensors.

The format (huggingface/safetensors, "Format" in its README): 8 bytes of
little-endian u64 header length N, then N bytes of JSON mapping each tensor
name to `{"dtype", "shape", "data_offsets"}` (plus an optional
`__metadata__`). The checker uses this to compare a `:pretrained` file
with `:params` before anything runs; the runtime loads the data with the
safetensors library itself. Pure Python; never JAX.
"""
from __future__ import annotations

import json
import struct

#: safetensors dtype names to SexpGPU's.
DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16", "I32": "i32", "I64": "i64", "BOOL": "bool"}


class HeaderError(Exception):
    """The file is missing, unreadable or not a safetensors file."""


def read_header(path: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Tensor name -> (shape, SexpGPU dtype name, or the file's own name when SexpGPU has none)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise HeaderError("it is not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", head)
            if n > 100_000_000:
                raise HeaderError("it is not a safetensors file (header length out of range)")
            raw = fh.read(n)
    except FileNotFoundError:
        raise HeaderError("no such file")
    except OSError as e:
        raise HeaderError(e.strerror or str(e))
    except ValueError:   # a NUL or a lone surrogate in the path: no file can have that name
        raise HeaderError("no such file (its name holds a character no file name can)")
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise HeaderError("it is not a safetensors file (its header is not JSON)")
    if not isinstance(meta, dict):
        raise HeaderError("it is not a safetensors file")
    out = {}
    for name, info in meta.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        dt = str(info.get("dtype"))
        try:
            shape = tuple(int(d) for d in info.get("shape", ()))
        except (TypeError, ValueError):
            raise HeaderError(f"it is not a safetensors file (tensor `{name}` has no list of integers for its shape)")
        out[name] = (shape, DTYPES.get(dt, dt))
    return out
