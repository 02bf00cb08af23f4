"""`defgenerate`'s `:reward`: the user's Python function, called on the host between the generator's
`:finish` and the training graph (docs/language.md "Rewards in Python", docs/runtime.md).

`PythonReward(spec, dp)` imports the file `spec.path` names (only here, when `sexpgpu run` builds its
trainer: `lint`, `explain` and the language server never import it) and takes its function. `join`
then runs once per group of microbatches: it copies the `:text` tensor and the `:fields` of the batch
to the host (the one wait for the device a step with a reward adds), decodes each row to its prompt
(the first `spec.prompt` tokens) and completion (the rest), calls

    function(prompts=[str, ...], completions=[str, ...], **{field: np.ndarray [B ...]})

once per microbatch (each copy of a stacked group in turn), and puts the result, `[B] f32` (`[S B] f32`
stacked), into the batch under `spec.name` on the device(s), split along the mesh's `data` axis on a
data-parallel run. The function is assumed pure: the rewards are a function of the decoded rows, so a
resumed run, which makes the same rows, gets the same rewards (its bits are the uninterrupted run's).

Each failure is one `RewardError` line naming the function, the step and the row: an exception (the
row found by calling the function on each row alone, and the line of the file that raised), a result
that is not one number per row, a NaN or an infinity. A run of several processes is refused: each holds
only its own rows of the batch.
"""
from __future__ import annotations

import importlib.util
import math
import numbers
import os
import traceback

import jax
import numpy as np

from sexpgpu_lang import ir

from ..errors import RewardError, SampleError
from .samples import decoder


def load_function(spec: ir.RewardIR):
    """The function `spec.function` of the Python file `spec.path`, imported under a name of its own
    (`sexpgpu_reward.<stem>`); RewardError naming the file (and the line that raised) when it cannot be."""
    name = f"sexpgpu_reward.{os.path.splitext(os.path.basename(spec.path))[0]}"
    where = f"{spec.where}: the reward's Python file {spec.path}"
    try:
        found = importlib.util.spec_from_file_location(name, spec.path)
    except (OSError, ValueError) as e:
        raise RewardError(f"{where} cannot be imported: {e}") from None
    if found is None or found.loader is None:
        raise RewardError(f"{where} cannot be imported: not a Python source file")
    module = importlib.util.module_from_spec(found)
    try:
        found.loader.exec_module(module)
    except FileNotFoundError:
        raise RewardError(f"{where} is not there any more; give the path of a Python file, relative to the "
                          "run file") from None
    except (Exception, SystemExit) as e:   # the user's code: one line, never a traceback (nor its exit)
        raise RewardError(f"{where} raised {_exception(e, spec.path)} while it was imported") from None
    fn = getattr(module, spec.function, None)
    if not callable(fn):
        raise RewardError(f"{where} defines no function `{spec.function}`"
                          + ("" if fn is None else f" (it is {type(fn).__name__})"))
    return fn


def _exception(e: BaseException, path: str) -> str:
    """`ZeroDivisionError: division by zero (reward.py:12)`: the exception and the innermost line of
    `path` it passed through (else the innermost line of any file)."""
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(path)] or frames[-1:]
    at = f" ({os.path.basename(mine[-1].filename)}:{mine[-1].lineno})" if mine else ""
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}" + (f": {text}" if text else "") + at


class PythonReward:
    """The run's `:reward` (`ir.RewardIR`): the imported function, the decoder of its `:text`, and where
    the rewards go (`dp`, a sharding.DataParallel, or None on one device). RewardError when the file
    cannot be imported or the run has several processes; SampleError when its tokenizer cannot be read."""

    def __init__(self, spec: ir.RewardIR, dp=None):
        if jax.process_count() > 1:
            raise RewardError(f"{spec.where}: `:reward` calls a Python function on the host, which needs every "
                              f"row of the batch in one process; this run has {jax.process_count()} processes: "
                              "run it in one (a mesh of that process's devices works)")
        self.spec = spec
        self.dp = dp
        self.fn = load_function(spec)
        try:
            self.decode = decoder(spec.decode, f"{spec.where}: `:reward`")
        except SampleError as e:
            raise RewardError(str(e)) from None
        self.calls = 0   # how many times the function was called (tests, benchmarks)

    def describe(self) -> str:
        """`the Python function `score` of arith_reward.py`, for messages."""
        return f"the reward function `{self.spec.function}` of {os.path.basename(self.spec.path)}"

    def join(self, batch: dict, step: int, first_microbatch: int, stacked: bool, pass_name: str | None = None) -> dict:
        """`batch` with the rewards of its rows under `spec.name`: the function called on each microbatch
        (`[S B ...]` copies when `stacked`, the first being microbatch `first_microbatch` of step `step`,
        1-based; `pass_name`: an evaluation pass's batch after step `step`). Waits for the device."""
        spec = self.spec
        names = list(dict.fromkeys([spec.text] + [n for n, _ in spec.fields] + ([spec.mask] if spec.mask else [])))
        host = {n: np.asarray(v) for n, v in jax.device_get({n: batch[n] for n in names}).items()}
        copies = host[spec.text].shape[0] if stacked else 1
        out = []
        for c in range(copies):
            rows = {n: (v[c] if stacked else v) for n, v in host.items()}
            where = (f"step {step}, microbatch {first_microbatch + c}" if pass_name is None
                     else f"the `{pass_name}` pass after step {step}")
            out.append(self.call(rows, where))
        rewards = np.stack(out) if stacked else out[0]
        return {**batch, spec.name: self._place(rewards, stacked)}

    def arguments(self, rows: dict) -> dict:
        """The keyword arguments of one call: `prompts` and `completions` (lists of str, one per row)
        decoded from `rows[spec.text]` ([B T] ids), and each field's `[B ...]` array by its keyword."""
        spec = self.spec
        ids = rows[spec.text]
        keep = np.asarray(rows[spec.mask]).astype(bool) if spec.mask else np.ones(ids.shape, bool)

        def text(r, k, cols) -> str:   # (with `TEXT-mask`: no padding, nothing past a row's stop)
            return self.decode([int(i) for i, m in zip(r[cols], k[cols]) if m])
        prompts = [text(r, k, slice(None, spec.prompt)) for r, k in zip(ids, keep)]
        completions = [text(r, k, slice(spec.prompt, None)) for r, k in zip(ids, keep)]
        return {"prompts": prompts, "completions": completions, **{k: rows[n] for n, k in spec.fields}}

    def call(self, rows: dict, where: str) -> np.ndarray:
        """The function on one microbatch's host rows: `[B] f32`. RewardError naming `where` (the step and
        microbatch) and the row for an exception or a result that is not one finite number per row."""
        kwargs = self.arguments(rows)
        self.calls += 1
        try:
            got = self.fn(**kwargs)
        except (Exception, SystemExit) as e:   # the user's code: one line naming the row, never a traceback
            row = self._raising_row(kwargs)
            at = f" at row {row}" if row is not None else " (no single row raises it alone)"
            raise RewardError(f"{self.spec.where}: {self.describe()} raised {_exception(e, self.spec.path)}"
                              f"{at} of {where}") from None
        return self._rewards(got, len(kwargs["prompts"]), where)

    def _raising_row(self, kwargs: dict) -> int | None:
        """The first row the function raises on when called on it alone (it is assumed pure), or None."""
        n = len(kwargs["prompts"])
        for i in range(n):
            one = {k: v[i:i + 1] for k, v in kwargs.items()}
            try:
                self.fn(**one)
            except (Exception, SystemExit):
                return i
        return None

    def _rewards(self, got, n: int, where: str) -> np.ndarray:
        """`got` as `[n] f32`, or RewardError: not a sequence, the wrong length, an entry that is not a
        real number (a bool counts as none), a NaN or an infinity."""
        head = f"{self.spec.where}: {self.describe()} returned"
        fix = f"; return one finite float per row ({n} of them)"
        if isinstance(got, np.ndarray) and got.dtype.kind in "fiu":
            if got.ndim != 1:
                raise RewardError(f"{head} an array of shape {list(got.shape)} for {where}, not [{n}]{fix}")
            values = got.tolist()
        elif isinstance(got, (str, bytes, dict)) or not hasattr(got, "__len__") or not hasattr(got, "__iter__"):
            raise RewardError(f"{head} {_short(got)} for {where}, not a list{fix}")
        else:
            values = list(got)
        if len(values) != n:
            raise RewardError(f"{head} {len(values)} rewards for the {n} rows of {where}{fix}")
        for i, v in enumerate(values):
            if isinstance(v, np.ndarray) and v.ndim == 0:
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise RewardError(f"{head} {_short(v)} at row {i} of {where}, not a number{fix}")
            if not math.isfinite(float(v)):
                raise RewardError(f"{head} {float(v)} at row {i} of {where}{fix}")
        return np.asarray([float(v) for v in values], np.float32)

    def _place(self, rewards: np.ndarray, stacked: bool):
        """The rewards on the device: split along `data` on a mesh (replicated when the rows do not
        divide among its devices), else on the one device."""
        if self.dp is None:
            return jax.device_put(rewards)
        if rewards.shape[-1] % self.dp.devices == 0:
            return self.dp.put_batch(rewards, stacked)
        return self.dp.put_replicated(rewards)


def _short(v) -> str:
    """A value as a message shows it: its type and a short repr (`str 'eight'`)."""
    text = repr(v)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{type(v).__name__} {text}"


def reward_note(program: ir.Program) -> str | None:
    """The line `sexpgpu run` prints first for a run file with a `:reward`, or None: which Python file
    it will import and call."""
    gen = program.generate
    spec = gen.reward if gen is not None else None
    if spec is None:
        return None
    return (f"{spec.where}: this run imports {spec.path} and calls its function `{spec.function}` on the host "
            f"after the generator of each microbatch (`:reward`); its rewards join the batch as `:{spec.name}`")

