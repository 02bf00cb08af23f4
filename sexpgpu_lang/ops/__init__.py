"""The operation registry: one shape-and-dtype rule per op name.

Each `OpSpec` holds an op's signature, its one-line doc (shown on hover and
in completion), the keyword arguments it takes, which arguments must be
compile-time constants, and its rule: a pure function from argument types
to the result type, as JAX's shape and dtype rules are
(jax/_src/lax/lax.py). The runtime registers exactly one lowering per name
(`sexpgpu_runtime/lowering/lowering.py`); a test asserts the two key sets are equal
and that JAX's result types equal the rules' on each op's `example`.

A rule reports a mistake by raising `RuleError(code, message, arg)`, where
`arg` is the index of the positional argument (or the keyword) to point at.
A rule also fills `call.static` with the normalised constants the lowering
needs (axes, dtypes, sizes), so the lowering never infers them again.

Dtype rules follow docs/dev/design.md#types: promotion on JAX's lattice, a
reduction keeps its input dtype (`sum` of i32 is i32), `argmax` gives i32,
`size` gives i64, float-only ops turn integers into f32.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..types import ERROR
from .base import EXAMPLE_ENV, REGISTRY, OpSpec, RuleCall, RuleError, broadcast_shapes
# The families register their rules on import, in this order (the order of docs/ops.md's rows).
from . import elementwise, reductions, shape, networks, selection, conversion, draws  # noqa: E402,F401
from . import indexing  # noqa: E402,F401  (dynamic-slice, dynamic-update-slice, at-set)
from .draws import INITIALIZERS

__all__ = ["REGISTRY", "OpSpec", "RuleCall", "RuleError", "EXAMPLE_ENV", "INITIALIZERS", "broadcast_shapes", "ERROR"]
