"""`sexpgpu explain`: the step as graphs, the lowering report, the memory plan and the cost model.

Everything here is computed statically from the checked IR (`ir.Program`),
in milliseconds, so the language server can show it too:
`generation_line(program)` is the line a hover on `defgenerate` shows.
`explain(program)` returns the report as plain data (`json.dumps` takes it
as it is; `--format json` prints it) and `to_text(report)` prints it.
`choose_stack(program, budget)` is the `:stack :auto` choice.

The estimate (docs/explain.md says more, and how it compares with XLA's):

- Each graph the runtime jits (`generate.init`, `generate.step`,
  `generate.finish`, `train`, `update`, each pass) is traced here
  symbolically, as `sexpgpu_runtime.lowering.lowering.evaluate` traces it with JAX:
  one `Node` per registry op, with the type its rule gave. What no output
  depends on is dropped, and an op repeated on the same inputs is counted
  once, as XLA does.
- FLOPs: one rule per registry op (its `COSTS` entry), counted as XLA's
  cost analysis counts the HLO the op lowers to; the training graph adds
  the gradient of every op between a trainable parameter and the loss.
- Live set: the graph's arguments (the inputs it reads), its outputs, and
  the peak of its temporaries: the values XLA materialises (matmul and
  reduction outputs, matmul operands, expensive values read twice), each
  live from its fusion to the last fusion that reads it; in the training
  graph the residuals the gradient reads and the cotangents too. Which
  values are materialised depends on the compiler's fusion: `target`
  "accelerator" (the default) models an accelerator's, "cpu" XLA's CPU
  backend, which hands matmuls and large reductions to a library
  (`TARGETS`; docs/explain.md says what each assumes).
- A stacked graph (`:stack S`) holds S copies of what depends on the batch,
  the state or a per-microbatch context scalar, and one of what depends on
  the parameters alone: the runtime runs the unstacked body once per copy
  (sexpgpu_runtime/lowering/stacking.py), each op on the unstacked shapes; the
  generator's phases in a loop (one copy's temporaries at a time), the
  training graph's copies side by side (`schedule._copies`).

Units: bytes (printed in KiB/MiB/GiB, powers of 1024) and FLOPs, per call
of one graph unless a field says `per_step` or `per_pass`.

Modules, in the order the estimate runs: `cost` (each op's `OpCost` in
`COSTS`: FLOP rule, fusion, gradient), `trace` (the symbolic trace, an
`ir.Interpreter`), `schedule` (one graph's estimate: fusion, live set,
bytes moved), `graphs` (the step's graphs), `memory` (the memory plan and
`choose_stack`, the `:stack :auto` policy), `split` (each value's split along the
`model` axis), `mesh` (shardings and memory per device), `report` (`explain`, `generation_line`), `text` (units, `to_text`).

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

from .cost import COSTS, Cost, OpCost, einsum_layout
from .graphs import layout_stack, optimizer_bytes, param_bytes, plist_bytes, step_graphs
from .memory import DEFAULT_BUDGET, choose_stack, device_peak, memory_plan
from .mesh import graph_shardings, mesh_report
from .report import explain, generation_line
from .schedule import TARGETS, GraphEstimate, estimate_graph
from .text import fmt_bytes, fmt_flops, parse_bytes, to_text

__all__ = [
    "COSTS", "Cost", "DEFAULT_BUDGET", "GraphEstimate", "OpCost", "TARGETS", "choose_stack",
    "device_peak", "einsum_layout", "estimate_graph", "explain", "fmt_bytes", "fmt_flops", "generation_line",
    "graph_shardings", "layout_stack", "memory_plan", "mesh_report", "optimizer_bytes", "param_bytes",
    "parse_bytes", "plist_bytes", "step_graphs", "to_text",
]
