"""Models (`defmodel`, `model`): their names, parameters, sub-models, `:apply`, `:frozen` and `:pretrained`.

`declare_model` binds every model's name first (models may name each
other); `build_model` reads a model's `:params` (initialisers and
sub-models), `:apply`, `:frozen` and `:pretrained` and returns what it
found, from the incremental cache when it holds it; `collect_params` walks
the models reachable from `model` into parameter leaves (E-MODEL-002 for a
model that contains itself) and `check_pretrained` compares each
`:pretrained` file's header with `:params` (E-MODEL-003). A model's
`:apply` is checked where it is called (`infer.call_model`).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import os

from .. import ir
from ..diagnostics import warning
from ..language import FORM_KEYWORDS, INITIALIZER_KEYWORDS
from ..ops import INITIALIZERS
from ..syntax import Kw, ListNode, Node, Sym
from ..types import DTYPES, ERROR, ErrorType, ModelType, ShapeType, TensorType
from . import incremental
from .context import CheckContext, near_miss
from .facts import Definition
from .forms import define_global
from .identity import place_hash
from .infer import infer, lambda_params
from .keywords import const_value, keyword_args, shape_in_range
from .scope import Binding


def new_state() -> dict:
    """What building a model finds (`build_model`), before it is built: no parameter, no sub-model,
    no `:apply`; `params_known` is False once `:params` is missing or malformed, and `failed`
    holds the parameters that were reported (reading one is ERROR, not reported again)."""
    return {"params": {}, "param_defs": {}, "subs": {}, "failed": set(), "params_known": True, "apply": None,
            "frozen": False, "pretrained": None}


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
    if ctx.cache is None:
        m.update(_build_model(ctx, f, name, m["kws"]))
    else:
        key = ("build", ctx.src.text[f.span.start:f.span.end], f.path)
        m.update(incremental.reuse(ctx, key, f, "build", lambda: _build_model(ctx, f, name, m["kws"])))


def _build_model(ctx: CheckContext, f: ListNode, name: str, kws: dict) -> dict:
    """The state of model `name` (`new_state`) built from its `defmodel` form `f` and its keywords."""
    m = new_state()
    if "params" not in kws:
        ctx.err("E-FORM-005", f.items[1].span, f"`defmodel {name}` needs `:params`")
        m["params_known"] = False
    if "apply" not in kws:
        ctx.err("E-FORM-005", f.items[1].span, f"`defmodel {name}` needs `:apply (lambda (self x) ...)`")
    if "frozen" in kws:
        m["frozen"] = bool(const_value(ctx, kws["frozen"][1]))
    if "pretrained" in kws:
        m["pretrained"] = const_value(ctx, kws["pretrained"][1])
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
    return m


def model_param(ctx: CheckContext, m: dict, model_name: str, kw: Kw, v: Node) -> None:
    """One `:params` entry: an initialiser (a parameter) or a model name (a sub-model)."""
    if isinstance(v, Sym):
        b = ctx.globals.lookup(v.name)
        if b is None or not isinstance(b.type, ModelType):
            ctx.tracker.model_read(incremental.ALL_MODELS)
            hint = near_miss(v.name, ctx.models)
            ctx.err("E-NAME-001", v.span, f"`{v.name}` is not a model" + (f"; did you mean `{hint}`?" if hint else ""))
            return
        ctx.facts.uses.append((v.span, b.definition))
        m["subs"][kw.name] = v.name
        ctx.facts.define(Definition(kw.name, "param", kw.span, v.span, f"sub-model {v.name}"))
        return
    if not isinstance(v, ListNode) or v.head not in INITIALIZERS:
        hint = near_miss(v.head, INITIALIZERS) if isinstance(v, ListNode) and v.head else None
        ctx.err("E-FORM-002", v.span, "a parameter is an initialiser (" + ", ".join(f"`{i}`" for i in INITIALIZERS)
                + ") or the name of another model" + (f"; did you mean `{hint}`?" if hint else ""),
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
    """Walk the models reachable from `model`: their paths and parameter leaves."""
    if ctx.root_model is None:
        return
    _visit(ctx, ctx.root_model, (), False, [])
    check_pretrained(ctx)


def _visit(ctx: CheckContext, name: str, path: tuple[str, ...], frozen: bool, stack: list[str]) -> None:
    """Model `name` at `path` (frozen when it or a model containing it is), inside the models of `stack`."""
    if name in stack:
        m = ctx.models[name]
        ctx.err("E-MODEL-002", m["def"].span, f"model `{name}` contains itself through `:params`")
        return
    if name in ctx.reachable:
        return
    m = ctx.models.get(name)
    if m is None:
        return
    ctx.reachable[name] = path
    frozen = frozen or m["frozen"]
    stack.append(name)
    for key, (t, init, node) in m["params"].items():
        ctx.params.append(ir.ParamIR(path + (key,), t.shape, t.dtype, init, frozen, place_hash(node.path)))
    for key, sub in m["subs"].items():
        _visit(ctx, sub, path + (key,), frozen, stack)
    stack.pop()


def check_pretrained(ctx: CheckContext):
    """Each reachable model's `:pretrained` file: its tensors' names, shapes and dtypes
    against `:params` (read from the safetensors header; no tensor data is read, but the
    header's byte ranges are compared with the file's size: E-MODEL-003 for a file cut short).
    Tensors the file has that `:params` does not name are W-MODEL-001 (not loaded).
    Only with `read_files`: otherwise the file is recorded for the runtime, not opened."""
    ctx.pretrained_files = []
    for name, path in ctx.reachable.items():
        m = ctx.models[name]
        rel = m["pretrained"]
        if rel is None:
            continue
        node = m["kws"]["pretrained"][1]
        if not isinstance(rel, str):
            ctx.err("E-FORM-002", node.span, "`:pretrained` takes a file name string")
            continue
        base = os.path.dirname(os.path.abspath(ctx.src.path)) if not ctx.src.path.startswith("<") else "."
        full = rel if os.path.isabs(rel) else os.path.join(base, rel)
        if not ctx.read_files:
            ctx.pretrained_files.append((path, full))
            continue
        from ..safetensors_header import HeaderError, read_header   # (json, struct): only when reading
        try:
            header = read_header(full)
        except HeaderError as e:
            ctx.err("E-MODEL-003", node.span, f"cannot use `{rel}`: {e}")
            continue
        want = {".".join(p.path[len(path):]): p for p in ctx.params if p.path[:len(path)] == path}
        # One diagnostic per file listing every mismatch (several at the same range
        # would be merged into the first by `report`).
        wrong = []
        for tname, p in want.items():
            got = header.get(tname)
            shape = "[" + " ".join(map(str, p.shape)) + "]"
            if got is None:
                wrong.append(f"has no tensor `{tname}` (expected {shape} {p.dtype})")
            elif got != (p.shape, p.dtype):
                gshape = "[" + " ".join(map(str, got[0])) + "]"
                wrong.append(f"tensor `{tname}` is {gshape} {got[1]}, `:params` of `{name}` expects {shape} {p.dtype}")
        if wrong:
            ctx.err("E-MODEL-003", node.span, f"`{rel}`: " + "; ".join(wrong))
            continue
        ctx.pretrained_files.append((path, full))
        extra = sorted(set(header) - set(want))
        if extra:
            shown = ", ".join(f"`{t}`" for t in extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
            ctx.report(warning("W-MODEL-001", node.span,
                               f"`{rel}` has {len(extra)} tensor{'s' if len(extra) != 1 else ''} that `:params` of "
                               f"`{name}` does not name, which are not loaded: {shown}",
                               help="name them in `:params`, or point at the file the model was trained into"))
