"""What the front end keeps between checks: parsed files and parsed text, bounded in bytes, dropped per document.

Every cache of the front end is a `Space` here: the parsed `config.json`s,
the safetensors headers and indexes, the `:reward` files, the token, text
and prompt file checks, the tokenizer sizes, and the parser's pieces of
text. An entry is kept with an estimate of its memory in bytes (Python's
objects, as `estimate` or the space's own rule counts them) and the
documents that read it (`readers`); it is dropped, oldest use first, when

- its space holds more than its `max_entries` or its `max_bytes`;
- all spaces together hold more than `MEMORY_LIMIT` bytes (the least
  recently used entry of any space goes first);
- the last document that read it closes (`forget_reader`), or, for an
  entry of a file, the check of its last reader no longer reads it
  (`reading` settles that at the end of each check that ran to its end).

An entry made outside any `reading` block (`sexpgpu lint`, a test) has no
reader: only the bounds and `forget` drop it. The language server checks
each document inside `reading(uri)`, so what a document read goes when it
closes, and what another open document read stays.

A value is computed outside the lock (two threads may compute the same
entry; the last kept wins): the server checks on one worker thread, its
requests only read. Imports only the standard library; never JAX.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import sys
import threading
from collections import OrderedDict
from typing import Callable, Hashable, Iterator

#: The most memory (estimated, in bytes) all spaces together keep.
MEMORY_LIMIT = 256 << 20

#: What `lookup` gives for a key a space does not hold.
MISSING = object()

_lock = threading.RLock()
_ticks = itertools.count()
_spaces: dict[str, "Space"] = {}
_total = 0
#: The document whose check is running in this thread (or task), and the entries it has used so far.
_reader: contextvars.ContextVar[Hashable | None] = contextvars.ContextVar("sexpgpu_reader", default=None)
_used: contextvars.ContextVar[set | None] = contextvars.ContextVar("sexpgpu_used", default=None)


class _Entry:
    __slots__ = ("value", "nbytes", "readers", "tick")

    def __init__(self, value, nbytes: int):
        self.value, self.nbytes, self.readers, self.tick = value, nbytes, set(), next(_ticks)


class Space:
    """One cache: keys to values, at most `max_entries` of them and `max_bytes` (estimated) in all,
    the least recently used dropped first. `files`: its keys name files (listed by `usage`)."""

    def __init__(self, name: str, max_entries: int, max_bytes: int, files: bool = True):
        self.name, self.max_entries, self.max_bytes, self.files = name, max_entries, max_bytes, files
        self.entries: OrderedDict = OrderedDict()
        self.nbytes = 0
        with _lock:
            _spaces[name] = self

    def lookup(self, key):
        """The value kept under `key` (now the most recently used), or `MISSING`."""
        with _lock:
            entry = self.entries.get(key)
            if entry is None:
                return MISSING
            self.entries.move_to_end(key)
            entry.tick = next(_ticks)
            _note(self, key, entry)
            return entry.value

    def keep(self, key, value, nbytes: int):
        """Keep `value` under `key`, taking about `nbytes` bytes; returns `value`. A value larger than
        the space's `max_bytes` is not kept."""
        global _total
        nbytes = max(int(nbytes), 1)
        with _lock:
            self._drop(key)
            if nbytes > self.max_bytes:
                return value
            entry = self.entries[key] = _Entry(value, nbytes)
            self.nbytes += nbytes
            _total += nbytes
            _note(self, key, entry)
            while len(self.entries) > self.max_entries or self.nbytes > self.max_bytes:
                self._drop(next(iter(self.entries)))
            while _total > MEMORY_LIMIT:
                _oldest_space()._drop_oldest()
        return value

    def clear(self) -> None:
        """Drop every entry."""
        with _lock:
            for key in list(self.entries):
                self._drop(key)

    def _drop(self, key) -> None:
        global _total
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.nbytes -= entry.nbytes
            _total -= entry.nbytes

    def _drop_oldest(self) -> None:
        self._drop(next(iter(self.entries)))

    def __len__(self) -> int:
        return len(self.entries)


def _note(space: Space, key, entry: _Entry) -> None:
    """Record that the running check (if any) used `entry`."""
    reader = _reader.get()
    if reader is not None:
        entry.readers.add(reader)
        used = _used.get()
        if used is not None and space.files:   # (what `settle` looks at)
            used.add((space.name, key))


def _oldest_space() -> Space:
    return min((s for s in _spaces.values() if s.entries),
               key=lambda s: s.entries[next(iter(s.entries))].tick)


def memo(space: Space, nbytes: Callable[[object], int] | None = None):
    """Decorate a function of hashable arguments so that its results are kept in `space` (as
    `functools.lru_cache` would, but bounded in bytes and dropped per document); `nbytes(result)`
    estimates a result's memory (default `estimate`). An exception is not kept. The wrapper's
    `cache_clear()` clears the space."""
    size = nbytes or estimate

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            got = space.lookup(key)
            if got is MISSING:
                got = fn(*args, **kwargs)
                space.keep(key, got, size(got))
            return got
        wrapper.cache_clear = space.clear
        wrapper.space = space
        return wrapper
    return deco


@contextlib.contextmanager
def reading(reader: Hashable) -> Iterator[None]:
    """Attribute what the block reads (looks up or keeps) to `reader` (the language server: a
    document's URI). When the block ends normally, the entries `reader` used before and not in this
    block are no longer its own (`settle`): a check reads again what its document still names."""
    r, u = _reader.set(reader), _used.set(set())
    try:
        yield
        settle(reader, _used.get())
    finally:
        _reader.reset(r)
        _used.reset(u)


def settle(reader: Hashable, used: set) -> int:
    """`reader` keeps only the entries of files in `used` ((space name, key) pairs); an entry no
    reader keeps any more is dropped. Returns how many were dropped. (Pieces of parsed text stay
    until their bounds or their readers' closes drop them: an undo brings the text back.)"""
    return _release(reader, lambda space, key: (space.name, key) not in used, files_only=True)


def forget_reader(reader: Hashable) -> int:
    """Drop `reader` from every entry (the language server, when the document closes): an entry no
    other reader keeps is dropped. Returns how many were dropped."""
    return _release(reader, lambda space, key: True)


def _release(reader: Hashable, leaves: Callable, files_only: bool = False) -> int:
    dropped = 0
    with _lock:
        for space in _spaces.values():
            if files_only and not space.files:
                continue
            for key, entry in list(space.entries.items()):
                if reader in entry.readers and leaves(space, key):
                    entry.readers.discard(reader)
                    if not entry.readers:
                        space._drop(key)
                        dropped += 1
    return dropped


def forget() -> None:
    """Drop everything every space keeps."""
    with _lock:
        for space in _spaces.values():
            space.clear()


def usage() -> dict:
    """What is kept: `{"bytes", "limit", "spaces": [{"name", "entries", "bytes", "max_entries",
    "max_bytes"}], "files": [{"space", "key", "bytes", "readers"}]}` (the entries of the spaces of
    files; bytes estimated). The server answers `sexpgpu/memoryUsage` with it."""
    with _lock:
        spaces = [{"name": s.name, "entries": len(s.entries), "bytes": s.nbytes, "max_entries": s.max_entries,
                   "max_bytes": s.max_bytes} for s in _spaces.values()]
        files = [{"space": s.name, "key": _shown(k), "bytes": e.nbytes, "readers": sorted(map(str, e.readers))}
                 for s in _spaces.values() if s.files for k, e in s.entries.items()]
        return {"bytes": _total, "limit": MEMORY_LIMIT, "spaces": spaces, "files": files}


def _shown(key) -> str:
    """A key as `usage` lists it: the first string in it (a path), else its text, cut to 300 characters."""
    first = key
    while isinstance(first, tuple) and first:
        first = first[0]
    text = first if isinstance(first, str) else repr(key)
    return text if len(text) <= 300 else text[:299] + "…"


def estimate(value, sample: int = 4096) -> int:
    """About how many bytes `value` takes: `sys.getsizeof` of it and of what it holds (containers,
    an exception's arguments, an object's attributes or slots), each object once. Of a container of
    more than `sample` items, `sample` items evenly spaced are looked at and counted for all: the
    time is bounded (some 10^5 objects at most for any value) and the estimate stays near."""
    seen: set[int] = set()
    stack: list[tuple[object, float]] = [(value, 1.0)]
    total = 0.0
    while stack:
        v, weight = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        total += sys.getsizeof(v, 64) * weight
        if isinstance(v, (str, bytes, int, float, bool, type(None))):
            continue
        if isinstance(v, dict):
            items = list(v.items()) if len(v) <= sample else _spaced(list(v.items()), sample)
            w = weight * len(v) / max(len(items), 1)
            for k, x in items:
                stack.append((k, w))
                stack.append((x, w))
        elif isinstance(v, (tuple, list, set, frozenset)):
            items = list(v) if len(v) <= sample else _spaced(list(v), sample)
            w = weight * len(v) / max(len(items), 1)
            stack.extend((x, w) for x in items)
        elif isinstance(v, BaseException):
            stack.extend((x, weight) for x in v.args)
        else:
            attrs = getattr(v, "__dict__", None)
            if attrs is not None:
                stack.append((attrs, weight))
            for name in getattr(type(v), "__slots__", ()):
                if hasattr(v, name):
                    stack.append((getattr(v, name), weight))
    return int(total)


def _spaced(items: list, k: int) -> list:
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]
