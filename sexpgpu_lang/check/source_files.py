"""A loader source's files as the check sees them: a path relative to the run file resolved, a
special file or a symlink loop refused with `stat` alone (never opened, so a pipe never blocks the
check), a missing file named, and a tokenizer.json's number of ids read through bounded_read. Shared
by check/loader_sources.py and check/prompt_sources.py.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import errno
import os
import stat

from ..files.bounded_read import (TOKENIZER_JSON_LIMIT, JsonNumberTooLong, JsonTooDeep, JsonTooLarge, NotRegularFile,
                            TooLarge, describe_mode, loads_json, read_bounded)
from ..kept import Space, memo
from ..source import Span
from .context import CheckContext


def _full_path(ctx: CheckContext, rel: str) -> str | None:
    """`rel` (relative to the run file; `~` expanded) as a path on this machine, or None for one
    holding a `$VAR` (the runtime expands those, and says when one is not set)."""
    if "$" in rel:
        return None
    rel = os.path.expanduser(rel)
    base = os.path.dirname(os.path.abspath(ctx.src.path)) if not ctx.src.path.startswith("<") else "."
    return rel if os.path.isabs(rel) else os.path.join(base, rel)


def _special_file(ctx: CheckContext, kind: str, key: str, rel: str, at: Span) -> bool:
    """E-LOADER-001 at the path when the file a source names exists and is not a regular file (a
    FIFO, a device such as /dev/zero, a socket; a directory for a path or tokenizer): reading it
    could wait forever or never end. Looked at with `stat` only, which never blocks. False when
    reported; a missing file is left to the runtime's error."""
    full = _full_path(ctx, rel)
    if full is None:
        return True
    what = "tokenizer" if key == "tokenizer" else "file"
    try:
        st = os.stat(full)
    except OSError as e:
        if e.errno == errno.ELOOP:   # (the runtime's open fails the same way)
            ctx.err("E-LOADER-001", at, f"`{kind}`'s {what} `{rel}` is a symbolic link that leads back to itself "
                    "(a loop); nothing can be read from it", help="point the link at the real file")
            return False
        return True
    except ValueError:
        return True
    if stat.S_ISREG(st.st_mode):
        return True
    ctx.err("E-LOADER-001", at, f"`{kind}`'s {what} `{rel}` is {describe_mode(st.st_mode)}, not a regular file; "
            "nothing is read from it", help="name a regular file (a pipe or a device would never end, or never "
            "start, being read)")
    return False


def _missing_file(ctx: CheckContext, kind: str, key: str, rel: str, at: Span) -> bool:
    """E-LOADER-001 at the path when the file (or, for `text-tokens`' glob, every match) a source names
    is not there, which `run` refuses before training. False when reported; a path holding a `$VAR`
    is left to the runtime (it says when one is not set)."""
    full = _full_path(ctx, rel)
    if full is None:
        return True
    if key == "glob":
        from ..files.bounded_read import glob_bounded, no_regular_match
        try:
            matches = glob_bounded(full)
        except OSError as e:   # GlobTooLarge: the limit, in one line (the runtime's words)
            ctx.err("E-LOADER-001", at, f"`{kind}`'s glob `{rel}`: {e.strerror}",
                    help="a glob names the data's own files, within the limits docs/runtime.md lists")
            return False
        if any(os.path.isfile(f) for f in matches):
            return True
        why = no_regular_match(full, matches)   # (the runtime's words: data/files.glob_files)
        if why is not None:
            ctx.err("E-LOADER-001", at, f"`{kind}`'s glob `{rel}`: {why.split('; ')[0]}",
                    help="name regular files (a pipe or a device would never end, or never start, being read)")
            return False
        ctx.err("E-LOADER-001", at, f"`{kind}`'s glob `{rel}` matches no file ({full})",
                help="fix the pattern (relative to the run file), or make the files")
        return False
    if os.path.lexists(full):
        return True
    if key == "tokenizer":
        ctx.err("E-LOADER-001", at, f"`{kind}`'s tokenizer `{rel}` is not there ({full})",
                help="make one with `sexpgpu tokenizer train`, or fix the path (relative to the run file)")
    else:
        ctx.err("E-LOADER-001", at, f"`{kind}`'s file `{rel}` is not there ({full})",
                help="make it, or fix the path (relative to the run file)")
    return False


def _regular_file(ctx: CheckContext, rel: str) -> tuple[str, os.stat_result] | None:
    """(full path, its stat) of `rel` (relative to the run file) when it is a regular file here;
    None otherwise (not there, not a regular file, no path: the other checks tell those)."""
    full = _full_path(ctx, rel)
    try:
        st = os.stat(full) if full is not None else None
    except (OSError, ValueError):
        return None
    return (full, st) if st is not None and stat.S_ISREG(st.st_mode) else None


@memo(Space("tokenizer vocabulary sizes", 16, 4 << 20))
def vocab_size(path: str, mtime_ns: int, size: int) -> int | str | None:
    """The number of ids of a Hugging Face tokenizer.json (its largest id plus one: the model's
    `vocab`, a dict of piece to id (BPE, WordPiece, WordLevel) or a list of [piece, score] pairs
    (Unigram), and its `added_tokens`), None where its ids cannot be told, or why the runtime refuses
    it, in words: the OS's reason a read fails, not a regular file, larger than `TOKENIZER_JSON_LIMIT`, JSON nested too deeply
    (bounded_read), empty, not JSON (cut short), not an object with a `model` (as every
    tokenizer.json has). `mtime_ns` and `size` key the cache: an edited file is read again."""
    import json
    try:
        raw = read_bounded(path, TOKENIZER_JSON_LIMIT, "a tokenizer.json")
    except (NotRegularFile, TooLarge) as e:
        return str(e)
    except OSError as e:   # (/proc/self/mem: a regular file by `stat`, whose read fails, as it does in `run`)
        return e.strerror or str(e)
    if not raw.strip():
        return "it is empty, not a Hugging Face tokenizer.json"
    try:
        data = loads_json(raw)   # (bytes: the memory estimate comes before any copy; json decodes UTF-8)
    except (JsonTooDeep, JsonNumberTooLong, JsonTooLarge) as e:
        return str(e)
    except UnicodeDecodeError as e:
        return f"it is not UTF-8 text (byte {e.start}), not a Hugging Face tokenizer.json"
    except json.JSONDecodeError as e:
        return (f"it is not JSON ({e.msg} at line {e.lineno} column {e.colno}: cut short?), not a Hugging Face "
                "tokenizer.json")
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return "it is JSON but not a Hugging Face tokenizer.json (it has no `model` object)"
    try:
        model_vocab = data["model"]["vocab"]
        ids = list(model_vocab.values()) if isinstance(model_vocab, dict) else [len(model_vocab) - 1]
        ids += [t["id"] for t in data.get("added_tokens") or ()]
        ids = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
        return max(ids) + 1 if ids else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
