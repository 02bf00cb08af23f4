"""Models (`defmodel`, `model`): their names, parameters, sub-models, repeats, `:apply`, `:frozen`,
`:pretrained` and `:remat`.

`declare_model` binds every model's name first (models may name each
other); `build_model` reads a model's `:params` (initialisers, sub-models
and `(repeat block N)` entries), `:apply`, `:frozen`, `:pretrained` and
`:remat` and returns what it found, from the incremental cache when it
holds it; `collect_params` walks the models reachable from `model` into
parameter leaves, stacked on a leading `[N ...]` axis below a repeat
(E-MODEL-002 for a model that contains itself, E-MODEL-005 for a repeated
block also reached another way) and `check_pretrained` compares each
`:pretrained` checkpoint with `:params` (check/pretrained.py). A model's
`:apply` is checked where it is called (`infer.call_model`).
`gradient_free_params` reports trainable parameters the loss gives no
gradient (W-MODEL-002), from `objective`'s IR.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import dataclasses

from .. import ir
from ..diagnostics import Related, warning
from ..language import FORM_KEYWORDS, INITIALIZER_KEYWORDS
from ..ops import INITIALIZERS
from ..syntax import Kw, ListNode, Node, Sym
from ..types import DTYPES, ERROR, ErrorType, ModelType, ShapeType, TensorType
from . import incremental
from .context import CheckContext, near_miss
from .entries import read_entries
from .facts import Definition
from .forms import define_global
from .identity import place_hash
from .infer import infer, lambda_params
from .keywords import MAX_LAYERS, const_int, const_value, keyword_args, remat_policy, shape_in_range
from .scope import Binding


def new_state() -> dict:
    """What building a model finds (`build_model`), before it is built: no parameter, no sub-model,
    no `:apply`; `params_known` is False once `:params` is missing or malformed, and `failed`
    holds the parameters that were reported (reading one is ERROR, not reported again)."""
    return {"params": {}, "param_defs": {}, "subs": {}, "repeats": {}, "failed": set(), "params_known": True,
            "apply": None, "frozen": False, "pretrained": None, "remat": None, "entries": {}, "copy_of": None,
            "copy_node": None, "lora": None}


def declare_model(ctx: CheckContext, f: ListNode):
    """Bind a `defmodel`'s name before any model is built (models may name each other)."""
    if len(f.items) < 2 or not isinstance(f.items[1], Sym):
        ctx.err("E-FORM-002", f.span, "`defmodel` needs a name: `(defmodel name :params (...) :apply (lambda (self x) ...))`")
        return
    name = f.items[1].name
    d = define_global(ctx, f.items[1], "model", f, ModelType(name))
    if d is None:
        return
    kws = keyword_args(ctx, f, 2, FORM_KEYWORDS["defmodel"], "defmodel")
    ctx.models[name] = {"form": f, "kws": kws, "def": d, **new_state()}


def top_model_binding(ctx: CheckContext):
    """`(model NAME)`: binds `model` to the root model."""
    # Until a good `(model NAME)` binds it, `model` is ERROR: its calls are not reported
    # again after the missing or bad form is.
    ctx.globals.names["model"] = Binding(ERROR)
    forms = ctx.forms.get("model", [])
    if not forms:
        return
    f = forms[0]
    if len(f.items) != 2 or not isinstance(f.items[1], Sym):
        ctx.err("E-FORM-003", f.span, "`model` takes one model name: `(model student)`")
        return
    name = f.items[1].name
    b = ctx.globals.lookup(name)
    if b is not None and isinstance(b.type, ErrorType):
        return
    if b is None or not isinstance(b.type, ModelType):
        hint = near_miss(name, ctx.models)
        ctx.err("E-NAME-001", f.items[1].span, f"`{name}` is not a model" + (f"; did you mean `{hint}`?" if hint else ""),
                data={"replace": hint} if hint else None)
        if hint is None:
            return
        # Check the run as the model it most likely names, so mistakes elsewhere still show.
        name, b = hint, ctx.globals.lookup(hint)
    ctx.root_model = name
    ctx.facts.uses.append((f.items[1].span, b.definition))
    d = ctx.facts.define(Definition("model", "model-binding", f.items[0].span, f.span, f"model {name}"))
    ctx.globals.names["model"] = Binding(ModelType(name), d)


def build_model(ctx: CheckContext, f: ListNode):
    """A `defmodel`'s `:params`, `:apply`, `:frozen` and `:pretrained` (from the cache when it holds them)."""
    name = getattr(f.items[1], "name", None) if len(f.items) > 1 else None
    m = ctx.models.get(name)
    if m is None or m["form"] is not f:
        return
    if (ctx.cache is None or "entries" in m["kws"] or "pretrained" in m["kws"] or "copy" in m["kws"]
            or id(f) in ctx.expanded or _lora_reads_files(m["kws"])):
        # (a model with entry points, a checkpoint or a `:copy` holds nodes and definitions the cache
        # does not yet re-place after an edit: built afresh; so is one a one form expanded into, whose
        # text is not the file's and changes with its config.json, and one whose `:lora` names a
        # `:pretrained` directory, whose adapter_config.json may come or go between checks)
        m.update(_build_model(ctx, f, name, m["kws"]))
    else:
        key = ("build", ctx.src.text[f.span.start:f.span.end], f.path)
        m.update(incremental.reuse(ctx, key, f, "build", lambda: _build_model(ctx, f, name, m["kws"])))


def _lora_reads_files(kws: dict) -> bool:
    """Whether a `defmodel`'s `:lora` names `:pretrained` (check/lora.py looks for its files)."""
    node = kws["lora"][1] if "lora" in kws else None
    return isinstance(node, ListNode) and any(isinstance(x, Kw) and x.name == "pretrained" for x in node.items)


def frozen_value(ctx: CheckContext, node) -> bool:
    """`:frozen`'s value: `true` or `false` (a `def` of one); anything else is E-TYPE-003 at the value,
    as every bool setting's is (a string or a number is not read by its truthiness), and not frozen."""
    v = const_value(ctx, node)
    if isinstance(v, bool):
        return v
    if v is not None:
        shown = ctx.src.text[node.span.start:node.span.end]
        ctx.err("E-TYPE-003", node.span, f"`:frozen` must be `true` or `false`, got `{shown}`",
                help="`:frozen true` keeps the model's parameters as they are; `:frozen false` (or no `:frozen`) "
                     "trains them")
    return False


def _build_model(ctx: CheckContext, f: ListNode, name: str, kws: dict) -> dict:
    """The state of model `name` (`new_state`) built from its `defmodel` form `f` and its keywords."""
    m = new_state()
    if "copy" in kws:
        return _build_copy(ctx, f, name, kws, m)
    if "params" not in kws:
        ctx.err("E-FORM-005", f.items[1].span, f"`defmodel {name}` needs `:params`")
        m["params_known"] = False
    if "apply" not in kws:
        ctx.err("E-FORM-005", f.items[1].span, f"`defmodel {name}` needs `:apply (lambda (self x) ...)`")
    if "frozen" in kws:
        m["frozen"] = frozen_value(ctx, kws["frozen"][1])
    if "pretrained" in kws:
        m["pretrained"] = kws["pretrained"][1]   # read by check/pretrained.py once the parameters are known
    if "remat" in kws:
        m["remat"] = remat_policy(ctx, kws["remat"][1])
    if "lora" in kws:
        from .lora import read_lora   # (check/lora.py: imported only for a model with `:lora`)
        m["lora"] = read_lora(ctx, kws["lora"][1])
    if "params" in kws:
        pnode = kws["params"][1]
        if not isinstance(pnode, ListNode) or (pnode.items and not isinstance(pnode.items[0], Kw)):
            ctx.err("E-FORM-002", pnode.span, "`:params` takes `(:name (normal [shape] :std 0.1) ...)`")
            m["params_known"] = False
        else:
            for k, (kw, v) in keyword_args(ctx, pnode, 0, None, ":params").items():
                model_param(ctx, m, name, kw, v)
                if k not in m["params"] and k not in m["subs"]:
                    m["failed"].add(k)   # reported; `(getf self :k)` is ERROR, not reported again
    if "apply" in kws:
        lam = kws["apply"][1]
        params = lambda_params(ctx, lam, None, f"`:apply` of `{name}`")
        if params is not None:
            if len(params) < 1:
                ctx.err("E-FORM-003", lam.span, "`:apply` takes `self` first: `(lambda (self x) ...)`")
            else:
                m["apply"] = lam
    if "entries" in kws:
        m["entries"] = read_entries(ctx, name, kws["entries"][1])
    return m


def _build_copy(ctx: CheckContext, f: ListNode, name: str, kws: dict, m: dict) -> dict:
    """`(defmodel ref :copy student)`: a frozen copy of `student`'s starting parameters, with its
    `:apply` and entries (placed by `place_copies`). E-MODEL-007 for a keyword a copy takes from
    its source, or `:frozen false`."""
    m["frozen"] = True   # (its parameters are its source's, known where the source's are)
    kw, v = kws["copy"]
    for other in ("params", "apply", "entries", "pretrained", "remat"):
        if other in kws:
            ctx.err("E-MODEL-007", kws[other][0].span, f"`{name}` is a `:copy`: it takes its parameters, `:apply` and "
                    f"entries from the model it copies, so it has no `:{other}` of its own",
                    help=f"drop `:{other}`, or drop `:copy` and write the model out")
    if "frozen" in kws and const_value(ctx, kws["frozen"][1]) is False:
        ctx.err("E-MODEL-007", kws["frozen"][1].span, f"`{name}` is a `:copy`, and a copy is frozen: it holds the "
                "starting parameters of the model it copies, never updated",
                help="drop `:frozen false`; to train a second model from the same start, write it out with its own "
                     "`:params`")
    if not isinstance(v, Sym):
        ctx.err("E-FORM-002", v.span, "`:copy` takes a model's name: `(defmodel ref :copy student)`")
        return m
    if _model_named(ctx, v) is not None:
        ctx.facts.uses.append((v.span, ctx.globals.lookup(v.name).definition))
        m["copy_of"], m["copy_node"] = v.name, v
        ctx.models[name]["def"].detail = f"model {name}: a frozen copy of `{v.name}`'s starting parameters"
    return m


def place_copies(ctx: CheckContext) -> None:
    """Give each `:copy` model whose source `model` reaches its own parameters, at `(name,)` in the
    tree: one frozen leaf per trainable leaf of the source (its starting value, `ParamIR.copy_of`);
    the source's frozen sub-models are shared, not copied. A copy of a model with `:lora` gets none:
    it is the source's frozen base with no adapter applied (check/lora.py `call_base`). E-MODEL-007 for a copy of a copy, of a
    repeated block's layer, or whose name the root model's `:params` already uses."""
    root = ctx.models.get(ctx.root_model) if ctx.root_model else None
    if root is None:
        return
    taken = set(root["params"]) | set(root["subs"])
    for name, m in ctx.models.items():
        src, node = m.get("copy_of"), m.get("copy_node")
        if src is None or src not in ctx.reachable:
            continue   # not reached: a call of the copy says so (E-MODEL-001)
        sm = ctx.models[src]
        if sm.get("lora") is not None:
            continue   # the base of a LoRA model, read in place: no parameters of its own (check/lora.py `call_base`)
        problem = (f"`{src}` is itself a copy (of `{sm['copy_of']}`)" if sm.get("copy_of") else
                   f"`{src}` is a layer of the repeated block `{ctx.stacked[src][0]}`" if src in ctx.stacked else
                   f"the root model `{ctx.root_model}` has a parameter `:{name}`, the place the copy's go"
                   if name in taken else None)
        if problem is not None:
            fix = (f"copy `{sm['copy_of']}`" if sm.get("copy_of") else
                   "copy the model whose `:params` hold the repeat" if src in ctx.stacked else
                   f"rename the copy (`(defmodel {name}-ref :copy {src})`)")
            ctx.err("E-MODEL-007", node.span, f"`{name}` cannot copy `{src}`: {problem}", help=fix)
            continue
        base = ctx.reachable[src]
        for p in [p for p in ctx.params if p.path[:len(base)] == base and not p.frozen]:
            ctx.params.append(dataclasses.replace(p, path=(name,) + p.path[len(base):], frozen=True, copy_of=p.path))
        ctx.reachable[name] = (name,)
        ctx.frozen_models.add(name)


def repeat_entry(ctx: CheckContext, m: dict, model_name: str, kw: Kw, v: ListNode) -> None:
    """`:key (repeat block N :remat policy)`: N copies of sub-model `block`, their parameters
    stacked on a leading `[N ...]` axis (E-MODEL-005 for an N that is not a constant of 1 or more)."""
    if len(v.items) < 3 or not isinstance(v.items[1], Sym):
        ctx.err("E-FORM-002", v.span, "`repeat` takes a model and a count: `(repeat block 12)`")
        return
    block = v.items[1]
    b = _model_named(ctx, block)
    if b is None:
        return
    count = const_int(ctx, v.items[2], "the count of `repeat`", 1, code="E-MODEL-005", maximum=MAX_LAYERS,
                      why=" (`explain` traces every layer)")
    if count is None:
        count = 1   # reported: check the rest as one layer, so the block's calls are not reported again
        m["failed"].add(kw.name)   # its layers unknown: a checkpoint is not compared with one layer
    remat = None
    for k, (_, vv) in keyword_args(ctx, v, 3, FORM_KEYWORDS["repeat"], "repeat").items():
        remat = remat_policy(ctx, vv)
    ctx.facts.uses.append((block.span, b.definition))
    m["subs"][kw.name] = block.name
    m["repeats"][kw.name] = (count, remat, v)
    m["param_defs"][kw.name] = ctx.facts.define(
        Definition(kw.name, "param", kw.span, v.span, f"{model_name} :{kw.name}: {count} layers of `{block.name}`"))


def _model_named(ctx: CheckContext, sym: Sym) -> Binding | None:
    """The binding of the model `sym` names (a sub-model or a repeated block), or None after
    E-NAME-001 with the nearest model's name (a read of the set of models: `incremental.ALL_MODELS`);
    None unreported for a model whose own `defmodel` failed (bound to ERROR, said there: one cause, once)."""
    b = ctx.globals.lookup(sym.name)
    if b is not None and isinstance(b.type, ModelType):
        return b
    if b is not None and isinstance(b.type, ErrorType):
        return None
    ctx.tracker.model_read(incremental.ALL_MODELS)
    hint = near_miss(sym.name, ctx.models)
    ctx.err("E-NAME-001", sym.span, f"`{sym.name}` is not a model" + (f"; did you mean `{hint}`?" if hint else ""))
    return None


def model_param(ctx: CheckContext, m: dict, model_name: str, kw: Kw, v: Node) -> None:
    """One `:params` entry: an initialiser (a parameter), a model name (a sub-model) or
    `(repeat block N)` (a repeated block, `repeat_entry`)."""
    if isinstance(v, ListNode) and v.head == "repeat":
        repeat_entry(ctx, m, model_name, kw, v)
        return
    if isinstance(v, Sym):
        b = _model_named(ctx, v)
        if b is None:
            m["failed"].add(kw.name)   # (its parameters unknown: not compared with a checkpoint)
            return
        ctx.facts.uses.append((v.span, b.definition))
        if "copy" in ctx.models.get(v.name, {}).get("kws", {}):
            ctx.err("E-MODEL-007", v.span, f"`{v.name}` is a `:copy`: it has its own place in the run, not inside "
                    f"another model's `:params`", help=f"drop `:{kw.name} {v.name}`; call `({v.name} ...)` where it "
                    "is needed")
            return
        m["subs"][kw.name] = v.name
        ctx.facts.define(Definition(kw.name, "param", kw.span, v.span, f"sub-model {v.name}"))
        return
    if not isinstance(v, ListNode) or v.head not in INITIALIZERS:
        hint = near_miss(v.head, INITIALIZERS) if isinstance(v, ListNode) and v.head else None
        ctx.err("E-FORM-002", v.span, "a parameter is an initialiser (" + ", ".join(f"`{i}`" for i in INITIALIZERS)
                + "), the name of another model or `(repeat model N)`" + (f"; did you mean `{hint}`?" if hint else ""),
                data={"replace": hint} if hint else None)
        return
    kind = v.head
    if len(v.items) < 2:
        ctx.err("E-FORM-003", v.span, f"`{kind}` needs a shape: `({kind} [d ...])`")
        return
    shape_t = infer(ctx, v.items[1], ctx.globals).type
    if not isinstance(shape_t, ShapeType):
        if not isinstance(shape_t, ErrorType):
            ctx.err("E-TYPE-003", v.items[1].span, f"a parameter's shape must be a constant vector, got {shape_t.show()}")
        return
    if not shape_in_range(ctx, v.items[1], shape_t.dims, f"`{kind}`"):
        return
    start, dtype = 2, "f32"
    if len(v.items) > 2 and isinstance(v.items[2], Kw) and v.items[2].name in DTYPES:
        dtype, start = v.items[2].name, 3
    allowed = INITIALIZER_KEYWORDS[kind]
    args = {}
    for k, (kk, vv) in keyword_args(ctx, v, start, allowed, kind).items():
        if k == "dtype":
            if isinstance(vv, Kw) and vv.name in DTYPES:
                dtype = vv.name
            else:
                ctx.err("E-TYPE-002", vv.span, "`:dtype` must be a dtype keyword like `:f32`")
        else:
            args[k] = const_value(ctx, vv)
    t = TensorType(shape_t.dims, dtype)
    m["params"][kw.name] = (t, (kind, args), v)
    ctx.note_type(kw, t)
    ctx.note_type(v, t)
    m["param_defs"][kw.name] = ctx.facts.define(
        Definition(kw.name, "param", kw.span, v.span, f"{model_name} :{kw.name} {t.show()}"))


def collect_params(ctx: CheckContext) -> None:
    """Walk the models reachable from `model`: their paths and parameter leaves (stacked under a
    `repeat`: `ctx.repeats` maps each repeated block to its count, remat policy and entry)."""
    if ctx.root_model is None:
        return
    _visit(ctx, ctx.root_model, (), False, [], None)
    place_copies(ctx)
    # check/pretrained.py and check/lora.py (and the modules they use) are imported only for a
    # model with `:pretrained` or `:lora` (`sexpgpu lint` of a file without them starts sooner)
    reached = [ctx.models[name] for name in ctx.reachable]
    if any(m["pretrained"] is not None for m in reached):
        from .pretrained import check_pretrained
        check_pretrained(ctx)
    if any(m.get("lora") is not None for m in reached):
        from .lora import add_adapters
        add_adapters(ctx)


def _visit(ctx: CheckContext, name: str, path: tuple[str, ...], frozen: bool, stack: list[str],
           under: tuple[str, int, Node] | None) -> None:
    """Model `name` at `path` (frozen when it or a model containing it is), inside the models of
    `stack`; `under`: (block, count, `repeat` entry) when it is reached through a repeated block."""
    if name in stack:
        m = ctx.models[name]
        ctx.err("E-MODEL-002", m["def"].span, f"model `{name}` contains itself through `:params`")
        return
    if name in ctx.reachable:
        before = ctx.stacked.get(name)
        if (before is None) != (under is None) or (before is not None and before[0] != under[0]):
            _reached_twice(ctx, name, before, under)
        return
    m = ctx.models.get(name)
    if m is None:
        return
    ctx.reachable[name] = path
    if under is not None:
        ctx.stacked[name] = under
    frozen = frozen or m["frozen"]
    if frozen:
        ctx.frozen_models.add(name)
    lead = (under[1],) if under is not None else ()
    stack.append(name)
    for key, (t, init, node) in m["params"].items():
        ctx.params.append(ir.ParamIR(path + (key,), lead + t.shape, t.dtype, init, frozen, place_hash(node.path),
                                     under[1] if under is not None else 0, getattr(node, "span", None)))
    for key, sub in m["subs"].items():
        rep = m["repeats"].get(key)
        if rep is None:
            _visit(ctx, sub, path + (key,), frozen, stack, under)
        elif under is not None:
            ctx.err("E-MODEL-005", rep[2].span, f"`(repeat {sub} {rep[0]})` is inside the repeated block `{under[0]}`: "
                    "a repeated block cannot hold another repeat",
                    related=[Related(under[2].span, f"`{under[0]}` is repeated here")],
                    help="repeat the inner block's work inside one layer by hand, or repeat a larger block once")
        else:
            count, remat, node = rep
            ctx.repeats[sub] = (count, remat, node)
            _visit(ctx, sub, path + (key,), frozen, stack, (sub, count, node))
            below = path + (key,)
            leaves = ", ".join(".".join(p.path[len(below):]) + " " + TensorType(p.shape, p.dtype).show()
                               for p in ctx.params if p.path[:len(below)] == below)
            m["param_defs"][key].detail = f"{name} :{key} (repeat {sub} {count}): {leaves}"
    stack.pop()


def _reached_twice(ctx: CheckContext, name: str, before, under) -> None:
    """E-MODEL-005: model `name` is reached both through a repeated block and elsewhere: its
    parameters would be stacked on one path and not on the other, yet a model has one set."""
    first, second = (before, under) if before is not None else (under, None)
    where = f"the repeated block `{first[0]}`"
    other = f"the repeated block `{second[0]}`" if second is not None else "a plain sub-model"
    ctx.err("E-MODEL-005", first[2].span, f"model `{name}` is reached through {where} and also as {other}: "
            "a model has one set of parameters, stacked or not",
            related=[Related(ctx.models[name]["def"].span, f"`{name}` is defined here")],
            help=f"give the other use its own model (a copy of `{name}` under another name)")



def gradient_free_params(ctx: CheckContext, objective: ir.Phase, gen: ir.GenerateIR | None) -> None:
    """W-MODEL-002: the trainable float parameters that `objective` (the loss) reaches by no path
    a gradient takes (`gradient_reads`): the optimizer never moves them, and weight decay still
    shrinks them every step. One warning per model, at its `defmodel`, naming them; a model
    none of whose parameters get one (a teacher left trainable) is told to be `:frozen true`.
    Checked only in a file without errors (an error's IR is not the program's)."""
    reached = gradient_reads(objective.body)
    trainable = [p for p in ctx.params if not p.frozen and p.dtype in ("f32", "bf16", "f16", "f64")]
    if not trainable:
        return
    in_gen = set()
    if gen is not None:
        for ph in (gen.init, gen.step, gen.finish):
            if ph is not None:
                in_gen |= gradient_reads(ph.body, gradient_only=False)
    opt, settings = ctx.run_ir.optimizer if ctx.run_ir is not None else ("", {})
    decays = (f", and `{opt}`'s weight decay still shrinks them every step"
              if opt in ("adamw", "lion") and settings.get("weight-decay", 1) != 0 else "")
    for name, path in sorted(ctx.reachable.items(), key=lambda kv: (len(kv[1]), kv[1])):
        whole = _whole(trainable, reached, path)
        if any(_whole(trainable, reached, path[:i]) for i in range(len(path))):
            continue   # inside a model none of whose parameters train: said there
        keys = [".".join(q.path[len(path):]) for q in trainable if q.path[:len(path)] == path
                and q.path not in reached and (whole or len(q.path) == len(path) + 1)]
        if not keys:
            continue
        m = ctx.models[name]
        where = ("only the generator reads them, and no gradient passes through it"
                 if any(path + tuple(k.split(".")) in in_gen for k in keys) else "the loss does not depend on them")
        shown = ", ".join(f"`:{k}`" for k in keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
        if whole:
            msg = (f"no parameter of `{name}` gets a gradient from the loss ({shown}): {where}, so the "
                   f"optimizer never trains them{decays}")
            fix = f"if `{name}` is not meant to train (a teacher, a reward model), give it `:frozen true`"
        else:
            msg = (f"{_count(len(keys), 'parameter')} of `{name}` {'gets' if len(keys) == 1 else 'get'} no gradient from the loss ({shown}): {where}, "
                   f"so the optimizer never trains them{decays}")
            fix = "use them in the loss, or drop them from `:params`"
        ctx.report(warning("W-MODEL-002", m["def"].span, msg, help=fix))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _whole(trainable, reached, path) -> bool:
    """Whether no trainable parameter at or below model `path` is reached."""
    under = [q for q in trainable if q.path[:len(path)] == path]
    return bool(under) and all(q.path not in reached for q in under)


def gradient_reads(e: ir.Expr, gradient_only: bool = True) -> set[tuple[str, ...]]:
    """The parameter paths `e` reads (`(getf self :key)` in a model's body, by the model's
    path); with `gradient_only`, only those a gradient of `e`'s value reaches: not through
    `stop-gradient`, a report's value, or a value of integer or bool dtype (`argmax`, a
    comparison, a cast to an integer)."""
    found: set[tuple[str, ...]] = set()
    stack: list[tuple[ir.Expr, tuple[str, tuple[str, ...], dict] | None]] = [(e, None)]
    while stack:
        n, here = stack.pop()
        if gradient_only:
            if isinstance(n, ir.Report) or (isinstance(n, ir.Op) and n.name == "stop-gradient"):
                continue
            if isinstance(n.type, TensorType) and n.type.dtype not in ("f32", "bf16", "f16", "f64"):
                continue
        if isinstance(n, ir.GetF) and here is not None and isinstance(n.obj, ir.Var) and n.obj.name == here[0]:
            found.add(here[1] + (n.key,))
            if n.key in here[2]:   # a LoRA target: its adapters are read with it
                found |= {here[1] + (n.key + ".lora-a",), here[1] + (n.key + ".lora-b",)}
            continue
        if isinstance(n, ir.ModelCall):
            stack.extend((a, here) for a in n.args)
            stack.extend((b, (n.self_name, n.path, {a[0] for a in n.adapters})) for b in n.body)
            continue
        stack.extend((c, here) for c in ir.children(n))
    return found
