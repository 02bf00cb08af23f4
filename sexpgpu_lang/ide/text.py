"""The text-context scanner: the brackets open before an offset, their complete items and the word
being typed, read from the text itself (not the tree), so completion and signature help see
half-typed code as the user does.

Imports only the standard library; never JAX, never lsprotocol.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..records import Record

#: A word that starts like a number (`1`, `-2`, `.5`): nothing completes it.
NUMBER_START = re.compile(r"[+-]?(\d|\.\d)")
_DELIMS = set(" \t\r\n\f\v()[]\";")


@dataclass(repr=False)
class Item(Record):
    """A complete item of an open list while scanning text: its text and range."""

    text: str
    start: int
    end: int


@dataclass(repr=False)
class Frame(Record):
    """An open bracket before the cursor, and the complete items after it."""

    open: int
    bracket: str
    items: list[Item] = field(default_factory=list)


def scan(text: str, offset: int) -> tuple[list[Frame], str, int] | None:
    """The brackets open at `offset`, with their complete items, the word being
    typed there and its start. None when `offset` is inside a string or a
    comment. Reads the text itself (not the tree) from the start of the
    top-level form, so it sees half-typed code as the user does: a `(` in
    column 1 starts a top-level form, as in the parser."""
    offset = max(0, min(offset, len(text)))
    start = max(text.rfind("\n(", 0, offset), text.rfind("\r(", 0, offset)) + 1
    frames: list[Frame] = []
    i = start
    n = len(text)
    while i < offset:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] not in '"\r\n':
                j += 2 if text[j] == "\\" else 1
            if j >= offset:
                return None
            end = j + 1 if j < n and text[j] == '"' else j
            if frames:
                frames[-1].items.append(Item(text[i:end], i, end))
            i = end
        elif c == ";":
            j = i
            while j < n and text[j] not in "\r\n":
                j += 1
            if j >= offset:
                return None
            i = j
        elif c in "([":
            frames.append(Frame(i, c))
            i += 1
        elif c in ")]":
            if frames:
                f = frames.pop()
                if frames:
                    frames[-1].items.append(Item(text[f.open:i + 1], f.open, i + 1))
            i += 1
        elif c in _DELIMS:
            i += 1
        else:
            j = i
            while j < n and text[j] not in _DELIMS:
                j += 1
            if j >= offset:
                return frames, text[i:offset], i
            if frames:
                frames[-1].items.append(Item(text[i:j], i, j))
            i = j
    return frames, "", offset


def key_before(frames: list[Frame], k: int) -> str | None:
    """The keyword just before frame `k`'s opening bracket in its parent frame."""
    if k <= 0 or not frames[k - 1].items:
        return None
    t = frames[k - 1].items[-1].text
    return t[1:] if t.startswith(":") else None


def frame_head(frames: list[Frame], k: int) -> str | None:
    """The head of frame `k` when it is a call `(name ...)` whose name is complete; None otherwise."""
    f = frames[k]
    if f.bracket == "(" and f.items and not f.items[0].text.startswith((":", "(", "[", '"')):
        return f.items[0].text
    return None
