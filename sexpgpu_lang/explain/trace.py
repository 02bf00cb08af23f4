"""The symbolic trace: one graph's nodes, built by walking phases' IR as the runtime's evaluator does.

`Trace` is an `ir.Interpreter`, as `sexpgpu_runtime.lowering.lowering.evaluate` is:
the same walk and environments, but each registry op makes one `Node` with
the type its rule gave and its cost (`cost.COSTS`) instead of a JAX array.
An op repeated on the same inputs is one node, as XLA's CSE makes it. A
repeated block's layers are traced one after another (a scan's N iterations
of one body: N times its FLOPs and residuals), each reading its layer's slice
of the stacked parameters; nodes of a rematerialised call carry its region.

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

from .. import ir
from ..language import CONTEXT_KEYS
from ..records import Record
from ..source import Span
from ..types import PlistType, TensorType, Type, is_float
from ..check.lora import low_rank_subscripts
from ..mesh import model_dim, shard_overrides
from .cost import COSTS, Cost, einsum_layout, einsum_operands
from .split import by_letters, contraction, letters, propagate

#: a comparison of two numbers known while tracing, made as `sexpgpu_runtime`'s lowering makes it (a
#: constant, so that a `where` on it is the branch it selects)
_COMPARE = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


@dataclass(eq=False, repr=False)
class Node(Record):
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
    remat: tuple[int, str] | None = None   # computed inside a rematerialised call: (its region, its policy)
    scan: bool = False   # computed in the body of a repeated block's scan without remat (`Trace.repeat`)
    span: Span | None = None   # the op of the file that made it (None: an argument, a parameter, a gradient)
    split: tuple[int, ...] = ()   # the axes the `model` axis splits (`split.propagate`); () whole
    ways: int = 1                 # the `model` axis' size when the trace counts one device's share

    @property
    def nbytes(self) -> int:
        """Bytes of one copy (one device's share along `model` when the trace counts per device)."""
        return self.type.nbytes // self.ways if self.split else self.type.nbytes

    def bytes_at(self, stack: int) -> int:
        """Bytes held under a stack of `stack` copies."""
        return self.nbytes * (stack if self.per_copy else 1)


@dataclass(eq=False, repr=False)
class _Unmerged(Record):
    """An adapted weight read unmerged in the training step's forward (LoRA dropout: the runtime's
    sexpgpu_runtime/lowering/lora.py `LoraWeight`): the base `w`, the adapters `a` `[in r]` and `b`
    `[r out]` (read in the call's compute dtype), `fold` making the folded weight where an op other
    than a contraction reads it, `in_axes`, `scale`."""

    w: Node
    a: Node
    b: Node
    fold: object
    in_axes: int
    scale: float


class _ParamView:
    """A model's `self`: the parameter subtree at `path`, cast to `compute` dtype on read (bf16);
    `layers`: (stacked path, layer) for each repeated block being applied, whose leaves read as
    that layer's slice of the stack; `adapters`: each LoRA target key of this subtree, its scale and
    dropout (`ir.ModelCall.adapters`), read as the runtime's fold (`_adapted`), or in the training
    graph where the dropout is over 0 unmerged (`_Unmerged`, which `Trace.unmerged` lowers)."""

    def __init__(self, tracer: "Trace", path: tuple[str, ...], compute: str | None,
                 layers: tuple[tuple[tuple[str, ...], int], ...] = (), adapters: tuple = ()):
        self.tracer, self.path, self.compute, self.layers = tracer, path, compute, layers
        self.adapters = {k: (scale, p) for k, scale, p in adapters}

    def at(self, path: tuple[str, ...], compute: str | None, adapters: tuple = ()) -> "_ParamView":
        """The view of the subtree at `path` (from the root), read in `compute` dtype."""
        return _ParamView(self.tracer, path, compute, self.layers, adapters)

    def _leaf(self, path: tuple[str, ...]) -> Node:
        node = self.tracer.param(path)
        for prefix, i in self.layers:
            if path[:len(prefix)] == prefix:
                node = self.tracer.layer_slice(node, i)
        return node

    def _adapted(self, key: str, w: Node) -> Node:
        """`KEY + scale * reshape(KEY.lora-a @ KEY.lora-b)` cast to KEY's dtype, as the runtime folds
        an adapter into its weight on every call (sexpgpu_runtime/lowering/lowering.py `adapted`): the
        product in f32, its gradient reaching A and B."""
        tr = self.tracer
        a, b = (self._leaf(self.path + (key + suffix,)) for suffix in (".lora-a", ".lora-b"))
        prod_t = TensorType(a.type.shape[:-1] + b.type.shape[-1:], "f32")
        prod = tr.new("matmul", prod_t, (a.id, b.id), COSTS["matmul"].flops([a.type, b.type], prod_t, {}))
        scaled = tr.new("*", prod_t, (prod.id,), COSTS["*"].flops([prod_t], prod_t, {}),
                        static={"scale": self.adapters[key][0]})
        delta = tr.new("reshape", TensorType(w.type.shape, "f32"), (scaled.id,))
        if w.type.dtype != "f32":
            t = TensorType(w.type.shape, w.type.dtype)
            delta = tr.new("cast", t, (delta.id,), COSTS["cast"].flops([delta.type], t, {"dtype": w.type.dtype}),
                           static={"dtype": w.type.dtype})
        return tr.new("+", w.type, (w.id, delta.id), COSTS["+"].flops([w.type, delta.type], w.type, {}))

    def get(self, key: str):
        path = self.path + (key,)
        if path in self.tracer.param_leaves:
            node = self._leaf(path)
            if key in self.adapters and self.tracer.training and self.adapters[key][1] > 0:
                return self._unmerged(key, node)
            if key in self.adapters:
                node = self._adapted(key, node)
            if self.compute and is_float(node.type.dtype) and node.type.dtype != self.compute:
                return self.tracer.cast_value(node, self.compute) if key in self.adapters \
                    else self.tracer.cast_param(node, self.compute)
            return node
        if any(p[:len(path)] == path for p in self.tracer.param_leaves):
            return _ParamView(self.tracer, path, self.compute, self.layers)
        return None


    def _unmerged(self, key: str, w: Node) -> _Unmerged:
        """`KEY` read unmerged: its base and adapters in the call's compute dtype."""
        a, b = (self._leaf(self.path + (key + suffix,)) for suffix in (".lora-a", ".lora-b"))
        if self.compute:
            w, a, b = (self.tracer.cast_param(n, self.compute) if is_float(n.type.dtype)
                       and n.type.dtype != self.compute else n for n in (w, a, b))
        base = self._leaf(self.path + (key,))

        def fold() -> Node:
            folded = self._adapted(key, base)
            return self.tracer.cast_value(folded, self.compute) if self.compute else folded

        k = next((i for i in range(1, w.type.rank) if _prod(w.type.shape[:i]) == a.type.shape[0]), 1)
        return _Unmerged(w, a, b, fold, k, self.adapters[key][0])


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


class Trace(ir.Interpreter):
    """Builds the node list of one graph by walking phases' IR the way the runtime's evaluator does."""

    def __init__(self, program: ir.Program, selected: frozenset = frozenset(), in_generator: bool = False,
                 model: int = 1, arg_splits: dict | None = None, training: bool = False):
        """`model`: with more than 1, each node's split along a `model` axis of that size (`split.propagate`)
        and its bytes one device's share; `arg_splits`: the split of each argument by its role
        (`state:k`: a generator state's cache split by heads); `training`: the training step's forward,
        where LoRA adapters with dropout are read unmerged (`_Unmerged`)."""
        super().__init__(selected, in_generator)
        self.program = program
        self.training = training
        self.ways = model
        self.arg_splits = dict(arg_splits or {})
        self.overrides = shard_overrides(program, model) if model > 1 else {}
        self.nodes: list[Node] = []
        self.outputs: list[tuple[str, int]] = []
        self.param_leaves = {p.path: p for p in program.params}
        self.param_nodes: dict[tuple, Node] = {}
        self.casts: dict[tuple, Node] = {}
        self.cse: dict = {}
        self.counters: dict[str, list] = {}
        self.rows: Node | None = None
        self.scans: list[dict] = []         # each repeated block applied: {model, path, layers, remat}
        self.regions: list[dict] = []       # each rematerialised call: {policy, inputs (node ids)}
        self.region: tuple[int, str] | None = None   # the rematerialised call being traced
        self.scanning = False   # tracing the body of a scan without remat
        self.site: Span | None = None   # the op being traced: where the nodes made now come from (`Node.span`)

    # -- nodes ---------------------------------------------------------------------------------
    def new(self, op: str, t: TensorType, inputs=(), cost=Cost(), per_copy=None, role="", static=None,
            split: tuple[int, ...] | None = None) -> Node:
        """A node; an op already computed on the same inputs is reused, as XLA's CSE reuses it. `split`: its
        split along `model` (else propagated from its inputs' when the trace counts per device)."""
        ins = tuple(inputs)
        pc = any(self.nodes[i].per_copy for i in ins) if per_copy is None else per_copy
        t = t.strong() if isinstance(t, TensorType) else t
        key = None
        if op not in ("arg", "param", "grad", "sample"):
            key = (op, t, ins, pc, repr(sorted((static or {}).items())))
            if key in self.cse:
                return self.cse[key]
        n = Node(len(self.nodes), op, t, ins, cost, pc, role, static or {}, self.region,
                 self.scanning and self.region is None, None if op in ("arg", "param", "grad", "sample") else self.site)
        if self.ways > 1 and isinstance(t, TensorType):
            n.ways = self.ways
            n.split = split if split is not None else propagate(
                op, t.shape, [(self.nodes[i].type.shape, self.nodes[i].split) for i in ins], static or {}, self.ways)
        self.nodes.append(n)
        if key is not None:
            self.cse[key] = n
        return n

    def arg(self, role: str, t: TensorType, per_copy: bool) -> Node:
        return self.new("arg", t, per_copy=per_copy, role=role, split=self.arg_splits.get(role, ()))

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
        (sexpgpu_runtime.lowering.graphs `unpack_ctx`); jit drops it where no scalar is read."""
        if self.rows is None:
            self.rows = self.arg("ctx", TensorType((len(CONTEXT_KEYS),), "i64"), True)
        return {k: self.new("slice", TensorType((), d), (self.rows.id,), per_copy=per_copy, static={"ctx": k})
                for k, d in CONTEXT_KEYS}

    def param(self, path: tuple) -> Node:
        if path not in self.param_nodes:
            p = self.param_leaves[path]
            self.param_nodes[path] = self.new("param", TensorType(p.shape, p.dtype), per_copy=False,
                                              role="frozen" if p.frozen else "param", static={"path": path},
                                              split=self.param_split(path))
        return self.param_nodes[path]

    def param_split(self, path: tuple) -> tuple[int, ...]:
        """The axis the `model` axis splits a parameter along (sexpgpu_lang.mesh.model_dim), as a split."""
        if self.ways <= 1:
            return ()
        p = self.param_leaves[path]
        d = model_dim(".".join(path), tuple(p.shape), self.ways, self.overrides)
        return () if d is None else (d,)

    def layer_slice(self, node: Node, i: int) -> Node:
        """Layer `i` of a stacked parameter `node` (`[N ...]` to `[...]`): what a scan's body reads."""
        t = TensorType(node.type.shape[1:], node.type.dtype)
        split = () if 0 in node.split else tuple(a - 1 for a in node.split)
        return self.new("slice", t, (node.id,), COSTS["slice"].flops([node.type], t, {}), per_copy=False,
                        static={"layer": i}, split=split)

    def cast_param(self, node: Node, dtype: str) -> Node:
        key = (node.id, dtype)
        if key not in self.casts:
            t = TensorType(node.type.shape, dtype)
            self.casts[key] = self.new("cast", t, (node.id,), COSTS["cast"].flops([node.type], t, {"dtype": dtype}),
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

    # -- the evaluator's hooks (ir.Interpreter walks the rest) -----------------------------------
    def phase(self, phase: ir.Phase, args: list):
        """Evaluate one phase on `args`, `self` being the root of the parameter tree."""
        env = dict(zip(phase.params, args))
        env[self.PARAMS] = _ParamView(self, (), None)
        return self.eval(phase.body, env)

    def getf(self, obj, key: str):
        return obj.get(key) if isinstance(obj, (dict, _ParamView)) else None

    def model_self(self, e: ir.ModelCall, params, args: list):
        if e.compute_dtype:
            args = [self.cast_value(a, e.compute_dtype) for a in args]
        return params.at(tuple(e.path), e.compute_dtype, e.adapters), args

    def call(self, e: ir.ModelCall, params, args: list):
        """A model call; under a remat policy its nodes are tagged with a new region (`Node.remat`),
        whose inputs (the call's arguments) the backward pass keeps to recompute the rest."""
        if e.remat in (None, "everything-saveable"):
            return super().call(e, params, args)
        outer = self.region
        inputs = [v.id for a in args for v in (a.values() if isinstance(a, dict) else [a]) if isinstance(v, Node)]
        self.region = (len(self.regions), e.remat)
        self.regions.append({"policy": e.remat, "inputs": inputs})
        try:
            return super().call(e, params, args)
        finally:
            self.region = outer

    def repeat(self, e: ir.Repeat, params, args: list):
        """A repeated block: its `e.count` layers traced one after another (each reading its slice
        of the stacked parameters), as the scan runs them; recorded in `scans`. Without remat its
        nodes are tagged `Node.scan`: the residuals JAX's linearisation of the body saves are the
        forward loop's stacked outputs, which XLA cannot fuse into the backward loop."""
        self.scans.append({"model": e.model, "path": ".".join(e.path), "layers": e.count,
                           "remat": e.remat or "everything-saveable"})
        carry, rest = args[0], list(args[1:])
        outer = self.scanning
        self.scanning = e.remat in (None, "everything-saveable")
        try:
            for i in range(e.count):
                carry = self.call(e, _ParamView(self, (), None, params.layers + ((tuple(e.path), i),)),
                                  [carry] + rest)
        finally:
            self.scanning = outer
        return carry

    def cast_value(self, v, dtype: str):
        if isinstance(v, Node) and is_float(v.type.dtype) and v.type.dtype != dtype:
            t = TensorType(v.type.shape, dtype)
            return self.new("cast", t, (v.id,), COSTS["cast"].flops([v.type], t, {"dtype": dtype}), static={"dtype": dtype})
        if isinstance(v, dict):
            return {k: self.cast_value(x, dtype) for k, x in v.items()}
        return v

    def report(self, e: ir.Report, v) -> None:
        """A counter's delta joins its parts; a metric or a computed diagnostic is an output (its mean)."""
        if e.kind == "counter":
            if isinstance(v, Node):
                t = TensorType((), v.type.dtype if v.type.dtype != "bool" else "i32")
                v = self.new("sum", t, (v.id,), COSTS["sum"].flops([v.type], t, {}))
            self.counters.setdefault(e.name, []).append(v)
            return
        if not isinstance(v, Node):
            return
        if v.type.rank:
            t = TensorType((), "f32")
            v = self.new("mean", t, (v.id,), COSTS["mean"].flops([v.type], t, {}))
        self.output(f"{e.kind}:{e.name}", v)

    def op(self, e: ir.Op, env):
        if isinstance(e.type, TensorType) and e.type.value is not None and e.type.shape == ():
            return e.type.value  # a compile-time constant: no computation
        args = [self.eval(a, env) for a in e.args]
        if e.name in _COMPARE and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
            return _COMPARE[e.name](*args)   # two numbers (`generalized-jsd`'s beta): no computation, as lowered
        if e.name == "where" and isinstance(args[0], bool):
            chosen = args[1] if args[0] else args[2]
            if isinstance(chosen, Node) and chosen.type.shape == e.type.shape:
                return chosen   # the lowering takes the branch a constant condition selects, alone
        if any(isinstance(a, _Unmerged) for a in args):
            outer, self.site = self.site, (self.stdlib_site[1] if self.stdlib_site else e.span)
            try:
                out = self.unmerged(e, args)
            finally:
                self.site = outer
            if out is not None:
                return out
            args = [a.fold() if isinstance(a, _Unmerged) else a for a in args]
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
        outer, self.site = self.site, (self.stdlib_site[1] if self.stdlib_site else e.span)
        try:
            return self._op_nodes(e, ins, types)
        finally:
            self.site = outer

    def _op_nodes(self, e: ir.Op, ins: list[int], types: list):
        """The nodes of one op of the file, on its evaluated inputs `ins` (ids) of types `types`."""
        cost = COSTS[e.name].flops(types, e.type, e.static)
        if isinstance(e.type, PlistType):  # top-k: :values and :indices
            out = {}
            for k, (key, t) in enumerate(e.type.entries):
                out[key] = self.new(e.name, t, ins, cost if k == 0 else Cost(), static=e.static)
            return out
        if not isinstance(e.type, TensorType):
            return None
        if e.name == "dot-product-attention" and len(ins) >= 3:
            return self.attention(e, ins, cost)
        if e.name == "einsum":
            lowered = self.einsum(e, ins, cost)
            if lowered is not None:
                return lowered
        return self.new(e.name, e.type, ins, cost, static=e.static)

    def unmerged(self, e: ir.Op, args: list) -> Node | None:
        """A contraction of an input x with an adapted weight read unmerged, as the runtime lowers it
        (sexpgpu_runtime/lowering/lora.py `contract`): `x W`, a mask of x's shape, x dropped out
        (`where`), `x' A'` and `(x' A') B'` (check/lora.py `low_rank_subscripts`; else `x'` with the
        folded weight), scaled and added. None for any other op (the weight is then read folded)."""
        operands = [a for a in args if isinstance(a, (Node, _Unmerged))]
        if e.name not in ("matmul", "einsum") or len(operands) != 2 or not isinstance(e.type, TensorType):
            return None
        at = [i for i, o in enumerate(operands) if isinstance(o, _Unmerged)]
        if len(at) != 1 or not isinstance(operands[1 - at[0]], Node):
            return None
        lw, x = operands[at[0]], operands[1 - at[0]]

        def contract(op: ir.Op, xn: Node, wn: Node) -> Node:
            pair = (xn, wn) if at[0] == 1 else (wn, xn)
            return self._op_nodes(op, [n.id for n in pair], [n.type for n in pair])

        base = contract(e, x, lw.w)
        mask_t = TensorType(x.type.shape, "bool")
        mask = self.new("bernoulli", mask_t, (), COSTS["bernoulli"].flops([mask_t], mask_t, {}), per_copy=True)
        dropped = self.new("where", x.type, (mask.id, x.id), COSTS["where"].flops([mask_t, x.type], x.type, {}))
        plan = low_rank_subscripts(e.name, e.static.get("subscripts"), at[0], lw.w.type.rank, x.type.rank,
                                   lw.in_axes)
        if plan is None:
            low = contract(e, dropped, lw.fold())
        else:
            k, r = lw.in_axes, lw.a.type.shape[-1]
            a2 = self.new("reshape", TensorType(lw.w.type.shape[:k] + (r,), lw.a.type.dtype), (lw.a.id,))
            b2 = self.new("reshape", TensorType((r,) + lw.w.type.shape[k:], lw.b.type.dtype), (lw.b.id,))
            lhs, rhs = plan[0].split("->")[0].split(",")
            sizes = dict(zip(lhs, dropped.type.shape)) | dict(zip(rhs, a2.type.shape))
            u_t = TensorType(tuple(sizes[c] for c in plan[0].split("->")[1]), e.type.dtype)
            u_op, v_op = (ir.Op(t, e.span, "einsum", static={"subscripts": sub})
                          for t, sub in ((u_t, plan[0]), (e.type, plan[1])))
            u = self._op_nodes(u_op, [dropped.id, a2.id], [dropped.type, a2.type])
            v = self._op_nodes(v_op, [u.id, b2.id], [u.type, b2.type])
            low = self.new("*", e.type, (v.id,), COSTS["*"].flops([e.type], e.type, {}), static={"scale": lw.scale})
        return self.new("+", e.type, (base.id, low.id), COSTS["+"].flops([e.type, e.type], e.type, {}))

    def attention(self, e: ir.Op, ins: list[int], cost: Cost) -> Node:
        """`dot-product-attention` as XLA runs JAX's implementation of it
        (jax/_src/nn/functions.py, `_dot_product_attention_xla`): the query's N heads grouped as
        [K G] by the key's K heads and mapped over G; the scores in f32 (a dot of the query and the
        key), scaled and masked into a buffer of the mapped shape [G B K T S] (a copy: it has
        another shape than the dot's output), a softmax, cast to the value's dtype, copied back out
        of the mapped layout (a transposing copy, G = 1 included: XLA's CPU buffer assignment shows
        it for code-lm.sx's attention), and a dot with the value; each dot with the copies XLA makes of operands and outputs not in its order
        (`einsum`). The entry's FLOPs are split between the two dots, its exponentials go to the
        softmax; `ins` is query, key, value and the mask when there is one."""
        q, k, v = (self.nodes[i] for i in ins[:3])
        b, t, n, h = q.type.shape
        s_len, kh = k.type.shape[1], k.type.shape[2]
        g = n // kh
        half = Cost(cost.flops / 2)

        def dot(subscripts: str, x: Node, y: Node, out: TensorType) -> Node:
            op = ir.Op(out, e.span, "einsum", static={"subscripts": subscripts})
            return self.einsum(op, [x.id, y.id], half) or self.new("einsum", out, (x.id, y.id), half, static=op.static)

        # XLA copies the value into the second dot's order before the first dot, as it does the key
        plan = einsum_layout("bnts,bsnh->btnh" if g == 1 else "bkgts,bskh->btkgh", 4 if g == 1 else 5, 4)
        if plan is not None and plan[1] is not None:
            names = "bsnh" if g == 1 else "bskh"
            sizes = dict(zip(names, v.type.shape))
            self.new("relayout", TensorType(tuple(sizes[c] for c in plan[1]), v.type.dtype), (v.id,),
                     static={"order": plan[1]}, split=by_letters(letters(v.split, names), plan[1]))
        if g == 1:
            scores = dot("btnh,bsnh->bnts", q, k, TensorType((b, n, t, s_len), "f32"))
        else:
            grouped = self.new("reshape", TensorType((b, t, kh, g, h), q.type.dtype), (q.id,))
            scores = dot("btkgh,bskh->bkgts", grouped, k, TensorType((b, kh, g, t, s_len), "f32"))
        scaled = self.new("*", scores.type, (scores.id,), static={"scale": e.static["scale"]})
        if e.static["causal"] or len(ins) > 3:
            scaled = self.new("where", scores.type, (scaled.id,) + tuple(ins[3:]))
        mapped_t = TensorType((g, b, kh, t, s_len), "f32")
        names = "bkts" if g == 1 else "bkgts"   # (one query head a KV head: n is k)
        mapped = self.new("relayout", mapped_t, (scaled.id,), static={"order": "gbkts"},
                          split=by_letters(letters(scaled.split, names), "gbkts"))
        probs = self.new("softmax", mapped_t, (mapped.id,), Cost(0.0, cost.transcendentals), static={"axis": -1})
        if v.type.dtype != "f32":
            probs = self.new("cast", TensorType(mapped_t.shape, v.type.dtype), (probs.id,), static={"dtype": v.type.dtype})
        if g == 1:
            probs = self.new("relayout", TensorType((b, n, t, s_len), probs.type.dtype), (probs.id,), static={"order": "bnts"},
                             split=by_letters(letters(probs.split, "gbkts"), "gbkts".replace("g", "")))
            return dot("bnts,bsnh->btnh", probs, v, e.type)
        probs = self.new("relayout", TensorType((b, kh, g, t, s_len), probs.type.dtype), (probs.id,), static={"order": "bkgts"},
                         split=by_letters(letters(probs.split, "gbkts"), "bkgts"))
        out = dot("bkgts,bskh->btkgh", probs, v, TensorType((b, t, kh, g, h), e.type.dtype))
        return self.new("reshape", e.type, (out.id,))

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
        lhs, rhs, _ = einsum_operands(e.static["subscripts"])
        sizes = dict(zip(lhs, x.type.shape))
        sizes.update(zip(rhs, y.type.shape))
        operands = []
        for node, order, names in ((x, lhs_order, lhs), (y, rhs_order, rhs)):
            if order is not None:
                node = self.new("relayout", TensorType(tuple(sizes[c] for c in order), node.type.dtype), (node.id,),
                                static={"order": order}, split=by_letters(letters(node.split, names), order))
            operands.append(node.id)
        dot_t = TensorType(tuple(sizes[c] for c in natural), e.type.dtype)
        dot = self.new("einsum", dot_t, operands, cost, static=dict(e.static, natural=natural),
                       split=contraction([(lhs, x.split), (rhs, y.split)], natural))
        if natural == out:
            return dot
        return self.new("relayout", e.type, (dot.id,), static={"order": out},
                        split=by_letters(letters(dot.split, natural), out))
