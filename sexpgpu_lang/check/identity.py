"""The hashes that name things across runs: a file's identity and a draw's or parameter's place.

`identity(parsed)` hashes the file's forms, not its comments or layout (with
the seed, a checkpoint's identity); `place_hash(path)` hashes a node's
structural path in its top-level form (the place a draw or an initialiser
derives its bits from, so that an edit elsewhere changes no draw).

Imports nothing outside `sexpgpu_lang`; never JAX. `hashlib` only when
`identity` runs: importing it loads OpenSSL, 2-3 ms of `sexpgpu lint`.
"""
from __future__ import annotations

from functools import lru_cache

# hashlib's own blake2s (what `hashlib.blake2s` is); importing hashlib loads OpenSSL, 2-3 ms of `sexpgpu lint`.
from _blake2 import blake2s

from ..syntax import Kw, ListNode, Num, ParseResult, Str, Sym, VecNode


#: `run` settings that change what a run shows, not what it trains: left out of every identity, so
#: a resume may add or change them (`:samples`, the rows written to samples.jsonl).
SHOWN_ONLY = ("samples",)
#: The same inside `run`'s `:log`: `:show`, the metrics the progress bar shows.
SHOWN_ONLY_LOG = ("show",)


def identity(parsed: ParseResult, apart_from_steps: bool = False) -> str:
    """A hash of the file's forms, not its comments or layout (a checkpoint's identity with the seed).
    The `run` form's `SHOWN_ONLY` settings (and `SHOWN_ONLY_LOG` inside its `:log`) are left out. With `apart_from_steps`, its `:steps` and
    its value are left out too: two files with this hash equal differ in `:steps` at most (what a
    resume's message says, checkpoint.py)."""
    def canon(n):
        if isinstance(n, ListNode):
            return "(" + " ".join(canon(i) for i in n.items) + ")"
        if isinstance(n, VecNode):
            return "[" + " ".join(canon(i) for i in n.items) + "]"
        if isinstance(n, Kw):
            return ":" + n.name
        if isinstance(n, Sym):
            return n.name
        if isinstance(n, Str):
            return repr(n.value)
        if isinstance(n, Num):
            return repr(n.value)
        return "?"

    left_out = SHOWN_ONLY + (("steps",) if apart_from_steps else ())

    def canon_log(plist: ListNode) -> str:
        items = plist.items
        skip = {j for i, item in enumerate(items[:-1]) if isinstance(item, Kw) and item.name in SHOWN_ONLY_LOG
                for j in (i, i + 1)}
        return "(" + " ".join(canon(item) for i, item in enumerate(items) if i not in skip) + ")"

    def top(form):
        if isinstance(form, ListNode) and form.items and isinstance(form.items[0], Sym) and form.items[0].name == "run":
            items = form.items
            keys = [i for i, item in enumerate(items[:-1]) if isinstance(item, Kw) and item.name in left_out]
            skip = {j for i in keys for j in (i, i + 1)}
            shown = []
            for i, item in enumerate(items):
                if i in skip:
                    continue
                after_log = i > 0 and isinstance(items[i - 1], Kw) and items[i - 1].name == "log"
                shown.append(canon_log(item) if after_log and isinstance(item, ListNode) else canon(item))
            return "(" + " ".join(shown) + ")"
        return canon(form)
    import hashlib
    text = "\n".join(top(f) for f in parsed.forms)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@lru_cache(maxsize=1 << 16)
def place_hash(path: tuple) -> int:
    """The 32-bit place of a draw: a hash of its structural path in its top-level form."""
    digest = blake2s(repr(path).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")
