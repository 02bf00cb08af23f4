"""What `sexpgpu lint` makes of one file: its check result, or, for a file found under a
directory that is not UTF-8 text, one diagnostic in place of the check (`NotUtf8`), so the
directory's other files are still checked. The CLI prints these; a file named on the command
line that cannot be read stays an I/O error (the OSError or UnicodeDecodeError is raised)."""
from __future__ import annotations

from pathlib import Path

from .diagnostics import error
from .source import SourceText, Span


def bad_utf8(data: bytes) -> tuple[int, int, int, str] | None:
    """Where `data` stops being UTF-8 text: (line, column, the byte's value, the decoder's reason),
    line and column 1-based, the column counting the characters of the line before the byte (as
    a diagnostic's place does); None when all of it decodes."""
    try:
        data.decode("utf-8")
        return None
    except UnicodeDecodeError as e:
        before = data[:e.start]
        line_start = before.rfind(b"\n") + 1
        column = len(before[line_start:].decode("utf-8")) + 1
        return before.count(b"\n") + 1, column, data[e.start], e.reason


def bad_utf8_text(data: bytes) -> str:
    """`bad_utf8`'s place in words: `byte 0xff at 2:1 (invalid start byte)`; raises ValueError
    when `data` is UTF-8 text."""
    found = bad_utf8(data)
    if found is None:
        raise ValueError("the bytes are UTF-8 text")
    line, column, value, reason = found
    return f"byte 0x{value:02x} at {line}:{column} ({reason})"


class NotUtf8:
    """A file found under a DIR that is not UTF-8 text, as `lint` reports it: one E-SYNTAX-003
    at the first byte that does not decode (its text shown with U+FFFD for such bytes), so the
    other files are still checked. Has the fields of a check result that `lint` prints
    (`source`, `diagnostics`, `has_errors`)."""

    has_errors = True

    def __init__(self, path: str, data: bytes, e: UnicodeDecodeError):
        self.source = SourceText(data.decode("utf-8", errors="replace"), str(path))
        at = len(data[:e.start].decode("utf-8"))
        self.diagnostics = [error("E-SYNTAX-003", Span(at, at + 1),
                                  f"this file is not UTF-8 text: {bad_utf8_text(data)}; nothing in it was checked",
                                  help="save the file as UTF-8")]


def lint_file(path: str, under_dir: bool, read_files: bool = False):
    """Check one file for `lint` (no IR built); `under_dir`: a DIR on the command line named it.
    Returns the `CheckResult`, or a `NotUtf8` for a file under a DIR that is not UTF-8. Raises
    OSError for a file that cannot be read, and UnicodeDecodeError for a named file that is not UTF-8
    (as `analyze_file`)."""
    from . import analyze, analyze_file
    if under_dir:
        data = Path(path).read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            return NotUtf8(str(path), data, e)
        return analyze(text, str(path), read_files, False)
    return analyze_file(str(path), read_files, build_ir=False)
