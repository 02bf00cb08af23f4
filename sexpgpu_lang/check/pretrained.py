"""`:pretrained`: where a model's weights come from, how the checkpoint's names map to its parameters, and the
comparison of the checkpoint's headers with `:params` after the mapping.

`:pretrained` takes a file name, or a plist (docs/checkpoints.md):
`(:path "gpt2-dir" :names :gpt2 :file-dtype :bf16)`: `:path` a
safetensors file, a Hugging Face directory or its index
(checkpoint_files.py); `:names` a standard-library mapping (`:gpt2`,
`:llama`: hf_names.sx) or a mapping written in place (name_mapping.py);
`:file-dtype` the dtype the file's tensors hold, cast on load to each
parameter's declared dtype. Without `:names`, each parameter is the
tensor named by its path below the model joined with `.`.

The mapping is checked like any form (E-MODEL-006: an entry naming no
parameter, a parameter without an entry, a `{i}` on a parameter no
`repeat` stacks, an op whose axes do not fit the parameter). With
`read_files`, the headers are compared too (E-MODEL-003, one diagnostic
listing every tensor that differs, naming the tensor and the parameter;
W-MODEL-001 for tensors nothing reads); with `read_files` `LOCAL` (the
language server) only where the checkpoint is on this machine. The
checkpoint's `config.json` is compared with the model in every check
(check/config.py). A model id names a checkpoint in the local Hugging Face
cache (hf_cache.py). Never JAX.
"""
from __future__ import annotations

import errno
import os

from .. import ir
from ..diagnostics import warning
from ..files.hf_cache import NotCached, as_written, locate
from ..name_mapping import LAYER, MappingError, layer_name, leaf, parse_names, patterned, source_shape, stdlib_names
from ..syntax import Kw, ListNode, Str
from ..types import DTYPES
from .context import CheckContext, near_miss
from .keywords import const_value
from .facts import Checkpoint

#: `read_files` for the language server: the headers of the checkpoints that are on this machine are
#: read (each once until its file changes: checkpoint_files.py), a path that is not here is not reported.
LOCAL = "local"
#: The keywords of `:pretrained`'s plist.
PRETRAINED_KEYS = ("path", "names", "file-dtype")


def _shape(dims) -> str:
    return "[" + " ".join(map(str, dims)) + "]"


def read_spec(ctx: CheckContext, node) -> tuple[str, dict | None, str, str | None] | None:
    """`:pretrained`'s value: (path as written, mapping or None, the mapping's name for messages,
    `:file-dtype` or None), or None after reporting why not."""
    if not (isinstance(node, ListNode) and node.items and isinstance(node.items[0], Kw)):
        rel = const_value(ctx, node)
        if not isinstance(rel, str):
            ctx.err("E-FORM-002", node.span, "`:pretrained` takes a file name string, or "
                    "`(:path \"dir\" :names :gpt2 :file-dtype :bf16)`")
            return None
        return rel, None, "", None
    items, kws = node.items, {}
    for i in range(0, len(items), 2):
        k = items[i]
        if not isinstance(k, Kw) or k.name not in PRETRAINED_KEYS or i + 1 >= len(items):
            hint = near_miss(k.name, PRETRAINED_KEYS) if isinstance(k, Kw) else None
            ctx.err("E-FORM-002", k.span, "`:pretrained` takes " + ", ".join(f"`:{a}`" for a in PRETRAINED_KEYS)
                    + (f"; did you mean `:{hint}`?" if hint else ""))
            return None
        kws[k.name] = items[i + 1]
    path = kws.get("path")
    rel = path.value if isinstance(path, Str) else const_value(ctx, path) if path is not None else None
    if not isinstance(rel, str):
        if path is None or rel is not None:
            ctx.err("E-FORM-002", node.span, "`:pretrained` needs `:path \"file, directory or index\"` (a string, "
                    "or a `def` of one)")
        return None
    dtype = kws.get("file-dtype")
    if dtype is not None and not (isinstance(dtype, Kw) and dtype.name in DTYPES):
        ctx.err("E-TYPE-002", dtype.span, "`:file-dtype` must be a dtype keyword like `:bf16`")
        return None
    names, label = None, ""
    given = kws.get("names")
    if isinstance(given, Kw):
        names, label = stdlib_names().get(given.name), f"the mapping `{given.name}`"
        if names is None:
            hint = near_miss(given.name, stdlib_names())
            ctx.err("E-MODEL-006", given.span, f"no standard-library mapping `{given.name}`; they are "
                    + ", ".join(f"`:{n}`" for n in stdlib_names()) + (f"; did you mean `:{hint}`?" if hint else ""),
                    data={"replace": f":{hint}"} if hint else None)
            return None
    elif isinstance(given, ListNode):
        def report(n, msg, help_):
            ctx.err("E-MODEL-006", n.span, msg, help=help_ or None)
        names, label = parse_names(given, 0, report), "`:names`"
        if names is None:
            return None
    elif given is not None:
        ctx.err("E-MODEL-006", given.span, "`:names` is a standard-library mapping (`:gpt2`, `:llama`) or a plist "
                "`(:param \"tensor name\" ...)`")
        return None
    return rel, names, label, dtype.name if dtype is not None else None


def plan(ctx: CheckContext, name: str, prefix: tuple[str, ...], names: dict | None, label: str, node):
    """Each parameter below `prefix` with its source and the file tensors it reads:
    [(param, relative path, source, [(tensor name, expected shape)])], or None after E-MODEL-006, or None
    unreported where a parameter below `prefix` did not check (reported where it is written: the
    mapping names it, but its shape is not known)."""
    rels = {".".join(p.path[len(prefix):]): p for p in own_params(ctx, prefix)}
    problems = []
    unknown = _unknown(ctx, prefix)
    if names is not None:
        for key in names:
            if key not in rels and not any(u == "" or key == u or key.startswith(u + ".") for u in unknown):
                # (a key of a parameter that did not check, reported where it is written, is no mistake here)
                hint = near_miss(key, rels)
                problems.append(f"{label} maps `{key}`, which is not a parameter of `{name}`"
                                + (f" (did you mean `{hint}`?)" if hint else ""))
    out = []
    for rel, p in rels.items():
        src = ("tensor", rel) if names is None else names.get(rel)
        if src is None:
            problems.append(f"parameter `{rel}` {_shape(p.shape)} of `{name}` has no entry in {label}")
            continue
        per_layer = patterned(src)
        if per_layer and not p.layers:
            problems.append(f"`{leaf(src)[1]}` has `{LAYER}` but parameter `{rel}` of `{name}` is not stacked by a "
                            "`repeat`")
            continue
        try:
            want = source_shape(src, p.shape[1:] if per_layer else p.shape)
        except MappingError as e:
            problems.append(f"parameter `{rel}` {_shape(p.shape)}: {e}")
            continue
        pattern = leaf(src)[1]
        reads = [(layer_name(pattern, i), want) for i in range(p.layers)] if per_layer else [(pattern, want)]
        out.append((p, rel, src, reads))
    if unknown and not problems:
        return None
    if problems:
        ctx.err("E-MODEL-006", node.span, f"the `:pretrained` mapping of `{name}` does not fit its `:params`: "
                + "; ".join(problems), help="map every parameter once, by the path below the model (`:h.wq`)")
        return None
    return out


def _unknown(ctx: CheckContext, prefix: tuple[str, ...]) -> list[str]:
    """The parameter paths below `prefix` (joined with `.`; "" for all) that did not check, reported
    where they are written: a failed parameter, or every parameter of a model whose `:params` failed."""
    out = []
    for model, path in ctx.reachable.items():
        if path[:len(prefix)] != prefix:
            continue
        m, rel = ctx.models[model], ".".join(path[len(prefix):])
        if not m["params_known"]:
            out.append(rel)
        out += [f"{rel}.{k}" if rel else k for k in m["failed"]]
    return out


def own_params(ctx: CheckContext, prefix: tuple[str, ...]) -> list:
    """The parameters the checkpoint of the `:pretrained` model at `prefix` holds: those below it but
    for a sub-model's that has a `:pretrained` of its own (read from that checkpoint), and a `:copy`
    model's (the root's checkpoint fills the copy's source; the runtime copies it)."""
    inner = [path for model, path in ctx.reachable.items() if len(path) > len(prefix)
             and path[:len(prefix)] == prefix and ctx.models[model]["pretrained"] is not None]
    return [p for p in ctx.params if p.path[:len(prefix)] == prefix and p.copy_of is None
            and not any(p.path[:len(path)] == path for path in inner)]


def check_pretrained(ctx: CheckContext) -> None:
    """Each reachable model's `:pretrained`: its value and mapping (always), and with `read_files`
    the checkpoint's headers against the parameters after the mapping (E-MODEL-003, W-MODEL-001).
    Records an `ir.PretrainedIR` for each that fits, for the runtime."""
    ctx.pretrained_files = []
    ctx.pretrained_mapped = []
    for name, prefix in ctx.reachable.items():
        m = ctx.models[name]
        if m["pretrained"] is None:
            continue
        node = m["kws"]["pretrained"][1]
        spec = read_spec(ctx, node)
        # What the editor shows and completes, also while the mapping is being written.
        rel = spec[0] if spec is not None else _written_path(node)
        if rel is None:
            continue
        base = os.path.dirname(os.path.abspath(ctx.src.path)) if not ctx.src.path.startswith("<") else "."
        uncached = None
        try:
            full = locate(rel, base)
        except NotCached as e:
            full, uncached = os.path.join(base, rel), e
        todo = plan(ctx, name, prefix, spec[1], spec[2], node) if spec is not None else None
        file_dtype = spec[3] if spec is not None else None
        names = spec[1] if spec is not None else None
        label = spec[2] if spec is not None else ""
        seen = ctx.facts.checkpoints[name] = Checkpoint(
            name, rel, full, file_dtype, {r: (p.dtype, tuple(reads)) for p, r, _, reads in todo or ()},
            tuple(".".join(p.path[len(prefix):]) for p in own_params(ctx, prefix)),
            _owners(ctx, prefix))
        if todo is None:
            if ctx.read_files and os.path.exists(full):   # the tensor names, for completing the mapping
                from ..files.checkpoint_files import SourceError, tensors
                try:
                    seen.header = tensors(full)
                except SourceError:
                    pass
            continue
        if uncached is not None:   # said where the files are read (`run`, `lint --read-files`): the editor's
            if ctx.read_files is True:   # machine may not be the one that runs it
                ctx.err("E-MODEL-003", node.span, f"cannot use `{rel}`: {uncached}")
            continue
        record = ir.PretrainedIR(prefix, full, tuple((r, src) for _, r, src, _ in todo), file_dtype, name,
                                 names is not None)
        ctx.pretrained_mapped.append(record)
        current = label.split("`")[1] if label.startswith("the mapping `") else None
        if not ctx.read_files or (ctx.read_files == LOCAL and not _on_this_machine(full)):
            ctx.pretrained_files.append(record)
        elif _compare(ctx, name, rel, full, base, todo, names is not None, file_dtype, node, current):
            ctx.pretrained_files.append(record)
        else:
            continue   # (the tensors do not fit: said once, the config not compared after it)
        if current is not None:   # a standard-library mapping: its config.json (small, read bounded) compared
            # in every check, as the tensors' shapes are only with read_files; after the phases (compare_configs)
            ctx.stated_configs.append((name, prefix, current, rel, full, node))


def _owners(ctx: CheckContext, prefix: tuple[str, ...]) -> dict[str, str]:
    """Each parameter path below `prefix` and the model whose `:params` names its leaf."""
    at = {path: model for model, path in ctx.reachable.items()}
    return {".".join(p.path[len(prefix):]): at[p.path[:-1]] for p in own_params(ctx, prefix) if p.path[:-1] in at}


def _written_path(node) -> str | None:
    """The `:path` string of a `:pretrained` plist that does not check (a mapping half written)."""
    items = node.items if isinstance(node, ListNode) else []
    for k, v in zip(items, items[1:]):
        if isinstance(k, Kw) and k.name == "path" and isinstance(v, Str):
            return v.value
    return None


def _parameters(whom: list) -> str:
    """`parameter `a``, or `parameters `a`, `b` and `c``: the paths of `whom`, (path, parameter) pairs."""
    names = [f"`{prel}`" for prel, _ in whom]
    return ("parameter " if len(names) == 1 else "parameters ") + (names[0] if len(names) == 1
                                                                   else ", ".join(names[:-1]) + " and " + names[-1])


def _clause(key: tuple, whom: list, name: str, mapped: bool) -> str:
    """One E-MODEL-003 clause: a tensor (or a pattern) the checkpoint lacks or holds otherwise, with
    every parameter `whom` (their paths and parameters) read from it."""
    kind = key[0]
    via = f", for {_parameters(whom)}" if mapped else ""
    if kind == "pattern":
        _, pattern, layers = key
        return f"has no tensor matching `{pattern}` (layers 0 to {layers - 1}{via})"
    if kind == "missing":
        _, tname, shape, dtype = key
        return f"has no tensor `{tname}` (expected {_shape(shape)} {dtype}{via})"
    _, tname, got_shape, got_dtype, shape, dtype, depth = key
    if not mapped:
        return (f"tensor `{tname}` is {_shape(got_shape)} {got_dtype}, `:params` of `{name}` expects "
                f"{_shape(shape)} {dtype}" + depth)
    types = {(tuple(p.shape), p.dtype) for _, p in whom}
    if len(whom) == 1:
        own = f"{_parameters(whom)} {_shape(whom[0][1].shape)} {whom[0][1].dtype}"
    elif len(types) == 1:
        own = f"{_parameters(whom)} (each {_shape(whom[0][1].shape)} {whom[0][1].dtype})"
    else:
        own = "parameters " + ", ".join(f"`{prel}` {_shape(p.shape)} {p.dtype}" for prel, p in whom)
    need = "needs" if len(whom) == 1 else "need"
    return f"tensor `{tname}` is {_shape(got_shape)} {got_dtype}, {own} of `{name}` {need} {_shape(shape)} {dtype} from it"


def _dtype_summary(wrong: dict[tuple, list], file_dtype: str | None = None) -> str | None:
    """One clause for a checkpoint whose tensors all differ from their parameters in dtype alone, the
    same two dtypes throughout (a bf16 file read into f32 parameters): the count and the first
    tensors, rather than one clause each. None for anything else, or for three tensors or fewer."""
    keys = list(wrong)
    if len(keys) <= 3 or not all(k[0] == "shape" and k[2] == k[4] and not k[6] for k in keys):
        return None
    pairs = {(k[3], k[5]) for k in keys}
    if len(pairs) != 1:
        return None
    (got, want), = pairs
    shown = ", ".join(f"`{k[1]}`" for k in keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
    if file_dtype is not None:   # the file holds another dtype than `:file-dtype` says, not than the parameters
        return f"its {len(keys)} tensors are {got} where `:file-dtype` says {want}, the shapes agreeing: {shown}"
    return (f"its {len(keys)} tensors are {got} where the parameters read from them are {want}, the shapes "
            f"agreeing: {shown}")


def _depth_summary(todo, header: dict, wrong: dict, rel: str) -> tuple[str, str] | None:
    """(clause, help) for a checkpoint with fewer layers than the run's `repeat`: every stacked
    parameter's layers 0 to K-1 are in the file and none after, and nothing else is wrong. One line
    saying both depths, rather than one clause per missing tensor. None otherwise."""
    if not wrong or not all(key[0] == "missing" for key in wrong):
        return None
    depths, runs = set(), set()
    for p, _, _, reads in todo:
        if len(reads) < 2:
            continue
        present = [i for i, (t, _) in enumerate(reads) if t in header]
        if not present or present != list(range(len(present))):
            return None
        depths.add(len(present))
        runs.add(len(reads))
    if len(depths) != 1 or len(runs) != 1 or depths == runs:
        return None
    (k,), (n,) = depths, runs
    if k > n or len(wrong) != sum(len(reads) - k for _, _, _, reads in todo if len(reads) > 1):
        return None
    gone = f"layer {k} has" if n - k == 1 else f"layers {k} to {n - 1} have"
    return (f"the checkpoint has {k} layer{'s' if k != 1 else ''}, and the `repeat` makes {n}: {gone} no tensors "
            "in it",
            f"repeat the block {k} times, or bind the count from the checkpoint: "
            f"`(def layers (checkpoint-config \"{rel}\" :layers))`")


def _layer_patterns(mapping: str) -> list[str]:
    """The tensor names the standard-library `mapping` reads once per layer (with `{i}`)."""
    return [leaf(src)[1] for src in stdlib_names()[mapping].values() if LAYER in leaf(src)[1]]


def _layer_tensor(mapping: str, i: int) -> str:
    return layer_name(_layer_patterns(mapping)[0], i)


def _config_layers(full: str, header: dict, mapping: str):
    """(the config.json's path, its layer count `Setting`, the layers the weights hold) for a checkpoint
    read through the standard-library `mapping` whose config.json's count is not the number of layers
    its tensors hold (layers 0 to M-1 of the mapping's per-layer names); None where they agree, or
    where there is no config.json to read (its own check says why)."""
    from ..files.hf_config import ConfigError, Setting, read, settings
    try:
        file, config = read(full)
        n = settings(config).get("layers")
    except ConfigError:
        return None
    patterns = _layer_patterns(mapping)
    if not isinstance(n, Setting) or not patterns:
        return None
    m = 0
    while any(layer_name(p, m) in header for p in patterns):
        m += 1
    return (file, n, m) if m and m != n.value else None


def _on_this_machine(full: str) -> bool:
    """Whether the checkpoint path `full` is something on this machine that the server compares (it
    leaves a path that is not there to the machine that runs the file): there, or a symbolic link
    that leads back to itself, which no machine can read (`run` refuses it, E-MODEL-003)."""
    if os.path.exists(full):
        return True
    try:
        os.stat(full)
    except OSError as e:
        return e.errno == errno.ELOOP
    except ValueError:
        return False
    return False


def _other_mapping(header: dict, current: str | None) -> str | None:
    """The help for a checkpoint that the mapping does not fit: the standard-library mapping whose
    tensor names it holds (the most of them), or None: also when that is the mapping given
    (`current`, a standard-library mapping's name), since then the names fit and what differs is
    the model's `:params`, which the clauses say."""
    best, score = None, 0
    for name, names in stdlib_names().items():
        pats = {leaf(src)[1] for src in names.values()}
        hits = sum(1 for p in pats if (layer_name(p, 0) if LAYER in p else p) in header)
        if hits == len(pats) and hits > score:
            best, score = name, hits
    if best is None or best == current:
        return None
    return (f"its tensors are named as the standard library's `{best}` mapping reads them: write `:names :{best}` "
            f"(and the model's `:params` for it: docs/checkpoints.md \"Name mappings\")")


def _compare(ctx: CheckContext, name: str, rel: str, full: str, base: str, todo, mapped: bool, file_dtype,
             node, current: str | None = None) -> bool:
    """E-MODEL-003 unless every tensor the plan reads is in the checkpoint with its shape and dtype;
    W-MODEL-001 for the tensors nothing reads. Whether it fits. `current`: the standard-library
    mapping `:names` gives, if any."""
    from ..files.checkpoint_files import SourceError, tensors   # (json, struct): only when reading
    try:
        header = tensors(full)
    except SourceError as e:
        shown = as_written(e.file, rel, base)   # as the run file gives the path
        why = str(e) if e.file == full else f"`{shown}` " + str(e).removeprefix("it ")
        missing = str(e).startswith("no such file")
        if missing and not os.path.isabs(rel):
            why += f" (looked for {e.file})"
        ctx.err("E-MODEL-003", node.span, f"cannot use `{rel}`: {why}",
                help="make it (a `model.safetensors`, or a folder of shards with its "
                     "`model.safetensors.index.json`), or fix the path (relative to the run file)" if missing else None)
        return False
    if name in ctx.facts.checkpoints:
        ctx.facts.checkpoints[name].header = header
    off = _config_layers(full, header, current) if current is not None else None
    if off is not None:   # (before the model's own depth: a count bound from the config is the config's)
        file, n, m = off
        cfg = as_written(file, rel, base)
        ctx.err("E-MODEL-003", node.span, f"`{rel}` contradicts itself: `{cfg}` has `{n.key}` {n.text}, and its "
                f"weights hold {m} layer{'s' if m != 1 else ''} (`{_layer_tensor(current, m - 1)}` is there"
                + (f", `{_layer_tensor(current, n.value - 1)}` is not)" if n.value > m else ")"),
                help=f"the config and the weights were saved from different models: make `{n.key}` {m} in `{cfg}` "
                     "(the layers the weights hold), or download or save the checkpoint again")
        return False
    # Each clause once per checkpoint tensor (or pattern), naming every parameter read from it: a fused
    # tensor split into several parameters (GPT-2's `c_attn` into q, k and v) is one clause, not three.
    wrong: dict[tuple, list] = {}   # a clause's key -> the (parameter path, parameter) it is about
    used, casts, fix = set(), set(), None
    for p, prel, src, reads in todo:
        dtype = file_dtype or p.dtype
        if len(reads) > 1 and not any(t in header for t, _ in reads):
            wrong.setdefault(("pattern", leaf(src)[1], len(reads)), []).append((prel, p))
            continue
        for tname, shape in reads:
            used.add(tname)
            got = header.get(tname)
            if got is None:
                wrong.setdefault(("missing", tname, shape, dtype), []).append((prel, p))
                continue
            if got[:2] == (shape, dtype):
                continue
            depth = ""
            if (not mapped and p.layers and len(got[0]) == len(shape) and got[0][1:] == shape[1:]
                    and got[1] == dtype):
                depth = f" (stacked by a `repeat`: the file has {got[0][0]} layers, the run {p.layers})"
                fix = fix or (f"repeat the block {got[0][0]} times to load this file, or point at a file of "
                              f"{p.layers} layers")
            if got[0] == shape:
                casts.add(got[1])
            wrong.setdefault(("shape", tname, got[0], got[1], shape, dtype, depth), []).append((prel, p))
    summary = _dtype_summary(wrong, file_dtype)
    depth = _depth_summary(todo, header, wrong, rel)
    if depth is not None:
        summary, fix = depth
    if mapped and wrong and all(k[0] in ("missing", "pattern") for k in wrong) and len(wrong) == len(
            {leaf(src)[1] for _, _, src, _ in todo}) and len(wrong) > 3:
        # nothing the mapping reads is there: another family's checkpoint, not a few missing tensors
        have = ", ".join(f"`{t}`" for t in sorted(header)[:4]) + (f" and {len(header) - 4} more" if len(header) > 4
                                                                 else "")
        summary = f"has none of the {len(wrong)} tensors the mapping reads (it has {have})"
    wrong = [summary] if summary else [_clause(key, whom, name, mapped) for key, whom in wrong.items()]
    if wrong:
        help_ = fix
        if help_ is None and len(casts) == 1 and file_dtype is not None:
            held = next(iter(casts))
            help_ = (f"`:file-dtype` is the dtype the file holds, and it holds {held}: write `:file-dtype :{held}` "
                     f"(each tensor is cast to its parameter's dtype), or drop `:file-dtype` where the parameters "
                     f"are {held} too")
        elif help_ is None and len(casts) == 1:
            help_ = (f"to cast the file's {next(iter(casts))} tensors to the parameters' dtypes on load, write "
                     f"`:pretrained (:path \"{rel}\" :file-dtype :{next(iter(casts))} ...)`")
        if help_ is None and mapped:
            help_ = _other_mapping(header, current)
        ctx.err("E-MODEL-003", node.span, f"`{rel}`: " + "; ".join(wrong), help=help_)
        return False
    extra = sorted(set(header) - used)
    if extra:
        shown = ", ".join(f"`{t}`" for t in extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
        whom = "the mapping" if mapped else "`:params`"
        ctx.report(warning("W-MODEL-001", node.span,
                           f"`{rel}` has {len(extra)} tensor{'s' if len(extra) != 1 else ''} that {whom} of "
                           f"`{name}` does not name, which are not loaded: {shown}",
                           help="name them in `:params`, or point at the file the model was trained into"))
    return True

