"""How a run is asked for: `RunOptions`, and `check_options`, which refuses before anything runs
options that cannot work (OptionError, or RunError for the file's own `:diagnostics`; errors.py);
`shard_bytes`, the `--max-shard-size` value; `resume_command`, the command line that takes a
stopped run up again.

Plain data and checks: it calls no JAX, and of the runtime imports only paths.py, errors.py and
weights.pretrained (for `--export-names`' mapping).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sexpgpu_lang import ir
from sexpgpu_lang.files.bounded_read import open_regular
from sexpgpu_lang.name_mapping import stdlib_names

from ..weights.export_files import MANIFEST, holds_export
from ..weights.pretrained import export_mapping
from ..paths import check_output_file
from ..errors import OptionError, PathProblem, RunError


@dataclass
class RunOptions:
    """How to run: `steps` overrides the file's `:steps`; metrics (and by default checkpoints) go under
    `run_dir`; `diagnostics` are selected besides the run form's `:diagnostics`; `resume` continues from
    the newest complete checkpoint there; `overwrite` starts afresh in a run dir an earlier run used,
    removing its checkpoints, metrics.jsonl and TensorBoard events."""

    steps: int | None = None
    run_dir: Path = Path("runs/run")
    diagnostics: tuple[str, ...] = ()
    progress: bool = False
    quiet: bool = False
    export: Path | None = None
    export_frozen: bool = False    # `--export-frozen`: the frozen parameters too
    export_adapter: bool = False   # `--export-adapter`: the LoRA adapters alone, in PEFT's layout
    export_names: str | None = None   # `--export-names gpt2` (or a model of the file with `:names`): the HF layout, through that mapping
    max_shard_bytes: int = 5 * 10**9  # `--max-shard-size`: shards of that export above this size
    resume: bool = False
    overwrite: bool = False
    devices: int | None = None     # `--mesh data=N`: the data axis size (else the file's `:devices`, else every device)
    model: int | None = None       # `--mesh ...,model=M`: the tensor-parallel axis size (else the file's `:model-parallel`)
    fsdp: bool | None = None       # `--fsdp`/`--no-fsdp`: split parameters and optimizer state (else `:shard-params`)
    trip_loop: str | None = None   # `--trip-loop`: "host" or "compiled" (generator_graphs.TRIP_LOOPS); None: default_trip_loop
    compile_cache: str | None = None   # `--compile-cache DIR|off`: JAX's persistent cache (compile_cache.py)


def check_adapter_export(program: ir.Program, options: RunOptions) -> None:
    """OptionError, before training, for `--export-adapter` without `--export DIR`, beside
    `--export-names`, in a run without `:lora`, or with adapters PEFT's layout cannot name."""
    from ..errors import CheckpointError
    from ..weights.lora import adapter_modules, peft_config
    if options.export is None:
        raise OptionError("--export-adapter says what --export writes; give --export DIR too")
    if options.export_names is not None:
        raise OptionError("--export-adapter writes the adapters alone and --export-names the merged model; give one")
    if not program.adapters:
        raise OptionError("--export-adapter: the run has no LoRA adapters (give a model `:lora`)")
    try:
        adapter_modules(program)
        peft_config(program)
    except CheckpointError as e:
        raise OptionError(f"--export-adapter: {e}")
    if options.export.exists() and not options.export.is_dir():
        raise OptionError(f"cannot write {options.export}: an export in PEFT's layout is a directory")
    try:
        check_output_file(options.export / "adapter_model.safetensors")
    except PathProblem as e:
        if options.export.is_dir() or not options.export.parent.is_dir():
            raise OptionError(str(e))


def check_options(program: ir.Program, options: RunOptions) -> None:
    """Refuse, before anything runs, options that cannot work: OptionError for the command line's
    (`--export`, `--diagnostics`, `--resume` with `--overwrite`), RunError for a `:diagnostics` name
    in the file's `run` form that no `diagnostic` reports."""
    if options.trip_loop not in (None, "host", "compiled"):
        raise OptionError(f"--trip-loop: `{options.trip_loop}` is not a trip loop; give host or compiled")
    if options.resume and options.overwrite:
        raise OptionError("--resume continues the run in the run dir and --overwrite starts it over; give one")
    if options.export_frozen and options.export is None:
        raise OptionError("--export-frozen says what --export writes; give --export PATH too")
    if options.export_adapter:
        check_adapter_export(program, options)
    if options.export_names is not None and options.export is not None:
        if options.export.is_dir() and any(options.export.iterdir()) and not holds_export(options.export):
            raise OptionError(f"cannot write {options.export}: it is a directory that holds no export (no "
                              f"{MANIFEST}, model.safetensors or index), and an export writes its files there; give "
                              "a new or an earlier export's directory")
    if options.export_names is not None:
        found = export_mapping(program, options.export_names)
        if found is None:
            own = [spec.model for spec in program.pretrained if spec.named]
            raise OptionError(f"--export-names: no standard-library mapping `{options.export_names}`; they are "
                              + ", ".join(f"`{n}`" for n in stdlib_names())
                              + (", and the file's models with a `:names` mapping: " + ", ".join(f"`{n}`" for n in own)
                                 if own else ""))
        if options.export is None:
            raise OptionError("--export-names says how to write --export; give --export DIR too")
        names, where = found
        from sexpgpu_lang.name_mapping import shared_tensors
        shared = shared_tensors(names)
        if shared:
            tensor, whom = shared[0]
            raise OptionError(f"--export-names {options.export_names}: parameters " + ", ".join(f"`{w}`" for w in whom)
                              + f" are all read from tensor `{tensor}`, so an export would write it "
                              f"{len(whom)} times with different values ({where}); export through a mapping that "
                              "names a tensor of its own for each (an untied model's `lm_head.weight`: `:names :llama`)")
        lora = bool(program.adapters)   # the merged model: the frozen base, each adapter folded into it
        have = {".".join(p.path) for p in program.params if options.export_frozen or lora or not p.frozen}
        trainable = {".".join(p.path) for p in program.params if (lora or not p.frozen)
                     and not p.path[-1].endswith((".lora-a", ".lora-b"))}
        wrong = sorted(set(names) - have) or sorted(trainable - set(names))
        if wrong:
            why = "is not a parameter of the model" if wrong[0] in set(names) - have else "has no entry in it"
            raise OptionError(f"--export-names {options.export_names}: parameter `{wrong[0]}` {why} ({where})")
        if options.export.exists() and not options.export.is_dir():
            raise OptionError(f"cannot write {options.export}: an export in the Hugging Face layout is a directory")
        try:
            check_output_file(options.export / "model.safetensors")
        except PathProblem as e:
            if options.export.is_dir() or not options.export.parent.is_dir():
                raise OptionError(str(e))
    elif options.export is not None and not options.export_adapter:
        if options.export.exists() and not options.export.is_dir() and not _is_safetensors(options.export):
            raise OptionError(f"cannot write {options.export}: it exists and is not a safetensors file (an earlier "
                              "export), and an export replaces it; give a new path, or remove the file first")
        try:
            check_output_file(options.export)
        except PathProblem as e:
            raise OptionError(str(e))
    reported = program.diagnostics
    known = ("the file reports: " + ", ".join(f"`{n}`" for n in reported) if reported
             else "the file reports none (a `(diagnostic :name value)` in `objective` makes one)")
    for name in options.diagnostics:
        if name not in reported:
            raise OptionError(f"no diagnostic named `{name}`; {known}")
    for name in program.run.diagnostics:
        if name not in reported:
            raise RunError(f"`run` selects `:diagnostics` `{name}`, but no diagnostic is named `{name}`; {known}")


def _is_safetensors(path: Path) -> bool:
    """Whether `path` is a regular file that begins as a safetensors file does: an 8-byte little-endian
    header length that fits the file, then the header's `{`. (Reads 9 bytes; a FIFO is not opened.)"""
    try:
        with open_regular(str(path)) as fh:
            head = fh.read(9)
            size = os.fstat(fh.fileno()).st_size
    except OSError:
        return False
    return len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") <= size - 8


def shard_bytes(size: str) -> int:
    """`--max-shard-size`: bytes from a number with a unit of Hugging Face's (`5GB`, `500MB`, `200KB`,
    powers of 1000; `B` or none: bytes). ValueError for anything else."""
    text = size.strip().upper()
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3), ("B", 1), ("", 1)):
        if text.endswith(unit):
            try:
                n = float(text[:len(text) - len(unit)] if unit else text)
            except ValueError:
                break
            if n > 0:
                return int(n * scale)
            break
    raise ValueError(f"--max-shard-size {size}: give a size like 5GB, 500MB or 200KB")


def resume_command(file: Path, *, run_dir: Path | None = None, steps: int | None = None,
                   diagnostics: str | None = None, mesh: str | None = None, fsdp: bool | None = None,
                   coordinator: str | None = None, num_processes: int | None = None,
                   process_id: int | None = None, distributed: bool = False) -> list[str]:
    """The `sexpgpu run ... --resume` command line that takes a stopped run up again: the run's file and
    every option it was given that says where and how it runs (run dir, steps, diagnostics, mesh,
    FSDP, and a multi-process run's coordinator, process count and id, or `--distributed`); each
    process of a multi-process run is told its own."""
    again = ["sexpgpu", "run", str(file), "--resume"]
    again += ["--run-dir", str(run_dir)] if run_dir is not None else []
    again += ["--steps", str(steps)] if steps is not None else []
    again += ["--diagnostics", diagnostics] if diagnostics else []
    again += ["--mesh", mesh] if mesh else []
    again += [] if fsdp is None else ["--fsdp" if fsdp else "--no-fsdp"]
    again += ["--coordinator", coordinator] if coordinator else []
    again += ["--num-processes", str(num_processes)] if num_processes is not None else []
    again += ["--process-id", str(process_id)] if process_id is not None else []
    again += ["--distributed"] if distributed else []
    return again
