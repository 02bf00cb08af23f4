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
  symbolically, as `sexpgpu_runtime.lowering.evaluate` traces it with JAX:
  one `Node` per registry op, with the type its rule gave. What no output
  depends on is dropped, and an op repeated on the same inputs is counted
  once, as XLA does.
- FLOPs: one rule per registry op (`FLOP_RULES`), counted as XLA's cost
  analysis counts the HLO the op lowers to; the training graph adds the
  gradient of every op between a trainable parameter and the loss.
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
  the parameters alone (what `vmap` computes).

Units: bytes (printed in KiB/MiB/GiB, powers of 1024) and FLOPs, per call
of one graph unless a field says `per_step` or `per_pass`.

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

from . import ir
from .ops import REGISTRY
from .types import ITEMSIZE, PlistType, TensorType, Type, is_float

#: Memory budget assumed without a device to ask (bytes): 16 GiB.
DEFAULT_BUDGET = 16 * 1024 ** 3

#: The context scalars the runtime passes to every graph (sexpgpu_runtime/train.py `_ctx`).
RUNTIME_CTX = (("step", "i64"), ("microbatch", "i32"), ("records", "i64"), ("stage", "i32"), ("stage-records", "i64"))


# =========================================================================== FLOP rules


@dataclass(frozen=True)
class Cost:
    """An op's forward cost per copy: `flops` and `transcendentals` (exp, log, tanh ... evaluations)."""

    flops: float = 0.0
    transcendentals: float = 0.0


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


def _einsum_operands(subscripts: str) -> tuple[str, ...]:
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
    ops = _einsum_operands(subscripts)
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


#: One rule per registry op: `(input types, output type, static) -> Cost` per copy. The per-element
#: counts are XLA's for the HLO each op lowers to (sigmoid is 3 ops and a logistic, a draw is its
#: Threefry bits, `argmax` a variadic reduction of 9 ops per element).
FLOP_RULES: dict[str, Callable[[list, Type, dict], Cost]] = {
    "+": _nary, "*": _nary, "-": _ew(), "/": _ew(), "mod": _mod, "pow": _ew(0.0, 1.0),
    "maximum": _ew(), "minimum": _ew(), "neg": _ew(), "abs": _ew(), "relu": _ew(),
    "exp": _ew(0.0, 1.0), "log": _ew(0.0, 1.0), "sqrt": _ew(0.0, 1.0), "rsqrt": _ew(0.0, 1.0),
    "tanh": _ew(0.0, 1.0), "sigmoid": _ew(3.0, 1.0), "gelu": _ew(8.0, 1.0), "silu": _ew(4.0, 1.0),
    "=": _ew(), "!=": _ew(), "<": _ew(), "<=": _ew(), ">": _ew(), ">=": _ew(),
    "and": _nary, "or": _nary, "not": _ew(), "where": _ew(), "cast": _cast, "stop-gradient": _ew(0.0),
    "sum": _reduce(), "prod": _reduce(), "max": _reduce(), "min": _reduce(),
    "mean": _reduce(extra_out=1.0), "logsumexp": _reduce(per_in=3.0, trans_in=1.0),
    "argmax": _reduce(per_in=9.0), "argmin": _reduce(per_in=9.0),
    "reshape": _ew(0.0), "transpose": _ew(0.0), "concat": _ew(0.0), "stack": _ew(0.0),
    "expand-dims": _ew(0.0), "squeeze": _ew(0.0), "broadcast-to": _ew(0.0), "slice": _ew(0.0),
    "take": _ew(0.0), "take-along-axis": _ew(0.0), "one-hot": _ew(2.0), "iota": _ew(0.0),
    "zeros": _ew(0.0), "ones": _ew(0.0), "full": _ew(0.0), "size": _ew(0.0), "axis-size": _ew(0.0),
    "matmul": _matmul, "einsum": _einsum,
    "softmax": _per_input(4.0, 1.0), "log-softmax": _per_input(4.0, 1.0), "cross-entropy": _per_input(4.0, 1.0),
    "sort": _sort, "argsort": _sort, "top-k": _top_k,
    "uniform": _ew(50.0), "normal": _ew(90.0, 2.0), "bernoulli": _ew(51.0),
    "categorical": _per_input(62.0, 2.0),
}

# How XLA groups ops into fusions, for the live-set model:
#: layout-only ops (bitcasts): never a buffer of their own.
_VIEW = {"reshape", "squeeze", "expand-dims"}
#: ops XLA does not recompute in each of several readers.
_EXPENSIVE = {"/", "mod", "pow", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "gelu", "silu"}
#: ops that read their operands as whole buffers (a library matmul, a sort, a row-wise softmax).
_NEEDS_OPERANDS = {"matmul", "einsum", "sort", "argsort", "top-k", "softmax", "log-softmax", "cross-entropy",
                   "categorical"}
#: ops whose output is always a buffer (a fusion's root).
_ROOTS = {"matmul", "einsum", "sort", "argsort", "top-k", "softmax", "log-softmax", "cross-entropy",
          "sum", "prod", "max", "min", "mean", "logsumexp", "argmax", "argmin", "categorical"}
#: The compilers the schedule models (`target`): an accelerator's (the default) and XLA's CPU backend.
TARGETS = ("accelerator", "cpu")
#: On the CPU: reductions XLA hands to its matmul and reduction library (YNNPACK) as library fusions,
#: when they reduce f32 values and read at least `_LIBRARY_REDUCE_MIN` elements.
_LIBRARY_REDUCE = {"sum", "max", "min", "mean", "logsumexp"}
_LIBRARY_REDUCE_MIN = 32 * 1024
#: On the CPU: the elementwise ops a library fusion takes in (no select, comparison, cast or gather).
_LIBRARY_ELEMENTWISE = {"+", "-", "*", "/", "maximum", "minimum", "neg", "abs", "exp", "log", "sqrt", "rsqrt",
                        "tanh", "sigmoid"}
#: ops through which no gradient flows.
_NOT_DIFFERENTIABLE = {"stop-gradient", "argmax", "argmin", "argsort", "=", "!=", "<", "<=", ">", ">=",
                       "and", "or", "not", "iota", "zeros", "ones", "full", "size", "axis-size", "one-hot",
                       "uniform", "normal", "categorical", "bernoulli"}


# =========================================================================== the symbolic trace


@dataclass(eq=False)
class Node:
    """One value of a traced graph: an argument, a parameter, or an op's result (per copy).

    `per_copy`: the value differs between the copies of a stacked call (it
    depends on the batch, the state or a per-microbatch context scalar), so
    a stack of S holds S of it.
    """

    id: int
    op: str
    type: TensorType
    inputs: tuple[int, ...] = ()
    cost: Cost = Cost()
    per_copy: bool = False
    role: str = ""
    static: dict = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of one copy."""
        return self.type.nbytes

    def bytes_at(self, stack: int) -> int:
        """Bytes held under a stack of `stack` copies."""
        return self.nbytes * (stack if self.per_copy else 1)


class _ParamView:
    """A model's `self`: the parameter subtree at `path`, cast to `compute` dtype on read (bf16)."""

    def __init__(self, tracer: "_Trace", path: tuple[str, ...], compute: str | None):
        self.tracer, self.path, self.compute = tracer, path, compute

    def get(self, key: str):
        path = self.path + (key,)
        if path in self.tracer.param_leaves:
            node = self.tracer.param(path)
            if self.compute and is_float(node.type.dtype) and node.type.dtype != self.compute:
                return self.tracer.cast_param(node, self.compute)
            return node
        if any(p[:len(path)] == path for p in self.tracer.param_leaves):
            return _ParamView(self.tracer, path, self.compute)
        return None


class _Trace:
    """Builds the node list of one graph by walking phases' IR the way the runtime's evaluator does."""

    def __init__(self, program: ir.Program, selected: frozenset = frozenset(), in_generator: bool = False):
        self.program = program
        self.nodes: list[Node] = []
        self.outputs: list[tuple[str, int]] = []
        self.param_leaves = {p.path: p for p in program.params}
        self.param_nodes: dict[tuple, Node] = {}
        self.casts: dict[tuple, Node] = {}
        self.selected = selected
        self.in_generator = in_generator
        self.cse: dict = {}
        self.counters: dict[str, list] = {}
        self.rows: Node | None = None

    # -- nodes ---------------------------------------------------------------------------------
    def new(self, op: str, t: TensorType, inputs=(), cost=Cost(), per_copy=None, role="", static=None) -> Node:
        """A node; an op already computed on the same inputs is reused, as XLA's CSE reuses it."""
        ins = tuple(inputs)
        pc = any(self.nodes[i].per_copy for i in ins) if per_copy is None else per_copy
        t = t.strong() if isinstance(t, TensorType) else t
        key = None
        if op not in ("arg", "param", "grad"):
            key = (op, t, ins, pc, repr(sorted((static or {}).items())))
            if key in self.cse:
                return self.cse[key]
        n = Node(len(self.nodes), op, t, ins, cost, pc, role, static or {})
        self.nodes.append(n)
        if key is not None:
            self.cse[key] = n
        return n

    def arg(self, role: str, t: TensorType, per_copy: bool) -> Node:
        return self.new("arg", t, per_copy=per_copy, role=role)

    def args_of(self, role: str, t: Type, per_copy: bool) -> dict:
        """A plist argument as a dict of argument nodes."""
        out = {}
        if isinstance(t, PlistType):
            for k, sub in t.entries:
                if isinstance(sub, TensorType):
                    out[k] = self.arg(f"{role}:{k}", sub, per_copy)
        return out

    def ctx(self, per_copy: bool) -> dict:
        """The context scalars (`per_copy`: one per copy, else shared), each sliced from the one
        argument the runtime passes for them, the context rows: [5] i64 per copy, [S 5] in all
        (sexpgpu_runtime.graphs `unpack_ctx`); jit drops it where no scalar is read."""
        if self.rows is None:
            self.rows = self.arg("ctx", TensorType((len(RUNTIME_CTX),), "i64"), True)
        return {k: self.new("slice", TensorType((), d), (self.rows.id,), per_copy=per_copy, static={"ctx": k})
                for k, d in RUNTIME_CTX}

    def param(self, path: tuple) -> Node:
        if path not in self.param_nodes:
            p = self.param_leaves[path]
            self.param_nodes[path] = self.new("param", TensorType(p.shape, p.dtype), per_copy=False,
                                              role="frozen" if p.frozen else "param", static={"path": path})
        return self.param_nodes[path]

    def cast_param(self, node: Node, dtype: str) -> Node:
        key = (node.id, dtype)
        if key not in self.casts:
            t = TensorType(node.type.shape, dtype)
            self.casts[key] = self.new("cast", t, (node.id,), FLOP_RULES["cast"]([node.type], t, {"dtype": dtype}),
                                       static={"dtype": dtype})
        return self.casts[key]

    def output(self, name: str, value) -> None:
        """Mark every tensor leaf of `value` as a graph output named `name`."""
        if isinstance(value, Node):
            self.outputs.append((name, value.id))
        elif isinstance(value, dict):
            for k, v in value.items():
                self.output(f"{name}:{k}", v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.output(f"{name}:{i}", v)

    # -- the evaluator ---------------------------------------------------------------------------
    def phase(self, phase: ir.Phase, args: list):
        env = dict(zip(phase.params, args))
        env["__self__"] = _ParamView(self, (), None)
        return self.eval(phase.body, env)

    def eval(self, e: ir.Expr, env: dict):
        if isinstance(e, ir.Const):
            return e.value
        if isinstance(e, ir.Var):
            return env.get(e.name)
        if isinstance(e, ir.Op):
            return self.op(e, env)
        if isinstance(e, ir.Vector):
            return [self.eval(i, env) for i in e.items]
        if isinstance(e, ir.Let):
            inner = dict(env)
            for n, v in zip(e.names, e.values):
                inner[n] = self.eval(v, inner)
            return self.body(e.body, inner)
        if isinstance(e, ir.Seq):
            return self.body(e.body, env)
        if isinstance(e, ir.Plist):
            return {k: self.eval(v, env) for k, v in zip(e.keys, e.values)}
        if isinstance(e, ir.GetF):
            obj = self.eval(e.obj, env)
            if isinstance(obj, dict):
                return obj.get(e.key)
            if isinstance(obj, _ParamView):
                return obj.get(e.key)
            return None
        if isinstance(e, ir.Apply):
            inner = dict(env)
            for n, a in zip(e.params, e.args):
                inner[n] = self.eval(a, env)
            return self.body(e.body, inner)
        if isinstance(e, ir.ModelCall):
            args = [self.eval(a, env) for a in e.args]
            if e.compute_dtype:
                args = [self.cast_value(a, e.compute_dtype) for a in args]
            inner = {"__self__": env.get("__self__"), e.self_name: _ParamView(self, tuple(e.path), e.compute_dtype)}
            inner.update(zip(e.params, args))
            return self.body(e.body, inner)
        if isinstance(e, ir.Report):
            return self.report(e, env)
        return None

    def body(self, body, env):
        out = None
        for b in body:
            out = self.eval(b, env)
        return out

    def cast_value(self, v, dtype: str):
        if isinstance(v, Node) and is_float(v.type.dtype) and v.type.dtype != dtype:
            t = TensorType(v.type.shape, dtype)
            return self.new("cast", t, (v.id,), FLOP_RULES["cast"]([v.type], t, {"dtype": dtype}), static={"dtype": dtype})
        if isinstance(v, dict):
            return {k: self.cast_value(x, dtype) for k, x in v.items()}
        return v

    def report(self, e: ir.Report, env):
        if e.kind == "diagnostic" and (self.in_generator or e.name not in self.selected):
            return None
        v = self.eval(e.value, env) if e.value is not None else None
        if e.kind == "counter":
            if isinstance(v, Node):
                t = TensorType((), v.type.dtype if v.type.dtype != "bool" else "i32")
                v = self.new("sum", t, (v.id,), FLOP_RULES["sum"]([v.type], t, {}))
            self.counters.setdefault(e.name, []).append(v)
            return None
        if not isinstance(v, Node):
            return None
        if v.type.rank:
            t = TensorType((), "f32")
            v = self.new("mean", t, (v.id,), FLOP_RULES["mean"]([v.type], t, {}))
        self.output(f"{e.kind}:{e.name}", v)
        return None

    def op(self, e: ir.Op, env):
        if isinstance(e.type, TensorType) and e.type.value is not None and e.type.shape == ():
            return e.type.value  # a compile-time constant: no computation
        args = [self.eval(a, env) for a in e.args]
        kwargs = [self.eval(v, env) for _, v in e.kwargs]
        ins: list[int] = []
        in_types: list = []
        for a in args:
            for x in (a if isinstance(a, list) else [a]):
                if isinstance(x, Node):
                    ins.append(x.id)
                    in_types.append(x.type)
                elif isinstance(x, TensorType):
                    in_types.append(x)
        # the IR's own argument types, for rules that need shapes of constants too
        ir_types = [a.type for a in e.args]
        types = [t for t in ir_types if isinstance(t, TensorType)] or in_types
        if e.name in ("concat", "stack"):
            types = in_types
        for v in kwargs:
            if isinstance(v, Node):
                ins.append(v.id)
        cost = FLOP_RULES[e.name](types, e.type, e.static)
        if isinstance(e.type, PlistType):  # top-k: :values and :indices
            out = {}
            for k, (key, t) in enumerate(e.type.entries):
                out[key] = self.new(e.name, t, ins, cost if k == 0 else Cost(), static=e.static)
            return out
        if not isinstance(e.type, TensorType):
            return None
        if e.name == "einsum":
            lowered = self.einsum(e, ins, cost)
            if lowered is not None:
                return lowered
        return self.new(e.name, e.type, ins, cost, static=e.static)

    def einsum(self, e: ir.Op, ins: list[int], cost: Cost) -> Node | None:
        """A two-operand einsum as XLA runs it: a `dot_general` on operands in (batch, free,
        contracting) order, whose output is (batch, lhs free, rhs free); an operand or an output in
        another order is a transposing copy (`relayout`) before or after the dot. None when the
        einsum is a plain dot already (or not a two-operand contraction this models)."""
        if len(ins) != 2:
            return None
        x, y = self.nodes[ins[0]], self.nodes[ins[1]]
        plan = einsum_layout(e.static.get("subscripts", ""), x.type.rank, y.type.rank)
        if plan is None or plan == (None, None, None, None):
            return None
        lhs_order, rhs_order, natural, out = plan
        lhs, rhs, _ = _einsum_operands(e.static["subscripts"])
        sizes = dict(zip(lhs, x.type.shape))
        sizes.update(zip(rhs, y.type.shape))
        operands = []
        for node, order in ((x, lhs_order), (y, rhs_order)):
            if order is not None:
                node = self.new("relayout", TensorType(tuple(sizes[c] for c in order), node.type.dtype), (node.id,),
                                static={"order": order})
            operands.append(node.id)
        dot_t = TensorType(tuple(sizes[c] for c in natural), e.type.dtype)
        dot = self.new("einsum", dot_t, operands, cost, static=dict(e.static, natural=natural))
        if natural == out:
            return dot
        return self.new("relayout", e.type, (dot.id,), static={"order": out})


# =========================================================================== one graph's estimate


@dataclass
class GraphEstimate:
    """The static estimate of one jitted graph at one stacking degree.

    Bytes: `args` (the inputs it reads; `param_args` of them parameters),
    `outputs`, `temps` (the peak of its temporaries; `largest_temp` the
    largest one), `live = args + outputs + temps`, and `bytes_moved`, the
    bytes read and written per call (XLA's "bytes accessed"). `flops` and
    `transcendentals` per call. `input_list` and `output_list` hold
    `{name, type, bytes}` for the tree.
    """

    name: str
    stack: int
    flops: float = 0.0
    transcendentals: float = 0.0
    bytes_moved: float = 0.0
    args: int = 0
    outputs: int = 0
    temps: int = 0
    largest_temp: int = 0
    param_args: int = 0
    input_list: list = field(default_factory=list)
    output_list: list = field(default_factory=list)

    @property
    def live(self) -> int:
        """Arguments, outputs and the peak of temporaries (bytes)."""
        return self.args + self.outputs + self.temps


def _live_nodes(nodes: list[Node], outputs: list[tuple[str, int]]) -> list[bool]:
    live = [False] * len(nodes)
    stack = [i for _, i in outputs]
    while stack:
        i = stack.pop()
        if live[i]:
            continue
        live[i] = True
        stack.extend(nodes[i].inputs)
    return live


def _grad_nodes(nodes: list[Node], live: list[bool], loss: int) -> list[bool]:
    """Nodes on a path from a trainable parameter to the loss, through differentiable float ops."""
    from_param = [False] * len(nodes)
    for n in nodes:
        if not live[n.id] or not is_float(n.type.dtype):
            continue
        if n.op == "param":
            from_param[n.id] = True
        elif n.op not in ("arg", "param") and n.op not in _NOT_DIFFERENTIABLE:
            from_param[n.id] = any(from_param[i] for i in n.inputs)
    to_loss = [False] * len(nodes)
    to_loss[loss] = True
    for n in reversed(nodes):
        if to_loss[n.id] and from_param[n.id]:
            for i in n.inputs:
                to_loss[i] = True
    return [a and b for a, b in zip(from_param, to_loss)]


def _backward_cost(n: Node, nodes: list[Node], grad: list[bool]) -> Cost:
    """Extra FLOPs of the gradient through `n`, one term per input that needs a gradient."""
    gins = [i for i in n.inputs if grad[i]]
    if not gins:
        return Cost()
    out = n.type.size
    fam = REGISTRY[n.op].family if n.op in REGISTRY else "tensor"
    if n.op in ("matmul", "einsum"):
        return Cost(n.cost.flops * len(gins))
    if fam == "network":
        return Cost(3.0 * sum(nodes[i].type.size for i in gins))
    if fam == "reduction":
        return Cost(2.0 * sum(nodes[i].type.size for i in gins))
    if n.op in ("take", "take-along-axis"):
        return Cost(float(out))
    if fam == "shape" or n.op in ("cast", "relayout"):
        return Cost()
    per = 1.0 if n.op in ("+", "-", "neg", "where") else 2.0
    return Cost(per * out * len(gins))


#: Values not computed in the graph: arguments, parameters, and the gradients the training graph returns.
_INPUTS = ("arg", "param", "grad")

#: Elementwise ops that read their operand more than once (gelu's x and x³, silu's x and sigmoid(x)).
_MULTI_READ = {"gelu", "silu", "mod", "pow"}

#: Ops whose gradient reads no forward value (it only reshapes, sums or passes the cotangent on).
_LINEAR_BACKWARD = {"+", "-", "neg", "sum", "mean", "cast", "concat", "stack", "reshape", "transpose", "slice",
                    "squeeze", "expand-dims", "broadcast-to", "relayout"}
#: Ops whose gradient reads their own output (exp, tanh, softmax ...).
_OUTPUT_BACKWARD = {"exp", "tanh", "sigmoid", "softmax", "log-softmax", "cross-entropy", "relu", "sqrt", "rsqrt"}
#: Ops whose gradient reads a value computed inside them (JAX's gelu keeps its tanh, silu its sigmoid,
#: cross-entropy the exponentials of its shifted logits): the index of the operand whose size it has,
#: or None for the output's size.
_INNER_RESIDUAL = {"gelu": None, "silu": None, "cross-entropy": 0}
#: Ops whose gradient scatters into zeros the size of an operand (the transpose of a gather): its index.
_SCATTER_BACKWARD = {"cross-entropy": 0, "take-along-axis": 0}


class _Schedule:
    """Which values XLA materialises, what each fusion reads, and the peak of temporaries.

    The schedule is the trace's order (a topological order, as XLA's
    default scheduler keeps for these straight-line graphs). A value is a
    fusion root when it is materialised; a fused value belongs to every
    root that reads it, so its materialised sources stay live until the
    last such root runs.
    """

    def __init__(self, nodes: list[Node], outputs: list[tuple[str, int]], live: list[bool],
                 grad: list[bool] | None = None, target: str = "accelerator", stack: int = 1):
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
        self.nodes, self.live, self.grad, self.target, self.stack = nodes, live, grad, target, stack
        self.out_ids = {i for _, i in outputs}
        users: list[list[int]] = [[] for _ in nodes]
        for n in nodes:
            if live[n.id]:
                for i in n.inputs:
                    users[i].append(n.id)
        self.users = users
        operand = self._operands()
        # materialised flags and sources (the materialised values a fused value reads), in trace order
        self.mat = [False] * len(nodes)
        self.src: list[frozenset[int]] = [frozenset()] * len(nodes)
        for n in nodes:
            if not live[n.id] or n.op in _INPUTS:
                continue
            srcs = frozenset().union(*(self.src[i] for i in n.inputs)) if n.inputs else frozenset()
            self.mat[n.id] = self._materialised(n, operand[n.id], srcs)
            self.src[n.id] = frozenset([n.id]) if self.mat[n.id] else srcs
        self.inputs_read = [self._inputs_read(n.id) for n in nodes]

    def _operands(self) -> list[bool]:
        """Values a matmul, sort or softmax reads as a whole buffer (through reshapes and transposes);
        on the CPU also the inputs of a library reduction (`_library_inputs`)."""
        out = [False] * len(self.nodes)
        for n in self.nodes:
            if self.live[n.id] and n.op in _NEEDS_OPERANDS:
                for i in n.inputs:
                    out[self._through_views(i)] = True
            if self.target == "cpu" and self.live[n.id] and self._library_reduce(n):
                for j in self._library_inputs(n.id):
                    out[j] = True
        return out

    def _through_views(self, i: int) -> int:
        while self.nodes[i].op in _VIEW or self.nodes[i].op == "transpose":
            i = self.nodes[i].inputs[0]
        return i

    def _library_reduce(self, n: Node) -> bool:
        """On the CPU, whether reduction `n` runs in the library: an f32 sum, mean, max or min (or
        logsumexp, a max and a sum) of at least `_LIBRARY_REDUCE_MIN` elements (XLA's own rule)."""
        if n.op not in _LIBRARY_REDUCE or n.type.dtype != "f32" or not n.inputs:
            return False
        x = self.nodes[n.inputs[0]]
        return x.type.dtype == "f32" and x.type.size * (self.stack if x.per_copy else 1) >= _LIBRARY_REDUCE_MIN

    def _library_inputs(self, r: int) -> set[int]:
        """On the CPU, the buffers the library fusion of reduction `r` reads. XLA's CPU backend runs the
        reduction in YNNPACK and grows that fusion up through elementwise ops the library has
        (`_LIBRARY_ELEMENTWISE`) whose every reader is in the fusion; any other value it reads (a
        select, a comparison, a gather, a value read elsewhere too) is a buffer of its own, where an
        accelerator's reduction fusion would compute it in place."""
        inside = {r}
        frontier: set[int] = set()
        todo = list(self.nodes[r].inputs)
        while todo:
            j = self._through_views(todo.pop())
            n = self.nodes[j]
            if n.op in _INPUTS or j in inside or n.nbytes == 0:
                continue
            if n.op in _LIBRARY_ELEMENTWISE and j not in self.out_ids and set(self.users[j]) <= inside:
                inside.add(j)
                todo.extend(n.inputs)
            else:
                frontier.add(j)
        return frontier

    def _materialised(self, n: Node, operand: bool, srcs: frozenset[int]) -> bool:
        if n.nbytes == 0 or n.op in _VIEW:
            return False
        if self.target == "cpu" and n.op == "softmax" and self._fused_into_matmul(n):
            return False
        if n.id in self.out_ids or n.op in _ROOTS or operand:
            return True
        if self.grad is not None and self.grad[n.id] and n.op in _EXPENSIVE:
            return True  # read again by its gradient, and too costly to recompute there
        # A value read by several fusions: XLA recomputes a cheap one in each (it duplicates it)
        # unless it is expensive or stands on other materialised values.
        return len(self.users[n.id]) > 1 and (n.op in _EXPENSIVE or bool(srcs)) and n.op not in ("transpose", "relayout")

    def _flattened_apart(self, s: int, r: int) -> bool:
        """On the CPU, whether fusion `r` cannot write into matmul output `s` because XLA gave them
        different shapes (it shares a buffer only between equal shapes): the CPU's library runs a
        matmul of a rank-3 or higher operand on its rows flattened to two axes, and `r` has that
        flattened shape only when matmuls alone read it."""
        if self.target != "cpu" or self.nodes[s].op != "matmul" or self.nodes[s].type.rank <= 2:
            return False
        return not self.users[r] or any(self.nodes[u].op != "matmul" for u in self.users[r])

    def _fused_into_matmul(self, n: Node) -> bool:
        """On the CPU, a softmax whose one reader is a matmul or an einsum (and which the gradient does
        not read again) is fused into that library fusion: the fusion grows up through the softmax's
        division, exponential and reductions, whose readers are all inside it, to the scores buffer."""
        users = self.users[n.id]
        return (n.id not in self.out_ids and not (self.grad is not None and self.grad[n.id]) and len(users) == 1
                and self.nodes[users[0]].op in ("matmul", "einsum"))

    def reads(self, i: int) -> frozenset[int]:
        """The materialised values the fusion rooted at `i` reads."""
        n = self.nodes[i]
        return frozenset().union(*(self.src[j] for j in n.inputs)) if n.inputs else frozenset()

    def _reads_once(self, r: int, s: int) -> bool:
        """Whether the fusion rooted at `r` reads `s` along one path, through ops that read each operand once."""
        count: dict[int, int] = {}

        def paths(i: int) -> int:
            if i == s:
                return 1
            if i in count:
                return count[i]
            n = self.nodes[i]
            if n.op in _INPUTS or (self.mat[i] and i != r):
                count[i] = 0
                return 0
            k = sum(paths(j) for j in n.inputs)
            count[i] = k * (2 if n.op in _MULTI_READ and k else 1)
            return count[i]

        return paths(r) == 1

    def _inputs_read(self, i: int) -> set[int]:
        """The arguments and parameters the fusion rooted at `i` reads."""
        acc: set[int] = set()
        todo = list(self.nodes[i].inputs)
        seen: set[int] = set()
        while todo:
            j = todo.pop()
            if j in seen:
                continue
            seen.add(j)
            if self.nodes[j].op in _INPUTS:
                acc.add(j)
            elif not self.mat[j]:
                todo.extend(self.nodes[j].inputs)
        return frozenset(acc)

    def peak(self, stack: int) -> tuple[int, float, int]:
        """(peak bytes of temporaries, bytes read and written, the largest temporary) under `stack` copies."""
        nodes, mat = self.nodes, self.mat
        roots = [n.id for n in nodes if mat[n.id]]
        pos = {r: k for k, r in enumerate(roots)}
        last = dict(pos)
        moved = 0.0
        for r in roots:
            rd = self.reads(r)
            for s in rd:
                last[s] = max(last[s], pos[r])
            moved += nodes[r].bytes_at(stack) + sum(nodes[s].bytes_at(stack) for s in rd | self.inputs_read[r])
        # an argument returned as it is: one copy, read and written
        moved += sum(2 * nodes[i].bytes_at(stack) for i in self.out_ids if nodes[i].op in _INPUTS)
        spans: list[tuple[int, int, int]] = []
        end = len(roots)
        if self.grad is not None:
            bw_spans, bw_moved, end = self._backward(stack, len(roots), pos, last)
            spans += bw_spans
            moved += bw_moved
        # An elementwise fusion that reads an operand buffer of its own size once, where that buffer
        # dies, writes its output into it (XLA's buffer sharing): the operand is freed as it starts.
        for r in roots:
            if REGISTRY.get(nodes[r].op) is None or REGISTRY[nodes[r].op].family != "tensor":
                continue
            for s in sorted(self.reads(r)):
                if last[s] == pos[r] and s not in self.out_ids and nodes[s].bytes_at(stack) == nodes[r].bytes_at(stack) \
                        and self._reads_once(r, s) and not self._flattened_apart(s, r):
                    last[s] = pos[r] - 1
                    break
        spans += [(pos[r], last[r], nodes[r].bytes_at(stack)) for r in roots if r not in self.out_ids]
        delta = [0] * (end + 2)
        for a, b, size in spans:
            delta[a] += size
            delta[b + 1] -= size
        # The outputs' buffers are reserved for the whole call, but until an output is computed its
        # buffer is free: XLA's buffer assignment packs temporaries that die before then into it,
        # when they fit (here: an output buffer as large as the largest temporary). So the
        # temporaries counted beside the outputs are the peak of (temporaries + those outputs computed
        # so far), less those outputs. (Outputs the forward does not compute, the gradients, count as
        # computed from the start.)
        largest = max((size for _, _, size in spans), default=0)
        made = [0] * (end + 2)
        for r in roots:
            if r in self.out_ids and nodes[r].nbytes * stack >= largest:
                made[pos[r]] += nodes[r].nbytes * stack
        peak = cur = done = 0
        for d, m in zip(delta, made):
            cur += d
            done += m
            peak = max(peak, cur + done)
        return peak - done, moved, largest

    def _backward(self, stack: int, t0: int, pos: dict, last: dict) -> tuple[list, float, int]:
        """The gradient, in reverse trace order after the forward roots: a residual (a forward value
        the gradient reads) stays live until the backward of the op that reads it; a materialised
        value's cotangent lives from its last reader's backward to its own. Cotangents are per copy."""
        nodes, grad, mat = self.nodes, self.grad, self.mat
        order = [n.id for n in reversed(nodes) if grad[n.id] and self.live[n.id] and n.op not in _INPUTS]
        spans: list[tuple[int, int, int]] = []
        moved = 0.0
        ct_from: dict[int, int] = {}
        t = t0
        for i in order:
            n = nodes[i]
            needed = set() if n.op in _LINEAR_BACKWARD else set(self.reads(i))
            if _INNER_RESIDUAL.get(n.op) is not None:  # it reads its inner value, not that operand
                needed -= self.src[n.inputs[_INNER_RESIDUAL[n.op]]]
            if mat[i] and (n.op in _OUTPUT_BACKWARD or n.op in _EXPENSIVE):
                needed.add(i)
            if self.target == "cpu" and n.op == "cross-entropy" and n.inputs:
                # XLA's CPU schedule computes the loss (the logit at the label less the log of the
                # sum) after cross-entropy's cotangent: the logits live until then
                needed |= self.src[n.inputs[0]]
            if mat[i] and n.op in _INNER_RESIDUAL:
                k = _INNER_RESIDUAL[n.op]
                inner = n if k is None else nodes[n.inputs[k]]
                spans.append((pos[i], t, inner.bytes_at(stack)))
            if n.op in _SCATTER_BACKWARD and n.inputs and grad[n.inputs[_SCATTER_BACKWARD[n.op]]]:
                spans.append((t, t, nodes[n.inputs[_SCATTER_BACKWARD[n.op]]].nbytes * stack))
            for r in needed:
                if r in last:
                    last[r] = max(last[r], t)
            size = n.nbytes * stack
            if mat[i]:
                spans.append((ct_from.get(i, t), t, size))
            if mat[i] or any(nodes[j].op in _INPUTS for j in n.inputs if grad[j]):
                # read the cotangent and the residuals, write the inputs' cotangents
                moved += size + sum(nodes[r].bytes_at(stack) for r in needed if r in last)
                moved += sum(nodes[j].nbytes * stack for j in n.inputs if grad[j])
            for j in n.inputs:
                if grad[j]:
                    ct_from.setdefault(j, t)
            if mat[i]:
                t += 1
        return spans, moved, t


def estimate_graph(name: str, trace: _Trace, stack: int, loss: int | None = None,
                   target: str = "accelerator") -> GraphEstimate:
    """The estimate of one traced graph under `stack` copies; with `loss`, the training graph:
    the forward, and the gradient of `loss` with respect to every trainable parameter. `target`
    is the compiler the live set models (`TARGETS`; docs/explain.md says what each assumes)."""
    nodes = trace.nodes
    live = _live_nodes(nodes, trace.outputs)
    grad = _grad_nodes(nodes, live, loss) if loss is not None else None
    temps, moved, largest = _Schedule(nodes, trace.outputs, live, grad, target, stack).peak(stack)
    g = GraphEstimate(name, stack)
    for n in nodes:
        if not live[n.id]:
            continue
        k = stack if n.per_copy else 1
        g.flops += n.cost.flops * k
        g.transcendentals += n.cost.transcendentals * k
        if grad is not None and grad[n.id]:
            g.flops += _backward_cost(n, nodes, grad).flops * stack  # cotangents are per copy
        if n.op in ("arg", "param"):
            g.args += n.bytes_at(stack)
            if n.op == "param":
                g.param_args += n.bytes_at(stack)
    for _, i in trace.outputs:
        g.outputs += nodes[i].nbytes * stack  # vmap returns every output with the stack axis
    g.temps = temps
    g.largest_temp = largest
    g.bytes_moved = moved
    return g


# =========================================================================== the step's graphs


def layout_stack(program: ir.Program, stack: int | None = None) -> int:
    """The stacking degree the runtime uses (sexpgpu_runtime.graphs `layout_of`), or `stack` when given:
    1 when a generator reads a per-microbatch context key (W-STACK-001) or the degree does not
    divide `:microbatches`."""
    run = program.run
    s = run.stack if stack is None else stack
    if not program.stackable or s < 1 or run.microbatches % s:
        return 1
    return s


def param_bytes(program: ir.Program, frozen: bool | None = None) -> int:
    """Bytes of the run's parameters: all of them, or only the frozen (`True`) or trainable (`False`) ones."""
    return sum(TensorType(p.shape, p.dtype).nbytes for p in program.params if frozen is None or p.frozen == frozen)


def optimizer_bytes(program: ir.Program) -> int:
    """Bytes of optax's state for the run's optimizer: adam and adamw keep two moments per trainable
    parameter and an i32 step count, lion one moment and a count, sgd nothing (one trace with
    `:momentum`)."""
    name, a = program.run.optimizer
    tr = param_bytes(program, frozen=False)
    if name == "lion":
        return tr + 4
    if name == "sgd":
        return tr if a.get("momentum") is not None else 0
    return 2 * tr + 4


def _plist_bytes(t: Type | None) -> int:
    if isinstance(t, PlistType):
        return sum(v.nbytes for _, v in t.entries if isinstance(v, TensorType))
    return t.nbytes if isinstance(t, TensorType) else 0


def _stacked(t: Type, stack: int) -> str:
    """`t` printed with the stack axis first (`[2 64 8] i32`)."""
    if stack <= 1:
        return t.show()
    if isinstance(t, TensorType):
        return TensorType((stack,) + t.shape, t.dtype).show()
    if isinstance(t, PlistType):
        return "(" + " ".join(f":{k} {_stacked(v, stack)}" for k, v in t.entries) + ")"
    return t.show()


def trace_generate(program: ir.Program, which: str) -> _Trace:
    """Trace `generate.init`, `generate.step` or `generate.finish` (`which`) as the runtime jits it:
    the batch and state per copy, the context and the trip shared."""
    gen = program.generate
    tr = _Trace(program, in_generator=True)
    if which == "init":
        batch = tr.args_of("batch", program.loaders[program.run.loader].batch_type(), True)
        out = tr.phase(gen.init, [batch, tr.ctx(False)])
        tr.output("state", {k: (out or {}).get(k) for k in gen.state.keys})
        # and the group's batch and context rows: on one device they arrive with this call, and its
        # copies are what the group's later graphs read (sexpgpu_runtime.graphs `Graphs.generate`)
        tr.output("batch", batch)
        tr.output("ctx", tr.rows)
    elif which == "step":
        state = tr.args_of("state", gen.state, True)
        out = tr.phase(gen.step, [state, tr.arg("trip", TensorType((), "i64"), False), tr.ctx(False)])
        tr.output("state", {k: (out or {}).get(k) for k in gen.state.keys})
    else:
        state = tr.args_of("state", gen.state, True)
        tr.output("made", tr.phase(gen.finish, [state, tr.ctx(False)]) if gen.finish is not None else state)
    return tr


def trace_loss(program: ir.Program, prepare: ir.Phase | None, objective: ir.Phase, loader: str,
               with_generated: bool) -> tuple[_Trace, int]:
    """Trace prepare and objective as the runtime's `_loss` does (counters folded into the
    objective's context); returns the trace and the loss node's id."""
    tr = _Trace(program, frozenset(program.run.diagnostics))
    batch = tr.args_of("batch", program.loaders[loader].batch_type(), True)
    if with_generated and program.generate is not None:
        batch.update(tr.args_of("made", program.generate.out, True))
    ctx = tr.ctx(True)
    inputs = tr.phase(prepare, [batch, ctx]) if prepare is not None else batch
    octx = dict(ctx)
    for c in program.counters:
        dt = _counter_dtype(program, c)
        base = tr.arg(f"counter:{c}", TensorType((), dt), False)
        parts = [d for d in tr.counters.get(c, []) if isinstance(d, Node)]
        delta = parts[0] if parts else None
        for more in parts[1:]:
            delta = tr.new("+", delta.type, (delta.id, more.id), Cost(1.0))
        if delta is None:  # a constant count
            delta = tr.new("full", TensorType((), dt), per_copy=True)
        elif delta.type.dtype != dt:
            delta = tr.new("cast", TensorType((), dt), (delta.id,), Cost(1.0))
        tr.output(f"counter:{c}", delta)
        octx[c] = tr.new("+", base.type, (base.id, delta.id), Cost(1.0))
    value = tr.phase(objective, [inputs, octx])
    if not isinstance(value, Node):
        value = tr.new("full", TensorType((), "f32"), per_copy=True)
    elif value.type.dtype != "f32":
        value = tr.new("cast", TensorType((), "f32"), (value.id,), Cost(1.0))
    tr.output("loss", value)
    return tr, value.id


def _counter_dtype(program: ir.Program, c: str) -> str:
    t = program.objective.param_types[1] if len(program.objective.param_types) > 1 else None
    sub = t.get(c) if isinstance(t, PlistType) else None
    return sub.dtype if isinstance(sub, TensorType) else "f32"


_CTX_T = PlistType(tuple((k, TensorType((), d)) for k, d in RUNTIME_CTX))


def _io(name: str, t: Type, stack: int = 1) -> dict:
    """One input or output of a graph for the tree: its name, its type with the stack axis, its bytes."""
    return {"name": name, "type": _stacked(t, stack), "bytes": _plist_bytes(t) * stack}


def _ctx_io(stack: int) -> dict:
    """The context rows a graph takes: [S 5] i64, one row of context scalars per copy."""
    n = len(RUNTIME_CTX)
    return {"name": "ctx", "type": f"[{stack} {n}] i64", "bytes": ITEMSIZE["i64"] * n * stack}


def _params_io(g: GraphEstimate) -> dict:
    return {"name": "params", "type": fmt_bytes(g.param_args), "bytes": g.param_args}


def _generator_graphs(program: ir.Program, stack: int, prefix: str = "",
                      target: str = "accelerator") -> dict[str, GraphEstimate]:
    gen = program.generate
    batch_t = program.loaders[program.run.loader].batch_type()
    out = {}
    g = estimate_graph(prefix + "generate.init", trace_generate(program, "init"), stack, target=target)
    g.input_list = [_io("batch", batch_t, stack), _ctx_io(stack), _params_io(g)]
    g.output_list = [_io("state", gen.state, stack), _io("batch", batch_t, stack), _ctx_io(stack)]
    out[g.name] = g
    g = estimate_graph(prefix + "generate.step", trace_generate(program, "step"), stack, target=target)
    g.input_list = [_io("state", gen.state, stack), _io("trip", TensorType((), "i64")), _ctx_io(stack), _params_io(g)]
    g.output_list = [_io("state", gen.state, stack)]
    out[g.name] = g
    g = estimate_graph(prefix + "generate.finish", trace_generate(program, "finish"), stack, target=target)
    g.input_list = [_io("state", gen.state, stack), _ctx_io(stack), _params_io(g)]
    g.output_list = [_io("made", gen.out, stack)]
    out[g.name] = g
    return out


def _train_graph(program: ir.Program, stack: int, target: str = "accelerator") -> GraphEstimate:
    gen = program.generate
    tr, loss = trace_loss(program, program.prepare, program.objective, program.run.loader, True)
    grads = []
    for p in program.params:  # a gradient for every trainable parameter, used or not (then zeros)
        if not p.frozen:
            t = TensorType(p.shape, p.dtype)
            tr.output("grad:" + "/".join(p.path), tr.new("grad", t, per_copy=True))
            grads.append(("/".join(p.path), t))
    g = estimate_graph("train", tr, stack, loss, target)
    batch_t = program.loaders[program.run.loader].batch_type()
    if gen is not None:
        batch_t = PlistType(batch_t.entries + gen.out.entries)
    g.input_list = [_io("batch", batch_t, stack), _ctx_io(stack), _params_io(g)]
    g.output_list = [_io("loss", TensorType((), "f32"), stack), _io("gradients", PlistType(tuple(grads)), stack)]
    return g


def _pass_graph(program: ir.Program, ps: ir.PassIR, target: str = "accelerator") -> GraphEstimate:
    runs_gen = ps.runs_generator and program.generate is not None
    tr, _ = trace_loss(program, ps.prepare, ps.objective, ps.loader, runs_gen)
    tr.outputs = [(n, i) for n, i in tr.outputs if n == "loss" or n.startswith("metric:")]  # what a pass returns
    g = estimate_graph(f"pass {ps.name}", tr, 1, target=target)
    batch_t = program.loaders[ps.loader].batch_type()
    if runs_gen:
        batch_t = PlistType(batch_t.entries + program.generate.out.entries)
    metrics = sum(1 for n, _ in tr.outputs if n.startswith("metric:"))
    g.input_list = [_io("batch", batch_t), _ctx_io(1), _params_io(g)]
    g.output_list = [_io("loss", TensorType((), "f32")),
                     {"name": "metrics", "type": f"{metrics} scalar{'s' if metrics != 1 else ''}", "bytes": 4 * metrics}]
    return g


#: Per trainable element of one optimizer update: FLOPs (optax's elementwise ops, as XLA counts them)
#: and parameter-sized reads and writes (adam: the two moments read the gradient and write themselves,
#: the parameter reads both; sgd: read parameter and gradient, write the parameter).
_OPT_FLOPS = {"adam": 13.0, "adamw": 17.0, "lion": 8.0, "sgd": 2.0}
_OPT_TRAFFIC = {"adam": 10, "adamw": 11, "lion": 7, "sgd": 3}


def _update_graph(program: ir.Program) -> GraphEstimate:
    """Sum the microbatches' gradients in order, scale, one optimizer step (sexpgpu_runtime.graphs `_update`)."""
    M = program.run.microbatches
    tr = param_bytes(program, frozen=False)
    opt = optimizer_bytes(program)
    n = sum(TensorType(p.shape, p.dtype).size for p in program.params if not p.frozen)
    name, a = program.run.optimizer
    per = _OPT_FLOPS.get(name, 12.0) + (2.0 if a.get("momentum") is not None else 0.0) + \
        (4.0 if a.get("clip") is not None else 0.0)
    g = GraphEstimate("update", 1)
    g.flops = n * ((M - 1) + (M > 1) + per)  # M - 1 adds, a scale by 1/M (none for one), the optimizer
    g.args = tr + opt + M * tr
    g.param_args = tr
    g.outputs = tr + opt
    # the sum reads every microbatch's gradient and writes one; then the optimizer's traffic
    g.bytes_moved = tr * (M + 1 + _OPT_TRAFFIC.get(name, 10) + (3 if a.get("momentum") is not None else 0))
    g.input_list = [{"name": "params", "type": fmt_bytes(tr), "bytes": tr},
                    {"name": "optimizer", "type": f"{name} state", "bytes": opt},
                    {"name": "gradients", "type": f"× {M} microbatch{'es' if M != 1 else ''}", "bytes": M * tr}]
    g.output_list = [{"name": "params", "type": fmt_bytes(tr), "bytes": tr},
                     {"name": "optimizer", "type": f"{name} state", "bytes": opt}]
    return g


def step_graphs(program: ir.Program, stack: int, target: str = "accelerator") -> dict[str, GraphEstimate]:
    """Every graph of one step at stacking degree `stack`, keyed by the names `sexpgpu explain` prints,
    their live sets as `target` (`TARGETS`) would make them.

    Keys: `generate.init`, `generate.step`, `generate.finish` (when the file
    has `defgenerate`), `train`, `update`, and `pass NAME` for each pass; a
    pass that runs the generator also has `pass NAME generate.init` ...
    (unstacked, as the runtime runs them).
    """
    out: dict[str, GraphEstimate] = {}
    if program.generate is not None:
        out.update(_generator_graphs(program, stack, target=target))
    out["train"] = _train_graph(program, stack, target)
    out["update"] = _update_graph(program)
    for ps in program.passes:
        if ps.runs_generator and program.generate is not None:
            out.update(_generator_graphs(program, 1, f"pass {ps.name} ", target))
        out[f"pass {ps.name}"] = _pass_graph(program, ps, target)
    return out


# =========================================================================== the memory plan


def memory_plan(program: ir.Program, graphs: dict[str, GraphEstimate], stack: int, donate: bool = True) -> dict:
    """Bytes live on the device in each phase of the step, beside the resident parameters and optimizer state.

    Each generator graph is a phase: its temporaries beside the batch
    `:init` read (held until the training graph reads it) and the state the
    trips carry; what `:finish` made lives until the training graph reads
    it. `generate.init` returns a copy of the batch (the later graphs read it), so
    during that call the batch is held twice. The gradients of earlier groups
    are held until `update`. `donate`:
    the runtime donates the state to each trip, and the parameters and
    optimizer state to `update`, on an accelerator (not on the CPU).
    Returns the totals (bytes) and `phases`, each `{phase, parts, live}`.
    """
    M = program.run.microbatches
    gen = program.generate
    trainable = param_bytes(program, frozen=False)
    params = param_bytes(program)
    opt = optimizer_bytes(program)
    batch = _plist_bytes(program.loaders[program.run.loader].batch_type()) * stack
    state = _plist_bytes(gen.state) * stack if gen else 0
    made = _plist_bytes(gen.out) * stack if gen else 0
    ctx = ITEMSIZE["i64"] * len(RUNTIME_CTX)   # one row of the context rows per copy (`_ctx_io`)
    phases: list[dict] = []

    def add(name, **parts):
        parts = {k.replace("_", " "): v for k, v in parts.items()}
        phases.append({"phase": name, "parts": parts, "live": sum(parts.values())})

    if gen is not None:
        # init's arguments (the batch and the context rows) and the copies it returns, which the group's
        # later graphs read
        add("generate.init", batch=batch, ctx=ctx * stack, copies=batch + ctx * stack,
            temps=graphs["generate.init"].temps, state=state)
        add("generate.step", batch=batch, state=state, state_out=0 if donate else state,
            temps=graphs["generate.step"].temps, trip_and_ctx=8 + ctx * stack)
        add("generate.finish", batch=batch, state=state, temps=graphs["generate.finish"].temps, made=made)
    t = graphs["train"]
    add("train", batch=batch, made=made, temps=t.temps, gradients_out=trainable * stack,
        ctx_and_reports=max(t.outputs - trainable * stack, 0) + ctx * stack)
    add("update", gradients=M * trainable, params_out=0 if donate else trainable, optimizer_out=0 if donate else opt)
    for ps in program.passes:
        pbatch = _plist_bytes(program.loaders[ps.loader].batch_type())
        pmade = 0
        if ps.runs_generator and gen is not None:  # unstacked: state in and out, temporaries, what finish made
            gen1 = [graphs[f"pass {ps.name} generate.{w}"] for w in ("init", "step", "finish")]
            add(f"pass {ps.name} generate", batch=pbatch, generator=max(g.live - g.param_args for g in gen1))
            pmade = _plist_bytes(gen.out)
        add(f"pass {ps.name}", batch=pbatch, made=pmade, temps=graphs[f"pass {ps.name}"].temps)
    live = {p["phase"]: p["live"] for p in phases}
    generation = max((v for k, v in live.items() if k.startswith("generate.")), default=0)
    passes = max((v for k, v in live.items() if k.startswith("pass ")), default=0)
    held = (M - stack) * trainable
    peak = params + opt + max(held + max(generation, live["train"]), live["update"], passes)
    return {"params": params, "trainable": trainable, "frozen": params - trainable, "optimizer": opt,
            "gradients_held": held, "generation": generation, "train": live["train"], "update": live["update"],
            "passes": passes, "peak": peak, "phases": phases, "donate": donate}


def device_peak(program: ir.Program, plan: dict, stack: int) -> int:
    """The peak one device holds (bytes): the plan's peak, or on a mesh `mesh_report`'s peak per device;
    what a device's memory budget is compared with."""
    mesh = mesh_report(program, plan, stack)
    return plan["peak"] if mesh is None else mesh["peak_per_device"]


def choose_stack(program: ir.Program, budget: int, target: str = "accelerator") -> tuple[int, list[dict]]:
    """For `:stack :auto`: the largest degree dividing `:microbatches` whose peak fits `budget` bytes
    (live sets as `target` makes them; on a mesh, the peak per device, as `budget` is one device's).

    Returns (degree, candidates), each candidate `{degree, peak, fits}` (bytes);
    the degree is 1 when none fits (the report then says the run does not fit).
    """
    M = program.run.microbatches
    cands = []
    for s in (d for d in range(1, M + 1) if M % d == 0):
        peak = device_peak(program, memory_plan(program, step_graphs(program, s, target), s), s)
        cands.append({"degree": s, "peak": peak, "fits": peak <= budget})
    fitting = [c["degree"] for c in cands if c["fits"]]
    return (max(fitting) if fitting else 1), cands


# =========================================================================== the report


def _graph_dict(g: GraphEstimate, calls: int, trips: int | None = None) -> dict:
    return {"name": g.name, "stack": g.stack, "calls_per_step": calls, "trips": trips,
            "inputs": g.input_list, "outputs": g.output_list,
            "flops": g.flops, "transcendentals": g.transcendentals, "bytes_moved": g.bytes_moved,
            "live": {"args": g.args, "outputs": g.outputs, "temps": g.temps, "total": g.live,
                     "largest_temp": g.largest_temp}}


def explain(program: ir.Program, budget: int | None = None, budget_source: str | None = None,
            target: str = "accelerator") -> dict:
    """The report of `sexpgpu explain` as plain data (docs/explain.md describes every field).

    `budget`: the device's memory in bytes, for `:stack :auto` and the fit
    check; None assumes `DEFAULT_BUDGET` (16 GiB) and says so in
    `memory.budget_source`. `target`: the compiler whose fusion the live
    sets model, "accelerator" (the default) or "cpu" (XLA's CPU backend, for
    a run on the CPU and to compare with `--xla` there); `step.target` says
    which. Bytes are bytes; `flops` are per call of a
    graph, `*_per_step` per training step, `*_per_pass` per evaluation.
    """
    run = program.run
    if budget is None:
        budget = DEFAULT_BUDGET
        budget_source = budget_source or "assumed; no device was asked: pass --memory-budget, or --xla to ask JAX"
    auto = None
    if run.stack_auto:
        if program.stackable:
            S, cands = choose_stack(program, budget, target)
            auto = {"chosen": S, "candidates": cands, "budget": budget, "reason": None}
        else:
            S = 1
            auto = {"chosen": 1, "candidates": [], "budget": budget,
                    "reason": "a generator reads a per-microbatch context key (W-STACK-001)"}
    else:
        S = layout_stack(program)
    M = run.microbatches
    G = M // S
    gen = program.generate
    graphs = step_graphs(program, S, target)
    plan = memory_plan(program, graphs, S)
    tree: list[dict] = []
    rows: list[dict] = []
    if gen is not None:
        gi, gs, gf = graphs["generate.init"], graphs["generate.step"], graphs["generate.finish"]
        tree += [_graph_dict(gi, G), _graph_dict(gs, G * gen.trips, gen.trips), _graph_dict(gf, G)]
        rows.append({"row": "generate stacked" if S > 1 else "generate", "degree": S, "graphs": 3,
                     "calls_per_step": G * (gen.trips + 2),
                     "flops_per_step": G * (gi.flops + gen.trips * gs.flops + gf.flops),
                     "bytes_per_step": G * (gi.bytes_moved + gen.trips * gs.bytes_moved + gf.bytes_moved),
                     "live": plan["generation"]})
    for name in ("train", "update"):
        g = graphs[name]
        calls = G if name == "train" else 1
        tree.append(_graph_dict(g, calls))
        rows.append({"row": name, "degree": g.stack, "graphs": 1, "calls_per_step": calls,
                     "flops_per_step": calls * g.flops, "bytes_per_step": calls * g.bytes_moved, "live": plan[name]})
    passes = []
    for ps in program.passes:
        pg = graphs[f"pass {ps.name}"]
        d = _graph_dict(pg, ps.batches)
        sub, flops, moved = [], pg.flops, pg.bytes_moved
        if ps.runs_generator and gen is not None:
            g1 = [graphs[f"pass {ps.name} generate.{w}"] for w in ("init", "step", "finish")]
            sub = [_graph_dict(g1[0], ps.batches), _graph_dict(g1[1], ps.batches * gen.trips, gen.trips),
                   _graph_dict(g1[2], ps.batches)]
            flops += g1[0].flops + gen.trips * g1[1].flops + g1[2].flops
            moved += g1[0].bytes_moved + gen.trips * g1[1].bytes_moved + g1[2].bytes_moved
        d.update(every=ps.every, batches=ps.batches, loader=ps.loader, generator=sub)
        passes.append(d)
        rows.append({"row": f"pass {ps.name}", "degree": 1, "graphs": 1 + len(sub), "calls_per_step": None,
                     "every": ps.every, "calls_per_pass": ps.batches * (1 + (gen.trips + 2 if sub else 0)),
                     "flops_per_pass": ps.batches * flops, "bytes_per_pass": ps.batches * moved,
                     "live": max(p["live"] for p in plan["phases"]
                                 if p["phase"] in (f"pass {ps.name}", f"pass {ps.name} generate"))})
    generation = None
    if gen is not None:
        generation = {"trips": gen.trips, "graphs": 3, "degree": S, "calls_per_step": G * (gen.trips + 2),
                      "state": gen.state.show(), "state_bytes": _plist_bytes(gen.state),
                      "state_bytes_stacked": _plist_bytes(gen.state) * S,
                      "made": gen.out.show(), "made_bytes": _plist_bytes(gen.out),
                      "flops_per_step": rows[0]["flops_per_step"], "live": plan["generation"]}
    per_step = [r for r in rows if r["calls_per_step"] is not None]
    memory = {k: plan[k] for k in ("params", "trainable", "frozen", "optimizer", "gradients_held",
                                   "generation", "train", "update", "passes", "peak", "donate")}
    mesh = mesh_report(program, plan, S)
    memory.update(budget=budget, budget_source=budget_source or "given",
                  fits=(plan["peak"] if mesh is None else mesh["peak_per_device"]) <= budget)
    notes = []
    if run.stack > 1 and S == 1 and not run.stack_auto:
        notes.append("the run asks for `:stack` but a generator reads a per-microbatch context key "
                     "(W-STACK-001), so it runs unstacked")
    return {
        "file": program.path,
        "step": {"microbatches": M, "stack": S, "groups": G, "stack_auto": run.stack_auto,
                 "stackable": program.stackable, "precision": run.precision, "optimizer": run.optimizer[0], "target": target,
                 "flops": sum(r["flops_per_step"] for r in per_step),
                 "bytes_moved": sum(r["bytes_per_step"] for r in per_step)},
        "graphs": tree,
        "passes": passes,
        "lowering": rows,
        "generation": generation,
        "memory": memory,
        "plan": plan["phases"],
        "stack_auto": auto,
        "notes": notes,
        "mesh": mesh,
        "xla": None,
    }


def mesh_report(program: ir.Program, plan: dict, stack: int = 1) -> dict | None:
    """With `:devices N` in `run` (or `--mesh data=N`; docs/sharding.md): the data-parallel mesh, each
    graph input's sharding, and the peak per device. Everything that scales with the records a device
    holds (the batch, the generator's state, the activations) is divided by N. Parameters, optimizer
    state and held gradients are whole on every device; under `:shard-params :fsdp` each array that N
    divides along some axis (sexpgpu_lang.mesh.fsdp_dim) is 1/N, and the parameters gathered for the
    computation are counted whole once more. An estimate: XLA's collective buffers are not counted.
    None without a mesh."""
    from .mesh import fsdp_dim, fsdp_spec
    n = getattr(program.run, "devices", None)
    if not n or n == 1:
        return None
    fsdp = getattr(program.run, "shard_params", "replicated") == "fsdp"
    fixed = plan["params"] + plan["optimizer"] + plan["gradients_held"]
    out = {"axis": "data", "devices": n, "shard_params": "fsdp" if fsdp else "replicated",
           "records_per_device": {name: ld.batch // n for name, ld in program.loaders.items()}}
    records = "P('data')" if stack <= 1 else "P(None, 'data')"
    if not fsdp:
        out["shardings"] = {"batch": records, "generator state": records, "params": "P()", "optimizer": "P()",
                            "ctx": "P()"}
        out["params_per_device"], out["optimizer_per_device"] = plan["params"], plan["optimizer"]
        out["peak_per_device"] = fixed + -(-max(plan["peak"] - fixed, 0) // n)
        out["memory_per_device"] = _memory_per_device(plan, n, plan["params"], 1.0, out["peak_per_device"])
        return out
    def mine(p) -> int:   # bytes of one parameter a device holds
        b = TensorType(p.shape, p.dtype).nbytes
        return b // n if fsdp_dim(p.shape, n) is not None else b
    params_pd = sum(mine(p) for p in program.params)
    trainable_pd = sum(mine(p) for p in program.params if not p.frozen)
    share = trainable_pd / plan["trainable"] if plan["trainable"] else 1.0   # optimizer state and gradients
    fixed_pd = params_pd + math.ceil(plan["optimizer"] * share) + math.ceil(plan["gradients_held"] * share)
    split = sum(fsdp_dim(p.shape, n) is not None for p in program.params)
    out["shardings"] = {"batch": records, "generator state": records,
                        "params": f"FSDP: {split} of {len(program.params)} split on their largest axis {n} divides",
                        "optimizer": "as its parameter", "ctx": "P()"}
    out["param_shardings"] = {".".join(p.path): fsdp_spec(p.shape, n) for p in program.params}
    out["params_per_device"] = params_pd
    out["optimizer_per_device"] = math.ceil(plan["optimizer"] * share)
    out["peak_per_device"] = fixed_pd + (plan["params"] - params_pd) + -(-max(plan["peak"] - fixed, 0) // n)
    out["memory_per_device"] = _memory_per_device(plan, n, params_pd, share, out["peak_per_device"])
    return out


#: Which of `mesh["shardings"]` each named input of a graph (`_graph_dict`'s `inputs`) takes.
_INPUT_SHARDING = {"batch": "batch", "state": "generator state", "params": "params", "optimizer": "optimizer",
                   "gradients": "params", "ctx": "ctx", "trip": "ctx"}


def graph_shardings(mesh: dict, graph: dict) -> dict[str, str]:
    """Each input of one graph of the report (`graph["inputs"]`) and its sharding on the mesh (a
    `PartitionSpec` as text, or the FSDP rule): the batch and the generator state split along `data`,
    the trip and the context scalars replicated, the parameters (and the gradients and optimizer state
    that follow them) replicated or split as `:shard-params` says (docs/sharding.md)."""
    return {i["name"]: mesh["shardings"][_INPUT_SHARDING.get(i["name"], "ctx")] for i in graph["inputs"]}


def _memory_per_device(plan: dict, n: int, params: int, share: float, peak: int) -> dict:
    """The `memory` line per device of an `n`-device mesh (bytes): what the phases hold scales with the
    records a device holds (1/n, rounded up); `params` is what one device keeps of the parameters (all,
    or its FSDP shards) and `share` the fraction of the optimizer state and of the gradients it keeps (1
    replicated; its shards' bytes over the trainable bytes under FSDP); `peak` is `mesh_report`'s."""
    def per(k: str) -> int:
        return -(-plan[k] // n)
    return {"params": params, "optimizer": math.ceil(plan["optimizer"] * share),
            "gradients_held": math.ceil(plan["gradients_held"] * share), "generation": per("generation"),
            "train": per("train"), "update": math.ceil(plan["update"] * share), "passes": per("passes"),
            "peak": peak}


def generation_line(program: ir.Program | None) -> str | None:
    """The one line a hover on `defgenerate` shows; None without a generator (or a program).

    E.g. `generation: 6 trips · 3 graphs · state 2.2 KiB ×2 stacked · 65.0 MFLOP per step · live 521.0 KiB`:
    the state per copy, the generator's FLOPs in one step (trips counted), its largest live set.
    Never raises: a hover must not fail.
    """
    if program is None or program.generate is None:
        return None
    try:
        gen = program.generate
        auto = program.run.stack_auto and program.stackable
        S = choose_stack(program, DEFAULT_BUDGET)[0] if auto else layout_stack(program)
        G = program.run.microbatches // S
        graphs = step_graphs(program, S)
        live = memory_plan(program, graphs, S)["generation"]
        flops = G * (graphs["generate.init"].flops + gen.trips * graphs["generate.step"].flops
                     + graphs["generate.finish"].flops)
    except Exception:  # a bug here shows in `sexpgpu explain`, not as a failed hover
        return None
    state = f"state {fmt_bytes(_plist_bytes(gen.state))}" + (f" ×{S} stacked" if S > 1 else "")
    n = 3 if gen.finish is not None else 2
    return (f"generation: {gen.trips} trip{'s' if gen.trips != 1 else ''} · {n} graphs · {state} · "
            f"{fmt_flops(flops)} per step · live {fmt_bytes(live)}")


# =========================================================================== units and text


def parse_bytes(text: str) -> int:
    """`16GiB`, `80 GB`, `512MiB`, `1.5e9` (bytes) to a byte count; ValueError for anything else."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?:([KMGT])(i?)B?|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"cannot read {text!r} as a size; write e.g. 16GiB, 80GB or 512MiB")
    scale = 1
    if m.group(2):
        scale = (1024 if m.group(3) else 1000) ** ("KMGT".index(m.group(2).upper()) + 1)
    return int(float(m.group(1)) * scale)


def fmt_bytes(n: float) -> str:
    """Bytes as the report prints them: B, KiB, MiB, and GiB from 0.1 GiB on (`0.4 GiB`)."""
    n = float(n)
    if n < 1024:
        return f"{int(n)} B"
    if n < 1024 ** 2:
        return f"{n / 1024:.1f} KiB"
    if n < 0.1 * 1024 ** 3:
        return f"{n / 1024 ** 2:.1f} MiB"
    return f"{n / 1024 ** 3:.1f} GiB"


def fmt_flops(n: float) -> str:
    """FLOPs with an SI prefix: `32.3 MFLOP`."""
    for scale, unit in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} FLOP"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def to_text(report: dict) -> str:
    """The report as `sexpgpu explain` prints it: the step as a tree of graphs, the lowering report
    (rows, the `generation` and `memory` lines), the memory plan, and XLA's numbers when present."""
    st = report["step"]
    S, G, M = st["stack"], st["groups"], st["microbatches"]
    xla = report.get("xla") or {}
    xg = xla.get("graphs") or {}
    how = _plural(M, "microbatch", "microbatches")
    if S > 1:
        how += f", stacked {S} per call ({_plural(G, 'call')})"
    lines = [f"step of {report['file']}: {how}; {st['optimizer']}, {st['precision']}"
             + ("" if st.get("target", "accelerator") == "accelerator" else
                f"; live sets for the {st['target']} target")]
    mesh = report.get("mesh")
    entries = [(g, False) for g in report["graphs"]] + [(p, True) for p in report["passes"]]
    for k, (g, is_pass) in enumerate(entries):
        branch, pad = ("└─ ", "   ") if k == len(entries) - 1 else ("├─ ", "│  ")
        if is_pass:
            lines.append(branch + f"{g['name']}  every {_plural(g['every'], 'step')}, "
                         f"{_plural(g['batches'], 'batch', 'batches')} of `{g['loader']}`, no gradient")
            subs = g["generator"] + [dict(g, name="prepare, objective")]
            for j, s in enumerate(subs):
                b2, p2 = ("└─ ", "   ") if j == len(subs) - 1 else ("├─ ", "│  ")
                title = s["name"].replace(g["name"] + " ", "") + (f"  ×{s['trips']} trips" if s["trips"] else "")
                lines.append(pad + b2 + title)
                lines += _graph_body(s, pad + p2, xg.get(s["name"] if j < len(subs) - 1 else g["name"]), mesh)
            continue
        title = g["name"] + (f"  stacked ×{g['stack']}" if g["stack"] > 1 else "")
        if g["trips"]:
            title += f"  ×{g['trips']} trips"
        title += f"  ({_plural(g['calls_per_step'], 'call')} per step)"
        lines.append(branch + title)
        lines += _graph_body(g, pad, xg.get(g["name"]), mesh)
    lines += ["", "lowering report"]
    table = [("row", "degree", "graphs", "calls", "FLOPs", "moved", "live set")]
    for r in report["lowering"]:
        if r["calls_per_step"] is None:
            calls = f"{r['calls_per_pass']} per pass, every {_plural(r['every'], 'step')}"
            flops, moved = r["flops_per_pass"], r["bytes_per_pass"]
        else:
            calls, flops, moved = f"{r['calls_per_step']} per step", r["flops_per_step"], r["bytes_per_step"]
        table.append((r["row"], str(r["degree"]), str(r["graphs"]), calls, fmt_flops(flops), fmt_bytes(moved),
                      fmt_bytes(r["live"])))
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    for row in table:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    lines.append(f"  step: {fmt_flops(st['flops'])} · {fmt_bytes(st['bytes_moved'])} moved")
    gen = report["generation"]
    if gen is not None:
        state = f"state {fmt_bytes(gen['state_bytes'])}"
        if gen["degree"] > 1:
            state += f" ×{gen['degree']} stacked = {fmt_bytes(gen['state_bytes_stacked'])}"
        lines.append(f"generation: {_plural(gen['trips'], 'trip')} · {gen['graphs']} graphs · "
                     f"{gen['calls_per_step']} calls per step · {state} · made {fmt_bytes(gen['made_bytes'])} per copy")
    mem = report["memory"]

    def memory_parts(m: dict) -> str:
        parts = [f"params {fmt_bytes(m['params'])}", f"optimizer {fmt_bytes(m['optimizer'])}"]
        if m["gradients_held"]:
            parts.append(f"gradients {fmt_bytes(m['gradients_held'])}")
        if gen is not None:
            parts.append(f"generation {fmt_bytes(m['generation'])}")
        parts.append(f"train {fmt_bytes(m['train'])}")
        if report["passes"]:
            parts.append(f"passes {fmt_bytes(m['passes'])}")
        return " · ".join(parts + [f"peak {fmt_bytes(m['peak'])}"])

    if mesh:
        lines.append(f"memory per device (1 of data={mesh['devices']}): " + memory_parts(mesh["memory_per_device"]))
        lines.append(f"memory, all devices together: " + memory_parts(mem))
    else:
        lines.append("memory: " + memory_parts(mem))
    if mesh:
        per = ", ".join(f"`{k}` {v}" for k, v in mesh["records_per_device"].items())
        ins = ", ".join(f"{k} {v}" for k, v in mesh["shardings"].items())
        held = ""
        if mesh.get("shard_params") == "fsdp":
            held = (f"params per device {fmt_bytes(mesh['params_per_device'])}, optimizer per device "
                    f"{fmt_bytes(mesh['optimizer_per_device'])} · ")
        lines.append(f"mesh: data={mesh['devices']} · records per device: {per} · inputs: {ins} · {held}"
                     f"peak per device about {fmt_bytes(mesh['peak_per_device'])}")
    lines += ["", "memory plan: bytes live in each phase beside the parameters and optimizer state"
              + (f", and the {fmt_bytes(mem['gradients_held'])} of earlier groups' gradients held for the update"
                 if mem["gradients_held"] else "")]
    width = max((len(p["phase"]) for p in report["plan"]), default=0)
    for p in report["plan"]:
        detail = " + ".join(f"{k} {fmt_bytes(v)}" for k, v in p["parts"].items() if v)
        lines.append(f"  {p['phase']:<{width}}  {fmt_bytes(p['live']):>10}   {detail}")
    fit_peak = f"peak {fmt_bytes(mem['peak'])}" if not mesh else \
        f"peak per device {fmt_bytes(mesh['peak_per_device'])}"
    lines.append(f"  {fit_peak} {'fits' if mem['fits'] else 'does NOT fit'} in "
                 f"{fmt_bytes(mem['budget'])} ({mem['budget_source']})")
    if mem["donate"]:
        lines.append("  the trips' state and the update's inputs are donated, as the runtime does on an accelerator")
    auto = report.get("stack_auto")
    if auto:
        if auto["reason"]:
            lines.append(f":stack :auto: degree 1: {auto['reason']}")
        else:
            peaks = ", ".join(f"{c['degree']}: {fmt_bytes(c['peak'])}" + ("" if c["fits"] else " (too big)")
                              for c in auto["candidates"])
            lines.append(f":stack :auto: degree {auto['chosen']}, the largest whose peak fits "
                         f"{fmt_bytes(auto['budget'])} (peak by degree: {peaks})")
    lines += ["note: " + n for n in report.get("notes") or []]
    if xla:
        lines += ["", f"XLA on {xla['device']} ({xla['backend']}): {xla['summary']}"]
        lines += ["  " + n for n in xla.get("notes", [])]
    return "\n".join(lines)


def _io_text(items: list[dict]) -> str:
    return ", ".join(f"{i['name']} {i['type']}".rstrip() for i in items if i["bytes"] or i["name"] != "params")


def _graph_body(g: dict, pad: str, x: dict | None, mesh: dict | None = None) -> list[str]:
    lv = g["live"]
    out = [pad + "  in   " + _io_text(g["inputs"])]
    if mesh:
        out.append(pad + "  shard " + ", ".join(f"{k} {v}" for k, v in graph_shardings(mesh, g).items()))
    out += [pad + "  out  " + _io_text(g["outputs"]),
            pad + f"  cost {fmt_flops(g['flops'])} · {fmt_bytes(g['bytes_moved'])} moved · live "
                  f"{fmt_bytes(lv['total'])} (args {fmt_bytes(lv['args'])}, out {fmt_bytes(lv['outputs'])}, "
                  f"temps {fmt_bytes(lv['temps'])})"]
    if x and x.get("error"):
        out.append(pad + f"  xla  could not compile: {x['error']}")
    elif x:
        out.append(pad + f"  xla  {fmt_flops(x['flops'])} · {fmt_bytes(x['bytes_accessed'])} accessed · live "
                         f"{fmt_bytes(x['live'])} (args {fmt_bytes(x['args'])}, out {fmt_bytes(x['outputs'])}, "
                         f"temps {fmt_bytes(x['temps'])})")
    return out
