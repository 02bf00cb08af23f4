"""Checkpoints with orbax-checkpoint: complete or absent, each stamped with the run's identity.

A checkpoint is a directory `<dir>/<step>` that orbax's CheckpointManager
writes under a temporary name and renames into place once every file is
down, so a process killed mid-write leaves the previous checkpoints as they
were (the temporary directory is ignored, and removed the next time the
directory is opened). `step` is the number of completed steps, the same
number as the `step` of a metrics.jsonl row.

Each checkpoint holds two items:
- `state`: a pytree of arrays (the trainable parameters, the optimizer
  state, the counter totals; not the frozen parameters, which a resume makes
  again), restored against the tree a fresh run builds, so optax's named
  tuples come back as they were;
- `meta`: JSON with the step, the records consumed (the loader position,
  see loaders.py), the identity (a hash of the run file's forms), the seed,
  the SHA-256 of every `:pretrained` file, by its path and its path
  relative to the run file (a resume with one changed is refused; the same
  bytes at the same relative place, a project moved, resume), and a CRC-32
  of every array of `state` (`digests`, by its tree path), written in the
  same atomic rename as the arrays; and a CRC-32 of the meta item itself
  (`meta_digest`).

Restoring verifies what was read against those digests, and the meta item
as an input (`meta_problem`: its types and ranges, its own digest), both
defined with the identity checks in checkpoint_meta.py; a
checkpoint that cannot be read or does not verify (bytes overwritten on
disk, a truncated data file, a stray empty step directory, an edited or
ill-typed meta item) is skipped, saying so on stderr,
and the newest one that verifies is resumed (docs/checkpoints.md).

When to save, what and how many to keep is the policy's (checkpoint_policy.py, which also reads
`:checkpoint`); this module writes, lists, verifies and reads what it is handed.

Several processes (jax.distributed, docs/sharding.md): every process opens
the same directory (a shared file system across hosts; `same_dir_everywhere`
refuses otherwise) and calls every save, restore and delete; orbax writes
each array's shards from the process that holds them, the metadata and the
JSON item from process 0 alone, and puts barriers between the steps. A
checkpoint does not record how many processes or devices wrote it: it is
restored onto whatever shardings the resuming run asks for. This module knows nothing of RunState or the
training loop: the policy hands it trees and numbers.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import jax
import numpy as np

from ..paths import make_writable_dir
from ..errors import CheckpointError, PathProblem
from .checkpoint_meta import META_DIGEST, Identity, Provenance, digests, first_difference, meta_digest, meta_problem
from .checkpoint_policy import CheckpointSpec

FORMAT = "sexpgpu-checkpoint 1"
TMP_SUFFIX = ".orbax-checkpoint-tmp"   # orbax's name for a directory being written
CORRUPT_SUFFIX = ".corrupt"           # a checkpoint that failed to read or verify, moved aside
FAILED_NOTE = ".failed-writes.json"   # the checkpoints whose writes failed (a full disk), and why


class _QuietOrbax(logging.Filter):
    """Orbax logs a failed background write with tracebacks on the `absl` logger; the same failure
    reaches the user as one CheckpointError line, so drop orbax's records there."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "/orbax/" not in record.pathname.replace("\\", "/")


_QUIET = _QuietOrbax()


class _QuietTasks(logging.Filter):
    """A failed read of tensorstore's leaves one asyncio task per array whose exception nobody
    retrieves (`Task exception was never retrieved`, with a traceback each, ~130 lines for a
    truncated file); the failure itself is reported as one line, so drop those records."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Task exception was never retrieved")


_QUIET_TASKS = _QuietTasks()


def _quiet_closed_loop(previous):
    """A `sys.unraisablehook` that drops `RuntimeError('Event loop is closed')`: after a failed read,
    tensorstore completes the reads still in flight from its own threads and hands each result
    to orbax's event loop, closed by then (dozens of tracebacks for one truncated file). Anything
    else goes to `previous`."""
    def hook(unraisable):
        e = unraisable.exc_value
        if isinstance(e, RuntimeError) and str(e) == "Event loop is closed":
            return
        previous(unraisable)
    hook.sexpgpu_quiet = True
    return hook


def _read_error(e: BaseException | None) -> bool:
    """Whether `e` (or an exception it was raised from) is a failed tensorstore read of a
    checkpoint's array data: a data file cut short or overwritten."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e)
        if text.startswith("Encountered error while reading array index") or "OUT_OF_RANGE:" in text \
                or "DATA_LOSS:" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


class _ReadLeftovers(logging.Filter):
    """On the `asyncio` logger: drop `_GatheringFuture exception was never retrieved` (and the
    like, with a traceback each) whose exception is a failed read of a checkpoint's arrays.
    Installed by a restore that failed so (`_contain_read_leftovers`); other records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _read_error(record.exc_info[1]))


_READ_LEFTOVERS = _ReadLeftovers()


def _contain_read_leftovers() -> None:
    """After a failed read of a checkpoint's arrays, orbax leaves the other reads of that restore
    suspended; when they are finalized, at any time up to the process's exit, each prints its
    own copy of the read error (`Exception ignored in: <coroutine object
    _read_array_index_and_device_put>`, tensorstore's whole spec) or an `asyncio` record. The
    failure reaches the user as one line (`Checkpoints.restore`), so from then on drop those,
    and only those: any other unraisable exception or record is printed as before."""
    log = logging.getLogger("asyncio")
    if _READ_LEFTOVERS not in log.filters:
        log.addFilter(_READ_LEFTOVERS)
    if getattr(sys.unraisablehook, "sexpgpu_read_leftovers", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable):
        if _read_error(unraisable.exc_value):
            return
        previous(unraisable)
    hook.sexpgpu_read_leftovers = True
    hook.sexpgpu_quiet = getattr(previous, "sexpgpu_quiet", False)
    sys.unraisablehook = hook


def same_dir_everywhere(path: Path) -> None:
    """In a multi-process run, CheckpointError on every process unless all name the same checkpoint
    dir (a collective: every process must call it). Two dirs would split each checkpoint between them."""
    if jax.process_count() == 1:
        return
    import hashlib
    from jax.experimental import multihost_utils
    mine = np.frombuffer(hashlib.sha256(str(path).encode()).digest(), np.uint8)
    every = np.asarray(multihost_utils.process_allgather(mine))
    if not (every == every[0]).all():
        others = sorted({k for k in range(len(every)) if not (every[k] == mine).all()})
        raise CheckpointError(f"the processes of this run write checkpoints to different dirs (this one, process "
                              f"{jax.process_index()}: {path}; process {others[0]} another); give every process "
                              "the same --run-dir, on a file system they all see")


def tree_nbytes(tree) -> int:
    """The bytes of every array in a pytree (what a checkpoint of it holds, before compression)."""
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _reason(e: BaseException) -> str:
    """One short line for an exception from orbax, tensorstore or the OS."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e).strip().splitlines()
    line = text[0] if text else type(e).__name__
    if "No space left" in str(e):
        return "no space left on device"
    return line if len(line) <= 200 else line[:197] + "..."


def remove_torn_writes(folder: Path) -> list[int]:
    """Delete the temporary directories of writes a killed process left (never a checkpoint),
    and empty directories named like a step (never a checkpoint either: orbax renames a
    checkpoint into place whole; one would be taken for the newest and block resuming). The
    steps of the writes removed are returned (`Checkpoints.cut_short`), for the messages of a resume.

    Done here, synchronously, rather than with orbax's
    `cleanup_tmp_directories`, which runs in a background thread that
    nothing waits for. One run writes these checkpoints, and none of its
    processes has begun a save yet (process 0 alone calls this).
    """
    cut_short = []
    for p in folder.iterdir():
        if TMP_SUFFIX in p.name and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            if p.name.split(".")[0].isdigit():
                cut_short.append(int(p.name.split(".")[0]))
        elif p.name.isdigit() and p.is_dir() and not any(p.iterdir()):
            try:
                p.rmdir()
            except OSError:
                pass
    return cut_short


def read_failed_writes(folder: Path) -> dict[int, str]:
    """The checkpoint writes that failed in `folder` (`note_failed_write`): step to reason, e.g.
    `{9: "no space left on device"}`; empty when there is no note or it does not read."""
    import json
    try:
        with open(folder / FAILED_NOTE, "rb") as fh:
            got = json.loads(fh.read(65536))
        return {int(k): str(v)[:200] for k, v in got.items()} if isinstance(got, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def note_failed_write(folder: Path, step: int, why: str) -> None:
    """Add `step`'s failed write (and `why`) to `folder`'s note of them, best effort (a disk too full
    for even this leaves the note as it was): a later resume says why the run stopped rather than
    take the write for one a kill cut short."""
    import json
    notes = read_failed_writes(folder)
    notes[int(step)] = why
    tmp = folder / (FAILED_NOTE + ".tmp")
    try:
        tmp.write_text(json.dumps({str(k): v for k, v in sorted(notes.items())}))
        os.replace(tmp, folder / FAILED_NOTE)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def move_aside(folder: Path, step: int) -> Path | None:
    """Move checkpoint `step` in `folder` to `<step>.corrupt` (process 0 alone; orbax reads only
    step-named directories); the new path, or None when it could not be moved."""
    aside = folder / f"{step}{CORRUPT_SUFFIX}"
    if jax.process_index() == 0:
        try:
            if aside.exists():
                shutil.rmtree(aside)
            (folder / str(step)).rename(aside)
        except OSError:
            aside = None
    return aside


def _quiet_orbax() -> None:
    """Install the filters above once: orbax's and asyncio's noise, and the closed-loop warnings."""
    absl = logging.getLogger("absl")
    if _QUIET not in absl.filters:
        absl.addFilter(_QUIET)
    tasks = logging.getLogger("asyncio")
    if _QUIET_TASKS not in tasks.filters:
        tasks.addFilter(_QUIET_TASKS)
    if not getattr(sys.unraisablehook, "sexpgpu_quiet", False):
        sys.unraisablehook = _quiet_closed_loop(sys.unraisablehook)


def has_steps(folder: Path) -> bool:
    """Whether `folder` holds anything named like a step (a checkpoint orbax would list)."""
    return any(p.name.isdigit() for p in folder.iterdir())


def open_manager(spec: CheckpointSpec, folder: Path):
    """(orbax.checkpoint, its CheckpointManager of `folder`), imported and opened now: importing orbax
    costs about 0.2 s of CPU, which `Checkpoints` spends only at its first read or write, so a run
    that neither reads nor writes a checkpoint (no `:checkpoint`, no stop, a run dir without
    checkpoints) never pays it. CheckpointError when it cannot be opened."""
    import orbax.checkpoint as ocp
    _quiet_orbax()
    # The checkpoint's directories are made before `save` returns, not by a background thread
    # whose failure (a full disk) would leave orbax's other threads waiting for its signal until
    # a 300 s timeout, holding the process's exit for as long.
    options = ocp.CheckpointManagerOptions(
        max_to_keep=spec.keep, create=True, enable_async_checkpointing=True,
        async_options=ocp.options.AsyncOptions(create_directories_asynchronously=False))
    try:
        return ocp, ocp.CheckpointManager(folder, options=options)
    except Exception as e:  # orbax raises its own and the OS's errors
        raise CheckpointError(f"cannot open checkpoints in {spec.dir}: {_reason(e)}")


class Checkpoints:
    """The checkpoints of one run dir: list, save (atomic, asynchronous), restore the newest, check
    identity (`provenance`: the run's `identity`, run `file` and `pretrained` files' hashes). Opening
    creates the directory and proves it writable, so an unwritable dir is one `CheckpointError`
    before any training."""

    def __init__(self, spec: CheckpointSpec, identity: Identity, file: str = "",
                 pretrained: dict[str, str] | None = None):   # (`Provenance`'s)
        self.ocp = self._manager = None   # orbax.checkpoint and its manager, once opened (`manager`)
        self.spec = spec
        self.provenance = Provenance(identity, file, spec.dir, pretrained)   # who made the checkpoints; who resumes them
        self.cut_short: list[int] = []   # the steps whose writes a killed process left unfinished (removed)
        self.failed: dict[int, str] = {}  # the steps whose writes failed (a full disk), and why (`FAILED_NOTE`)
        self.pending: int | None = None   # the step of the write in flight
        self.dir = spec.dir.resolve()
        try:
            make_writable_dir(spec.dir, jax.process_index())
        except PathProblem as e:
            raise CheckpointError(f"cannot write checkpoints to {spec.dir}: {e}")
        same_dir_everywhere(self.dir)
        if jax.process_index() == 0:
            self.cut_short = remove_torn_writes(self.dir)
        latest = self.latest()
        self.failed = {k: v for k, v in read_failed_writes(self.dir).items() if latest is None or k > latest}
        # a failed write's note is not a kill's: those steps are told by why they failed
        self.cut_short = [k for k in self.cut_short if k not in self.failed]

    @property
    def manager(self):
        """orbax's CheckpointManager, opened at its first use (`open_manager`)."""
        if self._manager is None:
            self.ocp, self._manager = open_manager(self.spec, self.dir)
        return self._manager

    def _orbax(self):
        """orbax.checkpoint, its manager opened first (`manager`)."""
        _ = self.manager
        return self.ocp

    # -- what is there --------------------------------------------------------------------------
    def steps(self) -> list[int]:
        """The steps of the complete checkpoints, oldest first (a half-written one is not among them)."""
        if self._manager is None and not has_steps(self.dir):
            return []
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def latest(self) -> int | None:
        """The step of the newest complete checkpoint, or None."""
        steps = self.steps()
        return steps[-1] if steps else None

    def check_space(self, tree, step: int | None = None) -> None:
        """Refuse when the disk cannot hold one more checkpoint of `tree` (`refuse_no_space`)."""
        refuse_no_space(self, tree, step)

    # -- writing --------------------------------------------------------------------------------
    def save(self, step: int, tree, records: int) -> None:
        """Start writing checkpoint `step` (returns once the arrays are copied off the device).

        The write finishes in the background; the checkpoint appears, complete,
        when it is done. Older checkpoints beyond `:keep` are deleted after it.
        """
        self.check_space(tree, step)
        ocp = self._orbax()
        meta = {"format": FORMAT, "step": int(step), "records": int(records), **self.provenance.record()}
        sums = digests(tree)
        if sums is not None:
            meta["digests"] = sums
        meta[META_DIGEST] = meta_digest(meta)
        try:
            self.manager.save(int(step), args=ocp.args.Composite(state=ocp.args.StandardSave(tree),
                                                                 meta=ocp.args.JsonSave(meta)), force=True)
        except Exception as e:
            raise CheckpointError(self._write_failed(step, e))
        self.pending = int(step)

    def delete_all(self) -> None:
        """Delete every complete checkpoint (for a run started over with `--overwrite`), and the note
        of failed writes."""
        try:
            for step in self.steps():
                self.manager.delete(step)
            if jax.process_index() == 0:
                (self.dir / FAILED_NOTE).unlink(missing_ok=True)
            self.failed = {}
        except Exception as e:
            raise CheckpointError(f"cannot remove the checkpoints in {self.spec.dir}: {_reason(e)}")

    def wait(self) -> None:
        """Block until every checkpoint started has been written (or raise why not)."""
        if self._manager is None:   # nothing was ever started
            return
        try:
            self.manager.wait_until_finished()
        except Exception as e:
            raise CheckpointError(self._write_failed(None, e))
        self.pending = None

    def _write_failed(self, step: int | None, e: BaseException) -> str:
        """The message of a failed write, once its leftovers are gone (`failed_write_message`); no
        write is in flight after it."""
        message = failed_write_message(self, step, e)
        self.pending = None
        return message

    # -- reading --------------------------------------------------------------------------------
    def meta(self, step: int) -> dict:
        """The JSON item of checkpoint `step`."""
        ocp = self._orbax()
        if not (self.dir / str(step) / "meta").exists():   # (orbax's own words list the items it found)
            raise CheckpointError(f"cannot read checkpoint step {step} in {self.spec.dir}: it has no `meta` item "
                                  "(the step, the identity and the digests sexpgpu writes beside the arrays), so "
                                  "sexpgpu did not write it whole")
        try:
            got = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        except Exception as e:
            raise CheckpointError(f"cannot read checkpoint step {step} in {self.spec.dir}: {_reason(e)}")
        meta = got.meta
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise CheckpointError(f"{self.spec.dir / str(step)} is not a sexpgpu checkpoint")
        wrong = meta_problem(step, meta)
        if wrong is not None:
            raise CheckpointError(f"checkpoint step {step} in {self.spec.dir} is corrupt: {wrong}")
        return meta

    def newest_meta(self) -> tuple[int, dict] | None:
        """The newest checkpoint whose JSON item reads, with it; None when there is none."""
        for step in reversed(self.steps()):
            try:
                return step, self.meta(step)
            except CheckpointError:
                continue
        return None

    def restore(self, like) -> tuple[int, object, int]:
        """Restore the newest checkpoint that reads and verifies as a tree shaped like `like`:
        (step, tree, records).

        A checkpoint that cannot be read, or whose arrays differ from the digests written with
        them, is skipped with one line on stderr naming it and why; CheckpointError when none is
        left (listing why each failed), or when the newest readable one is another run's."""
        steps = self.steps()
        if not steps:
            raise CheckpointError(f"no complete checkpoint in {self.spec.dir} to resume from")
        ocp = self._orbax()
        abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, like)
        failed: list[str] = []
        for step in reversed(steps):
            try:
                meta = self.meta(step)
            except CheckpointError as e:
                failed.append(skip_checkpoint(self, step, str(e)))
                continue
            self.provenance.check(step, meta)
            try:
                got = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
            except Exception as e:
                if _read_error(e):
                    _contain_read_leftovers()
                    why = f"checkpoint step {step} in {self.spec.dir} is corrupt: its array data cannot be read " \
                          "(a data file cut short or corrupt)"
                else:
                    why = f"cannot read checkpoint step {step} in {self.spec.dir}: {_reason(e)}"
                failed.append(skip_checkpoint(self, step, why))
                continue
            wrong = first_difference(meta.get("digests") or {}, got.state)
            if wrong is not None:
                failed.append(skip_checkpoint(self, step, f"checkpoint step {step} in {self.spec.dir} is corrupt: {wrong}"))
                continue
            if failed:
                print(f"sexpgpu: resuming from checkpoint step {step}, the newest that verifies", file=sys.stderr)
            return step, got.state, int(meta["records"])
        raise CheckpointError("no checkpoint in " + str(self.spec.dir) + " verifies: " + "; ".join(failed))

    def close(self) -> None:
        """Finish pending writes and release the manager's threads. Never raises: a failed write was
        reported by `wait` (which every path that trains calls), and a torn write is absent, not corrupt;
        one that fails here (the run stopped for another reason, a full disk at its metrics say)
        has its leftovers removed and is noted all the same (`_write_failed`)."""
        if self._manager is None:
            return
        try:
            self.manager.wait_until_finished()
        except Exception as e:
            try:
                self._write_failed(None, e)
            except Exception:
                pass
        try:
            self.manager.close()
        except Exception:
            pass


def skip_checkpoint(store: Checkpoints, step: int, why: str) -> str:
    """Say on stderr that checkpoint `step` of `store` is skipped, and why, and move it aside to
    `<step>.corrupt` (kept for inspection; orbax reads only step-named directories), so that the
    resumed run can write that step again; return the why."""
    aside = move_aside(store.dir, step)
    store.manager.reload()
    where = f" (moved to {aside.name})" if aside is not None else ""
    print(f"sexpgpu: warning: {why}; skipping it{where}", file=sys.stderr)
    return why


def refuse_no_space(store: Checkpoints, tree, step: int | None = None) -> None:
    """CheckpointError when the disk of `store` cannot hold one more checkpoint of `tree` (its bytes and a margin).

    Checked before training and before every save: orbax's writes, failing
    half-way on a full disk, would print tracebacks from their threads.
    """
    need = int(tree_nbytes(tree) * 1.1) + 2**20
    try:
        free = shutil.disk_usage(store.dir).free
    except OSError:
        return
    if free < need:
        what = "checkpoints" if step is None else f"checkpoint step {step}"
        kept = None
        if step is not None:
            try:
                store.manager.wait_until_finished()   # the write in flight may yet complete
            except Exception:
                pass
            kept = store.latest()
        tail = f"; the newest complete checkpoint is step {kept}" if kept is not None else ""
        if step is not None and jax.process_index() == 0:
            note_failed_write(store.dir, step, f"not enough free space ({_mib(free)} free)")
        raise CheckpointError(f"not enough free space for {what} in {store.spec.dir}: "
                              f"one needs about {_mib(need)}, {_mib(free)} free{tail}")


def failed_write_message(store: Checkpoints, step: int | None, e: BaseException) -> str:
    """The message of a failed write of `store`, once its leftovers are gone: the write in flight is waited
    for, the temporary directories of the failed writes removed (nothing torn is left, and the
    space they held is free again), and each failed step noted with its reason
    (`note_failed_write`), so a resume says why the run stopped. `step` is the save being
    started (None: a wait); orbax reports a background write's failure at the next save or
    wait, so the step named is the one whose write failed (`pending`) where there is one."""
    try:
        store.manager.wait_until_finished()
    except Exception:
        pass
    failed = step
    if store.pending is not None:
        try:
            done = store.pending in store.steps()
        except Exception:
            done = False
        failed = step if done else store.pending
    what = f"checkpoint step {failed}" if failed is not None else "a checkpoint"
    if jax.process_index() == 0:
        try:
            torn = remove_torn_writes(store.dir)
        except OSError:
            torn = []
        for s in sorted(set(torn + ([failed] if failed is not None else []))):
            note_failed_write(store.dir, s, _reason(e))
    try:
        kept = store.latest()
    except Exception:
        kept = None
    tail = f"; the newest complete checkpoint is step {kept}" if kept is not None else ""
    return f"cannot write {what} to {store.spec.dir}: {_reason(e)}{tail}"
