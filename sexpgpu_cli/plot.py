"""`sexpgpu plot RUN_DIR`: every metric of metrics.jsonl against the step, in one image (PNG by default).

One panel per metric name; a pass's metric (`held-out-eval/loss`) is drawn
in the panel of the training metric with the same last name (`loss`), so a
training curve and its evaluation share axes. A metric whose values are all
positive and span more than two decades gets a log scale.

Reads only metrics.jsonl; imports matplotlib (Agg, no display needed) and
never JAX or sexpgpu_runtime.
"""
from __future__ import annotations

import math
from pathlib import Path

from .row_files import read_row_file


class PlotError(Exception):
    """A run dir that cannot be plotted (no metrics.jsonl, no metrics, a corrupt row): exit 1."""


class PlotUsageError(PlotError):
    """A mistake on the command line (exit 2, docs/cli.md "Exit status"): a run dir that is not there, or an
    output that cannot be made (a suffix matplotlib has no format for, a file that cannot be written)."""


FIRST_FORMATS = ("png", "svg", "pdf")


def image_formats() -> list[str]:
    """The suffixes matplotlib's Agg canvas writes, the common ones first."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    known = FigureCanvasAgg.get_supported_filetypes()
    return [f for f in FIRST_FORMATS if f in known] + sorted(f for f in known if f not in FIRST_FORMATS)


def image_format(output: Path) -> str:
    """The format of an output path, from its suffix; PlotUsageError naming the supported ones otherwise."""
    formats = image_formats()
    suffix = output.suffix[1:].lower()
    if suffix not in formats:
        what = f"no format for the suffix .{suffix}" if suffix else "it has no suffix to pick a format"
        raise PlotUsageError(f"cannot write {output}: {what}; plot writes "
                             f"{', '.join('.' + f for f in formats)}")
    return suffix


def read_rows(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl. A torn last line (no newline: a run killed while writing it) after
    good rows is skipped; any other line that is not a metrics row is an error naming FILE:LINE."""
    return read_row_file(path, _is_metrics_row, "a metrics row (a JSON object with a numeric `step`)", PlotError)


def _is_metrics_row(row) -> bool:
    return isinstance(row, dict) and not isinstance(row.get("step"), bool) and isinstance(row.get("step"), (int, float))


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
    """Write the image of a run dir's metrics (RUN_DIR/metrics.png unless `output`, whose suffix picks
    the format); return its path. PlotUsageError for an output suffix with no format, before anything
    is read, for a run dir that does not exist (a mistyped argument) and for an image that cannot be
    written (a directory not there, no permission, a format whose writer is missing); PlotError for what
    the run dir holds (no metrics.jsonl, no metrics, a corrupt row)."""
    fmt = image_format(output) if output is not None else "png"
    path = run_dir if run_dir.is_file() else run_dir / "metrics.jsonl"
    if not run_dir.exists():
        raise PlotUsageError(f"no run dir {run_dir}; give the run dir `sexpgpu run` wrote (runs/<file stem> by default)")
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
        fig.savefig(out, format=fmt)
    except OSError as e:
        raise PlotUsageError(f"cannot write {out}: {e.strerror or e}")
    except Exception as e:  # a format whose writer is missing here (.pgf without LaTeX, .avif without its plugin)
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PlotUsageError(f"cannot write {out}: {reason}")
    finally:
        plt.close(fig)
    return out
