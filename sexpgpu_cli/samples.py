"""`sexpgpu samples RUN_DIR [--step N] [--pass NAME]`: the rows of RUN_DIR/samples.jsonl as a table, newest first.

samples.jsonl is what `run`'s `:samples` writes (sexpgpu_runtime/run/samples.py, docs/metrics.md
"Samples"): one JSON object per row, `{"step": 10, "pass": "train", "row": 0, "fields": {...}}`.
A `:text` field with a prompt shows the prompt dim, `▸`, then the completion bold. Reads only the file;
imports rich and never JAX or sexpgpu_runtime.
"""
from __future__ import annotations

import json
from pathlib import Path

from .row_files import read_row_file


class SamplesError(Exception):
    """A run dir without readable samples (no samples.jsonl, a corrupt row), or no row matching: exit 1."""


class SamplesUsageError(SamplesError):
    """A run dir named on the command line that is not there (or is not a directory): exit 2, a mistake on
    the command line (docs/cli.md "Exit status")."""


def read_samples(path: Path) -> list[dict]:
    """The rows of a samples.jsonl, in file order. A torn last line (no newline: a run killed while
    writing it) after good rows is skipped; any other line that is not a samples row is a
    SamplesError naming FILE:LINE."""
    return read_row_file(path, _is_sample, "a samples row (a JSON object with an integer `step` and `row`, a "
                         "`pass` name and its `fields`)", SamplesError)


def _is_sample(row) -> bool:
    return (isinstance(row, dict) and isinstance(row.get("step"), int) and isinstance(row.get("pass"), str)
            and isinstance(row.get("row"), int) and isinstance(row.get("fields"), dict))


def select(rows: list[dict], step: int | None, pass_name: str | None) -> list[dict]:
    """The rows of `step` and `pass_name` (either None: any), newest step first, each step's rows in order."""
    chosen = [r for r in rows if (step is None or r["step"] == step) and (pass_name is None or r["pass"] == pass_name)]
    return sorted(chosen, key=lambda r: -r["step"])   # (sorted is stable: a step's rows keep their order)


#: As sexpgpu_lang.render.visible (not imported: `sexpgpu samples` loads no checker): a control character
#: but tab and newline as its picture, so a sampled ESC or NUL is shown, never sent to the terminal.
_CONTROL_PICTURES = {c: 0x2400 + c for c in range(32) if c not in (9, 10)} | {127: 0x2421}


def visible(text: str) -> str:
    """`text` with its control characters (but tab and newline) as their pictures (`␛`, `␀`)."""
    return text.translate(_CONTROL_PICTURES)


def _cell(value):
    from rich.text import Text
    if isinstance(value, dict) and "completion" in value:
        out = Text(visible(str(value["prompt"])), style="dim")
        out.append("▸", style="dim")
        out.append(visible(str(value["completion"])), style="bold")
        return out
    if isinstance(value, str):
        return Text(visible(value))
    if isinstance(value, float):
        return Text(f"{value:.4g}")
    return Text(json.dumps(value))


def show_samples(run_dir: Path, step: int | None = None, pass_name: str | None = None, console=None) -> int:
    """Print the table of RUN_DIR/samples.jsonl's rows (of `step`, of `pass_name`), newest first; return how
    many rows it shows. SamplesUsageError for a run dir that is not there (or not a directory);
    SamplesError for a missing samples.jsonl, a corrupt row, or no row matching."""
    from rich.console import Console
    from rich.table import Table
    if not run_dir.is_dir():
        raise SamplesUsageError(f"no run dir {run_dir}" + (f" ({run_dir} is a file)" if run_dir.exists() else "")
                           + "; `sexpgpu run FILE.sx` writes runs/<file stem>")
    path = run_dir / "samples.jsonl"
    if not path.exists():
        raise SamplesError(f"{run_dir} has no samples.jsonl: the run file's `run` has no `:samples`; add e.g. "
                           "`:samples (:every 10 :text [:answer])` and run it again")
    rows = read_samples(path)
    chosen = select(rows, step, pass_name)
    if not chosen:
        if not rows:
            raise SamplesError(f"{path} has no rows yet")
        steps = sorted({r["step"] for r in rows})
        passes = sorted({r["pass"] for r in rows})
        asked = " and ".join(([f"step {step}"] if step is not None else [])
                             + ([f"pass `{pass_name}`"] if pass_name is not None else []))
        raise SamplesError(f"{path} has no rows of {asked}; it has steps {_ranges(steps)} and passes "
                           + ", ".join(f"`{p}`" for p in passes))
    names = list(dict.fromkeys(k for r in chosen for k in r["fields"]))
    table = Table(title=f"{path}: {len(chosen)} rows, newest first", show_lines=False)
    for col in ("step", "pass", "row"):
        table.add_column(col, justify="right" if col != "pass" else "left", no_wrap=True)
    for n in names:
        table.add_column(n, overflow="fold")
    for r in chosen:
        table.add_row(str(r["step"]), r["pass"], str(r["row"]),
                      *[_cell(r["fields"][n]) if n in r["fields"] else "" for n in names])
    (console or Console()).print(table)
    return len(chosen)


def _ranges(steps: list[int]) -> str:
    if len(steps) <= 6:
        return ", ".join(map(str, steps))
    return ", ".join(map(str, steps[:3])) + ", ..., " + ", ".join(map(str, steps[-2:]))
