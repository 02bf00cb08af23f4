"""The `sexpgpu` command: lint, explain, run, plot, samples, tokenizer train, fmt, lsp, version.

Only the typer commands: each declares its options and help and calls the module that does its
work (`lint.py`, `explain.py`, `run.py`, `plot.py` ...). A thin shell: every check lives in
sexpgpu_lang, every step in sexpgpu_runtime, reached through its surface (`sexpgpu_runtime`).
`lint` and `lsp` never import JAX (the runtime is imported inside `run` and `explain --xla` only).
Exit status: 0 clean, 1 when a file has errors (its diagnostics, its data not as declared, a run
that fails), 2 for a usage problem (an option, or a command-line file that cannot be read, as
typer's own usage errors), 130 or 143 when SIGINT or SIGTERM stopped a run (after saving a
checkpoint to resume from; also for one that arrived while the run was starting, and at once for a
second signal): docs/cli.md lists them.
"""
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from .options import Command, Group

# Start-up (`sexpgpu lint` starts in at most 1.5x the time of `import typer`: benchmarks/cli_startup.py):
# the front end, the renderers, JAX, the server and pydantic are imported only by the commands that use
# them; see sexpgpu_cli/options.py for pydantic. No `from __future__ import annotations` here: typer reads
# every command's signature at start-up, and string annotations would each be compiled and evaluated.

VERSION = "0.1.0"

#: True when `main` runs the app (the process exits after the command), not a caller's `app()`.
_EXITS_AFTER = False


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
    from .lint import lint_files
    raise typer.Exit(lint_files(files, format.value, output, read_files, VERSION, _EXITS_AFTER))


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
    trip_loop: Optional[str] = typer.Option(None, "--trip-loop", metavar="host|compiled", help="How the generator's trips run: compiled, one lax.while_loop per group that looks for a stop before every trip (the default on one CPU device, where that look is a handler in C); host, one call of the trip graph per trip (the default elsewhere)."),
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
    from .run import RunRequest, run_file
    run_file(RunRequest(file, steps=steps, run_dir=run_dir, diagnostics=diagnostics, progress=progress, export=export,
                        export_frozen=export_frozen, export_adapter=export_adapter, export_names=export_names,
                        max_shard_size=max_shard_size, resume=resume, overwrite=overwrite, mesh=mesh,
                        coordinator=coordinator, num_processes=num_processes, process_id=process_id, fsdp=fsdp,
                        distributed=distributed, trip_loop=trip_loop, compile_cache=compile_cache, debug=debug))


@app.command(cls=Command)
def plot(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run dir holding metrics.jsonl (runs/<file stem> by default for `run`)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Where to write the image; its suffix picks the format (.png, .svg, .pdf, ...); default RUN_DIR/metrics.png."),
):
    """Draw every metric in RUN_DIR/metrics.jsonl against the step, as one image (PNG by default).

    A pass's metrics (`held-out-eval/loss`) share a panel with the training
    metric of the same name, so the two curves can be compared.
    """
    from .output import fail
    from .plot import PlotError, PlotUsageError, plot_run  # matplotlib is imported only here
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
    from .output import fail
    from .samples import SamplesError, SamplesUsageError, show_samples
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
    from .explain import explain_file
    explain_file(file, format.value, xla, memory_budget, mesh, fsdp, target)


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
    from .tokenizer import train_command  # tokenizers, not JAX
    train_command(corpus, output, vocab_size, min_frequency, tuple(special or ()))


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
    from .fmt import fmt_command
    raise typer.Exit(fmt_command(files, "diff" if diff else "check" if check else "write", width))


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
