"""The step's graphs: each graph the runtime jits (`generate.init`, `generate.step`,
`generate.finish`, `train`, `update`, each pass), traced and estimated at one stacking degree,
with its inputs and outputs for the report's tree; and the bytes of parameters and optimizer state.

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

from .. import ir
from ..types import ITEMSIZE, PlistType, TensorType, Type
from .cost import Cost
from .schedule import GraphEstimate, estimate_graph
from .text import fmt_bytes
from ..language import CONTEXT_KEYS
from .trace import Node, Trace
from ..mesh import model_dim, shard_overrides


def layout_stack(program: ir.Program, stack: int | None = None) -> int:
    """The stacking degree the runtime uses (sexpgpu_runtime.lowering.graphs `layout_of`), or `stack` when given:
    1 when a generator reads a per-microbatch context key (W-STACK-001) or the degree does not
    divide `:microbatches`."""
    run = program.run
    s = run.stack if stack is None else stack
    if not program.stackable or s < 1 or run.microbatches % s:
        return 1
    return s


def param_bytes(program: ir.Program, frozen: bool | None = None, model: int = 1) -> int:
    """Bytes of the run's parameters: all of them, or only the frozen (`True`) or trainable (`False`) ones;
    with `model` > 1, what one device of a `model` axis of that size holds (a split parameter 1/model,
    sexpgpu_lang.mesh.model_dim)."""
    over = shard_overrides(program, model) if model > 1 else {}

    def held(p) -> int:
        b = TensorType(p.shape, p.dtype).nbytes
        return b // model if model > 1 and model_dim(".".join(p.path), tuple(p.shape), model, over) is not None else b
    return sum(held(p) for p in program.params if frozen is None or p.frozen == frozen)


def split_bytes(t: Type | None, splits: dict, role: str, model: int) -> int:
    """`plist_bytes` of a plist whose entries `splits` names `ROLE:KEY`, a split one 1/model (one device's)."""
    if not isinstance(t, PlistType):
        return plist_bytes(t)
    return sum(v.nbytes // (model if splits.get(f"{role}:{k}") else 1)
               for k, v in t.entries if isinstance(v, TensorType))


def optimizer_bytes(program: ir.Program, model: int = 1) -> int:
    """Bytes of optax's state for the run's optimizer: adam and adamw keep two moments per trainable
    parameter and an i32 step count, lion one moment and a count, sgd nothing (one trace with
    `:momentum`); a schedule as `:lr` (`(name settings)`) adds its own i32 count
    (`optax.scale_by_schedule`'s state). `model`: one device's, as `param_bytes`."""
    name, a = program.run.optimizer
    tr = param_bytes(program, frozen=False, model=model)
    count = 4 if isinstance(a.get("lr"), tuple) else 0
    if name == "lion":
        return tr + 4 + count
    if name == "sgd":
        return (tr if a.get("momentum") is not None else 0) + count
    return 2 * tr + 4 + count


def plist_bytes(t: Type | None) -> int:
    """Bytes of a tensor type, or of a plist type's tensor entries; 0 for any other type."""
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


def trace_generate(program: ir.Program, which: str, model: int = 1, splits: dict | None = None) -> Trace:
    """Trace `generate.init`, `generate.step` or `generate.finish` (`which`) as the runtime jits it:
    the batch and state per copy, the context and the trip shared. `model`, `splits`: as `Trace`'s."""
    gen = program.generate
    tr = Trace(program, in_generator=True, model=model, arg_splits=splits)
    if which == "init":
        batch = tr.args_of("batch", program.loaders[program.run.loader].batch_type(), True)
        out = tr.phase(gen.init, [batch, tr.ctx(False)])
        tr.output("state", {k: (out or {}).get(k) for k in gen.state.keys})
        # and the group's batch and context rows: on one device they arrive with this call, and its
        # copies are what the group's later graphs read (sexpgpu_runtime.lowering.graphs `Graphs.generate`)
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
               with_generated: bool, model: int = 1, splits: dict | None = None,
               training: bool = False) -> tuple[Trace, int]:
    """Trace prepare and objective as the runtime's `_loss` does (counters folded into the
    objective's context; with `training`, the training step's forward: LoRA adapters with dropout
    unmerged); returns the trace and the loss node's id. `model`, `splits`: as `Trace`'s."""
    tr = Trace(program, frozenset(program.run.diagnostics), model=model, arg_splits=splits, training=training)
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


def _io(name: str, t: Type, stack: int = 1) -> dict:
    """One input or output of a graph for the tree: its name, its type with the stack axis, its bytes."""
    return {"name": name, "type": _stacked(t, stack), "bytes": plist_bytes(t) * stack}


def _ctx_io(stack: int) -> dict:
    """The context rows a graph takes: [S 5] i64, one row of context scalars per copy."""
    n = len(CONTEXT_KEYS)
    return {"name": "ctx", "type": f"[{stack} {n}] i64", "bytes": ITEMSIZE["i64"] * n * stack}


def _params_io(g: GraphEstimate) -> dict:
    return {"name": "params", "type": fmt_bytes(g.param_args), "bytes": g.param_args}


def _state_splits(program: ir.Program, model: int) -> tuple[Trace, Trace, Trace]:
    """The generator's three traces with the state's split along `model` carried between them: what
    `generate.init` returns, and what the trips write where init left an entry whole (a cache filled only
    by the trips), as XLA keeps a cache written by split keys split by heads (sexpgpu_runtime/devices/
    sharding.py `constrain_records`)."""
    init = trace_generate(program, "init", model)
    state = {n: init.nodes[i].split for n, i in init.outputs if n.startswith("state:")}
    step = trace_generate(program, "step", model, state)
    if model > 1:
        wrote = {n: step.nodes[i].split for n, i in step.outputs}
        merged = {k: state.get(k) or wrote.get(k, ()) for k in wrote}
        if merged != state:
            state = merged
            step = trace_generate(program, "step", model, state)
    return init, step, trace_generate(program, "finish", model, state)


def _generator_graphs(program: ir.Program, stack: int, prefix: str = "",
                      target: str = "accelerator", model: int = 1) -> dict[str, GraphEstimate]:
    gen = program.generate
    batch_t = program.loaders[program.run.loader].batch_type()
    out = {}
    init, step, finish = _state_splits(program, model)
    g = estimate_graph(prefix + "generate.init", init, stack, target=target, loop=True)
    g.input_list = [_io("batch", batch_t, stack), _ctx_io(stack), _params_io(g)]
    g.output_list = [_io("state", gen.state, stack), _io("batch", batch_t, stack), _ctx_io(stack)]
    out[g.name] = g
    g = estimate_graph(prefix + "generate.step", step, stack, target=target, loop=True)
    g.input_list = [_io("state", gen.state, stack), _io("trip", TensorType((), "i64")), _ctx_io(stack), _params_io(g)]
    g.output_list = [_io("state", gen.state, stack)]
    # the state is donated to each trip on every backend (sexpgpu_runtime/lowering/generator_graphs.py):
    # each output leaf is written into its argument's buffer, as XLA's aliases count it
    g.aliased = g.outputs
    out[g.name] = g
    g = estimate_graph(prefix + "generate.finish", finish, stack, target=target, loop=True)
    g.input_list = [_io("state", gen.state, stack), _ctx_io(stack), _params_io(g)]
    g.output_list = [_io("made", gen.finish_out, stack)]
    out[g.name] = g
    return out


def _train_graph(program: ir.Program, stack: int, target: str = "accelerator", model: int = 1,
                 made: dict | None = None) -> GraphEstimate:
    gen = program.generate
    tr, loss = trace_loss(program, program.prepare, program.objective, program.run.loader, True, model, made,
                          training=True)
    grads = []
    for p in program.params:  # a gradient for every trainable parameter, used or not (then zeros)
        if not p.frozen:   # (split as its parameter: the runtime constrains it so)
            t = TensorType(p.shape, p.dtype)
            tr.output("grad:" + "/".join(p.path), tr.new("grad", t, per_copy=True, split=tr.param_split(tuple(p.path))))
            grads.append(("/".join(p.path), t))
    _kept_samples(tr, program.run.samples, program.prepare, program.objective)
    g = estimate_graph("train", tr, stack, loss, target)
    batch_t = program.loaders[program.run.loader].batch_type()
    if gen is not None:
        batch_t = PlistType(batch_t.entries + gen.out.entries)
    g.input_list = [_io("batch", batch_t, stack), _ctx_io(stack), _params_io(g)]
    g.output_list = [_io("loss", TensorType((), "f32"), stack), _io("gradients", PlistType(tuple(grads)), stack)]
    return g


def _kept_samples(tr, spec: ir.SamplesIR | None, prepare: ir.Phase | None, objective: ir.Phase) -> None:
    """The graph's outputs of `:samples` names computed in `prepare` or `objective`
    (`SamplesIR.computed`): the first `:rows` rows of each, of the first copy only, for the names
    these phases give (an entry `prepare` returns, a name the top-level `let*` binds), as the
    runtime keeps them (lowering.run_phase)."""
    if spec is None:
        return
    given = {"inputs": set(dict(prepare.out.entries)) if prepare is not None and isinstance(prepare.out, PlistType)
             else set(),
             "prepare": _top_names(prepare), "objective": _top_names(objective)}
    types = {n: (shape, dtype) for n, shape, dtype in spec.text + spec.values}
    for name, where in spec.computed:
        if name not in given[where]:
            continue
        shape, dtype = types[name]
        rows = tuple(shape) if not shape else (min(spec.rows, shape[0]),) + tuple(shape[1:])
        tr.output("sample:" + name, tr.new("sample", TensorType(rows, dtype), per_copy=False))


def _top_names(phase: ir.Phase | None) -> set[str]:
    """The names the top-level `let*` of `phase` binds (none without one)."""
    return set(phase.body.names) if phase is not None and isinstance(phase.body, ir.Let) else set()


def _pass_graph(program: ir.Program, ps: ir.PassIR, target: str = "accelerator", model: int = 1,
                made: dict | None = None) -> GraphEstimate:
    runs_gen = ps.runs_generator and program.generate is not None
    tr, _ = trace_loss(program, ps.prepare, ps.objective, ps.loader, runs_gen, model, made)
    tr.outputs = [(n, i) for n, i in tr.outputs if n == "loss" or n.startswith("metric:")]  # what a pass returns
    _kept_samples(tr, program.run.samples, ps.prepare, ps.objective)
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
#: the parameter reads both; sgd: read parameter and gradient, write the parameter). adamw: 15 for an
#: element its decay mask decays, 13 for one it leaves out (an embedding table, a gain, a bias; XLA's
#: count under jax 0.10.2), counted as decayed.
_OPT_FLOPS = {"adam": 13.0, "adamw": 15.0, "lion": 8.0, "sgd": 2.0}
_OPT_TRAFFIC = {"adam": 10, "adamw": 11, "lion": 7, "sgd": 3}


def _update_graph(program: ir.Program) -> GraphEstimate:
    """Scale the microbatches' summed gradient, one optimizer step (sexpgpu_runtime.lowering.graphs `_update`; the
    sum is made as the groups run, `Graphs.add_group`, and modelled in the memory plan's `accumulate`)."""
    M = program.run.microbatches
    tr = param_bytes(program, frozen=False)
    opt = optimizer_bytes(program)
    n = sum(TensorType(p.shape, p.dtype).size for p in program.params if not p.frozen)
    name, a = program.run.optimizer
    per = _OPT_FLOPS.get(name, 12.0) + (2.0 if a.get("momentum") is not None else 0.0) + \
        (4.0 if a.get("clip") is not None else 0.0)
    g = GraphEstimate("update", 1)
    # a scale by 1/M (none for one), the optimizer, and the select that keeps the parameters once a
    # loss was non-finite (its i64 step is the graph's last argument)
    g.flops = n * ((M > 1) + per + 1)
    g.args = tr + opt + tr + 8
    g.param_args = tr
    g.outputs = tr + opt
    # the scale reads the sum and writes it; then the optimizer's traffic
    g.bytes_moved = tr * (2 + _OPT_TRAFFIC.get(name, 10) + (3 if a.get("momentum") is not None else 0))
    g.input_list = [{"name": "params", "type": fmt_bytes(tr), "bytes": tr},
                    {"name": "optimizer", "type": f"{name} state", "bytes": opt},
                    {"name": "gradients", "type": f"summed over {M} microbatch{'es' if M != 1 else ''}", "bytes": tr}]
    g.output_list = [{"name": "params", "type": fmt_bytes(tr), "bytes": tr},
                     {"name": "optimizer", "type": f"{name} state", "bytes": opt}]
    return g


def step_graphs(program: ir.Program, stack: int, target: str = "accelerator", model: int = 1) -> dict[str, GraphEstimate]:
    """Every graph of one step at stacking degree `stack`, keyed by the names `sexpgpu explain` prints,
    their live sets as `target` (`TARGETS`) would make them. With `model` > 1, each graph's bytes are
    what one device of a `model` axis of that size holds (a value the axis splits, `split.propagate`,
    1/model; the batch still whole along `data`): the memory per device of a tensor-parallel run.

    Keys: `generate.init`, `generate.step`, `generate.finish` (when the file
    has `defgenerate`), `train`, `update`, and `pass NAME` for each pass; a
    pass that runs the generator also has `pass NAME generate.init` ...
    (unstacked, as the runtime runs them).
    """
    out: dict[str, GraphEstimate] = {}
    made: dict = {}
    if program.generate is not None:
        out.update(_generator_graphs(program, stack, target=target, model=model))
        made = {k: v for k, v in out["generate.finish"].splits.items() if k.startswith("made:")}
    out["train"] = _train_graph(program, stack, target, model, made)
    out["update"] = _update_graph(program)
    for ps in program.passes:
        if ps.runs_generator and program.generate is not None:
            out.update(_generator_graphs(program, 1, f"pass {ps.name} ", target, model))
        out[f"pass {ps.name}"] = _pass_graph(program, ps, target, model, made)
    return out
