"""Tokenizers: Hugging Face `tokenizers` from a `tokenizer.json`, and text tokenized once into a cached
token file (`sexpgpu tokenizer train`, sexpgpu_cli/tokenizer.py, makes a tokenizer.json).

`load_tokenizer` reads the file every Hugging Face model ships. `cached_tokens` tokenizes a loader's text files
into one flat token file beside the run file (`.sexpgpu-cache/`), named by
the hash of the files' contents, the tokenizer file's content and the
separator: a second run, or a second loader over the same text, reads the
file instead of tokenizing again, and any change to the text or the
tokenizer makes a new one. The file's length is recorded beside it
(`.size`); a cache whose length differs (cut short, or written over) is
tokenized again, with a warning, never read as it is.

Encoding rule: each file is read whole (it must be UTF-8 text), encoded
without the tokenizer's special tokens (`add_special_tokens=False`), and the
files are joined in path order, the `:separator` token (if given) after
each one (nanoGPT appends `<|endoftext|>` after each document). The ids are
stored as uint16 when the vocabulary has at most 65,536 entries, else uint32.
"""
from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

from ..errors import TokenizeError
from sexpgpu_lang.files.text_tokens import encoded
from sexpgpu_lang.files.bounded_read import (TEXT_FIX, TOKENIZER_JSON_LIMIT, NotRegularFile, loads_json, open_regular,
                                       read_bounded, text_problem)

#: The directory beside the run file where tokenized text is kept.
CACHE_DIR = ".sexpgpu-cache"
#: Beside each cached token file, its length in bytes (a decimal number): a cut-short cache is made again.
SIZE_SUFFIX = ".size"
#: Bytes of text encoded in one `encode_batch` call (the tokenizer runs over them in parallel).
ENCODE_CHUNK = 32 << 20


def load_tokenizer(path: str):
    """The `tokenizers.Tokenizer` in `path` (a Hugging Face `tokenizer.json`); TokenizeError if it does not parse."""
    from tokenizers import Tokenizer
    if os.path.isdir(path):
        inside = os.path.join(path, "tokenizer.json")
        hint = (f"give the tokenizer.json inside it ({inside})" if os.path.isfile(inside)
                else "give a tokenizer.json file (a model ships one beside its weights)")
        raise TokenizeError(f"{path} is a directory, not a tokenizer file; {hint}")
    if not os.path.exists(path):
        raise TokenizeError(f"no tokenizer file {path}; make one with `sexpgpu tokenizer train`, or fix the path "
                            "(relative to the run file)")
    try:
        # Read here, bounded and from a regular file only (a FIFO or /dev/zero is refused, never
        # waited on), and handed over as text: tokenizers' own reader would read any of them.
        raw = read_bounded(path, TOKENIZER_JSON_LIMIT, "a tokenizer.json")
    except OSError as e:
        raise TokenizeError(f"cannot read the tokenizer {path}: {e.strerror or e}; give the tokenizer.json a model "
                            "ships, or make one with `sexpgpu tokenizer train`") from None
    try:
        loads_json(raw)   # serde stops at 128 levels with its own message; Python's parser says how deep
        return Tokenizer.from_str(raw.decode("utf-8"))
    except Exception as e:   # tokenizers raises a bare Exception with serde's message
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise TokenizeError(f"{path} is not a Hugging Face tokenizer.json ({first}); make one with "
                            "`sexpgpu tokenizer train`, or use the tokenizer.json a model ships") from None


def read_text(path: str) -> str:
    """A file's text; TokenizeError naming it if it is not UTF-8 text (a binary file, a token file)."""
    try:
        with open_regular(path) as fh:   # a FIFO or a device is refused, never waited on
            data = fh.read()
    except NotRegularFile as e:
        raise TokenizeError(f"cannot read {path}: {e}; narrow the glob to regular text files") from None
    problem = text_problem([data])
    if problem is None:
        return data.decode("utf-8")
    raise TokenizeError(f"{path} is not UTF-8 text ({problem}); {TEXT_FIX[problem.startswith('it holds NUL')]}")


def cache_key(files: list[str], tokenizer_path: str, separator: str | None) -> str:
    """The hash that names a tokenized corpus: every file's content (with its length, so the
    boundaries count), the tokenizer file's bytes and the separator."""
    h = hashlib.blake2b(b"sexpgpu-tokens-v1\0", digest_size=16)
    h.update(hashlib.blake2b(read_bounded(tokenizer_path, TOKENIZER_JSON_LIMIT, "a tokenizer.json")).digest())
    h.update((separator or "").encode() + b"\0")
    for f in files:
        with open_regular(f) as fh:
            data = fh.read()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def cached_tokens(files: list[str], tokenizer_path: str, separator: str | None, base_dir: str) -> tuple[str, str, int]:
    """(path, numpy dtype, vocabulary size) of the token file for `files`, tokenized once into
    `base_dir/.sexpgpu-cache/` (written to a temporary name, then renamed, so a stopped run
    leaves no half file). Raises TokenizeError for a bad tokenizer, a file that is not
    text, a separator the vocabulary lacks or a cache dir that cannot be written."""
    tok = load_tokenizer(tokenizer_path)
    vocab = tok.get_vocab_size()
    dtype = "uint16" if vocab <= 1 << 16 else "uint32"
    sep = None
    if separator is not None:
        sep = tok.token_to_id(separator)
        if sep is None:
            raise TokenizeError(f"{tokenizer_path} has no token {separator!r} for `:separator`; give one of its "
                                "special tokens, or train the tokenizer with `--special`")
    key = cache_key(files, tokenizer_path, separator)
    cache = os.path.join(base_dir, CACHE_DIR)
    path = os.path.join(cache, f"tokens-{key}.{dtype}.bin")
    if os.path.isfile(path):
        problem = _cache_problem(path)
        if problem is None:
            return path, dtype, vocab
        print(f"sexpgpu: warning: the tokenized text {path} {problem}; tokenizing again", file=sys.stderr, flush=True)
    try:
        os.makedirs(cache, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        _write_tokens(tok, files, sep, dtype, tmp)
        # the length first, then the tokens: a file without its length is never taken as whole
        size_tmp = f"{path}{SIZE_SUFFIX}.{os.getpid()}.tmp"
        with open(size_tmp, "w") as fh:
            fh.write(str(os.path.getsize(tmp)))
        os.replace(size_tmp, path + SIZE_SUFFIX)
        os.replace(tmp, path)
    except OSError as e:
        raise TokenizeError(f"cannot write the tokenized text to {cache}: {e.strerror or e}; make the run file's "
                            "directory writable") from None
    return path, dtype, vocab


def _cache_problem(path: str) -> str | None:
    """Why the cached token file `path` is not the one written (its length differs from the one
    recorded beside it, `path` + SIZE_SUFFIX, or none is), or None when it is."""
    try:
        with open(path + SIZE_SUFFIX) as fh:
            want = int(fh.read().strip())
    except (OSError, ValueError):
        return f"has no readable record of its length ({os.path.basename(path)}{SIZE_SUFFIX})"
    got = os.path.getsize(path)
    return None if got == want else f"is {got} bytes, not the {want} written (cut short or changed)"


def _write_tokens(tok, files: list[str], sep: int | None, dtype: str, tmp: str) -> None:
    """Encode `files` into the raw token file `tmp` (removed again if anything fails)."""
    try:
        with open(tmp, "wb") as out:
            chunk: list[str] = []
            size = 0
            for f in files + [None]:
                if f is not None:
                    text = read_text(f)
                    chunk.append(text)
                    size += len(text)
                if chunk and (f is None or size >= ENCODE_CHUNK):
                    for ids in encoded(tok, chunk, sep):
                        out.write(np.asarray(ids, dtype=dtype).tobytes())
                    chunk, size = [], 0
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
