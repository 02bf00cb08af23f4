"""`sexpgpu plot RUN_DIR`: every metric of metrics.jsonl against the step, in one PNG.

One panel per metric name; a pass's metric (`held-out-eval/loss`) is drawn
in the panel of the training metric with the same last name (`loss`), so a
training curve and its evaluation share axes. A metric whose values are all
positive and span more than two decades gets a log scale.

Reads only metrics.jsonl; imports matplotlib (Agg, no display needed) and
never JAX or sexpgpu_runtime.
"""
from __future__ import annotations

import json
import math
from pathlib import Path


class PlotError(Exception):
    """A run dir that cannot be plotted (missing, empty, not metrics.jsonl), or a PNG that cannot be written."""


def read_rows(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl; a torn last line (a killed run) is skipped, a bad line elsewhere is an error."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise PlotError(f"cannot read {path}: {e.strerror or e}")
    except UnicodeDecodeError:
        raise PlotError(f"{path} is not a metrics.jsonl (not UTF-8 text)")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("step"), (int, float)):
                raise ValueError
        except ValueError:
            if i == len(lines):
                continue
            raise PlotError(f"{path}:{i} is not a metrics row (a JSON object with a `step`)")
        rows.append(row)
    return rows


def series(rows: list[dict]) -> dict[str, tuple[list[float], list[float]]]:
    """Each metric's (steps, values), in the order metrics first appear; non-numbers are left out."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for row in rows:
        for name, v in row.items():
            if name == "step" or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            xs, ys = out.setdefault(name, ([], []))
            xs.append(row["step"])
            ys.append(float(v))
    return out


def panels(names: list[str]) -> dict[str, list[str]]:
    """Metric names grouped by panel: `pass/name` joins the panel of `name` when the run has one."""
    out: dict[str, list[str]] = {}
    for name in names:
        base = name.rsplit("/", 1)[-1]
        key = base if "/" in name and base in names else name
        out.setdefault(key, []).append(name)
    return out


def plot_run(run_dir: Path, output: Path | None = None) -> Path:
    """Write the PNG of a run dir's metrics (RUN_DIR/metrics.png unless `output`); return its path."""
    path = run_dir if run_dir.is_file() else run_dir / "metrics.jsonl"
    if not run_dir.exists():
        raise PlotError(f"no run dir {run_dir}")
    if not path.exists():
        raise PlotError(f"{run_dir} has no metrics.jsonl (`sexpgpu run` writes one in its run dir)")
    rows = read_rows(path)
    data = series(rows)
    if not data:
        raise PlotError(f"{path} has no metrics yet")
    out = output if output is not None else path.parent / "metrics.png"

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = panels(list(data))
    n = len(groups)
    cols = min(3, n)
    rows_n = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.6 * cols, 3.3 * rows_n), squeeze=False, dpi=110)
    last = max(r["step"] for r in rows)
    fig.suptitle(f"{path.parent.name}: {len(rows)} rows, step {last}", fontsize=12)
    for ax, (title, names) in zip(axes.flat, groups.items()):
        values = []
        for name in names:
            xs, ys = data[name]
            label = "train" if name == title else name.rsplit("/", 1)[0]
            marker = "o" if len(xs) <= 40 or name != title else None
            ax.plot(xs, ys, label=label, marker=marker, markersize=3, linewidth=1.4)
            values += [v for v in ys if math.isfinite(v)]
        if values and min(values) > 0 and max(values) / min(values) > 100:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        if len(names) > 1:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    try:
        fig.savefig(out)
    except OSError as e:
        raise PlotError(f"cannot write {out}: {e.strerror or e}")
    finally:
        plt.close(fig)
    return out
