"""The runtime's verdict on what the checker accepts: an expression evaluated (`lower`), a run file's
graphs lowered as `sexpgpu run` builds them (`phase_runtime`), from abstract inputs, JAX's types
compared with the checker's.
"""
from __future__ import annotations

import traceback
import warnings

import jax
import jax.numpy as jnp

from sexpgpu_lang.types import PlistType, TensorType
from sexpgpu_runtime.dtypes import jdt, name_of
from sexpgpu_runtime.lowering.lowering import Effects, evaluate

from .jax_direct import first_line


def lower(e, env_types) -> str | None:
    """None when JAX agrees with the checker on every node, else why not."""
    fx = Effects(seed_key=jax.random.key(0))
    structs = {k: jax.ShapeDtypeStruct(t.shape, jdt(t.dtype)) for k, t in env_types.items()}
    try:
        out = jax.eval_shape(lambda env: evaluate(e, env, fx), structs)
    except Exception as exc:  # noqa: BLE001 - any failure to lower an accepted program is a disagreement
        lines = [ln for ln in traceback.format_exception_only(type(exc), exc)[0].strip().splitlines() if ln.strip()]
        return lines[0][:300]
    t = e.type
    if isinstance(t, TensorType):
        got = (tuple(out.shape), name_of(out.dtype))
        if got != (t.shape, t.dtype):
            return f"result: checker {t.shape} {t.dtype}, JAX {got[0]} {got[1]}"
    elif isinstance(t, PlistType):
        for k, kt in t.entries:
            got = (tuple(out[k].shape), name_of(out[k].dtype))
            if got != (kt.shape, kt.dtype):
                return f"entry {k}: checker {kt.shape} {kt.dtype}, JAX {got}"
    return None


def _differs(out, want: PlistType, lead: int = 0) -> str | None:
    """Why a graph's output structs differ from the checker's plist type (each with a leading axis of
    `lead` copies when stacked), or None."""
    if not isinstance(out, dict) or set(out) != set(want.keys):
        return f"keys {sorted(out) if isinstance(out, dict) else type(out).__name__}, checker {sorted(want.keys)}"
    for k, t in want.entries:
        got = (tuple(out[k].shape), name_of(out[k].dtype))
        if got != (((lead,) if lead else ()) + t.shape, t.dtype):
            return f":{k}: checker {list(t.shape)} {t.dtype}, JAX {list(got[0])} {got[1]}"
    return None


def phase_runtime(program) -> str | None:
    """None when the runtime lowers every graph of the step (`generate.init`, `.step`, `.finish`,
    `train` with its gradient, `update`) from abstract inputs and JAX's type of each phase's output
    (the state's entries, the made record, the loss, the gradient) is the checker's; else why not."""
    from sexpgpu_runtime.lowering.draw_check import draw_like
    from sexpgpu_runtime.lowering.graphs import Graphs
    from sexpgpu_runtime.lowering.lowering import run_phase
    from sexpgpu_runtime.weights.optim import make_optimizer
    from sexpgpu_runtime.weights.params import merge
    from sexpgpu_runtime.lowering.xla_report import _params, _rows, _tree
    from sexpgpu_lang.language import CONTEXT_KEYS

    g = Graphs(program, make_optimizer(program.run.optimizer))
    trainable, frozen = _params(program)
    batch = _tree(program.loaders[program.run.loader].batch_type(), 1)
    gen = program.generate
    trip = jax.ShapeDtypeStruct((), jnp.int64)
    state = _tree(gen.state, 1)
    drawn = (draw_like(),) if g.draw_sites else ()   # a checked trip's record of its temperatures
    graphs = [("generate.init", g.gen_init_1, (trainable, frozen, batch, _rows(1)), gen.state, 0),
              ("generate.step", g.gen_step_1, (trainable, frozen, state, trip, _rows(1)) + drawn, gen.state, 0),
              ("generate.finish", g.gen_finish_1, (trainable, frozen, state, _rows(1)), gen.finish_out, 0)]
    S = g.layout.stack    # a run that stacks S microbatches vmaps every phase: each copy has the checker's types
    if S > 1:
        sb, ss = _tree(program.loaders[program.run.loader].batch_type(), S), _tree(gen.state, S)
        graphs += [("generate.init stacked", g.gen_init, (trainable, frozen, sb, _rows(S)), gen.state, S),
                   ("generate.step stacked", g.gen_step, (trainable, frozen, ss, trip, _rows(S)) + drawn, gen.state, S),
                   ("generate.finish stacked", g.gen_finish, (trainable, frozen, ss, _rows(S)), gen.finish_out, S)]
    name = "?"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, fn, args, want, lead in graphs:
                out = fn.lower(*args).out_info
                if name.startswith("generate.init"):   # (the group's batch, its context rows, the state)
                    out = out[2]
                if name.startswith("generate.step") and drawn:   # (the trip's output, the temperatures' record)
                    out, record = out
                    if [(tuple(r.shape), name_of(r.dtype)) for r in record] != [((), "i64"), ((), "i64"), ((), "i32"),
                                                                                ((), "f32")]:
                        return f"{name}: the temperatures' record is {record}, not draw_check.no_draw's"
                if name.startswith("generate.step") and gen.until is not None:   # (the state, `:until`'s flag)
                    out, done = out
                    if (tuple(done.shape), name_of(done.dtype)) != ((), "bool"):
                        return f"{name}: `:until` gives {list(done.shape)} {name_of(done.dtype)}, not a bool scalar"
                why = _differs(out, want, lead)
                if why:
                    return f"{name} returns {why}"
            tbatch = {**batch, **_tree(gen.out, 1)}
            name = "objective"
            ctx1 = {k: jax.ShapeDtypeStruct((), jdt(d)) for k, d in CONTEXT_KEYS}
            def objective(tr, fr, b, c):
                fx, params = g.tracer.fx(), merge(tr, fr)
                inputs = run_phase(program.prepare, [b, c], params, fx) if program.prepare is not None else b
                octx = {**c, **{k: jnp.zeros((), jdt(d)) for k, d in g.counter_types.items()}}
                return run_phase(program.objective, [inputs, octx], params, fx)
            loss = jax.eval_shape(objective, trainable, frozen, tbatch, ctx1)
            want = program.objective.out
            if (tuple(loss.shape), name_of(loss.dtype)) != (want.shape, want.dtype):
                return f"objective: checker {list(want.shape)} {want.dtype}, JAX {list(loss.shape)} {name_of(loss.dtype)}"
            name = "train"    # the training graph takes S microbatches stacked (a run file's `:stack`)
            sbatch = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(((S,) if S > 1 else ()) + x.shape, x.dtype),
                                            tbatch)
            base = {c: jax.ShapeDtypeStruct((), jdt(d)) for c, d in g.counter_types.items()}
            losses, grads, *_ = g.grads.lower(trainable, frozen, sbatch, _rows(S), base).out_info
            if (losses[0].shape, name_of(losses[0].dtype)) != ((), "f32"):
                return f"train: the loss is {losses[0]}"
            got = jax.tree_util.tree_map(lambda s: (tuple(s.shape), name_of(s.dtype)), grads[0])
            if got != jax.tree_util.tree_map(lambda s: (tuple(s.shape), name_of(s.dtype)), trainable):
                return f"train: gradient {got}"
            name = "update"
            opt_state = jax.eval_shape(g.training.opt.init, trainable)
            g.update.lower(trainable, opt_state, trainable, jax.ShapeDtypeStruct((), jnp.int64))   # the summed gradient; no bad step
    except Exception as exc:  # noqa: BLE001 - an accepted file the runtime cannot lower is a disagreement
        return f"{name}: {first_line(exc)}"
    return None
