"""`sexpgpu explain --xla`: compile each graph of the step and read XLA's own analysis.

For every graph the runtime jits (sexpgpu_runtime/lowering/graphs.py: `generate.init`,
`generate.step`, `generate.finish`, `train`, `update`, each pass), lower it
with abstract arguments (`jax.ShapeDtypeStruct`: no data is loaded and no
parameter initialised), compile it for the default backend, and read
`memory_analysis()` (bytes of arguments, outputs, temporaries, aliases) and
`cost_analysis()` (FLOPs, transcendentals, bytes accessed). The result
sits beside the static estimate of `sexpgpu_lang.explain` in the report.

Units: bytes and FLOPs per call of one graph.

XLA's numbers need three readings to compare with the estimate (docs/explain.md):
- XLA's cost analysis counts a while loop's body once; a repeated block's
  scan runs it once a layer, so the FLOPs, transcendentals and bytes
  accessed here count each loop trip-count times (`xla_loops.loop_costs`;
  `loops` lists them);
- a graph that returns several arrays returns a tuple whose table of
  buffer pointers (8 bytes per leaf) XLA counts in `output_size_in_bytes`;
  `outputs` here is the arrays' bytes alone (`output_table` holds the rest);
- JAX drops arguments a graph does not read (`keep_unused=False`), so
  `args` is the bytes of the arguments the graph reads, as the estimate's.
"""
from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp

from sexpgpu_lang import ir
from sexpgpu_lang.language import CONTEXT_KEYS
from sexpgpu_lang.types import PlistType, TensorType

from ..devices.device import backend_target
from .draw_check import draw_like
from ..dtypes import jdt
from .graphs import Graphs
from ..weights.optim import make_optimizer
from ..weights.params import set_path
from .collectives import collectives
from .xla_loops import UNCOUNTED, loop_costs


def _sds(t: TensorType, stack: int = 1):
    shape = ((stack,) if stack > 1 else ()) + tuple(t.shape)
    return jax.ShapeDtypeStruct(shape, jdt(t.dtype))


def _tree(t: PlistType, stack: int) -> dict:
    return {k: _sds(v, stack) for k, v in t.entries if isinstance(v, TensorType)}


def _rows(stack: int):
    """The context rows the graphs take (sexpgpu_runtime.lowering.graphs `unpack_ctx`): [S 6] i64."""
    return jax.ShapeDtypeStruct((stack, len(CONTEXT_KEYS)), jnp.int64)


def _params(program: ir.Program) -> tuple[dict, dict]:
    trainable: dict = {}
    frozen: dict = {}
    for p in program.params:
        set_path(frozen if p.frozen else trainable, p.path, _sds(TensorType(p.shape, p.dtype)))
    return trainable, frozen


def _read(lowered) -> dict:
    """Compile one lowered graph and read XLA's memory and cost analysis (bytes, FLOPs per call).
    `bf16` (present only when true): the compiled module holds a bf16 value (an argument, a temporary)."""
    t0 = time.perf_counter()
    compiled = lowered.compile()
    seconds = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    text = compiled.as_text()
    cost, loops = loop_costs(text, cost or {})
    leaves = len(jax.tree_util.tree_leaves(lowered.out_info))
    table = 8 * leaves if leaves > 1 else 0
    out_total = int(getattr(mem, "output_size_in_bytes", 0))
    args_b = int(getattr(mem, "argument_size_in_bytes", 0))
    temps = int(getattr(mem, "temp_size_in_bytes", 0))
    alias = int(getattr(mem, "alias_size_in_bytes", 0))
    outputs = max(out_total - table, 0)
    split = _split_outputs(compiled)
    return {**({"split_outputs": split} if split else {}), "flops": float(cost.get("flops", 0.0)), "transcendentals": float(cost.get("transcendentals", 0.0)),
            "bytes_accessed": float(cost.get("bytes accessed", 0.0)), "args": args_b, "outputs": outputs,
            "output_table": out_total - outputs, "output_leaves": leaves, "temps": temps, "alias": alias,
            "live": args_b + outputs + temps - alias, "compile_seconds": round(seconds, 3),
            **({"loops": loops} if loops else {}), **({"loops_uncounted": True} if loops is None else {}),
            **({"collectives": found} if (found := collectives(text)) else {}),
            **({"bf16": True} if "bf16[" in text else {})}   # a bf16 value anywhere in the compiled module


def _split_outputs(compiled) -> dict[str, str]:
    """Each output of a compiled graph that is not whole on every device, by its dotted path, and its
    PartitionSpec as text (a generator state's KV caches split by heads: `P(None, None, None, 'model')`)."""
    try:
        shardings = compiled.output_shardings
    except Exception:   # (a backend that does not say)
        return {}
    out = {}
    for path, sh in jax.tree_util.tree_flatten_with_path(shardings)[0]:
        spec = getattr(sh, "spec", None)
        if spec is not None and any(a is not None for a in spec):
            name = ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
            out[name] = "P(" + ", ".join(repr(a) for a in spec) + ")"
    return out


def _guarded(fn, *args) -> dict:
    try:
        return fn(*args)
    except Exception as e:  # one graph that fails to compile must not hide the others
        return {"error": f"{type(e).__name__}: {e}"}


def compile_graphs(program: ir.Program, stack: int) -> dict[str, dict]:
    """XLA's analysis of every graph of one step at stacking degree `stack`, keyed as `step_graphs` keys them."""
    run = program.run
    if run.stack != stack or run.stack_auto:
        program = dataclasses.replace(program, run=dataclasses.replace(run, stack=stack, stack_auto=False))
    optimizer = make_optimizer(run.optimizer, program)
    dp = _mesh(program)
    g = Graphs(program, optimizer, frozenset(run.diagnostics), donate=False, dp=dp)
    S = g.layout.stack
    trainable, frozen = _params(program)
    batch_t = program.loaders[run.loader].batch_type()
    if dp is not None:   # the inputs placed as a run places them, so XLA inserts the run's collectives
        trainable, frozen = _placed(trainable, dp.state_shardings(trainable)), _placed(frozen, dp.state_shardings(frozen))
    tree_of = _tree if dp is None else _on_mesh(dp, program.loaders[run.loader].batch, S)
    rows_of = _rows if dp is None else _rows_on(dp)
    out: dict[str, dict] = {}

    lowered: dict = {}

    def guard(name, fn, args):  # trace now (one thread); compile below, several at once
        lowered[name] = _guarded(lambda: fn.lower(*args))

    gen = program.generate
    trip = jax.ShapeDtypeStruct((), jnp.int64)
    drawn = (draw_like(),) if g.draw_sites else ()   # a checked trip's record of its temperatures (draw_check.py)
    if gen is not None:
        batch, state, ctx = tree_of(batch_t, S), tree_of(gen.state, S), rows_of(S)
        guard("generate.init", g.gen_init, (trainable, frozen, batch, ctx))
        guard("generate.step", g.gen_step, (trainable, frozen, state, trip, ctx) + drawn)
        guard("generate.finish", g.gen_finish, (trainable, frozen, state, ctx))
    tbatch = tree_of(batch_t, S)
    if gen is not None:
        tbatch.update(tree_of(gen.out, S))
    base = {c: jax.ShapeDtypeStruct((), jdt(d)) for c, d in g.counter_types.items()}
    guard("train", g.grads, (trainable, frozen, tbatch, rows_of(S), base))
    opt_state = jax.eval_shape(optimizer.init, trainable)
    if dp is not None:
        opt_state = _placed(opt_state, dp.state_shardings(opt_state))
    guard("update", g.update, (trainable, opt_state, trainable, jax.ShapeDtypeStruct((), jnp.int64)))
    for ps in program.passes:
        pb = tree_of(program.loaders[ps.loader].batch_type(), 1)
        if ps.runs_generator and gen is not None:
            pstate = tree_of(gen.state, 1)
            guard(f"pass {ps.name} generate.init", g.gen_init_1, (trainable, frozen, pb, rows_of(1)))
            guard(f"pass {ps.name} generate.step", g.gen_step_1, (trainable, frozen, pstate, trip, rows_of(1)) + drawn)
            guard(f"pass {ps.name} generate.finish", g.gen_finish_1, (trainable, frozen, pstate, rows_of(1)))
            pb.update(tree_of(gen.out, 1))
        guard(f"pass {ps.name}", g.passes[ps.name], (trainable, frozen, pb, rows_of(1), base))
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        done = {name: pool.submit(_guarded, _read, low) for name, low in lowered.items() if not isinstance(low, dict)}
    for name, low in lowered.items():
        out[name] = low if isinstance(low, dict) else done[name].result()
    return out


def _mesh(program: ir.Program):
    """The run's mesh (sharding.DataParallel) when the program has one and JAX sees its devices, else None
    (then every graph is compiled for one device, as without a mesh)."""
    from ..devices.sharding import DataParallel
    from sexpgpu_lang.mesh import shard_overrides
    n, m = program.run.devices or 1, getattr(program.run, "model_parallel", 1) or 1
    if n * m == 1 or n * m > len(jax.devices()):
        return None
    return DataParallel(n, program.run.shard_params == "fsdp", m, shard_overrides(program))


def _placed(tree, shardings):
    return jax.tree_util.tree_map(lambda x, w: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=w), tree, shardings)


def _on_mesh(dp, batch: int, stack: int):
    """`_tree` with each per-record leaf split along `data` (the batch axis, second when stacked)."""
    def tree(t: PlistType, s: int) -> dict:
        out = {}
        for k, v in t.entries:
            if isinstance(v, TensorType):
                x = _sds(v, s)
                axis = 1 if s > 1 else 0
                rec = len(x.shape) > axis and x.shape[axis] == batch
                where = (dp.stacked_batch if s > 1 else dp.batch) if rec else dp.replicated
                out[k] = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=where)
        return out
    return tree


def _rows_on(dp):
    def rows(stack: int):
        return jax.ShapeDtypeStruct((stack, len(CONTEXT_KEYS)), jnp.int64, sharding=dp.replicated)
    return rows


def _ratio(est: float, xla: float) -> float | None:
    return None if not xla else est / xla


def xla_report(program: ir.Program, report: dict) -> dict:
    """XLA's analysis of the step's graphs, at the report's stacking degree, with estimate/XLA ratios."""
    S = report["step"]["stack"]
    graphs = compile_graphs(program, S)
    est = {g["name"]: g for g in report["graphs"]}
    for p in report["passes"]:
        est[p["name"]] = p
        for s in p.get("generator") or []:
            est[s["name"]] = s
    for name, x in graphs.items():
        e = est.get(name)
        if e is None or "error" in x:
            continue
        if x.get("collectives") and e.get("calls_per_step"):
            x["collective_bytes_per_step"] = e["calls_per_step"] * sum(v["bytes"] for v in x["collectives"].values())
        x["ratio"] = {"flops": _ratio(e["flops"], x["flops"]), "live": _ratio(e["live"]["total"], x["live"]),
                      "temps": _ratio(e["live"]["temps"], x["temps"]), "args": _ratio(e["live"]["args"], x["args"]),
                      "outputs": _ratio(e["live"]["outputs"], x["outputs"])}
    dev = jax.devices()[0]
    computes_bf16 = [x.pop("bf16", False) for x in graphs.values()]   # (a note below, not a graph's figure)
    ok = [x for x in graphs.values() if "error" not in x]

    def span(key):
        vals = [x["ratio"][key] for x in ok if x.get("ratio") and x["ratio"][key] is not None]
        return f"{min(vals):.2f}-{max(vals):.2f}" if vals else "-"

    summary = (f"{len(ok)} of {_graphs(len(graphs))} compiled; estimate / XLA: FLOPs {span('flops')}, "
               f"live set {span('live')} (per graph ratios in --format json, `xla.graphs.*.ratio`)")
    notes = ["XLA's live set is arguments + outputs + temporaries - aliases; its outputs here leave out "
             "the tuple's table of pointers (8 bytes a leaf)"]
    if any(x.get("loops_uncounted") for x in ok):
        notes.append(UNCOUNTED)
    target = report["step"].get("target", "accelerator")
    if target != backend_target():
        notes.append(f"the estimate models the {target} target, not this backend's ({backend_target()}): "
                     f"live sets are not compared like with like (docs/explain.md)")
    if dev.platform == "cpu" and any(computes_bf16):   # only a file that computes in bf16 meets it
        notes.append("the CPU backend computes bf16 matmuls in f32, so under :bf16 its temporaries around a "
                     "matmul are up to twice the estimate's (docs/explain.md)")
    moved = sum(x.get("collective_bytes_per_step", 0) for x in ok)
    if moved:
        from sexpgpu_lang.explain.text import fmt_bytes
        summary += f"; collectives move {fmt_bytes(moved)} a device per step"
    return {"backend": dev.platform, "device": dev.device_kind, "stack": S, "graphs": graphs,
            "summary": summary, "notes": notes}


def _graphs(n: int) -> str:
    return f"{n} graph" + ("s" if n != 1 else "")
