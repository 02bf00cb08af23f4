"""The checks for NaN and infinite values of a run, and for a generator's traced temperatures.

The training graph keeps, on the device, the first step whose loss was not finite and the first
step with a metric or diagnostic that was not finite, logged or not (`bad`, the record
`TrainingGraphs.no_bad` starts, training_graphs.tally), and the trip graph the first bad traced temperature
(`draw`, draw_check.py); reading either waits for the device, so the loop reads them only where
it waits anyway (a logged row, a pass, a checkpoint, a stop, the end). Each raises the error the
run stops with: BadValue naming the step and the value, or BadDraw naming the draw.
"""
from __future__ import annotations

import math

import jax

from sexpgpu_lang import ir

from ..errors import BadValue
from ..lowering.draw_check import bad_draw
from ..weights.params import flatten


class ValueChecks:
    """The value checks of one run of `program`, whose generator's checked draws are `draw_sites`."""

    def __init__(self, program: ir.Program, draw_sites: tuple, report_names=lambda: ()):
        """`report_names()` gives the names the record of the first non-finite metric indexes
        (TrainingGraphs.report_names, known once the training graph is traced)."""
        self.program = program
        self.draw_sites = draw_sites
        self.report_names = report_names
        self._finite = None

    @staticmethod
    def check_row(row: dict) -> None:
        """Raise BadValue for the first NaN or infinite value of a metrics row."""
        for k, v in row.items():
            if k != "step" and not math.isfinite(v):
                raise BadValue(row["step"], f"`{k}`", v)

    @staticmethod
    def check_losses(bad) -> None:
        """Raise BadValue naming the first step whose loss (any microbatch's, the first in microbatch
        order) was NaN or infinite. `bad` is the record the training graph keeps (training_graphs.tally):
        (i64 step or -1, f32 value, its microbatch, its counters, the metric record). Reading it waits
        for the device."""
        step, value = jax.device_get(bad[:2])
        if int(step) >= 0:
            raise BadValue(int(step), "`loss`", float(value))

    def first_bad(self, bad) -> BadValue | None:
        """The BadValue of the earlier of the first non-finite loss and the first non-finite metric or
        diagnostic (`bad[4]`: i64 step or -1, its index into `report_names`, f32 value) the record
        `bad` keeps, the loss at the same step (a row lists it first); None when neither. Waits for
        the device."""
        step, value = (int(v) if i == 0 else float(v) for i, v in enumerate(jax.device_get(bad[:2])))
        mstep, index, mvalue = jax.device_get(bad[4]) if len(bad) > 4 else (-1, -1, 0.0)
        mstep, index = int(mstep), int(index)
        names = self.report_names()
        if mstep >= 0 and (step < 0 or mstep < step):
            name = names[index] if 0 <= index < len(names) else "a metric"
            return BadValue(mstep, f"`{name}`", float(mvalue))
        return BadValue(step, "`loss`", value) if step >= 0 else None

    def check_records(self, bad, draw, pass_name: str | None = None) -> None:
        """Raise for the earliest of the first non-finite loss, the first non-finite metric or
        diagnostic (`bad`, `first_bad`; None: none kept) and the first bad traced temperature
        (`draw`, BadDraw: draw_check.bad_draw; None: nothing checked), the temperature at the same
        step (it is drawn before the step's loss). Reading them waits for the device."""
        err = None if draw is None else bad_draw(draw, self.program, self.draw_sites, pass_name)
        value = None if bad is None else self.first_bad(bad)
        if err is not None and value is not None and value.step < err.step:
            raise value
        if err is not None:
            raise err
        if value is not None:
            raise value

    def check_params(self, step: int, trainable: dict) -> None:
        """Raise BadValue naming the first trainable parameter with a NaN or infinite entry (before a save)."""
        if self._finite is None:
            self._finite = jax.jit(lambda tree: jax.tree_util.tree_map(lambda v: jax.numpy.all(jax.numpy.isfinite(v)), tree))
        ok = jax.device_get(self._finite(trainable))
        for path, good in flatten(ok).items():
            if not bool(good):
                raise BadValue(step, f"parameter `{'.'.join(map(str, path))}`", float("nan"))
