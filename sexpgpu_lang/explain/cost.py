"""Each op's cost: its FLOP rule, how XLA's fusion treats it, and what its gradient reads and costs.

`COSTS` has one `OpCost` per registry op, keyed like `sexpgpu_lang.ops.REGISTRY`
(tests/test_op_costs.py checks the keys agree, as tests/test_op_rules_agree.py
does for the lowerings); `TRACE_COSTS` the same facts for the node kinds the
symbolic trace adds (its inputs and `relayout`, a transposing copy). The
per-element FLOP counts are XLA's for the HLO each op lowers to; the fusion
facts model XLA's fusion passes for the live-set estimate (docs/explain.md).

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from ..records import Record
from ..types import PlistType, TensorType, Type, is_float


@dataclass(frozen=True, repr=False)
class Cost(Record):
    """An op's forward cost per copy: `flops` and `transcendentals` (exp, log, tanh ... evaluations)."""

    flops: float = 0.0
    transcendentals: float = 0.0


#: A FLOP rule: `(input types, output type, static) -> Cost` per copy.
FlopRule = Callable[[list, Type, dict], Cost]
#: A gradient FLOP rule: `(forward FLOPs, output size, sizes of the inputs that need a gradient) -> FLOPs`.
GradRule = Callable[[float, int, list[int]], float]


def _size(t) -> int:
    return t.size if isinstance(t, TensorType) else 0


def _out(out) -> int:
    if isinstance(out, PlistType):
        return sum(_size(t) for _, t in out.entries)
    return _size(out)


def _ew(n_ops: float = 1.0, trans: float = 0.0):
    """Elementwise: `n_ops` FLOPs and `trans` transcendentals per output element."""
    return lambda ins, out, st: Cost(n_ops * _out(out), trans * _out(out))


def _nary(ins, out, st):
    return Cost(max(len(ins) - 1, 1) * _out(out))


def _cast(ins, out, st):
    same = ins and isinstance(ins[0], TensorType) and ins[0].dtype == st.get("dtype")
    return Cost(0.0 if same else _out(out))


def _reduce(extra_out: float = 0.0, per_in: float = 1.0, trans_in: float = 0.0, trans_out: float = 0.0):
    def rule(ins, out, st):
        n = _size(ins[0]) if ins else 0
        return Cost(per_in * n + extra_out * _out(out), trans_in * n + trans_out * _out(out))
    return rule


def _matmul(ins, out, st):
    """2 FLOPs per multiply-add: 2 * (output size) * (contracted size)."""
    a = ins[0]
    return Cost(2.0 * _out(out) * (a.shape[-1] if a.rank else 1))


_EINSUM = re.compile(r"^([a-zA-Z.,]*)->([a-zA-Z]*)$")


def _einsum(ins, out, st):
    """Contract the operands left to right, as `jnp.einsum`'s default path does for two; 2 FLOPs per multiply-add."""
    m = _EINSUM.match(st.get("subscripts", ""))
    ts = [t for t in ins if isinstance(t, TensorType)]
    if not m or not ts:
        return Cost(2.0 * _out(out))
    subs = m.group(1).split(",")
    outs = m.group(2)
    sizes: dict[str, int] = {}
    for sub, t in zip(subs, ts):
        sizes.update(zip(sub, t.shape))
    flops = 0.0
    cur = subs[0]
    for k in range(1, len(subs)):
        rest = set("".join(subs[k + 1:])) | set(outs)
        letters = set(cur) | set(subs[k])
        flops += 2.0 * math.prod(sizes[c] for c in letters)
        cur = "".join(sorted(c for c in letters if c in rest))
    if len(subs) == 1:
        flops = float(math.prod(sizes[c] for c in set(subs[0])))
    return Cost(flops)


def einsum_operands(subscripts: str) -> tuple[str, ...]:
    """`"btd,dhk->bhtk"` as `("btd", "dhk", "bhtk")`: the operands' letters, then the output's."""
    m = _EINSUM.match(subscripts)
    return tuple(m.group(1).split(",")) + (m.group(2),) if m else ()


def _grouped(letters: str, batch: str, a: set) -> bool:
    """Whether `letters` is `batch`, then the letters of `a` and the others as two contiguous groups."""
    if letters[:len(batch)] != batch:
        return False
    rest = letters[len(batch):]
    kinds = [c in a for c in rest]
    return sum(kinds[k] != kinds[k + 1] for k in range(len(kinds) - 1)) <= 1


def einsum_layout(subscripts: str, lhs_rank: int, rhs_rank: int):
    """How XLA lowers a two-operand einsum: `(lhs order, rhs order, dot output order, output order)`.

    XLA runs an einsum as a `dot_general`, whose operands it wants in (batch, free, contracting)
    order (the contracting and free axes each one contiguous group, in either order, the batch axes
    leading) and whose output is (batch, lhs free, rhs free). An operand in another order is copied
    into that order first (its new letters are returned; None when it is in order already); an
    output in another order is a transposing copy of the dot's output. Returns None for what this
    does not model (not two operands, repeated letters, `...`, an axis summed within one operand),
    and `(None, None, None, None)` for a plain dot that needs no copy.
    """
    ops = einsum_operands(subscripts)
    if len(ops) != 3 or "." in subscripts:
        return None
    lhs, rhs, out = ops
    if len(lhs) != lhs_rank or len(rhs) != rhs_rank or any(len(set(s)) != len(s) for s in ops):
        return None
    if not (set(lhs) | set(rhs)) >= set(out) or (set(lhs) ^ set(rhs)) - set(out):
        return None  # an axis summed within one operand: jnp.einsum reduces it first
    batch = "".join(c for c in lhs if c in rhs and c in out)
    contract = "".join(c for c in lhs if c in rhs and c not in out)
    free1 = "".join(c for c in lhs if c not in rhs)
    free2 = "".join(c for c in rhs if c not in lhs)
    rhs_contract = "".join(c for c in rhs if c in contract)
    lhs_order = None if _grouped(lhs, batch, set(free1)) else batch + free1 + contract
    rhs_ok = _grouped(rhs, batch, set(free2)) and rhs_contract == contract
    rhs_order = None if rhs_ok else batch + contract + free2
    natural = batch + free1 + free2
    if lhs_order is None and rhs_order is None and natural == out:
        return (None, None, None, None)
    return lhs_order, rhs_order, natural, out


def _sort(ins, out, st):
    """A comparison sort: about 2 log2(n) ops per element of rows of n."""
    x = ins[0]
    n = x.shape[st.get("axis", -1)] if x.rank else 1
    return Cost(x.size * 2.0 * math.log2(max(n, 2)))


def _top_k(ins, out, st):
    """log2(n) comparisons per element (XLA's CPU backend calls a library routine and counts none)."""
    x = ins[0]
    n = x.shape[-1] if x.rank else 1
    return Cost(x.size * max(1, math.ceil(math.log2(max(n, 2)))))


def _mod(ins, out, st):
    """`jnp.mod`: a remainder, then a sign fix-up: 10 HLO ops per element on integers, 8 on floats."""
    return Cost((8.0 if is_float(st.get("dtype", "f32")) else 10.0) * _out(out))


def _per_input(flops: float, trans: float = 0.0):
    """`flops` and `trans` per element of the first operand (draws over logits)."""
    return lambda ins, out, st: Cost(flops * _size(ins[0]), trans * _size(ins[0]))


def _attention(ins, out, st):
    """`dot-product-attention` of query [B T N H] and key, value [B S K H]: 2 FLOPs per multiply-add
    of the scores (B N T S H) and as many for the weighted values, so 4 B N T S H; one exponential
    per score. A causal mask is not halved: XLA's lowering (and cuDNN's count) computes every score."""
    q, k = ins[0], ins[1]
    if q.rank != 4 or k.rank != 4:
        return Cost()
    b, t, n, h = q.shape
    scores = b * n * t * k.shape[1]
    return Cost(4.0 * scores * h, float(scores))




def _grad_dot(flops: float, out: int, ins: list[int]) -> float:
    """A contraction: each operand's gradient is a contraction as large as the forward one."""
    return flops * len(ins)


def _grad_attention(flops: float, out: int, ins: list[int]) -> float:
    """Attention's gradient: four contractions as large as the forward's two (the scores again, the
    weights' and the values' cotangents, then the query's and the key's): twice the forward."""
    return 2.0 * flops if ins else 0.0


def _grad_per_input(k: float) -> GradRule:
    """`k` FLOPs per element of each input that needs a gradient (a reduction's broadcast, a softmax's)."""
    return lambda flops, out, ins: k * sum(ins)


def _grad_gather(flops: float, out: int, ins: list[int]) -> float:
    """A gather: its gradient scatters the cotangent, one add per output element."""
    return float(out)


def _grad_none(flops: float, out: int, ins: list[int]) -> float:
    """A layout change or a cast: the gradient only moves the cotangent."""
    return 0.0


def _grad_per_output(k: float) -> GradRule:
    """Elementwise: `k` FLOPs per output element for each input that needs a gradient."""
    return lambda flops, out, ins: k * out * len(ins)


@dataclass(frozen=True, repr=False)
class OpCost(Record):
    """One op's cost and fusion behaviour, for the static estimate.

    - `flops`: the FLOP rule (`FlopRule`), counted as XLA's cost analysis
      counts the HLO the op lowers to.
    - `fusion`, how XLA's fusion treats the op's output: `"loop"` is fused
      into its readers, and a cheap value read by several fusions is
      recomputed in each; `"expensive"` is fused but not recomputed in
      several readers (a division, a transcendental); `"view"` is a
      layout-only op (a bitcast), never a buffer of its own; `"root"` is
      always a buffer (a fusion's root: a reduction, a matmul, a sort).
    - `whole_operands`: it reads its operands as whole buffers (a library
      matmul, a sort, a row-wise softmax), so they are materialised.
    - `see_through`: a whole-operand reader reads the value under it (a view,
      a transpose XLA folds into the operand's layout).
    - `duplicable`: a value read by several fusions may be materialised
      rather than recomputed; False for transposing copies.
    - `multi_read`: elementwise, it reads its operand more than once
      (gelu's x and x³, silu's x and sigmoid(x)).
    - `library`: on the CPU, `"reduce"` for a reduction XLA hands to its
      library (YNNPACK), `"elementwise"` for an op a library fusion takes in
      (no select, comparison, cast or gather), `""` otherwise.
    - `differentiable`: a gradient flows through it.
    - `backward`, what its gradient reads: `"cotangent"` only (it reshapes,
      sums or passes the cotangent on), `"inputs"` the values it read,
      `"output"` those and its own output (exp, tanh, softmax ...).
    - `inner_residual`: its gradient reads a value computed inside it (JAX's
      gelu keeps its tanh, silu its sigmoid, cross-entropy the exponentials
      of its shifted logits): `"output"` when that value has the output's
      size, an operand index when it has that operand's; None otherwise.
    - `scatter`: its gradient scatters into zeros the size of an operand
      (the transpose of a gather): that operand's index, else None.
    - `grad_flops`: the extra FLOPs of its gradient (`GradRule`).
    - `scan_residuals`: in the body of a scan without remat, the buffers of
      the output's size JAX's linearisation of it saves beyond its input,
      its output and `inner_residual` (the forward loop writes each into a
      stacked [N ...] output, so XLA cannot fuse them into the backward):
      gelu's tanh form keeps x, 3x², tanh, 1 - tanh, (1 + tanh)/2 and its
      output, 3 more (XLA's buffer assignment of examples/gpt2.sx's scan).
    - `shifted`: on the CPU, it computes a log-softmax of that operand (its
      index; None otherwise) but returns less than it (cross-entropy): the
      shifted values x - max(x), read by both the sum of exponentials and
      the result, are a buffer of x's size, which XLA writes into x's own
      buffer only where the op is the one reader of a buffer the graph
      computes (a softmax or log-softmax writes them into its output).
    """

    flops: FlopRule
    fusion: str = "loop"
    whole_operands: bool = False
    see_through: bool = False
    duplicable: bool = True
    multi_read: bool = False
    library: str = ""
    differentiable: bool = True
    backward: str = "inputs"
    inner_residual: str | int | None = None
    scatter: int | None = None
    grad_flops: GradRule = _grad_per_output(2.0)
    scan_residuals: int = 0
    shifted: int | None = None


def _elementwise(flops: FlopRule, **facts) -> OpCost:
    """An elementwise op of the library's set (`library="elementwise"`)."""
    return OpCost(flops, library="elementwise", **facts)


def _expensive(flops: FlopRule, **facts) -> OpCost:
    """An expensive elementwise op of the library's set (a division, a transcendental)."""
    return OpCost(flops, "expensive", library="elementwise", **facts)


def _no_gradient(flops: FlopRule, **facts) -> OpCost:
    """An op through which no gradient flows (a comparison, a constant, a draw)."""
    return OpCost(flops, differentiable=False, **facts)


def _reduction(flops: FlopRule, **facts) -> OpCost:
    """A reduction: a fusion's root; its gradient broadcasts the cotangent back, 2 FLOPs per input element."""
    return OpCost(flops, "root", grad_flops=_grad_per_input(2.0), **facts)


def _layout(flops: FlopRule = _ew(0.0), **facts) -> OpCost:
    """A layout op: its gradient is the inverse layout of the cotangent, no FLOPs."""
    return OpCost(flops, backward="cotangent", grad_flops=_grad_none, **facts)


def _whole(flops: FlopRule, **facts) -> OpCost:
    """An op that reads its operands as whole buffers, into a buffer of its own."""
    return OpCost(flops, "root", whole_operands=True, **facts)


#: One entry per registry op (sigmoid is 3 ops and a logistic, a draw is its Threefry bits,
#: `argmax` a variadic reduction of 9 ops per element).
COSTS: dict[str, OpCost] = {
    "+": _elementwise(_nary, backward="cotangent", grad_flops=_grad_per_output(1.0)),
    "-": _elementwise(_ew(), backward="cotangent", grad_flops=_grad_per_output(1.0)),
    "*": _elementwise(_nary),
    "/": _expensive(_ew()),
    "mod": OpCost(_mod, "expensive", multi_read=True),
    "pow": OpCost(_ew(0.0, 1.0), "expensive", multi_read=True),
    "maximum": _elementwise(_ew()),
    "minimum": _elementwise(_ew()),
    "neg": _elementwise(_ew(), backward="cotangent", grad_flops=_grad_per_output(1.0)),
    "abs": _elementwise(_ew()),
    "relu": OpCost(_ew(), backward="output"),
    "exp": _expensive(_ew(0.0, 1.0), backward="output"),
    "log": _expensive(_ew(0.0, 1.0)),
    "sqrt": _expensive(_ew(0.0, 1.0), backward="output"),
    "rsqrt": _expensive(_ew(0.0, 1.0), backward="output"),
    "tanh": _expensive(_ew(0.0, 1.0), backward="output"),
    "sigmoid": _expensive(_ew(3.0, 1.0), backward="output"),
    "gelu": OpCost(_ew(8.0, 1.0), "expensive", multi_read=True, inner_residual="output", scan_residuals=3),
    "silu": OpCost(_ew(4.0, 1.0), "expensive", multi_read=True, inner_residual="output"),
    "sin": _expensive(_ew(0.0, 1.0)),
    "cos": _expensive(_ew(0.0, 1.0)),
    "=": _no_gradient(_ew()), "!=": _no_gradient(_ew()), "<": _no_gradient(_ew()), "<=": _no_gradient(_ew()),
    ">": _no_gradient(_ew()), ">=": _no_gradient(_ew()),
    "and": _no_gradient(_nary), "or": _no_gradient(_nary), "not": _no_gradient(_ew()),
    "where": OpCost(_ew(), grad_flops=_grad_per_output(1.0)),
    "cast": _layout(_cast),
    "stop-gradient": _no_gradient(_ew(0.0)),
    "sum": _reduction(_reduce(), library="reduce", backward="cotangent"),
    "prod": _reduction(_reduce()),
    "max": _reduction(_reduce(), library="reduce"),
    "min": _reduction(_reduce(), library="reduce"),
    "mean": _reduction(_reduce(extra_out=1.0), library="reduce", backward="cotangent"),
    "logsumexp": _reduction(_reduce(per_in=3.0, trans_in=1.0), library="reduce"),
    "cumsum": OpCost(_ew(), "root", whole_operands=True, backward="cotangent", grad_flops=_grad_per_output(1.0)),
    "argmax": _reduction(_reduce(per_in=9.0), differentiable=False),
    "argmin": _reduction(_reduce(per_in=9.0), differentiable=False),
    "reshape": _layout(fusion="view", see_through=True),
    "squeeze": _layout(fusion="view", see_through=True),
    "expand-dims": _layout(fusion="view", see_through=True),
    "transpose": _layout(see_through=True, duplicable=False),
    "concat": _layout(), "stack": _layout(), "broadcast-to": _layout(), "slice": _layout(),
    "take": OpCost(_ew(0.0), grad_flops=_grad_gather),
    "take-along-axis": OpCost(_ew(0.0), scatter=0, grad_flops=_grad_gather),
    "one-hot": _no_gradient(_ew(2.0), grad_flops=_grad_none),
    "iota": _no_gradient(_ew(0.0), grad_flops=_grad_none),
    "zeros": _no_gradient(_ew(0.0), grad_flops=_grad_none),
    "ones": _no_gradient(_ew(0.0), grad_flops=_grad_none),
    "full": _no_gradient(_ew(0.0), grad_flops=_grad_none),
    "size": _no_gradient(_ew(0.0), grad_flops=_grad_none),
    "axis-size": _no_gradient(_ew(0.0), grad_flops=_grad_none),
    "matmul": _whole(_matmul, grad_flops=_grad_dot),
    "einsum": _whole(_einsum, grad_flops=_grad_dot),
    "softmax": _whole(_per_input(4.0, 1.0), backward="output", grad_flops=_grad_per_input(3.0)),
    "log-softmax": _whole(_per_input(4.0, 1.0), backward="output", grad_flops=_grad_per_input(3.0)),
    "cross-entropy": _whole(_per_input(4.0, 1.0), backward="output", inner_residual=0, scatter=0,
                            grad_flops=_grad_per_input(3.0), shifted=0),
    # as one kernel: it reads query, key and value whole and writes its output, the [B N T S]
    # scores never a value of the graph; the trace expands it into the buffers XLA's lowering of
    # JAX's implementation makes (`trace.Trace.attention`), with this entry's FLOPs
    "dot-product-attention": _whole(_attention, backward="output", grad_flops=_grad_attention),
    "sort": _whole(_sort),
    "argsort": _whole(_sort, differentiable=False),
    "top-k": _whole(_top_k),
    "uniform": _no_gradient(_ew(50.0)),
    "normal": _no_gradient(_ew(90.0, 2.0)),
    "bernoulli": _no_gradient(_ew(51.0)),
    # the Gumbel draw's Threefry bits are a while loop of 5 trips on the CPU (about 31 FLOPs an element
    # each), counted trip-count times as `sexpgpu_runtime.lowering.xla_loops` counts them: 223 an element in all
    "categorical": _whole(_per_input(223.0, 2.0), differentiable=False),
    # a window read at a traced start: a slice; its gradient pads the cotangent back (a scatter into zeros)
    "dynamic-slice": _layout(scatter=0),
    # a write of the update's entries into x (in place where x is not read again): no FLOPs
    "dynamic-update-slice": _layout(),
    # a scatter of the value's entries into x: one move per written entry, gathered back for its gradient
    "at-set": OpCost(_ew(0.0), grad_flops=_grad_gather),
}

#: The node kinds the symbolic trace adds beside registry ops: its inputs (`arg`, `param`, and the
#: gradients the training graph returns, `grad`), never computed in the graph; `sample`, the first
#: rows of a `:samples` name the training graph returns (a slice, a copy of a few rows); and
#: `relayout`, the transposing copy before or after an einsum's dot (`einsum_layout`).
TRACE_COSTS: dict[str, OpCost] = {
    "arg": OpCost(_ew(0.0)), "param": OpCost(_ew(0.0)), "grad": OpCost(_ew(0.0)), "sample": OpCost(_ew(0.0)),
    "relayout": _layout(duplicable=False),
}


def cost_of(op: str) -> OpCost:
    """The entry of a traced node's op: its `COSTS` entry, or `TRACE_COSTS`'s; KeyError for any other name."""
    return COSTS[op] if op in COSTS else TRACE_COSTS[op]
