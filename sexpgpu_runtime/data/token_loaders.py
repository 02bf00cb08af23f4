"""The token sources of a loader: `(tokens "path" ...)` and `(text-tokens "glob" :tokenizer ...)`.

Both end as `token_files.TokenWindows` over a token file read window by window:
`tokens` over the file named (nanoGPT's `.bin` with its `:dtype`, or a
`.npy`), `text-tokens` over the file `tokenize.cached_tokens` makes of the
text once. Here the declaration is checked against the file: one field of
`[seq]` (the windows) or two (the windows and the next-token targets), an
integer dtype the file's ids widen to (`token_files.widens`), enough tokens
for a batch; with `:vocab V` every id is checked to be below `V` before
training, unless the file's dtype (or the tokenizer's vocabulary) already
says so; a `tokens` file whose ids make its dtype implausible (W-LOADER-002's evidence: every
other id 0) is refused, naming the likely dtype.
"""
from __future__ import annotations

import os

import numpy as np

from sexpgpu_lang.check.loader_sources import token_dtype_evidence
from sexpgpu_lang.ir import LoaderIR
from sexpgpu_lang.files.text_tokens import fewer_than_a_window

from .files import glob_files, resolve_path
from ..errors import LoaderError, TokenFileError, TokenizeError
from .token_files import TokenStream, TokenWindows, first_outside, scan_ids, widens
from .tokenize import cached_tokens


def _plausible_dtype(stream: TokenStream) -> None:
    """TokenFileError when the file's ids make its dtype implausible (W-LOADER-002's evidence, the
    checker's `token_dtype_evidence`: every other id of its start 0, as an int32 file read as
    `:uint16` gives), with the fix. (Ids past `:vocab` are the scan's to name, id and position:
    `scan_ids`.)"""
    try:
        st = os.stat(stream.path)
    except OSError:
        return
    found = token_dtype_evidence(stream.path, st.st_mtime_ns, st.st_size, stream.dtype, None, stream.offset)
    if found is not None:
        message, fix = found
        raise TokenFileError(f"{stream.path} read as `:{stream.dtype}`: {message}; {fix}")


def token_windows(spec: LoaderIR, args: dict) -> TokenWindows:
    """The windows of a `tokens` or `text-tokens` source, checked against the loader's fields.
    Raises LoaderError naming the loader, the file and the fix."""
    kind = spec.source[0]
    where = f"loader `{spec.name}`"
    if len(spec.fields) not in (1, 2):
        raise LoaderError(f"{where}: `{kind}` gives one field of token windows, or two (the windows and the "
                          f"next-token targets); it declares {len(spec.fields)}")
    seq = int(args.get("seq") or (spec.fields[0][1][0] if spec.fields[0][1] else 0))
    for name, shape, dtype in spec.fields:
        if tuple(shape) != (seq,):
            raise LoaderError(f"{where}: field `{name}` is [{' '.join(map(str, shape))}], but windows of `:seq {seq}` "
                              f"are [{seq}]; declare it `[{seq}]`")
    vocab = args.get("vocab")
    vocab = int(vocab) if vocab is not None else None
    try:
        if kind == "tokens":
            path = resolve_path(spec, str(args.get("path", "")))
            stream = TokenStream(path, args.get("dtype"))
            known = None
        else:
            pattern = resolve_path(spec, str(args.get("glob", "")))
            files = glob_files(pattern, where)
            tokenizer = resolve_path(spec, str(args.get("tokenizer", "")))
            path, dtype, known = cached_tokens(files, tokenizer, args.get("separator"), spec.base_dir)
            stream = TokenStream(path, dtype)
        for name, _, dtype in spec.fields:
            if not widens(stream.dtype, dtype, vocab):
                fix = ("declare it `:i64`, or give `:vocab V` (every id is then checked below V)"
                       if dtype == "i32" and stream.dtype in ("uint32", "int64") else "declare it `:i32`")
                raise LoaderError(f"{where} ({stream.path}): the file holds {stream.dtype} ids, which do not all fit "
                                  f"field `{name}`'s {dtype}; {fix}")
        if kind == "tokens":
            _plausible_dtype(stream)
        bound = min(known or 1 << 64, 1 << (8 * np.dtype(stream.dtype).itemsize))
        if vocab is not None and vocab < bound and kind == "tokens":   # the dtype cannot tell: scan the ids
            scan_ids(stream.path, stream.offset, stream.dtype, vocab)
        elif vocab is not None and vocab < bound:   # nor the tokenizer: scan the ids, and name the tokenizer
            bad = first_outside(stream.path, stream.offset, stream.dtype, vocab)
            if bad is not None:
                raise LoaderError(f"{where}: tokenizer {tokenizer} has a vocabulary of {known} ids, more than "
                                  f"`:vocab {vocab}`, and the text gives token {bad[0]} (at position {bad[1]} of "
                                  f"the tokenized text); raise `:vocab` to {known}, the tokenizer's, or tokenize "
                                  "with the model's tokenizer")
    except (TokenFileError, TokenizeError) as e:
        raise LoaderError(f"{where}: {e}") from None
    stride = int(args.get("stride") or seq)
    windows = TokenWindows(stream, spec.fields, seq, stride)
    short = fewer_than_a_window(len(stream), windows.span)
    if short is not None:
        raise LoaderError(f"{where} ({stream.path}): the file {'; '.join(short)}")
    return windows
