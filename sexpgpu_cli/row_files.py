"""The run dir's row files as the commands read them back: metrics.jsonl (`sexpgpu plot`) and
samples.jsonl (`sexpgpu samples`), one JSON object a line, appended by a run (docs/metrics.md).

Imports neither JAX nor the runtime.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from sexpgpu_lang.files.bounded_read import JSONL_LINE_LIMIT, TooLarge, loads_json, open_regular, read_lines_bounded


def read_row_file(path: Path, is_row: Callable[[object], bool], what: str, error: type[Exception]) -> list[dict]:
    """The rows of a row file, in file order: each line a JSON object that `is_row` accepts. A torn
    last line (no newline: a run killed while writing it) after good rows is skipped; a file that
    is not a regular one (a FIFO, /dev/zero: never waited on), an unreadable one, a line past
    `JSONL_LINE_LIMIT` or nested past what JSON is read to, text that is not UTF-8, or any other
    line that is not a row raises `error` naming FILE:LINE, `what` saying what a row is (`a metrics
    row (a JSON object with a numeric `step`)`)."""
    try:
        with open_regular(str(path)) as fh:
            lines = list(read_lines_bounded(fh, JSONL_LINE_LIMIT))
    except TooLarge as e:
        raise error(f"{path}:{getattr(e, 'line', 1)} is corrupt: {e}") from None
    except OSError as e:   # (NotRegularFile says what the path is)
        raise error(f"cannot read {path}: {e.strerror or e}") from None
    rows = []
    for i, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise error(f"{path}:{i} is corrupt: not UTF-8 text") from None
        if not line.strip():
            continue
        try:
            row = loads_json(line)
            ok = is_row(row)
        except ValueError:   # (not JSON, too deep, a number of too many digits)
            ok = False
        if not ok:
            if i == len(lines) and not raw.endswith(b"\n") and rows:
                break   # torn by a killed run: the rows before it stand
            raise error(f"{path}:{i} is corrupt: not {what}")
        rows.append(row)
    return rows
