"""Hugging Face checkpoints: a `:pretrained` model's parameters read through its name mapping, one tensor at a
time, and a trained model written through a mapping inverted, with an index and shards above a size.

Reading (`load_mapped`): the checkpoint's headers give each tensor's file
(sexpgpu_lang/files/checkpoint_files.py); each parameter is filled from the
tensors its source names (sexpgpu_lang/name_mapping.py), one tensor at a
time besides the parameters it fills: read straight into the parameters'
buffers where the mapping only reshapes and splits it (one scatter read
for GPT-2's `c_attn` into query, key and value), else into a buffer of
its own, its mapping ops applied with NumPy and cast to the parameter's
dtype; then placed on the device (with the sharding of the value it
replaces, if any). A tensor changed since the checker read the header is
refused naming it.

Writing (`export_mapped`): each parameter runs backwards through its
source (`split-heads` merged, `transpose` undone, the parts of a `split`
concatenated), one shard after another of at most `max_shard_bytes`, and
`model.safetensors.index.json` beside them when there are several
(HF's `save_pretrained` layout). Errors are RunErrors naming file and tensor.
"""
from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

import jax
import numpy as np

from sexpgpu_lang import ir
from sexpgpu_lang.files.checkpoint_files import INDEX, SINGLE, SourceError, tensors
from sexpgpu_lang.name_mapping import child_shape, layer_name, leaf, patterned, source_shape

from ..dtypes import jdt
from ..errors import RunError
from .params import set_path


def forward(expr: tuple, tensor: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Apply a mapping source's ops to the file's `tensor` (of `source_shape(expr, shape)`), making `shape`."""
    op = expr[0]
    if op == "tensor":
        return tensor
    below = forward(expr[1], tensor, child_shape(expr, shape))
    if op == "transpose":
        return np.transpose(below, expr[2])
    if op == "split":
        return np.split(below, expr[3], axis=expr[2])[expr[4]]
    return below.reshape(shape)   # split-heads


def backward(expr: tuple, value: np.ndarray) -> tuple[np.ndarray, tuple | None]:
    """`forward` inverted for one value (per layer): the file's tensor, or the part of it that a
    `split` takes, with that split's (axis, parts, index) (None for a whole tensor)."""
    op = expr[0]
    if op == "tensor":
        return value, None
    if op == "split":
        return value, expr[2:]
    if op == "transpose":
        return backward(expr[1], np.transpose(value, None if expr[2] is None else np.argsort(expr[2])))
    return backward(expr[1], value.reshape(child_shape(expr, value.shape)))


def _runs(expr: tuple, shape: tuple[int, ...]) -> tuple[int, int, int, int] | None:
    """Where a parameter's entries (per layer, of `shape`) lie in the file's tensor when its source only
    reshapes it (`split-heads`) and splits it: (outer, parts, index, run), the tensor being `[outer parts
    run]` in C order and the parameter its `[outer run]` of part `index` (a whole tensor: (1, 1, 0, size));
    None when an op moves entries (a `transpose`)."""
    while expr[0] == "split-heads":
        shape, expr = child_shape(expr, shape), expr[1]
    if expr[0] == "tensor":
        return 1, 1, 0, int(np.prod(shape, dtype=np.int64))
    if expr[0] != "split":
        return None
    axis, parts, index = expr[2:]
    whole = child_shape(expr, shape)
    return (int(np.prod(whole[:axis], dtype=np.int64)), parts, index,
            int(np.prod(shape[axis:], dtype=np.int64)))


def _shown(shape) -> str:
    """A shape as the messages write it: `[96 32]`."""
    return "[" + " ".join(map(str, shape)) + "]"


class _Reader:
    """The checkpoint's tensors, each read from its byte range (the header's `data_offsets`) with
    `os.preadv`: `scatter` straight into the parameters' buffers when they are the tensor reshaped
    (one part) or its equal parts along an axis (GPT-2's query, key and value from `c_attn`), `read`
    into a buffer of its own that the mapping's ops then read. So each byte is copied once where no
    op moves it, as a `read` of the file copies it (safetensors' `get_tensor` copies each tensor
    twice, and a memory map pays a page fault per page)."""

    def __init__(self, found: dict):
        self.found = found
        self.offsets: dict[str, tuple[int, dict]] = {}
        self.handles: dict[str, object] = {}

    def _locate(self, name: str, shape: tuple[int, ...], readers: list[tuple[str, set[str]]]):
        """(file, its handle, the tensor's first byte, its byte count, its dtype) for tensor `name`,
        checked against the shape the checker found and the dtypes each parameter reading it accepts
        (`readers`: (parameter, dtypes))."""
        from sexpgpu_lang.files.safetensors_header import data_offsets
        got = self.found.get(name)
        if got is None:
            raise RunError(f"the checkpoint has no tensor `{name}` (for parameter `{readers[0][0]}`)")
        fshape, fdtype, file = got
        for param, dtypes in readers:
            if tuple(fshape) != tuple(shape) or fdtype not in dtypes:
                raise RunError(f"{file}: tensor `{name}` is {_shown(fshape)} {fdtype}, parameter `{param}` needs "
                               f"{_shown(shape)} {' or '.join(sorted(dtypes))} from it (the file changed since it "
                               "was checked?)")
        if file not in self.offsets:
            self.offsets[file] = data_offsets(file)
            self.handles[file] = open(file, "rb", buffering=0)
        start, offsets = self.offsets[file]
        begin, end = offsets[name]
        return file, self.handles[file], start + begin, end - begin, fdtype

    def read(self, name: str, shape: tuple[int, ...], readers: list[tuple[str, set[str]]]) -> np.ndarray:
        """Tensor `name` (checked as `_locate` does), read into an array of its own."""
        from sexpgpu_lang.files.safetensors_header import HeaderError
        file = self.found.get(name, (None, None, "?"))[2]
        try:
            file, fh, at, size, fdtype = self._locate(name, shape, readers)
            out = np.empty(shape, np.dtype(jdt(fdtype)))
            _read_all(fh, [memoryview(out.reshape(-1).view(np.uint8))], at, size)
        except (OSError, ValueError, KeyError, HeaderError) as e:
            raise RunError(f"{file}: cannot read tensor `{name}`: {e}")
        return out

    def scatter(self, name: str, shape: tuple[int, ...], readers: list[tuple[str, set[str]]],
                outer: int, parts: list[np.ndarray]) -> None:
        """Tensor `name` (checked as `_locate` does), `[outer len(parts) run]` in C order, read with
        part k going into `parts[k]` (C-contiguous, `outer * run` entries of the file's dtype)."""
        from sexpgpu_lang.files.safetensors_header import HeaderError
        file = self.found.get(name, (None, None, "?"))[2]
        try:
            file, fh, at, size, _ = self._locate(name, shape, readers)
            views = [memoryview(p.reshape(-1).view(np.uint8)) for p in parts]
            row = views[0].nbytes // outer
            _read_all(fh, [v[o * row:(o + 1) * row] for o in range(outer) for v in views], at, size)
        except (OSError, ValueError, KeyError, HeaderError) as e:
            raise RunError(f"{file}: cannot read tensor `{name}`: {e}")

    def close(self) -> None:
        for fh in self.handles.values():
            fh.close()


#: The most buffers one `os.preadv` takes (the system's IOV_MAX), and whether there is one (not on Windows).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in getattr(os, "sysconf_names", {}) else 16
_PREADV = hasattr(os, "preadv")


def _read_all(fh, buffers: list[memoryview], at: int, size: int) -> None:
    """Fill `buffers` (byte views, `size` bytes in all), in order, from the bytes of the file `fh` from
    `at` on: scatter reads of up to IOV_MAX buffers each (`os.preadv`; a `readinto` per buffer where
    there is none), resumed after a short read. OSError when the file ends first."""
    if sum(b.nbytes for b in buffers) != size:
        raise ValueError(f"the tensor takes {size} bytes, its parameters {sum(b.nbytes for b in buffers)}")
    k, done = 0, 0
    while True:
        while k < len(buffers) and not buffers[k].nbytes:   # (an empty parameter's)
            k += 1
        if k == len(buffers):
            return
        if _PREADV:
            n = os.preadv(fh.fileno(), buffers[k:k + _IOV_MAX], at + done)
        else:
            fh.seek(at + done)
            n = fh.readinto(buffers[k])
        if not n:
            raise OSError(f"the file ends {size - done} bytes before the tensor does")
        done += n
        while n:
            if n >= buffers[k].nbytes:
                n -= buffers[k].nbytes
                k += 1
            else:
                buffers[k] = buffers[k][n:]
                n = 0


def _buffer(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised host array in memory of its own, a private anonymous `mmap`: page-aligned, so
    `jax.device_put` on the CPU uses it as the device buffer instead of copying it (XLA's CPU
    alignment is 64 bytes); and without the `madvise(MADV_HUGEPAGE)` NumPy gives large arrays, whose
    first touch under the kernel's usual THP `defrag=madvise` compacts memory: a read into such an
    array takes about twice the time of a plain `read` (benchmarks/pretrained_load.py)."""
    count = int(np.prod(shape, dtype=np.int64))
    flags = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}
    return np.frombuffer(mmap.mmap(-1, max(count * dtype.itemsize, 1), **flags), dtype, count).reshape(shape)


def load_mapped(spec: ir.PretrainedIR, params: tuple[ir.ParamIR, ...], trees: dict[bool, dict]) -> None:
    """Fill every parameter below `spec.prefix` from its checkpoint: `trees[p.frozen]` is the tree
    (trainable or frozen) that gets parameter `p`'s value, at its place (an initial value there, or
    the None `params.init_params` leaves for it, is replaced).

    The parameters whose sources read the same tensors (GPT-2's query, key and value, from one
    `c_attn`) are filled together, so each tensor is read once; an initial value is dropped before
    its new one is made, so the host holds at most the parameters being filled (besides those
    already placed) and one tensor."""
    try:
        found = tensors(spec.path)
    except SourceError as e:
        raise RunError(f"cannot use {spec.path}: " + (f"{e.file}: " if e.file != spec.path else "") + str(e))
    names = dict(spec.names)
    reader = _Reader(found)
    groups: dict[tuple[str, int], list] = {}
    for p in params:
        if spec.fills(p.path):
            rel = ".".join(p.path[len(spec.prefix):])
            src = names[rel]
            groups.setdefault((leaf(src)[1], p.shape[0] if patterned(src) else 0), []).append((p, rel, src))
    try:
        _fill(spec, groups, trees, reader)
    finally:
        reader.close()


def _fill(spec: ir.PretrainedIR, groups: dict, trees: dict[bool, dict], reader: _Reader) -> None:
    """Fill each group of parameters that read the same tensors (see `load_mapped`)."""
    for (pattern, layers), members in groups.items():
        filled = []
        for p, rel, src in members:
            node = trees[p.frozen]
            for k in p.path[:-1]:
                node = node.setdefault(k, {})
            sharding = getattr(node.get(p.path[-1]), "sharding", None)
            node[p.path[-1]] = None      # an initial value is not needed: freed before the new one exists
            filled.append((p, rel, src, sharding, _buffer(p.shape, np.dtype(jdt(p.dtype)))))
        readers = [(rel, {spec.file_dtype or p.dtype}) for p, rel, _, _, _ in filled]
        shapes = [p.shape[1:] if layers else p.shape for p, _, _, _, _ in filled]
        want = source_shape(members[0][2], shapes[0])
        parts = _parts(spec, filled, shapes)
        for i in range(layers) if layers else (None,):
            name = layer_name(pattern, i) if layers else pattern
            if parts is not None:    # the file's bytes straight into the parameters' buffers
                outer, order = parts
                reader.scatter(name, want, readers, outer,
                               [filled[k][-1][i] if layers else filled[k][-1] for k in order])
                continue
            tensor = reader.read(name, want, readers)
            for (p, rel, src, _, value), shape in zip(filled, shapes):
                if layers:
                    value[i] = forward(src, tensor, shape)
                else:
                    value[...] = forward(src, tensor, shape)
            del tensor
        for p, rel, src, sharding, value in filled:
            set_path(trees[p.frozen], p.path, jax.device_put(value, sharding))


def _parts(spec: ir.PretrainedIR, filled: list, shapes: list) -> tuple[int, list[int]] | None:
    """(outer, the group's members in the order of their parts) when their buffers are the tensor's
    equal parts as they lie in the file (`_runs`: no cast, no transpose, every part filled once), so
    one scatter read fills them all; None otherwise."""
    if any((spec.file_dtype or p.dtype) != p.dtype for p, _, _, _, _ in filled):
        return None
    runs = [_runs(src, shape) for (_, _, src, _, _), shape in zip(filled, shapes)]
    if None in runs or len({(r[0], r[1], r[3]) for r in runs}) != 1 \
            or sorted(r[2] for r in runs) != list(range(runs[0][1])):
        return None
    return runs[0][0], sorted(range(len(runs)), key=lambda k: runs[k][2])


def mapped_tensors(names: dict[str, tuple], values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The checkpoint's tensors that `values` (parameter path below the model -> array) make through the
    mapping `names` inverted. Raises RunError for a fused tensor whose parts are not all mapped."""
    out: dict[str, np.ndarray] = {}
    parts: dict[str, dict[int, np.ndarray]] = {}
    fused: dict[str, tuple[int, int]] = {}
    for rel, src in names.items():
        value = values[rel]
        per_layer = [(layer_name(leaf(src)[1], i), value[i]) for i in range(value.shape[0])] if patterned(src) \
            else [(leaf(src)[1], value)]
        for name, v in per_layer:
            got, split = backward(src, np.asarray(v))
            if name in out or (split is None and name in fused):
                raise RunError(f"cannot write tensor `{name}`: two parameters of the mapping are read from it, and "
                               f"parameter `{rel}` would overwrite the other's values")
            if split is None:
                out[name] = np.ascontiguousarray(got)
            else:
                axis, n, index = split
                if index in parts.get(name, {}):
                    raise RunError(f"cannot write tensor `{name}`: two parameters of the mapping are read from part "
                                   f"{index} of it, and parameter `{rel}` would overwrite the other's values")
                fused[name] = (axis, n)
                parts.setdefault(name, {})[index] = got
    for name, (axis, n) in fused.items():
        missing = [i for i in range(n) if i not in parts[name]]
        if missing:
            raise RunError(f"cannot write tensor `{name}`: the mapping fills parts {sorted(parts[name])} of its {n}, "
                           f"not {missing}")
        out[name] = np.concatenate([parts[name][i] for i in range(n)], axis=axis)
    return out


def export_mapped(path: Path, names: dict[str, tuple], values: dict[str, np.ndarray],
                  max_shard_bytes: int = 5 * 10**9, extra: list = (), run: str | None = None):
    """Write `values` through the mapping `names`, inverted, into the directory `path` in Hugging Face's
    layout: `model.safetensors`, or shards `model-0000k-of-0000n.safetensors` of at most `max_shard_bytes`
    each (a tensor larger than that has a shard of its own) and `model.safetensors.index.json`; then the
    files of `extra` ((name, writer) pairs: config.json, the tokenizer). The whole is one export
    (export_files.write_export: a manifest, each file renamed into place, an earlier export replaced
    file by file). Returns its `Written`."""
    from safetensors.numpy import save_file
    from .export_files import write_export
    tensors_out = mapped_tensors(names, values)
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, t in tensors_out.items():
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += t.nbytes
    files = ([SINGLE] if len(shards) == 1 else
             [f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" for k in range(len(shards))])
    writers = [(fname, lambda tmp, shard=shard: save_file(shard, str(tmp), metadata={"format": "pt"}))
               for fname, shard in zip(files, shards)]
    if len(shards) > 1:
        index = {"metadata": {"total_size": int(sum(t.nbytes for t in tensors_out.values()))},
                 "weight_map": {name: fname for fname, shard in zip(files, shards) for name in shard}}
        writers.append((INDEX, lambda tmp: Path(tmp).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")))
    return write_export(Path(path), writers + list(extra), run)
