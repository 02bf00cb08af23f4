"""Every registry op has one cost entry (`sexpgpu_lang.explain.cost.COSTS`), as it has one rule and
one lowering: the three key sets are equal (tests/test_op_rules_agree.py checks rule and lowering)."""
from sexpgpu_lang.explain.cost import COSTS, TRACE_COSTS, OpCost
from sexpgpu_lang.ops import REGISTRY


def test_one_cost_entry_per_registry_op():
    assert set(COSTS) == set(REGISTRY)


def test_cost_entries_and_lowerings_have_the_same_ops():
    from sexpgpu_runtime.lowering.lowering import LOWERINGS
    assert set(COSTS) == set(LOWERINGS)


def test_trace_node_kinds_are_not_registry_ops():
    assert not set(TRACE_COSTS) & set(REGISTRY)


def test_entries_name_known_kinds():
    for name, c in {**COSTS, **TRACE_COSTS}.items():
        assert isinstance(c, OpCost), name
        assert c.fusion in ("loop", "expensive", "view", "root"), name
        assert c.library in ("", "reduce", "elementwise"), name
        assert c.backward in ("cotangent", "inputs", "output"), name
        assert c.inner_residual is None or c.inner_residual == "output" or isinstance(c.inner_residual, int), name
