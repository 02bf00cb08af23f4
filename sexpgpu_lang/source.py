"""Source text and ranges.

Holds `Span` (a half-open range of code-point offsets) and `SourceText`, which
turns offsets into 0-based (line, column) pairs. Every other position format
(1-based for `sexpgpu lint`, UTF-16 for LSP) is derived from these in exactly
one place each: `SourceText.line_col` here, `lsp/convert.py` for LSP.

Imports nothing from the rest of the package, and never JAX.
"""
from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add

from .records import Record

_LINE_BREAK = re.compile(r"\r\n?|\n")
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True, order=True, repr=False)
class Span(Record):
    """A half-open range `[start, end)` of code-point offsets into one file's text."""

    start: int
    end: int

    def contains(self, other: "Span") -> bool:
        """True when `other` lies inside this span (bounds included)."""
        return self.start <= other.start and other.end <= self.end

    def covers(self, offset: int) -> bool:
        """True when `offset` is inside the span or just after its last character."""
        return self.start <= offset <= self.end


@dataclass(frozen=True, repr=False)
class SourceText(Record):
    """One run file's text with a line index.

    `line_col(offset)` gives the 0-based line and the 0-based column in code
    points; `offset(line, col)` is its inverse. Line ends are `\\n`, `\\r\\n`
    or `\\r`; a `\\r` before `\\n` belongs to the line end, not to a column.
    """

    text: str
    path: str = "<input>"

    def __post_init__(self) -> None:
        # An array of 4-byte offsets (8 past 2 GiB; a list of ints takes 36 bytes a line: 32 million
        # lines of a 64 MB file took 1.5 GB), built a chunk of the text at a time.
        text = self.text
        starts = array("i" if len(text) < 1 << 31 else "q", [0])
        if "\r" in text:
            starts.extend(m.end() for m in _LINE_BREAK.finditer(text))
        else:   # the usual case: C loops over each chunk's lines' lengths
            for at in range(0, len(text), _CHUNK):
                lines = text[at:at + _CHUNK].split("\n")
                lines.pop()   # the text after the chunk's last break: no break ends it here
                after = accumulate(map(add, map(len, lines), repeat(1)), initial=at)
                next(after)   # `at` itself, where the chunk (not a line) starts
                starts.extend(after)
        object.__setattr__(self, "_starts", starts)

    @property
    def line_starts(self) -> Sequence[int]:
        """Offsets at which each line begins (line 0 first)."""
        return self._starts  # type: ignore[attr-defined]

    def line_col(self, offset: int) -> tuple[int, int]:
        """0-based (line, column in code points) of `offset`, clamped to the text."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return line, offset - self.line_starts[line]

    def offset(self, line: int, col: int) -> int:
        """Offset of a 0-based (line, column), clamped to the line's end."""
        starts = self.line_starts
        if line >= len(starts):
            return len(self.text)
        if line < 0:
            return 0
        return min(starts[line] + max(col, 0), self.line_end(line))

    def line_end(self, line: int) -> int:
        """Offset just past the last character of `line` (before its line break)."""
        starts = self.line_starts
        end = starts[line + 1] if line + 1 < len(starts) else len(self.text)
        while end > starts[line] and self.text[end - 1] in "\r\n":
            end -= 1
        return end

    def line_text(self, line: int) -> str:
        """The text of a 0-based line, without its line break."""
        if line >= len(self.line_starts):
            return ""
        return self.text[self.line_starts[line]:self.line_end(line)]

    def slice(self, span: Span) -> str:
        """The text a span covers."""
        return self.text[span.start:span.end]
