"""Where a `:pretrained` model's tensors are: one safetensors file, a Hugging Face directory, or its index.

`:pretrained` names one of (docs/checkpoints.md "Where weights come from"):

- a `.safetensors` file;
- a directory holding `model.safetensors`, or shards with
  `model.safetensors.index.json` (Hugging Face's layout: the index's
  `weight_map` gives each tensor's shard, a file beside it);
- the index file itself.

A snapshot of the Hugging Face cache (`models--org--name/snapshots/<rev>/`)
is such a directory, its files symbolic links into `../../blobs/`: a
shard's real file may be anywhere inside that model's folder of the cache,
never outside it (hf_cache.snapshot_repo); so must a lone `model.safetensors`
or the index itself, and a link whose target is missing (a deleted blob) is
named as such (hf_cache.link_problem, asked by every read).

`tensors` reads the headers only (safetensors_header.read_header) and
returns each tensor's shape, dtype and file; SourceError says what is
wrong in one line naming the file and, where one is to blame, the tensor:
a shard the index names that is not there, a shard cut short, a tensor the
index places in a shard that lacks it. What a header or an index gave is
kept by path and read again only once the file's size, times or inode
differ (the language server checks a run file on every edit). Pure
Python; never JAX.
"""
from __future__ import annotations

import json
import os

from .bounded_read import (INDEX_JSON_LIMIT, JsonNumberTooLong, JsonTooDeep, JsonTooLarge, NotRegularFile, loads_json,
                           read_bounded)
from ..kept import MISSING, Space, estimate
from .hf_cache import link_problem, snapshot_repo
from .safetensors_header import HeaderError, read_header

#: Hugging Face's names for a checkpoint in one file and for the index of a sharded one.
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


#: What each header or index read gave, by path: ((inode, size, mtime, ctime in ns) when read, the
#: result, or the HeaderError or SourceError raised); at most 512 of them and 128 MiB (estimated) in all,
#: the least recently used dropped first (`sexpgpu_lang.kept`).
READ = Space("safetensors headers and indexes", 512, 128 << 20)


def forget() -> None:
    """Drop every kept header and index."""
    READ.clear()


class SourceError(Exception):
    """The checkpoint cannot be used: `file` is the file to blame, and the message (which names the
    tensor where one is to blame) says why."""

    def __init__(self, file: str, message: str):
        super().__init__(message)
        self.file = file


def tensors(path: str) -> dict[str, tuple[tuple[int, ...], str, str]]:
    """Each tensor's (shape, SexpGPU dtype name or the file's own, file) in the checkpoint at `path`
    (a file, a directory or an index), from the headers only."""
    if os.path.isdir(path):   # (a link to a missing file counts: its read says so, naming the target)
        if os.path.lexists(os.path.join(path, INDEX)):
            return _indexed(os.path.join(path, INDEX))
        if os.path.lexists(os.path.join(path, SINGLE)):
            return _one(os.path.join(path, SINGLE))
        raise SourceError(path, f"it is a directory holding neither `{SINGLE}` nor `{INDEX}`")
    if os.path.exists(path) and not os.path.isfile(path):   # a pipe or a device: a read could wait forever
        raise SourceError(path, "it is neither a file nor a directory")
    if path.endswith(".json"):
        return _indexed(path)
    return _one(path)


def files(path: str) -> list[str]:
    """The files the checkpoint at `path` reads (its index first, then its shards), for content hashes."""
    found = tensors(path)
    index = path if path.endswith(".json") else os.path.join(path, INDEX) if os.path.isdir(path) else None
    shards = sorted({f for _, _, f in found.values()})
    return ([index] if index is not None and os.path.isfile(index) else []) + shards


def _cached(path: str, read):
    """`read(path)`, or what it gave (or raised) before for the file at `path` when its inode, size,
    modification and change times are the ones it had then. A file that cannot be looked at is
    read afresh (`read` says why)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return read(path)
    key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    got = READ.lookup(path)
    if got is MISSING or got[0] != key:
        try:
            got = (key, read(path), None)
        except (HeaderError, SourceError) as e:
            got = (key, None, e)
        READ.keep(path, got, estimate(got))
    if got[2] is not None:
        raise got[2].with_traceback(None)
    return got[1]


def _one(path: str) -> dict[str, tuple[tuple[int, ...], str, str]]:
    try:
        header = _cached(path, read_header)
    except HeaderError as e:
        raise SourceError(path, str(e))
    return {name: (shape, dtype, path) for name, (shape, dtype) in header.items()}


def _weight_map(index: str) -> dict[str, str]:
    """The index's `weight_map` (tensor name -> shard file). SourceError naming the index."""
    try:
        data = loads_json(read_bounded(index, INDEX_JSON_LIMIT, "a safetensors index").decode("utf-8"))
    except JsonTooDeep as e:
        raise SourceError(index, f"it is not a safetensors index ({e})")
    except JsonNumberTooLong as e:
        raise SourceError(index, f"it is not a safetensors index ({e})")
    except JsonTooLarge as e:
        raise SourceError(index, str(e))
    except FileNotFoundError:
        raise SourceError(index, "no such file")
    except OSError as e:
        raise SourceError(index, e.strerror or str(e))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SourceError(index, f"it is not a safetensors index (not JSON: {e})")
    except ValueError:   # a NUL or a lone surrogate in the path: no file can have that name
        raise SourceError(index, "no such file (its name holds a character no file name can)")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise SourceError(index, "it is not a safetensors index (no `weight_map` of tensor names to shard files)")
    return weight_map


def _indexed(index: str) -> dict[str, tuple[tuple[int, ...], str, str]]:
    """The tensors of a sharded checkpoint, from its index and its shards' headers."""
    weight_map = _cached(index, _weight_map)
    base = os.path.dirname(os.path.abspath(index))
    headers: dict[str, dict] = {}
    out = {}
    for name, shard in weight_map.items():
        full = os.path.join(base, shard)
        if full not in headers:
            outside = _outside(base, shard, full)
            if outside is not None:
                fix = ("a cached snapshot's shard is a link into its model's `blobs/`: download the model again"
                       if snapshot_repo(base) is not None else "a shard is a file in the index's own directory "
                       "(or below it): fix the index's `weight_map`")
                raise SourceError(index, f"it places tensor `{name}` in `{shard}`, {outside}; {fix}")
            broken = link_problem(full)
            if broken is not None:
                raise SourceError(index, f"it places tensor `{name}` in `{shard}`, which {broken.removeprefix('it ')}")
            if os.path.exists(full) and not os.path.isfile(full):
                raise SourceError(index, f"it places tensor `{name}` in `{shard}`, which {NotRegularFile(full, os.stat(full).st_mode).strerror.removeprefix('it ')}")
            if not os.path.isfile(full):
                raise SourceError(index, f"it places tensor `{name}` in `{shard}`, which is not there")
            try:
                headers[full] = _cached(full, read_header)
            except HeaderError as e:
                raise SourceError(full, str(e))
        got = headers[full].get(name)
        if got is None:
            raise SourceError(index, f"it places tensor `{name}` in `{shard}`, which has no such tensor")
        out[name] = (got[0], got[1], full)
    return out


def _outside(base: str, shard: str, full: str) -> str | None:
    """Why the shard `shard` of an index in directory `base` (`full`: joined) is not inside that
    directory, or None when it is: an absolute path, or one that resolves (`..`, symbolic links
    followed, a loop included) to a file elsewhere; in a snapshot of the Hugging Face cache, one whose
    real file is outside that model's folder of the cache (its `blobs/` are inside). A shard outside would read any file on the
    machine (`../../etc/passwd`) as tensors, and train on another checkpoint's weights."""
    if os.path.isabs(shard):
        return "an absolute path, outside the checkpoint's directory"
    try:
        root = os.path.realpath(base)
        real = os.path.realpath(full)
    except (OSError, ValueError):
        return "a path that cannot be resolved"
    if os.path.commonpath([root, real]) == root:
        return None
    repo = snapshot_repo(base)   # a snapshot of the Hugging Face cache: its files are links into the model's blobs
    if repo is not None:
        if os.path.commonpath([repo, real]) == repo:
            return None
        return f"which resolves to {real}, outside the cache's folder of that model {repo}"
    return f"which resolves to {real}, outside the checkpoint's directory {root}"
