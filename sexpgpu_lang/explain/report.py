"""The report of `sexpgpu explain` as plain data (`explain`), and the one line a hover on
`defgenerate` shows (`generation_line`).

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

import os

from .. import ir
from .graphs import layout_stack, plist_bytes, step_graphs
from .memory import DEFAULT_BUDGET, choose_stack, memory_plan
from .mesh import mesh_report
from .schedule import GraphEstimate
from .text import fmt_bytes, fmt_flops


def _graph_dict(g: GraphEstimate, calls: int, trips: int | None = None) -> dict:
    return {"name": g.name, "stack": g.stack, "calls_per_step": calls, "trips": trips,
            "inputs": g.input_list, "outputs": g.output_list,
            "flops": g.flops, "transcendentals": g.transcendentals, "bytes_moved": g.bytes_moved,
            "live": {"args": g.args, "outputs": g.outputs, "temps": g.temps, "aliased": g.aliased, "total": g.live,
                     "largest_temp": g.largest_temp},
            **({"scans": g.scans} if g.scans else {})}


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
                      "state": gen.state.show(), "state_bytes": plist_bytes(gen.state),
                      "state_bytes_stacked": plist_bytes(gen.state) * S,
                      "made": gen.finish_out.show(), "made_bytes": plist_bytes(gen.finish_out),
                      "flops_per_step": rows[0]["flops_per_step"], "live": plan["generation"],
                      "reward": None if gen.reward is None else {
                          "function": gen.reward.function, "file": os.path.basename(gen.reward.path),
                          "name": gen.reward.name, "rows": gen.reward.rows, "text": gen.reward.text,
                          "calls_per_step": M}}
    per_step = [r for r in rows if r["calls_per_step"] is not None]
    memory = {k: plan[k] for k in ("params", "trainable", "frozen", "optimizer", "gradients_held",
                                   "generation", "train", "update", "passes", "peak", "donate")}
    mesh = mesh_report(program, plan, S, target)
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
    state = f"state {fmt_bytes(plist_bytes(gen.state))}" + (f" ×{S} stacked" if S > 1 else "")
    n = 3 if gen.finish is not None else 2
    return (f"generation: {gen.trips} trip{'s' if gen.trips != 1 else ''} · {n} graphs · {state} · "
            f"{fmt_flops(flops)} per step · live {fmt_bytes(live)}")
