"""IR to JAX: one lowering per registry op, and the evaluator that traces a phase.

`LOWERINGS` has exactly the keys of `sexpgpu_lang.ops.REGISTRY` (a test
checks it). Each lowering reads the constants its rule normalised
(`call.static`: axes, dtypes, sizes) and the output type, and passes
explicit dtypes wherever JAX's own default differs under
`jax_enable_x64` (argmax's index, sums of ints, literals):
docs/dev/design.md#types.

`evaluate` walks a phase's IR while JAX traces it (`sexpgpu_lang.ir.Interpreter`
does the walk and the environments; here each op is lowered and each report
recorded). After every op it compares the traced result's shape and dtype
with the IR's; this runs once per graph (at trace time) and a difference
raises `InternalTypeError` naming the op and its range.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

from sexpgpu_lang import ir
from sexpgpu_lang.types import TensorType

from .accumulate import scan_summing, summable
from .lora import LoraWeight, adapted, contract
from ..dtypes import jdt, mismatch
from ..errors import InternalTypeError


@dataclass
class LowerCall:
    """What a lowering sees: evaluated arguments, dynamic keywords, the rule's constants, the output type."""

    args: list
    kwargs: dict
    static: dict
    out: Any
    ctx: "Effects"


LOWERINGS: dict[str, Callable[[LowerCall], Any]] = {}


def lowering(*names):
    """Register one function as the lowering of `names`."""
    def deco(fn):
        for n in names:
            LOWERINGS[n] = fn
        return fn
    return deco


def _as(x, dtype: str):
    return jnp.asarray(x, dtype=jdt(dtype))


def _compute(call: LowerCall) -> str:
    """Elementwise ops convert every operand to one dtype first: the output's, or
    for comparisons the promoted operand dtype the rule recorded."""
    if isinstance(call.out, TensorType) and call.out.dtype != "bool":
        return call.out.dtype
    return call.static["dtype"]


def _ew(fn):
    def lower(call: LowerCall):
        dt = _compute(call)
        return fn(*[_as(a, dt) for a in call.args])
    return lower


def _nary(fn):
    """`+` and `*` take any number of operands, folded left to right in the compute dtype."""
    def lower(call: LowerCall):
        dt = _compute(call)
        out = _as(call.args[0], dt)
        for a in call.args[1:]:
            out = fn(out, _as(a, dt))
        return out
    return lower


LOWERINGS["+"] = _nary(jnp.add)
LOWERINGS["*"] = _nary(jnp.multiply)


@lowering("-")
def _sub(call):
    dt = _compute(call)
    if len(call.args) == 1:
        return -_as(call.args[0], dt)
    return _as(call.args[0], dt) - _as(call.args[1], dt)


LOWERINGS["/"] = _ew(jnp.true_divide)
LOWERINGS["mod"] = _ew(jnp.mod)
LOWERINGS["pow"] = _ew(jnp.power)
LOWERINGS["maximum"] = _ew(jnp.maximum)
LOWERINGS["minimum"] = _ew(jnp.minimum)
LOWERINGS["neg"] = _ew(jnp.negative)
LOWERINGS["abs"] = _ew(jnp.abs)
LOWERINGS["relu"] = _ew(jax.nn.relu)
LOWERINGS["exp"] = _ew(jnp.exp)
LOWERINGS["log"] = _ew(jnp.log)
LOWERINGS["sqrt"] = _ew(jnp.sqrt)
LOWERINGS["rsqrt"] = _ew(lax.rsqrt)
LOWERINGS["tanh"] = _ew(jnp.tanh)
LOWERINGS["sigmoid"] = _ew(jax.nn.sigmoid)
LOWERINGS["gelu"] = _ew(lambda x: jax.nn.gelu(x, approximate=True))
LOWERINGS["silu"] = _ew(jax.nn.silu)
LOWERINGS["sin"] = _ew(jnp.sin)
LOWERINGS["cos"] = _ew(jnp.cos)
def _known_number(x) -> bool:
    """A number known while tracing (a literal, a function's constant argument), not a tracer."""
    return isinstance(x, (int, float, np.number)) and not isinstance(x, bool)


#: the comparisons, and NumPy's, for two numbers known while tracing (`_Lowering.op`)
_NUMPY_COMPARE = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
                  ">=": np.greater_equal}
for _n, _f in (("=", jnp.equal), ("!=", jnp.not_equal), ("<", jnp.less), ("<=", jnp.less_equal),
               (">", jnp.greater), (">=", jnp.greater_equal)):
    LOWERINGS[_n] = (lambda f: lambda call: f(*[_as(a, call.static["dtype"]) for a in call.args]))(_f)


@lowering("and", "or")
def _andor(call):
    out = _as(call.args[0], "bool")
    for a in call.args[1:]:
        out = (jnp.logical_or if call.static["op"] == "or" else jnp.logical_and)(out, _as(a, "bool"))
    return out


@lowering("not")
def _not(call):
    return jnp.logical_not(_as(call.args[0], "bool"))


@lowering("where")
def _where(call):
    """`jnp.where`; with a constant scalar condition (a comparison of two numbers: `_Lowering.op`) the
    branch it selects alone, broadcast to the rule's shape, so that the other is never differentiated
    (its backward, zeros times its operands, is work XLA does not fold away)."""
    c, a, b = call.args
    dt = call.static["dtype"]
    if isinstance(c, (np.bool_, bool)):
        return jnp.broadcast_to(_as(a if c else b, dt), call.out.shape)
    return jnp.where(_as(c, "bool"), _as(a, dt), _as(b, dt))


# -- reductions ---------------------------------------------------------------------------


def _red(fn, convert_first=False):
    def lower(call):
        s = call.static
        x = call.args[0]
        if convert_first:
            x = _as(x, s["dtype"])
        out = fn(x, axis=s["axes"], keepdims=s["keepdims"])
        return out.astype(jdt(s["dtype"]))
    return lower


LOWERINGS["sum"] = lambda call: jnp.sum(_as(call.args[0], call.static["dtype"]) if call.args[0].dtype == jnp.bool_ else call.args[0],
                                        axis=call.static["axes"], keepdims=call.static["keepdims"], dtype=jdt(call.static["dtype"]))
LOWERINGS["prod"] = lambda call: jnp.prod(call.args[0], axis=call.static["axes"], keepdims=call.static["keepdims"],
                                          dtype=jdt(call.static["dtype"]))
LOWERINGS["max"] = _red(jnp.max)
LOWERINGS["min"] = _red(jnp.min)
LOWERINGS["mean"] = _red(jnp.mean, convert_first=True)
LOWERINGS["logsumexp"] = _red(jax.nn.logsumexp, convert_first=True)


# The rule's dtype (the input's; i32 for bool, where jnp.cumsum under x64 gives i64) is passed explicitly.
LOWERINGS["cumsum"] = lambda call: jnp.cumsum(call.args[0], axis=call.static["axis"], dtype=jdt(call.static["dtype"]))


@lowering("argmax", "argmin")
def _argred(call):
    f = jnp.argmax if call.static["op"] == "argmax" else jnp.argmin
    return f(call.args[0], axis=call.static["axis"], keepdims=call.static["keepdims"]).astype(jnp.int32)


# -- shape -------------------------------------------------------------------------------------


LOWERINGS["reshape"] = lambda call: jnp.reshape(call.args[0], call.static["shape"])
LOWERINGS["transpose"] = lambda call: jnp.transpose(call.args[0], call.static["perm"])
LOWERINGS["concat"] = lambda call: jnp.concatenate([_as(a, call.static["dtype"]) for a in call.args[0]], axis=call.static["axis"])
LOWERINGS["stack"] = lambda call: jnp.stack([_as(a, call.static["dtype"]) for a in call.args[0]], axis=call.static["axis"])
# a Python scalar (a weakly typed literal, e.g. a position 0 or a fill value) takes the rule's dtype, not x64's i64
LOWERINGS["expand-dims"] = lambda call: jnp.expand_dims(_as(call.args[0], call.out.dtype), call.static["axis"])
LOWERINGS["squeeze"] = lambda call: jnp.squeeze(call.args[0], axis=call.static["axes"])
LOWERINGS["broadcast-to"] = lambda call: jnp.broadcast_to(_as(call.args[0], call.out.dtype), call.static["shape"])
LOWERINGS["slice"] = lambda call: lax.slice_in_dim(call.args[0], call.static["start"], call.static["end"], axis=call.static["axis"])


def _indices(call, i):
    if "indices" in call.static:
        return jnp.asarray(call.static["indices"], dtype=jnp.int32)
    return call.args[i]


# `take` gathers along :axis (JAX's default flattens); out-of-range indices clamp.
LOWERINGS["take"] = lambda call: jnp.take(call.args[0], _indices(call, 1), axis=call.static["axis"], mode="clip")
LOWERINGS["take-along-axis"] = lambda call: jnp.take_along_axis(call.args[0], _indices(call, 1), axis=call.static["axis"], mode="clip")
LOWERINGS["one-hot"] = lambda call: jax.nn.one_hot(call.args[0], call.static["n"], dtype=jdt(call.static["dtype"]))
LOWERINGS["iota"] = lambda call: lax.broadcasted_iota(jdt(call.static["dtype"]), call.static["shape"], call.static["axis"])
LOWERINGS["zeros"] = lambda call: jnp.zeros(call.static["shape"], jdt(call.static["dtype"]))
LOWERINGS["ones"] = lambda call: jnp.ones(call.static["shape"], jdt(call.static["dtype"]))
LOWERINGS["full"] = lambda call: jnp.full(call.static["shape"], call.args[1], dtype=jdt(call.static["dtype"]))
LOWERINGS["axis-size"] = lambda call: jnp.asarray(call.static["value"], dtype=jnp.int32)
LOWERINGS["size"] = lambda call: jnp.asarray(call.static["value"], dtype=jnp.int64)


# -- linear algebra, networks -----------------------------------------------------------------


LOWERINGS["matmul"] = lambda call: jnp.matmul(_as(call.args[0], call.static["dtype"]), _as(call.args[1], call.static["dtype"]))
LOWERINGS["einsum"] = lambda call: jnp.einsum(call.static["subscripts"], *[_as(a, call.static["dtype"]) for a in call.args[1:]])
LOWERINGS["softmax"] = lambda call: jax.nn.softmax(_as(call.args[0], call.static["dtype"]), axis=call.static["axis"])
LOWERINGS["log-softmax"] = lambda call: jax.nn.log_softmax(_as(call.args[0], call.static["dtype"]), axis=call.static["axis"])


@lowering("dot-product-attention")
def _attention(call):
    """`jax.nn.dot_product_attention` with its implementation left to JAX (XLA here; cuDNN's fused
    kernel is JAX's to choose where it applies); a mask of rank under 4 gets leading axes of size 1,
    as JAX wants a 4-D mask."""
    q, k, v = call.args
    mask = call.kwargs.get("mask")
    if mask is not None:
        mask = jnp.asarray(mask, jnp.bool_)
        mask = jnp.reshape(mask, (1,) * (4 - mask.ndim) + mask.shape)
    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=call.static["scale"],
                                        is_causal=call.static["causal"])


@lowering("cross-entropy")
def _xent(call):
    """A label outside 0 ... V-1 gives NaN (not the clamped class's loss), so the run's NaN check stops
    the run at that step instead of training on a wrong target; a negative label does not count from
    the end, and the range is tested before the cast to i32, so a huge i64 label cannot wrap into it."""
    logits, labels = call.args
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    classes = logp.shape[-1]
    labels = jnp.asarray(labels)
    index = jnp.where((labels < 0) | (labels >= classes), classes, labels).astype(jnp.int32)
    picked = jnp.take_along_axis(logp, index[..., None], axis=-1, mode="fill", fill_value=jnp.nan)[..., 0]
    return -picked


# -- selection -----------------------------------------------------------------------------------


LOWERINGS["sort"] = lambda call: jnp.sort(call.args[0], axis=call.static["axis"], descending=call.static["descending"])
LOWERINGS["argsort"] = lambda call: jnp.argsort(call.args[0], axis=call.static["axis"],
                                                descending=call.static["descending"]).astype(jnp.int32)


@lowering("top-k")
def _top_k(call):
    values, indices = lax.top_k(call.args[0], call.static["k"])
    return {"values": values, "indices": indices.astype(jnp.int32)}


# -- reads and writes at a traced position ------------------------------------------------------


def _start_indices(starts):
    """The start indices as i32 scalars (the trip is i64; JAX wants one dtype for all of them)."""
    return [jnp.asarray(s).astype(jnp.int32) for s in starts]


# JAX's rule, kept: each start is clamped into 0 ... axis - size (negative starts are not wrapped).
LOWERINGS["dynamic-slice"] = lambda call: lax.dynamic_slice(call.args[0], _start_indices(call.args[1]),
                                                            call.static["sizes"], allow_negative_indices=False)
LOWERINGS["dynamic-update-slice"] = lambda call: lax.dynamic_update_slice(
    call.args[0], _as(call.args[1], call.static["dtype"]), _start_indices(call.args[2]), allow_negative_indices=False)


@lowering("at-set")
def _at_set(call):
    """`x.at[i, j].set(v)`: negative indices from the end, an out-of-range update dropped."""
    index = tuple(jnp.asarray(i, jdt(dt)) for i, dt in zip(call.args[1], call.static["index_dtypes"]))
    return call.args[0].at[index].set(_as(call.args[2], call.static["dtype"]), mode="drop")


LOWERINGS["cast"] = lambda call: jnp.asarray(call.args[0]).astype(jdt(call.static["dtype"]))
LOWERINGS["stop-gradient"] = lambda call: lax.stop_gradient(jnp.asarray(call.args[0]))


# -- random draws ------------------------------------------------------------------------------------


def draw_key(call: LowerCall):
    """`fold_in(fold_in(key(seed), place), salt)`; the salt defaults to 0 (docs/dev/design.md#forms-and-the-context)."""
    key = jax.random.fold_in(call.ctx.seed_key, jnp.uint32(call.static["place"]))
    salt = call.kwargs.get("salt", 0)
    return jax.random.fold_in(key, jnp.asarray(salt).astype(jnp.uint32))


@lowering("uniform")
def _uniform(call):
    s = call.static
    return jax.random.uniform(draw_key(call), s["shape"], jdt(s["dtype"]), s["min"], s["max"])


@lowering("normal")
def _normal(call):
    s = call.static
    x = jax.random.normal(draw_key(call), s["shape"], jnp.float32) * s["std"] + s["mean"]
    return x.astype(jdt(s["dtype"]))


@lowering("categorical")
def _categorical(call):
    """`jax.random.categorical` over logits / temperature; `:top-k` draws among `lax.top_k`'s k
    largest (exactly k, ties broken as top_k breaks them) and `:top-p` keeps, of those in
    descending order, each whose preceding probabilities sum to under p (so the most likely
    always stays), as Hugging Face's warpers do (temperature, then top-k, then top-p).
    Temperature 0 is `jnp.argmax` of the logits: the same index every time; a traced
    temperature of 0 gives the argmax too. A traced temperature is kept, as f32, in
    `call.ctx.temperatures` under the draw's place (a generator's trip graph checks it:
    sexpgpu_runtime.lowering.draw_check)."""
    s = call.static
    logits = call.args[0]
    if s.get("greedy"):
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    temp = call.kwargs.get("temperature")
    zero = None
    if temp is not None:
        temp = jnp.asarray(temp, logits.dtype)
        if "greedy" not in s:   # traced: 0 means the argmax
            call.ctx.temperatures.setdefault(s["place"], []).append(
                jnp.asarray(call.kwargs["temperature"]).astype(jnp.float32))
            zero = temp == 0
            temp = jnp.where(zero, jnp.ones_like(temp), temp)
        logits = logits / temp
    key = draw_key(call)
    if "top_k" in s or "top_p" in s:
        values, index = lax.top_k(logits, s.get("top_k", logits.shape[-1]))
        if "top_p" in s:
            probs = jax.nn.softmax(values.astype(jnp.float32), axis=-1)
            before = jnp.cumsum(probs, axis=-1) - probs
            values = jnp.where(before < s["top_p"], values, -jnp.inf)
        pick = jax.random.categorical(key, values, axis=-1)
        out = jnp.take_along_axis(index, pick[..., None], axis=-1)[..., 0].astype(jnp.int32)
    else:
        out = jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
    if zero is not None:
        out = jnp.where(zero, jnp.argmax(call.args[0], axis=-1).astype(jnp.int32), out)
    return out


@lowering("bernoulli")
def _bernoulli(call):
    return jax.random.bernoulli(draw_key(call), jnp.asarray(call.args[0], jnp.float32))


# Ops sharing one lowering learn their name through static["op"].
_SHARED = {"and", "or", "argmax", "argmin"}


# --------------------------------------------------------------------------- the evaluator


@dataclass
class Effects:
    """What a phase reports while it is traced: metrics, selected diagnostics, counters, and the
    traced temperatures of its `categorical` draws.

    `selected` names the diagnostics to compute (others are not evaluated at
    all); `in_generator` drops every diagnostic; `seed_key` is the run's key.
    """

    seed_key: Any
    selected: frozenset = frozenset()
    in_generator: bool = False
    metrics: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    counters: dict = field(default_factory=dict)
    #: a draw's place -> the traced `:temperature`s of its `categorical` (f32 scalars, in trace order)
    temperatures: dict = field(default_factory=dict)
    #: Running sums of the gradients by repeated block's path (its stacked parameters' tree): a
    #: repeated block whose path is here adds its gradient into it (`accumulate.scan_summing`) and
    #: takes it out of here, so that `sums` ends holding the paths not summed so.
    sums: dict = field(default_factory=dict)
    #: The values `run_phase` kept for `:samples` (name -> value): an entry a phase returned or a name
    #: its top-level `let*` bound (`ir.top_bindings`), as `run_phase`'s `keep` asked.
    kept: dict = field(default_factory=dict)
    #: The key of the microbatch's LoRA dropout in the training step's forward (lora.py `dropout_key`);
    #: None elsewhere (the generator, a pass): every adapter is then folded into its weight.
    dropout_key: Any = None
    #: With `dropout_key`: every adapter unmerged, those of dropout 0 too (lora.py `adapted`).
    unmerged: bool = False


#: The remat policies (`sexpgpu_lang.language.REMAT_POLICIES`) as `jax.checkpoint_policies`;
#: `everything-saveable` (keep every value: no remat) is not checkpointed at all.
REMAT = {"nothing-saveable": jax.checkpoint_policies.nothing_saveable,
         "dots-saveable": jax.checkpoint_policies.dots_saveable}


def _scalar(v):
    v = jnp.asarray(v)
    return jnp.mean(v.astype(jnp.float32)) if v.ndim else v


class _Lowering(ir.Interpreter):
    """The IR evaluated with JAX (`ir.Interpreter` walks it): each op through its lowering, reports into `fx`."""

    def __init__(self, fx: Effects):
        super().__init__(fx.selected, fx.in_generator)
        self.fx = fx
        self.layers: tuple = ()   # the layer index of each repeated block being traced (LoRA dropout's keys)

    def op(self, e: ir.Op, env: dict):
        raw = [self.eval(a, env) for a in e.args]
        if e.name in _NUMPY_COMPARE and all(_known_number(v) for v in raw):
            # two numbers (`generalized-jsd`'s `(<= beta 0.0)`): a NumPy bool, which `where` selects with
            return _NUMPY_COMPARE[e.name](*[np.asarray(v, dtype=jdt(e.static["dtype"])) for v in raw])
        args = [_materialise(a, v) for a, v in zip(e.args, raw)]
        kwargs = {k: self.eval(v, env) for k, v in e.kwargs}
        out = self.lowered(e, args, kwargs)
        why = mismatch(out, e.type)
        if why:
            raise InternalTypeError(f"internal error: `{e.name}`: {why}", e.span.start)
        return out

    def lowered(self, e: ir.Op, args: list, kwargs: dict):
        """Op `e`'s lowering on its evaluated `args` and `kwargs`; a contraction reading an adapter
        unmerged (a `LoraWeight`) as lora.py `contract` lowers it, any other op reading it folded."""
        static = e.static if e.name not in _SHARED else {**e.static, "op": e.name}
        if any(isinstance(a, LoraWeight) for a in args):
            out = contract(e.name, args, static)
            if out is not None:
                return out
            args = [a.folded() if isinstance(a, LoraWeight) else a for a in args]
        return LOWERINGS[e.name](LowerCall(args, kwargs, static, e.type, self.fx))

    def getf(self, obj, key: str):
        return obj[key]

    def model_self(self, e: ir.ModelCall, params, args: list):
        for k in e.path:
            params = params[k]
        if e.adapters:
            params = adapted(params, e.adapters, tuple(e.path), self.fx.dropout_key, self.layers, self.fx.unmerged)
        if e.compute_dtype:
            params = _cast_floats(params, e.compute_dtype)
            args = [_cast_floats(a, e.compute_dtype) for a in args]
        return params, args

    def call(self, e: ir.ModelCall, params, args: list):
        """A model call; under a remat policy its body is `jax.checkpoint`ed with that policy
        (over the parameters and the array arguments; other arguments are constants)."""
        policy = REMAT.get(e.remat)
        if policy is None:
            return super().call(e, params, args)
        dynamic = [i for i, a in enumerate(args) if isinstance(a, (jax.Array, dict))]

        def body(p, arrays):
            full = list(args)
            for i, a in zip(dynamic, arrays):
                full[i] = a
            return super(_Lowering, self).call(e, p, full)

        return jax.checkpoint(body, policy=policy)(params, [args[i] for i in dynamic])

    def repeat(self, e: ir.Repeat, params, args: list):
        """A repeated block as one `lax.scan` over its stacked parameters: one traced body
        whatever `e.count`, the carry `args[0]`, the other arguments closed over. With a running
        sum for its path in `self.fx.sums` (every stacked parameter trainable, and `summable`), the
        scan's backward adds its gradient into that sum (`accumulate.scan_summing`). Under LoRA
        dropout the scan also carries the layer index (`self.layers`: each layer's own masks)."""
        stacked = params
        for k in e.path:
            stacked = stacked[k]
        rest = list(args[1:])
        sums = self.fx.sums.get(e.path)
        if sums is not None and jax.tree_util.tree_structure(sums) == jax.tree_util.tree_structure(stacked) \
                and summable(e):
            del self.fx.sums[e.path]
            return self._repeat_summing(e, stacked, args[0], rest, sums)
        indexed = self.fx.dropout_key is not None

        def layer(carry, xs):
            sliced, i = xs if indexed else (xs, None)
            return self._in_layer(i, lambda: self.call(e, _replace(params, e.path, sliced), [carry] + rest)), None

        xs = (stacked, jnp.arange(e.count)) if indexed else stacked
        out, _ = lax.scan(layer, args[0], xs, length=e.count)
        return out

    def _in_layer(self, i, fn):
        """`fn()` with layer index `i` (a traced scalar, or None: no index kept) after `self.layers`."""
        if i is None:
            return fn()
        outer, self.layers = self.layers, self.layers + (i,)
        try:
            return fn()
        finally:
            self.layers = outer

    def _repeat_summing(self, e: ir.Repeat, stacked, carry, rest: list, sums):
        """`repeat` whose gradient is added into `sums`: the layer a function of its slice, the carry
        and the array arguments alone (the others are constants; `summable` says no other parameter
        is read), as `scan_summing` needs."""
        dynamic = [i for i, a in enumerate(rest) if isinstance(a, (jax.Array, dict))]
        indexed = self.fx.dropout_key is not None

        def layer(sliced, h, arrays, index=None):
            full = list(rest)
            for i, a in zip(dynamic, arrays):
                full[i] = a
            return self._in_layer(index, lambda: self.call(e, _nest(e.path, sliced), [h] + full))

        return scan_summing(layer, e.count, carry, stacked, [rest[i] for i in dynamic], sums, indexed)

    def report(self, e: ir.Report, v) -> None:
        fx = self.fx
        if e.kind == "metric":
            fx.metrics[e.name] = _scalar(v)
        elif e.kind == "diagnostic":
            fx.diagnostics[e.name] = _scalar(v)
        else:
            fx.counters[e.name] = fx.counters.get(e.name, 0) + jnp.sum(jnp.asarray(v))


def evaluate(e: ir.Expr, env: dict, fx: Effects):
    """Evaluate (trace) one IR expression with JAX. `env` maps binding names to values (and
    `ir.Interpreter.PARAMS` to the parameter tree, where `e` calls a model)."""
    return _Lowering(fx).eval(e, env)


def _nest(path: tuple, sub) -> dict:
    """A parameter tree holding `sub` at `path` alone."""
    for k in reversed(path):
        sub = {k: sub}
    return sub


def _replace(params: dict, path: tuple, sub) -> dict:
    """`params` with the subtree at `path` replaced by `sub` (a layer's slice of a stack)."""
    if not path:
        return sub
    return {**params, path[0]: _replace(params[path[0]], path[1:], sub)}


def _materialise(e: ir.Expr, value):
    """A literal (a Python number) given to an op becomes an array of the dtype its rule
    gave it (i32, f32, bool), not the i64/f64 JAX would make of it under x64."""
    if isinstance(e, ir.Const) and isinstance(e.type, TensorType) and isinstance(value, (bool, int, float)):
        return jnp.asarray(value, dtype=jdt(e.type.dtype))
    return value


def _cast_floats(tree, dtype: str):
    def cast(x):
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating):
            return x.astype(jdt(dtype))
        return x
    return jax.tree_util.tree_map(cast, tree)


def run_phase(phase: ir.Phase, args: list, params, fx: Effects, keep: tuple[str, ...] = ()):
    """Trace one phase: bind its parameters to `args`, evaluate its body. With `keep` (names the
    `let*` that is the phase's whole body binds, `ir.top_bindings`), each one's last value is also
    put in `fx.kept`; the values computed are the same (the `let*` evaluated binding by binding, as
    `ir.Interpreter` does)."""
    env = {ir.Interpreter.PARAMS: params}
    env.update(zip(phase.params, args))
    body = phase.body
    if not keep or not isinstance(body, ir.Let):
        return evaluate(body, env, fx)
    lowering = _Lowering(fx)
    inner = dict(env)
    for n, v in zip(body.names, body.values):
        inner[n] = lowering.eval(v, inner)
        if n in keep:
            fx.kept[n] = inner[n]
    return lowering.body(body.body, inner)
