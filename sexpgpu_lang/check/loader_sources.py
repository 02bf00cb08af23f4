"""The checks of a loader's token and prompt sources (`tokens`, `text-tokens`, `jsonl`, `parquet`)
against their arguments and the loader's fields, as far as they can be told without the files.

`check_source(ctx, kind, args, nodes, fields, at)` reports: a path, glob or tokenizer that is
not a string (E-TYPE-003), a `:dtype` that is not an on-disk token dtype (E-FORM-002, with
the near miss), a raw token file without `:dtype` and `text-tokens` without `:tokenizer`
(E-FORM-005), a size that is not a positive integer (E-FORM-002), and for the token sources
anything but one or two integer fields of `[seq]` (E-FORM-002, E-TYPE-002). With the context's
`read_files` (`sexpgpu run`, `lint --read-files`, and the language server for a file on this
machine), a `:tokenizer` whose tokenizer.json has more ids than `:vocab` (W-LOADER-001: read with
json, the largest id of its model's vocabulary and its added tokens), a raw token file whose
size or first ids make its `:dtype` implausible (W-LOADER-002), and a path or `:tokenizer` that
is not a regular file (a FIFO, a device, a socket, a directory), or a tokenizer.json that is empty,
not JSON, not a tokenizer, past its bound or nested too deeply (E-LOADER-001: looked at with `stat`,
read only through bounded_read, so that a pipe or /dev/zero never blocks the check); with
`read_files` True (`run`, `lint --read-files`; not the server's "local"), also a path, tokenizer or
glob that names no file, a `jsonl` row the runtime refuses (read through bounded_read.jsonl_rows
and checked against the fields with prompt_rows.PromptRows, as the runtime does; text and chat rows
rendered and tokenized as the runtime does, prompt_encoder.PromptEncoder), a `parquet` row so, a `text-tokens`
file that is not UTF-8 (bounded_read.text_problem) or a small corpus shorter than one window
(text_tokens), an `npz` without a declared field and a `.npy` whose header is not `:dtype`
(E-LOADER-001, each in the runtime's words, from the check it uses). What only the data files
can tell (their dtype, their ids against `:vocab`, their columns) the runtime checks
(sexpgpu_runtime/data/token_loaders.py, prompt_files.py).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import os

from ..files.bounded_read import read_bounded
from ..diagnostics import warning
from ..kept import Space, memo
from ..language import PAD_SIDES, TOKEN_FILE_DTYPES, TRUNCATE_SIDES
from ..source import Span
from ..types import is_int
from .context import CheckContext, near_miss
from .prompt_sources import _jsonl_rows, _jsonl_text_ids, _parquet_rows
from .source_files import _full_path, _missing_file, _regular_file, _special_file, vocab_size

TOKEN_SOURCES = ("tokens", "text-tokens")
_FIRST = {"tokens": "path", "text-tokens": "glob", "jsonl": "path", "parquet": "path"}


def check_source(ctx: CheckContext, kind: str, args: dict, nodes: dict, fields, at: Span, batch: int | None = None) -> bool:
    """Report what is wrong with a token or prompt source; True when its form is right (other kinds:
    True), so the loader is typed and the phases that read it are checked.

    `args` are the constant values, `nodes` their syntax nodes (for ranges), `fields` the
    loader's (name, shape, dtype) triples or None, `at` the source form's range. What its files
    hold (with `read_files`: a missing file, a row `run` refuses) is reported as well, but leaves
    the result True: the loader's fields are what the file declares, and a mistake elsewhere in
    the file (E-GEN-003, E-CONTRACT-005) is still found."""
    if kind == "npz":
        return _npz_fields(ctx, args, nodes, fields)
    if kind == "text-bytes":
        if fields is not None and not _token_fields(ctx, kind, args, fields, at, unit="byte"):
            return False
        _text_bytes(ctx, args, nodes, fields, batch)
        return True
    if kind not in _FIRST:
        return True
    ok = True
    for key in (_FIRST[kind], "tokenizer", "separator"):
        if args.get(key) is not None and not isinstance(args[key], str):
            ctx.err("E-TYPE-003", nodes[key].span, f"`:{key}` of `{kind}` must be a string")
            ok = False
    if _FIRST[kind] not in args:
        ctx.err("E-FORM-005", at, f"`{kind}` needs a {_FIRST[kind]}: `({kind} \"{'data/*.txt' if kind == 'text-tokens' else 'data/train.bin'}\" ...)`")
        ok = False
    for key in ("seq", "stride", "vocab", "pad"):
        v = args.get(key)
        least = 0 if key == "pad" else 1
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < least):
            ctx.err("E-FORM-002", nodes[key].span, f"`:{key}` of `{kind}` must be an integer of {least} or more, got {v}")
            ok = False
    for key, sides in (("pad-side", PAD_SIDES), ("truncate", TRUNCATE_SIDES)):
        if key in args and args[key] is not None and args[key] not in sides:
            ctx.err("E-FORM-002", nodes[key].span, f"`:{key}` of `{kind}` is " + " or ".join(f"`:{s}`" for s in sides)
                    + f", got {_shown(args[key])}", help="`:pad-side :left` lays prompts out for generation (their ends "
                    "line up); `:truncate :left` keeps a long row's last tokens")
            ok = False
    pad, vocab = args.get("pad"), args.get("vocab")
    if ok and all(isinstance(v, int) and not isinstance(v, bool) for v in (pad, vocab)) and pad >= vocab:
        ctx.err("E-FORM-002", nodes["pad"].span, f"`:pad {pad}` of `{kind}` is not a token id of `:vocab {vocab}` "
                f"(ids 0 to {vocab - 1}): padded positions are looked up in the embedding like any token",
                help=f"pad with an id below {vocab}, such as the tokenizer's end-of-text or padding token")
        ok = False
    if args.get("dtype") is not None and args["dtype"] not in TOKEN_FILE_DTYPES:
        hint = near_miss(str(args["dtype"]), TOKEN_FILE_DTYPES)
        ctx.err("E-FORM-002", nodes["dtype"].span, "`:dtype` of a token file must be one of "
                + ", ".join(f"`:{d}`" for d in TOKEN_FILE_DTYPES) + (f"; did you mean `:{hint}`?" if hint else ""),
                help="nanoGPT writes `:uint16`", data={"replace": f":{hint}"} if hint else None)
        ok = False
    if kind == "tokens" and "dtype" not in args and isinstance(args.get("path"), str) and not args["path"].endswith(".npy"):
        ctx.err("E-FORM-005", at, "`tokens` over a raw token file needs `:dtype` (a `.npy` has it in its header)",
                help="nanoGPT's .bin files are `:dtype :uint16`")
        ok = False
    if kind == "text-tokens" and "tokenizer" not in args:
        ctx.err("E-FORM-005", at, "`text-tokens` needs `:tokenizer`, a Hugging Face tokenizer.json",
                help="make one with `sexpgpu tokenizer train`")
        ok = False
    if kind in TOKEN_SOURCES and fields is not None:
        ok = _token_fields(ctx, kind, args, fields, at) and ok
    if kind in ("jsonl", "parquet") and fields is not None:
        ok = _prompt_fields(ctx, kind, fields, at) and ok
    form_ok = ok
    if ok and ctx.read_files:
        for key in (_FIRST[kind], "tokenizer"):
            if key != "glob" and isinstance(args.get(key), str) and not _special_file(ctx, kind, key, args[key], nodes[key].span):
                ok = False
    missing = set()   # each file is one cause: a glob that matches nothing leaves the tokenizer checked
    if ok and ctx.read_files is True:   # (not the server's "local": a file may be on the machine that runs it)
        missing = {key for key in (_FIRST[kind], "tokenizer") if isinstance(args.get(key), str)
                   and not _missing_file(ctx, kind, key, args[key], nodes[key].span)}
    checked = ok
    ok = ok and not missing
    if checked and ctx.read_files and isinstance(args.get("tokenizer"), str) and "tokenizer" not in missing:
        vocab = args.get("vocab")
        ok = _tokenizer_vocab(ctx, args["tokenizer"], vocab if isinstance(vocab, int) else None,
                              nodes["tokenizer"].span) and ok
    if checked and ctx.read_files is True and kind == "jsonl" and isinstance(args.get("path"), str) \
            and "path" not in missing:
        vocab = args.get("vocab") if isinstance(args.get("vocab"), int) else None
        tokenizer = args.get("tokenizer") if isinstance(args.get("tokenizer"), str) else None
        from ..files.prompt_rows import Layout   # (not at start-up: it imports json)
        layout = Layout(args.get("pad-side") or "right", args.get("truncate"))
        ok = _jsonl_rows(ctx, args["path"], nodes["path"].span, fields, tokenizer, vocab, layout) and ok
        if ok and vocab is not None and isinstance(args.get("tokenizer"), str) and "tokenizer" not in missing:
            ok = _jsonl_text_ids(ctx, args["path"], args["tokenizer"], fields, vocab, nodes["path"].span) and ok
    if checked and ctx.read_files is True and kind == "parquet" and isinstance(args.get("path"), str) \
            and "path" not in missing and fields:
        vocab = args.get("vocab") if isinstance(args.get("vocab"), int) else None
        tokenizer = args.get("tokenizer") if isinstance(args.get("tokenizer"), str) else None
        from ..files.prompt_rows import Layout
        layout = Layout(args.get("pad-side") or "right", args.get("truncate"))
        ok = _parquet_rows(ctx, args["path"], nodes["path"].span, fields, tokenizer, vocab, layout) and ok
    if checked and ctx.read_files is True and kind == "text-tokens" and isinstance(args.get("glob"), str) \
            and "glob" not in missing:
        ok = _text_files(ctx, args["glob"], nodes["glob"].span) and ok
        if ok and isinstance(args.get("tokenizer"), str) and "tokenizer" not in missing and fields:
            _text_windows(ctx, args, fields, nodes["glob"].span, batch)
    if ok and ctx.read_files is True and kind == "tokens" and isinstance(args.get("path"), str) \
            and args["path"].endswith(".npy") and args.get("dtype") in TOKEN_FILE_DTYPES + (None,):
        ok = _npy_dtype(ctx, args["path"], args.get("dtype"), nodes["path"].span) and ok
    if (ok and ctx.read_files and kind == "tokens" and isinstance(args.get("path"), str)
            and not args["path"].endswith(".npy") and args.get("dtype") in _ITEMSIZE):
        _token_file_dtype(ctx, args["path"], args["dtype"], args.get("vocab"), nodes["dtype"].span)
    return form_ok


def _shown(value) -> str:
    """A source argument's value as the file wrote it: a keyword's name as `:name`."""
    return f"`:{value}`" if isinstance(value, str) else f"`{value}`"


#: The bytes of each on-disk token dtype, and its `memoryview` format.
_ITEMSIZE = {"uint8": (1, "B"), "uint16": (2, "H"), "uint32": (4, "I"), "int32": (4, "i"), "int64": (8, "q")}

#: How many bytes of a token file W-LOADER-002 samples (its start).
SAMPLE_BYTES = 1 << 16


def _token_file_dtype(ctx: CheckContext, rel: str, dtype: str, vocab, at: Span) -> None:
    """W-LOADER-002 at `:dtype` when a raw token file (`rel`, relative to the run file) makes its
    declared dtype implausible: its size is not a whole number of ids, every other id of its
    first `SAMPLE_BYTES` is 0 (a file of twice the width read narrow: nanoGPT's uint16 `.bin`
    given an int32 file), or those ids pass `:vocab` (a narrower file read wide). A file that is
    not there is left to the runtime's error."""
    base = os.path.dirname(os.path.abspath(ctx.src.path)) if not ctx.src.path.startswith("<") else "."
    full = rel if os.path.isabs(rel) else os.path.join(base, rel)
    try:
        st = os.stat(full)
    except OSError:
        return
    found = token_dtype_evidence(full, st.st_mtime_ns, st.st_size, dtype, vocab if isinstance(vocab, int) else None)
    if found is None:
        return
    message, fix = found
    ctx.report(warning("W-LOADER-002", at, f"`{rel}` read as `:{dtype}`: {message}", help=fix))


@memo(Space("token file dtype checks", 16, 4 << 20))
def token_dtype_evidence(path: str, mtime_ns: int, size: int, dtype: str, vocab: int | None,
                         offset: int = 0) -> tuple[str, str] | None:
    """(what makes `dtype` implausible for the token file at `path`, its ids from byte `offset` (a
    `.npy`'s header before them), the fix), or None: W-LOADER-002's evidence, which `sexpgpu run`
    also refuses a file for before training (sexpgpu_runtime.data.token_loaders). `mtime_ns` and
    `size` key the cache: an edited file is read again."""
    import sys
    if dtype not in _ITEMSIZE:
        return None
    width, fmt = _ITEMSIZE[dtype]
    size -= offset
    if size % width:
        return (f"its {size} bytes are not a whole number of {width}-byte ids",
                "give the `:dtype` the file was written with (nanoGPT's .bin files are `:uint16`)")
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(min(size, SAMPLE_BYTES) // width * width)
    except OSError:
        return None
    ids = memoryview(data).cast(fmt).tolist()
    if sys.byteorder == "big" and width > 1:   # token files are little-endian
        ids = [int.from_bytes(data[i:i + width], "little", signed=fmt.islower()) for i in range(0, len(data), width)]
    wider = {1: "uint16", 2: "int32", 4: "int64"}.get(width)
    if len(ids) >= 64 and wider is not None:
        low, high = ids[0::2], ids[1::2]
        if all(v == 0 for v in high) and sum(1 for v in low if v != 0) * 2 > len(low):
            return (f"every other id of its first {len(ids)} is 0, as when a file of {2 * width}-byte ids "
                    f"(`:{wider}`) is read as {width}-byte ones: the run would train on those zeros",
                    f"give the dtype the file was written with, likely `:dtype :{wider}`")
    if vocab is not None and ids:
        top = max(ids)
        if top >= vocab:
            return (f"its first {len(ids)} ids reach {top}, past `:vocab {vocab}`",
                    "give the dtype the file was written with (a narrower file read wide gives huge ids), or "
                    "raise `:vocab` to the tokenizer's")
    return None


def tokenizer_file(ctx: CheckContext, kind: str, rel: str, at: Span) -> int | None | bool:
    """A tokenizer.json a file names (`rel`, relative to the run file, at `at`; `kind` says whose:
    a source's name or `:samples`) checked as `run` reads it: E-LOADER-001 when it is not a regular
    file (a FIFO, a device, a directory, a symlink loop), not there (`read_files` True only) or not
    a tokenizer `run` can read (`vocab_size`'s reasons). Returns False when reported, else its
    number of ids (None when they cannot be told, or nothing was read: no `read_files`)."""
    if not ctx.read_files:
        return None
    if not _special_file(ctx, kind, "tokenizer", rel, at):
        return False
    if ctx.read_files is True and not _missing_file(ctx, kind, "tokenizer", rel, at):
        return False
    found = _regular_file(ctx, rel)
    if found is None:
        return None
    size = vocab_size(found[0], found[1].st_mtime_ns, found[1].st_size)
    if isinstance(size, str):
        ctx.err("E-LOADER-001", at, f"`{kind}`'s tokenizer `{rel}` cannot be read: {size}",
                help="give the tokenizer.json a model ships, or make one with `sexpgpu tokenizer train`")
        return False
    return size


def loader_vocab(ctx: CheckContext, loader) -> int | None:
    """The number of token ids a loader's rows hold (`ir.LoaderIR`): its tokenizer's, read quietly
    (its own check reports a bad one), else its `:vocab`; None when neither tells."""
    args = loader.source[1]
    rel = args.get("tokenizer")
    found = _regular_file(ctx, rel) if isinstance(rel, str) and ctx.read_files else None
    if found is not None:
        size = vocab_size(found[0], found[1].st_mtime_ns, found[1].st_size)
        if isinstance(size, int):
            return size
    vocab = args.get("vocab")
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None


def _npy_dtype(ctx: CheckContext, rel: str, dtype: str | None, at: Span) -> bool:
    """E-LOADER-001 at the path when a `.npy` token file's header says values that are not token ids
    (a float, a big-endian array) or more than one axis (bounded_read.npy_token_problem), or other ids
    than `:dtype` (npy_dtype_mismatch), in the run's words: the header alone is read. A header not
    read is the runtime's to name."""
    from ..files.bounded_read import NPY_DESCR_NAMES, NPY_TOKEN_DESCR, npy_dtype_mismatch, npy_token_problem
    found = _regular_file(ctx, rel)
    if found is None:
        return True
    full, st = found
    header = _npy_header(full, st.st_mtime_ns, st.st_size)
    if header is None:
        return True
    descr, shape = header.get("descr"), header.get("shape")
    if not isinstance(descr, str) or descr[1:] not in NPY_DESCR_NAMES or not isinstance(shape, tuple):
        return True
    problem = npy_token_problem(f"`tokens`'s file `{rel}`", descr if descr[0] == ">" and descr[1:] not in ("u1", "i1", "b1")
                                else NPY_DESCR_NAMES[descr[1:]], shape, TOKEN_FILE_DTYPES)
    if problem is not None:
        ctx.err("E-LOADER-001", at, problem[0], help=problem[1])
        return False
    stored = NPY_TOKEN_DESCR.get(descr)
    if stored is None or dtype is None or stored == dtype:
        return True
    reason, fix = npy_dtype_mismatch(f"`tokens`'s file `{rel}`", stored, dtype)
    ctx.err("E-LOADER-001", at, reason, help=fix)
    return False


@memo(Space(".npy headers", 16, 4 << 20))
def _npy_header(path: str, mtime_ns: int, size: int) -> dict | None:
    """bounded_read.npy_header of `path`, cached by `mtime_ns` and `size`."""
    from ..files.bounded_read import npy_header
    return npy_header(path)


def _npz_fields(ctx: CheckContext, args: dict, nodes: dict, fields) -> bool:
    """With `read_files` True (`run`, `lint --read-files`; not the server): E-LOADER-001 at the path
    when the `.npz` lacks a declared field, in the run's words (prompt_rows.no_field; its arrays named
    from the zip's directory), holds one whose records are not of the declared shape and dtype
    (prompt_rows.record_mismatch, on the members' `.npy` headers alone), or is not an .npz at all (empty, a `.npy`, text, no
    zip header: prompt_rows.not_an_npz, its first bytes read). True otherwise: a missing file is the
    runtime's to name."""
    rel = args.get("path")
    if ctx.read_files is not True or not isinstance(rel, str) or not fields:
        return True
    found = _regular_file(ctx, rel)
    if found is None:
        return True
    full, st = found
    have = _npz_names(full, st.st_mtime_ns, st.st_size)
    if have is None:
        why = _not_an_npz(full, st.st_mtime_ns, st.st_size, rel)
        if why is not None:
            ctx.err("E-LOADER-001", nodes["path"].span, f"`npz`'s file `{rel}`: {why.split('; ')[0]}",
                    help=why.split("; ", 1)[1] if "; " in why else None)
            return False
        return True
    from ..files.prompt_rows import no_field, record_mismatch
    for name, _, _ in fields:
        if name not in have:
            ctx.err("E-LOADER-001", nodes["path"].span, f"`npz`'s file `{rel}`: {no_field(name, sorted(have))}",
                    help="save the field with np.savez, or fix the loader's `:fields`")
            return False
    headers = _npz_headers(full, st.st_mtime_ns, st.st_size) or {}
    for name, shape, dtype in fields:
        why = record_mismatch(name, *headers[name], shape, dtype) if name in headers else None
        if why is not None:
            ctx.err("E-LOADER-001", nodes["path"].span, f"`npz`'s file `{rel}`: {why}",
                    help="save the array with the declared record shape and dtype, or fix the loader's `:fields`")
            return False
    return True


@memo(Space(".npz headers", 16, 4 << 20))
def _npz_headers(path: str, mtime_ns: int, size: int) -> dict | None:
    """prompt_rows.npz_headers of `path`, cached by `mtime_ns` and `size`."""
    from ..files.prompt_rows import npz_headers
    return npz_headers(path)


@memo(Space(".npz magic checks", 16, 4 << 20))
def _not_an_npz(path: str, mtime_ns: int, size: int, rel: str) -> str | None:
    """prompt_rows.not_an_npz of the first 4096 bytes of `path` (None when they cannot be read)."""
    from ..files.bounded_read import open_regular
    from ..files.prompt_rows import not_an_npz
    try:
        with open_regular(path) as fh:
            head = fh.read(4096)
    except OSError:
        return None
    return not_an_npz(head, path, rel)


@memo(Space(".npz field names", 16, 4 << 20))
def _npz_names(path: str, mtime_ns: int, size: int) -> tuple[str, ...] | None:
    """prompt_rows.npz_fields of `path`, cached by `mtime_ns` and `size`."""
    from ..files.prompt_rows import npz_fields
    names = npz_fields(path)
    return tuple(names) if names is not None else None


def _text_files(ctx: CheckContext, rel: str, at: Span) -> bool:
    """E-LOADER-001 at the glob when a file it matches (in the runtime's order: sorted, regular files)
    is not UTF-8 text, with the runtime's reason (bounded_read.text_problem, which tokenize.read_text
    says it through). Each file is read a chunk at a time, its first TEXT_CHECK_LIMIT bytes, once per
    mtime and size. False when reported."""
    from ..files.bounded_read import TEXT_FIX, glob_bounded
    full = _full_path(ctx, rel)
    if full is None:
        return True
    try:
        matches = glob_bounded(full)
    except OSError:   # said by _missing_file
        return False
    for path in (f for f in matches if os.path.isfile(f)):
        try:
            st = os.stat(path)
        except OSError:
            continue
        problem = _text_problem(path, st.st_mtime_ns, st.st_size)
        if problem is not None:
            ctx.err("E-LOADER-001", at, f"`text-tokens`'s glob `{rel}` matches {path}, which is not UTF-8 text "
                    f"({problem})", help=TEXT_FIX[problem.startswith("it holds NUL")])
            return False
    return True


def _text_bytes(ctx: CheckContext, args: dict, nodes: dict, fields, batch: int | None) -> None:
    """With `read_files` True, `text-bytes`' glob checked as `run` reads it (data/loaders.py): E-LOADER-001
    when it matches no file, or only what is not a regular file (`_missing_file`), or its files hold
    fewer bytes than one window or fewer windows than one `batch` (text_tokens.fewer_than_a_batch);
    sizes by `stat`, nothing read."""
    from ..files.bounded_read import glob_bounded
    from ..files.text_tokens import fewer_than_a_batch, window_count
    rel = args.get("glob")
    if ctx.read_files is not True or not isinstance(rel, str) or "glob" not in nodes:
        return
    at = nodes["glob"].span
    if not _missing_file(ctx, "text-bytes", "glob", rel, at):
        return
    full = _full_path(ctx, rel)
    seq = args.get("seq") if isinstance(args.get("seq"), int) else (
        fields[0][1][0] if fields and len(fields) in (1, 2) and len(fields[0][1]) == 1 else None)
    if full is None or seq is None:
        return
    stride = args.get("stride") if isinstance(args.get("stride"), int) else seq
    span = seq + (len(fields) - 1 if fields else 0)   # a target field: each window reads one byte more
    try:
        total = sum(os.stat(f).st_size for f in glob_bounded(full) if os.path.isfile(f))
    except OSError:
        return
    if total < span:
        ctx.err("E-LOADER-001", at, f"`text-bytes`'s glob `{rel}`: the files matching it hold {total} bytes, fewer "
                f"than one window of {span}", help="give it more text, or lower `:seq`")
        return
    short = fewer_than_a_batch(window_count(total, span, stride), batch, "window") if isinstance(batch, int) else None
    if short is not None:
        ctx.err("E-LOADER-001", at, f"`text-bytes`'s glob `{rel}` {short[0]}", help=short[1])


def _text_windows(ctx: CheckContext, args: dict, fields, at: Span, batch: int | None = None) -> None:
    """E-LOADER-001 at the glob when the text its files hold, tokenized as the run does
    (text_tokens.encoded), gives fewer tokens than one window, or fewer windows than one `batch`,
    in the run's words (text_tokens.fewer_than_a_window, fewer_than_a_batch). Only a corpus of at most SHORT_TEXT_LIMIT bytes is tokenized
    (in memory; nothing is written); a tokenizer or separator that does not load is the runtime's."""
    from ..files.bounded_read import glob_bounded
    from ..files.text_tokens import SHORT_TEXT_LIMIT, fewer_than_a_batch, fewer_than_a_window, window_count
    full, tok_path = _full_path(ctx, args["glob"]), _full_path(ctx, args["tokenizer"])
    if full is None or tok_path is None:
        return
    try:
        files = tuple((f, os.stat(f).st_mtime_ns, os.stat(f).st_size)
                      for f in glob_bounded(full) if os.path.isfile(f))
        st = os.stat(tok_path)
    except OSError:
        return
    if not files or sum(size for _, _, size in files) > SHORT_TEXT_LIMIT:
        return
    sep = args.get("separator") if isinstance(args.get("separator"), str) else None
    tokens = _token_count(files, tok_path, st.st_mtime_ns, st.st_size, sep)
    seq = args.get("seq") if isinstance(args.get("seq"), int) else fields[0][1][0]
    span = seq + (1 if len(fields) == 2 else 0)
    short = fewer_than_a_window(tokens, span) if tokens is not None else None
    stride = args.get("stride") if isinstance(args.get("stride"), int) else seq
    if short is None and tokens is not None and isinstance(batch, int):
        short = fewer_than_a_batch(window_count(tokens, span, stride), batch, "window")
    if short is not None:
        reason, fix = short
        ctx.err("E-LOADER-001", at, f"`text-tokens`'s glob `{args['glob']}`: its text, tokenized, {reason}", help=fix)


@memo(Space("text file token counts", 16, 4 << 20))
def _token_count(files: tuple, tokenizer: str, mtime_ns: int, size: int, separator: str | None) -> int | None:
    """How many ids the text `files` ((path, mtime_ns, size) each) give with the tokenizer.json at
    `tokenizer` (by text_tokens.encoded), or None when the tokenizer or a file does not load."""
    from ..files.bounded_read import TOKENIZER_JSON_LIMIT, file_chunks, open_regular
    from ..files.text_tokens import encoded
    try:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_str(read_bounded(tokenizer, TOKENIZER_JSON_LIMIT, "a tokenizer.json").decode("utf-8"))
        sep = tok.token_to_id(separator) if separator is not None else None
        if separator is not None and sep is None:
            return None
        texts = []
        for path, _, _ in files:
            with open_regular(path) as fh:
                texts.append(b"".join(file_chunks(fh)).decode("utf-8"))
        return sum(len(ids) for ids in encoded(tok, texts, sep))
    except Exception:   # tokenizers raises a bare Exception; the runtime names what is wrong
        return None


@memo(Space("text file checks", 64, 4 << 20))
def _text_problem(path: str, mtime_ns: int, size: int) -> str | None:
    """bounded_read.text_problem of the file at `path`, read a chunk at a time (None when it is text,
    or cannot be read: the runtime says that). `mtime_ns` and `size` key the cache."""
    from ..files.bounded_read import TEXT_CHECK_LIMIT, file_chunks, open_regular, text_problem
    try:
        with open_regular(path) as fh:
            return text_problem(file_chunks(fh, limit=TEXT_CHECK_LIMIT), final=size <= TEXT_CHECK_LIMIT)
    except OSError:
        return None


def _tokenizer_vocab(ctx: CheckContext, rel: str, vocab: int | None, at: Span) -> bool:
    """E-LOADER-001 at `:tokenizer` when the tokenizer.json `rel` (relative to the run file) is one
    the runtime refuses (empty, not JSON, not a tokenizer, past its bound, nested too deeply), and
    W-LOADER-001 when it holds more ids than `:vocab` (given): the text may then give ids the
    model's embedding lacks. False when an error is reported; a file that is not there is
    `_missing_file`'s."""
    found = _regular_file(ctx, rel)
    if found is None:
        return True
    full, st = found
    size = vocab_size(full, st.st_mtime_ns, st.st_size)
    if isinstance(size, str):
        ctx.err("E-LOADER-001", at, f"tokenizer `{rel}` cannot be read: {size}",
                help="give the tokenizer.json a model ships, or make one with `sexpgpu tokenizer train`")
        return False
    if vocab is not None and size is not None and size > vocab:
        ctx.report(warning("W-LOADER-001", at, f"tokenizer `{rel}` has a vocabulary of {size} ids, more than "
                           f"`:vocab {vocab}`: its ids {vocab} to {size - 1} would be outside the model's vocabulary",
                           help=f"raise `:vocab` to {size} (and the model's vocabulary with it), or use the "
                                "model's tokenizer"))
    return True


def _prompt_fields(ctx: CheckContext, kind: str, fields, at: Span) -> bool:
    """A prompt source's declared fields, as the runtime reads them (data/prompt_files.py): a column is a
    scalar `[]` or a row of token ids `[L]` of an integer dtype; `NAME-length` is `[]`, `NAME-mask` `[L]`
    and `NAME-positions` `[L]` of their token field's `L`, integers (a mask may be bool). E-FORM-002 for
    a shape, E-TYPE-002 for a dtype, at the source; False when any is reported."""
    from ..files.prompt_rows import derived
    declared = {n for n, _, _ in fields}
    widths = {n: shape[0] for n, shape, _ in fields if len(shape) == 1}
    ok = True
    for name, shape, dtype in fields:
        dims = "[" + " ".join(map(str, shape)) + "]"
        base = derived(name, declared)
        if base is not None and base in widths:
            want = () if name.endswith("-length") else (widths[base],)
            if tuple(shape) != want:
                what = "a length is `[]`" if not want else f"its {'mask' if name.endswith('-mask') else 'positions'} " \
                    f"{'is' if name.endswith('-mask') else 'are'} `[{want[0]}]`, one a token"
                ctx.err("E-FORM-002", at, f"field `{name}` of `{kind}` is {dims}, and it describes `{base}` "
                        f"[{widths[base]}]: {what}",
                        help=f"declare `:{name} [{' '.join(map(str, want))}] :{'bool' if name.endswith('-mask') else 'i32'}`")
                ok = False
            elif not (is_int(dtype) or (dtype == "bool" and name.endswith("-mask"))):
                ctx.err("E-TYPE-002", at, f"field `{name}` of `{kind}` is {dtype}: a "
                        + ("mask is bool or an integer dtype" if name.endswith("-mask") else
                           "length or position is an integer dtype"),
                        help=f"declare `:{name} {dims} :{'bool' if name.endswith('-mask') else 'i32'}`")
                ok = False
            continue
        if len(shape) > 1:
            ctx.err("E-FORM-002", at, f"field `{name}` of `{kind}` is {dims}; a column gives a scalar `[]` or a "
                    "sequence of tokens `[L]`", help=f"declare `:{name} [{shape[-1]}] :i32` (a row of token ids)")
            ok = False
        elif len(shape) == 1 and not is_int(dtype):
            ctx.err("E-TYPE-002", at, f"field `{name}` of `{kind}` is [{shape[0]}] {dtype}: a `[L]` field is a row "
                    "of token ids (text and chat rows too), an integer dtype",
                    help=f"declare `:{name} [{shape[0]}] :i32`")
            ok = False
    return ok


def _token_fields(ctx: CheckContext, kind: str, args: dict, fields, at: Span, unit: str = "token") -> bool:
    """E-FORM-002 unless the loader declares one field of `[seq]` windows of `unit`s (token or byte
    ids), or two (the windows and the next-`unit` targets); E-TYPE-002 unless they are integers."""
    if len(fields) not in (1, 2):
        ctx.err("E-FORM-002", at, f"`{kind}` gives one field of {unit} windows, or two (the windows and the "
                f"next-{unit} targets); the loader declares {len(fields)}")
        return False
    seq = args.get("seq") if isinstance(args.get("seq"), int) else (fields[0][1][0] if len(fields[0][1]) == 1 else None)
    for name, shape, dtype in fields:
        if seq is None or tuple(shape) != (seq,):
            ctx.err("E-FORM-002", at, f"field `:{name}` is [{' '.join(map(str, shape))}], but `{kind}` gives windows "
                    f"of [{seq if seq is not None else 'seq'}]", help=f"declare it `[{seq}]`, or change `:seq`")
            return False
        if not (is_int(dtype) if unit == "byte" else dtype in ("i32", "i64")):
            ctx.err("E-TYPE-002", at, f"field `:{name}` is {dtype}, but {unit} ids are integers",
                    help="declare it `:i32`")
            return False
    return True
