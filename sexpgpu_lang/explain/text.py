"""Units and text: byte and FLOP counts as the report prints them, and `to_text`, the report as
`sexpgpu explain` prints it.

Imports only the standard library and sexpgpu_lang; never JAX.
"""
from __future__ import annotations

import re

from .mesh import graph_shardings


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
        rw = gen.get("reward")
        if rw is not None:   # the user's Python, never imported here: `sexpgpu run` calls it on the host
            lines.append(f"reward: `{rw['function']}` of {rw['file']}, Python on the host after `generate.finish`, "
                         f"{_plural(rw['calls_per_step'], 'call')} per step (one per microbatch) · decodes "
                         f":{rw['text']} · makes :{rw['name']} [{rw['rows']}] f32 (not imported by explain)")
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
        axes = f"data={mesh['devices']}" + (f",model={mesh['model']}" if mesh.get("model", 1) > 1 else "")
        lines.append(f"memory per device (1 of {axes}): " + memory_parts(mesh["memory_per_device"]))
        lines.append(f"{UNSHARDED_LABEL}: " + memory_parts(mem))
    else:
        lines.append("memory: " + memory_parts(mem))
    if mesh:
        per = ", ".join(f"`{k}` {v}" for k, v in mesh["records_per_device"].items())
        ins = ", ".join(f"{k} {v}" for k, v in mesh["shardings"].items())
        held = ""
        if mesh.get("shard_params") == "fsdp" or mesh.get("model", 1) > 1:
            held = (f"params per device {fmt_bytes(mesh['params_per_device'])}, optimizer per device "
                    f"{fmt_bytes(mesh['optimizer_per_device'])} · ")
        lines.append(f"mesh: {axes} · records per device: {per} · inputs: {ins} · {held}"
                     f"peak per device about {fmt_bytes(mesh['peak_per_device'])}")
    lines += ["", "memory plan: bytes live in each phase beside the parameters and optimizer state"
              + (f", and beside a later group's, the {fmt_bytes(mem['gradients_held'])} of earlier groups' gradients"
                 f" held for the update"
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


#: The label of the `memory` line under a mesh: the plan of the whole model and batch, unsplit (what one
#: device would hold without the mesh), not a sum over the devices (a replicated array counts once).
UNSHARDED_LABEL = "memory of the whole run, unsharded (as one device would hold it)"


def _io_text(items: list[dict]) -> str:
    return ", ".join(f"{i['name']} {i['type']}".rstrip() for i in items if i["bytes"] or i["name"] != "params")


def _graph_body(g: dict, pad: str, x: dict | None, mesh: dict | None = None) -> list[str]:
    lv = g["live"]
    out = [pad + "  in   " + _io_text(g["inputs"])]
    if mesh:
        out.append(pad + "  shard " + ", ".join(f"{k} {v}" for k, v in graph_shardings(mesh, g).items()))
    out.append(pad + "  out  " + _io_text(g["outputs"]))
    for sc in g.get("scans", ()):
        remat = "" if sc["remat"] == "everything-saveable" else f", remat :{sc['remat']}"
        out.append(pad + f"  scan {sc['model']} × {sc['layers']} layers (one body, parameters `{sc['path']}` "
                         f"stacked [{sc['layers']} ...]{remat})")
    out += [pad + f"  cost {fmt_flops(g['flops'])} · {fmt_bytes(g['bytes_moved'])} moved · live "
                  f"{fmt_bytes(lv['total'])} (args {fmt_bytes(lv['args'])}, out {fmt_bytes(lv['outputs'])}, "
                  f"temps {fmt_bytes(lv['temps'])}"
                  + (f", aliased {fmt_bytes(lv['aliased'])}" if lv.get("aliased") else "") + ")"]
    if x and x.get("error"):
        out.append(pad + f"  xla  could not compile: {x['error']}")
    elif x:
        out.append(pad + f"  xla  {fmt_flops(x['flops'])} · {fmt_bytes(x['bytes_accessed'])} accessed · live "
                         f"{fmt_bytes(x['live'])} (args {fmt_bytes(x['args'])}, out {fmt_bytes(x['outputs'])}, "
                         f"temps {fmt_bytes(x['temps'])}"
                         + (f", aliased {fmt_bytes(x['alias'])}" if x.get("alias") else "") + ")")
        if x.get("split_outputs"):
            out.append(pad + "  split " + ", ".join(f"{k} {v}" for k, v in x["split_outputs"].items()))
        if x.get("collectives"):
            kinds = ", ".join(f"{k} ×{v['count']} {fmt_bytes(v['bytes'])}" for k, v in x["collectives"].items())
            step = x.get("collective_bytes_per_step")
            out.append(pad + f"  comm {kinds} per call" + (f" · {fmt_bytes(step)} per step" if step else ""))
    return out
