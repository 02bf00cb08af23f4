"""A resume compiles each graph of the step once, as a fresh run does: the restored state is placed
as a fresh run's (committed to the device, the same dtypes and weak types), so no graph's second
call finds its arguments placed otherwise (JAX's compile log counted)."""
from __future__ import annotations

import collections
import contextlib
import logging
import re
from pathlib import Path

import jax
import pytest

from helpers import program_of, variant

TEXT = variant(":log (:every 50))", ":log (:every 50)\n     :checkpoint (:every 3))")


@contextlib.contextmanager
def compiles():
    """A Counter of the graphs XLA compiles inside the block, by name (`jit(train_stacked)` ...),
    read from JAX's compile log (`jax_log_compiles`)."""
    seen: collections.Counter = collections.Counter()

    class Count(logging.Handler):
        def emit(self, record):
            m = re.match(r"Compiling (\S+)", record.getMessage())
            if m:
                seen[m.group(1)] += 1

    handler, logger = Count(), logging.getLogger("jax")
    logger.addHandler(handler)
    old = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)
    try:
        yield seen
    finally:
        jax.config.update("jax_log_compiles", old)
        logger.removeHandler(handler)


def step_graphs(seen) -> dict:
    return {k: v for k, v in seen.items() if re.match(r"jit\((generate|train|update|accumulate)", k)}


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["compiled", "host"])
def test_a_resume_compiles_each_graph_once_as_a_fresh_run_does(tmp_path, loop):
    from sexpgpu_runtime import RunOptions, train
    program = program_of(TEXT, str(tmp_path / "run.sx"))
    jax.clear_caches()   # (a graph compiled by an earlier test would not be compiled again here)
    with compiles() as fresh:
        train(program, RunOptions(steps=3, run_dir=tmp_path, quiet=True, trip_loop=loop))
    jax.clear_caches()
    with compiles() as resumed:
        result = train(program, RunOptions(steps=6, run_dir=tmp_path, quiet=True, resume=True, trip_loop=loop))
    assert result.start == 3
    graphs = step_graphs(fresh)
    assert {"jit(train_stacked)", "jit(update)"} <= set(graphs) and set(graphs.values()) == {1}, fresh
    assert step_graphs(resumed) == graphs, (fresh, resumed)
    assert set(resumed) <= set(fresh), (fresh, resumed)   # nothing compiled on a resume that a fresh run did not
