"""Samples: a few rows of the batch's named tensors (`run`'s `:samples`), as text, in the run dir, the
terminal and TensorBoard (docs/metrics.md "Samples").

The loop (train.py) hands `SampleLog.take` the batch of a sampled step (the training loader's
fields and the generator's names, on the device) and of every evaluation pass, with the rows of the
names computed in `prepare` or `objective` (gathered inside the training or pass graph itself:
lowering/training_graphs.py `keep`). `take` gathers the first `:rows` rows of each named tensor of
the batch in one small jitted call (on one device; a numpy batch is sliced on the host) and starts
every copy to the host (`copy_to_host_async`); nothing waits. The
rows are written by `poll` once their copy has landed and their step has completed (a stop
abandons the step in flight, whose rows are then never written), by `flush` before a checkpoint
(so a resume finds every row up to it) and by `close` at the end. The training graphs are the
same with or without samples of the batch's names: gathering is its own call, after the generator's;
a name computed in `prepare` or `objective` adds its first rows to the training graph's outputs.

Each written row: `{"step": 10, "pass": "train", "row": 0, "fields": {...}}` in
`RUN_DIR/samples.jsonl`, one JSON object per row (`step` counts completed steps as in
metrics.jsonl; `pass` is `train` or the evaluation pass's name). A `:text` field is a string, or
`{"prompt": ..., "completion": ...}` with `:prompt` (a text field whose `NAME-mask` the batch holds,
of its shape, shows only the ids where the mask holds: a prompt without its padding, a completion
up to its stop); a `:values` field a number or a list
(`{"shape": [...], "first": [...]}` past `MAX_NUMBERS` numbers). A resumed run drops the rows past
its checkpoint first, as metrics.jsonl does (`report.keep_rows_up_to`), so each step's rows are
there once.
"""
from __future__ import annotations

import collections
import json
import math
import shutil
import sys
from pathlib import Path

import jax
import numpy as np

from sexpgpu_lang import ir
from sexpgpu_lang.render import visible

from ..data.files import resolve_path
from ..data.tokenize import load_tokenizer
from ..errors import LoaderError, RunError, SampleError, TokenizeError
from .report import RowFile, keep_rows_up_to

#: The numbers of one `:values` entry of one row written as a list; past it, its shape and the first ones.
MAX_NUMBERS = 64
#: The name training rows have in `pass`.
TRAIN = "train"


def decoder(decode: tuple, where: str):
    """ids (a list of ints) -> text, as `decode` says (`ir.SamplesIR.decode`, `ir.RewardIR.decode`): a
    tokenizer (SampleError naming `where` when it cannot be read), UTF-8 bytes, or the ids joined by spaces."""
    kind = decode[0]
    if kind == "bytes":
        return lambda ids: bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace")
    if kind == "tokenizer":
        _, written, base = decode
        holder = ir.LoaderIR("samples", ("samples", {}), 1, (), None, base_dir=base)
        try:
            tok = load_tokenizer(resolve_path(holder, written))
        except (TokenizeError, LoaderError) as e:
            raise SampleError(f"{where}: {e}") from None
        return lambda ids: tok.decode([int(i) for i in ids], skip_special_tokens=False)
    return lambda ids: " ".join(str(int(i)) for i in ids)


def _number(v):
    """A number for JSON: a non-finite float as its name (`nan`, `inf`, `-inf`)."""
    return v if not isinstance(v, float) or math.isfinite(v) else str(v)


def _nested(v):
    return [_nested(x) for x in v] if isinstance(v, list) else _number(v)


def _values(a: np.ndarray):
    """One row of a `:values` tensor: a number (a scalar, or a row of one entry), a (nested) list, or past
    MAX_NUMBERS numbers its shape and the first ones."""
    if a.size == 1:
        return _number(a.reshape(()).item())
    if a.size <= MAX_NUMBERS:
        return _nested(a.tolist())
    return {"shape": list(a.shape), "first": [_number(x) for x in a.reshape(-1)[:MAX_NUMBERS].tolist()]}


class SampleLog:
    """`run`'s `:samples` for one run: what is gathered when, samples.jsonl, the lines the terminal shows.

    `total` is the run's last step; `start` the step it starts from (a resume drops the rows past it
    from samples.jsonl first, `append`); `reporter` (report.Reporter) gives the progress bar, the plain
    lines' stream and the TensorBoard writer. Raises SampleError if samples.jsonl cannot be opened or
    the tokenizer read."""

    def __init__(self, program: ir.Program, run_dir: Path, total: int, start: int, append: bool, reporter):
        self.spec = spec = program.run.samples
        self.names = [n for n, _, _ in spec.text] + [n for n, _, _ in spec.values]
        self.text = {n for n, _, _ in spec.text}
        self.masks = dict(spec.masks)     # a text name -> its mask's name, gathered beside it
        self.gathered = self.names + [m for m in self.masks.values() if m not in self.names]
        self.total = total
        self.path = run_dir / "samples.jsonl"
        self.decode = decoder(spec.decode, f"{program.path}: `:samples`")
        self.pending: collections.deque = collections.deque()   # (step, pass, {name: device array})
        self.dropped: list[int] = []
        try:
            if append:
                self.dropped = keep_rows_up_to(self.path, start)
            self.fh = RowFile(self.path, append)
        except OSError as e:
            raise SampleError(f"cannot write {self.path}: {e.strerror or e}") from None
        self.reporter = reporter
        self.tb = getattr(getattr(reporter, "tb", None), "writer", None)
        self.lines: list[str] = []   # the latest rows, one line each, under the progress bar
        bar = getattr(reporter, "bar", None)
        if bar is not None:
            _show_under(bar, self)
        rows = spec.rows
        self._gather = jax.jit(lambda batch: {k: v if v.ndim == 0 else v[:rows] for k, v in batch.items()})
        self._gather_copy0 = jax.jit(lambda batch: {k: v[0] if v.ndim == 1 else v[0, :rows] for k, v in batch.items()})

    # -- when ------------------------------------------------------------------------------------
    def due(self, done: int) -> bool:
        """True when step `done` (completed steps, 1-based) writes samples: step 1, every `:every`, the last."""
        return done == 1 or done % self.spec.every == 0 or done == self.total

    # -- gathering -------------------------------------------------------------------------------
    def take(self, done: int, batch: dict, stacked: bool, pass_name: str = TRAIN, kept: dict | None = None) -> None:
        """Gather the first rows of each named tensor `batch` holds ([S B ...] when `stacked`: the first
        copy's), start their copy to the host with that of `kept` (the rows of the names computed in
        `prepare` or `objective`, gathered in the training or pass graph already: TrainingGraphs.keep),
        and queue them for `poll`; never waits for the device."""
        picked = {n: batch[n] for n in self.gathered if n in batch}
        kept = {n: v for n, v in (kept or {}).items() if n in self.gathered and n not in picked}
        if not picked and not kept:
            return
        if not picked:
            out = {}
        elif all(isinstance(v, np.ndarray) for v in picked.values()):   # a batch still on the host
            rows = self.spec.rows
            out = {k: (v[0] if stacked else v) for k, v in picked.items()}
            out = {k: v if v.ndim == 0 else v[:rows] for k, v in out.items()}
        else:
            out = dict((self._gather_copy0 if stacked else self._gather)(picked))
        out.update(kept)
        for v in out.values():
            if hasattr(v, "copy_to_host_async"):
                v.copy_to_host_async()
        self.pending.append((done, pass_name, out))

    # -- writing ---------------------------------------------------------------------------------
    def poll(self, completed: int) -> None:
        """Write the queued rows whose copy has landed, in order, up to step `completed` (the last
        completed step); never waits."""
        while self.pending and self.pending[0][0] <= completed and all(
                not hasattr(v, "is_ready") or v.is_ready() for v in self.pending[0][2].values()):
            self._write(*self.pending.popleft())

    def flush(self, completed: int | None = None) -> None:
        """Write every queued row up to step `completed` (all, when None), waiting for their copies."""
        while self.pending and (completed is None or self.pending[0][0] <= completed):
            self._write(*self.pending.popleft())

    def close(self, completed: int | None) -> None:
        """Write the rows of the steps up to `completed` (the rows of an abandoned step are dropped), then
        close samples.jsonl. A failing device's error is left to the loop's."""
        try:
            if completed is not None:
                self.flush(completed)
        except (RunError, OSError):
            raise
        except Exception:
            pass
        finally:
            self.pending.clear()
            if self.fh is not None:
                self.fh.close()
                self.fh = None

    def rows_of(self, done: int, pass_name: str, arrays: dict) -> list[dict]:
        """The samples.jsonl rows of one gathered batch (host arrays)."""
        host = {k: np.asarray(v) for k, v in arrays.items()}
        n = max([v.shape[0] for v in host.values() if v.ndim > 0] or [1])
        out = []
        for i in range(n):
            fields = {}
            for name in self.names:
                if name not in host:
                    continue
                a = host[name]
                if a.ndim > 0 and i >= a.shape[0]:
                    continue
                a = a if a.ndim == 0 else a[i]
                mask = host.get(self.masks.get(name, ""))
                mask = mask[i] if mask is not None and mask.ndim == 2 and i < mask.shape[0] else None
                fields[name] = self._text(a, mask) if name in self.text else _values(a)
            out.append({"step": done, "pass": pass_name, "row": i, "fields": fields})
        return out

    def _text(self, a: np.ndarray, mask: np.ndarray | None = None):
        """A row of ids as text; with its `NAME-mask`, only the ids where the mask holds (no padding,
        nothing past a completion's stop); split at `:prompt` into prompt and completion."""
        ids = a.reshape(-1).tolist()
        keep = [True] * len(ids) if mask is None else [bool(m) for m in np.asarray(mask).reshape(-1)]
        p = self.spec.prompt
        if p is None or a.ndim == 0:
            return self.decode([i for i, k in zip(ids, keep) if k])
        return {"prompt": self.decode([i for i, k in zip(ids[:p], keep[:p]) if k]),
                "completion": self.decode([i for i, k in zip(ids[p:], keep[p:]) if k])}

    def _write(self, done: int, pass_name: str, arrays: dict) -> None:
        rows = self.rows_of(done, pass_name, jax.device_get(arrays))
        try:
            for r in rows:
                self.fh.write_row(json.dumps(r, ensure_ascii=False) + "\n")
        except OSError as e:
            raise SampleError(f"cannot write the samples of step {done} in {self.path.parent}: "
                              f"{e.strerror or e}") from None
        if self.tb is not None:
            tag = "samples" if pass_name == TRAIN else f"{pass_name}/samples"
            self.tb.add_text(tag, markdown_table(rows), global_step=done)
        self.show(rows)

    # -- the terminal ----------------------------------------------------------------------------
    def show(self, rows: list[dict]) -> None:
        """The rows as one short line each: under the progress bar, or printed after the plain lines."""
        if self.reporter is None or getattr(self.reporter, "quiet", True):
            return
        if getattr(self.reporter, "bar", None) is not None:
            width = shutil.get_terminal_size((100, 24)).columns
            self.lines = [row_line(r, width) for r in rows]
            self.reporter.bar.refresh()
        else:   # plain lines (a pipe, a log): each row whole
            for r in rows:
                print(row_line(r), file=sys.stderr, flush=True)


def field_text(value) -> str:
    """A field's value as one line: a prompt and its completion with `▸` between, lists of numbers
    short, newlines as `⏎`, other control characters as their pictures (render.visible)."""
    if isinstance(value, dict) and "completion" in value:
        text = f"{value['prompt']}▸{value['completion']}"
    elif isinstance(value, dict) and "first" in value:
        text = "[" + " ".join(_short(v) for v in value["first"][:8]) + " …]"
    elif isinstance(value, list):
        flat = list(_flatten(value))
        text = "[" + " ".join(_short(v) for v in flat[:8]) + (" …]" if len(flat) > 8 else "]")
    elif isinstance(value, str):
        text = value
    else:
        text = _short(value)
    return visible(text.replace("\r\n", "⏎").replace("\n", "⏎").replace("\t", " "))


def _flatten(v):
    for x in v:
        if isinstance(x, list):
            yield from _flatten(x)
        else:
            yield x


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def row_line(row: dict, width: int | None = None) -> str:
    """One samples.jsonl row as the terminal's line: `step 10 train #0  answer 3 4▸5 6 7  reward 0.5`.

    With `width` (a terminal's columns) a line that would be longer has its text fields (decoded
    text, a prompt and its completion) cut, each to an equal share of the room the rest leaves
    (at least `MIN_TEXT` characters), an ellipsis ending each cut one; the step, the row and every
    value are never cut, so a line may still pass `width` when the values alone do."""
    head = f"step {row['step']} {row['pass']} #{row['row']}"
    fields = [(k, field_text(v), _is_text(v)) for k, v in row.get("fields", {}).items()]
    line = "  ".join([head] + [f"{k} {t}" for k, t, _ in fields])
    texts = [i for i, (_, _, is_text) in enumerate(fields) if is_text]
    if width is None or len(line) <= width or not texts:
        return line
    fixed = len(line) - sum(len(fields[i][1]) for i in texts)
    share = max((width - fixed) // len(texts), MIN_TEXT)
    fields = [(k, cut(t, share) if is_text else t, is_text) for k, t, is_text in fields]
    return "  ".join([head] + [f"{k} {t}" for k, t, _ in fields])


#: The fewest characters a cut text field keeps on a terminal line (`row_line`).
MIN_TEXT = 12


def _is_text(value) -> bool:
    """Whether a samples.jsonl field is decoded text (`:text`): a string, or a prompt and completion."""
    return isinstance(value, str) or (isinstance(value, dict) and "completion" in value)


def cut(line: str, width: int) -> str:
    """`line` cut to `width` characters, an ellipsis ending one that was longer."""
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def markdown_table(rows: list[dict]) -> str:
    """The rows of one step as a Markdown table (TensorBoard's text plugin renders it)."""
    names = list(dict.fromkeys(k for r in rows for k in r.get("fields", {})))
    head = "| row | " + " | ".join(names) + " |\n|---|" + "---|" * len(names) + "\n"

    def cell(v) -> str:
        return field_text(v).replace("|", "\\|") if v is not None else ""
    return head + "".join(f"| {r['row']} | " + " | ".join(cell(r['fields'].get(n)) for n in names) + " |\n"
                          for r in rows)


def _show_under(bar, log: SampleLog) -> None:
    """Rich's progress bar drawing `log.lines` under its own line: `Progress.get_renderables`, the
    method rich documents for customising what a progress display shows, given for this bar."""
    from rich.text import Text

    def get_renderables():
        yield bar.make_tasks_table(bar.tasks)
        for line in log.lines:
            yield Text(line, no_wrap=True, overflow="ellipsis", style="dim")
    bar.get_renderables = get_renderables


def open_samples(program: ir.Program, options, total: int, start: int, reporter) -> SampleLog | None:
    """The run's SampleLog, or None: no `:samples`, a process other than the first, or several processes
    (a gathered row may live on another process's devices)."""
    if program.run.samples is None or jax.process_index() != 0 or jax.process_count() > 1:
        return None
    return SampleLog(program, options.run_dir, total, start, bool(options.resume), reporter)
