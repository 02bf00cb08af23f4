"""One graph's estimate: its FLOPs, what XLA materialises (the fusion schedule), the peak of its
temporaries and the bytes it moves, from a symbolic trace (`trace.Trace`).

Which values are materialised follows each op's `cost.OpCost` (its fusion
kind, whether it reads whole operands, what its gradient reads) and the
compiler modelled (`TARGETS`; docs/explain.md says what each assumes).

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ops import REGISTRY
from ..records import Record
from ..types import ITEMSIZE, is_float
from .cost import cost_of
from .trace import Node, Trace

#: The compilers the schedule models (`target`): an accelerator's (the default) and XLA's CPU backend.
TARGETS = ("accelerator", "cpu")
#: On the CPU: a reduction XLA hands to its library (`OpCost.library == "reduce"`) reads at least this
#: many f32 elements.
_LIBRARY_REDUCE_MIN = 32 * 1024


@dataclass(repr=False)
class GraphEstimate(Record):
    """The static estimate of one jitted graph at one stacking degree.

    Bytes: `args` (the inputs it reads; `param_args` of them parameters),
    `outputs`, `temps` (the peak of its temporaries; `largest_temp` the
    largest one), `aliased` (the outputs written into donated arguments'
    buffers: the trip's state, `jax.jit(donate_argnums=...)`, counted once, as
    XLA's `alias_size_in_bytes`), `live = args + outputs + temps - aliased`, and `bytes_moved`, the
    bytes read and written per call (XLA's "bytes accessed"). `flops` and
    `transcendentals` per call. `input_list` and `output_list` hold
    `{name, type, bytes}` for the tree; `scans` the repeated blocks the
    graph applies (`{model, path, layers, remat}`: one scan body each).
    `biggest` is the largest single buffer the graph holds, `(bytes, node)`:
    an argument or output with the stack axis, or one copy's temporary
    (what `sexpgpu run` names when a step could never fit).
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
    aliased: int = 0
    param_args: int = 0
    param_paths: set = field(default_factory=set)   # the parameters the graph reads (their paths)
    input_list: list = field(default_factory=list)
    output_list: list = field(default_factory=list)
    scans: list = field(default_factory=list)
    biggest: tuple[int, Node] | None = None
    splits: dict = field(default_factory=dict)   # each argument (by role) and output (by name) split along
    #                                             `model` (trace.Node.split), where the trace counts per device

    @property
    def live(self) -> int:
        """Arguments, outputs and the peak of temporaries, less the outputs held in donated arguments (bytes)."""
        return self.args + self.outputs + self.temps - self.aliased


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
    """Nodes on a path from a trainable parameter to the loss, through differentiable float ops (a
    frozen parameter, a `:copy` model's or a frozen teacher's called in the loss, starts none)."""
    from_param = [False] * len(nodes)
    for n in nodes:
        if not live[n.id] or not is_float(n.type.dtype):
            continue
        if n.op == "param":
            from_param[n.id] = n.role != "frozen"
        elif n.op not in ("arg", "param") and cost_of(n.op).differentiable:
            from_param[n.id] = any(from_param[i] for i in n.inputs)
    to_loss = [False] * len(nodes)
    to_loss[loss] = True
    for n in reversed(nodes):
        if to_loss[n.id] and from_param[n.id]:
            for i in n.inputs:
                to_loss[i] = True
    return [a and b for a, b in zip(from_param, to_loss)]


def _backward_flops(n: Node, nodes: list[Node], grad: list[bool]) -> float:
    """Extra FLOPs of the gradient through `n` (its `OpCost.grad_flops`), for the inputs that need one."""
    gins = [i for i in n.inputs if grad[i]]
    if not gins:
        return 0.0
    return cost_of(n.op).grad_flops(n.cost.flops, n.type.size, [nodes[i].type.size for i in gins])


#: Values not computed in the graph: arguments, parameters, the gradients the training graph returns,
#: and the few rows of `:samples` names it returns.
_INPUTS = ("arg", "param", "grad", "sample")


def recomputed(n: Node) -> bool:
    """Whether the backward pass recomputes `n` rather than keeping it: `n` is computed inside a
    rematerialised call whose policy does not save it (`nothing-saveable` saves nothing but the
    call's inputs; `dots-saveable` keeps matmul and einsum outputs, as `jax.checkpoint_policies`)."""
    if n.remat is None:
        return False
    return not (n.remat[1] == "dots-saveable" and n.op in ("matmul", "einsum"))


class _Schedule:
    """Which values XLA materialises, what each fusion reads, and the peak of temporaries.

    The schedule is the trace's order (a topological order, as XLA's
    default scheduler keeps for these straight-line graphs). A value is a
    fusion root when it is materialised; a fused value belongs to every
    root that reads it, so its materialised sources stay live until the
    last such root runs.
    """

    def __init__(self, nodes: list[Node], outputs: list[tuple[str, int]], live: list[bool],
                 grad: list[bool] | None = None, target: str = "accelerator", regions=()):
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
        self.nodes, self.live, self.grad, self.target = nodes, live, grad, target
        self.regions = list(regions)   # the rematerialised calls (`Trace.regions`)
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
            if self.live[n.id] and cost_of(n.op).whole_operands:
                for i in n.inputs:
                    out[self._through_views(i)] = True
            if self.live[n.id] and n.op == "at-set" and n.inputs and self._constant(n.inputs[0]):
                out[self._through_views(n.inputs[0])] = True
            if self.target == "cpu" and self.live[n.id] and self._library_reduce(n):
                for j in self._library_inputs(n.id):
                    out[j] = True
        return out

    def _constant(self, i: int) -> bool:
        """Whether value `i` is a constant XLA broadcasts (`zeros`, `full` ...: no argument under it).
        A scatter (`at-set`) into one writes into a buffer of its own that the broadcast fills first
        (the prefill's empty key-value caches); a scatter into a slice of an argument is written in place."""
        n = self.nodes[i]
        if n.op in _INPUTS:
            return False
        return all(self._constant(j) for j in n.inputs)

    def _through_views(self, i: int) -> int:
        while cost_of(self.nodes[i].op).see_through:
            i = self.nodes[i].inputs[0]
        return i

    def _library_reduce(self, n: Node) -> bool:
        """On the CPU, whether reduction `n` runs in the library: an f32 sum, mean, max or min (or
        logsumexp, a max and a sum) of at least `_LIBRARY_REDUCE_MIN` elements (XLA's own rule), counted
        in one copy: a stacked graph's copies each reduce an operand of the unstacked shape
        (sexpgpu_runtime/lowering/stacking.py), so stacking never moves a reduction into the library."""
        if cost_of(n.op).library != "reduce" or n.type.dtype != "f32" or not n.inputs:
            return False
        x = self.nodes[n.inputs[0]]
        return x.type.dtype == "f32" and x.type.size >= _LIBRARY_REDUCE_MIN

    def _library_inputs(self, r: int) -> set[int]:
        """On the CPU, the buffers the library fusion of reduction `r` reads. XLA's CPU backend runs the
        reduction in YNNPACK and grows that fusion up through elementwise ops the library has
        (`OpCost.library == "elementwise"`) whose every reader is in the fusion; any other value it reads (a
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
            if cost_of(n.op).library == "elementwise" and j not in self.out_ids and set(self.users[j]) <= inside:
                inside.add(j)
                todo.extend(n.inputs)
            else:
                frontier.add(j)
        return frontier

    def _materialised(self, n: Node, operand: bool, srcs: frozenset[int]) -> bool:
        c = cost_of(n.op)
        if n.nbytes == 0 or c.fusion == "view":
            return False
        if self.target == "cpu" and n.op == "softmax" and self._fused_into_matmul(n):
            return False
        if n.id in self.out_ids or c.fusion == "root" or operand:
            return True
        if self.grad is not None and self.grad[n.id] and c.fusion == "expensive":
            return True  # read again by its gradient, and too costly to recompute there
        # A value read by several fusions: XLA recomputes a cheap one in each (it duplicates it)
        # unless it is expensive or stands on other materialised values.
        return len(self.users[n.id]) > 1 and (c.fusion == "expensive" or bool(srcs)) and c.duplicable

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
            count[i] = k * (2 if cost_of(n.op).multi_read and k else 1)
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
        """(peak bytes of temporaries, bytes read and written, the largest temporary) under `stack` copies
        (`_copies`: the copies' fusions side by side, each buffer one copy's)."""
        nodes, mat = self.nodes, self.mat
        roots = self._order([n.id for n in nodes if mat[n.id]])
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
        spans += [(pos[r], last[r], nodes[r].nbytes, nodes[r].per_copy) for r in roots if r not in self.out_ids]
        spans += self._shift_spans(roots, pos)
        spans, end = _copies(spans, stack), end * stack
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
                for c in range(stack):   # each copy writes its part of the stacked output
                    made[pos[r] * stack + c] += nodes[r].nbytes
        peak = cur = done = 0
        for d, m in zip(delta, made):
            cur += d
            done += m
            peak = max(peak, cur + done)
        return peak - done, moved, largest

    def _order(self, roots: list[int]) -> list[int]:
        """The fusions' schedule: the trace's order; on the CPU, in a graph without a gradient, by depth
        (the longest chain of fusions under each, ties in trace order): XLA's CPU scheduler runs
        independent chains side by side, step by step (lora.sx's pass computes both models' logits,
        the student's and the frozen base's, before either loss reads them)."""
        if self.target != "cpu" or self.grad is not None:
            return roots
        depth: dict[int, int] = {}
        for r in roots:
            depth[r] = 1 + max((depth[s] for s in self.reads(r)), default=0)
        return sorted(roots, key=lambda r: depth[r])

    def _readers(self, i: int) -> set[int]:
        """The nodes that read value `i`, through views (reshapes, squeezes)."""
        out: set[int] = set()
        for u in self.users[i]:
            out |= self._readers(u) if cost_of(self.nodes[u].op).fusion == "view" else {u}
        return out

    def _shift_spans(self, roots: list[int], pos: dict) -> list[tuple[int, int, int, bool]]:
        """On the CPU, the shifted operand of a cross-entropy outside the gradient (`OpCost.shifted`): a
        buffer of the logits' size while the op runs, unless the logits are a buffer the graph computes
        whose one reader is the op (XLA then writes the shifted values into it: the library fusion of
        the matmul, the max and the subtraction). So logits read by an argmax or a metric beside the
        loss are held twice, as XLA's buffer assignment of examples/gpt2.sx's held-out pass shows. On
        the gradient path the gradient's residual of the op's size (`inner_residual`) is that buffer."""
        if self.target != "cpu":
            return []
        spans = []
        for r in roots:
            k = cost_of(self.nodes[r].op).shifted
            if k is None or (self.grad is not None and self.grad[r]):
                continue
            x = self.nodes[self._through_views(self.nodes[r].inputs[k])]
            if x.op in _INPUTS or x.id in self.out_ids or self._readers(x.id) != {r}:
                # f32 whatever the logits' dtype: the lowering casts them first
                spans.append((pos[r], pos[r], x.type.size * ITEMSIZE["f32"], x.per_copy))
        return spans

    def _backward(self, stack: int, t0: int, pos: dict, last: dict) -> tuple[list, float, int]:
        """The gradient, in reverse trace order after the forward roots: a residual (a forward value
        the gradient reads) stays live until the backward of the op that reads it; a materialised
        value's cotangent lives from its last reader's backward to its own. Cotangents are per copy.
        Spans are (first, last, one copy's bytes, per copy), as `peak` builds them."""
        nodes, grad, mat = self.nodes, self.grad, self.mat
        order = [n.id for n in reversed(nodes) if grad[n.id] and self.live[n.id] and n.op not in _INPUTS]
        spans: list[tuple[int, int, int]] = []
        moved = 0.0
        ct_from: dict[int, int] = {}
        regions: dict[int, int] = {}   # a rematerialised call: when its backward (and recomputation) starts
        t = t0
        for i in order:
            n = nodes[i]
            c = cost_of(n.op)
            needed = set() if c.backward == "cotangent" else set(self.reads(i))
            if n.op == "*" and len(n.inputs) == 1:
                needed = set()   # a scale by a constant: its gradient is the cotangent scaled
            if isinstance(c.inner_residual, int):  # it reads its inner value, not that operand
                needed -= self.src[n.inputs[c.inner_residual]]
            if mat[i] and (c.backward == "output" or c.fusion == "expensive"):
                needed.add(i)
            if self.target == "cpu" and n.op == "cross-entropy" and n.inputs:
                # XLA's CPU schedule computes the loss (the logit at the label less the log of the
                # sum) after cross-entropy's cotangent: the logits live until then
                needed |= self.src[n.inputs[0]]
            if n.remat is not None:
                # Remat: the call's inputs are kept until its backward; what it recomputes lives
                # from the start of its backward to its use, not from the forward.
                start = regions.setdefault(n.remat[0], t)
                needed |= {r for r0 in self.regions[n.remat[0]]["inputs"] for r in {r0} | self.src[r0] if r in last}
                for r in [r for r in needed if r in last and recomputed(nodes[r]) and nodes[r].remat == n.remat]:
                    needed.discard(r)
                    spans.append((start, t, nodes[r].nbytes, nodes[r].per_copy))
            if mat[i] and c.inner_residual is not None:
                inner = n if c.inner_residual == "output" else nodes[n.inputs[c.inner_residual]]
                spans.append((regions[n.remat[0]] if recomputed(n) else pos[i], t, inner.nbytes, inner.per_copy))
            if mat[i] and n.scan and c.scan_residuals:   # what JAX saves of it in a scan's body
                spans.append((pos[i], t, c.scan_residuals * n.nbytes, n.per_copy))
            if c.scatter is not None and n.inputs and grad[n.inputs[c.scatter]]:
                spans.append((t, t, nodes[n.inputs[c.scatter]].nbytes, True))
            for r in needed:
                if r in last:
                    last[r] = max(last[r], t)
            size = n.nbytes * stack
            if mat[i]:
                spans.append((ct_from.get(i, t), t, n.nbytes, True))   # cotangents are per copy
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


def _copies(spans: list[tuple[int, int, int, bool]], stack: int) -> list[tuple[int, int, int]]:
    """The live spans of a stacked graph, (first, last, bytes) in fusion steps, from those of one copy
    ((first, last, one copy's bytes, per copy) in the unstacked schedule's steps). A stacked training
    graph holds `stack` copies of the unstacked body (sexpgpu_runtime/lowering/stacking.py `copy_of`),
    independent but for what they read of the parameters, and XLA's scheduler runs them side by side: step `t` of the unstacked
    schedule becomes steps `t*S ... t*S + S-1`, copy `c`'s fusion at `t*S + c`. So a per-copy value
    is `stack` buffers of one copy's size, copy `c`'s live from `a*S + c` to `b*S + c` (copy 0's
    buffer freed before copy 1's next fusion runs, where `jax.vmap`'s one [S ...] buffer lived as
    long as the last copy's); a shared value (the parameters' alone) is computed once and read by
    every copy."""
    if stack <= 1:
        return [(a, b, size) for a, b, size, _ in spans]
    out = []
    for a, b, size, per_copy in spans:
        if per_copy:
            out += [(a * stack + c, b * stack + c, size) for c in range(stack)]
        else:
            out.append((a * stack, b * stack + stack - 1, size))
    return out


def estimate_graph(name: str, trace: Trace, stack: int, loss: int | None = None,
                   target: str = "accelerator", loop: bool = False) -> GraphEstimate:
    """The estimate of one traced graph under `stack` copies; with `loss`, the training graph:
    the forward, and the gradient of `loss` with respect to every trainable parameter. `target`
    is the compiler the live set models (`TARGETS`; docs/explain.md says what each assumes).
    `loop`: the copies run one after another in a loop (the generator's phases,
    sexpgpu_runtime/lowering/stacking.py `over_copies`), so the temporaries are one copy's and each trip
    moves one copy's bytes; else side by side (`_copies`)."""
    nodes = trace.nodes
    live = _live_nodes(nodes, trace.outputs)
    grad = _grad_nodes(nodes, live, loss) if loss is not None else None
    schedule = _Schedule(nodes, trace.outputs, live, grad, target, trace.regions)
    if loop:
        temps, moved, largest = schedule.peak(1)
        moved *= stack
    else:
        temps, moved, largest = schedule.peak(stack)
    g = GraphEstimate(name, stack)
    for n in nodes:
        if not live[n.id]:
            continue
        k = stack if n.per_copy else 1
        g.flops += n.cost.flops * k
        g.transcendentals += n.cost.transcendentals * k
        if grad is not None and grad[n.id]:
            g.flops += _backward_flops(n, nodes, grad) * stack  # cotangents are per copy
            if recomputed(n):
                g.flops += n.cost.flops * k   # the forward again, in the backward pass
        if n.op in ("arg", "param"):
            g.args += n.bytes_at(stack)
            if n.op == "param":
                g.param_args += n.bytes_at(stack)
                g.param_paths.add(tuple(n.static["path"]))
    for _, i in trace.outputs:
        g.outputs += nodes[i].nbytes * stack  # every output is returned with the stack axis (restacked)
    g.temps = temps
    g.largest_temp = largest
    g.bytes_moved = moved
    g.scans = list(trace.scans)
    if trace.ways > 1:
        g.splits = {n.role: n.split for n in nodes if n.op == "arg" and n.split}
        g.splits.update({name: nodes[i].split for name, i in trace.outputs if nodes[i].split})
    g.biggest = _biggest(nodes, live, schedule, stack)
    return g


def _biggest(nodes: list[Node], live: list[bool], schedule: _Schedule, stack: int) -> tuple[int, Node] | None:
    """The largest buffer of a graph, (bytes, node): an argument or parameter it reads, an output
    (with the stack axis), or a value it materialises (one copy's: the copies' buffers are apart)."""
    best = None
    for n in nodes:
        if not live[n.id]:
            continue
        if n.op in _INPUTS or n.id in schedule.out_ids:
            size = n.nbytes * stack if n.id in schedule.out_ids else n.bytes_at(stack)
        elif schedule.mat[n.id]:
            size = n.nbytes
        else:
            continue
        if best is None or size > best[0]:
            best = (size, n)
    return best
