"""What every graph of a step shares: the context rows, the check of a phase's result against
the IR, and the `Tracer` that counts traces and makes each trace's effects.

Every graph that reads the context takes the group's context rows, one [S 6] i64 array
(`unpack_ctx`), not six scalars: on one device the rows go over with the batch in the group's
first call, and no separate graph unpacks them.
"""
from __future__ import annotations

from collections import Counter

import jax
import numpy as np

from sexpgpu_lang.language import CONTEXT_KEYS

from ..errors import InternalTypeError
from ..dtypes import JAX_DTYPES, mismatch
from .lora import dropout_key
from .lowering import Effects

#: The context keys and their numpy dtypes, in the order of a context row (`language.CONTEXT_KEYS`).
_CTX_FIELDS = tuple((k, np.dtype(JAX_DTYPES[d])) for k, d in CONTEXT_KEYS)


def context_row(step: int, microbatch: int, records: int, stage: int = 0, stage_records: int | None = None,
                pass_number: int = 0) -> tuple[int, ...]:
    """One microbatch's context row, its values in `language.CONTEXT_KEYS`' order (the one place that
    order is spelled): the rows a graph takes are `np.array([context_row(...), ...], np.int64)`, [S 6].
    `stage_records` defaults to `records` (no curriculum); `pass_number` is `:pass`: 0 in training, k
    for the file's k-th evaluation pass."""
    return (step, microbatch, records, stage, records if stage_records is None else stage_records, pass_number)


def make_ctx(step: int, microbatch: int, records: int, stage: int = 0, stage_records: int | None = None,
             pass_number: int = 0) -> dict:
    """The context scalars of one microbatch, keyed and typed as `language.CONTEXT_KEYS` says (`:step`
    i64, `:microbatch` i32, ...): the values of one context row (`context_row`), unpacked."""
    values = context_row(step, microbatch, records, stage, stage_records, pass_number)
    return {k: dt.type(v) for (k, dt), v in zip(_CTX_FIELDS, values, strict=True)}


def unpack_ctx(rows, copy: int = 0) -> dict:
    """Traced inside every graph that reads the context: the context scalars of copy `copy`, unpacked
    from the context rows `rows`, [S 6] i64 (one row of `make_ctx`'s values per copy of a stacked group,
    [1 6] else), with their dtypes (`make_ctx`). A stacked training graph unpacks each copy's row; the
    generator's copies share the first copy's (the step's context). One [S 6] array per call instead
    of six scalars: on one device the rows go over with the batch in `generate.init`'s call (or the
    training graph's), and no separate graph unpacks them."""
    return {k: rows[copy, i].astype(dt) for i, (k, dt) in enumerate(_CTX_FIELDS)}


def check_result(name: str, value, t) -> None:
    """InternalTypeError (a bug in sexpgpu) when graph `name`'s traced `value` is not of IR type `t`."""
    why = mismatch(value, t)
    if why:
        raise InternalTypeError(f"internal error: graph `{name}` returns a value whose type differs from the IR: {why}")


class Tracer:
    """The bookkeeping of one run's graphs: `traces` counts how often each graph was traced (once per
    run), and every trace draws from the run's `:seed` and reports the `selected` diagnostics."""

    def __init__(self, seed: int, selected: frozenset = frozenset()):
        self.seed = seed
        self.selected = selected
        self.traces: Counter = Counter()

    def counted(self, name: str, fn):
        """`fn`, counting each trace of it under `name` (the graph's name, as `explain` prints it)."""
        def traced(*args):
            self.traces[name] += 1
            return fn(*args)
        traced.__name__ = name.replace(" ", "_").replace(".", "_")
        return traced

    def fx(self, in_generator: bool = False, sums: dict | None = None, dropout_ctx: dict | None = None) -> Effects:
        """A fresh `Effects` for one trace of a phase (the generator's phases with `in_generator`;
        `sums`: the running sums of the gradients its repeated blocks add into, `Effects.sums`;
        `dropout_ctx`: the context of a training microbatch whose LoRA dropout masks are drawn,
        `Effects.dropout_key` from its step and microbatch, lora.py `dropout_key`)."""
        seed_key = jax.random.key(self.seed)
        return Effects(seed_key=seed_key, selected=self.selected, in_generator=in_generator, sums=dict(sums or {}),
                       dropout_key=None if dropout_ctx is None else dropout_key(seed_key, dropout_ctx))
