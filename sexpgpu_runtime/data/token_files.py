"""Token streams on disk: one flat file of token ids, read as windows, never whole.

`TokenStream` opens nanoGPT's `.bin` (raw ids, no header: the dtype is given)
or a one-dimensional `.npy` (its header gives the dtype) without reading it:
a batch reads only its windows, each with one positional read (`pread`)
from the kernel's page cache straight into the batch's array. So a file
larger than memory works and the process's resident memory does not grow
with the file. (A memory map would grow it: each page fault maps the whole
page-cache folio around it, up to 2 MiB, so 640 random windows of 2 KiB
map all of a 400 MB file, and dropping the mapped pages again costs
twice the time in faults; benchmarks/tokens.py measures the reads.)
`TokenWindows` is a loader's records over a stream: window `i` is the
`span` tokens from `i * stride` (`span` is `:seq`, or `:seq + 1` where a
shifted target is declared), its fields the window and, with a target, the
same window one token on.

The order of the windows is `permuted`: a seeded permutation of
`[0, records)` computed for the indices asked for (a Feistel network keyed
by the seed, the loader's name and the epoch, cycle-walked into range), so
no per-epoch order array is ever built: a stream of a billion windows costs
what a batch does.

The widening rule (`widens`) says which on-disk integer dtypes read into a
declared dtype; `scan_ids` checks every id against `:vocab` before training.
"""
from __future__ import annotations

import functools
import hashlib
import os
from tokenize import TokenError

import numpy as np

from sexpgpu_lang.files.bounded_read import NotRegularFile, npy_dtype_mismatch, npy_token_problem, open_regular

from sexpgpu_lang.language import TOKEN_FILE_DTYPES

from ..errors import TokenFileError
from sexpgpu_lang.files.text_tokens import window_count

#: The integer dtypes a token file may hold on disk (numpy's names, as nanoGPT's `np.uint16`).
DISK_DTYPES = TOKEN_FILE_DTYPES
#: The chunk `scan_ids` reads at a time (read, not mapped: the scan adds nothing resident).
SCAN_CHUNK = 16 << 20

_INT_MAX = {"i32": 2**31 - 1, "i64": 2**63 - 1}


def widens(disk: str, declared: str, vocab: int | None = None) -> bool:
    """Whether ids stored as numpy dtype `disk` read into the declared dtype (`i32`, `i64`) unchanged.

    The rule: every value the disk dtype can hold fits the declared one (numpy's safe
    casting: uint8 and uint16 into i32 or i64, uint32 and int32 into i64, each into
    itself); or the ids are known to be below a `vocab` that fits (uint32 or int64
    into i32 with `:vocab` at most 2**31 - 1, which `scan_ids` checks). Anything else,
    a float or bool on either side included, does not widen.
    """
    if declared not in _INT_MAX or disk not in DISK_DTYPES + ("int8", "int16"):
        return False
    if np.can_cast(np.dtype(disk), np.dtype(declared.replace("i", "int")), "safe"):
        return True
    return vocab is not None and vocab - 1 <= _INT_MAX[declared]


class TokenStream:
    """A flat token file opened for reading: `len(stream)` ids of numpy dtype `stream.dtype` from byte `offset`.

    `path` ending in `.npy` is read by its header (it must be one-dimensional, of an
    integer dtype in DISK_DTYPES, and `dtype`, if given, must agree); any other file is
    raw ids of `dtype` (nanoGPT's `.bin`). Raises TokenFileError for a missing, empty,
    truncated or mis-typed file, naming it and the fix.
    """

    def __init__(self, path: str, dtype: str | None):
        self.path = path
        self.offset, self.dtype = self._layout(path, dtype)
        self._file = open_regular(path)
        size = os.fstat(self._file.fileno()).st_size - self.offset
        if size <= 0:
            raise TokenFileError(f"{path} holds no tokens; write the token ids into it, or fix the path")
        self.itemsize = np.dtype(self.dtype).itemsize
        if size % self.itemsize:
            raise TokenFileError(f"{path} is {size} bytes, not a whole number of {self.dtype} ids; "
                                 "is `:dtype` the dtype the file was written with?")
        self.length = size // self.itemsize

    @staticmethod
    def _layout(path: str, dtype: str | None) -> tuple[int, str]:
        """(offset of the first id, numpy dtype name) from a `.npy` header, or the given dtype."""
        try:
            fh = open_regular(path)   # a FIFO or a device (/dev/zero) is refused, never waited on
        except FileNotFoundError:
            raise TokenFileError(f"no file {path}; make it, or fix the path (relative to the run file)") from None
        except NotRegularFile as e:
            raise TokenFileError(f"cannot read {path}: {e}; a token file is a regular file") from None
        except OSError as e:
            raise TokenFileError(f"cannot read {path}: {e.strerror or e}") from None
        with fh:
            head = fh.read(6)
            if head != b"\x93NUMPY":
                if path.endswith(".npy"):
                    raise TokenFileError(f"{path} is not a .npy file (no NumPy header); write it with np.save, "
                                         "or name a raw token file `.bin` and give its `:dtype`")
                if dtype is None:
                    raise TokenFileError(f"{path} is a raw token file with no header; give its `:dtype` "
                                         "(nanoGPT writes `:uint16`)")
                return 0, dtype
        try:
            header = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, SyntaxError, TokenError, EOFError, OverflowError) as e:
            # numpy parses the header's dict with Python's own tokenizer and `ast`: junk there is a
            # SyntaxError or a tokenize.TokenError, not numpy's ValueError
            first = (str(e).splitlines() or [type(e).__name__])[0]
            raise TokenFileError(f"{path} is a .npy file whose header numpy cannot read ({type(e).__name__}: "
                                 f"{first}); write it again with np.save") from None
        offset, shape, stored = header.offset, header.shape, header.dtype
        del header
        name = np.dtype(stored).name
        problem = npy_token_problem(path, stored.str if stored.byteorder == ">" else name, tuple(shape), DISK_DTYPES)
        if problem is not None:
            raise TokenFileError(": ".join(problem))
        if dtype is not None and dtype != name:
            raise TokenFileError("; ".join(npy_dtype_mismatch(path, name, dtype)))
        return offset, name

    def __len__(self) -> int:
        return self.length

    def windows(self, starts: np.ndarray, span: int) -> np.ndarray:
        """The windows `ids[s : s + span]` for each start, as one `[len(starts) span]` array of the
        file's dtype: one positional read per window, straight into the array (thread-safe: no
        shared file position). Raises TokenFileError if the file got shorter under the run."""
        out = np.empty((len(starts), span), dtype=self.dtype)
        fd, nbytes = self._file.fileno(), span * self.itemsize
        for k, s in enumerate(np.asarray(starts, dtype=np.int64).tolist()):
            if _preadv(fd, out[k], self.offset + s * self.itemsize) != nbytes:
                raise TokenFileError(f"{self.path} is shorter than when the run started; leave a token file "
                                     "unchanged while a run reads it")
        return out


def _preadv(fd: int, row: np.ndarray, at: int) -> int:
    """Read `row.nbytes` bytes at byte `at` into `row`; the count read."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [row], at)
    data = os.pread(fd, row.nbytes, at)
    row.view(np.uint8)[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    return len(data)


def scan_ids(path: str, offset: int, dtype: str, vocab: int) -> None:
    """Check that every id in the file is in `[0, vocab)` (`first_outside`).

    Raises TokenFileError naming the first id out of range, its position and the fix.
    """
    bad = first_outside(path, offset, dtype, vocab)
    if bad is not None:
        raise TokenFileError(f"{path}: token {bad[0]} at position {bad[1]} is outside "
                             f"`:vocab {vocab}` (ids 0 to {vocab - 1}); raise `:vocab` to the model's "
                             "vocabulary, or make the file again with the model's tokenizer")


def first_outside(path: str, offset: int, dtype: str, vocab: int) -> tuple[int, int] | None:
    """(id, position) of the first id of the file (its ids of `dtype` from byte `offset`) outside
    `[0, vocab)`, or None; read in SCAN_CHUNK pieces (nothing stays resident)."""
    item = np.dtype(dtype).itemsize
    buf = np.empty(SCAN_CHUNK // item, dtype=dtype)
    seen = 0
    with open(path, "rb") as fh:
        fh.seek(offset)
        while True:
            got = fh.readinto(memoryview(buf).cast("B")) // item
            if got == 0:
                return None
            chunk = buf[:got]
            if chunk.max() >= vocab or chunk.min() < 0:
                at = int(np.argmax((chunk >= vocab) | (chunk < 0)))
                return int(chunk[at]), seen + at
            seen += got


@functools.lru_cache(maxsize=16)
def _round_keys(seed: int, name: str, epoch: int) -> tuple[tuple[int, int], ...]:
    """The Feistel network's 4 round keys for one epoch: (xor key, odd multiplier) pairs from blake2b."""
    h = hashlib.blake2b(f"{seed}/{name}/{epoch}".encode(), digest_size=64).digest()
    words = [int.from_bytes(h[8 * i:8 * i + 8], "little") for i in range(8)]
    return tuple((words[2 * r], words[2 * r + 1] | 1) for r in range(4))


_M64 = (1 << 64) - 1
#: Up to this many indices the permutation runs on Python ints (each numpy call costs more than
#: the arithmetic of a batch); past it, on numpy arrays. Both compute the same function.
_PYTHON_UP_TO = 1024


def permuted(index: np.ndarray, records: int, seed: int, name: str, epoch: int) -> np.ndarray:
    """Where each of `index` (positions within an epoch, `0 <= i < records`) lands in epoch `epoch`'s
    order: a permutation of `[0, records)` that is a pure function of the seed, the loader's name
    and the epoch, computed only for the indices asked for (int64).

    A Feistel network on `bits` bits (the width of `records - 1`), split into a left part of
    `ceil(bits / 2)` and a right part of `floor(bits / 2)` bits that trade sizes each round
    (unbalanced when `bits` is odd; after the 4 rounds they are back), each round's function
    multiply-shift hashing (the top bits of `(right ^ k1) * k2 mod 2**64`), cycle-walked into
    range: a value at or past `records` is encrypted again until it falls inside (the domain is
    under twice `records`, so fewer than 2 times on average).
    """
    bits = max(2, (records - 1).bit_length())
    a, b = (bits + 1) // 2, bits // 2
    keys = _round_keys(seed, name, epoch)
    index = np.asarray(index, dtype=np.int64)
    if len(index) <= _PYTHON_UP_TO:
        out = []
        for x in index.tolist():
            while True:
                la, lb = a, b
                left, right = x >> lb, x & ((1 << lb) - 1)
                for k1, k2 in keys:
                    left, right = right, left ^ ((((right ^ k1) * k2) & _M64) >> (64 - la))
                    la, lb = lb, la
                x = (left << lb) | right
                if x < records:
                    break
            out.append(x)
        return np.array(out, dtype=np.int64)
    ks = [(np.uint64(k1), np.uint64(k2)) for k1, k2 in keys]

    def encrypt(x: np.ndarray) -> np.ndarray:
        la, lb = a, b
        left, right = x >> np.uint64(lb), x & np.uint64((1 << lb) - 1)
        for k1, k2 in ks:
            left, right = right, left ^ (((right ^ k1) * k2) >> np.uint64(64 - la))
            la, lb = lb, la
        return (left << np.uint64(lb)) | right

    x = encrypt(index.astype(np.uint64))
    out = x >= np.uint64(records)
    while out.any():    # cycle-walking
        x[out] = encrypt(x[out])
        out = x >= np.uint64(records)
    return x.astype(np.int64)


class TokenWindows:
    """A loader's records over a token stream: window `i` is `span` ids from `i * stride`.

    `fields` is the loader's declared ((name, shape, dtype), ...): one field takes the
    window (`span` = its length), two take the window and the same window one token on
    (the next-token target; `span` = length + 1). `take(idx)` returns each field as
    `[len(idx) seq]` in its declared dtype (widened by `widens`' rule).
    """

    permuted = True   # the loader's order is `permuted`, computed per index, never an array per epoch

    def __init__(self, stream: TokenStream, fields, seq: int, stride: int):
        self.stream = stream
        self.names = [n for n, _, _ in fields]
        self.dtypes = [np.dtype(d.replace("i", "int")) for _, _, d in fields]
        self.seq = seq
        self.span = seq + (1 if len(fields) == 2 else 0)
        self.stride = stride
        self.records = window_count(len(stream), self.span, stride)

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The windows at record indices `idx`, one array per field."""
        w = self.stream.windows(np.asarray(idx, dtype=np.int64) * self.stride, self.span)
        out = {self.names[0]: w[:, :self.seq].astype(self.dtypes[0], copy=False)}
        if len(self.names) == 2:
            out[self.names[1]] = w[:, 1:].astype(self.dtypes[1], copy=False)
        return out
