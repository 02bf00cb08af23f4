"""The `jsonl` and `parquet` prompt sources' rows checked against their files (`lint --read-files`
and `run`'s check): each row read through bounded_read, checked with prompt_rows.PromptRows and, for
text and chat rows, rendered and tokenized with prompt_encoder.PromptEncoder, as the runtime does;
a jsonl text's ids against `:vocab`. E-LOADER-001 in the runtime's words. Called from
check/loader_sources.py.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import os

from ..files.bounded_read import TOKENIZER_JSON_LIMIT, read_bounded
from ..kept import Space, memo
from ..source import Span
from .context import CheckContext
from .source_files import _regular_file, vocab_size


def _jsonl_rows(ctx: CheckContext, rel: str, at: Span, fields=None, tokenizer: str | None = None,
                vocab: int | None = None, layout=None) -> bool:
    """E-LOADER-001 at the path when a row of the .jsonl file `rel` is one the runtime refuses (not
    UTF-8, not JSON, nested too deeply, a number of too many digits, not an object, a line past its
    bound: bounded_read.jsonl_rows, which the runtime reads through), or when with the loader's
    `fields` its rows are ones the runtime refuses (a field no row has, a null, a token list holding
    a non-integer, an infinite number, chat messages the template fails on, a row longer than its
    left-padded field: prompt_rows.PromptRows, which the runtime checks with, encoding text and chat
    rows with the `tokenizer` (its path, relative to the run file) as the runtime does:
    prompt_encoder.PromptEncoder, laid out as `layout` says: prompt_rows.Layout, None for the default). False when reported; a file that is not there or not a regular
    file is the other checks'."""
    found = _regular_file(ctx, rel)
    if found is None:
        return True
    full, st = found
    key = tuple((n, tuple(s), d) for n, s, d in fields) if fields else None
    tok = _regular_file(ctx, tokenizer) if tokenizer is not None else None
    tok_key = (tok[0], tok[1].st_mtime_ns, tok[1].st_size, _template_stamp(tok[0])) if tok is not None else None
    bad = _bad_row(full, st.st_mtime_ns, st.st_size, key, tokenizer is not None, vocab, layout, tok_key)
    if bad is None:
        return True
    where, detail = bad
    reason, _, fix = detail.partition("; ")
    if where is None:
        ctx.err("E-LOADER-001", at, f"`jsonl`'s file `{rel}`: {reason}", help=fix or None)
    else:
        ctx.err("E-LOADER-001", at, f"`jsonl`'s file `{rel}` has a row `run` refuses: {rel}:{where}: {reason}",
                help=fix or None)
    return False


def _template_stamp(tokenizer_path: str) -> tuple:
    """The (mtime_ns, size) of the files beside a tokenizer.json its chat template is read from: an
    edited template is read again."""
    folder = os.path.dirname(tokenizer_path)
    out = []
    for name in ("tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        try:
            st = os.stat(os.path.join(folder, name))
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def _encoder(tok_key):
    """prompt_encoder.PromptEncoder of the tokenizer.json `tok_key[0]`, or None when it does not load
    (the tokenizer's own check names that)."""
    if tok_key is None:
        return None
    from ..files.prompt_encoder import PromptEncoder
    try:
        from tokenizers import Tokenizer
        raw = read_bounded(tok_key[0], TOKENIZER_JSON_LIMIT, "a tokenizer.json").decode("utf-8")
        return PromptEncoder(Tokenizer.from_str(raw), tok_key[0]).ids
    except Exception:   # tokenizers raises a bare Exception; the runtime names what is wrong
        return None


@memo(Space(".jsonl prompt file checks", 16, 4 << 20))
def _bad_row(path: str, mtime_ns: int, size: int, fields=None, tokenizer: bool = False,
             vocab: int | None = None, layout=None, tok_key=None) -> tuple[str | None, str] | None:
    """(LINE[:COL] or None for the whole file, the reason and fix) of the first thing in the .jsonl
    file at `path` the runtime refuses, or None: a row it cannot read, or (with `fields`, the loader's
    (name, shape, dtype) triples) rows that do not fit them, text and chat rows encoded with the
    tokenizer `tok_key` names ((path, mtime_ns, size, its template's stamp), or None). Rows are read
    one at a time (a line at most JSONL_LINE_LIMIT) and not kept. `mtime_ns` and `size` key the
    cache: an edited file is read again."""
    from ..files.bounded_read import JSONL_LINE_LIMIT, BadJsonlRow, jsonl_rows, open_regular, read_lines_bounded
    from ..files.prompt_rows import Layout, PromptRows, value_column
    check = (PromptRows(fields, tokenizer, vocab=vocab, layout=layout or Layout(), encode=_encoder(tok_key))
             if fields else None)
    try:
        with open_regular(path) as fh:
            for line_no, row in jsonl_rows(fh):
                if check is not None:
                    check.keys(row)
                    check.row({n: row.get(n) for n in check.wanted}, line_no)
    except BadJsonlRow as e:
        return e.where("")[1:], e.detail
    except OSError:
        return None
    found = check.problem() if check is not None else None
    if found is None:
        return None
    if found.row is None:
        return None, found.reason
    line_no = found.line
    if not found.column:
        return str(line_no), found.reason
    try:
        with open_regular(path) as fh:
            col = value_column(read_lines_bounded(fh, JSONL_LINE_LIMIT), line_no, found.field)
    except OSError:
        col = 1
    return f"{line_no}:{col}", found.reason


#: The largest parquet file whose rows `lint --read-files` checks (pyarrow reads the declared columns whole).
PARQUET_CHECK_LIMIT = 16 << 20


def _parquet_rows(ctx: CheckContext, rel: str, at: Span, fields, tokenizer: str | None, vocab: int | None,
                  layout=None) -> bool:
    """E-LOADER-001 at the path when the parquet file `rel` is not one pyarrow reads, or lacks a declared
    column, or a row of its declared columns is one the runtime refuses (prompt_rows.PromptRows, the
    check the runtime makes, in its words: ``row N of column `name` ``; text and chat rows encoded with
    the `tokenizer` as the runtime does, laid out as `layout` says). The rows of a file above
    PARQUET_CHECK_LIMIT bytes are left to the run. False when reported."""
    found = _regular_file(ctx, rel)
    if found is None:
        return True
    full, st = found
    key = tuple((n, tuple(s), d) for n, s, d in fields)
    tok = _regular_file(ctx, tokenizer) if tokenizer is not None else None
    tok_key = (tok[0], tok[1].st_mtime_ns, tok[1].st_size, _template_stamp(tok[0])) if tok is not None else None
    bad = _bad_parquet(full, st.st_mtime_ns, st.st_size, key, tokenizer is not None, vocab, layout, tok_key)
    if bad is None:
        return True
    reason, _, fix = bad.partition("; ")
    ctx.err("E-LOADER-001", at, f"`parquet`'s file `{rel}`: {reason}", help=fix or None)
    return False


@memo(Space("parquet prompt file checks", 16, 4 << 20))
def _bad_parquet(path: str, mtime_ns: int, size: int, fields: tuple, tokenizer: bool, vocab: int | None,
                 layout=None, tok_key=None) -> str | None:
    """What the runtime refuses in the parquet file at `path` (reason; fix), or None (see `_parquet_rows`)."""
    from ..files.prompt_rows import Layout, PromptRows, derived, unreadable_parquet
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    declared = {n for n, _, _ in fields}
    wanted = [n for n, _, _ in fields if not derived(n, declared)]
    check = PromptRows(fields, tokenizer, nulls=False, vocab=vocab, layout=layout or Layout(),
                       encode=_encoder(tok_key))
    try:
        schema = pq.read_schema(path)
        check.keys(schema.names)
        present = [n for n in wanted if n in schema.names]
        if size <= PARQUET_CHECK_LIMIT and present:
            table = pq.read_table(path, columns=present)
            columns = {n: table.column(n).to_pylist() for n in present}
            for i in range(len(columns[present[0]])):
                check.row({n: columns[n][i] for n in present})
    except (pa.ArrowException, OSError) as e:
        return unreadable_parquet(path, e)
    bad = check.problem()
    if bad is None:
        return None
    return bad.reason if bad.row is None else f"row {bad.row + 1} of column `{bad.field}`: {bad.reason}"


def _jsonl_text_ids(ctx: CheckContext, rel: str, tok_rel: str, fields, vocab: int, at: Span) -> bool:
    """E-LOADER-001 at the path when a `jsonl` row's text, tokenized as the run tokenizes it (the
    tokenizer's ids without its special tokens, cut to the field's length), holds an id outside
    `:vocab`, in the run's words (prompt_rows.outside_vocab) at the row's line and the value's column.
    Only where the tokenizer has more ids than `:vocab` (else none can be outside), and only the first
    SHORT_TEXT_LIMIT bytes of the file's rows are tokenized. False when reported."""
    found, tok = _regular_file(ctx, rel), _regular_file(ctx, tok_rel)
    if found is None or tok is None or not fields:
        return True
    size = vocab_size(tok[0], tok[1].st_mtime_ns, tok[1].st_size)
    if not isinstance(size, int) or size <= vocab:
        return True
    key = tuple((n, tuple(s), d) for n, s, d in fields)
    bad = _text_id_outside(found[0], found[1].st_mtime_ns, found[1].st_size, tok[0], tok[1].st_mtime_ns, key, vocab)
    if bad is None:
        return True
    where, reason = bad
    text, _, fix = reason.partition("; ")
    ctx.err("E-LOADER-001", at, f"`jsonl`'s file `{rel}` has a row `run` refuses: {rel}:{where}: {text}", help=fix or None)
    return False


@memo(Space(".jsonl text id checks", 16, 4 << 20))
def _text_id_outside(path: str, mtime_ns: int, size: int, tokenizer: str, tok_mtime_ns: int, fields: tuple,
                     vocab: int) -> tuple[str, str] | None:
    """(LINE:COL, reason and fix) of the first text value of a `[L]` field in the .jsonl at `path` whose
    ids (by `tokenizer`, cut to L) hold one outside `vocab`; None when there is none in the rows read."""
    from ..files.bounded_read import JSONL_LINE_LIMIT, BadJsonlRow, jsonl_rows, open_regular, read_lines_bounded
    from ..files.prompt_rows import outside_vocab, value_column
    from ..files.text_tokens import SHORT_TEXT_LIMIT
    try:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_str(read_bounded(tokenizer, TOKENIZER_JSON_LIMIT, "a tokenizer.json").decode("utf-8"))
    except Exception:   # tokenizers raises a bare Exception; the tokenizer's own check names what is wrong
        return None
    lengths = {n: s[0] for n, s, _ in fields if len(s) == 1}
    read = 0
    try:
        with open_regular(path) as fh:
            for line_no, row in jsonl_rows(fh):
                for name, length in lengths.items():
                    v = row.get(name)
                    if not isinstance(v, str):
                        continue
                    read += len(v)
                    out = next((t for t in tok.encode(v, add_special_tokens=False).ids[:length] if t >= vocab), None)
                    if out is not None:
                        with open_regular(path) as again:
                            col = value_column(read_lines_bounded(again, JSONL_LINE_LIMIT), line_no, name)
                        return f"{line_no}:{col}", outside_vocab(name, out, vocab)
                if read > SHORT_TEXT_LIMIT:
                    return None
    except (BadJsonlRow, OSError, UnicodeError):
        return None
    return None
