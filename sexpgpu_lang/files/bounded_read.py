"""Input files read safely: regular files only, never a wait on a special file, a bound where a format has one.

Every file a run file names (a tokenizer.json, a token file, a jsonl or
parquet prompt set, an `.npz`, a safetensors checkpoint and its index), and
the run file itself (`analyze_file`), is read by `sexpgpu run`, by `sexpgpu
lint --read-files` and by the language server through these functions:

- `open_regular(path)` opens without blocking (`O_NONBLOCK`: opening a FIFO
  never waits for a writer) and looks at what it opened (`fstat` of the open
  descriptor, so nothing can be swapped in between): a FIFO, a device
  (`/dev/zero`), a socket or a directory is `NotRegularFile`, whose message
  says what the path is. A regular file is then read as usual (blocking).
- `read_bounded(path, limit, what)` reads a whole regular file of at most
  `limit` bytes; a larger one is `TooLarge`, naming `what`, the file's size
  and the limit (the file is never read past the limit, so a file that grows
  under the read cannot take the memory either).
- `loads_json(raw)` parses JSON, turning the RecursionError of a document
  that nests deeper than Python's parser can follow into `JsonTooDeep` (a
  ValueError), and Python's limit on the digits of an integer
  (`sys.set_int_max_str_digits`, 4,300 by default) into `JsonNumberTooLong`.

`NotRegularFile` and `TooLarge` are OSErrors whose `strerror` is the whole
reason, so the existing `except OSError as e: ... e.strerror` paths say it in
one line. The limits are the module's constants (docs/runtime.md lists them):

| what | limit | why |
|---|---|---|
| a tokenizer.json | `TOKENIZER_JSON_LIMIT`, 256 MiB | the largest on the Hub are tens of MB |
| a safetensors header | `SAFETENSORS_HEADER_LIMIT`, 100,000,000 bytes | the safetensors library's own limit |
| a safetensors index | `INDEX_JSON_LIMIT`, 64 MiB | an index of thousands of tensors is a few MB |
| a checkpoint's config.json | `CONFIG_JSON_LIMIT`, 16 MiB | a few KB in practice |
| a jsonl line | `JSONL_LINE_LIMIT`, 64 MiB | one prompt (or document) a line |
| a `.npy` header (`npy_header`, `lint --read-files`) | `NPY_HEADER_LIMIT`, 64 KiB | numpy's own reader stops at 10,000 bytes |

`text_problem` looks at a text file a chunk (`TEXT_CHUNK`, 1 MiB) at a time, so
any size is checked in bounded memory; `lint --read-files` looks at the first
`TEXT_CHECK_LIMIT` (256 MiB) of each file (`sexpgpu run` reads it all).

Pure Python (os, stat, json); never JAX.
"""
from __future__ import annotations

import errno
import io
import os
import stat

TOKENIZER_JSON_LIMIT = 256 << 20
SAFETENSORS_HEADER_LIMIT = 100_000_000
INDEX_JSON_LIMIT = 64 << 20
CONFIG_JSON_LIMIT = 16 << 20
JSONL_LINE_LIMIT = 64 << 20
#: The largest run file `analyze_file` reads (lint, explain, run): docs/runtime.md's budget is stated up to it.
RUN_FILE_LIMIT = 64 << 20
#: The largest Python file a `:reward` may name that the checker reads (and parses with `ast`, never imports).
PYTHON_SOURCE_LIMIT = 16 << 20


def is_text(data: bytes) -> bool:
    """Whether `data` (a file, or its first bytes) reads as UTF-8 text: no NUL byte, and valid
    UTF-8 but for a character the cut at the end may have split."""
    if b"\0" in data:
        return False
    for cut in range(4):
        try:
            data[:len(data) - cut].decode("utf-8")
            return True
        except UnicodeDecodeError as e:
            if e.start < len(data) - 4:
                return False
    return False


def no_regular_match(pattern: str, matches: list[str]) -> str | None:
    """Why a glob `pattern` whose `matches` (sorted) hold no regular file gives nothing to read: the first
    match that is something else (a FIFO, /dev/zero through a link, a directory), in words, or None when
    nothing (not a dangling link) matches. The one check `run` (sexpgpu_runtime/data/files.glob_files)
    and `lint --read-files` (check/loader_sources.py) both make; only `stat` is used, which never blocks."""
    for f in matches:
        try:
            mode = os.stat(f).st_mode
        except OSError:   # a dangling link: as if nothing matched
            continue
        which = "" if f == pattern else f" ({pattern} matches it)"
        return f"cannot read {f}{which}: it is {describe_mode(mode)}, not a regular file; name regular files"
    return None


def describe_mode(mode: int) -> str:
    """What a file of `st_mode` `mode` is, in words: "a named pipe (FIFO)", "a character device", ..."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


class NotRegularFile(OSError):
    """`path` is a FIFO, a device, a socket or a directory: reading it could wait forever or never
    end. `strerror` (and `str()`) is the reason in words ("it is a named pipe (FIFO), not a
    regular file"); `filename` the path."""

    def __init__(self, path: str, mode: int):
        self.what = describe_mode(mode)
        super().__init__(errno.EINVAL, f"it is {self.what}, not a regular file", path)

    def __str__(self) -> str:
        return self.strerror


class LinkProblem(OSError):
    """`path` is a symbolic link whose target is missing, or a file of a Hugging Face cache snapshot that
    resolves outside its model's folder (hf_cache.link_problem); `strerror` (and `str()`) says which,
    naming the target, and the fix."""

    def __init__(self, path: str, message: str):
        super().__init__(errno.ENOENT, message, path)

    def __str__(self) -> str:
        return self.strerror


class TooLarge(OSError):
    """A file, or one part of it (a header, a line), is larger than its format's bound (`limit`
    bytes); `strerror` (and `str()`) names what, the size and the limit."""

    def __init__(self, path: str, message: str, limit: int):
        self.limit = limit
        super().__init__(errno.EFBIG, message, path)

    def __str__(self) -> str:
        return self.strerror


class JsonTooDeep(ValueError):
    """A JSON document nests deeper than Python's parser follows (it raised RecursionError)."""


class JsonNumberTooLong(ValueError):
    """A JSON integer has more digits than Python converts (its int-string limit)."""


class JsonTooLarge(ValueError):
    """A JSON document that would take more memory parsed than its budget (`loads_json`)."""


def size_words(n: int) -> str:
    """A byte count in words: "512 bytes", "3.0 MiB", "1.5 GiB"."""
    if n < 1 << 20:
        return f"{n:,} bytes"
    if n < 1 << 30:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / (1 << 30):.1f} GiB"


def check_regular(path: str) -> os.stat_result:
    """`os.stat(path)` (links followed) when it is a regular file; NotRegularFile otherwise
    (FileNotFoundError and other OSErrors pass through). For a file opened later by a library
    (pyarrow, tokenizers' own reader): prefer `open_regular` where the opening is ours."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(path, st.st_mode)
    return st


def open_regular(path: str, text: bool = False, encoding: str = "utf-8", newline: str | None = None):
    """`path` opened for reading (bytes, or text in `encoding` with `text`, `newline` as `open`'s), once it is known to
    be a regular file: opened with O_NONBLOCK (a FIFO's open never waits for a writer), then
    `fstat` of that descriptor decides (NotRegularFile else), then made blocking again.
    FileNotFoundError, PermissionError and ValueError (a NUL in the path) pass through; LinkProblem
    for a link whose target is missing, or a snapshot's file linked out of its model's folder."""
    from .hf_cache import link_problem
    why = link_problem(path)
    if why is not None:
        raise LinkProblem(path, why)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, st.st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        fh = io.open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    return io.TextIOWrapper(fh, encoding=encoding, newline=newline) if text else fh


def read_bounded(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them: TooLarge (naming `what`, e.g.
    "a tokenizer.json", its size and the limit) for a larger file, NotRegularFile for a special one.
    Never reads more than `limit + 1` bytes, whatever the file does meanwhile."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise TooLarge(path, f"it is {size_words(size)}, more than the {size_words(limit)} {what} may be", limit)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(path, f"it grew past the {size_words(limit)} {what} may be while it was read", limit)
    return data


def read_lines_bounded(fh, limit: int):
    """The lines of the binary file object `fh`, each with its line ending, as bytes; a line longer
    than `limit` bytes is TooLarge naming its line number (also its `line`) and the limit (never
    read whole)."""
    line_no = 0
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        line_no += 1
        if len(line) > limit and not line.endswith(b"\n"):
            e = TooLarge(getattr(fh, "name", ""), f"line {line_no} is longer than {size_words(limit)}, the most "
                         "one line is read up to", limit)
            e.line = line_no
            raise e
        yield line


JSON_MEMORY_BUDGET = 256 << 20
"""The most memory one JSON document may take parsed, as `json_memory` estimates it before parsing:
the byte bounds above say how much is read, this how much that becomes (Python's objects take 2 to
25 bytes a byte of JSON: `[{},{},...]` the most)."""


def json_memory(raw) -> int:
    """An upper estimate of the bytes `json.loads(raw)` takes, from counts of its structural
    characters (C loops; nothing parsed): each element (a comma) a pointer and a number, each
    string a str object, each key a dict slot, each object a dict and each array a list, plus
    twice the text. Measured at 0.9 to 4 times the parse's peak (tracemalloc) on documents of
    each kind (numbers, strings, keys, empty objects, tokenizer vocabularies and merges)."""
    q, c, o, a, k = ('"', ",", "{", "[", ":") if isinstance(raw, str) else (b'"', b",", b"{", b"[", b":")
    return (2 * len(raw) + 64 * raw.count(c) + 30 * raw.count(q) + 100 * raw.count(k)
            + 200 * raw.count(o) + 60 * raw.count(a))


def loads_json(raw, budget: int = JSON_MEMORY_BUDGET):
    """`json.loads(raw)`, with JsonTooLarge for a document `json_memory` says would take more than
    `budget` bytes parsed (nothing is parsed then), JsonTooDeep for a document that nests too
    deeply (Python's parser raises RecursionError) and JsonNumberTooLong for an integer past
    Python's digit limit (it raises a bare ValueError); json.JSONDecodeError and
    UnicodeDecodeError pass through."""
    import json
    need = json_memory(raw)
    if need > budget:
        raise JsonTooLarge(f"it would take about {size_words(need)} of memory parsed ({size_words(len(raw))} of "
                           f"JSON), more than the {size_words(budget)} one JSON file is read into "
                           "(JSON_MEMORY_BUDGET)")
    try:
        return json.loads(raw)
    except RecursionError:
        raise JsonTooDeep("it nests deeper than JSON is read here (Python's parser follows about "
                          "1,000 levels)") from None
    except json.JSONDecodeError:
        raise
    except ValueError as e:
        if "digits" in str(e) or "int_max_str_digits" in str(e):
            raise JsonNumberTooLong("it holds an integer of more digits than Python reads (4,300 by default)") from None
        raise


#: The fix of a file that is not UTF-8 text: one with NUL bytes (True) is binary, else convert it.
TEXT_FIX = {True: "a token file is read with `(tokens ...)`, else narrow the glob to text files",
            False: "convert it to UTF-8, or narrow the glob to text files"}

#: How many bytes of each text file `lint --read-files` looks at for `text_problem`.
TEXT_CHECK_LIMIT = 256 << 20

#: How many bytes `text_problem` decodes at a time.
TEXT_CHUNK = 1 << 20


def text_problem(chunks, final: bool = True) -> str | None:
    """Why the bytes of `chunks` (an iterable of bytes: a file read in pieces, or `[data]`) are not
    UTF-8 text, in words for after "is not UTF-8 text (": "it holds NUL bytes: a binary file" (the
    first reason, wherever the NUL is), "byte N is 0xXX" (the first byte that does not decode), or
    None for text. Keeps one chunk at a time: a file of any size is looked at in bounded memory. The
    runtime's `text-tokens` (tokenize.read_text) and `lint --read-files` say the same through it.
    `final` False: the chunks are only the file's start (a character cut at their end is not a fault)."""
    import codecs
    decoder = codecs.getincrementaldecoder("utf-8")()
    seen, bad = 0, None
    for chunk in chunks:
        if b"\0" in chunk:
            return "it holds NUL bytes: a binary file"
        if bad is None:
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                at = seen - pending + e.start
                bad = f"byte {at} is 0x{e.object[e.start]:02x}"
        seen += len(chunk)
    if bad is None and final:
        try:
            decoder.decode(b"", True)
        except UnicodeDecodeError as e:
            pending = len(e.object)
            bad = f"byte {seen - pending + e.start} is 0x{e.object[e.start]:02x}"
    return bad


def file_chunks(fh, size: int = TEXT_CHUNK, limit: int | None = None):
    """The bytes of the binary file object `fh`, `size` at a time; with `limit`, its first `limit` bytes only."""
    left = limit
    while left is None or left > 0:
        chunk = fh.read(size if left is None else min(size, left))
        if not chunk:
            return
        if left is not None:
            left -= len(chunk)
        yield chunk


#: The most bytes of a `.npy` header `npy_header` reads (numpy's own `max_header_size` is 10,000).
NPY_HEADER_LIMIT = 1 << 16

#: The token dtypes of `.npy` `descr`s (little-endian, or one byte).
NPY_TOKEN_DESCR = {"|u1": "uint8", "<u2": "uint16", "<u4": "uint32", "<i4": "int32", "<i8": "int64"}


def npy_header(path: str) -> dict | None:
    """The header dict of the `.npy` file at `path` (`descr`, `fortran_order`, `shape`, as np.save
    writes it), read through `open_regular`, at most NPY_HEADER_LIMIT bytes, parsed with
    `ast.literal_eval`; None when it is not a `.npy` or its header cannot be read (the runtime says
    what is wrong then)."""
    import ast
    import struct
    try:
        with open_regular(path) as fh:
            head = fh.read(12)
            if len(head) < 10 or not head.startswith(b"\x93NUMPY"):
                return None
            major = head[6]
            if major == 1:
                size, start = struct.unpack("<H", head[8:10])[0], 10
            elif major in (2, 3) and len(head) == 12:
                size, start = struct.unpack("<I", head[8:12])[0], 12
            else:
                return None
            if size > NPY_HEADER_LIMIT:
                return None
            fh.seek(start)
            raw = fh.read(size)
        header = ast.literal_eval(raw.decode("utf-8" if major == 3 else "latin1"))
    except (OSError, ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return header if isinstance(header, dict) else None


#: `.npy` header `descr` codes (past the byte-order character) as numpy names them.
NPY_DESCR_NAMES = {"b1": "bool", "u1": "uint8", "i1": "int8", "u2": "uint16", "i2": "int16", "u4": "uint32",
                   "i4": "int32", "u8": "uint64", "i8": "int64", "f2": "float16", "f4": "float32", "f8": "float64"}


def npy_token_problem(path: str, stored: str, shape: tuple, disk_dtypes: tuple) -> tuple[str, str] | None:
    """(the reason, the fix) when a `.npy` file read as a token stream holds what is not one: values
    other than little-endian integer ids of `disk_dtypes` (`stored`: the numpy name, or the `descr` such
    as `>u2` for a big-endian array), or an array of more than one axis (`shape`); None otherwise. The
    one check the runtime (data/token_files) and `lint --read-files` make."""
    if stored not in disk_dtypes:
        return (f"{path} holds {stored} values; a token file holds little-endian integer ids "
                f"({', '.join(disk_dtypes)})", "convert it with `a.astype(np.uint16)` or `np.uint32`")
    if len(shape) != 1:
        return (f"{path} holds an array of shape [{' '.join(map(str, shape))}]; a token stream is one-dimensional",
                "save `a.reshape(-1)`, or read records already cut with `(npz ...)`")
    return None


def npy_dtype_mismatch(path: str, stored: str, declared: str) -> tuple[str, str]:
    """(the reason, the fix) when a `.npy` token file's header says `stored` ids (a numpy dtype name)
    but `:dtype` says `declared`: the runtime (token_files) and `lint --read-files` both say so."""
    return (f"{path} holds {stored} ids (its header says so), but `:dtype` says {declared}",
            f"write `:dtype :{stored}` or leave it out")


class BadJsonlRow(ValueError):
    """A line of a .jsonl file that is not one JSON object, or not read: `line` (from 1), `col` (from 1,
    in characters; None where no one column is at fault) and `detail`, the words after ``FILE:LINE[:COL]: ``
    in the message (`where(path)` gives that place)."""

    def __init__(self, line: int, col: int | None, detail: str):
        self.line, self.col, self.detail = line, col, detail
        super().__init__(f"{line}{f':{col}' if col is not None else ''}: {detail}")

    def where(self, path: str) -> str:
        """``PATH:LINE`` or ``PATH:LINE:COL``."""
        return f"{path}:{self.line}" + (f":{self.col}" if self.col is not None else "")


def jsonl_rows(fh):
    """The rows of the .jsonl binary file object `fh` (one JSON object a line, UTF-8, a byte-order mark
    allowed on the first line; blank lines skipped), each as (line number, the object). A line that is
    not UTF-8, not JSON, nested too deeply, holding a number past Python's digit limit, not an object,
    or longer than `JSONL_LINE_LIMIT` is BadJsonlRow at its line (and column) with the reason and the fix;
    OSError passes through. The runtime's `jsonl` source and `lint --read-files` read through this."""
    import json
    try:
        for line_no, raw in enumerate(read_lines_bounded(fh, JSONL_LINE_LIMIT), 1):
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                col = len(raw[:e.start].decode("utf-8")) + 1
                raise BadJsonlRow(line_no, col, f"byte 0x{raw[e.start]:02x} is not UTF-8 text; a .jsonl file is "
                                  "UTF-8 JSON, one object a line: write the row's text as UTF-8") from None
            if not line.strip():
                continue
            try:
                row = loads_json(line.rstrip("\r\n"))   # (with its newline, a row cut short fails at 2:1)
            except json.JSONDecodeError as e:
                raise BadJsonlRow(line_no, e.colno, f"not JSON ({e.msg}); each line of a .jsonl file is one "
                                  "JSON object") from None
            except JsonTooDeep as e:
                raise BadJsonlRow(line_no, None, f"the row {str(e).removeprefix('it ')}; a row is one object of "
                                  "text, numbers and lists of token ids") from None
            except JsonNumberTooLong as e:
                raise BadJsonlRow(line_no, None, f"the row {str(e).removeprefix('it ')}; no field holds such a "
                                  "number: fix the row, or drop it") from None
            if not isinstance(row, dict):
                raise BadJsonlRow(line_no, None, f"a JSON {type(row).__name__}, not an object; each line of a "
                                  ".jsonl file is one object like {\"prompt\": ...}")
            yield line_no, row
    except TooLarge as e:
        raise BadJsonlRow(e.line, None, f"the line is longer than {size_words(e.limit)}, the most one row of a "
                          ".jsonl file is read up to (is it one JSON object a line?); split the row, or drop it") from None


GLOB_WALK_LIMIT = 100_000
"""The most directory entries one glob looks at (`glob_bounded`): a glob over `/` stops here."""
GLOB_MATCH_LIMIT = 10_000
"""The most paths one glob matches (`glob_bounded`)."""
GLOB_SKIPPED = ("/proc", "/sys", "/dev")
"""Directories a glob's wildcards never enter (their entries are the kernel's, not data files);
a path that names one of them literally is still read, and refused there when it is not a
regular file (`open_regular`)."""
_MAGIC = frozenset("*?[")


class GlobTooLarge(OSError):
    """A glob that walks more than GLOB_WALK_LIMIT entries or matches more than GLOB_MATCH_LIMIT
    paths; `strerror` says which limit, in one line, with the fix."""

    def __init__(self, pattern: str, why: str):
        super().__init__(errno.E2BIG, f"the glob {pattern} {why}; narrow it (a directory of the data, "
                                      f"not `/`), or split the data into fewer files")


def _skipped(directory: str) -> bool:
    real = os.path.realpath(directory)
    return any(real == s or real.startswith(s + "/") for s in GLOB_SKIPPED)


def glob_bounded(pattern: str, walk_limit: int | None = None, match_limit: int | None = None) -> list[str]:
    """The paths `pattern` matches, sorted, as `glob.glob(pattern, recursive=True)` gives them (`*`,
    `?`, `[...]` within a name, `**` any number of directories, names starting with `.` matched
    only by a pattern starting with `.`), with bounds: at most `walk_limit` directory entries looked
    at and `match_limit` paths matched (GLOB_WALK_LIMIT and GLOB_MATCH_LIMIT by default), else GlobTooLarge (an OSError naming the limit); a wildcard
    never enters /proc, /sys or /dev (GLOB_SKIPPED), and `**` never enters a directory twice on one
    descent (a symlink loop). `sexpgpu run`, `lint --read-files` and `sexpgpu tokenizer train`
    expand globs through it."""
    import fnmatch
    walk_limit = GLOB_WALK_LIMIT if walk_limit is None else walk_limit
    match_limit = GLOB_MATCH_LIMIT if match_limit is None else match_limit
    walked = 0

    def listing(directory: str):
        nonlocal walked
        if _skipped(directory or "."):
            return
        try:
            with os.scandir(directory or ".") as it:
                for entry in it:
                    walked += 1
                    if walked > walk_limit:
                        raise GlobTooLarge(pattern, f"looks at more than {walk_limit:,} directory entries "
                                                    f"(GLOB_WALK_LIMIT)")
                    yield entry
        except OSError as e:
            if isinstance(e, GlobTooLarge):
                raise

    def join(directory: str, name: str) -> str:
        return os.path.join(directory, name) if directory else name

    def is_dir(entry) -> bool:
        try:
            return entry.is_dir()
        except OSError:
            return False

    def descend(directory: str, files: bool) -> list[str]:
        """`directory` and every directory under it (and, with `files`, every file), hidden names left out."""
        out = [directory]
        stack = [(directory, ())]
        while stack:
            d, seen = stack.pop()
            try:
                st = os.stat(d or ".")
                key = (st.st_dev, st.st_ino)
            except OSError:
                continue
            if key in seen:
                continue
            for entry in listing(d):
                if entry.name.startswith("."):
                    continue
                path = join(d, entry.name)
                if is_dir(entry):
                    out.append(path)
                    stack.append((path, seen + (key,)))
                elif files:
                    out.append(path)
        return out

    absolute = pattern.startswith(os.sep)
    parts = [p for p in pattern.split(os.sep) if p]
    paths = [os.sep if absolute else ""]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if not _MAGIC.intersection(part):
            paths = [join(p, part) for p in paths]
        elif part == "**":
            paths = [q for p in paths for q in descend(p, last)]
        else:
            hidden = part.startswith(".")
            paths = [join(p, e.name) for p in paths for e in listing(p)
                     if (hidden or not e.name.startswith(".")) and fnmatch.fnmatchcase(e.name, part)
                     and (last or is_dir(e))]
    paths = [p for p in dict.fromkeys(paths) if p and os.path.lexists(p)]
    if len(paths) > match_limit:
        raise GlobTooLarge(pattern, f"matches more than {match_limit:,} paths (GLOB_MATCH_LIMIT)")
    return sorted(paths)
