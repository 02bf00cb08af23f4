"""Prompt datasets: `(jsonl "path" ...)` and `(parquet "path" ...)`, one record per row, for RL and distillation.

A declared field takes the column of its name:
- `[L]` from a text column (tokenized with `:tokenizer`, a Hugging Face
  tokenizer.json, without special tokens) or a column of token-id lists:
  the ids padded with `:pad` (default 0) after the last, or cut to the
  first `L`;
- `[]` from a column of numbers (a label, a reward);
- `NAME-length` (`[]`, an integer dtype) is the number of real tokens of the
  declared field `NAME` (after the cut), `NAME-mask` (`[L]`) is 1 (true)
  at each of them and 0 at the padding.
A file with `prompt` and `answer` columns so gives the split as two fields
(`:prompt [P] :i32 :answer [A] :i32`, with their lengths or masks).

The file is read whole (pyarrow for parquet: only the columns the fields
name); with `:vocab V` every id is checked to be below `V`. Errors are
LoaderError naming the file (and of a row at fault: the line and column of
its value in a .jsonl, its number in a parquet file), what the row holds
against what the field declares, and the fix.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np

from sexpgpu_lang.bounded_read import BadJsonlRow, NotRegularFile, check_regular, jsonl_rows
from sexpgpu_lang.ir import LoaderIR

from .files import first_nonfinite, np_dtype, open_data, resolve_path
from ..errors import LoaderError, TokenizeError
from .tokenize import load_tokenizer

SUFFIXES = ("-length", "-mask")


def prompt_table(spec: LoaderIR, args: dict) -> dict[str, np.ndarray]:
    """The records of a `jsonl` or `parquet` source, one array per declared field, in its declared dtype."""
    kind = spec.source[0]
    path = resolve_path(spec, str(args.get("path", "")))
    where = f"loader `{spec.name}` ({path})"
    declared = {n for n, _, _ in spec.fields}
    wanted = [n for n in declared if not _derived(n, declared)]
    columns, names, at = (_jsonl(path, wanted, where, f"loader `{spec.name}`") if kind == "jsonl"
                          else _parquet(path, wanted, where))
    for n in wanted:
        if n not in columns:
            raise LoaderError(f"{where}: the data have no field `{n}` (they have {', '.join(names) or 'nothing'})")
    pad = int(args.get("pad") or 0)
    vocab = args.get("vocab")
    tokenizer = None
    table: dict[str, np.ndarray] = {}
    lengths: dict[str, np.ndarray] = {}
    for name, shape, dtype in spec.fields:
        if name not in wanted:
            continue
        col = columns[name]
        if len(shape) == 0:
            table[name] = _scalars(col, name, dtype, at)
            continue
        if len(shape) != 1:
            raise LoaderError(f"{where}: field `{name}` is [{' '.join(map(str, shape))}]; a column gives a scalar `[]` "
                              "or a sequence of tokens `[L]`")
        if col and isinstance(col[0], str):
            if tokenizer is None:
                if not args.get("tokenizer"):
                    raise LoaderError(f"{where}: column `{name}` holds text; give `:tokenizer \"tokenizer.json\"` "
                                      "to tokenize it, or store token ids")
                try:
                    tokenizer = load_tokenizer(resolve_path(spec, str(args["tokenizer"])))
                except TokenizeError as e:
                    raise LoaderError(f"loader `{spec.name}`: {e}") from None
            ids = [e.ids for e in tokenizer.encode_batch(_all(col, str, name, shape, at), add_special_tokens=False)]
        else:
            ids = _all(col, list, name, shape, at)
        table[name], lengths[name] = _pad(ids, shape[0], pad, dtype, name, at)
        real = np.arange(shape[0])[None, :] < lengths[name][:, None]   # the padding is not checked
        over = real & ((table[name] >= int(vocab)) | (table[name] < 0)) if vocab is not None else None
        if over is not None and over.any():
            row = int(np.argmax(over.any(axis=1)))
            raise LoaderError(f"{at(name, row)}: `{name}` has token {int(table[name][row][over[row]][0])}, outside "
                              f"`:vocab {vocab}`; raise `:vocab` to the model's vocabulary, or tokenize with its tokenizer")
    for name, shape, dtype in spec.fields:
        base = _derived(name, declared)
        if base is None:
            continue
        n = lengths.get(base)
        if n is None:
            raise LoaderError(f"{where}: field `{name}` describes `{base}`, which is not a token field; declare "
                              f"`:{base} [L] :i32`")
        if name.endswith("-length"):
            table[name] = n.astype(np_dtype(dtype))
        else:
            width = table[base].shape[1]
            table[name] = (np.arange(width)[None, :] < n[:, None]).astype(np_dtype(dtype))
    return table


def _derived(name: str, declared: set[str]) -> str | None:
    """The token field that `name` is the length or mask of, or None."""
    for s in SUFFIXES:
        if name.endswith(s) and name[:-len(s)] in declared:
            return name[:-len(s)]
    return None


def _kind(v) -> str:
    """A JSON (or parquet) value's kind in plain words: text, a number, a list, ..."""
    if isinstance(v, str):
        return f"text ({json.dumps(v if len(v) <= 20 else v[:20] + '...')})"
    if isinstance(v, bool):
        return f"a boolean ({json.dumps(v)})"
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    if isinstance(v, list):
        return "a list"
    return "an object" if isinstance(v, dict) else type(v).__name__


def _all(col: list, kind: type, name: str, shape: tuple, at) -> list:
    """`col` itself when every row is text (`kind` str) or a list of integer token ids (`kind` list);
    else LoaderError at the first other row (`at(name, i)` names its file and line, or its row)."""
    decl = f"field `{name}` is declared `[{' '.join(map(str, shape))}]`"
    for i, v in enumerate(col):
        if kind is str and not isinstance(v, str):
            raise LoaderError(f"{at(name, i)}: `{name}` is {_kind(v)}, but {decl} and the first row's `{name}` is "
                              "text; make the row's value text like the others")
        if kind is str:
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:   # JSON's "\ud800" alone: no text holds it, and no tokenizer takes it
                raise LoaderError(f"{at(name, i)}: `{name}` holds a lone surrogate (\\u{ord(v[e.start]):04x} at "
                                  f"character {e.start + 1}), which is not text; a \\uD800-\\uDFFF escape must be "
                                  "half of a pair: fix the row, or drop it") from None
        if kind is list:
            if not isinstance(v, list):
                what = "the first row's is a list of token ids" if i else "a sequence field takes text or a list of token ids"
                raise LoaderError(f"{at(name, i)}: `{name}` is {_kind(v)}, but {decl} ({what}); fix the row, or the "
                                  "declaration if every row is so")
            bad = next((t for t in v if not isinstance(t, int) or isinstance(t, bool)), None)
            if bad is not None:
                raise LoaderError(f"{at(name, i)}: `{name}` is a list holding {_kind(bad)}, but {decl}, a list of "
                                  "integer token ids; fix the row, or store text in every row (with `:tokenizer`)")
    return col


def _scalars(col: list, name: str, dtype: str, at) -> np.ndarray:
    """[rows] the numbers of `col` in `dtype`; a row that is not a number (or a fraction for an
    integer dtype) is LoaderError naming the row (`at(name, i)`) and both sides."""
    floats = dtype in ("f16", "bf16", "f32")
    for i, v in enumerate(col):
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and (floats or not isinstance(v, float))
        if not number:
            want = "a number" if floats else "an integer"
            raise LoaderError(f"{at(name, i)}: `{name}` is {_kind(v)}, but field `{name}` is declared `[] :{dtype}` "
                              f"({want}); fix the row, or the declaration if every row is so")
    with np.errstate(over="ignore"):   # a number too large for `dtype` becomes inf, named below
        out = np.asarray(col).astype(np_dtype(dtype))
    first = first_nonfinite(out)
    if first is not None:
        i = first[0]
        given_nonfinite = isinstance(col[i], float) and not math.isfinite(col[i])   # else too large for `dtype`
        what = f"{col[i]}" if given_nonfinite else f"{col[i]}, which is {out[i]} in {dtype}"
        raise LoaderError(f"{at(name, i)}: `{name}` is {what}; a NaN or infinite input makes the losses that "
                              "read it NaN: fix the row, or drop it")
    return out


def _pad(ids: list[list[int]], width: int, pad: int, dtype: str, name: str, at):
    """([rows width] the ids padded with `pad` or cut to `width`, [rows] the real lengths). An id that
    does not fit `dtype` is LoaderError naming its row (`at(name, i)`: its file and line, or its row)
    and the id."""
    lengths = np.fromiter((len(r) for r in ids), dtype=np.int64, count=len(ids))
    kept = np.minimum(lengths, width)
    info = np.iinfo(np_dtype(dtype))

    def refuse(i: int, bad: int):
        fix = "declare `:i64`, or fix the row" if dtype != "i64" else "fix the row"
        return LoaderError(f"{at(name, i)}: `{name}` has token id {bad}, which does not fit {dtype} "
                           f"({info.min} to {info.max}); {fix}")
    out = np.full((len(ids), width), pad, dtype=np.int64)
    for i, r in enumerate(ids):
        try:
            out[i, :kept[i]] = r[:width]
        except OverflowError:   # past i64 itself
            raise refuse(i, next(t for t in r[:width] if not -(1 << 63) <= t < (1 << 63))) from None
    # (a negative id, Hugging Face's -100 label, is refused where it reaches a table: run/id_tables.py)
    outside = (out < info.min) | (out > info.max)
    if outside.any() and not info.min <= pad <= info.max:
        raise LoaderError(f"{at(name, 0).split(': ')[0]}: the padding id {pad} of `{name}` does not fit {dtype}; "
                          "declare `:i64`")
    if outside.any():
        i = int(np.argmax(outside.any(axis=1)))
        raise refuse(i, int(out[i][outside[i]][0]))
    return out.astype(np_dtype(dtype)), kept


def _jsonl(path: str, wanted: list[str], where: str, loader: str):
    """(the wanted columns of a .jsonl file (one JSON object a line; UTF-8, a byte-order mark allowed),
    every key its rows have, `at(name, row)`: ``loader `name`: FILE:LINE:COL`` of that row's value).
    A bad row is LoaderError naming `loader` (``loader `name` ``), the file, its line and the column:
    where the parse failed for a row that is not JSON, the first byte that is not UTF-8."""
    columns: dict[str, list] = {n: [] for n in wanted}
    names: dict[str, None] = {}
    lines: list[int] = []
    with open_data(path, where) as fh:
        try:
            for line_no, row in jsonl_rows(fh):
                names.update(dict.fromkeys(row))
                lines.append(line_no)
                for n in wanted:
                    columns[n].append(row.get(n))
        except BadJsonlRow as e:
            raise LoaderError(f"{loader}: {e.where(path)}: {e.detail}") from None
        except OSError as e:
            raise LoaderError(f"{where}: cannot read {path}: {e.strerror or e}") from None
    for n, col in columns.items():
        if n in names and None in col:
            raise LoaderError(f"{loader}: {path}:{lines[col.index(None)]}: the row has no `{n}` (or it is null); give "
                              "every row the field")

    def at(name: str, row: int) -> str:
        line_no = lines[row]
        return f"{loader}: {path}:{line_no}:{_value_column(path, line_no, name)}"
    return {n: c for n, c in columns.items() if n in names}, list(names), at


def _value_column(path: str, line_no: int, name: str) -> int:
    """The column (from 1, in characters) where key `name`'s value starts on line `line_no` of `path`
    (read again: only for an error), or 1 where the key is not found written plainly."""
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, 1):
            if i == line_no:
                text = raw.decode("utf-8").lstrip("\ufeff") if i == 1 else raw.decode("utf-8")
                m = re.search(re.escape(json.dumps(name)) + r"\s*:\s*", text)
                return m.end() + 1 if m else 1
    return 1


def _parquet(path: str, wanted: list[str], where: str):
    """(the wanted columns of a parquet file (pyarrow reads only those), every column it has,
    `at(name, row)`: ``loader `name` (FILE): row N of column `name` ``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        check_regular(path)   # pyarrow would wait on a FIFO, or read /dev/zero for ever
        schema = pq.read_schema(path)
        present = [n for n in wanted if n in schema.names]
        table = pq.read_table(path, columns=present)
    except FileNotFoundError:
        raise LoaderError(f"{where}: no file {path}; make it, or fix the path (relative to the run file)") from None
    except NotRegularFile as e:
        raise LoaderError(f"{where}: cannot read {path}: {e}; name a regular file") from None
    except (pa.ArrowException, OSError) as e:
        raise LoaderError(f"{where}: {path} is not a readable parquet file ({str(e).splitlines()[0]}); write it with "
                          "pyarrow.parquet.write_table") from None
    return ({n: table.column(n).to_pylist() for n in present}, list(schema.names),
            lambda name, row: f"{where}: row {row + 1} of column `{name}`")
