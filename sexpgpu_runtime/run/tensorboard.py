"""TensorBoard event files (tensorboardX) for `:log (:tensorboard true)`: one scalar per metric per logged step.

The events go straight into the run dir, so `tensorboard --logdir runs` shows
every run under its own name. A resumed run opens its writer with
`purge_step` at the step it resumes from, so TensorBoard drops the points an
interrupted process logged after its last checkpoint instead of drawing two
lines. The scalars are exactly the metrics.jsonl rows.

Imports nothing from JAX or sexpgpu_lang; tensorboardX is imported only here.
"""
from __future__ import annotations

from pathlib import Path


class TensorBoardLog:
    """Scalars of each logged metrics row to TensorBoard event files under `run_dir`."""

    def __init__(self, run_dir: Path, purge_step: int | None = None):
        from tensorboardX import SummaryWriter
        self.writer = SummaryWriter(logdir=str(run_dir), purge_step=purge_step, flush_secs=10)

    def log(self, row: dict) -> None:
        """Write every value of a metrics row (its `step` is the x axis); pass metrics keep their `pass/` prefix."""
        step = int(row["step"])
        for name, value in row.items():
            if name != "step":
                self.writer.add_scalar(name, float(value), global_step=step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
