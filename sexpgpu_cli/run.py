"""`sexpgpu run`: a run file checked (its `:pretrained` files read), then trained through the
runtime's surface (`sexpgpu_runtime`: the mesh, `RunOptions`, `train`), its outcome said in one line.

The runtime, and so JAX, is imported here only, after the file is checked. Errors: a file with
errors exits 1 after its diagnostics; an option that cannot work (`OptionError`, a bad mesh) is
a usage error, exit 2; a run that fails (`RunError`) exits 1; a signal (`RunStopped`) exits 130 or
143 naming the command that resumes; a resume of a finished run (`RunFinished`) exits 0.
"""
import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from .early_signals import EarlySignals
from .output import fail, load, print_text


@dataclass(frozen=True)
class RunRequest:
    """`sexpgpu run`'s command line as typer read it (docs/cli.md; `sexpgpu run --help`)."""

    file: Path
    steps: int | None = None
    run_dir: Path | None = None
    diagnostics: str | None = None
    progress: bool | None = None
    export: Path | None = None
    export_frozen: bool = False
    export_adapter: bool = False
    export_names: str | None = None
    max_shard_size: str = "5GB"
    resume: bool = False
    overwrite: bool = False
    mesh: str | None = None
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    fsdp: bool | None = None
    distributed: bool = False
    trip_loop: str | None = None
    compile_cache: str | None = None
    debug: bool = False


def run_file(req: RunRequest) -> None:
    """Check and train `req.file`; return when it trained (exit 0), else raise the `typer.Exit` with
    the status above. The signal handlers `run` found are put back when it returns."""
    early = EarlySignals.take()   # installed by the console script before typer, else now
    try:
        _run(req, early)
    finally:
        early.restore()   # the handlers `run` found: a library caller's own stay theirs


def _run(req: RunRequest, early: EarlySignals) -> None:
    from sexpgpu_lang import render
    res = load(req.file, read_files=True)   # E-MODEL-003 (a `:pretrained` file that does not fit) stops it here
    if res.has_errors:
        n_err, n_warn, _ = print_text([res])
        print(f"sexpgpu: error: {req.file} has {render.summary(n_err, n_warn)}; fix them before running", file=sys.stderr)
        raise typer.Exit(1)
    import sexpgpu_runtime as rt   # JAX is imported only here
    from sexpgpu_lang.mesh import ModelAxisError, check_model_axis
    try:
        devices, model = rt.parse_mesh(req.mesh) if req.mesh is not None else (None, None)
        if model is not None:   # placed where the file writes the size the axis does not divide
            check_model_axis(res.program, model)
        rt.initialize(req.coordinator, req.num_processes, req.process_id, detect=req.distributed)
    except ModelAxisError as e:
        raise fail(e.placed(res.source), 2)
    except (ValueError, rt.MeshError) as e:
        raise fail(str(e), 2)
    early.stop_if_received()
    import jax
    if res.diagnostics and jax.process_index() == 0:
        print_text([res], sys.stderr)   # what `lint` says of the file (its warnings), before training
    note = rt.reward_note(res.program)
    if note is not None and jax.process_index() == 0:   # the user's Python this run imports, said first
        print(f"sexpgpu: {note}", file=sys.stderr)
    try:
        max_shard_bytes = rt.shard_bytes(req.max_shard_size)
    except ValueError as e:
        raise fail(str(e), 2)
    opts = rt.RunOptions(
        steps=req.steps,
        run_dir=req.run_dir if req.run_dir is not None else Path("runs") / req.file.stem,
        diagnostics=tuple(x.strip() for x in (req.diagnostics or "").split(",") if x.strip()),
        progress=sys.stderr.isatty() if req.progress is None else req.progress,
        export=req.export,
        export_frozen=req.export_frozen,
        export_adapter=req.export_adapter,
        export_names=req.export_names,
        max_shard_bytes=max_shard_bytes,
        resume=req.resume,
        overwrite=req.overwrite,
        devices=devices,
        model=model,
        fsdp=req.fsdp,
        compile_cache=req.compile_cache,
        trip_loop=req.trip_loop,
    )
    try:
        result = rt.train(res.program, opts)
    except rt.OptionError as e:   # a usage problem: options that cannot work together or be written
        raise fail(str(e), 2, req.debug)
    except rt.RunError as e:   # a file not as declared (DataError), a bad traced setting (BadDraw), a failed run
        raise fail(str(e), 1, req.debug)
    except rt.RunStopped as e:
        import shlex
        again = rt.resume_command(req.file, run_dir=req.run_dir, steps=req.steps, diagnostics=req.diagnostics,
                                  mesh=req.mesh, fsdp=req.fsdp, coordinator=req.coordinator,
                                  num_processes=req.num_processes, process_id=req.process_id,
                                  distributed=req.distributed)
        print(f"sexpgpu: {e}; resume with `{' '.join(shlex.quote(a) for a in again)}`", file=sys.stderr)
        raise typer.Exit(e.exit_code)
    except rt.RunFinished as e:   # a resume of a finished run: nothing was read or written
        print(f"sexpgpu: {e}", file=sys.stderr)
        raise typer.Exit(0)
    except KeyboardInterrupt:
        raise fail("interrupted", 130)
    if early.received is not None:   # after the loop's last look: the run is complete, say so
        import signal
        print(f"sexpgpu: {signal.Signals(early.received).name} arrived after the last step; the run had "
              "finished, so it stopped as it would have", file=sys.stderr)
    print(summary(req, result, opts.run_dir), file=sys.stderr)


def summary(req: RunRequest, result, run_dir: Path) -> str:
    """The line a finished run ends with: the steps trained and their time, the last logged metrics,
    what reading the data cost, where the metrics are."""
    last = result.history[-1] if result.history else {}
    shown = "  ".join(f"{k} {v:.4g}" for k, v in last.items() if k != "step")
    done = f"trained {result.steps} steps" if not req.resume else f"trained steps {result.start + 1}-{result.steps}"
    parts = [f"{done} in {result.seconds:.1f} s"]
    if req.resume and result.start >= result.steps:   # its last checkpoint was there, its export not
        parts = [f"trained no step (the run had trained its {result.steps}); wrote the export {req.export}"]
    parts += [shown] if shown else []
    data = result.data
    if data.batches:   # the loader's own cost (read ahead on a thread) and what the loop waited for it
        parts.append(f"data {data.read_s:.2f} s to read ahead, {data.wait_s:.2f} s waited "
                     f"({100 * data.wait_s / max(result.seconds, 1e-9):.1f}% of the run)")
    return "; ".join(parts + [f"metrics in {run_dir / 'metrics.jsonl'}"])
