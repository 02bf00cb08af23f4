"""The run dir's row files as the commands read them back: metrics.jsonl (`sexpgpu plot`) and
samples.jsonl (`sexpgpu samples`), one JSON object a line, appended by a run (docs/metrics.md).

Imports neither JAX nor the runtime.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable


def read_row_file(path: Path, is_row: Callable[[object], bool], what: str, error: type[Exception]) -> list[dict]:
    """The rows of a row file, in file order: each line a JSON object that `is_row` accepts. A torn
    last line (no newline: a run killed while writing it) after good rows is skipped; an unreadable
    file, text that is not UTF-8, or any other line that is not a row raises `error` naming
    FILE:LINE, `what` saying what a row is (`a metrics row (a JSON object with a numeric `step`)`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        line = path.read_bytes()[:e.start].count(b"\n") + 1
        raise error(f"{path}:{line} is corrupt: not UTF-8 text") from None
    lines = text.splitlines()
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ok = is_row(row)
        except ValueError:
            ok = False
        if not ok:
            if i == len(lines) and not text.endswith("\n") and rows:
                break   # torn by a killed run: the rows before it stand
            raise error(f"{path}:{i} is corrupt: not {what}")
        rows.append(row)
    return rows
