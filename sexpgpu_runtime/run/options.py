"""How a run is asked for, and how it fails: `RunOptions`, the run's error types, `check_options`.

`RunError` is a run that cannot go on for a reason the user can act on
(`sexpgpu run` exits 1); `OptionError` one of those found in the command
line before anything runs (exit 2); `BadValue` a NaN or infinite value at
a step; `BadDraw` a generator's traced temperature out of range at a step
(exit 2); `RunStopped` a stop by SIGINT or SIGTERM, after the last completed
step was saved (exit 130 or 143); `RunFinished` a `--resume` of a run that has
trained its steps already, which changes nothing (exit 0).

Plain data and checks, used by every other module of the run: it imports
none of them but paths.py, and calls no JAX.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sexpgpu_lang import ir

from .paths import PathProblem, check_output_file


class RunError(Exception):
    """A run that cannot go on, for a reason the user can act on (bad data, a NaN loss, an unwritable dir)."""


class DataError(RunError):
    """A loader's data that cannot be read as declared (a missing or mis-typed file, a field the file
    lacks, a token id outside `:vocab`), found before anything trains: the command line exits 2 for
    it, as for any file that cannot be read (docs/cli.md)."""


class OptionError(RunError):
    """A command-line option that cannot work (an `--export` path that cannot be written, say): found
    before anything runs; the command line exits 2 for it, as for any usage problem."""


class BadValue(RunError):
    """A loss, metric or parameter that is NaN or infinite at a step; `metric` is as shown (`` `loss` ``)."""

    def __init__(self, step: int, metric: str, value: float):
        super().__init__(f"step {step}: {metric} is {value}")
        self.step, self.metric, self.value = step, metric, value


class BadDraw(BadValue):
    """A generator's traced `categorical` temperature that was negative, infinite or NaN at a step
    (sexpgpu_runtime.lowering.draw_check): a setting the file computes wrongly, so the command line exits 2
    for it, as for bad input. `where` is the draw's file:line:col, `trip` its trip, `pass_name` the
    pass whose generator drew it (None: training); `saved` says which checkpoint is the last good one."""

    def __init__(self, step: int, where: str, trip: int, value: float, pass_name: str | None = None,
                 saved: str = ""):
        run = f"pass `{pass_name}`'s generator" if pass_name else "the generator"
        RunError.__init__(self, f"step {step}: the `:temperature` of the `categorical` at {where} is {value} at "
                          f"trip {trip} of {run}; it must be finite and 0 or more (0 is the argmax), so compute "
                          f"it so that it stays in range, e.g. `(maximum t 0.0)`" + (f"; {saved}" if saved else ""))
        self.step, self.metric, self.value = step, "`:temperature`", value
        self.where, self.trip, self.pass_name = where, trip, pass_name

    def saved_at(self, saved: str) -> "BadDraw":
        """The same error, saying which checkpoint is the last good one (`saved`)."""
        return BadDraw(self.step, self.where, self.trip, self.value, self.pass_name, saved)


class RunStopped(Exception):
    """A signal stopped the run. `step` is the step that was abandoned (1-based, as in metrics.jsonl);
    `saved` the step of the newest complete checkpoint, in `dir`; `exit_code` 130 (SIGINT) or 143 (SIGTERM)."""

    def __init__(self, signal_name: str, exit_code: int, step: int, saved: int, dir: Path):
        super().__init__(f"stopped by {signal_name} during step {step}; step {saved} is saved in {dir}")
        self.signal_name, self.exit_code, self.step, self.saved, self.dir = signal_name, exit_code, step, saved, dir


class RunFinished(Exception):
    """`--resume` of a run that has trained its steps already (`step`, the last it trained, at least
    `total`, the steps asked for): nothing was read or written; the message says how to train longer."""

    def __init__(self, message: str, step: int, total: int):
        super().__init__(message)
        self.step, self.total = step, total


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
    export_names: str | None = None   # `--export-names gpt2` (or a model of the file with `:names`): the HF layout, through that mapping
    max_shard_bytes: int = 5 * 10**9  # `--max-shard-size`: shards of that export above this size
    resume: bool = False
    overwrite: bool = False
    devices: int | None = None     # `--mesh data=N`: the data axis size (else the file's `:devices`, else every device)
    fsdp: bool | None = None       # `--fsdp`/`--no-fsdp`: split parameters and optimizer state (else `:shard-params`)


def check_options(program: ir.Program, options: RunOptions) -> None:
    """Refuse, before anything runs, options that cannot work: OptionError for the command line's
    (`--export`, `--diagnostics`, `--resume` with `--overwrite`), RunError for a `:diagnostics` name
    in the file's `run` form that no `diagnostic` reports."""
    if options.resume and options.overwrite:
        raise OptionError("--resume continues the run in the run dir and --overwrite starts it over; give one")
    if options.export_frozen and options.export is None:
        raise OptionError("--export-frozen says what --export writes; give --export PATH too")
    if options.export_names is not None:
        from sexpgpu_lang.name_mapping import stdlib_names
        from ..weights.pretrained import export_mapping
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
        have = {".".join(p.path) for p in program.params if options.export_frozen or not p.frozen}
        trainable = {".".join(p.path) for p in program.params if not p.frozen}
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
    elif options.export is not None:
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
