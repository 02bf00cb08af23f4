"""Loaders: where records come from, in a deterministic, resumable order.

A loader is a table of records (one array per field, the first axis the
records) and an order: epoch `e` visits the records in the permutation
drawn from `(seed, loader name, e)`, so the order is a pure function of
the seed and shuffles every epoch. The position (records consumed) is the
whole loader state: `batch(position)` returns records `position ...
position + batch - 1` of that endless sequence, so a resume that restores
the position continues the same order.

We keep this small piece ourselves rather than adopt grain: the order
needs only a seeded permutation per epoch and a position, and the tables
here fit in memory (docs/loaders.md says more).

Sources (DESIGN.md section 2):
- `(stride-rows :vocab V :seq S :records N)`: synthetic rows
  `row[i] = (start + i * stride) mod V`, with the stride as a field.
- `(npz "path")`: arrays named as the fields, the first axis the records.
- `(text-bytes "glob" :seq S :stride K)`: windows of S bytes from text files.
"""
from __future__ import annotations

import glob as globlib
import hashlib
import os
import re
import zipfile

import numpy as np

from sexpgpu_lang.ir import LoaderIR

NP_DTYPES = {"bool": np.bool_, "i32": np.int32, "i64": np.int64, "f16": np.float16, "f32": np.float32}


class LoaderError(Exception):
    """A data problem: a missing or corrupt file, a field missing or of the wrong shape or dtype."""


def _np_dtype(name: str):
    if name == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return NP_DTYPES[name]


def _seed_words(seed: int, name: str, *rest: int) -> list[int]:
    h = int.from_bytes(hashlib.blake2s(name.encode(), digest_size=4).digest(), "little")
    return [seed & 0xFFFFFFFF, h, *rest]


class Loader:
    """Batches of one loader: `batch(position) -> {field: array [batch, ...]}`.

    The arrays are NumPy, with the declared dtypes; the batch axis is first.
    Raises LoaderError (naming the file and field) when the data do not
    match the declaration.
    """

    def __init__(self, spec: LoaderIR, seed: int):
        self.spec = spec
        self.seed = seed
        self.table = load_table(spec, seed)
        self.where = _source_name(spec)
        counts = {name: len(v) for name, v in self.table.items()}
        if len(set(counts.values())) > 1:
            each = ", ".join(f"`{name}` {n}" for name, n in counts.items())
            raise LoaderError(f"{self.where}: fields have different record counts: {each}")
        self.records = next(iter(counts.values()), 0)
        if self.records < spec.batch:
            # An epoch shorter than a batch would repeat records within every batch.
            raise LoaderError(f"{self.where} has {self.records} record{'s' if self.records != 1 else ''}, "
                              f"fewer than one batch of {spec.batch}; give it at least {spec.batch} records, "
                              "or lower `:batch`")
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) > 4:
                self._perms.clear()
            rng = np.random.default_rng(_seed_words(self.seed, self.spec.name, epoch))
            self._perms[epoch] = rng.permutation(self.records)
        return self._perms[epoch]

    def indices(self, position: int, count: int) -> np.ndarray:
        """The record indices at positions `position ... position + count - 1`."""
        epoch, within = divmod(position, self.records)
        if within + count <= self.records:   # one epoch (every batch but one per epoch): a slice of its order
            return self._perm(epoch)[within:within + count].astype(np.int64)
        pos = np.arange(position, position + count)
        epochs, within = np.divmod(pos, self.records)
        out = np.empty(count, dtype=np.int64)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self._perm(int(e))[within[sel]]
        return out

    def batch(self, position: int, lo: int = 0, hi: int | None = None) -> dict[str, np.ndarray]:
        """One batch of `spec.batch` records starting at `position`; with `lo`/`hi`, only its rows
        `[lo, hi)` (a process's share of the global batch in a multi-process run, sharding.py)."""
        hi = self.spec.batch if hi is None else hi
        idx = self.indices(position + lo, hi - lo)
        return {name: self.table[name][idx] for name in self.table}


def load_table(spec: LoaderIR, seed: int) -> dict[str, np.ndarray]:
    """The loader's records, one array per declared field, checked against the declaration."""
    kind, args = spec.source
    if kind == "stride-rows":
        table = _stride_rows(spec, seed, args)
    elif kind == "npz":
        table = _npz(spec, args)
    elif kind == "text-bytes":
        table = _text_bytes(spec, args)
    else:  # the checker only admits the kinds above
        raise LoaderError(f"loader `{spec.name}`: unknown source `{kind}`")
    _check_table(spec, table)
    return table


def _source_name(spec: LoaderIR) -> str:
    kind, args = spec.source
    if kind == "npz":
        return f"loader `{spec.name}` ({_resolve(spec, str(args.get('path', '')))})"
    if kind == "text-bytes":
        return f"loader `{spec.name}` ({_resolve(spec, str(args.get('glob', '')))})"
    return f"loader `{spec.name}`"


def _check_table(spec: LoaderIR, table: dict[str, np.ndarray]) -> None:
    where = _source_name(spec)
    for name, shape, dtype in spec.fields:
        if name not in table:
            raise LoaderError(f"{where}: the data have no field `{name}` (they have {', '.join(sorted(table)) or 'nothing'})")
        arr = table[name]
        if tuple(arr.shape[1:]) != tuple(shape):
            raise LoaderError(f"{where}: field `{name}` has records of shape [{' '.join(map(str, arr.shape[1:]))}], "
                              f"the declaration says [{' '.join(map(str, shape))}]")
        if np.dtype(arr.dtype) != np.dtype(_np_dtype(dtype)):
            raise LoaderError(f"{where}: field `{name}` has dtype {arr.dtype}, the declaration says {dtype}")


def _field(spec: LoaderIR, name: str):
    for n, shape, dtype in spec.fields:
        if n == name:
            return shape, dtype
    return None


def _stride_rows(spec: LoaderIR, seed: int, args: dict) -> dict[str, np.ndarray]:
    vocab, seq = int(args.get("vocab", 16)), int(args.get("seq", 8))
    n = int(args.get("records", 1 << 16))
    rng = np.random.default_rng(_seed_words(seed, spec.name, 1 << 30))
    start = rng.integers(0, vocab, size=(n, 1))
    stride = rng.integers(1, max(vocab, 2), size=(n, 1))
    rows = (start + np.arange(seq)[None, :] * stride) % vocab
    table = {}
    for name, value in (("row", rows), ("stride", stride)):
        f = _field(spec, name)
        if f is not None:
            table[name] = value.astype(_np_dtype(f[1]))
    return table


_VAR = re.compile(r"\$(?:(\w+)|\{([^}]*)\})")


def _resolve(spec: LoaderIR, path: str) -> str:
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


def _npz(spec: LoaderIR, args: dict) -> dict[str, np.ndarray]:
    path = _resolve(spec, str(args.get("path", "")))
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files if _field(spec, k) is not None}
    except FileNotFoundError:
        raise LoaderError(f"loader `{spec.name}`: no file {path}; make it, or fix the path (relative to the run file)")
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise LoaderError(f"loader `{spec.name}`: {path} is not a readable .npz file ({e})")


def _text_bytes(spec: LoaderIR, args: dict) -> dict[str, np.ndarray]:
    pattern = _resolve(spec, str(args.get("glob", "")))
    files = sorted(f for f in globlib.glob(pattern, recursive=True) if os.path.isfile(f))
    if not files:
        raise LoaderError(f"loader `{spec.name}`: no file matches {pattern}")
    if len(spec.fields) != 1:
        raise LoaderError(f"loader `{spec.name}`: text-bytes gives one field of byte windows; declare exactly one")
    name, shape, dtype = spec.fields[0]
    seq = int(args.get("seq", shape[0] if shape else 64))
    if tuple(shape) != (seq,):
        raise LoaderError(f"loader `{spec.name}`: field `{name}` must be [{seq}] for windows of {seq} bytes")
    stride = int(args.get("stride", seq))
    data = bytearray()
    for f in files:
        with open(f, "rb") as fh:
            data += fh.read()
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    if len(buf) < seq:
        raise LoaderError(f"loader `{spec.name}`: the files matching {pattern} hold {len(buf)} bytes, fewer than one window of {seq}")
    starts = np.arange(0, len(buf) - seq + 1, stride)
    windows = buf[starts[:, None] + np.arange(seq)[None, :]]
    return {name: windows.astype(_np_dtype(dtype))}
