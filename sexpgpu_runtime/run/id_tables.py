"""The token ids a run's data give against the tables they index, checked before training.

A loader's field that reaches, unchanged, the index of an embedding lookup (`take`,
`take-along-axis`, `one-hot`) or the labels of `cross-entropy` must hold ids inside that axis:
JAX clamps a `take` index (a wrong row, silently) and `cross-entropy` gives NaN for a label
outside its classes (Hugging Face's -100 for an ignored position included). The checker warns
where a loader's `:vocab` proves it (W-SHAPE-001); only the data can tell where a loader has no
`:vocab`, or a larger one, so the run reads them first.

`index_limits` follows each field through the program's phases (`_Flow`, an `ir.Interpreter`
over sets of fields): through ops that keep its values (a cast, a slice, a reshape, a write into
a buffer ...), `let*`, functions, model calls and repeated blocks; arithmetic and `where` end the
trail (an id shifted, clamped or replaced where it is out of range is another value), so nothing
is said of it. `check_ids` reads each
loader's field against the smallest axis it indexes and raises LoaderError naming the first id
outside it, its record (and place in a token file), the table's size and the op's place.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sexpgpu_lang import ir
from sexpgpu_lang.types import TensorType

from ..data.token_files import TokenWindows, first_outside
from ..errors import LoaderError

#: The ops whose argument indexes an axis: op -> the argument (as the checker's ranges.INDEXED).
INDEXED = {"take": 1, "take-along-axis": 1, "one-hot": 0, "cross-entropy": 1}
#: Ops whose value holds only entries of their first argument.
_KEEPS_FIRST = {"cast", "stop-gradient", "broadcast-to", "reshape", "expand-dims", "squeeze", "transpose", "slice",
                "dynamic-slice", "take", "take-along-axis", "sort"}
#: Ops whose value holds entries of these arguments only.
#: (Not `where`: its condition may be what keeps a bad id out, `(where (>= y 0) y 0)`.)
_UNION = {"dynamic-update-slice": (0, 1), "at-set": (0, 2)}

_NONE: frozenset = frozenset()


@dataclass(frozen=True)
class Limit:
    """The smallest axis a field indexes: `size` entries, at op `op` (its place `offset` in the run
    file: the standard-library call's where `stdlib` names the function it is inside)."""

    size: int
    op: str
    offset: int
    stdlib: str | None = None

    def describe(self, program: ir.Program) -> str:
        """"the 512 classes of `cross-entropy` at run.sx:40:22" (or a table's rows)."""
        line, col = program.line_col(self.offset)
        at = f"{program.path}:{line}:{col}"
        inside = f" inside `{self.stdlib}`, called" if self.stdlib else ""
        if self.op == "cross-entropy":
            return f"the {self.size} classes of `cross-entropy`{inside} at {at}"
        if self.op == "one-hot":
            return f"the {self.size} classes of `one-hot`{inside} at {at}"
        return f"the {self.size} rows of the table `{self.op}`{inside} at {at} reads"


def _sources(v) -> frozenset:
    if isinstance(v, frozenset):
        return v
    if isinstance(v, (list, tuple)):
        return frozenset().union(*map(_sources, v)) if v else _NONE
    return _NONE


class _Flow(ir.Interpreter):
    """The IR evaluated over the loader fields a value's entries come from (a frozenset of field
    names, dicts for plists, lists for vectors), noting the smallest axis each field indexes."""

    def __init__(self, limits: dict):
        super().__init__(frozenset(), False)
        self.limits = limits

    def op(self, e: ir.Op, env: dict):
        args = [self.eval(a, env) for a in e.args]
        for _, v in e.kwargs:
            self.eval(v, env)
        if e.name in INDEXED and len(args) > INDEXED[e.name]:
            size = _axis(e)
            for field in _sources(args[INDEXED[e.name]]):
                if size is not None and (field not in self.limits or size < self.limits[field].size):
                    offset, stdlib = (e.span.start, None) if self.stdlib_site is None else (self.stdlib_site[1].start, self.stdlib_site[0])
                    self.limits[field] = Limit(size, e.name, offset, stdlib)
        if e.name in _KEEPS_FIRST and args:
            return _sources(args[0])
        if e.name in ("concat", "stack") and args:
            return _sources(args[0])
        if e.name == "top-k" and args:
            return {"values": _sources(args[0]), "indices": _NONE}
        if e.name in _UNION:
            return frozenset().union(*(_sources(args[i]) for i in _UNION[e.name] if i < len(args)))
        return _NONE

    def getf(self, obj, key: str):
        return obj.get(key, _NONE) if isinstance(obj, dict) else _NONE

    def model_self(self, e: ir.ModelCall, params, args: list):
        return None, args

    def repeat(self, e: ir.Repeat, params, args: list):
        out = self.call(e, params, args)
        return self.call(e, params, [_merge(args[0], out)] + list(args[1:]))

    def report(self, e: ir.Report, value) -> None:
        pass


def _merge(a, b):
    """The fields of two values of one plist type (a generator's state before and after a trip) together."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _merge(a.get(k, _NONE), b.get(k, _NONE)) for k in dict.fromkeys([*a, *b])}
    return _sources(a) | _sources(b)


def _axis(e: ir.Op) -> int | None:
    if e.name == "one-hot":
        return e.static.get("n")
    x = e.args[0].type
    if not isinstance(x, TensorType) or not x.shape:
        return None
    return x.shape[-1 if e.name == "cross-entropy" else e.static.get("axis", 0)]


def _run(phase: ir.Phase, args: list, flow: _Flow):
    env = {ir.Interpreter.PARAMS: None}
    env.update(zip(phase.params, args))
    return flow.eval(phase.body, env)


def _step_limits(program: ir.Program, loader: ir.LoaderIR, prepare, objective, generator: bool) -> dict:
    limits: dict[str, Limit] = {}
    flow = _Flow(limits)
    ctx: dict = {}
    batch = {n: frozenset([n]) for n, _, _ in loader.fields}
    gen = program.generate
    if generator and gen is not None:
        state = _run(gen.init, [batch, ctx], flow)
        for _ in range(2):   # what a trip writes reaches the next
            state = _merge(state, _run(gen.step, [state, _NONE, ctx], flow))
        out = _run(gen.finish, [state, ctx], flow) if gen.finish is not None else state
        batch = {**batch, **(out if isinstance(out, dict) else {})}
    inputs = _run(prepare, [batch, ctx], flow) if prepare is not None else batch
    _run(objective, [inputs, ctx], flow)
    return limits


def index_limits(program: ir.Program) -> dict[str, dict[str, Limit]]:
    """Loader name -> {field: the smallest axis it indexes (`Limit`)}: the training loaders' (a
    curriculum's stages share the step) and each pass's loader's."""
    out: dict[str, dict[str, Limit]] = {}

    def add(name: str, limits: dict) -> None:
        mine = out.setdefault(name, {})
        for f, lim in limits.items():
            if f not in mine or lim.size < mine[f].size:
                mine[f] = lim

    train = program.loaders[program.run.loader]
    step = _step_limits(program, train, program.prepare, program.objective, True)
    for name in dict.fromkeys([n for n, _ in program.stages] or [program.run.loader]):
        add(name, step)
    for ps in program.passes:
        add(ps.loader, _step_limits(program, program.loaders[ps.loader], ps.prepare, ps.objective, ps.runs_generator))
    return out


def _fix(lim: Limit, value: int, field: str = "ids") -> str:
    """The fix for `value` outside `lim`: a negative id is a position to leave out (no table is long
    enough for it), a larger one wants ids inside the table or a longer one."""
    if value < 0 and lim.op == "cross-entropy":
        return ("`cross-entropy` has no ignored label (Hugging Face's -100 is read as a class): give the positions "
                "to leave out any label in range and multiply their loss by 0 (a mask) before the mean")
    if value < 0:   # no table is long enough for it: the position is one to leave out
        return (f"a negative id (Hugging Face's -100 marks an ignored position) indexes nothing: give those "
                f"positions an id 0 to {lim.size - 1}, e.g. `(where (>= {field} 0) {field} 0)`, and mask their "
                "values out (multiply them by 0) where they reach the loss")
    return (f"make the data's ids 0 to {lim.size - 1} (tokenize with the model's tokenizer), or the table "
            f"{value + 1} or more long")


def check_ids(program: ir.Program, loaders: dict, limits: dict[str, dict[str, Limit]]) -> None:
    """LoaderError for the first id of a loader's field outside the smallest axis it indexes
    (`index_limits`): its value, record (and a token file's position), the axis and the fix.
    `loaders` maps names to opened data.loaders.Loader. A token file is read in chunks, and only
    where its dtype and `:vocab` leave room for an id past the axis."""
    for name, loader in loaders.items():
        for field, lim in limits.get(name, {}).items():
            src = loader.source
            if isinstance(src, TokenWindows):
                bad = _token_file(loader, field, lim)
                if bad is None:
                    continue
                value, pos = bad
                where = f"token {value} at position {pos} of {src.stream.path} (record {pos // src.stride} and on)"
            else:
                arr = src.table.get(field)
                if arr is None or not np.issubdtype(arr.dtype, np.integer):
                    continue
                out = (arr < 0) | (arr >= lim.size)
                if not out.any():
                    continue
                flat = int(np.argmax(out.reshape(-1)))
                record = flat // max(1, int(np.prod(arr.shape[1:])))
                value = int(arr.reshape(-1)[flat])
                where = f"token {value} in record {record} (0-based)"
            raise LoaderError(f"{loader.where}: field `{field}` has {where}, outside {lim.describe(program)} "
                              f"(ids 0 to {lim.size - 1}); {_fix(lim, value, field)}")


def _token_file(loader, field: str, lim: Limit):
    """(id, position) of a token file's first id outside `lim`, or None; None without a read where
    `:vocab` (already checked) or the file's dtype keeps every id inside."""
    src = loader.source
    stream = src.stream
    vocab = loader.spec.source[1].get("vocab")
    top = 1 << (8 * np.dtype(stream.dtype).itemsize) if np.dtype(stream.dtype).kind == "u" else None
    if (isinstance(vocab, int) and vocab <= lim.size) or (top is not None and top <= lim.size):
        return None
    return first_outside(stream.path, stream.offset, stream.dtype, lim.size)
