"""LoRA adapters (`defmodel`'s `:lora`): low-rank adapters on named projections of a frozen model.

`read_lora` reads the setting, `(:targets [:wq :wv] :rank 8 :alpha 16 :dropout 0.0 :rslora false)`,
when the model is built; `add_adapters` runs once the parameters are collected and the
`:pretrained` mappings read (check/models.py `collect_params`). For every parameter of the
model, or of a model below it, whose key is a target, it adds two parameters beside it, named
after it, trainable unless the model is `:frozen`; every other parameter of the model and the
models below it (the base) is frozen:

- `KEY.lora-a` `[in r]`, PEFT's `lora_A` transposed: drawn uniform in +-1/sqrt(in), which is
  the bound of `torch.nn.init.kaiming_uniform_(a=sqrt(5))` that peft's default
  `init_lora_weights=True` uses;
- `KEY.lora-b` `[r out]`, PEFT's `lora_B` transposed: zeros, so the adapted model starts as the base.

`in` is the parameter's first axis, or its first two where the model's `:pretrained` mapping
splits the input into heads (`(split-heads ... :axis 0)`: Llama's `wo` `[N H D]`); `out` the
product of the rest. Under a `(repeat block N)` both are stacked `[N ...]`. A model call then
sees `KEY` as `KEY + scale * reshape(lora-a @ lora-b)` (`ir.ModelCall.adapters`), `scale` being
`alpha / r` (`alpha / sqrt(r)` with `:rslora true`, as peft's `use_rslora`); with `:dropout p` the
training step's forward applies the adapter unmerged instead, on its input dropped out with
probability p, as peft does in training (the runtime's lowering: sexpgpu_runtime/lowering/lora.py).
With `:pretrained
"dir"` the adapters start from a directory in PEFT's layout (`adapter_model.safetensors`, read by
the runtime: sexpgpu_runtime/weights/lora.py) instead of their initialisation.

A `:copy` of a model with `:lora` is its base (`call_base`): its calls with no adapter applied, on
the frozen base in place, with no parameters of its own.

E-MODEL-008: a target no parameter has, a rank past the matrix (`r > min(in, out)`), a
`:dropout` outside [0, 1), a target adapted by two `:lora`s, a setting out of its range, and with the files
read a `:pretrained` directory without adapter_config.json. Imports nothing outside
`sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import dataclasses
import math
import os

from .. import ir
from ..diagnostics import shown_value
from ..records import Record
from ..syntax import Kw, ListNode, Node, VecNode
from .context import CheckContext, near_miss
from .identity import place_hash
from .keywords import const_value, keyword_args

#: The keys of `:lora`'s plist.
LORA_KEYS = ("targets", "rank", "alpha", "dropout", "rslora", "pretrained")
#: The suffixes of the two adapter parameters beside their base's key.
A_SUFFIX, B_SUFFIX = ".lora-a", ".lora-b"


@dataclasses.dataclass(frozen=True, repr=False)
class LoraSetting(Record):
    """A model's `:lora`: the target keys (with their nodes), rank, alpha, dropout and rslora."""

    targets: tuple[tuple[str, Node], ...]
    rank: int
    alpha: float
    dropout: float
    rslora: bool
    node: Node
    rank_node: Node
    pretrained: str | None = None   # a directory in PEFT's layout the adapters start from (absolute)

    @property
    def scale(self) -> float:
        """`alpha / r`, or `alpha / sqrt(r)` with rslora (peft's `LoraLayer.update_layer`)."""
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)


def read_lora(ctx: CheckContext, node: Node) -> LoraSetting | None:
    """`:lora`'s plist, or None after E-FORM-002 or E-MODEL-008 (said at the value)."""
    if not isinstance(node, ListNode) or (node.items and not isinstance(node.items[0], Kw)):
        ctx.err("E-FORM-002", node.span, "`:lora` takes a plist: `(:targets [:wq :wv] :rank 8 :alpha 16)`")
        return None
    kws = keyword_args(ctx, node, 0, LORA_KEYS, ":lora")
    if "targets" not in kws or "rank" not in kws:
        ctx.err("E-MODEL-008", node.span, "`:lora` needs `:targets` and `:rank`",
                help="write `(:targets [:wq :wv] :rank 8 :alpha 16)`")
        return None
    tnode = kws["targets"][1]
    targets = []
    if not isinstance(tnode, VecNode) or not tnode.items or not all(isinstance(t, Kw) for t in tnode.items):
        ctx.err("E-MODEL-008", tnode.span, "`:targets` is a vector of parameter keys: `[:wq :wv]`")
        return None
    for t in tnode.items:
        targets.append((t.name, t))
    rank_node = kws["rank"][1]
    rank = const_value(ctx, rank_node)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        ctx.err("E-MODEL-008", rank_node.span,
                f"`:rank` must be an integer of 1 or more, got {shown_value(rank, isinstance(rank_node, Kw))}")
        return None
    alpha = _number(ctx, kws, "alpha", float(rank))
    dropout = _number(ctx, kws, "dropout", 0.0)
    if alpha is None or dropout is None:
        return None
    if dropout >= 1.0:
        ctx.err("E-MODEL-008", kws["dropout"][1].span, f"`:dropout` must be a probability below 1, got {dropout:g}: "
                "the adapters' input would be dropped whole", help="give `:dropout` from 0.0 up to below 1, e.g. 0.05")
        return None
    rslora = False
    if "rslora" in kws:
        rslora = const_value(ctx, kws["rslora"][1])
        if not isinstance(rslora, bool):
            ctx.err("E-MODEL-008", kws["rslora"][1].span, "`:rslora` is `true` or `false`")
            return None
    pretrained = None
    if "pretrained" in kws:
        rel = const_value(ctx, kws["pretrained"][1])
        if not isinstance(rel, str):
            ctx.err("E-MODEL-008", kws["pretrained"][1].span, "`:pretrained` of `:lora` is the directory of an "
                    "adapter in PEFT's layout: a string, or a `def` of one")
            return None
        base = os.path.dirname(os.path.abspath(ctx.src.path)) if not ctx.src.path.startswith("<") else "."
        pretrained = rel if os.path.isabs(rel) else os.path.join(base, rel)
        if ctx.read_files is True and not os.path.isfile(os.path.join(pretrained, "adapter_config.json")):
            ctx.err("E-MODEL-008", kws["pretrained"][1].span, f"`{rel}` holds no adapter_config.json: `:pretrained` "
                    "of `:lora` is a directory in PEFT's layout", help="give the directory `sexpgpu run "
                    "--export-adapter` or peft's `save_pretrained` wrote")
            return None
    return LoraSetting(tuple(targets), rank, alpha, dropout, rslora, node, rank_node, pretrained)


def _number(ctx: CheckContext, kws: dict, key: str, default: float) -> float | None:
    """`:alpha` or `:dropout` (a number of 0 or more, `default` when absent), or None after E-MODEL-008."""
    if key not in kws:
        return default
    v = const_value(ctx, kws[key][1])
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not math.isfinite(v):
        node = kws[key][1]
        ctx.err("E-MODEL-008", node.span, f"`:{key}` must be a number of 0 or more, got {shown_value(v, isinstance(node, Kw))}")
        return None
    return float(v)


def in_axes(ctx: CheckContext, p: ir.ParamIR) -> int:
    """How many leading axes of parameter `p` (past a repeat's) are the projection's input: 2 where
    the `:pretrained` mapping that fills it splits its first axis into heads, else 1."""
    for spec in ctx.pretrained_mapped:   # (the mapping says it, whether or not its files could be read)
        if spec.fills(p.path):
            src = dict(spec.names)[".".join(p.path[len(spec.prefix):])]
            if src[0] == "split-heads" and src[2] == 0:
                return 2
    return 1


def add_adapters(ctx: CheckContext) -> None:
    """The adapters of every reachable model with `:lora` (module docstring): the base frozen,
    `KEY.lora-a` and `KEY.lora-b` added to `ctx.params`, each adapted model's keys, scale and dropout in
    `ctx.adapters` (read where its calls are made, `infer.call_model`)."""
    trains = {p.path: not p.frozen for p in ctx.params}   # before any base is frozen: the adapters' state
    for name, prefix in ctx.reachable.items():
        lora: LoraSetting | None = ctx.models[name].get("lora")
        if lora is None:
            continue
        wanted = {k for k, _ in lora.targets}
        found: set[str] = set()
        out: list[ir.ParamIR] = []
        for p in ctx.params:
            if p.path[:len(prefix)] != prefix or p.path[-1].endswith((A_SUFFIX, B_SUFFIX)):
                out.append(p)
                continue
            if p.path[-1] not in wanted:
                out.append(dataclasses.replace(p, frozen=True))   # the base is frozen whole
                continue
            found.add(p.path[-1])
            if any(q.path == p.path[:-1] + (p.path[-1] + A_SUFFIX,) for q in ctx.params):
                ctx.err("E-MODEL-008", _target_node(lora, p.path[-1]).span,
                        f"`:{p.path[-1]}` of `{_owner(ctx, p.path[:-1])}` has adapters already, from the `:lora` of a "
                        "model above or below it", help="give each parameter's adapters in one `:lora`")
                out.append(p)
                continue
            lead = p.shape[:1] if p.layers else ()
            dims = p.shape[len(lead):]
            k = min(in_axes(ctx, p), len(dims) - 1) if len(dims) > 1 else 0
            fan_in, fan_out = math.prod(dims[:k]) if k else 0, math.prod(dims[k:])
            owner = _owner(ctx, p.path[:-1])
            if k == 0 or p.dtype not in ("f32", "bf16", "f16", "f64"):
                ctx.err("E-MODEL-008", _target_node(lora, p.path[-1]).span,
                        f"`:{p.path[-1]}` of `{owner}` is {_typed(p)}: an adapter needs a float matrix (two axes or more)")
                out.append(p)
                continue
            if lora.rank > min(fan_in, fan_out):
                ctx.err("E-MODEL-008", lora.rank_node.span,
                        f"`:rank` {lora.rank} is past the matrix of `:{p.path[-1]}` of `{owner}`, {fan_in} inputs by "
                        f"{fan_out} outputs: a rank is at most {min(fan_in, fan_out)}",
                        help=f"give `:rank` {min(fan_in, fan_out)} or less")
                out.append(p)
                continue
            out.append(dataclasses.replace(p, frozen=True))
            bound = 1.0 / math.sqrt(fan_in)
            key = p.path[-1]
            out.append(ir.ParamIR(p.path[:-1] + (key + A_SUFFIX,), lead + (fan_in, lora.rank), p.dtype,
                                  ("uniform", {"min": -bound, "max": bound}), not trains[p.path],
                                  place_hash((p.place, "lora-a")), p.layers, p.span))
            out.append(ir.ParamIR(p.path[:-1] + (key + B_SUFFIX,), lead + (lora.rank, fan_out), p.dtype,
                                  ("zeros", {}), not trains[p.path], place_hash((p.place, "lora-b")), p.layers,
                                  p.span))
            ctx.adapters.setdefault(owner, {})[key] = (lora.scale, lora.dropout)
            ctx.lora_params.append((p.path, k, lora, name))
        ctx.params[:] = out
        for key, node in lora.targets:
            if key not in found:
                keys = sorted({p.path[-1] for p in ctx.params if p.path[:len(prefix)] == prefix
                               and not p.path[-1].endswith((A_SUFFIX, B_SUFFIX))})
                hint = near_miss(key, keys)
                ctx.err("E-MODEL-008", node.span, f"`:{key}` is no parameter of `{name}` or of a model below it"
                        + (f"; did you mean `:{hint}`?" if hint else ""),
                        help="its parameters: " + " ".join(f":{k}" for k in keys[:16]),
                        data={"replace": ":" + hint} if hint else None)


def low_rank_subscripts(op: str, subscripts: str | None, w_at: int, w_rank: int, x_rank: int,
                        in_axes: int) -> tuple[str, str] | None:
    """The two einsums of an adapter applied unmerged in contraction `op` (`matmul`, or `einsum` of
    `subscripts`) of an input x (rank `x_rank`) and an adapted weight W (rank `w_rank`, operand
    `w_at`, its first `in_axes` axes its input): `(x, A') -> u` and `(u, B') -> out`, A' `[in... r]`
    and B' `[r out...]` being `lora-a` and `lora-b` reshaped to W's axes, so that `out` is
    `x (A B)` reshaped as W, at rank r's cost. None where W's input axes are not all contracted with
    x alone or its output axes are not all the result's (the caller contracts x with `A B` whole).
    Used by the runtime's lowering and by `explain`'s trace alike."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    if op == "matmul":
        if w_at != 1 or w_rank != 2 or x_rank < 1 or in_axes != 1:
            return None
        xs = letters[:x_rank]
        subscripts = f"{xs},{letters[x_rank]}{letters[x_rank + 1]}->{xs[:-1]}{letters[x_rank + 1]}"
        subscripts = subscripts.replace(letters[x_rank], xs[-1], 1)
    if not subscripts or "->" not in subscripts or subscripts.count(",") != 1:
        return None
    ins, out = subscripts.split("->")
    xs, ws = ins.split(",")[::(1 if w_at == 1 else -1)]
    w_in, w_out = ws[:in_axes], ws[in_axes:]
    if (len(set(xs)) != len(xs) or len(set(ws)) != len(ws) or any(c not in xs or c in out for c in w_in)
            or any(c in xs for c in w_out)):
        return None
    r = next(c for c in letters if c not in subscripts)
    kept = "".join(c for c in xs if c not in w_in and c in out)
    return f"{xs},{w_in}{r}->{kept}{r}", f"{kept}{r},{r}{w_out}->{out}"


def call_base(ctx: CheckContext, node: ListNode, name: str, src: str, scope) -> ir.Expr:
    """A call of `(defmodel ref :copy student)` where `student` has `:lora`: `student`'s call (its
    `:apply` or entry, checked as its own) with no adapter applied (`ir.without_adapters`), on its
    frozen base read in place: the reference of a LoRA run is the model before its adapters, as
    TRL's for a PEFT model (the adapters disabled), and it costs no parameter of its own."""
    from .infer import call_model
    e = call_model(ctx, node, src, scope)
    return ir.without_adapters(dataclasses.replace(e, model=name) if isinstance(e, ir.ModelCall) else e)


def _target_node(lora: LoraSetting, key: str) -> Node:
    return next(n for k, n in lora.targets if k == key)


def _owner(ctx: CheckContext, path: tuple[str, ...]) -> str:
    """The model whose parameters are at `path` of the tree."""
    return next((n for n, p in ctx.reachable.items() if p == path), "")


def _typed(p: ir.ParamIR) -> str:
    return "[" + " ".join(map(str, p.shape)) + "] " + p.dtype
