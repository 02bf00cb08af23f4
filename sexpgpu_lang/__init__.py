"""sexpgpu_lang: the SexpGPU front end. Text to syntax to checked, typed IR.

Pure Python: never imports JAX (a test keeps it so), so `sexpgpu lint` and
the language server start quickly. The entry point is `analyze(text, path)`.
"""
from __future__ import annotations

from .check import CheckResult, check
from .diagnostics import CODES, Diagnostic, Related, Severity
from .source import SourceText, Span
from .syntax import parse

__all__ = ["analyze", "analyze_file", "CheckResult", "Diagnostic", "Related", "Severity", "SourceText", "Span", "CODES"]


def analyze(text: str, path: str = "<input>", read_files: bool | str = False, build_ir: bool = True) -> CheckResult:
    """Parse and check one run file's text. Never raises for any text.

    Opens no file unless `read_files`: then the `:pretrained` files' headers are
    read and compared with `:params` (E-MODEL-003), as `sexpgpu run` does before training.
    `sexpgpu lint` leaves it off unless `--read-files`; the language server passes `"local"`
    (check/pretrained.py `LOCAL`: the headers of the checkpoints on this machine).
    `build_ir=False` leaves the result's `program` None (the diagnostics are the same):
    `sexpgpu lint` needs no IR."""
    src = SourceText(text, path)
    return check(parse(src), read_files, build_ir=build_ir)


def analyze_file(path: str, read_files: bool = False, build_ir: bool = True) -> CheckResult:
    """Read (UTF-8) and check a run file. Raises OSError / UnicodeDecodeError for unreadable files
    (bounded_read.NotRegularFile, an OSError, for a FIFO, a device or a directory: never waited on;
    bounded_read.TooLarge for one over RUN_FILE_LIMIT, 64 MiB)."""
    from .files.bounded_read import RUN_FILE_LIMIT, read_bounded
    text = read_bounded(path, RUN_FILE_LIMIT, "a run file").decode("utf-8")
    return analyze(text, path, read_files, build_ir)


def forget_files() -> None:
    """Drop everything kept of the files run files name (parsed configs, checkpoint headers, reward
    files, token and text file checks) and of the parsed texts (`sexpgpu_lang.kept`): the language
    server calls it when its last document closes, so nothing it read stays in memory."""
    from . import kept
    kept.forget()
