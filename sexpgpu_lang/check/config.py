"""A checkpoint's `config.json` in a run file: `(def NAME (checkpoint-config "dir" :key))` binds one of its
settings, and the values a file states itself are checked against it (every E-CONFIG code).

`config_def` reads the setting (sexpgpu_lang/files/hf_config.py) for a `def`: its
value, and the hover line saying where it came from. E-CONFIG-001: the
config cannot be read; E-CONFIG-002: a field the standard library does not
compute (an unknown `model_type` or `rope_scaling` type, another
activation); E-CONFIG-003: a key `checkpoint-config` does not know, or one
the family has not (GPT-2's `:rope-base`).

`check_stated` runs in every check of a `:pretrained` model read through a
standard-library mapping (plain `lint` too: a config.json is small and read
bounded; only the tensors' headers wait for `read_files`), unless the
headers were read and do not fit: the model's sizes from its parameters'
shapes, and the rotary base, rope scaling and epsilon of the standard
library's blocks it calls, against the config; a difference is
E-CONFIG-004 naming the key, its value and the place, with the fix; the
mapping's refusals (hf_config.refusals) are E-CONFIG-002. Never JAX.
"""
from __future__ import annotations

import math
import os

from .. import ir
from ..diagnostics import Related, warning
from ..files.hf_cache import NotCached, as_written, locate
from ..language import CONFIG_FORM
from ..files.hf_config import (KEYS, MAPPING_FAMILIES, RECORDS, ConfigError, Setting, eos_ids, family, read, refusals,
                         settings)
from ..syntax import Kw, ListNode, Num, Str, Sym, walk
from ..types import ERROR, ShapeType, TensorType, is_int, scalar
from .context import CheckContext, near_miss

#: The form's name.
FORM = CONFIG_FORM


def _base(ctx: CheckContext) -> str:
    return os.path.dirname(os.path.abspath(ctx.src.path)) if not ctx.src.path.startswith("<") else "."


def _shown(ctx: CheckContext, file: str, rel: str) -> str:
    """A config file's path as the run file gives its checkpoint: relative to the run file where that is."""
    return as_written(file, rel, _base(ctx))


def _path_value(ctx: CheckContext, node) -> str | None:
    """A checkpoint's path: a string, or the name of a global `def` of one; None for anything else."""
    if isinstance(node, Str):
        return node.value
    if isinstance(node, Sym):
        b = ctx.globals.names.get(node.name)
        t = getattr(b, "type", None)
        if b is not None and isinstance(getattr(t, "value", None), str):
            if b.definition is not None:
                ctx.facts.uses.append((node.span, b.definition))
            return t.value
    return None


def config_def(ctx: CheckContext, node: ListNode) -> tuple[ir.Expr, str]:
    """`(checkpoint-config "dir" :key)` as a `def`'s value: (the constant, the line hover adds), or an
    ERROR constant after reporting why not."""
    items = node.items
    rel = _path_value(ctx, items[1]) if len(items) == 3 and isinstance(items[2], Kw) else None
    if rel is None:
        ctx.err("E-FORM-002", node.span, f"`{FORM}` takes a checkpoint's path (a string, or a `def` of one) and a "
                f"key: `({FORM} \"checkpoints/llama\" :layers)`")
        return ir.Const(ERROR, node.span), ""
    key = items[2]
    if key.name not in KEYS:
        hint = near_miss(key.name, KEYS)
        ctx.err("E-CONFIG-003", key.span, f"`{FORM}` has no key `:{key.name}`; it reads "
                + ", ".join(f"`:{k}`" for k in KEYS) + (f"; did you mean `:{hint}`?" if hint else ""),
                data={"replace": f":{hint}"} if hint else None)
        return ir.Const(ERROR, node.span), ""
    try:
        file, config = read(locate(rel, _base(ctx)))
    except (ConfigError, NotCached) as e:
        why = (f"cannot read the config of `{rel}`, `{_shown(ctx, e.file, rel)}`: {e}" if isinstance(e, ConfigError)
               else f"cannot read the config of `{rel}`: {e}")
        key = ("read", e.file, str(e)) if isinstance(e, ConfigError) else ("id", rel)
        if key not in ctx.refused_configs:   # one cause, said once: at the first `def` reading it
            ctx.refused_configs.add(key)
            ctx.err("E-CONFIG-001", items[1].span, why,
                    help="point at the checkpoint's directory, which holds the `config.json` that `save_pretrained` "
                         "writes (the path is relative to the run file), or at a model id in the local Hugging Face "
                         "cache (`\"org/name\"`)")
        return ir.Const(ERROR, node.span), ""
    shown = _shown(ctx, file, rel)
    try:
        got = settings(config)
    except ConfigError as e:
        if (file, str(e)) not in ctx.refused_configs:   # one cause, said once: at the first `def` reading it
            ctx.refused_configs.add((file, str(e)))
            ctx.err("E-CONFIG-002", items[1].span, f"`{shown}`: {e}",
                    help="point at a GPT-2, Llama, Mistral, Qwen2, Qwen3 or OLMo 2 checkpoint, or state the values "
                         "with `def`"
                    if "none of that family's sizes" not in str(e) else "fix `model_type` in the config.json")
        return ir.Const(ERROR, node.span), ""
    s = got.get(key.name) if key.name != "eos" else eos_ids(file, config)
    if s is None:
        ctx.err("E-CONFIG-003", key.span, f"`{shown}` is a {config.get('model_type')} config, which has no "
                f"`:{key.name}` ({KEYS[key.name]})", help="remove this `def`; that family has no such setting")
        return ir.Const(ERROR, node.span), ""
    if isinstance(s, ConfigError):
        if (file, str(s)) not in ctx.refused_configs:   # (`rope_scaling` of an unknown type: four keys, one cause)
            ctx.refused_configs.add((file, str(s)))
            held = _shown(ctx, s.file, rel) if s.file else shown   # (the file that holds it: generation_config.json's)
            ctx.err("E-CONFIG-002", items[1].span, f"`{held}`: {s}",
                    help="fix the config, or state the value with `def`")
        return ir.Const(ERROR, node.span), ""
    v = s.value
    if isinstance(v, tuple):   # the end-of-sequence ids: a vector, as `[2 7]` is (`(stack eos)` makes it a tensor)
        return ir.Const(ShapeType(v), node.span, v), f"from {shown}: `{s.key}` {s.text}"
    t = scalar("bool", v) if isinstance(v, bool) else scalar("i32" if isinstance(v, int) else "f32", v, weak=True)
    return ir.Const(t, node.span, v), f"from {shown}: `{s.key}` {s.text}"


def model_config(ctx: CheckContext, model: str, rel: str, where) -> tuple | None:
    """What the one form `(defmodel MODEL :pretrained REL)` is made from (check/one_form.py): (the
    config's path as shown, the config, its family's record, its settings, the family's mapping
    for its output), or None after reporting at `where` why not: E-CONFIG-001 for a config that
    cannot be read (no `config.json` in the directory), E-CONFIG-002 for a `model_type` of no
    family, a setting that cannot be read, or a refusal (hf_config.refusals), all causes in one."""
    try:
        file, config = read(locate(rel, _base(ctx)))
    except NotCached as e:
        if ("id", rel) in ctx.refused_configs:   # said at a `checkpoint-config` of the same id: one cause, once
            return None
        ctx.refused_configs.add(("id", rel))
        ctx.err("E-CONFIG-001", where.span, f"`{model}` is made from the config of `{rel}`: {e}",
                help="point at the checkpoint's directory, which holds the `config.json` that `save_pretrained` "
                     "writes (the path is relative to the run file), or at a model id in the local Hugging Face "
                     "cache (`\"org/name\"`)")
        return None
    except ConfigError as e:
        if ("read", e.file, str(e)) in ctx.refused_configs:
            return None
        ctx.refused_configs.add(("read", e.file, str(e)))
        ctx.err("E-CONFIG-001", where.span, f"`{model}` is made from the config of `{rel}`, and "
                f"`{_shown(ctx, e.file, rel)}` cannot be read: {e}",
                help="point at the checkpoint's directory, which holds the `config.json` that `save_pretrained` "
                     "writes (the path is relative to the run file)")
        return None
    shown = _shown(ctx, file, rel)
    try:
        fam = family(config)
        got = settings(config)
    except ConfigError as e:
        ctx.err("E-CONFIG-002", where.span, f"`{shown}`: {e}",
                help="point at a checkpoint of a family the standard library reads ("
                     + ", ".join(f.title for f in RECORDS.values()) + "), or write the model out")
        return None
    mapping = fam.mapping(bool(got["tied"].value))
    why = [str(e) for e in got.values() if isinstance(e, ConfigError)] + refusals(config, mapping)
    if mapping is None:
        why.append(f"`tie_word_embeddings` is {got['tied'].text}, and the standard library has no "
                   f"{'tied' if got['tied'].value else 'untied'} {fam.title} mapping")
    if why:
        # a cause a `checkpoint-config` of the same file said already (`:kv-heads`) is not said again
        new = [w for w in dict.fromkeys(why) if (file, w) not in ctx.refused_configs]
        ctx.refused_configs.update((file, w) for w in new)
        if not new:
            return None
        ctx.err("E-CONFIG-002", where.span, f"`{shown}`: " + "; ".join(new),
                help="fix the checkpoint's `config.json`, or write the model out (docs/checkpoints.md)")
        return None
    return shown, config, fam, got, mapping


# --------------------------------------------------------------------------- stated values


#: Where each standard-library call that fixes or takes a setting has it: a constant the call fixes
#: (`("const", value)`), or the index of the call's item that holds it. Keys: `eps`, `rope-base`,
#: `inv-freq` (a `rope-inv-freq` call, or none for a fixed base without scaling).
_CALLS: dict[str, dict[str, object]] = {
    "layer-norm": {"eps": ("const", 1e-5)},
    "mlp": {},
    "gpt2-block": {"eps": ("const", 1e-5)},
    "transformer-block": {"eps": ("const", 1e-5)},
    "transformer-block-cached": {"eps": ("const", 1e-5)},
    "layer-norm-eps": {"eps": 4},
    "gpt2-block-eps": {"eps": 2},
    "gpt2-block-cached": {"eps": 5},
    "rms-norm": {"eps": ("const", 1e-6)},
    "rms-norm-eps": {"eps": 3},
    "rotary": {"rope-base": 3, "inv-freq": None},
    "llama-block": {"eps": ("const", 1e-6), "rope-base": ("const", 10000), "inv-freq": None},
    "llama-block-cached": {"eps": ("const", 1e-6), "rope-base": ("const", 10000), "inv-freq": None},
    "rotary-freq": {"inv-freq": 3},
    "llama-block-freq": {"inv-freq": 3, "eps": 4},
    "llama-block-freq-cached": {"inv-freq": 5, "eps": 6},
    "qwen2-block": {"inv-freq": 3, "eps": 4},
    "qwen2-block-cached": {"inv-freq": 5, "eps": 6},
    "qwen3-block": {"inv-freq": 3, "eps": 4},
    "qwen3-block-cached": {"inv-freq": 5, "eps": 6},
    "rms-norm-heads": {"eps": 3},
    "olmo2-block": {"inv-freq": 3, "eps": 4},
    "olmo2-block-cached": {"inv-freq": 5, "eps": 6},
}
#: `rope-inv-freq`'s arguments after the head width, as config keys.
_ROPE_ARGS = ("rope-base", "rope-factor", "rope-low-freq-factor", "rope-high-freq-factor", "rope-original-positions")


def _constant(ctx: CheckContext, node, folded: bool = True):
    """The number `node` is when the file is checked: a literal, a global `def`'s constant, or (`folded`)
    what the checker folded at the node (a `let*`-bound name, arithmetic of constants: `(* 2 5e5)`); else
    None (not known until the run: a function's argument, a traced value). Not `folded` in a function's
    body, which the checker folds anew at each call: what it holds there is the last call's."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Sym):
        b = ctx.globals.names.get(node.name)
        if b is not None and isinstance(b.ir, ir.Const) and isinstance(b.ir.value, (int, float)) \
                and not isinstance(b.ir.value, bool):
            return b.ir.value
    t = ctx.facts.types.get((node.span.start, node.span.end)) if node is not None and folded else None
    if isinstance(t, TensorType) and t.shape == () and isinstance(t.value, (int, float)) \
            and not isinstance(t.value, bool):
        return t.value
    return None


def _let_bound(lam: ListNode) -> dict[str, list]:
    """Each name a `let*` inside `lam` binds, with the expressions bound to it (several where it is
    bound more than once: then none is taken as its value)."""
    out: dict[str, list] = {}
    for n in walk(lam):
        if isinstance(n, ListNode) and n.head == "let*" and len(n.items) > 1 and isinstance(n.items[1], ListNode):
            for b in n.items[1].items:
                if isinstance(b, ListNode) and len(b.items) == 2 and isinstance(b.items[0], Sym):
                    out.setdefault(b.items[0].name, []).append(b.items[1])
    return out


def _freq_call(arg, bound: dict[str, list]):
    """The `(rope-inv-freq ...)` call that gives a block's frequencies `arg`: written in place, or bound
    once to the name `arg` by a `let*` of the same lambda (followed through names bound to names); else None."""
    seen = set()
    while isinstance(arg, Sym) and arg.name not in seen and len(bound.get(arg.name, ())) == 1:
        seen.add(arg.name)
        arg = bound[arg.name][0]
    if isinstance(arg, ListNode) and arg.head == "rope-inv-freq" and len(arg.items) == 7:
        return arg
    return None


def _same(a, b) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


def _applies(ctx: CheckContext, prefix: tuple[str, ...]) -> list[ListNode]:
    """The `:apply` lambdas (and entries) of the models reachable below `prefix`: the pretrained model's."""
    out = []
    for name, path in ctx.reachable.items():
        if path[:len(prefix)] == prefix:
            m = ctx.models[name]
            if m["apply"] is not None:
                out.append(m["apply"])
            for entry in m.get("entries", {}).values():
                lam = entry[0] if isinstance(entry, tuple) else entry
                if isinstance(lam, ListNode):
                    out.append(lam)
    return out


def _bodies(ctx: CheckContext, prefix: tuple[str, ...]) -> list[tuple[ListNode, str | None]]:
    """The lambdas whose standard-library calls make the pretrained model at `prefix`: its (and its
    sub-models') `:apply` and entries (None), and the bodies of the functions of the file's own
    (`(def NAME (lambda ...))`) they call, directly or through each other (the function's name)."""
    functions = {}
    for f in ctx.forms.get("def", []):
        if len(f.items) == 3 and isinstance(f.items[1], Sym) and isinstance(f.items[2], ListNode) \
                and f.items[2].head == "lambda":
            functions.setdefault(f.items[1].name, f.items[2])
    out: list[tuple[ListNode, str | None]] = [(lam, None) for lam in _applies(ctx, prefix)]
    seen: set[str] = set()
    i = 0
    while i < len(out):
        for n in walk(out[i][0]):
            if isinstance(n, ListNode) and n.head in functions and n.head not in seen:
                seen.add(n.head)
                out.append((functions[n.head], n.head))
        i += 1
    return out


def _num(v) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


def _longest_sequence(ctx: CheckContext) -> int | None:
    """The longest row the file's loaders give: the largest last axis of a field of rank 1 or more
    (`:row [seq] :i32`), or None when no loader has one. A model reads at most that many positions,
    one fewer where the row's last token is only a target (the usual next-token row)."""
    lengths = [shape[-1] for loader in ctx.loaders.values() for _, shape, _ in loader.fields if shape]
    return max(lengths) if lengths else None


def compare_configs(ctx: CheckContext, gen: ir.GenerateIR | None) -> None:
    """`check_stated` for each `:pretrained` model that check/pretrained.py found read through a
    standard-library mapping, once the phases are checked: the values the models' bodies compute are
    folded then (`ctx.facts.types`), and the generator's trips are known (`gen`)."""
    for name, prefix, mapping, rel, full, node in ctx.stated_configs:
        check_stated(ctx, name, prefix, mapping, rel, full, node, gen)


def _generated_positions(ctx: CheckContext, gen: ir.GenerateIR | None, prefix: tuple[str, ...]) -> tuple[int, str] | None:
    """(the most positions the generator makes, the words saying how) where `defgenerate` runs the model at
    `prefix` (it names that model, or one holding it but the root): the longest row of token ids its state holds (an
    integer entry [batch positions]), or where it holds none (a cache and the last token), a position a
    trip (its `:trips`). None else."""
    if gen is None or not gen.trips:
        return None
    # (the root model holds every model, and often never calls the teacher it holds: it counts, as `model`,
    # only where it is the pretrained model itself)
    holders = {name for name, path in ctx.reachable.items() if prefix[:len(path)] == path and (path or not prefix)}
    if prefix == ():
        holders.add("model")
    if not any(isinstance(n, Sym) and n.name in holders for f in ctx.forms.get("defgenerate", []) for n in walk(f)):
        return None
    rows = [(t.shape[-1], k) for k, t in gen.state.entries
            if isinstance(t, TensorType) and t.rank >= 2 and is_int(t.dtype)]
    if rows:   # (the trips write into the rows: they cannot pass their positions)
        n, key = max(rows)
        return n, f"makes rows of {n} positions (`:{key}`, {gen.trips} trips)"
    return gen.trips, f"runs {gen.trips} trips, a position each"


def check_stated(ctx: CheckContext, model: str, prefix: tuple[str, ...], mapping: str, rel: str, full: str,
                 node, gen: ir.GenerateIR | None = None) -> None:
    """Compare a `:pretrained` model read through the standard-library `mapping` with its checkpoint's
    `config.json`, where there is one (a checkpoint without a config is not compared): the refusals
    (E-CONFIG-002), the sizes its parameters have, and the settings its standard-library calls fix or
    are given (E-CONFIG-004)."""
    try:
        file, config = read(full)
    except ConfigError as e:
        if not str(e).startswith("no such file") and ("read", e.file, str(e)) not in ctx.refused_configs:
            ctx.err("E-CONFIG-001", node.span, f"cannot read the config of `{rel}`, `{_shown(ctx, e.file, rel)}`: {e}",
                    help="fix or remove the checkpoint's `config.json`")
        return
    shown = _shown(ctx, file, rel)
    refused = refusals(config, mapping)
    if refused and all((file, r) in ctx.refused_configs for r in refused):
        return   # said at the `checkpoint-config` that read it first: one cause, once
    if refused:
        ctx.err("E-CONFIG-002", node.span, f"`{shown}`: " + "; ".join(refused),
                help="load a checkpoint the mapping is for, or write the model and its mapping yourself")
        return
    window, longest = config.get("sliding_window"), _longest_sequence(ctx)
    generated = _generated_positions(ctx, gen, prefix)
    if config.get("model_type") == "mistral" and isinstance(window, int) and not isinstance(window, bool):
        if longest is not None and longest - 1 > window:
            ctx.err("E-CONFIG-002", node.span, f"`{shown}`: `sliding_window` is {window}, and this file's loaders "
                    f"give rows of {longest} tokens; the standard library's attention is the full causal one, which "
                    "is Mistral's only up to the window",
                    help=f"cut the rows to at most {window + 1} tokens (`:seq`: the model reads {window}, the last is "
                         "a target), or write windowed attention yourself")
            return
        if generated is not None and generated[0] > window:
            ctx.err("E-CONFIG-002", node.span, f"`{shown}`: `sliding_window` is {window}, and the generator "
                    f"{generated[1]}, which `{model}` reads; the standard library's attention is the full causal "
                    "one, which is Mistral's only up to the window",
                    help=f"generate at most {window} positions (fewer `:trips`, shorter rows), or write windowed "
                         "attention yourself")
            return
    got = settings(config)
    most = got.get("positions")
    if isinstance(most, Setting) and most.key == "max_position_embeddings":
        past = [(n, f"this file's loaders give rows of {longest} tokens (the model reads {n})")
                for n in ([longest - 1] if longest is not None else []) if n > most.value]
        past += [g for g in ([generated] if generated is not None else []) if g[0] > most.value]
        if past:
            n, words = max(past)
            ctx.report(warning("W-CONFIG-002", node.span,
                               f"`{shown}` has `max_position_embeddings` {most.value}, and "
                               + (words if words.startswith("this file") else f"the generator {words}")
                               + f": `{model}` reads {n} positions, past the {most.value} it was trained on",
                               help=f"keep the rows to {most.value} positions, or use a checkpoint trained on "
                                    "longer sequences"))
    unread = [str(e) for e in got.values() if isinstance(e, ConfigError)]
    if unread:
        ctx.err("E-CONFIG-002", node.span, f"`{shown}`: " + "; ".join(unread),
                help="fix the checkpoint's `config.json`: its sizes and settings are what the model is read with")
        return
    sizes = _sizes(ctx, prefix, mapping)
    for key, (value, where, pdef) in sizes.items():
        s = got.get(key)
        if isinstance(s, Setting) and value != s.value:
            ctx.err("E-CONFIG-004", pdef.span if pdef is not None else node.span,
                    f"`{shown}` has `{s.key}` {s.text}, and {where} of `{model}` makes it {value}",
                    help=f"make it {s.value}, or bind it: `(def NAME ({FORM} \"{rel}\" :{key}))`",
                    related=[Related(node.span, "the checkpoint is read here")])
    for lam, via in _bodies(ctx, prefix):
        bound = _let_bound(lam)
        for call in walk(lam):
            if isinstance(call, ListNode) and isinstance(call.head, str) and call.head in _CALLS \
                    and ctx.globals.names.get(call.head) is None:
                _check_call(ctx, call, got, shown, rel, node, bound, via)


def _sizes(ctx: CheckContext, prefix: tuple[str, ...], mapping: str) -> dict:
    """Each size key -> (the value the model's parameters make, the parameter that shows it, its
    definition or None)."""
    params = {".".join(p.path[len(prefix):]): p for p in ctx.params if p.path[:len(prefix)] == prefix}
    # each parameter's own `:params` entry (by its value's range: two models may both have a `:wq`)
    by_value = {d.form_span: d for d in ctx.facts.definitions if d.kind == "param"}
    owner = next((n for n, path in ctx.reachable.items() if tuple(path) == tuple(prefix)), None)

    def at(rel, axis, key, out):
        p = params.get(rel)
        if p is None:
            return
        shape = p.shape[1:] if p.layers else p.shape
        if -len(shape) <= axis < len(shape):
            out[key] = (shape[axis], f"parameter `{rel}` [{' '.join(map(str, p.shape))}]", by_value.get(p.span))

    fam = MAPPING_FAMILIES[mapping][0]
    out: dict = {}
    for rel, axis, key in fam.params:
        at(rel, axis, key, out)
    p = next((params.get(rel) for rel, _, _ in fam.params if rel.startswith(fam.stack + ".")), None)
    if p is not None and p.layers:
        rep = ctx.models.get(owner, {}).get("repeats", {}).get(fam.stack) if owner is not None else None
        out["layers"] = (p.layers, f"the `repeat` of `{fam.stack}`", by_value.get(rep[2].span) if rep else None)
    return out


#: What each setting a call takes is, in a W-CONFIG-001 message.
_WORDS = {"eps": "the epsilon", "rope-base": "the rotary base", "rope-factor": "the rope scaling factor",
          "rope-low-freq-factor": "the low-frequency factor", "rope-high-freq-factor": "the high-frequency factor",
          "rope-original-positions": "the original positions", "inv-freq": "the rotary frequencies"}


def _check_call(ctx: CheckContext, call: ListNode, got: dict, shown: str, rel: str, node,
                bound: dict[str, list] | None = None, via: str | None = None) -> None:
    """E-CONFIG-004 (one per call, every difference named) for the settings a standard-library call fixes
    or is given that differ from the config's; W-CONFIG-001 (one per call) naming each setting it is
    given whose value is not known when the file is checked, so that it cannot be compared. `bound`:
    the names the enclosing lambda's `let*`s bind (a `rope-inv-freq` bound to a name is followed); `via`:
    the function of the file's own whose body holds the call (only literals and `def`s are known there)."""
    spec = _CALLS[call.head]
    folded = via is None
    found: list[tuple[str, str, object, str]] = []   # (config key, its text, the value used, the fix)
    unknown: list[tuple[str, object, list[str]]] = []   # (the setting, the node giving it, the config keys)
    edits: list[tuple[int, int, str]] = []   # the quick fix: each differing setting given the config's value

    def differs(key, value, where, fix) -> bool:
        s = got.get(key)
        if isinstance(s, Setting) and value is None:
            unknown.append((key, where, [f"`{s.key}`"]))
        elif isinstance(s, Setting) and not _same(value, s.value):
            found.append((f"`{s.key}` {s.text}", _num(value), where, fix(s)))
            edit = _config_edit(ctx, where, key, s, rel, bound or {})
            if edit is not None:
                edits.append(edit)
            return True
        return False

    def bind(key):
        return f"bind it with `(def NAME ({FORM} \"{rel}\" :{key}))`"

    eps = spec.get("eps")
    if isinstance(eps, tuple):
        differs("eps", eps[1], call, lambda s: f"call `{_with_eps(call.head)}`, which takes the epsilon "
                f"({_num(s.value)})")
    elif isinstance(eps, int) and eps < len(call.items):
        differs("eps", _constant(ctx, call.items[eps], folded), call.items[eps],
                lambda s: f"make it {_num(s.value)}, or {bind('eps')}")
    if "inv-freq" in spec:
        base = spec.get("rope-base")
        if base is not None or spec["inv-freq"] is None:   # a fixed base, no scaling
            fix = (f"call `{_with_freq(call.head)}` with `(rope-inv-freq head-width ...)`, which takes the base "
                   "and the scaling")
            if isinstance(base, tuple):
                differs("rope-base", base[1], call, lambda s: fix)
            elif isinstance(base, int) and base < len(call.items):
                differs("rope-base", _constant(ctx, call.items[base], folded), call.items[base], lambda s: fix)
            f = got.get("rope-factor")
            if isinstance(f, Setting) and not _same(f.value, 1.0):
                found.append((f"`{f.key.split('.')[0]}` with `factor` {f.text}", "no scaling", call, fix))
        elif spec["inv-freq"] < len(call.items):
            arg = call.items[spec["inv-freq"]]
            freq = _freq_call(arg, bound or {})
            if freq is not None:
                for key, a in zip(_ROPE_ARGS, freq.items[2:]):
                    differs(key, _constant(ctx, a, folded), a,
                            lambda s, k=key: f"make it {_num(s.value)}, or {bind(k)}")
            else:
                keys = [f"`{got[k].key.split('.')[0]}`" for k in ("rope-base", "rope-factor")
                        if isinstance(got.get(k), Setting)]
                if keys:
                    unknown.append(("inv-freq", arg, list(dict.fromkeys(keys))))
    if unknown:
        _uncompared(ctx, call, unknown, shown, rel, node, via)
    if not found:
        return
    where = found[0][2] if len(found) == 1 else call
    fixes = list(dict.fromkeys(f for _, _, _, f in found))
    help_ = "; ".join(fixes) + (f" (or bind each setting with `{FORM}`)" if "bind" not in fixes[0] else "")
    if call.head in ("llama-block", "llama-block-cached"):
        vals = [got.get(k) for k in ("eps",) + _ROPE_ARGS]
        if all(isinstance(v, Setting) for v in vals):
            eps_, *rope_ = (_num(v.value) for v in vals)
            cache = " pos k-cache v-cache" if call.head.endswith("cached") else " positions"
            help_ = (f"call `({_with_freq(call.head)} x{cache} (rope-inv-freq head-width {' '.join(rope_)}) {eps_} "
                     f"attn-norm ...)`, or bind each setting with `{FORM}`")
    ctx.err("E-CONFIG-004", where.span, f"`{shown}` has {_listed([k for k, _, _, _ in found])}, and `{call.head}` "
            f"here uses {_listed([u for _, u, _, _ in found])}", help=help_,
            related=[Related(node.span, "the checkpoint is read here")],
            data={"config_edits": list(dict.fromkeys(edits))} if edits else None)


def _config_edit(ctx: CheckContext, where, key: str, s: Setting, rel: str, bound: dict) -> tuple | None:
    """E-CONFIG-004's quick fix for one setting: a number written at the call becomes the config's
    value; a name of a top-level `def` whose value is a number is bound with `checkpoint-config`
    instead. (start, end, new text), or None where the fix is not mechanical (a `let*` name, an
    expression, a function's argument)."""
    if isinstance(where, Num):
        return (where.span.start, where.span.end, _num(s.value))
    if isinstance(where, Sym) and where.name not in bound:
        for f in ctx.forms.get("def", []):
            if len(f.items) == 3 and isinstance(f.items[1], Sym) and f.items[1].name == where.name \
                    and isinstance(f.items[2], Num):
                value = f.items[2]
                return (value.span.start, value.span.end, f'({FORM} "{rel}" :{key})')
    return None


def _uncompared(ctx: CheckContext, call: ListNode, unknown: list, shown: str, rel: str, node,
                via: str | None = None) -> None:
    """W-CONFIG-001: the settings a standard-library call is given whose values the checker cannot know
    (a function's argument, a traced value, frequencies not from a `rope-inv-freq` in the same lambda),
    named with the config keys they are not compared with."""
    def text(n) -> str:
        t = " ".join(ctx.src.text[n.span.start:n.span.end].split())
        return t if len(t) <= 60 else t[:57] + "..."

    what = _listed([f"{_WORDS[k]} `{text(n)}`" for k, n, _ in unknown])
    keys = list(dict.fromkeys(k for _, _, ks in unknown for k in ks))
    ctx.report(warning("W-CONFIG-001", unknown[0][1].span,
                       f"`{call.head}` here takes {what}, which the checker cannot know "
                       + (f"in the body of the function `{via}` (each call may give another)" if via else
                          "before the run") + ", so "
                       f"{_listed(keys)} of `{shown}` {'is' if len(keys) == 1 else 'are'} not compared with "
                       f"{'it' if len(unknown) == 1 else 'them'}",
                       help=_uncompared_help(unknown, rel),
                       related=[Related(node.span, "the checkpoint is read here")]))


def _uncompared_help(unknown: list, rel: str) -> str:
    """How to give each setting of `unknown` so that it is compared: the settings as numbers or bound from
    the config, the frequencies as a `rope-inv-freq` in the same lambda."""
    keys = [k for k, _, _ in unknown if k != "inv-freq"]
    out = []
    if keys:
        out.append("give " + ("it" if len(keys) == 1 else "them") + " as a number, a `def` or a `let*` of numbers, "
                   "or bind " + ("it" if len(keys) == 1 else "each") + " from the config: "
                   + ", ".join(f"`(def {k} ({FORM} \"{rel}\" :{k}))`" for k in keys))
    if len(keys) < len(unknown):
        out.append("write the frequencies as `(rope-inv-freq head-width base factor low high original)` in the "
                   "call or in a `let*` of the same lambda")
    return "; ".join(out)


def _listed(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _with_eps(head: str) -> str:
    return {"layer-norm": "layer-norm-eps", "gpt2-block": "gpt2-block-eps", "rms-norm": "rms-norm-eps",
            "llama-block": "llama-block-freq", "llama-block-cached": "llama-block-freq-cached",
            "transformer-block": "layer-norm-eps"}.get(head, head)


def _with_freq(head: str) -> str:
    return {"rotary": "rotary-freq", "llama-block": "llama-block-freq",
            "llama-block-cached": "llama-block-freq-cached"}.get(head, head)


def stated_settings(ctx: CheckContext, prefix: tuple[str, ...] = ()) -> tuple[tuple[str, object], ...]:
    """The settings the standard-library calls of the models below `prefix` fix or are given as
    constants (`eps`, `rope-base`, and `rope-inv-freq`'s scaling numbers), the first found for each
    key: what an export's config.json says for a model trained from scratch."""
    out: dict[str, object] = {}
    for lam in _applies(ctx, prefix):
        bound = _let_bound(lam)
        for call in walk(lam):
            if not (isinstance(call, ListNode) and isinstance(call.head, str) and call.head in _CALLS
                    and ctx.globals.names.get(call.head) is None):
                continue
            spec = _CALLS[call.head]
            for key in ("eps", "rope-base"):
                where = spec.get(key)
                value = where[1] if isinstance(where, tuple) else (
                    _constant(ctx, call.items[where]) if isinstance(where, int) and where < len(call.items) else None)
                if value is not None:
                    out.setdefault(key, value)
            if "inv-freq" in spec and spec["inv-freq"] is None:
                out.setdefault("rope-factor", 1.0)
            idx = spec.get("inv-freq")
            arg = _freq_call(call.items[idx], bound) if isinstance(idx, int) and idx < len(call.items) else None
            if arg is not None:
                for key, a in zip(_ROPE_ARGS, arg.items[2:]):
                    v = _constant(ctx, a)
                    if v is not None:
                        out.setdefault(key, v)
    return tuple(out.items())
