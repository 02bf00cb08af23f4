"""Prompt datasets: `(jsonl "path" ...)` and `(parquet "path" ...)`, one record per row, for RL and distillation.

A declared field takes the column of its name:
- `[L]` from a text column (tokenized with `:tokenizer`, a Hugging Face
  tokenizer.json, without special tokens) or a column of token-id lists:
  the ids padded with `:pad` (default 0) after the last, or cut to the
  first `L`;
- `[]` from a column of numbers (a label, a reward);
- `NAME-length` (`[]`, an integer dtype) is the number of real tokens of the
  declared field `NAME` (after the cut), `NAME-mask` (`[L]`) is 1 (true)
  at each of them and 0 at the padding, `NAME-positions` (`[L]`, an integer
  dtype) each real token's position from the row's first real token, -1 at
  the padding (the standard library's per-row positions: negative is padding).
With `:pad-side :left` the padding comes before the ids; a row longer than
`L` is then refused unless `:truncate` says which end to cut
(prompt_rows.Layout). A column of chat messages is rendered through the
tokenizer's chat template and tokenized (sexpgpu_lang/files/prompt_encoder.py).
A file with `prompt` and `answer` columns so gives the split as two fields
(`:prompt [P] :i32 :answer [A] :i32`, with their lengths or masks).

The file is read whole (pyarrow for parquet: only the columns the fields
name); with `:vocab V` every id is checked to be below `V`. Errors are
LoaderError naming the file (and of a row at fault: the line and column of
its value in a .jsonl, its number in a parquet file), what the row holds
against what the field declares, and the fix.
"""
from __future__ import annotations

import math

import numpy as np

from sexpgpu_lang.files.bounded_read import (JSONL_LINE_LIMIT, BadJsonlRow, NotRegularFile, check_regular, jsonl_rows,
                                       read_lines_bounded)
from sexpgpu_lang.files.prompt_encoder import PromptEncoder
from sexpgpu_lang.files.prompt_rows import Layout, PromptRows, derived, unreadable_parquet, value_column
from sexpgpu_lang.ir import LoaderIR

from .files import first_nonfinite, np_dtype, open_data, resolve_path
from ..errors import LoaderError, TokenizeError
from .tokenize import load_tokenizer



def prompt_table(spec: LoaderIR, args: dict) -> dict[str, np.ndarray]:
    """The records of a `jsonl` or `parquet` source, one array per declared field, in its declared dtype."""
    kind = spec.source[0]
    path = resolve_path(spec, str(args.get("path", "")))
    where = f"loader `{spec.name}` ({path})"
    declared = {n for n, _, _ in spec.fields}
    wanted = [n for n, _, _ in spec.fields if not _derived(n, declared)]
    columns, names, at = (_jsonl(path, wanted, where, f"loader `{spec.name}`") if kind == "jsonl"
                          else _parquet(path, wanted, where))
    vocab = args.get("vocab")
    layout = Layout(str(args.get("pad-side") or "right"), args.get("truncate"))
    encoded: dict[str, list] = {}
    encoder: list[PromptEncoder] = []

    def encode(value, row_kind: str, field: str) -> list[int]:
        if not encoder:   # the tokenizer is loaded at the first text or chat row
            tok_path = resolve_path(spec, str(args["tokenizer"]))
            try:
                tokenizer = load_tokenizer(tok_path)
            except TokenizeError as e:
                raise LoaderError(f"loader `{spec.name}`: {e}") from None
            encoder.append(PromptEncoder(tokenizer, tok_path, kept=lambda f, ids: encoded.setdefault(f, []).append(ids)))
        return encoder[0].ids(value, row_kind, field)

    check = PromptRows(spec.fields, bool(args.get("tokenizer")), nulls=kind == "jsonl",
                       vocab=int(vocab) if vocab is not None else None, layout=layout, encode=encode)
    check.keys(names)
    present = [n for n in wanted if n in columns]
    for i in range(len(columns[present[0]]) if present else 0):
        check.row({n: columns[n][i] for n in present})
    bad = check.problem()
    if bad is not None:
        place = where if bad.row is None else at(bad.field, bad.row, bad.column)
        raise LoaderError(f"{place}: {bad.reason}")
    pad = int(args.get("pad") or 0)
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
        # text and chat rows: their ids as PromptRows encoded them (and checked them against `:vocab`)
        ids = encoded.get(name, []) if check.kinds.get(name) in ("text", "chat") else col
        table[name], lengths[name] = _pad(ids, shape[0], pad, dtype, name, at, layout)
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
            continue
        width = table[base].shape[1]
        start = width - n if layout.pad_side == "left" else np.zeros_like(n)   # each row's first real column
        column = np.arange(width)[None, :] - start[:, None]
        real = (column >= 0) & (column < n[:, None])
        table[name] = (real if name.endswith("-mask") else np.where(real, column, -1)).astype(np_dtype(dtype))
    return table


def _derived(name: str, declared: set[str]) -> str | None:
    """The token field that `name` is the length or mask of, or None (sexpgpu_lang.files.prompt_rows.derived)."""
    return derived(name, declared)


def _scalars(col: list, name: str, dtype: str, at) -> np.ndarray:
    """[rows] the numbers of `col` (every one a number: PromptRows checked) in `dtype`; a NaN or
    infinite one is LoaderError naming the row (`at(name, i)`): PromptRows names those first, this is
    the cast's own check."""
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


def _pad(ids: list[list[int]], width: int, pad: int, dtype: str, name: str, at, layout: Layout = Layout()):
    """([rows width] the ids padded with `pad` on `layout`'s side, or cut where it says, [rows] the real
    lengths). An id that does not fit `dtype` is LoaderError naming its row (`at(name, i)`: its file
    and line, or its row) and the id."""
    lengths = np.fromiter((len(r) for r in ids), dtype=np.int64, count=len(ids))
    kept = np.minimum(lengths, width)
    left = layout.pad_side == "left"
    info = np.iinfo(np_dtype(dtype))

    def refuse(i: int, bad: int):
        fix = "declare `:i64`, or fix the row" if dtype != "i64" else "fix the row"
        return LoaderError(f"{at(name, i)}: `{name}` has token id {bad}, which does not fit {dtype} "
                           f"({info.min} to {info.max}); {fix}")
    out = np.full((len(ids), width), pad, dtype=np.int64)
    for i, r in enumerate(ids):
        row = layout.kept(r, width)
        try:
            if left:
                out[i, width - kept[i]:] = row
            else:
                out[i, :kept[i]] = row
        except OverflowError:   # past i64 itself
            raise refuse(i, next(t for t in row if not -(1 << 63) <= t < (1 << 63))) from None
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

    def at(name: str, row: int, column: bool = True) -> str:
        line_no = lines[row]
        if not column:
            return f"{loader}: {path}:{line_no}"
        with open_data(path, loader) as fh:   # (read again: only for an error)
            return f"{loader}: {path}:{line_no}:{value_column(read_lines_bounded(fh, JSONL_LINE_LIMIT), line_no, name)}"
    return {n: c for n, c in columns.items() if n in names}, list(names), at


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
        raise LoaderError(f"{where}: {unreadable_parquet(path, e)}") from None
    return ({n: table.column(n).to_pylist() for n in present}, list(schema.names),
            lambda name, row, column=True: f"{where}: row {row + 1} of column `{name}`")
