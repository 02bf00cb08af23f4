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


def analyze(text: str, path: str = "<input>") -> CheckResult:
    """Parse and check one run file's text. Never raises for any text."""
    src = SourceText(text, path)
    return check(parse(src))


def analyze_file(path: str) -> CheckResult:
    """Read (UTF-8) and check a run file. Raises OSError / UnicodeDecodeError for unreadable files."""
    with open(path, encoding="utf-8", newline="") as fh:
        text = fh.read()
    return analyze(text, path)
