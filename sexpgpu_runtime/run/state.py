"""What a run carries from step to step and what it leaves: `RunState`, `RunResult`, and the part of
a state a checkpoint holds (`checkpoint_tree`, `from_checkpoint`)."""
from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass
class RunResult:
    """What a finished run leaves: the final state, the logged metrics, and how often each graph was traced."""

    trainable: dict
    frozen: dict
    history: list[dict]
    traces: dict
    seconds: float
    steps: int = 0
    extra: dict = field(default_factory=dict)


def checkpoint_tree(state: RunState) -> dict:
    """The arrays of a state that a checkpoint holds: not the frozen parameters, which a resume
    makes again (initialised from the seed, or loaded from their `:pretrained` files, whose
    content hashes the checkpoint records)."""
    return {"trainable": state.trainable, "opt_state": state.opt_state, "counters": state.counters}


def from_checkpoint(step: int, tree: dict, records: int, frozen: dict) -> RunState:
    """The state a checkpoint's `tree` (`checkpoint_tree`) restores, with the frozen parameters made again."""
    return RunState(step, tree["trainable"], frozen, tree["opt_state"], records, tree["counters"])
