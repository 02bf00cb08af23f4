"""Each top-level form's own check: `def`, `loader`, `run` and `curriculum` (models: `models`;
the generator: `generate`; prepare, objective and passes: `phases`).

`define_global` binds a top-level name (E-NAME-002 for a duplicate or a
built-in name); `top_def` a constant or function; `top_loader` a loader's
source, batch and fields; `top_run` the run's settings to an `ir.RunIR` (its `:optimizer`: `optimizer`);
`top_curriculum` the stages (their loaders' contract: `contracts`).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import os

from .. import ir
from ..diagnostics import Related
from ..language import (CONFIG_FORM, DEFAULT_OPTIMIZER, FORM_KEYWORDS, KEYWORD_VALUES, PLIST_KEYWORDS, RESERVED_NAMES,
                        RUN_KEYS, SOURCES, SPECIAL_FORMS)
from ..ops import REGISTRY
from ..mesh import undivided
from ..syntax import Kw, ListNode, Node, Num, Sym, VecNode
from ..types import (DTYPES, dtype_hint, ERROR, ErrorType, FunctionType, KeywordType, LoaderType, ShapeType,
                     StringType, TensorType, Type)
from .context import CheckContext, near_miss
from .contracts import stage_loader
from .facts import Definition
from .infer import infer, lambda_params
from .loader_sources import check_source
from .keywords import (MAX_HOST_CALLS, MAX_SEED, MAX_SIZE, config_plist, const_int, const_keyword, const_value,
                       integer_constant, keyword_args, remat_policy, shape_in_range)
from .optimizer import run_optimizer
from .scope import Binding


def define_global(ctx: CheckContext, name_node: Node, kind: str, form: Node, t: Type, **kw) -> Definition | None:
    """Bind a top-level name, reporting a duplicate or a built-in name (E-NAME-002)."""
    if not isinstance(name_node, Sym):
        ctx.err("E-FORM-002", name_node.span, f"`{kind}` needs a name here")
        return None
    name = name_node.name
    prev = ctx.globals.names.get(name)
    if prev is not None and prev.definition is not None:
        ctx.err("E-NAME-002", name_node.span, f"`{name}` is already defined",
                related=[Related(prev.definition.span, "first defined here")])
        return None
    if name in REGISTRY or name in SPECIAL_FORMS or name in RESERVED_NAMES:
        ctx.err("E-NAME-002", name_node.span, f"`{name}` is a built-in name; choose another")
        return None
    d = ctx.facts.define(Definition(name, kind, name_node.span, form.span, t.show()))
    ctx.globals.names[name] = Binding(t, d, **kw)
    ctx.note_type(name_node, t)
    return d


def top_def(ctx: CheckContext, f: ListNode):
    """`(def name value)`: a constant or a function."""
    # A `def` that fails still binds its name, typed ERROR, so its uses are not reported again.
    if len(f.items) != 3:
        ctx.err("E-FORM-003", f.span, "`def` takes a name and a value: `(def name value)`")
        if len(f.items) > 1 and isinstance(f.items[1], Sym):
            define_global(ctx, f.items[1], "def", f, ERROR)
        return
    val = f.items[2]
    if isinstance(val, ListNode) and val.head == "lambda":
        params = lambda_params(ctx, val, None, "def")
        if params is None:
            define_global(ctx, f.items[1], "function", f, ERROR)
            return
        define_global(ctx, f.items[1], "function", f, FunctionType(len(params), f.items[1].name if isinstance(f.items[1], Sym) else "lambda"),
                      fn=(val, ctx.globals))
        return
    if isinstance(val, ListNode) and val.head == CONFIG_FORM:
        from .config import config_def   # (with hf_config: imported only where a file reads a config.json)
        e, where = config_def(ctx, val)
        d = define_global(ctx, f.items[1], "def", f, e.type, ir=e if where else None)
        if d is not None and where:
            d.detail += "\n" + where
        return
    e = integer_constant(ctx, infer(ctx, val, ctx.globals))
    if not isinstance(e.type, ErrorType) and not _is_constant(e.type):
        ctx.err("E-TYPE-003", val.span, f"`def` needs a compile-time constant, got {e.type.show()}")
        define_global(ctx, f.items[1], "def", f, ERROR)
        return
    if isinstance(e.type, TensorType) and not isinstance(e, ir.Const):
        # A folded value (`(def rows (* prompts group))`) is the constant it folded to: every use
        # lowers as that literal, where the phases bind no top-level name.
        e = ir.Const(e.type, e.span, e.type.value)
    define_global(ctx, f.items[1], "def", f, e.type, ir=e)


def top_loader(ctx: CheckContext, f: ListNode):
    """`(loader name :source :batch :fields)` to a LoaderIR."""
    if len(f.items) < 2:
        ctx.err("E-FORM-003", f.span, "`loader` needs a name")
        return
    kws = keyword_args(ctx, f, 2, FORM_KEYWORDS["loader"], "loader")
    like, like_ok = _like(ctx, kws)
    needs = ("source",) + tuple(k for k in ("batch", "fields") if "like" not in kws)
    for need in needs:
        if need not in kws:
            ctx.err("E-FORM-005", f.items[1].span if len(f.items) > 1 else f.span, f"`loader` needs `:{need}`"
                    + (f" (or `:like` another loader, for its `:batch` and `:fields`)" if need != "source" else ""))
    if not all(k in kws for k in needs) or not like_ok:
        define_global(ctx, f.items[1], "loader", f, LoaderType(getattr(f.items[1], "name", "?")))
        return
    source = loader_source(ctx, kws["source"][1])
    batch = (const_int(ctx, kws["batch"][1], "`:batch`", 1, maximum=MAX_SIZE, why=" (XLA's sizes are 32-bit)")
             if "batch" in kws else like.batch)
    fields = loader_fields(ctx, kws["fields"][1]) if "fields" in kws else like.fields
    if source is not None and not check_source(ctx, source[0], source[1], source[2], fields, kws["source"][1].span, batch):
        source = None
    source = source[:2] if source is not None else None
    name = getattr(f.items[1], "name", "?")
    d = define_global(ctx, f.items[1], "loader", f, LoaderType(name))
    if d is None or source is None or batch is None or fields is None:
        return
    base = os.path.dirname(os.path.abspath(ctx.src.path)) if ctx.src.path and not ctx.src.path.startswith("<") else "."
    ctx.loaders[name] = ir.LoaderIR(name, source, batch, fields, f.span, base)
    ctx.facts.loader_fields[name] = tuple(n for n, _, _ in fields)
    d.detail = f"loader {name}: batch {batch}, " + " ".join(f":{n} [{' '.join(map(str, s))}] {dt}" for n, s, dt in fields)


def _like(ctx: CheckContext, kws: dict) -> tuple[ir.LoaderIR | None, bool]:
    """A loader's `:like L`: L's LoaderIR, whose `:batch` and `:fields` stand for the ones the loader
    leaves out (a held-out split of the training data in one line), and whether the loader can be
    built (False when `:like` names no loader, reported here, or a loader whose own check failed)."""
    if "like" not in kws:
        return None, True
    node = kws["like"][1]
    lt = infer(ctx, node, ctx.globals).type
    if not isinstance(lt, LoaderType):
        if not isinstance(lt, ErrorType):
            ctx.err("E-TYPE-001", node.span, f"`:like` must name a loader written before this one, got {lt.show()}")
        return None, False
    like = ctx.loaders.get(lt.name)
    return like, like is not None


def loader_source(ctx: CheckContext, node: Node):
    """A loader's `:source` form to (kind, constant arguments, their nodes)."""
    if not isinstance(node, ListNode) or node.head not in SOURCES:
        hint = near_miss(node.head, SOURCES) if isinstance(node, ListNode) and node.head else None
        ctx.err("E-FORM-002", node.span, "`:source` must be one of "
                + ", ".join(f"`({s} ...)`" for s in SOURCES) + (f"; did you mean `{hint}`?" if hint else ""),
                data={"replace": hint} if hint else None)
        return None
    kind = node.head
    args: dict = {}
    nodes: dict = {}
    rest = node.items[1:]
    if rest and not isinstance(rest[0], Kw):
        args[SOURCES[kind][0]] = const_value(ctx, rest[0])
        nodes[SOURCES[kind][0]] = rest[0]
        start = 2
    else:
        start = 1
    for k, (kw, v) in keyword_args(ctx, node, start, SOURCES[kind], kind).items():
        args[k] = const_value(ctx, v)
        nodes[k] = v
    return (kind, args, nodes)


def loader_fields(ctx: CheckContext, node: Node):
    """`:fields (:name [shape] :dtype ...)` to (name, shape, dtype) triples."""
    if not isinstance(node, ListNode):
        ctx.err("E-FORM-002", node.span, "`:fields` takes `(:name [shape] :dtype ...)`")
        return None
    items, out, i = node.items, [], 0
    while i < len(items):
        k = items[i]
        if not isinstance(k, Kw) or i + 2 >= len(items):
            ctx.err("E-FORM-002", k.span, "`:fields` takes triples `:name [shape] :dtype`")
            return None
        shape_t = infer(ctx, items[i + 1], ctx.globals).type
        dt = items[i + 2]
        if not isinstance(shape_t, ShapeType):
            if not isinstance(shape_t, ErrorType):
                ctx.err("E-TYPE-003", items[i + 1].span, f"a field's shape must be a constant vector like `[seq]`, got {shape_t.show()}")
            return None
        if not isinstance(dt, Kw) or dt.name not in DTYPES:
            hint = dtype_hint(dt.name) if isinstance(dt, Kw) else None
            ctx.err("E-TYPE-002", dt.span, "a field's dtype must be one of " + ", ".join(f"`:{d}`" for d in DTYPES)
                    + (f"; did you mean `:{hint}`?" if hint else ""), data={"replace": f":{hint}"} if hint else None)
            return None
        if not shape_in_range(ctx, items[i + 1], shape_t.dims, f"field `:{k.name}`"):
            return None
        out.append((k.name, shape_t.dims, dt.name))
        i += 3
    return tuple(out)


def top_run(ctx: CheckContext) -> None:
    """The `run` form's settings to a RunIR."""
    forms = ctx.forms.get("run", [])
    if not forms:
        return
    f = forms[0]
    kws = keyword_args(ctx, f, 1, RUN_KEYS, "run")
    cfg: dict = {}
    if "loader" not in kws:
        ctx.err("E-FORM-005", f.items[0].span, "`run` needs `:loader`")
        return
    lnode = kws["loader"][1]
    lt = infer(ctx, lnode, ctx.globals).type
    if not isinstance(lt, LoaderType):
        if not isinstance(lt, ErrorType):
            ctx.err("E-TYPE-001", lnode.span, f"`:loader` must name a loader, got {lt.show()}")
        return
    cfg["loader"] = lt.name
    if "steps" not in kws:
        ctx.err("E-FORM-005", f.items[0].span, "`run` needs `:steps`")
        return
    steps = const_int(ctx, kws["steps"][1], "`:steps`", 1, maximum=MAX_SIZE,
                      why=" (the optimizer's step counter is a 32-bit integer)")
    mb = (const_int(ctx, kws["microbatches"][1], "`:microbatches`", 1, maximum=MAX_HOST_CALLS,
                    why=" (each is a call from the host loop in every step)") if "microbatches" in kws else 1)
    stack, stack_auto = 1, False
    if "stack" in kws:
        sn = kws["stack"][1]
        if isinstance(sn, Kw) and sn.name in KEYWORD_VALUES["stack"]:
            stack_auto, stack = True, mb or 1
        else:
            stack = const_int(ctx, sn, "`:stack`", 1)
            if stack and mb and mb % stack:
                ctx.err("E-FORM-002", sn.span, f"`:stack {stack}` must divide `:microbatches {mb}`")
                stack = 1
    precision = const_keyword(ctx, kws, "precision", KEYWORD_VALUES["precision"])
    ctx.precision = precision
    if "remat" in kws:
        ctx.remat = remat_policy(ctx, kws["remat"][1])
    seed = (const_int(ctx, kws["seed"][1], "`:seed`", 0, maximum=MAX_SEED,
                      why=" (JAX's and numpy's seeds are 64-bit signed integers)") if "seed" in kws else 0)
    devices = None
    if "devices" in kws:
        # Data parallel: every batch is split evenly along the mesh's `data` axis (docs/sharding.md).
        dn = kws["devices"][1]
        devices = const_int(ctx, dn, "`:devices`", 1)
        for lname, ld in (ctx.loaders.items() if devices else ()):
            if ld.batch % devices:
                ctx.err("E-FORM-002", dn.span,
                        f"`:devices {devices}` does not divide `:batch {ld.batch}` of loader `{lname}`: "
                        "each device takes an equal slice of every batch",
                        help=f"make `:batch` a multiple of {devices}, or use a device count that divides it")
    # Parameters and optimizer state whole on every device, or split FSDP-style (docs/sharding.md).
    shard_params = const_keyword(
        ctx, kws, "shard-params", KEYWORD_VALUES["shard-params"],
        help="`:fsdp` splits every parameter and its optimizer state along the mesh's `data` axis")
    model_parallel, shard = model_axis(ctx, kws)
    opt = run_optimizer(ctx, kws["optimizer"][1], steps) if "optimizer" in kws else \
        (DEFAULT_OPTIMIZER[0], dict(DEFAULT_OPTIMIZER[1]))
    log = config_plist(ctx, kws["log"][1], PLIST_KEYWORDS["log"], ":log") if "log" in kws else {}
    ckpt = (config_plist(ctx, kws["checkpoint"][1], PLIST_KEYWORDS["checkpoint"], ":checkpoint")
            if "checkpoint" in kws else None)
    diag_sel: tuple[str, ...] = ()
    if "diagnostics" in kws:
        dn = kws["diagnostics"][1]
        if isinstance(dn, VecNode) and all(isinstance(i, Kw) for i in dn.items):
            diag_sel = tuple(i.name for i in dn.items)
        else:
            ctx.err("E-FORM-002", dn.span, "`:diagnostics` takes a vector of names like `[:grad-norm]`")
    if steps is None or mb is None or stack is None or seed is None:
        return
    ctx.run_ir = ir.RunIR(cfg["loader"], steps, mb, stack, stack_auto, seed, precision, opt,
                          int(log.get("every") or 50), log, ckpt, diag_sel, devices,
                          shard_params=shard_params, model_parallel=model_parallel, shard=shard)


def model_axis(ctx: CheckContext, kws: dict) -> tuple[int, tuple[tuple[str, int | None], ...]]:
    """`run`'s `:model-parallel M` (the mesh's tensor-parallel axis, 1 without) and `:shard (:key how ...)`,
    resolved per parameter (mesh.model_split's overrides: dotted path -> axis counted from the last, or
    None). A key names a parameter (`:wq`), a key on its path (`:teacher`, `:layers`) or a model (the
    root's `student`, a sub-model's `code-lm`); the deepest on a parameter's path decides. `how`: an axis
    number of the shape `:params` declares, `:replicated`, or `:auto` (by its name and shape). E-FORM-002
    at a parameter whose heads or MLP width M does not divide (sexpgpu_lang.mesh.undivided), at a bad
    `:shard` entry, and at an axis the parameter does not have."""
    model = 1
    if "model-parallel" in kws:
        model = const_int(ctx, kws["model-parallel"][1], "`:model-parallel`", 1) or 1
    given: dict[str, int | None | str] = {}
    at: dict[str, Node] = {}
    if "shard" in kws:
        sn = kws["shard"][1]
        items = sn.items if isinstance(sn, ListNode) else None
        if items is None or len(items) % 2 or not all(isinstance(k, Kw) for k in items[::2]):
            ctx.err("E-FORM-002", sn.span, "`:shard` takes a plist of names and how to split them, like "
                    "`(:student :replicated :teacher :auto :wq 2)`")
            items = ()
        for k, v in zip(items[::2], items[1::2]):
            at[k.name] = v
            if isinstance(v, Kw) and v.name in ("replicated", "auto"):
                given[k.name] = None if v.name == "replicated" else "auto"
            elif isinstance(v, Num) and not v.is_float and v.value >= 0:
                given[k.name] = int(v.value)
            else:
                ctx.err("E-FORM-002", v.span, f"`:shard`'s `:{k.name}` takes an axis number (0 the first), "
                        "`:replicated` or `:auto`")
    shard: dict[str, int | None] = {}
    for p in ctx.params:
        how = _deepest(ctx, p.path, given)
        if how is None or how[1] == "auto":
            continue
        from .lora import A_SUFFIX, B_SUFFIX   # (check/lora.py: imported only where `:shard` names a parameter)
        if p.path[-1].endswith((A_SUFFIX, B_SUFFIX)) and how[0] != p.path[-1]:
            continue   # a LoRA adapter splits with its base (mesh.adapter_overrides) unless named itself
        key, d = how
        declared = len(p.shape) - (1 if p.layers else 0)
        if d is not None and d >= declared:
            ctx.err("E-FORM-002", at[key].span, f"`:shard` splits `{'.'.join(p.path)}` along axis {d}, and it "
                    f"has {declared} axes")
            continue
        shard[".".join(p.path)] = None if d is None else d - declared
    where = kws["model-parallel"][1] if "model-parallel" in kws else None
    for p in ctx.params:
        dotted, span = ".".join(p.path), p.span or (where.span if where is not None else None)
        why = undivided(dotted, tuple(p.shape), model, shard)
        if why and span is not None:
            name = p.path[-1]
            ctx.err("E-FORM-002", span, f"{why}, parameter `{dotted}`: each device of the `model` axis "
                    "takes an equal share of it",
                    help=f"make `:model-parallel` divide {p.shape[undivided_axis(dotted, p.shape, shard)]}, or keep "
                         f"`{name}` whole with `:shard (:{name} :replicated)` in `run`")
    return model, tuple(shard.items())


def _deepest(ctx: CheckContext, path: tuple[str, ...], given: dict) -> tuple[str, object] | None:
    """The deepest key of `given` on a parameter's way from the root model: the root's name, then each key
    of the path and the model it enters; (key, its value) or None."""
    chain = [ctx.root_model] if ctx.root_model else []
    m = ctx.root_model
    for key in path:
        chain.append(key)
        subs = ctx.models.get(m, {}).get("subs", {}) if m else {}
        m = subs.get(key)
        if m is not None:
            chain.append(m)
    found = None
    for key in chain:
        if key in given:
            found = (key, given[key])
    return found


def undivided_axis(name: str, shape: tuple[int, ...], shard: dict) -> int:
    """The axis mesh.model_split names for a parameter (for a message)."""
    from ..mesh import model_split
    return model_split(name, tuple(shape), shard)[0]


def top_curriculum(ctx: CheckContext, train):
    """`curriculum` stages: each stage's loader must match the training loader."""
    ctx.stages = []
    for f in ctx.forms.get("curriculum", [])[:1]:
        for st in f.items[1:]:
            if not (isinstance(st, ListNode) and st.head == "stage"):
                ctx.err("E-FORM-002", st.span, "`curriculum` takes `(stage :loader l :records n)` forms")
                continue
            kws = keyword_args(ctx, st, 1, FORM_KEYWORDS["stage"], "stage")
            if "loader" in kws:
                lt = infer(ctx, kws["loader"][1], ctx.globals).type
                ld = ctx.loaders.get(lt.name) if isinstance(lt, LoaderType) else None
                if ld is not None and train is not None:
                    stage_loader(ctx, kws["loader"][1], ld, train)
                records = const_int(ctx, kws["records"][1], "`:records`", 1) if "records" in kws else None
                if ld is not None:
                    ctx.stages.append((ld.name, records))
            else:
                ctx.err("E-FORM-005", st.span, "`stage` needs `:loader`")


def _is_constant(t: Type) -> bool:
    """A type a `def` may bind: a constant tensor, a shape, a keyword or a string."""
    return (isinstance(t, TensorType) and t.value is not None) or isinstance(t, (ShapeType, KeywordType, StringType))
