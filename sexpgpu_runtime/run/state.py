"""What a run carries from step to step and what it leaves: `RunState`, a step's `StepReport`,
`RunResult`, and the part of a state a checkpoint holds (`checkpoint_tree`, `from_checkpoint`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..data.prefetch import ReadStats


@dataclass
class RunState:
    """What a step changes. `step` is the next step to run (0-based); `records` the
    training records consumed so far (the loader position, and the curriculum's)."""

    step: int
    trainable: dict
    frozen: dict
    opt_state: object
    records: int
    counters: dict


@dataclass(frozen=True)
class StepReport:
    """What one training step (train.Trainer.step) leaves beside its state, all on the device until
    read: each microbatch's `losses` (scalars), its `metrics` and `diagnostics` (a dict of scalars per
    group); `bad`, the record of the first non-finite loss or metric of any step so far
    (training_graphs.tally; its first entry is ready once the step has ended); `draw`, the record of
    the first bad traced temperature so far (draw_check.py), or None; `tokens`, the tokens of the
    step's batches (report.batch_tokens), or None where the training records are not token rows."""

    losses: list
    metrics: list[dict]
    diagnostics: list[dict]
    bad: tuple
    draw: object | None
    tokens: int | None


@dataclass(frozen=True)
class RunResult:
    """What a finished run leaves: its final `trainable` and `frozen` parameters, the logged rows
    (`history`, metrics.jsonl's of this process's run), how often each graph was traced (`traces`),
    the seconds from the first step to the last (`seconds`), the step it ended at (`steps`) and the
    one it started from (`start`: 0, or the resumed checkpoint's), and what reading the training
    data cost (`data`)."""

    trainable: dict
    frozen: dict
    history: list[dict]
    traces: dict
    seconds: float
    steps: int
    start: int
    data: ReadStats


def checkpoint_tree(state: RunState) -> dict:
    """The arrays of a state that a checkpoint holds: not the frozen parameters, which a resume
    makes again (initialised from the seed, or loaded from their `:pretrained` files, whose
    content hashes the checkpoint records)."""
    return {"trainable": state.trainable, "opt_state": state.opt_state, "counters": state.counters}


def from_checkpoint(step: int, tree: dict, records: int, frozen: dict) -> RunState:
    """The state a checkpoint's `tree` (`checkpoint_tree`) restores, with the frozen parameters made again."""
    return RunState(step, tree["trainable"], frozen, tree["opt_state"], records, tree["counters"])
