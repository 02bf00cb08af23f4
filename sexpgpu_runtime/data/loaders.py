"""Loaders: where records come from, in a deterministic, resumable order.

A loader is a set of records (a `Table` of arrays in memory, or the windows
of a token file: token_files.py) and an order: epoch `e` visits the records
in the permutation drawn from `(seed, loader name, e)`, so the order is a
pure function of the seed and shuffles every epoch. The position (records
consumed) is the whole loader state: `batch(position)` returns records
`position ... position + batch - 1` of that endless sequence, so a resume
that restores the position continues the same order. A table's permutation
is drawn whole (numpy's `permutation`); a token file's is computed for the
indices asked for (`token_files.permuted`), so no order array is built.

We keep this small piece ourselves rather than adopt grain: the order
needs only a seeded permutation per epoch and a position
(docs/loaders.md says more).

Sources (docs/dev/design.md#forms-and-the-context; docs/loaders.md):
- `(stride-rows :vocab V :seq S :records N)`: synthetic rows
  `row[i] = (start + i * stride) mod V`, with the stride as a field.
- `(npz "path")`: arrays named as the fields, the first axis the records.
- `(text-bytes "glob" :seq S :stride K)`: windows of S bytes from text files.
- `(tokens "path" :dtype D :seq S ...)`, `(text-tokens "glob" :tokenizer T ...)`: token windows (token_loaders.py).
- `(jsonl "path" ...)`, `(parquet "path" ...)`: prompt datasets (prompt_files.py).
"""
from __future__ import annotations

import hashlib
import os
import zipfile
from tokenize import TokenError

import numpy as np

from sexpgpu_lang.files.bounded_read import is_text
from sexpgpu_lang.ir import LoaderIR
from sexpgpu_lang.files.prompt_rows import no_field, not_an_npz, record_mismatch
from sexpgpu_lang.files.text_tokens import fewer_than_a_batch

from ..errors import LoaderError
from .files import first_nonfinite, glob_files, np_dtype, open_data, resolve_path
from .prompt_files import prompt_table
from .token_files import permuted, widens
from .token_loaders import token_windows

def _seed_words(seed: int, name: str, *rest: int) -> list[int]:
    h = int.from_bytes(hashlib.blake2s(name.encode(), digest_size=4).digest(), "little")
    return [seed & 0xFFFFFFFF, h, *rest]


class Table:
    """Records held in memory: one array per field, the first axis the records (`npz`, `stride-rows`,
    `text-bytes`, the prompt files). Its order is a materialised permutation per epoch."""

    permuted = False

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table
        self.records = len(next(iter(table.values()))) if table else 0

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The records at `idx`, one array per field."""
        return {name: v[idx] for name, v in self.table.items()}


class Loader:
    """Batches of one loader: `batch(position) -> {field: array [batch, ...]}`.

    The arrays are NumPy, with the declared dtypes; the batch axis is first.
    Raises LoaderError (naming the file and field) when the data do not
    match the declaration. The records come from `open_records`: a `Table`
    in memory, or windows of a token file read as asked (token_files.py).
    """

    def __init__(self, spec: LoaderIR, seed: int):
        self.spec = spec
        self.seed = seed
        self.where = _source_name(spec)
        self.source = open_records(spec, seed)
        self.records = self.source.records
        short = fewer_than_a_batch(self.records, spec.batch, "window" if self.source.permuted else "record")
        if short is not None:   # an epoch shorter than a batch would repeat records within every batch
            raise LoaderError(f"{self.where} {short[0]}; {short[1]}")
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) > 4:
                self._perms.clear()
            rng = np.random.default_rng(_seed_words(self.seed, self.spec.name, epoch))
            self._perms[epoch] = rng.permutation(self.records)
        return self._perms[epoch]

    def _order(self, epoch: int, within: np.ndarray) -> np.ndarray:
        """The record indices at positions `within` of epoch `epoch`'s order."""
        if self.source.permuted:
            return permuted(within, self.records, self.seed, self.spec.name, epoch)
        return self._perm(epoch)[within].astype(np.int64)

    def indices(self, position: int, count: int) -> np.ndarray:
        """The record indices at positions `position ... position + count - 1`."""
        epoch, within = divmod(position, self.records)
        if within + count <= self.records:   # one epoch (every batch but one per epoch): a slice of its order
            return self._order(epoch, np.arange(within, within + count))
        pos = np.arange(position, position + count)
        epochs, within = np.divmod(pos, self.records)
        out = np.empty(count, dtype=np.int64)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self._order(int(e), within[sel])
        return out

    def batch(self, position: int, lo: int = 0, hi: int | None = None) -> dict[str, np.ndarray]:
        """One batch of `spec.batch` records starting at `position`; with `lo`/`hi`, only its rows
        `[lo, hi)` (a process's share of the global batch in a multi-process run, sharding.py)."""
        hi = self.spec.batch if hi is None else hi
        return self.source.take(self.indices(position + lo, hi - lo))


def open_records(spec: LoaderIR, seed: int):
    """The loader's records: a `Table`, or a token file's windows (`TokenWindows`), checked
    against the declaration. Raises LoaderError naming the loader, the file and the fix."""
    kind, args = spec.source
    if kind in ("tokens", "text-tokens"):
        return token_windows(spec, args)
    if kind in ("jsonl", "parquet"):
        table = prompt_table(spec, args)
    else:
        table = load_table(spec, seed)
    _check_table(spec, table)
    counts = {name: len(v) for name, v in table.items()}
    if len(set(counts.values())) > 1:
        each = ", ".join(f"`{name}` {n}" for name, n in counts.items())
        raise LoaderError(f"{_source_name(spec)}: fields have different record counts: {each}")
    return Table(table)


def load_table(spec: LoaderIR, seed: int) -> dict[str, np.ndarray]:
    """The records of an in-memory source (`stride-rows`, `npz`, `text-bytes`), one array per declared field."""
    kind, args = spec.source
    if kind == "stride-rows":
        return _stride_rows(spec, seed, args)
    if kind == "npz":
        return _npz(spec, args)
    if kind == "text-bytes":
        return _text_bytes(spec, args)
    raise LoaderError(f"loader `{spec.name}`: unknown source `{kind}`")   # the checker only admits SOURCES


def _source_name(spec: LoaderIR) -> str:
    kind, args = spec.source
    if kind in ("npz", "tokens", "jsonl", "parquet"):
        return f"loader `{spec.name}` ({resolve_path(spec, str(args.get('path', '')))})"
    if kind in ("text-bytes", "text-tokens"):
        return f"loader `{spec.name}` ({resolve_path(spec, str(args.get('glob', '')))})"
    return f"loader `{spec.name}`"


def _check_table(spec: LoaderIR, table: dict[str, np.ndarray]) -> None:
    """Each declared field present, of the declared record shape and dtype; integer data stored
    narrower are widened in place by token_files.widens' rule (nanoGPT's uint16 into `:i32`)."""
    where = _source_name(spec)
    for name, shape, dtype in spec.fields:
        if name not in table:
            raise LoaderError(f"{where}: the data have no field `{name}` (they have {', '.join(sorted(table)) or 'nothing'})")
        arr = table[name]
        if tuple(arr.shape[1:]) != tuple(shape) or (np.dtype(arr.dtype) != np.dtype(np_dtype(dtype))
                                                    and not widens(np.dtype(arr.dtype).name, dtype)):
            why = record_mismatch(name, arr.shape[1:], np.dtype(arr.dtype).name, shape, dtype)
            raise LoaderError(f"{where}: " + (why or f"field `{name}` has dtype {arr.dtype}, the declaration says {dtype}"))
        if np.dtype(arr.dtype) != np.dtype(np_dtype(dtype)):
            table[name] = arr.astype(np_dtype(dtype))
        _check_finite(where, name, table[name])


def _check_finite(where: str, name: str, arr: np.ndarray) -> None:
    """LoaderError at the first NaN or infinite value of a floating field (its record and place):
    no op of the language can mask one, so it would make every loss that reads it NaN."""
    first = first_nonfinite(arr)
    if first is not None:
        place = f" at [{' '.join(map(str, first[1:]))}]" if len(first) > 1 else ""
        raise LoaderError(f"{where}: field `{name}` holds {arr[first]} in record {first[0]}{place}; a NaN or "
                          "infinite input makes the losses that read it NaN: fix the data, or drop the record")


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
            table[name] = value.astype(np_dtype(f[1]))
    return table


def _npz(spec: LoaderIR, args: dict) -> dict[str, np.ndarray]:
    """The declared fields of an `.npz`. A file that is not one (a `.npy`, a raw token file, text)
    is named for what it is, with the source that reads it; object arrays are never unpickled."""
    path = resolve_path(spec, str(args.get("path", "")))
    where = f"loader `{spec.name}`"
    with open_data(path, where) as fh:
        head = fh.read(4096)
    why = not_an_npz(head, path, str(args.get("path")))
    if why is not None:
        raise LoaderError(f"{where}: {why}")
    try:
        with np.load(path, allow_pickle=False) as data:
            files = list(data.files)
            for n, _, _ in spec.fields:
                if n not in files:
                    raise LoaderError(f"{_source_name(spec)}: {no_field(n, sorted(files))}")
            out = {}
            for k in files:
                if _field(spec, k) is None:
                    continue
                try:
                    out[k] = np.asarray(data[k])
                except ValueError as e:
                    if "allow_pickle" not in str(e):
                        raise
                    raise LoaderError(f"{where}: field `{k}` in {path} holds Python objects, which are never "
                                      "unpickled; save it as a numeric array") from None
            return out
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, SyntaxError, TokenError) as e:
        # (a member's junk .npy header: numpy parses it with Python's tokenizer and `ast`)
        raise LoaderError(f"{where}: {path} is not a readable .npz file ({type(e).__name__}: "
                          f"{(str(e).splitlines() or [''])[0]})") from None


def _text_bytes(spec: LoaderIR, args: dict) -> dict[str, np.ndarray]:
    pattern = resolve_path(spec, str(args.get("glob", "")))
    files = glob_files(pattern, f"loader `{spec.name}`")
    if len(spec.fields) not in (1, 2):
        raise LoaderError(f"loader `{spec.name}`: text-bytes gives one field of byte windows, or two (the windows "
                          f"and the next-byte targets); it declares {len(spec.fields)}")
    name, shape, dtype = spec.fields[0]
    seq = int(args.get("seq", shape[0] if shape else 64))
    for field, fshape, _ in spec.fields:
        if tuple(fshape) != (seq,):
            raise LoaderError(f"loader `{spec.name}`: field `{field}` must be [{seq}] for windows of {seq} bytes")
    stride = int(args.get("stride", seq))
    span = seq + len(spec.fields) - 1   # a target field: each window reads one byte more
    data = bytearray()
    for f in files:
        with open(f, "rb") as fh:
            text = fh.read()
        if not is_text(text):
            raise LoaderError(f"loader `{spec.name}`: {f} is not UTF-8 text (a binary file); a token file is read "
                              "with `(tokens ...)`, else narrow the glob to text files")
        data += text
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    if len(buf) < span:
        raise LoaderError(f"loader `{spec.name}`: the files matching {pattern} hold {len(buf)} bytes, fewer than one window of {span}")
    starts = np.arange(0, len(buf) - span + 1, stride)
    windows = buf[starts[:, None] + np.arange(span)[None, :]]
    return {field: windows[:, i:i + seq].astype(np_dtype(fdtype)) for i, (field, _, fdtype) in enumerate(spec.fields)}
