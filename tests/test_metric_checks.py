"""Every step's metrics and diagnostics are checked for NaN and Inf on the device, logged or not:
the training graph's record of the first non-finite one (training_graphs.tally, `bad[4]`) and the
check that reads it (run/checks.py `ValueChecks.check_records`)."""
from __future__ import annotations

import math

import jax.numpy as jnp
import pytest

from sexpgpu_runtime import BadValue
from sexpgpu_runtime.lowering.training_graphs import tally
from sexpgpu_runtime.run.checks import ValueChecks


def no_bad():
    return (jnp.asarray(-1, jnp.int64), jnp.asarray(0.0, jnp.float32), jnp.asarray(-1, jnp.int64), {},
            (jnp.asarray(-1, jnp.int64), jnp.asarray(-1, jnp.int64), jnp.asarray(0.0, jnp.float32)))


def step_of(bad, step, reports, losses=(1.0, 1.0)):
    return tally({}, [{} for _ in losses], list(losses), jnp.asarray(step - 1, jnp.int64), bad,
                 jnp.arange(len(losses)), reports)[1]


def test_the_first_non_finite_metric_of_any_copy_is_kept_once_set():
    bad = step_of(no_bad(), 1, [[1.0, 2.0], [3.0, 4.0]])
    assert int(bad[4][0]) == -1
    bad = step_of(bad, 2, [[1.0, 2.0], [3.0, math.inf]])   # the second name, in the second copy
    bad = step_of(bad, 3, [[math.nan, 2.0], [3.0, 4.0]])   # later: kept as it was
    assert (int(bad[4][0]), int(bad[4][1]), float(bad[4][2])) == (2, 1, math.inf)
    assert int(bad[0]) == -1   # the losses were finite


def checks(names=("acc", "grad-norm")):
    return ValueChecks(None, (), lambda: names)


def test_a_metric_of_a_step_that_is_not_logged_stops_the_run_naming_it():
    bad = step_of(no_bad(), 8, [[math.inf, 1.0]])
    with pytest.raises(BadValue, match=r"^step 8: `acc` is inf$"):
        checks().check_records(bad, None)


def test_the_earlier_of_a_bad_loss_and_a_bad_metric_is_named_the_loss_first_at_one_step():
    metric_first = step_of(step_of(no_bad(), 3, [[1.0, math.nan]]), 5, [[1.0, 1.0]], losses=(math.nan, 1.0))
    with pytest.raises(BadValue, match=r"^step 3: `grad-norm` is nan$"):
        checks().check_records(metric_first, None)
    both = step_of(no_bad(), 4, [[math.inf, 1.0]], losses=(1.0, math.inf))
    with pytest.raises(BadValue, match=r"^step 4: `loss` is inf$"):
        checks().check_records(both, None)
    assert checks().first_bad(step_of(no_bad(), 1, [[1.0, 1.0]])) is None


@pytest.mark.slow
def test_a_run_stops_at_the_first_step_with_an_inf_metric_though_it_logs_every_50(tmp_path):
    from helpers import run, variant
    from sexpgpu_runtime import RunError
    text = variant("(metric :generation-accuracy (mean (getf inputs :correct)))",
                   "(metric :generation-accuracy (/ (mean (getf inputs :correct)) "
                   "(- 7.0 (cast (getf ctx :step) :f32))))")
    with pytest.raises(RunError, match=r"step 8: `generation-accuracy` is inf"):
        run(text, tmp_path / "run", 20)
