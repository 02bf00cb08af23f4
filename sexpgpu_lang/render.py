"""Diagnostics rendered for people and tools: compiler-style text, JSON, SARIF 2.1.0.

Pure functions over `Diagnostic` records and `SourceText`; `sexpgpu lint`
and `sexpgpu run` both print through here, so every shell shows the same
thing. Lines and columns here are 1-based, in code points, with the end
column one past the last character (the JSON `end_column`).

SARIF follows the OASIS SARIF 2.1.0 specification (section 3.27 `result`,
3.30 `region`: 1-based lines and columns).
"""
from __future__ import annotations

import pathlib

from .diagnostics import CODES, Diagnostic, Severity, doc_anchor
from .source import SourceText, Span

#: Where each code's entry lives: the checkout's own docs/errors.md when it is there (an
#: editable install, a source tree: the link then works offline and matches this version),
#: else the project's published page.
_LOCAL_DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "errors.md"
DOCS_URL = _LOCAL_DOCS.as_uri() if _LOCAL_DOCS.is_file() else "https://github.com/sexpgpu/sexpgpu/blob/main/docs/errors.md"


#: C0 control characters but tab and newline, and DEL, each to its Unicode control picture (U+2400 ...).
_CONTROL_PICTURES = {c: 0x2400 + c for c in range(32) if c not in (9, 10)} | {127: 0x2421}


def visible(text: str) -> str:
    """`text` safe to print on a terminal: each control character but tab and newline (an ESC that
    would start an escape sequence, a NUL, a carriage return) as its control picture (`␛`, `␀`, `␍`).
    For text a model wrote (`:samples` rows), shown by `sexpgpu run` and `sexpgpu samples`."""
    return text.translate(_CONTROL_PICTURES)


def position(src: SourceText, offset: int) -> tuple[int, int]:
    """1-based (line, column) of an offset."""
    line, col = src.line_col(offset)
    return line + 1, col + 1


def to_json_obj(src: SourceText, d: Diagnostic) -> dict:
    """One diagnostic as the JSON object `sexpgpu lint --format json` prints."""
    line, col = position(src, d.span.start)
    end_line, end_col = position(src, d.span.end)
    return {
        "file": src.path, "code": d.code, "severity": d.severity.label,
        "line": line, "column": col, "end_line": end_line, "end_column": end_col,
        "message": d.message,
        "related": [dict(zip(("line", "column"), position(src, r.span.start)), file=src.path, message=r.message)
                    for r in d.related],
        "help": d.help,
        "docs": f"docs/errors.md#{doc_anchor(d.code)}",
    }


def to_json(results: list[tuple[SourceText, list[Diagnostic]]]) -> str:
    """All files' diagnostics as one JSON array."""
    import json   # (here: the text format, what lint prints by default, needs none)
    return json.dumps([to_json_obj(src, d) for src, ds in results for d in ds], indent=2)


def to_text(src: SourceText, d: Diagnostic) -> str:
    """A compiler-style block: `path:line:col: error[CODE]: message`, the source line, carets, notes."""
    line, col = position(src, d.span.start)
    out = [f"{src.path}:{line}:{col}: {d.severity.label}[{d.code}]: {d.message}"]
    out += _snippet(src, d.span)
    for r in d.related:
        rl, rc = position(src, r.span.start)
        out.append(f"  = note: {src.path}:{rl}:{rc}: {r.message}")
    if d.help:
        out.append(f"  = help: {d.help}")
    return "\n".join(out)


def _snippet(src: SourceText, span: Span) -> list[str]:
    line0, col0 = src.line_col(span.start)
    text = src.line_text(line0).replace("\t", " ")
    end_line, end_col = src.line_col(span.end)
    end = end_col if end_line == line0 else len(text)
    width = max(1, end - col0)
    # A very long line (generated files) is shown as a window around the range.
    if len(text) > SNIPPET_WIDTH:
        left = max(0, col0 - 20)
        right = min(len(text), left + SNIPPET_WIDTH)
        width = min(width, right - col0)
        text = ("…" if left else "") + text[left:right] + ("…" if right < len(text) else "")
        col0 = col0 - left + (1 if left else 0)
    gutter = str(line0 + 1)
    pad = " " * len(gutter)
    return [f"{pad} |", f"{gutter} | {text}", f"{pad} | " + " " * col0 + "^" * max(1, width)]


#: The widest source line a text diagnostic shows whole.
SNIPPET_WIDTH = 160


def summary(n_errors: int, n_warnings: int, n_notes: int = 0) -> str:
    """`2 errors, 1 warning`, `no problems, 1 note` (information or hints only) or `no problems`."""
    parts = []
    if n_errors:
        parts.append(f"{n_errors} error" + ("s" if n_errors != 1 else ""))
    if n_warnings:
        parts.append(f"{n_warnings} warning" + ("s" if n_warnings != 1 else ""))
    if not parts:
        parts.append("no problems")
    if n_notes:
        parts.append(f"{n_notes} note" + ("s" if n_notes != 1 else ""))
    return ", ".join(parts)


_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFORMATION: "note", Severity.HINT: "note"}


def to_sarif(results: list[tuple[SourceText, list[Diagnostic]]], version: str) -> str:
    """A SARIF 2.1.0 log with one run, the codes as rules, one result per diagnostic."""
    used = sorted({d.code for _, ds in results for d in ds})
    rules = [{"id": c, "name": c, "shortDescription": {"text": CODES[c]},
              "helpUri": f"{DOCS_URL}#{doc_anchor(c)}"} for c in used]
    index = {c: i for i, c in enumerate(used)}

    def region(src, span):
        l, c = position(src, span.start)
        el, ec = position(src, span.end)
        return {"startLine": l, "startColumn": c, "endLine": el, "endColumn": ec}

    out = []
    for src, ds in results:
        for d in ds:
            loc = {"physicalLocation": {"artifactLocation": {"uri": src.path}, "region": region(src, d.span)}}
            res = {"ruleId": d.code, "ruleIndex": index[d.code], "level": _SARIF_LEVEL[d.severity],
                   "message": {"text": d.message + (f" (help: {d.help})" if d.help else "")}, "locations": [loc]}
            if d.related:
                res["relatedLocations"] = [
                    {"id": i, "message": {"text": r.message},
                     "physicalLocation": {"artifactLocation": {"uri": src.path}, "region": region(src, r.span)}}
                    for i, r in enumerate(d.related)]
            out.append(res)
    log = {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
           "runs": [{"tool": {"driver": {"name": "sexpgpu", "version": version, "informationUri": DOCS_URL,
                                         "rules": rules}}, "results": out}]}
    import json
    return json.dumps(log, indent=2)
