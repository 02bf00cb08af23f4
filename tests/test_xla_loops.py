"""`sexpgpu_runtime.lowering.xla_loops`: XLA's cost analysis with each while loop counted trip-count
times, and, where the installed jax lacks the private API it uses, the figures left as XLA gives them
with one line in `explain --xla` saying so (never a failure)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from sexpgpu_runtime.lowering import xla_loops, xla_report

LAYERS = 8


def scanned(x, w):
    """`LAYERS` layers of `tanh(c @ w_i)` in one `lax.scan` (one while loop of `LAYERS` trips)."""
    def body(c, wi):
        return jnp.tanh(c @ wi), None
    c, _ = jax.lax.scan(body, x, w)
    return c.sum()


def lowered():
    return jax.jit(scanned).lower(jax.ShapeDtypeStruct((64, 128), jnp.float32),
                                  jax.ShapeDtypeStruct((LAYERS, 128, 128), jnp.float32))


def one_layer_flops() -> float:
    return 2.0 * 64 * 128 * 128


def test_each_trip_of_a_scan_is_counted():
    compiled = lowered().compile()
    cost, loops = xla_loops.loop_costs(compiled.as_text(), compiled.cost_analysis())
    assert [l["trips"] for l in loops] == [LAYERS]
    assert cost["flops"] >= LAYERS * one_layer_flops()
    assert cost["transcendentals"] == LAYERS * 64 * 128
    assert compiled.cost_analysis()["flops"] < 2 * one_layer_flops()   # what XLA alone says: the body once


@pytest.fixture
def no_private_api(monkeypatch):
    """The installed jax as one outside the pinned range: the private names gone."""
    monkeypatch.setattr(xla_loops, "xla_client", None)
    monkeypatch.setattr(xla_loops, "_hlo", None)


def test_without_the_private_api_the_cost_is_xla_s_own_and_the_loops_are_unknown(no_private_api):
    compiled = lowered().compile()
    xla = compiled.cost_analysis()
    cost, loops = xla_loops.loop_costs(compiled.as_text(), xla)
    assert loops is None
    assert cost == {k: float(xla[k]) for k in xla_loops.KEYS}


def test_without_the_private_api_a_graph_is_read_and_marked(no_private_api):
    graph = xla_report._read(lowered())
    assert "error" not in graph and graph["loops_uncounted"] is True and "loops" not in graph
    assert graph["flops"] < 2 * one_layer_flops()


def test_explain_says_once_that_the_loops_are_counted_once(no_private_api, monkeypatch):
    graph = xla_report._read(lowered())
    program = type("P", (), {})()
    monkeypatch.setattr(xla_report, "compile_graphs", lambda program, stack: {"train": dict(graph), "update": dict(graph)})
    report = {"step": {"stack": 1, "target": xla_report.backend_target()}, "graphs": [], "passes": []}
    notes = xla_report.xla_report(program, report)["notes"]
    assert notes.count(xla_loops.UNCOUNTED) == 1
    assert jax.__version__ in xla_loops.UNCOUNTED and "pyproject.toml" in xla_loops.UNCOUNTED


def test_with_the_private_api_no_such_line(monkeypatch):
    graph = xla_report._read(lowered())
    assert "loops_uncounted" not in graph and graph["loops"][0]["trips"] == LAYERS
    monkeypatch.setattr(xla_report, "compile_graphs", lambda program, stack: {"train": graph})
    report = {"step": {"stack": 1, "target": xla_report.backend_target()}, "graphs": [], "passes": []}
    assert xla_loops.UNCOUNTED not in xla_report.xla_report(object(), report)["notes"]
