"""Read a .safetensors file's header (names, shapes, dtypes) without reading its tensors.

The format (huggingface/safetensors, "Format" in its README): 8 bytes of
little-endian u64 header length N, then N bytes of JSON mapping each tensor
name to `{"dtype", "shape", "data_offsets"}` (plus an optional
`__metadata__`), then the tensors' bytes, each at its `data_offsets`
(begin, end) from the end of the header. The checker uses this to compare a
`:pretrained` file with `:params` before anything runs, and compares the
offsets with the file's size, so a file cut short after its header is
refused here rather than when the run loads it; the runtime loads the data
with the safetensors library itself. Pure Python; never JAX.
"""
from __future__ import annotations

import json
import struct

from .bounded_read import (SAFETENSORS_HEADER_LIMIT, JsonNumberTooLong, JsonTooDeep, JsonTooLarge, loads_json,
                           open_regular, size_words)

#: safetensors dtype names to SexpGPU's.
DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16", "I32": "i32", "I64": "i64", "BOOL": "bool"}
#: Bytes per entry of safetensors' dtypes (its README's list), to check each tensor's byte range.
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
            "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class HeaderError(Exception):
    """The file is missing, unreadable or not a safetensors file."""


def read_header(path: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Tensor name -> (shape, SexpGPU dtype name, or the file's own name when SexpGPU has none)."""
    try:
        with open_regular(path) as fh:   # a FIFO or a device: refused, never waited on (bounded_read)
            head = fh.read(8)
            if len(head) < 8:
                raise HeaderError("it is not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", head)
            if n > SAFETENSORS_HEADER_LIMIT:
                raise HeaderError(f"it is not a safetensors file (its first 8 bytes give a header length of {n:,} "
                                  f"bytes, more than safetensors' limit of {size_words(SAFETENSORS_HEADER_LIMIT)})")
            raw = fh.read(n)
            fh.seek(0, 2)
            data_size = fh.tell() - 8 - n
    except FileNotFoundError:
        raise HeaderError("no such file")
    except OSError as e:
        raise HeaderError(e.strerror or str(e))
    except ValueError:   # a NUL or a lone surrogate in the path: no file can have that name
        raise HeaderError("no such file (its name holds a character no file name can)")
    try:
        meta = loads_json(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise HeaderError("it is not a safetensors file (its header is not JSON)")
    except (JsonTooDeep, JsonNumberTooLong) as e:
        raise HeaderError(f"it is not a safetensors file (its header {str(e).removeprefix('it ')})")
    except JsonTooLarge as e:
        raise HeaderError(f"its header {str(e).removeprefix('it ')}")
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
        _check_bytes(name, info, shape, dt, data_size)
    return out


def data_offsets(path: str) -> tuple[int, dict[str, tuple[int, int]]]:
    """Where each tensor's bytes are: (the byte the data starts at, 8 plus the header's length; each
    tensor's (begin, end) from there). For a file `read_header` accepted (raises HeaderError else)."""
    try:
        with open_regular(path) as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > SAFETENSORS_HEADER_LIMIT:
                raise HeaderError("header length out of range")
            meta = loads_json(fh.read(n))
    except (OSError, struct.error, ValueError) as e:
        raise HeaderError(str(e))
    return 8 + n, {k: tuple(v["data_offsets"]) for k, v in meta.items() if k != "__metadata__"}


def _check_bytes(name: str, info: dict, shape: tuple[int, ...], dt: str, data_size: int) -> None:
    """Raise HeaderError unless tensor `name`'s `data_offsets` lie inside the `data_size` bytes the
    file holds after its header (a file cut short: `data_size` may be negative) and span its
    shape's entries times its dtype's size."""
    offsets = info.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets) or not 0 <= offsets[0] <= offsets[1]):
        raise HeaderError(f"it is not a safetensors file (tensor `{name}` has no `data_offsets` [begin, end])")
    begin, end = offsets
    if end > max(data_size, 0):
        raise HeaderError(f"it is cut short: tensor `{name}` ends at byte {end} of the data, and the file holds "
                          f"{max(data_size, 0)} bytes of data after its header")
    size = ITEMSIZE.get(dt)
    count = 1
    for d in shape:
        count *= d
    if size is not None and end - begin != count * size:
        raise HeaderError(f"it is not a safetensors file (tensor `{name}` takes {end - begin} bytes, "
                          f"its shape and dtype need {count * size})")
