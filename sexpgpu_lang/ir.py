"""The typed IR: what the checker produces and the runtime lowers.

Every expression node carries its inferred `type` and the `span` it came
from. Phases (`generate.init`, `generate.step`, `generate.finish`,
`prepare`, `objective`, each pass's prepare and objective) are `Phase`
records: named parameters and a body. `Program` gathers them with the run's
loaders, parameters and settings. `children` and `walk` traverse the IR;
`Interpreter` is the one evaluator every interpretation of it subclasses.
The IR is plain data: no lark, no JAX.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from .records import Record
from .source import Span
from .types import PlistType, TensorType, Type


@dataclass(eq=False, repr=False)
class Expr(Record):
    """Base IR node: its type and source range."""

    type: Type
    span: Span


@dataclass(eq=False, repr=False)
class Const(Expr):
    """A compile-time value: a number, bool, shape tuple, keyword or string name, or None for nil."""

    value: Any = None


@dataclass(eq=False, repr=False)
class Var(Expr):
    """A reference to a `let*` or `lambda` binding."""

    name: str = ""


@dataclass(eq=False, repr=False)
class Op(Expr):
    """A registry op: `args` positional, `kwargs` the non-constant keyword
    arguments (e.g. `:salt`), `static` the constants its rule normalised."""

    name: str = ""
    args: tuple[Expr, ...] = ()
    kwargs: tuple[tuple[str, Expr], ...] = ()
    static: dict = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class Vector(Expr):
    """A vector of non-constant values, e.g. the `[row guess]` of `concat`."""

    items: tuple[Expr, ...] = ()


@dataclass(eq=False, repr=False)
class Let(Expr):
    """`let*`: bind `names` to `values` in order, then evaluate `body`; the last is the value."""

    names: tuple[str, ...] = ()
    values: tuple[Expr, ...] = ()
    body: tuple[Expr, ...] = ()


@dataclass(eq=False, repr=False)
class Plist(Expr):
    """`(list :k v ...)`."""

    keys: tuple[str, ...] = ()
    values: tuple[Expr, ...] = ()


@dataclass(eq=False, repr=False)
class GetF(Expr):
    """`(getf obj :key)` or `(field batch :key)`: one entry of a plist, context, batch or model's self."""

    obj: Expr | None = None
    key: str = ""


@dataclass(eq=False, repr=False)
class Apply(Expr):
    """A call of a user `lambda`, inlined: bind `params` to `args`, evaluate `body`. `stdlib`: the
    standard-library function's name when it is one (its body's spans are then in prelude.sx, not
    in the run file)."""

    params: tuple[str, ...] = ()
    args: tuple[Expr, ...] = ()
    body: tuple[Expr, ...] = ()
    stdlib: str | None = None


@dataclass(eq=False, repr=False)
class ModelCall(Expr):
    """A call of a model: `self` is bound to the parameters at `path` (keys
    from the root model's parameter tree), `params` to `args`. Under bf16,
    `compute_dtype` is `bf16`: float parameters and float arguments are cast
    to it before the body runs (DESIGN: precision policy). `remat`: the
    rematerialisation policy of the body (`language.REMAT_POLICIES`; None or
    `everything-saveable`: none)."""

    model: str = ""
    path: tuple[str, ...] = ()
    self_name: str = "self"
    params: tuple[str, ...] = ()
    args: tuple[Expr, ...] = ()
    body: tuple[Expr, ...] = ()
    compute_dtype: str | None = None
    remat: str | None = None
    #: LoRA: each adapted parameter's key, scale and dropout; the body sees `KEY + scale * (KEY.lora-a @
    #: KEY.lora-b)` reshaped to KEY's shape (check/lora.py), applied unmerged on a dropped-out input in the
    #: training step's forward where the dropout is over 0 (sexpgpu_runtime/lowering/lora.py)
    adapters: tuple[tuple[str, float, float], ...] = ()


@dataclass(eq=False, repr=False)
class Repeat(ModelCall):
    """A call of a repeated block (`(repeat block N)` in a `:params`): the body applied `count`
    times in sequence, `args[0]` the carry (each layer's result is the next one's first
    argument, with the carry's type: checked), the other arguments the same for every layer.
    The parameters at `path` are stacked on a leading `[count ...]` axis; layer `i`'s `self`
    sees slice `i` of each (the per-layer shapes the body was checked with). `remat` applies
    to each layer's body (inside the loop)."""

    count: int = 1


@dataclass(eq=False, repr=False)
class Report(Expr):
    """`(metric :name v)`, `(diagnostic :name v)` or `(counter :name v)`; its value is nil."""

    kind: str = "metric"
    name: str = ""
    value: Expr | None = None


@dataclass(eq=False, repr=False)
class Seq(Expr):
    """A body of several expressions; the last is the value."""

    body: tuple[Expr, ...] = ()


def children(e: Expr) -> tuple[Expr, ...]:
    """The expressions directly below `e`, in evaluation order (an `Op`'s
    positional arguments, then its keyword arguments; a `Let`'s values, then
    its body; an `Apply`'s or `ModelCall`'s arguments, then its body)."""
    if isinstance(e, Op):
        return e.args + tuple(v for _, v in e.kwargs)
    if isinstance(e, Vector):
        return e.items
    if isinstance(e, Let):
        return e.values + e.body
    if isinstance(e, Plist):
        return e.values
    if isinstance(e, GetF):
        return () if e.obj is None else (e.obj,)
    if isinstance(e, (Apply, ModelCall)):   # (a Repeat is a ModelCall)
        return e.args + e.body
    if isinstance(e, Report):
        return () if e.value is None else (e.value,)
    if isinstance(e, Seq):
        return e.body
    return ()


def walk(e: Expr):
    """Yield `e` and every expression below it, parents first, in evaluation order."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def without_adapters(e: Expr) -> Expr:
    """`e` with no LoRA adapter applied in any model call in it (`ModelCall.adapters` emptied): a
    `:copy` of a LoRA model's call is its source's on the frozen base alone (check/lora.py `call_base`)."""
    changes = {}
    if isinstance(e, ModelCall) and e.adapters:
        changes["adapters"] = ()
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, Expr):
            new = without_adapters(v)
            if new is not v:
                changes[f.name] = new
        elif isinstance(v, tuple) and v and all(isinstance(x, Expr) for x in v):
            new = tuple(without_adapters(x) for x in v)
            if any(a is not b for a, b in zip(new, v)):
                changes[f.name] = new
    return replace(e, **changes) if changes else e


def rebased(e: Expr, base: tuple[str, ...], dest: tuple[str, ...], shared: frozenset[str]) -> Expr:
    """`e` with every model call at or below `base` in the parameter tree (but those of the models in
    `shared`) moved to the same place below `dest`: a `:copy` model's call is its source's body on
    the copy's parameters (check/models.py `place_copies`)."""
    changes = {}
    if isinstance(e, ModelCall) and e.model not in shared and tuple(e.path[:len(base)]) == tuple(base):
        changes["path"] = tuple(dest) + tuple(e.path[len(base):])
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, Expr):
            changes[f.name] = rebased(v, base, dest, shared)
        elif isinstance(v, tuple) and v and all(isinstance(x, Expr) for x in v):
            changes[f.name] = tuple(rebased(x, base, dest, shared) for x in v)
    return replace(e, **changes) if changes else e


class Interpreter:
    """The one evaluator of the IR, shared by every interpretation of it: the runtime's JAX
    evaluator (sexpgpu_runtime.lowering.lowering `evaluate`) and the symbolic trace of `sexpgpu explain`
    (sexpgpu_lang.explain.trace).

    It holds what every interpretation does alike: the dispatch on the node
    kinds, the environments (a `Let` binds in order, each value seeing the
    ones before; an `Apply` binds its parameters to arguments evaluated in
    the caller's environment; a `ModelCall` runs its body in a fresh
    environment of the root parameters, `self` and its parameters (`call`);
    a body's value is its last item's), and which diagnostics are computed at
    all (`computes`). A subclass gives the values: `op` (an `Op`), `getf` (an
    entry of an evaluated object), `model_self` (a model's `self` and its
    arguments, cast to its compute dtype), `repeat` (a `Repeat`'s layers in
    sequence) and `report` (what a `Report` does with its value). The environment maps binding names to values and
    `PARAMS` to the root parameter tree, whatever a subclass makes of it.

    `selected`: the diagnostics to compute (others are never evaluated);
    `in_generator`: drop every diagnostic (a generator computes none).
    """

    #: The environment key of the root parameter tree that a model's `self` is cut from.
    PARAMS = "__params__"

    #: While the body of a standard-library call is evaluated (the outermost one):
    #: (the function's name, the call's span in the run file), where its ops are sited.
    stdlib_site: tuple[str, Span] | None = None

    def __init__(self, selected: frozenset = frozenset(), in_generator: bool = False):
        self.selected = selected
        self.in_generator = in_generator

    def eval(self, e: Expr, env: dict):
        """The value of `e` in `env`. TypeError for a node that is not an IR expression."""
        if isinstance(e, Const):
            return e.value
        if isinstance(e, Var):
            return env[e.name]
        if isinstance(e, Op):
            return self.op(e, env)
        if isinstance(e, Vector):
            return [self.eval(i, env) for i in e.items]
        if isinstance(e, Let):
            inner = dict(env)
            for n, v in zip(e.names, e.values):
                inner[n] = self.eval(v, inner)
            return self.body(e.body, inner)
        if isinstance(e, Seq):
            return self.body(e.body, env)
        if isinstance(e, Plist):
            return {k: self.eval(v, env) for k, v in zip(e.keys, e.values)}
        if isinstance(e, GetF):
            return self.getf(self.eval(e.obj, env), e.key)
        if isinstance(e, Apply):
            inner = dict(env)
            for n, a in zip(e.params, e.args):
                inner[n] = self.eval(a, env)
            if e.stdlib is None or self.stdlib_site is not None:
                return self.body(e.body, inner)
            self.stdlib_site = (e.stdlib, e.span)   # its body's spans are in prelude.sx: the call's is the place
            try:
                return self.body(e.body, inner)
            finally:
                self.stdlib_site = None
        if isinstance(e, Repeat):
            return self.repeat(e, env[self.PARAMS], [self.eval(a, env) for a in e.args])
        if isinstance(e, ModelCall):
            return self.call(e, env[self.PARAMS], [self.eval(a, env) for a in e.args])
        if isinstance(e, Report):
            if e.kind == "diagnostic" and not self.computes(e.name):
                return None  # unselected: never computed
            self.report(e, self.eval(e.value, env) if e.value is not None else None)
            return None
        raise TypeError(f"cannot evaluate {type(e).__name__}")

    def body(self, body: tuple[Expr, ...], env: dict):
        """Evaluate `body` in order; the last item's value (None for an empty body)."""
        out = None
        for b in body:
            out = self.eval(b, env)
        return out

    def call(self, e: ModelCall, params, args: list):
        """Model call `e`'s body on evaluated `args`, `self` cut from the root tree `params`: a fresh
        environment of `params`, `self` and the model's parameters."""
        me, args = self.model_self(e, params, args)
        inner = {self.PARAMS: params, e.self_name: me}
        inner.update(zip(e.params, args))
        return self.body(e.body, inner)

    def repeat(self, e: Repeat, params, args: list):
        """Repeated block `e` on evaluated `args` (the carry first): its `e.count` layers in
        sequence, each a `call` on its own layer of the stacked parameters at `e.path`."""
        raise NotImplementedError

    def computes(self, diagnostic: str) -> bool:
        """Whether `(diagnostic :name v)` is evaluated: only a selected one, and none in a generator."""
        return not self.in_generator and diagnostic in self.selected

    def op(self, e: Op, env: dict):
        """The value of registry op `e` (its arguments are evaluated here, with `self.eval`)."""
        raise NotImplementedError

    def getf(self, obj, key: str):
        """Entry `key` of an evaluated plist, context, batch or model `self`."""
        raise NotImplementedError

    def model_self(self, e: ModelCall, params, args: list) -> tuple[Any, list]:
        """A model call's `self` (the parameters at `e.path` of the root tree `params`) and its
        arguments, both cast to `e.compute_dtype` when it has one."""
        raise NotImplementedError

    def report(self, e: Report, value) -> None:
        """Record a metric, a computed diagnostic or a counter with its evaluated value."""
        raise NotImplementedError


@dataclass(eq=False, repr=False)
class Phase(Record):
    """One traced function of the step: `params` names bound to `param_types`, and `body`."""

    name: str
    params: tuple[str, ...]
    param_types: tuple[Type, ...]
    body: Expr
    span: Span

    @property
    def out(self) -> Type:
        """The phase's result type."""
        return self.body.type


@dataclass(eq=False, repr=False)
class LoaderIR(Record):
    """A loader: `source` is (kind, {keyword: constant}); `fields` per record (name, shape, dtype)."""

    name: str
    source: tuple[str, dict]
    batch: int
    fields: tuple[tuple[str, tuple[int, ...], str], ...]
    span: Span
    base_dir: str = "."

    def batch_type(self) -> PlistType:
        """The batch as `prepare` and `:init` see it: each field with the batch axis first."""
        return PlistType(tuple((n, TensorType((self.batch,) + s, d)) for n, s, d in self.fields))

    def signature(self) -> tuple:
        """Fields and batch size: two loaders with equal signatures feed the same graphs."""
        return (self.batch, tuple(sorted(self.fields)))


@dataclass(eq=False, repr=False)
class ParamIR(Record):
    """One parameter leaf: its path in the tree (model-relative keys), shape, dtype, initialiser, frozen flag,
    and where it is declared (`span`, None where unknown)."""

    path: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str
    init: tuple[str, dict]
    frozen: bool
    place: int
    layers: int = 0    # stacked by `(repeat block N)`: N, the leading axis of `shape` (0: not stacked)
    span: Span | None = None   # its `:params` entry's value in the run file
    copy_of: tuple[str, ...] | None = None   # a `:copy` model's leaf: the path of the leaf whose starting value it holds


@dataclass(eq=False, repr=False)
class AdapterIR(Record):
    """One LoRA adapter (check/lora.py): the base parameter's `path`, its input axes past a repeat's
    (`in_axes`: the leading axes flattened into `lora-a`'s `[in r]`), the `:lora` model's path
    (`model`, for naming it below its checkpoint), rank, alpha, rslora and dropout."""

    path: tuple[str, ...]
    in_axes: int
    model: tuple[str, ...]
    rank: int
    alpha: float
    rslora: bool = False
    pretrained: str | None = None   # `:lora`'s `:pretrained`: a directory in PEFT's layout they start from
    dropout: float = 0.0   # `:lora`'s `:dropout`: the probability an input of the adapter is dropped in training

    @property
    def scale(self) -> float:
        """`alpha / r`, or `alpha / sqrt(r)` with rslora (peft's)."""
        return self.alpha / (self.rank ** 0.5 if self.rslora else self.rank)


@dataclass(eq=False, repr=False)
class PretrainedIR(Record):
    """A `:pretrained` model: where its parameters' values are and how the checkpoint's names map to them."""

    prefix: tuple[str, ...]          # the model's path below the root model
    path: str                        # a safetensors file, a Hugging Face directory or its index (absolute)
    names: tuple[tuple[str, tuple], ...]   # each parameter path below `prefix` (joined with `.`) and its source
    file_dtype: str | None = None    # `:file-dtype`: the file's dtype, cast to each parameter's on load
    model: str = ""                  # the `defmodel` whose `:pretrained` this is
    named: bool = False              # whether it has `:names` (else each parameter is the tensor of its path)

    def fills(self, path: tuple[str, ...]) -> bool:
        """Whether this checkpoint holds the parameter at `path`: one below `prefix` that `names` lists
        (a `:pretrained` sub-model's parameters are read from its own checkpoint, not this one)."""
        return tuple(path[:len(self.prefix)]) == self.prefix and \
            ".".join(path[len(self.prefix):]) in {rel for rel, _ in self.names}


@dataclass(eq=False, repr=False)
class RewardIR(Record):
    """`defgenerate`'s `:reward` (check/reward.py, docs/language.md "Rewards in Python"): a Python function
    that `sexpgpu run` calls on the host after `generate.finish`, once per microbatch, whose result joins
    the batch as `name`, `[rows] f32`.

    `path` is the Python file (absolute), `function` the name it defines; `text` the integer `[rows T]`
    tensor of the batch decoded to the `prompts` (its first `prompt` columns) and `completions` (the rest)
    the function receives, as `decode` says (`SamplesIR.decode`); `fields` the batch's tensors it also
    receives as NumPy arrays, each (batch name, Python keyword). `where` is `FILE:LINE:COL` of `:reward`
    in the run file, for the run's messages. `mask` (`TEXT-mask`, as `:samples` reads it): the prompt
    without its padding, the completion up to its stop."""

    path: str
    function: str
    name: str
    rows: int
    text: str
    prompt: int
    decode: tuple
    fields: tuple[tuple[str, str], ...] = ()
    where: str = ""
    mask: str | None = None   # the batch's `TEXT-mask` of `text`'s shape: only the ids where it holds are decoded


@dataclass(eq=False, repr=False)
class GenerateIR(Record):
    """`defgenerate`: the trips and its three phases (finish may be None), and its `:until` (or None).

    `out` is everything that joins the batch: what `:finish` returns (or the last state) and, with a
    `:reward` (`reward`), its `[rows] f32` entry last; `finish_out` is the part the device makes."""

    trips: int
    init: Phase
    step: Phase
    finish: Phase | None
    state: PlistType
    out: PlistType
    ctx_keys: frozenset[str]
    #: `:until`: the state after a trip and the context to a bool scalar, or None (every trip runs)
    until: Phase | None = None
    #: `:reward`: the Python function `sexpgpu run` calls after `:finish`, or None
    reward: RewardIR | None = None

    @property
    def finish_out(self) -> PlistType:
        """What `generate.finish` returns on the device: `out` without the reward's entry."""
        if self.reward is None:
            return self.out
        return PlistType(tuple((k, t) for k, t in self.out.entries if k != self.reward.name))


@dataclass(eq=False, repr=False)
class PassIR(Record):
    """An evaluation pass: its loader, schedule, and its own prepare and objective phases."""

    name: str
    loader: str
    every: int
    batches: int
    runs_generator: bool
    prepare: Phase | None
    objective: Phase
    span: Span


@dataclass(eq=False, repr=False)
class RunIR(Record):
    """The `run` form's settings."""

    loader: str
    steps: int
    microbatches: int = 1
    stack: int = 1
    stack_auto: bool = False
    seed: int = 0
    precision: str = "f32"
    optimizer: tuple[str, dict] = ("adam", {"lr": 1e-3})
    log_every: int = 50
    log: dict = field(default_factory=dict)
    checkpoint: dict | None = None
    diagnostics: tuple[str, ...] = ()
    devices: int | None = None     # `:devices N`: the data-parallel mesh size (None: every device)
    shard_params: str = "replicated"   # `:shard-params`: "replicated" or "fsdp" (docs/sharding.md)
    model_parallel: int = 1   # `:model-parallel M`: the tensor-parallel `model` axis of the mesh (docs/sharding.md)
    shard: tuple[tuple[str, int | None], ...] = ()   # `:shard (:name axis ...)`: mesh.model_split's overrides
    samples: SamplesIR | None = None   # `:samples`: the rows written to samples.jsonl (docs/metrics.md)


@dataclass(eq=False, repr=False)
class SamplesIR(Record):
    """`run`'s `:samples` (check/samples.py): which tensors of the batch to show, how many rows, how often.

    `text` and `values` are (name, shape, dtype) of batch entries (loader fields and generated names,
    the batch axis first); `decode` is how `text` rows become text: ("tokenizer", path, base_dir) a
    tokenizer.json (`path` as written, relative to `base_dir`; `$STDLIB` and `~` expand), ("bytes",)
    UTF-8 bytes, or ("ids",) the ids joined by spaces. `prompt`: the columns of each text row that are
    the prompt (None: the row is not split). `masks`: the text names shown through a `NAME-mask`."""

    every: int
    rows: int
    text: tuple[tuple[str, tuple[int, ...], str], ...]
    values: tuple[tuple[str, tuple[int, ...], str], ...]
    decode: tuple = ("ids",)
    prompt: int | None = None
    #: The names computed in the training graph rather than read from the batch, each (name, where):
    #: `inputs` an entry of what `prepare` returns, `prepare` or `objective` a name the phase's
    #: top-level `let*` binds (its last binding, `top_bindings`). Every other name is the batch's.
    computed: tuple[tuple[str, str], ...] = ()
    #: Each `:text` name shown through its mask, (name, mask name): `NAME-mask` of NAME's shape (a
    #: loader's padding mask, a generator's completion mask), gathered beside it; only the ids where
    #: it is true (1) are shown, so a padded prompt shows no padding and a completion ends at its stop.
    masks: tuple[tuple[str, str], ...] = ()

    def computed_in(self, where: str) -> tuple[str, ...]:
        """The names of `computed` taken from `where` (`inputs`, `prepare` or `objective`)."""
        return tuple(n for n, w in self.computed if w == where)


def top_bindings(phase: Phase | None) -> dict[str, Expr]:
    """The names the `let*` that is `phase`'s whole body binds, each to the expression of its last
    binding (a name bound twice is its second value); {} when the body is not a `let*` (or no phase).
    `run`'s `:samples` may show them (check/samples.py; the runtime keeps them in the training graph)."""
    if phase is None or not isinstance(phase.body, Let):
        return {}
    return dict(zip(phase.body.names, phase.body.values))


@dataclass(eq=False, repr=False)
class Program(Record):
    """A checked run file, ready to lower: only built when the file has no errors."""

    path: str
    loaders: dict[str, LoaderIR]
    params: tuple[ParamIR, ...]
    root_model: str
    generate: GenerateIR | None
    prepare: Phase | None
    objective: Phase
    passes: tuple[PassIR, ...]
    run: RunIR
    identity: str
    stackable: bool
    metrics: tuple[str, ...]
    diagnostics: tuple[str, ...]
    counters: tuple[str, ...]
    stages: tuple[tuple[str, int | None], ...] = ()
    pretrained: tuple[PretrainedIR, ...] = ()
    source_text: str = ""
    identity_apart_from_steps: str = ""   # identity(parsed, apart_from_steps=True): the file but for `:steps`
    adapters: tuple[AdapterIR, ...] = ()   # the LoRA adapters (`:lora`), in parameter order
    settings: tuple[tuple[str, object], ...] = ()   # the root model's norm epsilon, rotary base and scaling, as
    #                                       its standard-library calls state them (check/config.py): an export's config

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of an offset into the run file's text."""
        before = self.source_text[:offset]
        return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1
