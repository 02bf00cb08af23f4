"""`sexpgpu explain`: the training step of a checked run file as graphs, with the lowering report,
the memory plan and the cost model (`sexpgpu_lang.explain`, computed statically); with `--xla`,
XLA's own analysis of each compiled graph beside it (the runtime's `xla_report`).

Imports the front end; the runtime (and so JAX) only for `--xla`.
"""
from pathlib import Path

from .output import fail, load, print_text


def explain_file(file: Path, format: str, xla: bool, memory_budget: str | None, mesh: str | None,
                 fsdp: bool | None, target: str | None) -> None:
    """Print `file`'s report as text or JSON (`format`). Bad option values and a file with errors
    are one `sexpgpu: error:` line (exit 2, and 1 for the file, after its diagnostics)."""
    from sexpgpu_lang import render
    budget, source = None, None
    if memory_budget is not None:
        from sexpgpu_lang.explain import parse_bytes
        try:
            budget, source = parse_bytes(memory_budget), "--memory-budget"
        except ValueError as e:
            raise fail(str(e))
    res = load(file)
    if res.has_errors:
        n_err, n_warn, _ = print_text([res])
        raise fail(f"{file} has {render.summary(n_err, n_warn)}; fix them first", 1)
    from sexpgpu_lang.explain import TARGETS, explain as build, to_text
    if target is not None and target not in TARGETS:
        raise fail(f"unknown --target {target!r}; expected one of {', '.join(TARGETS)}")
    program = res.program
    if mesh is not None or fsdp is not None:
        from sexpgpu_lang.mesh import explain_mesh
        try:
            program = explain_mesh(program, mesh, fsdp)
        except ValueError as e:
            raise fail(str(e))
    if xla:
        from sexpgpu_runtime import backend_target, device_budget  # JAX only here
        if budget is None:
            budget, source = device_budget()
        target = target or backend_target()
    report = build(program, budget, source, target or "accelerator")
    if xla:
        from sexpgpu_runtime import xla_report
        report["xla"] = xla_report(program, report)
    if format == "text":
        print(to_text(report))
    else:
        import json
        print(json.dumps(report, indent=2))
