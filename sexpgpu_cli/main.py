"""The `sexpgpu` command: lint, explain, run, plot, tokenizer train, lsp.

A thin shell: every check lives in sexpgpu_lang, every step in
sexpgpu_runtime. `lint` and `lsp` never import JAX (the runtime is imported
inside `run` and `explain --xla` only). Exit status: 0 clean, 1 when a file
has errors (its diagnostics, its data not as declared, a run that fails), 2
for a usage problem (an option, or a command-line file that cannot be read,
as typer's own usage errors), 130 or 143 when
SIGINT or SIGTERM stopped a run (after saving a checkpoint to resume from;
also for one that arrived while the run was starting, and at once for a
second signal): docs/cli.md lists them.
"""
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
import typer.core

from .early_signals import EarlySignals

# Start-up (`sexpgpu lint` is meant to start about as fast as `import lark`): the front end,
# the renderers, JAX, the server and pydantic are imported only by the commands that use them;
# see `_fast_process_value` for pydantic. No `from __future__ import annotations` here: typer reads every
# command's signature at start-up, and string annotations would each be compiled and evaluated.

VERSION = "0.1.0"

#: True when `main` runs the app (the process exits after the command), not a caller's `app()`.
_EXITS_AFTER = False


def _fast_process_value(param, ctx, value, base):
    """A command-line parameter's value converted here, without pydantic, or by `base` (its typer class).

    typer converts every parameter's value through a pydantic `TypeAdapter`, and importing
    pydantic (and its plugin loader, which imports importlib.metadata) and building the adapters
    costs more than the rest of `sexpgpu lint`. This converts, in click's public
    `Parameter.process_value`, the values of the simple parameters the commands here declare (a
    path, a list of paths, an enum choice, a plain `str` or `bool`, or no value) as typer does
    for them; any other parameter, any declaration with a path check or a parser, and any value
    this does not accept (an unknown choice, an unreadable file), goes to typer's own conversion,
    which then reports the error exactly as typer does. `declared` is the command function's
    parameter (its annotation and its `typer.Option`/`typer.Argument`; `--help`: a bool flag), set by
    `Command.get_params`.
    """
    if param.declared is not None:
        try:
            out = _convert(value, *param.declared, param.multiple or param.nargs == -1)
        except _Unsure:
            pass
        else:
            if not (param.required and param.value_is_missing(out)):   # (typer says what is missing)
                return out if param.callback is None else param.callback(ctx, param, out)
    return base.process_value(param, ctx, value)


class _Unsure(Exception):
    """`_fast_process_value` leaves this value to typer."""


def _convert(value, annotation, info, multi: bool):
    """`value` converted as typer converts it for `annotation` declared with `info` (a
    typer.models.ParameterInfo); _Unsure where this does not know that it would be the same."""
    if value is None:
        return () if multi else None
    if getattr(info, "parser", None) is not None:
        raise _Unsure
    if multi:
        item = _list_item(annotation)
        if item is None or not isinstance(value, (list, tuple)):
            raise _Unsure
        return [_convert_one(v, item, info) for v in value]
    if isinstance(value, (list, tuple)):
        raise _Unsure
    return _convert_one(value, annotation, info)


def _convert_one(value, annotation, info):
    if isinstance(annotation, type) and issubclass(annotation, Enum) and isinstance(value, (str, annotation)):
        if isinstance(value, annotation):   # (the default)
            return value
        if getattr(info, "case_sensitive", True) is True:
            for member in annotation:
                if member.value == value:
                    return member
        raise _Unsure   # typer words the error
    if annotation is bool and isinstance(value, bool):
        return value
    if annotation is str and isinstance(value, str):
        return value
    if annotation is Path and isinstance(value, str) and value and _plain_path(info):
        import os
        if os.path.exists(value) and not os.access(value, os.R_OK):
            raise _Unsure   # typer's "is not readable"
        return Path(value)
    raise _Unsure


def _plain_path(info) -> bool:
    """Whether a path parameter declares none of the checks typer would make on it beyond readability."""
    want = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False, "readable": True,
            "resolve_path": False, "allow_dash": False, "path_type": None}
    return all(getattr(info, k, v) == v for k, v in want.items())


def _list_item(annotation):
    """The item type of `list[X]` / `List[X]`, else None."""
    from typing import get_args, get_origin
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return args[0] if len(args) == 1 else None
    return None


def _convert_without_pydantic(command, params) -> None:
    """Give each of `command`'s typer parameters `_fast_process_value`'s conversion, with its declaration
    (the class of a typer parameter becomes its subclass here: only click's public API is used)."""
    import inspect
    declared = inspect.signature(command.callback).parameters if command.callback is not None else {}
    for p in params:
        fast = _FAST.get(type(p))
        if fast is not None and p.name in declared:
            p.__class__ = fast
            p.declared = (declared[p.name].annotation, declared[p.name].default)
        elif fast is not None and getattr(p, "is_flag", False) and p.name == "help":   # typer's own `--help`
            p.__class__ = fast
            p.declared = (bool, None)


class _FastArgument(typer.core.TyperArgument):
    """A typer argument whose value `_fast_process_value` converts (click's `Parameter.process_value`)."""

    declared = None

    def process_value(self, ctx, value):
        return _fast_process_value(self, ctx, value, typer.core.TyperArgument)


class _FastOption(typer.core.TyperOption):
    """A typer option whose value `_fast_process_value` converts (click's `Parameter.process_value`)."""

    declared = None

    def process_value(self, ctx, value):
        return _fast_process_value(self, ctx, value, typer.core.TyperOption)


_FAST = {typer.core.TyperArgument: _FastArgument, typer.core.TyperOption: _FastOption}


class _PlainHelp:
    """Help that reads like a usual command line. Typer writes a required argument as `{files}...` in
    the usage line and gives every flag a `<bool>` type, as if it took a value; here an argument is its
    metavar (`FILE...`, `[FILE]` when optional) and a flag (`--resume`, `--help`) shows no type."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        args = [p for p in self.get_params(ctx) if isinstance(p, typer.core.TyperArgument)]
        for p in args:
            typer_piece = p.get_usage_pieces(ctx)
            name = (p.metavar or p.name.upper()) + ("..." if p.nargs != 1 else "")
            plain = name if p.required else f"[{name}]"
            pieces = [plain if piece in typer_piece else piece for piece in pieces]
        return pieces

    def get_params(self, ctx):
        params = super().get_params(ctx)
        _convert_without_pydantic(self, params)   # `--help` is made here, after __init__
        for p in params:
            if getattr(p, "is_flag", False) and p.metavar is None:
                p.metavar = ""   # a flag takes no value: no type column
        return params


class Command(_PlainHelp, typer.core.TyperCommand):
    """Every `sexpgpu` command."""


class Group(_PlainHelp, typer.core.TyperGroup):
    """`sexpgpu` itself."""


app = typer.Typer(
    name="sexpgpu",
    cls=Group,
    help="Check, explain and run SexpGPU run files; serve them to editors.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    """`sexpgpu --version`: the version, then exit (as `sexpgpu version`)."""
    if value:
        print(f"sexpgpu {VERSION}")
        raise typer.Exit()


@app.callback()
def _root(show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                             help="Print the version and exit.")):
    """Check, explain and run SexpGPU run files; serve them to editors."""


class Format(str, Enum):
    """`lint`'s report formats."""

    text = "text"
    json = "json"
    sarif = "sarif"


class ExplainFormat(str, Enum):
    """`explain`'s formats (a SARIF log holds diagnostics, which explain does not print)."""

    text = "text"
    json = "json"


def fail(message: str, code: int = 2, debug: bool = False) -> "typer.Exit":
    """Print one `sexpgpu: error: ...` line to stderr and return the Exit to raise
    (after the traceback of the exception being handled, with `debug`)."""
    if debug:
        import traceback
        traceback.print_exc()
    print(f"sexpgpu: error: {message}", file=sys.stderr)
    return typer.Exit(code)


def load(path: Path, read_files: bool = False, build_ir: bool = True):
    """Check one file (opening no other file unless `read_files`: the `:pretrained` headers;
    building the IR only with `build_ir`); an unreadable file is one line on stderr and exit 2."""
    from sexpgpu_lang import analyze_file
    try:
        return analyze_file(str(path), read_files, build_ir)
    except (OSError, UnicodeDecodeError) as e:
        raise cannot_read(path, e)


def cannot_read(path: Path, e: Exception) -> "typer.Exit":
    """`fail`'s one line for a run file that cannot be read (`e`, an OSError or UnicodeDecodeError)."""
    if isinstance(e, FileNotFoundError):
        return fail(f"cannot read {path}: no such file")
    if isinstance(e, IsADirectoryError):
        return fail(f"cannot read {path}: it is a directory")
    if isinstance(e, UnicodeDecodeError):
        return fail(f"cannot read {path}: not UTF-8 text ({e.reason} at byte {e.start})")
    return fail(f"cannot read {path}: {e.strerror or e}")


def run_files(paths: List[Path]) -> List[tuple[Path, bool]]:
    """The files `lint` checks, each with whether a DIR named it: each FILE as given, and every
    *.sx below each DIR (recursively, sorted). A directory holding no *.sx is one line and exit 2."""
    out: List[tuple[Path, bool]] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.sx") if p.is_file())
            if not found:
                raise fail(f"no run files (*.sx) under {path}")
            out += [(p, True) for p in found]
        else:
            out.append((path, False))
    return out


def lint_one(path: Path, found: bool, read_files: bool):
    """`lint`'s check of one file (sexpgpu_lang.lint); a file it cannot read is one line and exit 2."""
    from sexpgpu_lang.lint import lint_file
    try:
        return lint_file(str(path), found, read_files)
    except (OSError, UnicodeDecodeError) as e:
        raise cannot_read(path, e)


def print_text(results, file=None) -> tuple[int, int, int]:
    """Print diagnostics compiler-style (to `file`, default stdout); return (errors, warnings, notes:
    information and hints)."""
    from sexpgpu_lang import render
    n_err = n_warn = n_note = 0
    for res in results:
        for d in res.diagnostics:
            print(render.to_text(res.source, d), file=file)
            print(file=file)
            n_err += d.is_error
            n_warn += d.severity == 2
            n_note += d.severity > 2
    return n_err, n_warn, n_note


@app.command(cls=Command)
def lint(
    files: List[Path] = typer.Argument(..., metavar="FILE|DIR", help="Run files (.sx) to check; a directory stands for every *.sx below it."),
    format: Format = typer.Option(Format.text, "--format", "-f", help="text (compiler style), json (one array), or sarif (SARIF 2.1.0)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write the report to this file instead of standard output."),
    read_files: bool = typer.Option(False, "--read-files", help="Also read each `:pretrained` file's header and compare it with `:params` (E-MODEL-003), each loader's files as `run` reads them (a missing file, a tokenizer.json that is not one, a jsonl row it refuses: E-LOADER-001) and its `:tokenizer` against `:vocab` (W-LOADER-001), as `run` does. Without it, lint opens no file but the run files."),
):
    """Check run files and print their diagnostics.

    A directory is searched recursively for *.sx files. Exit status: 0 when
    no file has an error, 1 when one does, 2 for a usage or I/O problem.
    Warnings alone leave the status 0.
    """
    import gc
    # No cyclic garbage collection while importing the front end and checking: lint keeps every
    # result until it prints them and makes little garbage, so collections would only walk the
    # modules and trees again and again (40% of the CPU time of a 10,000-line file; peak memory is
    # the same). As the `sexpgpu` command, what exists is then frozen (`gc.freeze`): the process
    # is about to exit, and no collection, the one at exit included, walks it again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        from sexpgpu_lang import render
        results = [lint_one(f, found, read_files) for f, found in run_files(files)]
    finally:
        if collecting:
            if _EXITS_AFTER:
                gc.freeze()
            gc.enable()
    if format == Format.text:
        if output:
            try:
                with output.open("w", encoding="utf-8") as fh:
                    n_err, n_warn, n_note = print_text(results, fh)
            except OSError as e:
                raise fail(f"cannot write {output}: {e.strerror or e}")
        else:
            n_err, n_warn, n_note = print_text(results)
        print(f"{len(results)} file{'s' if len(results) != 1 else ''} checked: {render.summary(n_err, n_warn, n_note)}",
              file=sys.stderr)
    else:
        pairs = [(r.source, r.diagnostics) for r in results]
        text = render.to_json(pairs) if format == Format.json else render.to_sarif(pairs, VERSION)
        if output:
            try:
                output.write_text(text + "\n")
            except OSError as e:
                raise fail(f"cannot write {output}: {e.strerror or e}")
        else:
            print(text)
    raise typer.Exit(1 if any(r.has_errors for r in results) else 0)


@app.command(cls=Command)
def run(
    file: Path = typer.Argument(..., metavar="FILE", help="The run file to train."),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, metavar="N", help="Train this many steps instead of the file's `:steps`."),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", metavar="DIR", help="Where metrics.jsonl (and checkpoints) go; default runs/<file stem>."),
    diagnostics: Optional[str] = typer.Option(None, "--diagnostics", metavar="NAME,...", help="Comma-separated names of the file's `diagnostic`s to compute and report (besides the `run` form's `:diagnostics`)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Show a progress bar (default: when stderr is a terminal)."),
    export: Optional[Path] = typer.Option(None, "--export", metavar="FILE", help="After training, write the trainable parameters to this .safetensors file (one run's student is the next run's `:pretrained` teacher); its directory is checked before training."),
    export_frozen: bool = typer.Option(False, "--export-frozen", help="With --export, write the frozen parameters too."),
    export_adapter: bool = typer.Option(False, "--export-adapter", help="With --export DIR, write the LoRA adapters alone in PEFT's layout (adapter_model.safetensors, adapter_config.json), which peft.PeftModel.from_pretrained loads."),
    export_names: Optional[str] = typer.Option(None, "--export-names", metavar="MAPPING", help="With --export DIR, write the model in the Hugging Face layout through this name mapping, inverted: a standard-library one (gpt2, llama), or a model of the run file whose `:pretrained` has `:names` (that mapping, over the root model's parameters): model.safetensors, or shards and model.safetensors.index.json."),
    max_shard_size: str = typer.Option("5GB", "--max-shard-size", metavar="SIZE", help="With --export-names, the largest shard (as Hugging Face's max_shard_size: 5GB, 500MB, 200KB)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the newest complete checkpoint in the run's checkpoint dir (it must have been made by this file's forms and seed); a run that has trained its steps already is left as it is."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Start over in a run dir an earlier run used, removing its checkpoints, metrics.jsonl and TensorBoard events."),
    mesh: Optional[str] = typer.Option(None, "--mesh", metavar="data=N,model=M", help="Data parallel over N devices (instead of the file's `:devices`, default every device): each batch split N ways, the parameters on every device (split along the mesh with --fsdp); model=M (instead of `:model-parallel`) splits attention by heads, the MLP by width and the vocabulary M ways (tensor parallel)."),
    coordinator: Optional[str] = typer.Option(None, "--coordinator", metavar="HOST:PORT", help="Multi-process run: the address of process 0 (with --num-processes and --process-id; jax.distributed)."),
    num_processes: Optional[int] = typer.Option(None, "--num-processes", min=1, metavar="N", help="Multi-process run: how many processes take part."),
    process_id: Optional[int] = typer.Option(None, "--process-id", min=0, metavar="I", help="Multi-process run: this process's index, 0 to N-1."),
    fsdp: Optional[bool] = typer.Option(None, "--fsdp/--no-fsdp", help="Split the parameters and optimizer state over the mesh (FSDP), or replicate them, whatever the file's `:shard-params`."),
    distributed: bool = typer.Option(False, "--distributed", help="Join a multi-process run with the settings JAX finds itself (JAX_COORDINATOR_ADDRESS, SLURM, Open MPI, Kubernetes, Cloud TPU)."),
    trip_loop: Optional[str] = typer.Option(None, "--trip-loop", metavar="host|compiled", help="How the generator's trips run: host (default), one call of the trip graph per trip; compiled, one lax.while_loop per group that asks the host before every trip (cheaper for a deep model's many small trips)."),
    compile_cache: Optional[str] = typer.Option(None, "--compile-cache", metavar="DIR|off", help="JAX's persistent compilation cache: this directory, or off (default: $SEXPGPU_COMPILE_CACHE, else ~/.cache/sexpgpu/jax); a later run of the same file reads its graphs from it instead of compiling them."),
    debug: bool = typer.Option(False, "--debug", help="On an error, also print its traceback (for a bug report)."),
):
    """Check a run file, then train it with JAX.

    A file with errors is refused (its diagnostics are printed as `lint`
    prints them). Metrics go to the terminal and to RUN_DIR/metrics.jsonl;
    checkpoints to RUN_DIR/checkpoints (or the `:checkpoint` `:dir`). A run
    dir an earlier run used is refused unless --resume or --overwrite says
    what to do with it. SIGINT or SIGTERM stops the run at the next trip or
    phase, saves the last completed step, prints how to resume and exits 130
    or 143.
    """
    early = EarlySignals.take()   # installed by the console script before typer, else now
    try:
        import shlex
        from sexpgpu_lang import render
        res = load(file, read_files=True)   # E-MODEL-003 (a `:pretrained` file that does not fit) stops it here
        if res.has_errors:
            n_err, n_warn, _ = print_text([res])
            print(f"sexpgpu: error: {file} has {render.summary(n_err, n_warn)}; fix them before running", file=sys.stderr)
            raise typer.Exit(1)
        from sexpgpu_runtime.devices.sharding import initialize, parse_mesh  # JAX is imported only here
        from sexpgpu_runtime.errors import MeshError, OptionError, RunError, RunFinished, RunStopped
        from sexpgpu_runtime.run.options import RunOptions, resume_command, shard_bytes
        from sexpgpu_runtime.run.train import train
        try:
            devices, model = parse_mesh(mesh) if mesh is not None else (None, None)
            initialize(coordinator, num_processes, process_id, detect=distributed)
        except (ValueError, MeshError) as e:
            raise fail(str(e), 2)
        early.stop_if_received()
        import jax
        if res.diagnostics and jax.process_index() == 0:
            print_text([res], sys.stderr)   # what `lint` says of the file (its warnings), before training
        from sexpgpu_runtime.run.rewards import reward_note
        note = reward_note(res.program)
        if note is not None and jax.process_index() == 0:   # the user's Python this run imports, said first
            print(f"sexpgpu: {note}", file=sys.stderr)

        try:
            shard_bytes(max_shard_size)
        except ValueError as e:
            raise fail(str(e), 2)
        opts = RunOptions(
            steps=steps,
            run_dir=run_dir if run_dir is not None else Path("runs") / file.stem,
            diagnostics=tuple(x.strip() for x in (diagnostics or "").split(",") if x.strip()),
            progress=sys.stderr.isatty() if progress is None else progress,
            export=export,
            export_frozen=export_frozen,
            export_adapter=export_adapter,
            export_names=export_names,
            max_shard_bytes=shard_bytes(max_shard_size),
            resume=resume,
            overwrite=overwrite,
            devices=devices,
            model=model,
            fsdp=fsdp,
            compile_cache=compile_cache,
            trip_loop=trip_loop,
        )
        try:
            result = train(res.program, opts)
        except OptionError as e:   # a usage problem: options that cannot work together or be written
            raise fail(str(e), 2, debug)
        except RunError as e:   # a file not as declared (DataError), a bad traced setting (BadDraw), a failed run
            raise fail(str(e), 1, debug)
        except RunStopped as e:
            again = resume_command(file, run_dir=run_dir, steps=steps, diagnostics=diagnostics, mesh=mesh, fsdp=fsdp,
                                   coordinator=coordinator, num_processes=num_processes, process_id=process_id,
                                   distributed=distributed)
            print(f"sexpgpu: {e}; resume with `{' '.join(shlex.quote(a) for a in again)}`", file=sys.stderr)
            raise typer.Exit(e.exit_code)
        except RunFinished as e:   # a resume of a finished run: nothing was read or written
            print(f"sexpgpu: {e}", file=sys.stderr)
            raise typer.Exit(0)
        except KeyboardInterrupt:
            raise fail("interrupted", 130)
        if early.received is not None:   # after the loop's last look: the run is complete, say so
            import signal
            print(f"sexpgpu: {signal.Signals(early.received).name} arrived after the last step; the run had "
                  "finished, so it stopped as it would have", file=sys.stderr)
        last = result.history[-1] if result.history else {}
        shown = "  ".join(f"{k} {v:.4g}" for k, v in last.items() if k != "step")
        done = f"trained {result.steps} steps" if not resume else f"trained steps {result.start + 1}-{result.steps}"
        parts = [f"{done} in {result.seconds:.1f} s"]
        if resume and result.start >= result.steps:   # its last checkpoint was there, its export not
            parts = [f"trained no step (the run had trained its {result.steps}); wrote the export {export}"]
        parts += [shown] if shown else []
        data = result.data
        if data.batches:   # the loader's own cost (read ahead on a thread) and what the loop waited for it
            parts.append(f"data {data.read_s:.2f} s to read ahead, {data.wait_s:.2f} s waited "
                         f"({100 * data.wait_s / max(result.seconds, 1e-9):.1f}% of the run)")
        print("; ".join(parts + [f"metrics in {opts.run_dir / 'metrics.jsonl'}"]), file=sys.stderr)
    finally:
        early.restore()   # the handlers `run` found: a library caller's own stay theirs


@app.command(cls=Command)
def plot(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run dir holding metrics.jsonl (runs/<file stem> by default for `run`)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Where to write the image; its suffix picks the format (.png, .svg, .pdf, ...); default RUN_DIR/metrics.png."),
):
    """Draw every metric in RUN_DIR/metrics.jsonl against the step, as one image (PNG by default).

    A pass's metrics (`held-out-eval/loss`) share a panel with the training
    metric of the same name, so the two curves can be compared.
    """
    from sexpgpu_cli.plot import PlotError, PlotUsageError, plot_run  # matplotlib is imported only here
    try:
        out = plot_run(run_dir, output)
    except PlotUsageError as e:
        raise fail(str(e), 2)
    except PlotError as e:
        raise fail(str(e), 1)
    print(f"wrote {out}", file=sys.stderr)


@app.command(cls=Command)
def samples(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run dir holding samples.jsonl (written by `run` under `:samples`)."),
    step: Optional[int] = typer.Option(None, "--step", metavar="N", help="Only the rows of step N."),
    pass_name: Optional[str] = typer.Option(None, "--pass", metavar="NAME", help="Only the rows of pass NAME (`train` for training)."),
):
    """Show the sampled rows in RUN_DIR/samples.jsonl as a table, newest first."""
    from sexpgpu_cli.samples import SamplesError, SamplesUsageError, show_samples
    try:
        show_samples(run_dir, step, pass_name)
    except SamplesUsageError as e:
        raise fail(str(e), 2)
    except SamplesError as e:
        raise fail(str(e), 1)


@app.command(cls=Command)
def explain(
    file: Path = typer.Argument(..., metavar="FILE", help="The run file to explain."),
    format: ExplainFormat = typer.Option(ExplainFormat.text, "--format", "-f", help="text or json."),
    xla: bool = typer.Option(False, "--xla", help="Also compile each graph with JAX and print XLA's own memory "
                             "and cost analysis beside the estimate (slow: seconds per graph)."),
    memory_budget: Optional[str] = typer.Option(None, "--memory-budget", metavar="SIZE",
                                                help="Device memory for `:stack :auto` and the fit check, e.g. "
                                                "80GiB or 16GB (default: the device's memory with --xla, else 16 GiB)."),
    mesh: Optional[str] = typer.Option(None, "--mesh", metavar="data=N,model=M", help="Explain the step on a mesh of N data-parallel devices (instead of the file's `:devices`) by M tensor-parallel ones (instead of `:model-parallel`): the mesh line, each parameter's sharding and the memory per device."),
    fsdp: Optional[bool] = typer.Option(None, "--fsdp/--no-fsdp", help="With a mesh: the parameters and optimizer state split over it (FSDP), or replicated, whatever the file's `:shard-params`."),
    target: Optional[str] = typer.Option(None, "--target", metavar="accelerator|cpu",
                                         help="The compiler whose fusion the live sets model (default: "
                                         "accelerator; with --xla, JAX's default backend's)."),
):
    """Print the training step as graphs, with the lowering report, the memory plan and the cost model.

    The graphs are generate.init, generate.step (with its trips),
    generate.finish, train, update and each pass. Everything but `--xla` is computed statically from the checked file, without JAX.
    """
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
        from sexpgpu_runtime.devices.device import backend_target, device_budget  # JAX only here
        from sexpgpu_runtime.lowering.xla_report import xla_report
        if budget is None:
            budget, source = device_budget()
        target = target or backend_target()
    report = build(program, budget, source, target or "accelerator")
    if xla:
        report["xla"] = xla_report(program, report)
    if format == ExplainFormat.text:
        print(to_text(report))
    else:
        import json
        print(json.dumps(report, indent=2))


tokenizer_app = typer.Typer(name="tokenizer", cls=Group, no_args_is_help=True, add_completion=False,
                            help="Tokenizers for text loaders (`text-tokens`, `jsonl`, `parquet`).")
app.add_typer(tokenizer_app)


@tokenizer_app.command("train", cls=Command)
def tokenizer_train(
    corpus: List[str] = typer.Argument(..., metavar="FILE_OR_GLOB...", help="Text files to train on: paths or quoted globs (`**` matches directories, `$STDLIB` is the Python standard library)."),
    output: Path = typer.Option(..., "--output", "-o", metavar="FILE", help="Where to write the tokenizer.json."),
    vocab_size: int = typer.Option(1024, "--vocab-size", min=257, metavar="N", help="The vocabulary's size: the 256 byte symbols, the special tokens and the merges."),
    min_frequency: int = typer.Option(2, "--min-frequency", min=1, metavar="N", help="A merge must occur this often."),
    special: Optional[List[str]] = typer.Option(None, "--special", metavar="TOKEN", help="A special token, e.g. `<|endoftext|>` for `:separator` (repeat for more)."),
):
    """Train a byte-level BPE tokenizer (Hugging Face `tokenizers`' trainer) on text files; write its tokenizer.json."""
    from sexpgpu_cli.tokenizer import TokenizeError, expand, train_bpe  # tokenizers, not JAX
    try:
        files = [f for pattern in corpus for f in expand(pattern)]
    except OSError as e:   # a glob past bounded_read's limits
        raise fail(e.strerror or str(e))
    if not files:
        raise fail(f"no file matches {' '.join(corpus)}; give text files or a quoted glob")
    try:
        size = train_bpe(files, vocab_size, str(output), min_frequency, tuple(special or ()))
    except TokenizeError as e:
        raise fail(str(e))
    except OSError as e:
        raise fail(f"cannot write {output}: {e.strerror or e}")
    except Exception as e:   # tokenizers raises bare Exceptions (e.g. an unwritable output)
        raise fail(f"cannot train or write {output}: {e}")
    print(f"wrote {output}: {size} tokens, trained on {len(files)} file{'s' if len(files) != 1 else ''}", file=sys.stderr)


@app.command(cls=Command)
def fmt(
    files: List[Path] = typer.Argument(..., metavar="FILE|DIR", help="Run files (.sx) to format; a directory stands for every *.sx below it."),
    check: bool = typer.Option(False, "--check", help="Write nothing; name each file that would change, and exit 1 if one would."),
    diff: bool = typer.Option(False, "--diff", help="Write nothing; print a unified diff of each file that would change, and exit 1 if one would."),
    width: Optional[int] = typer.Option(None, "--width", min=20, max=400, metavar="N", help="The column limit (default 120, as the language server's `formatWidth`)."),
):
    """Format run files in place with the language server's formatter.

    The lines a file already breaks are kept, a line that is too long is
    broken, comments and line endings are kept; formatting a formatted file
    changes nothing. A file with a syntax error is left as it is. Exit
    status: 0, or 1 with --check or --diff when a file would change, 2 when
    a file could not be read or formatted.
    """
    from sexpgpu_cli.fmt import format_files, summary
    mode = "diff" if diff else "check" if check else "write"
    result = format_files(files, mode, width)
    if mode == "check":
        for path in result.changed:
            print(f"would reformat {path}")
    for line in result.errors:
        print(f"sexpgpu: error: {line}", file=sys.stderr)
    print(summary(result, mode), file=sys.stderr)
    raise typer.Exit(result.exit_code(mode))


@app.command(cls=Command)
def lsp():
    """Start the language server on standard input and output (for editors)."""
    from lsp.server import main as serve
    serve()


@app.command(cls=Command)
def version():
    """Print the version."""
    print(f"sexpgpu {VERSION}")


def main() -> None:
    """The console entry point: runs the app, and turns a usage mistake (a bad option
    value, a missing argument) into one `sexpgpu: error: ...` line and exit status 2.

    Usage errors are recognised by shape (`format_message()` and exit code 2), as
    click's and typer's own (vendored) click raise them alike.
    """
    global _EXITS_AFTER
    _EXITS_AFTER = True
    try:
        code = app(standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        print("sexpgpu: error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:
        if getattr(e, "exit_code", None) == 2 and hasattr(e, "format_message"):
            ctx = getattr(e, "ctx", None)
            cmd = getattr(ctx, "command_path", None) or "sexpgpu"
            message = e.format_message().replace("Value error, ", "").strip()
            if message:   # (empty: the help was printed for a bare `sexpgpu`)
                print(f"sexpgpu: error: {message} (see `{cmd} --help`)", file=sys.stderr)
            sys.exit(2)
        if type(e).__name__ in ("Exit",) and hasattr(e, "exit_code"):
            sys.exit(e.exit_code)
        raise
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
