"""A run's data as its step takes it: the loaders opened, each training position's stage and
batch, a group of microbatches with its context rows, and an evaluation pass's batches.

A training position is the number of training records consumed (`RunState.records`): with a
`curriculum` it falls in one of its stages, whose loader reads at the position within the stage.
On a mesh (`dp`, a sharding.DataParallel) a batch is placed along the mesh's `data` axis and, on
several processes, each reads only its own rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sexpgpu_lang import ir

from ..data.loaders import Loader
from ..data.prefetch import Prefetch
from ..errors import DataError, LoaderError
from ..lowering.context import context_row
from .id_tables import check_ids, index_limits


def _stack(trees: list[dict]) -> dict:
    return {k: np.stack([t[k] for t in trees]) for k in trees[0]}


@dataclass(frozen=True)
class Loaders:
    """A run's loaders, opened and checked (`open_loaders`): `training` by loader name (the
    curriculum's stages', or the run's one), `passes` by pass name."""

    training: dict[str, Loader]
    passes: dict[str, Loader]


def open_loaders(program: ir.Program) -> Loaders:
    """Open the loaders of `program`, the first thing a run reads: DataError when a loader's data
    are not as declared, give an id outside a table it indexes (id_tables.py), or a pass would read
    more records than its loader holds."""
    run = program.run
    try:
        stage_loaders = [name for name, _ in program.stages] or [run.loader]
        training = {name: Loader(program.loaders[name], run.seed) for name in dict.fromkeys(stage_loaders)}
        passes = {ps.name: Loader(program.loaders[ps.loader], run.seed) for ps in program.passes}
        # the ids each loader gives against the tables they index, before training (id_tables.py)
        opened = {**{ps.loader: passes[ps.name] for ps in program.passes}, **training}
        check_ids(program, opened, index_limits(program))
    except LoaderError as e:
        raise DataError(str(e)) from None
    for ps in program.passes:
        # A pass reads its loader's first K batches; more than the loader holds would repeat records.
        ld = passes[ps.name]
        if ps.batches * ld.spec.batch > ld.records:
            raise DataError(f"pass `{ps.name}` reads {ps.batches} batches of {ld.spec.batch} "
                           f"({ps.batches * ld.spec.batch} records), but {ld.where} has {ld.records}; "
                           "lower its `:batches`, or give the loader more records")
    return Loaders(training, passes)


class Batches:
    """The batches of each step of one run of `program`, from its `loaders` (`open_loaders`:
    `loaders` by name for training, `pass_loaders` by pass), grouped as the graphs' `layout`
    (graphs.Layout) says and placed on the mesh `dp` (a sharding.DataParallel, or None on one
    device); `feed` while the loop runs (prefetch.py)."""

    def __init__(self, program: ir.Program, loaders: Loaders, layout, dp=None):
        run = program.run
        self.program, self.layout, self.dp = program, layout, dp
        self.loaders, self.pass_loaders = loaders.training, loaders.passes
        self.stages = [(name, n) for name, n in program.stages] or [(run.loader, None)]
        self.batch_size = program.loaders[run.loader].batch
        self.feed: Prefetch | None = None   # the training batches, read ahead on a thread while the loop runs

    def prefetch(self, records: int, steps: int) -> Prefetch:
        """Start reading the training batches of `steps` steps from position `records` ahead (`feed`)."""
        per_step = self.layout.groups * self.layout.stack * self.batch_size
        self.feed = Prefetch(self.training_batch, self.batch_size, records + steps * per_step)
        return self.feed

    def stage_at(self, records: int) -> tuple[int, str, int]:
        """(stage index, its loader, records consumed within it) for a training position."""
        start = 0
        for i, (name, n) in enumerate(self.stages):
            if n is None or records < start + n or i == len(self.stages) - 1:
                return i, name, records - start
            start += n
        raise AssertionError("unreachable")

    def read(self, loader: Loader, position: int) -> dict:
        """The batch at `position`: on several processes only this process's rows (sharding.py)."""
        return loader.batch(position) if self.dp is None else self.dp.read(loader, position)

    def training_batch(self, records: int) -> dict:
        """The training batch at training position `records` (its stage's loader, at the position within)."""
        _, name, within = self.stage_at(records)
        return self.read(self.loaders[name], within)

    def host_group(self, step: int, group: int, records: int):
        """The batches of one group of microbatches as numpy ([S B ...] when stacked), their context
        rows ([S 6] i64, `make_ctx`'s values per copy) and the records consumed after the group.
        While the loop runs, the batches come from `feed`, read ahead on a thread (prefetch.py)."""
        batches, rows = [], []
        for i in range(self.layout.stack):
            stage, name, within = self.stage_at(records)
            batches.append(self.feed.take(records) if self.feed is not None else self.training_batch(records))
            rows.append(context_row(step, group * self.layout.stack + i, records, stage, within))
            records += self.batch_size
        batch = _stack(batches) if self.layout.stack > 1 else batches[0]
        return batch, np.array(rows, np.int64), records

    def next_group(self, step: int, group: int, records: int):
        """One group of microbatches as the graphs take it: (batch, context rows, records after the group).
        On one device numpy (the group's first call transfers both, `Graphs.generate`); on a mesh placed:
        the records split along the mesh's `data` axis, the context rows on every device."""
        batch, rows, records = self.host_group(step, group, records)
        if self.dp is not None:
            batch = self.dp.put_batch(batch, stacked=self.layout.stack > 1)
            rows = self.dp.put_replicated(rows)
        return batch, rows, records

    def pass_batches(self, ps: ir.PassIR, step: int, records: int):
        """The K batches of pass `ps` (always its loader's first K, so evaluations compare) with their
        context rows: the training position the pass runs at, `:pass` its number in the file."""
        loader = self.pass_loaders[ps.name]
        stage, _, within = self.stage_at(records)
        number = 1 + [p.name for p in self.program.passes].index(ps.name)   # `:pass`
        pass_rows = np.array([context_row(step, 0, records, stage, within, number)], np.int64)
        for k in range(ps.batches):
            batch, rows = self.read(loader, k * loader.spec.batch), pass_rows
            if self.dp is not None:
                batch, rows = self.dp.put_batch(batch, stacked=False), self.dp.put_replicated(rows)
            yield batch, rows
