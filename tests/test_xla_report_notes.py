"""`sexpgpu explain --xla`'s notes (sexpgpu_runtime/lowering/xla_report.py): the CPU's bf16 note only for a
file that computes in bf16 (docs/explain.md). XLA's own graphs stand for the step's: the notes read
only what `_read` gives of each."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from sexpgpu_runtime.lowering import xla_report

BF16_NOTE = "the CPU backend computes bf16 matmuls in f32"


def lowered(dtype):
    return jax.jit(lambda x, w: jnp.tanh(x @ w).sum()).lower(jax.ShapeDtypeStruct((16, 32), dtype),
                                                             jax.ShapeDtypeStruct((32, 32), dtype))


def notes(monkeypatch, *graphs) -> list[str]:
    monkeypatch.setattr(xla_report, "compile_graphs",
                        lambda program, stack: {f"g{i}": dict(g) for i, g in enumerate(graphs)})
    report = {"step": {"stack": 1, "target": xla_report.backend_target()}, "graphs": [], "passes": []}
    out = xla_report.xla_report(object(), report)
    assert all("bf16" not in g for g in out["graphs"].values())   # a note, not a graph's figure
    return out["notes"]


@pytest.mark.skipif(jax.devices()[0].platform != "cpu", reason="the note is the CPU backend's")
def test_the_bf16_note_only_where_a_graph_computes_in_bf16(monkeypatch):
    f32, bf16 = xla_report._read(lowered(jnp.float32)), xla_report._read(lowered(jnp.bfloat16))
    assert "bf16" not in f32 and bf16["bf16"] is True
    assert not any(n.startswith(BF16_NOTE) for n in notes(monkeypatch, f32, f32))
    assert [n.startswith(BF16_NOTE) for n in notes(monkeypatch, f32, bf16)].count(True) == 1
    assert not any(n.startswith(BF16_NOTE) for n in notes(monkeypatch, {"error": "RuntimeError: no"}))
