"""`sexpgpu tokenizer train`: a byte-level BPE tokenizer trained on text files with Hugging Face
`tokenizers`' own trainer, so an example needs no download.

Kept out of sexpgpu_runtime so the command does not import JAX. The result is
an ordinary tokenizer.json (GPT-2's scheme: byte-level, so any text encodes
and there is no unknown token), read by the runtime's `load_tokenizer`.
"""
from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from sexpgpu_lang.files.bounded_read import glob_bounded

from .output import fail


class TokenizeError(Exception):
    """A corpus file that is not UTF-8 text."""


def expand(pattern: str) -> list[str]:
    """The files a pattern names, sorted: `$STDLIB` is the Python standard library, `**` matches
    directories, and a plain path names itself; past bounded_read.glob_bounded's limits, its
    GlobTooLarge (an OSError naming the limit)."""
    pattern = pattern.replace("$STDLIB", sysconfig.get_paths()["stdlib"]).replace("${STDLIB}", sysconfig.get_paths()["stdlib"])
    pattern = os.path.expanduser(os.path.expandvars(pattern))
    return [f for f in glob_bounded(pattern) if os.path.isfile(f)]


def check_text(path: str) -> None:
    """Raise TokenizeError naming `path` and its first byte that is not UTF-8 text (an invalid byte,
    UnicodeDecodeError.start, or a NUL byte, whichever comes first: a binary file, a token file)."""
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        data.decode("utf-8")
        bad = None
    except UnicodeDecodeError as e:
        bad = e.start
    nul = data.find(b"\0")
    if nul >= 0 and (bad is None or nul < bad):
        bad = nul
    if bad is not None:
        raise TokenizeError(f"{path} is not UTF-8 text (byte {bad} is 0x{data[bad]:02x}); give text files, "
                            "or convert it to UTF-8")


def train_bpe(files: list[str], vocab_size: int, output: str, min_frequency: int = 2,
              special_tokens: tuple[str, ...] = ()) -> int:
    """Train a byte-level BPE tokenizer on `files` with `tokenizers`' BpeTrainer and save it to `output`
    (a tokenizer.json). Its vocabulary: the 256 byte symbols, the special tokens, then merges up to
    `vocab_size`. Returns the vocabulary's size. Raises TokenizeError for a file that is not text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    for f in files:
        check_text(f)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  special_tokens=list(special_tokens),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    tok.save(output)
    return tok.get_vocab_size()


def train_command(corpus: list[str], output: Path, vocab_size: int, min_frequency: int,
                  special: tuple[str, ...]) -> None:
    """`sexpgpu tokenizer train`: the files `corpus` names (`expand`) trained on and the tokenizer
    written to `output`, said in one line; a corpus that names no file, a file that is not text and an
    unwritable output are each one `sexpgpu: error:` line (exit 2)."""
    try:
        files = [f for pattern in corpus for f in expand(pattern)]
    except OSError as e:   # a glob past bounded_read's limits
        raise fail(e.strerror or str(e))
    if not files:
        raise fail(f"no file matches {' '.join(corpus)}; give text files or a quoted glob")
    try:
        size = train_bpe(files, vocab_size, str(output), min_frequency, special)
    except TokenizeError as e:
        raise fail(str(e))
    except OSError as e:
        raise fail(f"cannot write {output}: {e.strerror or e}")
    except Exception as e:   # tokenizers raises bare Exceptions (e.g. an unwritable output)
        raise fail(f"cannot train or write {output}: {e}")
    print(f"wrote {output}: {size} tokens, trained on {len(files)} file{'s' if len(files) != 1 else ''}", file=sys.stderr)
