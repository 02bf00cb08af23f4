"""The checks of a prompt source's rows (`jsonl`, `parquet`) against the loader's fields, row by row.

`sexpgpu run` (sexpgpu_runtime/data/prompt_files.py) and `lint --read-files`
(check/loader_sources.py) both feed each row to a `PromptRows` and ask it for
the first `problem()`, so the two refuse the same rows with the same words.
It keeps a few values per field, not the rows: a file of any length is
checked in bounded memory. What it checks, in the order the run reports:

- a declared field no row has: "the data have no field `x` (they have ...)";
- (`jsonl`) a row without a field others have, or holding null;
- a `[L]` field of chat messages whose tokenizer has no chat template, or
  one that does not compile (chat_template.NoChatTemplate);
- per field, in declaration order: a `[]` field's row that is not a number
  (an integer for an integer dtype), then a NaN or infinite one (JSON's
  `1e999`, a 5,000-digit float) or one too large for its float dtype; a
  `[L]` field whose first row is text (or chat messages) without
  `:tokenizer`, a later row that is not text (or a lone surrogate), not a
  list of message objects, or messages the chat template fails on (the
  template's own error); a `[L]` field of token-id lists whose row is not a
  list, or a list holding anything but integers; then a row longer than
  `L` tokens where the source pads on the left without `:truncate`
  (`Layout.refuses_long`); then ids (of those kept: the first `L`, or the
  last with `:truncate :left`) that do not fit its dtype, then (with
  `:vocab`) one outside the vocabulary.

The ids of a text or chat row are known only with the tokenizer: the
caller gives `PromptRows` an `encode` (prompt_encoder.PromptEncoder, which
renders a chat row through its template and tokenizes it); without one
those rows' lengths and ids are not checked.

Pure Python (json, re); never JAX, never numpy.
"""
from __future__ import annotations

import json
import math
import re
from typing import NamedTuple

SUFFIXES = ("-length", "-mask", "-positions")


class Layout(NamedTuple):
    """How a prompt source lays out a `[L]` field's row: `pad_side` ("right": the ids, then the padding;
    "left": the padding, then the ids, as generation wants them) and `truncate` (None, "left": keep
    the last `L` ids, "right": keep the first `L`). A row longer than `L` with `truncate` None keeps
    its first `L` when padded on the right, and is refused when padded on the left (its generation
    would start from a cut prompt)."""
    pad_side: str = "right"
    truncate: str | None = None

    @property
    def refuses_long(self) -> bool:
        """Whether a row longer than its field is refused rather than cut."""
        return self.truncate is None and self.pad_side == "left"

    def kept(self, ids: list, width: int) -> list:
        """The ids of a row that its `[width]` field keeps."""
        if len(ids) <= width:
            return ids
        return ids[len(ids) - width:] if self.truncate == "left" else ids[:width]

#: The smallest magnitude that rounds to infinity in each float dtype (round to nearest even).
_OVERFLOW = {"f16": 65520.0, "bf16": 2.0 ** 128 - 2.0 ** 119, "f32": 2.0 ** 128 - 2.0 ** 103}


def derived(name: str, declared) -> str | None:
    """The token field that `name` is the `-length`, `-mask` or `-positions` of (a declared name), or None."""
    for s in SUFFIXES:
        if name.endswith(s) and name[:-len(s)] in declared:
            return name[:-len(s)]
    return None


def kind_words(v) -> str:
    """A JSON (or parquet) value's kind in plain words: text ("..."), a number (2.5), a list, ..."""
    if isinstance(v, str):
        return f"text ({json.dumps(v if len(v) <= 20 else v[:20] + '...')})"
    if isinstance(v, bool):
        return f"a boolean ({json.dumps(v)})"
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "null"
    return "an object" if isinstance(v, dict) else type(v).__name__


def no_field(name: str, have) -> str:
    """The run's words for data without a declared field `name`, naming the fields they `have` (in
    the order given): "the data have no field `y` (they have x, z)", "(they have nothing)". The
    prompt sources, `npz` (sexpgpu_runtime/data/loaders.py) and `lint --read-files` say it so."""
    return f"the data have no field `{name}` (they have {', '.join(have) or 'nothing'})"


def not_an_npz(head: bytes, path: str, rel: str) -> str | None:
    """Why the file at `path` (`rel` as the run file writes it) is not an `.npz`, from its first bytes
    `head` (4096 are enough), with the source that reads what it is (the reason, then the fix); None
    when it starts as a zip file does. The one check `run` (sexpgpu_runtime/data/loaders.py) and
    `lint --read-files` (check/loader_sources.py) make."""
    from .bounded_read import is_text
    if not head:
        return f"{path} is empty; write its fields with np.savez"
    if head.startswith(b"\x93NUMPY"):
        return (f"{path} is a .npy file (one array, no field names), not an .npz; read a token stream with "
                f"`(tokens \"{rel}\" :seq S)`, or save named fields with np.savez")
    if head.startswith(b"PK"):
        return None
    if is_text(head):
        return (f"{path} is a text file, not an .npz; read text with `(text-tokens ...)` or `(text-bytes ...)`, or "
                "save arrays with np.savez")
    return (f"{path} is not an .npz (no zip header); a raw token file such as nanoGPT's .bin is read with "
            f"`(tokens \"{rel}\" :dtype :uint16 :seq S)`")


#: Integer dtypes (numpy names) whose every value a declared integer dtype holds (numpy's safe casting):
#: an array stored so is widened as it is read (nanoGPT's uint16 ids into `:i32`).
SAFE_WIDENING = {"i32": ("int8", "int16", "int32", "uint8", "uint16"),
                 "i64": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")}
#: A declared dtype's numpy name.
NUMPY_NAMES = {"i32": "int32", "i64": "int64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "bool": "bool"}


def record_mismatch(name: str, records: tuple, stored: str, shape: tuple, dtype: str) -> str | None:
    """Why a field `name` declared `shape` (per record) `dtype` cannot be read from an array whose records
    are `records` (its shape past the first axis) of numpy dtype `stored`; None when it can (the same,
    or an integer dtype that widens: SAFE_WIDENING). The one check `run` (data/loaders.py, on the
    arrays) and `lint --read-files` (on an `.npz`'s headers) make."""
    if tuple(records) != tuple(shape):
        return (f"field `{name}` has records of shape [{' '.join(map(str, records))}], the declaration says "
                f"[{' '.join(map(str, shape))}]")
    if stored != NUMPY_NAMES.get(dtype, dtype) and stored not in SAFE_WIDENING.get(dtype, ()):
        return f"field `{name}` has dtype {stored}, the declaration says {dtype}"
    return None


def npz_headers(path: str) -> dict[str, tuple[tuple, str]] | None:
    """Each array of the `.npz` at `path`: (its shape, its numpy dtype name), from the `.npy` header of
    its zip member alone (nothing else is read; a compressed member is inflated as far as its header);
    None when it is not a zip file, a member's header cannot be read, or a dtype is not a plain one."""
    import ast
    import struct
    import zipfile
    from .bounded_read import NPY_HEADER_LIMIT, open_regular
    names = {"b1": "bool", "u1": "uint8", "i1": "int8", "u2": "uint16", "i2": "int16", "u4": "uint32",
             "i4": "int32", "u8": "uint64", "i8": "int64", "f2": "float16", "f4": "float32", "f8": "float64"}
    out = {}
    try:
        with open_regular(path) as fh, zipfile.ZipFile(fh) as z:
            for member in z.namelist():
                with z.open(member) as m:
                    head = m.read(12)
                    if len(head) < 10 or not head.startswith(b"\x93NUMPY"):
                        return None
                    major = head[6]
                    size, start = (struct.unpack("<H", head[8:10])[0], 10) if major == 1 else \
                        (struct.unpack("<I", head[8:12])[0], 12)
                    if size > NPY_HEADER_LIMIT:
                        return None
                    raw = head[start:] + m.read(size - (len(head) - start))
                header = ast.literal_eval(raw.decode("utf-8" if major == 3 else "latin1"))
                descr, shape = header.get("descr"), header.get("shape")
                if not isinstance(descr, str) or descr[1:] not in names or not isinstance(shape, tuple) or not shape:
                    return None
                out[member[:-4] if member.endswith(".npy") else member] = (tuple(shape[1:]), names[descr[1:]])
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, SyntaxError, MemoryError, RecursionError,
            AttributeError, struct.error):
        return None
    return out


def npz_fields(path: str) -> list[str] | None:
    """The array names of the `.npz` at `path` (its zip members, `.npy` cut off, as numpy names them),
    or None when it is not a zip file (the runtime says what it is) or cannot be read. Opened through
    bounded_read.open_regular; only the zip's directory is read."""
    import zipfile
    from .bounded_read import open_regular
    try:
        with open_regular(path) as fh, zipfile.ZipFile(fh) as z:
            return [n[:-4] if n.endswith(".npy") else n for n in z.namelist()]
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return None


def unreadable_parquet(path: str, error: Exception) -> str:
    """The reason and fix when pyarrow cannot read the parquet file at `path` (`error`, its first line
    said): the words of `run` (data/prompt_files.py) and of `lint --read-files`."""
    return (f"{path} is not a readable parquet file ({(str(error).splitlines() or [''])[0]}); write it with "
            "pyarrow.parquet.write_table")


def outside_vocab(name: str, token: int, vocab: int) -> str:
    """The reason and fix when field `name` of a row holds (or its text tokenizes to) `token`, outside
    `:vocab`: the words of `run` (data/prompt_files.py) and of `lint --read-files`."""
    return (f"`{name}` has token {token}, outside `:vocab {vocab}`; raise `:vocab` to the model's vocabulary, or "
            "tokenize with its tokenizer")


class RowProblem(NamedTuple):
    """The first thing the run refuses: `field`, `row` (index from 0 among the rows, or None for the
    whole file), `reason` (the words after ``FILE:LINE:COL: ``, reason and fix), `column` (whether
    the place names the column of the field's value; else ``FILE:LINE: ``, or the loader alone),
    `line` (the `line` given with that row, if any)."""
    field: str
    row: int | None
    reason: str
    column: bool
    line: int | None = None


class PromptRows:
    """The rows of a prompt source checked against `fields` ((name, shape, dtype) triples; the
    `-length`/`-mask`/`-positions` ones are derived, not read). `tokenizer`: whether the source has
    `:tokenizer`; `nulls`: whether a missing or null value is its own error (`jsonl`); `layout`: its
    `:pad-side` and `:truncate` (Layout); `encode`: text or chat messages to ids (`encode(value, kind, field)`,
    kind "text" or "chat": prompt_encoder.PromptEncoder.ids), or None to leave those rows' ids unchecked.
    Call `keys(names)` with each row's keys (or the file's columns), `row(values)` with each row's
    values of `wanted` (None where missing), then `problem()`."""

    def __init__(self, fields, tokenizer: bool, nulls: bool = True, vocab: int | None = None,
                 layout: Layout = Layout(), encode=None):
        declared = {n for n, _, _ in fields}
        self.fields = [(n, tuple(s), d) for n, s, d in fields if derived(n, declared) is None]
        self.wanted = [n for n, _, _ in self.fields]
        self.tokenizer, self.nulls, self.vocab = tokenizer, nulls, vocab
        self.layout, self.encode = layout, encode
        self.names: dict[str, None] = {}
        self.rows = 0
        self.kinds: dict[str, str] = {}   # each `[L]` field's rows: "text", "chat" or "ids" (its first row's)
        self._null: dict[str, int] = {}
        self._file: dict[str, RowProblem] = {}   # a chat template that is not there, or does not compile
        self._bad: dict[str, RowProblem] = {}
        self._long: dict[str, RowProblem] = {}
        self._nonfinite: dict[str, RowProblem] = {}   # (and a token list's id that does not fit its dtype)
        self._outside: dict[str, RowProblem] = {}

    def keys(self, names) -> None:
        """Record keys (column names) the data have."""
        self.names.update(dict.fromkeys(names))

    def row(self, values: dict, line: int | None = None) -> None:
        """Check one row: `values` maps each wanted field to its value (None where missing or null);
        `line` (its line in the file) is given back with a problem found in it."""
        i = self.rows
        self.rows += 1
        for name, shape, dtype in self.fields:
            v = values.get(name)
            if v is None and self.nulls:
                self._null.setdefault(name, (i, line))
                continue
            if name in self._bad or name in self._file:
                continue
            if i == 0:
                self.kinds[name] = row_kind(v)
            bad = self._value(name, shape, dtype, v, i)
            if bad is not None:
                self._bad[name] = bad._replace(line=line)
            for later in (self._long, self._nonfinite, self._outside):
                if name in later and later[name].row == i:
                    later[name] = later[name]._replace(line=line)

    def _value(self, name: str, shape: tuple, dtype: str, v, i: int) -> RowProblem | None:
        decl = f"field `{name}` is declared `[{' '.join(map(str, shape))}]`"
        if len(shape) == 0:
            return self._scalar(name, dtype, v, i)
        if len(shape) != 1:
            return None   # the runtime names the shape; the checker already refuses it
        kind = self.kinds.get(name)
        if kind in ("text", "chat"):
            if not self.tokenizer:
                what = "text" if kind == "text" else "chat messages"
                fix = ("to tokenize it" if kind == "text" else "(with the model's tokenizer_config.json beside it, "
                       "for its chat template) to render and tokenize them")
                return RowProblem(name, None, f"column `{name}` holds {what}; give `:tokenizer \"tokenizer.json\"` "
                                  f"{fix}, or store token ids", False)
            bad = _text_row(name, decl, v, i) if kind == "text" else _chat_row(name, decl, v, i)
            if bad is not None or self.encode is None:
                return bad
            from .chat_template import NoChatTemplate, RenderError
            try:
                ids = self.encode(v, kind, name)
            except NoChatTemplate as e:
                self._file[name] = RowProblem(name, None, f"column `{name}` holds chat messages, but {e}", False)
                return None
            except RenderError as e:
                return RowProblem(name, i, f"`{name}`'s messages do not render through the chat template: {e}; fix "
                                  "the row, or the template", True)
            self._ids(name, shape[0], dtype, ids, i, "tokens")
            return None
        if not isinstance(v, list):
            what = "the first row's is a list of token ids" if i else "a sequence field takes text or a list of token ids"
            return RowProblem(name, i, f"`{name}` is {kind_words(v)}, but {decl} ({what}); fix the row, or the "
                              "declaration if every row is so", True)
        bad = next((t for t in v if not isinstance(t, int) or isinstance(t, bool)), _NONE)
        if bad is not _NONE:
            return RowProblem(name, i, f"`{name}` is a list holding {kind_words(bad)}, but {decl}, a list of "
                              "integer token ids; fix the row, or store text in every row (with `:tokenizer`)", True)
        self._ids(name, shape[0], dtype, v, i, "token ids")
        return None

    def _ids(self, name: str, width: int, dtype: str, ids: list, i: int, what: str) -> None:
        """Check row `i`'s ids of `[width]` field `name`: its length against the layout, then the ids it
        keeps against `dtype` and `:vocab` (the ids past the cut are dropped, never checked)."""
        if len(ids) > width and self.layout.refuses_long and name not in self._long:
            self._long[name] = RowProblem(name, i, long_row(name, len(ids), width, what), True)
        kept = self.layout.kept(ids, width)
        big = next((t for t in kept if not _fits(t, dtype)), None) if name not in self._nonfinite else None
        if big is not None:
            self._nonfinite[name] = RowProblem(name, i, _too_big(name, "has token id", big, dtype), True)
        if self.vocab is not None and name not in self._outside:
            out = next((t for t in kept if t >= self.vocab or t < 0), None)
            if out is not None:
                self._outside[name] = RowProblem(name, i, outside_vocab(name, out, self.vocab), True)

    def _scalar(self, name: str, dtype: str, v, i: int) -> RowProblem | None:
        floats = dtype in _OVERFLOW
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and (floats or not isinstance(v, float))):
            want = "a number" if floats else "an integer"
            return RowProblem(name, i, f"`{name}` is {kind_words(v)}, but field `{name}` is declared `[] :{dtype}` "
                              f"({want}); fix the row, or the declaration if every row is so", True)
        if name not in self._nonfinite:
            what = None
            if isinstance(v, float) and not math.isfinite(v):
                what = f"{v}"
            elif floats and abs(v) >= _OVERFLOW[dtype]:
                what = f"{v}, which is {'-' if v < 0 else ''}inf in {dtype}"
            if what is not None:
                self._nonfinite[name] = RowProblem(name, i, f"`{name}` is {what}; a NaN or infinite input makes "
                                                   "the losses that read it NaN: fix the row, or drop it", True)
            elif not floats and not _fits(v, dtype):
                self._nonfinite[name] = RowProblem(name, i, _too_big(name, "is", v, dtype), True)
        return None

    def problem(self) -> RowProblem | None:
        """The first thing the run refuses, in the run's order (module docstring), or None."""
        for n in self.wanted:
            if n not in self.names:
                return RowProblem(n, None, no_field(n, self.names), False)
        for n in self.wanted:
            if n in self._null:
                i, line = self._null[n]
                return RowProblem(n, i, f"the row has no `{n}` (or it is null); give every row the field", False, line)
        for n in self.wanted:
            if n in self._file:
                return self._file[n]
        for n in self.wanted:
            found = self._bad.get(n) or self._long.get(n) or self._nonfinite.get(n) or self._outside.get(n)
            if found is not None:
                return found
        return None


def row_kind(v) -> str:
    """What a `[L]` field's first row holds: "text", "chat" (a list of message objects) or "ids"."""
    if isinstance(v, str):
        return "text"
    if isinstance(v, list) and v and isinstance(v[0], dict):
        return "chat"
    return "ids"


def long_row(name: str, length: int, width: int, what: str = "tokens") -> str:
    """The reason and fix for a row of `length` ids in a `[width]` field padded on the left."""
    return (f"`{name}` is {length} {what}, more than the {width} of field `{name}` (`:pad-side :left` keeps every "
            f"prompt whole); widen the field to `[{length}]`, or give `:truncate :left` to keep each row's last "
            f"{width} (`:truncate :right`: its first)")


def _text_row(name: str, decl: str, v, i: int) -> RowProblem | None:
    """A later row of a text column that is not text, or not UTF-8 encodable; else None."""
    if not isinstance(v, str):
        return RowProblem(name, i, f"`{name}` is {kind_words(v)}, but {decl} and the first row's `{name}` is "
                          "text; make the row's value text like the others", True)
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:   # JSON's "\ud800" alone: no text holds it, and no tokenizer takes it
        return RowProblem(name, i, f"`{name}` holds a lone surrogate (\\u{ord(v[e.start]):04x} at character "
                          f"{e.start + 1}), which is not text; a \\uD800-\\uDFFF escape must be half of a "
                          "pair: fix the row, or drop it", True)
    return None


def _chat_row(name: str, decl: str, v, i: int) -> RowProblem | None:
    """A row of a chat column that is not a non-empty list of message objects, each with a text `role`."""
    if not isinstance(v, list) or not v:
        return RowProblem(name, i, f"`{name}` is {'an empty list' if v == [] else kind_words(v)}, but {decl} and the "
                          f"first row's `{name}` is chat messages; make it a list of {{\"role\": ..., \"content\": "
                          "...}} objects like the others", True)
    for k, m in enumerate(v):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            what = kind_words(m) if not isinstance(m, dict) else "an object without a text `role`"
            return RowProblem(name, i, f"`{name}`'s message {k + 1} is {what}; each message is an object "
                              "{\"role\": \"user\", \"content\": \"...\"}: fix the row", True)
    return None


_NONE = object()

#: The ids each integer dtype holds.
_INT_RANGE = {"i32": (-(1 << 31), (1 << 31) - 1), "i64": (-(1 << 63), (1 << 63) - 1)}


def _fits(v: int, dtype: str) -> bool:
    """Whether the integer `v` fits the integer dtype `dtype` (i32, else i64)."""
    low, high = _INT_RANGE.get(dtype, _INT_RANGE["i64"])
    return low <= v <= high


def _too_big(name: str, verb: str, v: int, dtype: str) -> str:
    """The reason and fix for an integer `v` of field `name` past its dtype: `:i64` is offered only
    where the value fits it (the runtime would otherwise wrap it round, silently)."""
    low, high = _INT_RANGE.get(dtype, _INT_RANGE["i64"])
    fix = "declare `:i64`, or fix the row" if dtype != "i64" and _fits(v, "i64") else "fix the row"
    return f"`{name}` {verb} {v}, which does not fit {dtype} ({low} to {high}); {fix}"


def value_column(lines, line_no: int, name: str) -> int:
    """The column (from 1, in characters) where key `name`'s value starts on line `line_no` (from 1)
    of `lines` (the file's lines as bytes, e.g. bounded_read.read_lines_bounded), or 1 where the key
    is not found written plainly."""
    for i, raw in enumerate(lines, 1):
        if i == line_no:
            text = raw.decode("utf-8", "replace")
            text = text.lstrip("\ufeff") if i == 1 else text
            m = re.search(re.escape(json.dumps(name)) + r"\s*:\s*", text)
            return m.end() + 1 if m else 1
    return 1
