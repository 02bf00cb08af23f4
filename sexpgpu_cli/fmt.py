"""`sexpgpu fmt`: the language server's formatter (`sexpgpu_lang.format`) from the
command line, as `ruff format` and cljfmt offer it, so that CI can hold a
repository to it.

`format_files(paths, mode, width)` formats each file (a directory stands
for every *.sx below it): `write` rewrites the files that change, `check`
names them, `diff` prints a unified diff of each. The text is read and
written as bytes of UTF-8, so the line endings are the file's own. A file
with a syntax error is left as it is and named with its first syntax
error (`FILE:LINE:COL`, as `lint` places it), since the parser's recovery is
a guess; the summary counts it as not formatted, and the exit status is 2.

Imports the front end only (never JAX).
"""
from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sexpgpu_lang.format import Layout, format_text
from sexpgpu_lang.source import SourceText
from sexpgpu_lang.syntax import parse

MODES = ("write", "check", "diff")


@dataclass
class Outcome:
    """What `format_files` found: the files that changed (or would), those left
    as they were, those it could not read, format or write (`failed`), and one
    line for each problem (those files', and a DIR without run files)."""

    changed: list[Path]
    unchanged: list[Path]
    errors: list[str]
    failed: list[Path] = field(default_factory=list)

    def refuse(self, path: Path, why: str) -> None:
        """`path` could not be formatted, for the reason `why` (one line naming it)."""
        self.failed.append(path)
        self.errors.append(why)

    def exit_code(self, mode: str) -> int:
        """2 when a file could not be formatted; 1 when `check` or `diff` found a file to change; else 0."""
        if self.errors:
            return 2
        return 1 if self.changed and mode != "write" else 0


def fmt_files(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """Each FILE as given and every *.sx below each DIR (sorted); a DIR without one is an error line."""
    files, errors = [], []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.sx") if p.is_file())
            files += found
            if not found:
                errors.append(f"no run files (*.sx) under {path}")
        else:
            files.append(path)
    return files, errors


def _syntax_error(path: Path, text: str) -> str:
    src = SourceText(text, str(path))
    d = parse(src).diagnostics[0]
    line, col = src.line_col(d.span.start)
    return f"{path}:{line + 1}:{col + 1}: not formatted: {d.message} [{d.code}]; fix it first (`sexpgpu lint {path}`)"


def format_files(paths: list[Path], mode: str = "write", width: int | None = None, out=None) -> Outcome:
    """Format the run files `paths` name (see the module doc); diffs go to `out` (stdout)."""
    out = out or sys.stdout
    layout = Layout(width) if width is not None else Layout()
    files, errors = fmt_files(paths)
    result = Outcome([], [], errors)
    for path in files:
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            result.refuse(path, f"cannot read {path}: no such file")
            continue
        except UnicodeDecodeError as e:
            result.refuse(path, f"cannot read {path}: not UTF-8 text ({e.reason} at byte {e.start})")
            continue
        except OSError as e:
            result.refuse(path, f"cannot read {path}: {e.strerror or e}")
            continue
        new = format_text(text, layout)
        if new is None:
            result.refuse(path, _syntax_error(path, text))
            continue
        if new == text:
            result.unchanged.append(path)
            continue
        result.changed.append(path)
        if mode == "diff":
            out.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), str(path), str(path)))
        elif mode == "write":
            try:
                path.write_bytes(new.encode("utf-8"))
            except OSError as e:
                result.changed.remove(path)
                result.refuse(path, f"cannot write {path}: {e.strerror or e}")
    return result


def summary(result: Outcome, mode: str) -> str:
    """The last line `fmt` prints: `2 files reformatted, 5 left unchanged` (or `would be reformatted`),
    with `1 file not formatted` for the files named in the error lines above it (a syntax error);
    `no file formatted` when there was none to format."""
    def files(k: int) -> str:
        return f"{k} file{'s' if k != 1 else ''}"
    n, m, bad = len(result.changed), len(result.unchanged), len(result.failed)
    parts = [f"{files(n)} {'reformatted' if mode == 'write' else 'would be reformatted'}"] if n else []
    parts += [f"{files(bad)} not formatted"] if bad else []
    if m:
        parts.append(f"{files(m)} {'left unchanged' if n else 'already formatted'}")
    elif not parts:
        parts.append("no file formatted")
    return ", ".join(parts)


def fmt_command(paths: list[Path], mode: str, width: int | None) -> int:
    """`sexpgpu fmt`: `format_files`, then each file that would change named (`check`), the error
    lines on stderr, the summary last; returns the exit status (`Outcome.exit_code`)."""
    result = format_files(paths, mode, width)
    if mode == "check":
        for path in result.changed:
            print(f"would reformat {path}")
    for line in result.errors:
        print(f"sexpgpu: error: {line}", file=sys.stderr)
    print(summary(result, mode), file=sys.stderr)
    return result.exit_code(mode)
