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
LoaderError naming the file (and the line of a .jsonl) and the fix.
"""
from __future__ import annotations

import json

import numpy as np

from sexpgpu_lang.ir import LoaderIR

from .loaders import LoaderError, resolve_path, _np_dtype
from .tokenize import TokenizeError, load_tokenizer

SUFFIXES = ("-length", "-mask")


def prompt_table(spec: LoaderIR, args: dict) -> dict[str, np.ndarray]:
    """The records of a `jsonl` or `parquet` source, one array per declared field, in its declared dtype."""
    kind = spec.source[0]
    path = resolve_path(spec, str(args.get("path", "")))
    where = f"loader `{spec.name}` ({path})"
    declared = {n for n, _, _ in spec.fields}
    wanted = [n for n in declared if not _derived(n, declared)]
    columns, names = (_jsonl(path, wanted, where, f"loader `{spec.name}`") if kind == "jsonl"
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
            table[name] = _scalars(col, name, dtype, where)
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
            ids = [e.ids for e in tokenizer.encode_batch(_all(col, str, name, where), add_special_tokens=False)]
        else:
            ids = _all(col, list, name, where)
        table[name], lengths[name] = _pad(ids, shape[0], pad, dtype, name, where)
        real = np.arange(shape[0])[None, :] < lengths[name][:, None]   # the padding is not checked
        over = real & ((table[name] >= int(vocab)) | (table[name] < 0)) if vocab is not None else None
        if over is not None and over.any():
            row = int(np.argmax(over.any(axis=1)))
            raise LoaderError(f"{where}: row {row + 1} of `{name}` has token {int(table[name][row][over[row]][0])}, outside "
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
            table[name] = n.astype(_np_dtype(dtype))
        else:
            width = table[base].shape[1]
            table[name] = (np.arange(width)[None, :] < n[:, None]).astype(_np_dtype(dtype))
    return table


def _derived(name: str, declared: set[str]) -> str | None:
    """The token field that `name` is the length or mask of, or None."""
    for s in SUFFIXES:
        if name.endswith(s) and name[:-len(s)] in declared:
            return name[:-len(s)]
    return None


def _all(col: list, kind: type, name: str, where: str) -> list:
    for i, v in enumerate(col):
        if not isinstance(v, kind) or (kind is list and not all(isinstance(t, int) and not isinstance(t, bool) for t in v)):
            what = "text" if kind is str else "a list of token ids"
            raise LoaderError(f"{where}: row {i + 1} of column `{name}` is not {what} like the first row's; make "
                              "every row's value the same kind")
    return col


def _scalars(col: list, name: str, dtype: str, where: str) -> np.ndarray:
    try:
        arr = np.asarray(col)
    except ValueError:
        arr = np.asarray(col, dtype=object)
    if arr.ndim != 1 or arr.dtype.kind not in "biuf" or (arr.dtype.kind == "f" and dtype not in ("f16", "bf16", "f32")):
        raise LoaderError(f"{where}: field `{name}` is a scalar `[]` of {dtype}, but column `{name}` holds "
                          f"{'sequences' if arr.ndim > 1 or arr.dtype == object else arr.dtype.name} values; "
                          "declare it with the column's shape and dtype")
    return arr.astype(_np_dtype(dtype))


def _pad(ids: list[list[int]], width: int, pad: int, dtype: str, name: str, where: str):
    """([rows width] the ids padded with `pad` or cut to `width`, [rows] the real lengths)."""
    lengths = np.fromiter((len(r) for r in ids), dtype=np.int64, count=len(ids))
    kept = np.minimum(lengths, width)
    out = np.full((len(ids), width), pad, dtype=np.int64)
    for i, r in enumerate(ids):
        out[i, :kept[i]] = r[:width]
    if out.size and (out.min() < 0 or out.max() > np.iinfo(_np_dtype(dtype)).max):
        raise LoaderError(f"{where}: column `{name}` has token ids that do not fit {dtype}; declare `:i64`")
    return out.astype(_np_dtype(dtype)), kept


def _jsonl(path: str, wanted: list[str], where: str, loader: str) -> tuple[dict[str, list], list[str]]:
    """The wanted columns of a .jsonl file (one JSON object a line; UTF-8, a byte-order mark allowed),
    and every key its rows have. A bad row is LoaderError naming `loader` (``loader `name` ``), the
    file, its line and, for a row that is not JSON, the column where the parse failed."""
    columns: dict[str, list] = {n: [] for n in wanted}
    names: dict[str, None] = {}
    lines: list[int] = []
    try:
        fh = open(path, encoding="utf-8-sig")
    except FileNotFoundError:
        raise LoaderError(f"{where}: no file {path}; make it, or fix the path (relative to the run file)") from None
    except OSError as e:
        raise LoaderError(f"{where}: cannot read {path}: {e.strerror or e}") from None
    with fh:
        try:
            for line_no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line.rstrip("\r\n"))   # (with its newline, a row cut short fails at 2:1)
                except json.JSONDecodeError as e:
                    raise LoaderError(f"{loader}: {path}:{line_no}:{e.colno}: not JSON ({e.msg}); each line of a "
                                      ".jsonl file is one JSON object") from None
                if not isinstance(row, dict):
                    raise LoaderError(f"{loader}: {path}:{line_no}: a JSON {type(row).__name__}, not an object; each "
                                      "line of a .jsonl file is one object like {\"prompt\": ...}")
                names.update(dict.fromkeys(row))
                lines.append(line_no)
                for n in wanted:
                    columns[n].append(row.get(n))
        except UnicodeDecodeError:
            raise LoaderError(f"{where}: {path} is not UTF-8 text; a .jsonl file is UTF-8 JSON, one object a line") from None
        except OSError as e:
            raise LoaderError(f"{where}: cannot read {path}: {e.strerror or e}") from None
    for n, col in columns.items():
        if n in names and None in col:
            raise LoaderError(f"{loader}: {path}:{lines[col.index(None)]}: the row has no `{n}` (or it is null); give "
                              "every row the field")
    return {n: c for n, c in columns.items() if n in names}, list(names)


def _parquet(path: str, wanted: list[str], where: str) -> tuple[dict[str, list], list[str]]:
    """The wanted columns of a parquet file (pyarrow reads only those), and every column it has."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        schema = pq.read_schema(path)
        present = [n for n in wanted if n in schema.names]
        table = pq.read_table(path, columns=present)
    except FileNotFoundError:
        raise LoaderError(f"{where}: no file {path}; make it, or fix the path (relative to the run file)") from None
    except (pa.ArrowException, OSError) as e:
        raise LoaderError(f"{where}: {path} is not a readable parquet file ({str(e).splitlines()[0]}); write it with "
                          "pyarrow.parquet.write_table") from None
    return {n: table.column(n).to_pylist() for n in present}, list(schema.names)
