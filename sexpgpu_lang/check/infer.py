"""Expressions: their types and typed IR, the special forms, and calls of ops, functions and models.

`infer(ctx, node, scope)` gives one expression's `ir.Expr` (its type is the
expression's type, remembered for hover); `phase` checks a phase's lambda
with its parameters bound to given types. Special forms (`let*`, `lambda`,
`list`, `getf`, `field`, `counter`, `metric`, `diagnostic`) each have a
rule here (`SPECIAL_RULES`); reading a batch with `field` asks `contracts`.
An op call's type comes from its shape-and-dtype rule (ops/); a
`def`'d or standard-library function is inlined for its argument types; a
model call checks the model's `:apply` for its argument types, once per
distinct types (from the incremental cache when it holds it); a call of a
repeated block (`call_repeat`) also checks its carry from layer to layer
(E-MODEL-004).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations


from .. import ir
from ..diagnostics import Related
from ..language import SPECIAL_FORMS, TOP_FORMS
from ..ops import REGISTRY, RuleCall, RuleError
from ..source import Span
from ..syntax import ErrorNode, Kw, ListNode, Node, Num, Str, Sym, VecNode, walk
from ..types import (DTYPES, dtype_hint, ERROR, NIL, ErrorType, FunctionType, KeywordType, LoaderType, ModelType,
                     NilType, PlistType, SelfType, ShapeType, StringType, TensorType, TupleType, Type, exact, is_float,
                     scalar)
from . import incremental
from .context import CheckContext, generator_param, near_miss
from .contracts import batch_field
from .entries import called_here, entry_call
from .facts import Definition, Facts
from .identity import place_hash
from .stdlib_args import arity_error, check_stdlib_call
from .copies import call_copy
from .ranges import INDEXED, WINDOWED, check_index, check_window, trip_form, value_range, zero_divisor
from .trips import reads_varying, salt_across_trips
from .scope import CTX_KEYS, Binding, BatchType, CtxType, Effect, Frame, Scope, stdlib_docs

#: The largest size of one axis: XLA's dimensions are 32-bit integers (E-SHAPE-004), for a
#: shape written as a literal (`keywords.shape_in_range`) as for one an op makes (`call_op`).
MAX_SIZE = 2**31 - 1
#: The integers a compile-time integer of each integer dtype holds (E-TYPE-002 past them: JAX
#: refuses to make the constant, "Python integer ... out of bounds for int32").
INT_RANGES = {"i32": (-2**31, 2**31 - 1), "i64": (-2**63, 2**63 - 1)}


def lambda_params(ctx: CheckContext, node: Node, count: int | None, what: str) -> list[Sym] | None:
    """A lambda's parameter symbols (`count` of them when given), or None after reporting."""
    if not (isinstance(node, ListNode) and node.head == "lambda" and len(node.items) >= 3
            and isinstance(node.items[1], ListNode)):
        ctx.err("E-FORM-002", node.span, f"{what} must be a `(lambda (params ...) body)`")
        return None
    params = list(node.items[1].items)
    for p in params:
        if not isinstance(p, Sym):
            ctx.err("E-FORM-002", p.span, "a lambda parameter must be a name")
            return None
    if count is not None and len(params) != count:
        ctx.err("E-FORM-003", node.items[1].span, f"{what} takes {count} parameters, this lambda has {len(params)}")
        return None
    return params  # type: ignore[return-value]


def phase(ctx: CheckContext, name: str, node: Node, param_types: list[Type], frame: Frame,
          what: str, param_ranges: list | None = None) -> ir.Phase | None:
    """Check a phase's lambda with its parameters bound to `param_types` (and, where given, to
    `param_ranges`: `ranges.value_range`'s value of each, a dict for a batch or plist); its
    effects go to `frame`."""
    params = lambda_params(ctx, node, len(param_types), what)
    if params is None:
        return None
    scope = ctx.globals.child()
    for i, (p, t) in enumerate(zip(params, param_types)):
        d = ctx.facts.define(Definition(p.name, "binding", p.span, node.span, t.show()))
        # `:step`'s state and trip change between trips (`trips`); the trip is 0 ... trips-1
        trip = name == "generate.step" and i == 1 and ctx.trips is not None
        scope.names[p.name] = Binding(t, d, varies=name == "generate.step" and i < 2,
                                      range=(0, ctx.trips - 1, True) if trip else
                                      (param_ranges[i] if param_ranges and i < len(param_ranges) else None),
                                      trip_form=(1, 0) if trip else None)
        ctx.note_type(p, t)
    saved, ctx.frame = ctx.frame, frame
    try:
        body = infer_body(ctx, node.items[2:], scope, node.span)
    finally:
        ctx.frame = saved
    ctx.facts.phases[name] = node.span
    return ir.Phase(name, tuple(p.name for p in params), tuple(param_types), body, node.span)


def ctx_type(ctx: CheckContext, phase: str) -> CtxType:
    """The context plist a phase sees (objective also sees the counters)."""
    entries = list(CTX_KEYS.items())
    if phase == "objective":
        entries += [(c, scalar("f32")) for c in ctx.counter_names]
    return CtxType(tuple(entries))


def infer_body(ctx: CheckContext, nodes, scope: Scope, span: Span) -> ir.Expr:
    """A body of expressions; its value is the last one's."""
    if not nodes:
        return ir.Const(NIL, span, None)
    exprs = tuple(infer(ctx, n, scope) for n in nodes)
    if len(exprs) == 1:
        return exprs[0]
    return ir.Seq(exprs[-1].type, span, exprs)


def infer(ctx: CheckContext, node: Node, scope: Scope) -> ir.Expr:
    """The typed IR of one expression (and its type remembered for hover)."""
    e = _infer(ctx, node, scope)
    ctx.note_type(node, e.type)
    return e


def _infer(ctx: CheckContext, node: Node, scope: Scope) -> ir.Expr:
    if isinstance(node, Num):
        t = scalar("f32" if node.is_float else "i32", node.value, weak=True)
        return ir.Const(t, node.span, node.value)
    if isinstance(node, Str):
        return ir.Const(StringType(node.value), node.span, node.value)
    if isinstance(node, Kw):
        return ir.Const(KeywordType(node.name), node.span, node.name)
    if isinstance(node, Sym):
        return infer_symbol(ctx, node, scope)
    if isinstance(node, VecNode):
        items = [infer(ctx, i, scope) for i in node.items]
        if any(isinstance(i.type, ErrorType) for i in items):
            return ir.Const(ERROR, node.span)
        if all(isinstance(i.type, TensorType) and i.type.shape == () and isinstance(i.type.value, int)
               and not isinstance(i.type.value, bool) for i in items):
            dims = tuple(i.type.value for i in items)
            return ir.Const(ShapeType(dims), node.span, dims)
        return ir.Vector(TupleType(tuple(i.type for i in items)), node.span, tuple(items))
    if isinstance(node, ErrorNode):
        return ir.Const(ERROR, node.span)   # not read (E-SYNTAX-005): already reported
    assert isinstance(node, ListNode)
    if not node.items:
        return ir.Const(NIL, node.span, None)
    head = node.items[0]
    if isinstance(head, Kw):
        return ir.Const(ctx.err("E-FORM-002", node.span, "a plist literal like `(:a 1)` is data for settings; "
                                "build a value with `(list :a 1)`"), node.span)
    if not isinstance(head, Sym):
        called = infer(ctx, head, scope)
        if isinstance(called.type, ErrorType):
            # `((f 1))` with `f` unbound, `((( ...`: what the callee's error was is reported
            # where it is; one cause, one diagnostic (no E-TYPE-004 on top of it).
            for a in node.items[1:]:
                infer(ctx, a, scope)
            return ir.Const(ERROR, node.span)
        return ir.Const(ctx.err("E-TYPE-004", head.span, "this cannot be called; a call starts with a name"), node.span)
    name = head.name
    ctx.facts.calls.setdefault((node.span.start, node.span.end), name)
    b = scope.lookup(name)
    if b is not None:
        if b.definition is not None:
            ctx.facts.uses.append((head.span, b.definition))
        ctx.note_type(head, b.type)
        if isinstance(b.type, ModelType):
            return call_model(ctx, node, b.type.name, scope)
        if isinstance(b.type, FunctionType) and b.fn is not None:
            return call_function(ctx, node, b, scope)
        if isinstance(b.type, ErrorType):
            for a in node.items[1:]:
                infer(ctx, a, scope)
            return ir.Const(ERROR, node.span)
        return ir.Const(ctx.err("E-TYPE-004", head.span, f"`{name}` is {b.type.show()}, not something to call"), node.span)
    special = SPECIAL_RULES.get(name)
    if special is not None:
        return special(ctx, node, scope)
    if name in REGISTRY:
        return call_op(ctx, node, REGISTRY[name], scope)
    if name in TOP_FORMS:
        return ir.Const(ctx.err("E-FORM-002", head.span, f"`{name}` is a top-level form; it cannot appear inside an expression"), node.span)
    unbound(ctx, head, scope, callable_=True)
    for a in node.items[1:]:
        infer(ctx, a, scope)
    return ir.Const(ERROR, node.span)


def unbound(ctx: CheckContext, sym: Sym, scope: Scope, callable_: bool) -> ErrorType:
    """E-NAME-001 for an unbound name, with a near-miss suggestion."""
    cands = set(scope.all_names()) | {"true", "false", "nil"}
    if callable_:
        cands |= set(REGISTRY) | set(SPECIAL_FORMS)
    hint = near_miss(sym.name, cands)
    return ctx.err("E-NAME-001", sym.span, f"`{sym.name}` is not defined" + (f"; did you mean `{hint}`?" if hint else ""),
                   help=f"replace it with `{hint}`" if hint else "define it with `def`, `let*` or a lambda parameter",
                   data={"replace": hint} if hint else None)


def infer_symbol(ctx: CheckContext, node: Sym, scope: Scope) -> ir.Expr:
    """A symbol: a constant, a binding, a model or loader name, or `true`/`false`/`nil`."""
    name = node.name
    if name in ("true", "false"):
        v = name == "true"
        return ir.Const(scalar("bool", v), node.span, v)
    if name == "nil":
        return ir.Const(NIL, node.span, None)
    b = scope.lookup(name)
    if b is None:
        if name in REGISTRY or name in SPECIAL_FORMS:
            return ir.Const(ctx.err("E-TYPE-004", node.span, f"`{name}` is an operation; call it: `({name} ...)`"), node.span)
        return ir.Const(unbound(ctx, node, scope, callable_=False), node.span)
    if b.definition is not None:
        ctx.facts.uses.append((node.span, b.definition))
    if b.ir is not None and isinstance(b.ir, ir.Const):
        return ir.Const(b.type, node.span, b.ir.value)
    if isinstance(b.type, (ModelType, LoaderType, FunctionType)):
        return ir.Const(b.type, node.span, name)
    return ir.Var(b.type, node.span, name)


def form_let_star(ctx: CheckContext, node: ListNode, scope: Scope) -> ir.Expr:
    """`(let* ((name value) ...) body ...)`: bindings in order."""
    if len(node.items) < 3 or not isinstance(node.items[1], ListNode):
        return ir.Const(ctx.err("E-FORM-002", node.span, "`let*` takes `((name value) ...)` and a body"), node.span)
    inner = scope.child()
    names, values = [], []
    for b in node.items[1].items:
        if not (isinstance(b, ListNode) and len(b.items) == 2 and isinstance(b.items[0], Sym)):
            ctx.err("E-FORM-002", b.span, "a `let*` binding is `(name value)`")
            if isinstance(b, ListNode) and b.items and isinstance(b.items[0], Sym):
                for extra in b.items[1:]:
                    infer(ctx, extra, inner)
                # The name is still bound, typed ERROR, so its uses are not reported again.
                inner.names[b.items[0].name] = Binding(ERROR)
            continue
        v = infer(ctx, b.items[1], inner)
        d = ctx.facts.define(Definition(b.items[0].name, "binding", b.items[0].span, b.span, v.type.show()))
        ctx.note_type(b.items[0], v.type)
        fn = None
        if isinstance(b.items[1], ListNode) and b.items[1].head == "lambda":
            fn = (b.items[1], inner)
        inner.names[b.items[0].name] = Binding(v.type, d, ir=v if isinstance(v, ir.Const) else None, fn=fn,
                                               range=value_range(v, range_lookup(inner)),
                                               varies=reads_varying(ctx, v, varies_lookup(inner)),
                                               trip_form=trip_form(v, form_lookup(inner)))
        names.append(b.items[0].name)
        values.append(v)
    body = infer_body(ctx, node.items[2:], inner, node.span)
    return ir.Let(body.type, node.span, tuple(names), tuple(values),
                  body.body if isinstance(body, ir.Seq) else (body,))


def form_lambda(ctx: CheckContext, node: ListNode, scope: Scope) -> ir.Expr:
    """A lambda as a value (it is typed at each call)."""
    params = lambda_params(ctx, node, None, "`lambda`")
    if params is None:
        return ir.Const(ERROR, node.span)
    return ir.Const(FunctionType(len(params)), node.span, None)


def form_list(ctx: CheckContext, node: ListNode, scope: Scope) -> ir.Expr:
    """`(list :key value ...)`: a plist."""
    keys, values, entries = [], [], []
    items = node.items[1:]
    if len(items) % 2:
        ctx.err("E-FORM-002", node.span, "`list` takes `:key value` pairs; one is missing its value")
    for k, v in zip(items[0::2], items[1::2]):
        e = infer(ctx, v, scope)
        if not isinstance(k, Kw):
            ctx.err("E-FORM-002", k.span, "a plist key must be a keyword like `:row`")
            continue
        if k.name in keys:
            ctx.err("E-NAME-002", k.span, f"`:{k.name}` appears twice in this plist")
            continue
        keys.append(k.name)
        values.append(e)
        entries.append((k.name, e.type))
        ctx.note_type(k, e.type)
    return ir.Plist(PlistType(tuple(entries)), node.span, tuple(keys), tuple(values))


def _key_arg(ctx: CheckContext, node: ListNode, form: str) -> Kw | None:
    if len(node.items) != 3 or not isinstance(node.items[2], Kw):
        ctx.err("E-FORM-003", node.span, f"`{form}` takes a value and a keyword: `({form} x :name)`")
        return None
    return node.items[2]


def form_getf(ctx: CheckContext, node: ListNode, scope: Scope) -> ir.Expr:
    """`(getf obj :key)` on a plist, the context, or a model's self."""
    key = _key_arg(ctx, node, "getf")
    if key is None:
        for a in node.items[1:]:
            infer(ctx, a, scope)
        return ir.Const(ERROR, node.span)
    obj = infer(ctx, node.items[1], scope)
    t = obj.type
    k = key.name
    if isinstance(t, ErrorType):
        return ir.Const(ERROR, node.span)
    if isinstance(t, CtxType):
        ctx.frame.effects.append(Effect("ctx", k, node.span, node.span))
        got = t.get(k)
        if got is None and k in ctx.frame.ctx_nil:
            return ir.Const(NilType(ctx.frame.ctx_nil[k]), node.span, None)
        if got is None and k in ("trip", "trips"):
            return ir.Const(ctx.err("E-NAME-004", key.span, f"the context has no key `:{k}`: the trip is "
                                    "`:step`'s second argument, `(lambda (state trip ctx) ...)`",
                                    help=trip_help(ctx)), node.span)
        if got is None:
            hint = near_miss(k, t.keys)
            return ir.Const(ctx.err("E-NAME-004", key.span, f"the context has no key `:{k}`"
                                    + (f"; did you mean `:{hint}`?" if hint else ""),
                                    help="it has " + ", ".join(f"`:{x}`" for x in t.keys)), node.span)
        return ir.GetF(got, node.span, obj, k)
    if isinstance(t, SelfType):
        return getf_self(ctx, node, obj, t, key)
    if isinstance(t, PlistType):
        got = t.get(k)
        if got is None:
            hint = near_miss(k, t.keys)
            return ir.Const(ctx.err("E-NAME-004", key.span, f"this plist has no key `:{k}`"
                                    + (f"; did you mean `:{hint}`?" if hint else ""),
                                    help="its keys are " + ", ".join(f"`:{x}`" for x in t.keys) if t.keys else None,
                                    data={"replace": f":{hint}"} if hint else None), node.span)
        if t is ctx.state_type and k in ctx.facts.state_keys:
            ctx.facts.uses.append((key.span, ctx.facts.state_keys[k]))
        return ir.GetF(got, node.span, obj, k)
    return ir.Const(ctx.err("E-TYPE-001", node.items[1].span, f"`getf` needs a plist, got {t.show()}"), node.span)


def trip_help(ctx: CheckContext) -> str:
    """How to read the trip where `(getf ctx :trip)` was written: `:step`'s second parameter, by its name."""
    if ctx.frame.phase != "generate.step":
        return "only `:step` sees the trip; pass what a later phase needs in the state"
    return f"use `{generator_param(ctx, 'step', 1, 'trip')}`, `:step`'s second parameter (an `i64` scalar counting from 0)"


def getf_self(ctx: CheckContext, node, obj, t: SelfType, key: Kw) -> ir.Expr:
    """`(getf self :key)`: a parameter (bf16 under `:precision :bf16`) or a sub-model."""
    m = ctx.models[t.model]
    ctx.tracker.model_read(t.model)
    k = key.name
    if k in m["params"]:
        pt = m["params"][k][0]
        ctx.facts.uses.append((key.span, m["param_defs"][k]))
        if ctx.precision == "bf16" and is_float(pt.dtype):
            pt = TensorType(pt.shape, "bf16")
        return ir.GetF(pt, node.span, obj, k)
    if k in m["subs"]:
        return ir.Const(ModelType(m["subs"][k]), node.span, m["subs"][k])
    if k in m["failed"] or not m["params_known"]:
        return ir.Const(ERROR, node.span)   # already reported where the parameter is declared
    hint = near_miss(k, list(m["params"]) + list(m["subs"]))
    return ir.Const(ctx.err("E-NAME-004", key.span, f"model `{t.model}` has no parameter `:{k}`"
                            + (f"; did you mean `:{hint}`?" if hint else ""),
                            data={"replace": f":{hint}"} if hint else None), node.span)


def form_field(ctx: CheckContext, node: ListNode, scope: Scope) -> ir.Expr:
    """`(field batch :name)`: a loader field or a generated name of a batch (`contracts.batch_field`),
    or an entry of a plist."""
    key = _key_arg(ctx, node, "field")
    if key is None:
        return ir.Const(ERROR, node.span)
    phase_kw = {"generate.step": "step", "generate.finish": "finish"}.get(ctx.frame.phase)
    where = f"`:{phase_kw}`" if phase_kw else None
    target = node.items[1]
    if where is not None and isinstance(target, Sym) and scope.lookup(target.name) is None:
        # `(field batch :x)` in `:step` or `:finish`, which have no batch: the batch is `:init`'s.
        return ir.Const(ctx.err("E-NAME-001", target.span, f"`{target.name}` is not defined in {where}: the batch "
                                f"is read in `:init`, and {where} sees the state",
                                help=f"read `:{key.name}` in `:init` into the state (`:{key.name} (field "
                                     f"{generator_param(ctx, 'init', 0, 'batch')} :{key.name})`), and here `(getf "
                                     f"{generator_param(ctx, phase_kw, 0, 'state')} :{key.name})`"), node.span)
    obj = infer(ctx, target, scope)
    t = obj.type
    if isinstance(t, ErrorType):
        return ir.Const(ERROR, node.span)
    if isinstance(t, BatchType):
        return batch_field(ctx, node, obj, key)
    if isinstance(t, PlistType):
        got = t.get(key.name)
        if got is not None:
            return ir.GetF(got, node.span, obj, key.name)
    if where is not None and t is ctx.state_type:
        return ir.Const(ctx.err("E-TYPE-001", target.span, f"`field` reads a batch, and the batch is read in "
                                f"`:init`: {where} sees the state {t.show()}",
                                help=f"read `:{key.name}` in `:init` into the state, and here `(getf "
                                     f"{_text(ctx, target)} :{key.name})`"), node.span)
    return ir.Const(ctx.err("E-TYPE-001", node.items[1].span, f"`field` reads a batch, got {t.show()}"), node.span)


def _report(ctx: CheckContext, node: ListNode, scope: Scope, kind: str) -> ir.Expr:
    if len(node.items) != 3 or not isinstance(node.items[1], Kw):
        for a in node.items[1:]:
            infer(ctx, a, scope)
        return ir.Const(ctx.err("E-FORM-003", node.span, f"`{kind}` takes a name and a value: `({kind} :name value)`"), node.span)
    v = infer(ctx, node.items[2], scope)
    name = node.items[1].name
    ctx.frame.effects.append(Effect(kind, name, node.span, node.span))
    if not isinstance(v.type, (TensorType, ErrorType)):
        ctx.err("E-TYPE-001", node.items[2].span, f"`{kind}` needs a tensor value, got {v.type.show()}")
    return ir.Report(NIL, node.span, kind, name, v)


def form_counter(ctx: CheckContext, node, scope):
    """`(counter :name value)`."""
    return _report(ctx, node, scope, "counter")


def form_metric(ctx: CheckContext, node, scope):
    """`(metric :name value)`."""
    return _report(ctx, node, scope, "metric")


def form_diagnostic(ctx: CheckContext, node, scope):
    """`(diagnostic :name value)`."""
    return _report(ctx, node, scope, "diagnostic")


def split_args(ctx: CheckContext, node: ListNode, spec_kwargs, what: str):
    """An op call's positional arguments and keyword arguments (unknown keywords are E-NAME-003)."""
    pos, kw = [], {}
    items = node.items[1:]
    i = 0
    while i < len(items):
        it = items[i]
        # A keyword is positional when it is a dtype, or last and looks like one
        # (`:float32`), so the rule can say which dtype was meant.
        trailing_dtype = i + 1 >= len(items) and isinstance(it, Kw) and dtype_hint(it.name) is not None
        if isinstance(it, Kw) and it.name not in DTYPES and it.name != "auto" and not trailing_dtype:
            if i + 1 >= len(items):
                ctx.err("E-FORM-002", it.span, f"`:{it.name}` of `{what}` has no value")
                i += 1
                continue
            if it.name not in spec_kwargs:
                hint = near_miss(it.name, spec_kwargs)
                ctx.err("E-NAME-003", it.span, f"`{what}` has no keyword `:{it.name}`"
                        + (f"; did you mean `:{hint}`?" if hint else ""),
                        help=("it takes " + ", ".join(f"`:{a}`" for a in spec_kwargs)) if spec_kwargs else f"`{what}` takes no keywords",
                        data={"replace": f":{hint}"} if hint else None)
                if hint is not None and hint not in kw:
                    # Read it as the keyword it most likely is, so the call's type is
                    # what the user meant and nothing downstream is reported again.
                    kw[hint] = (it, items[i + 1])
            elif it.name in kw:
                ctx.err("E-NAME-002", it.span, f"`:{it.name}` is given twice")
            else:
                kw[it.name] = (it, items[i + 1])
            i += 2
        else:
            pos.append(it)
            i += 1
    return pos, kw


def call_op(ctx: CheckContext, node: ListNode, spec, scope: Scope) -> ir.Expr:
    """A registry op: its arguments, then its shape-and-dtype rule (ops/)."""
    pos, kws = split_args(ctx, node, spec.kwargs, spec.name)
    args = [infer(ctx, a, scope) for a in pos]
    kwargs = {k: infer(ctx, v, scope) for k, (kw, v) in kws.items()}
    n = len(args)
    if n < spec.min_args or (spec.max_args is not None and n > spec.max_args):
        want = (f"{spec.min_args}" if spec.min_args == spec.max_args else
                f"{spec.min_args} or more" if spec.max_args is None else f"{spec.min_args} to {spec.max_args}")
        return ir.Const(ctx.err("E-FORM-003", node.span, f"`{spec.name}` takes {want} arguments, got {n}: `{spec.signature}`"), node.span)
    if any(isinstance(a.type, ErrorType) for a in args) or any(isinstance(a.type, ErrorType) for a in kwargs.values()):
        return ir.Const(ERROR, node.span)
    call = RuleCall(spec.name, [a.type for a in args], {k: v.type for k, v in kwargs.items()})
    try:
        out = spec.rule(call)
    except RuleError as e:
        at = None
        if isinstance(e.arg, int) and e.arg < len(pos):
            at = pos[e.arg]
        elif isinstance(e.arg, str) and e.arg in kws:
            at = kws[e.arg][1]
        span = at.span if at is not None else node.span
        message, help_, related = e.message, e.help, []
        if e.code == "E-TYPE-003" and at is not None and ctx.redirect is None:
            hidden = shadowed_constant(ctx, at, scope)
            if hidden is not None:
                name, inner, outer = hidden
                message += f": `{name}` here is a lambda parameter or `let*` binding that shadows the `def` `{name}`"
                related = [Related(inner.span, f"the local `{name}`"), Related(outer.span, f"the `def` `{name}`")]
                help_ = f"rename the local `{name}` (a lambda parameter or `let*` binding), so that `{name}` " \
                    "means the `def`"
        if ctx.redirect is not None:
            message += _layer_argument(ctx, args, e.arg)
        return ir.Const(ctx.err(e.code, span, message, help=help_, related=related), node.span)
    if isinstance(out, TensorType):
        wide = next((d for d in out.shape if d > MAX_SIZE), None)
        if wide is not None:
            return ir.Const(ctx.err("E-SHAPE-004", node.span, f"`{spec.name}` makes {out.show()}: a size must be at most "
                                    f"{MAX_SIZE} (XLA's sizes are 32-bit), got {wide}",
                                    help="check the `def`s that give its sizes"), node.span)
        lo_hi = INT_RANGES.get(out.dtype)
        if lo_hi is not None and type(out.value) is int and not lo_hi[0] <= out.value <= lo_hi[1]:
            return ir.Const(ctx.err("E-TYPE-002", node.span, f"`{spec.name}` gives {out.value}, which does not fit in "
                                    f"{out.dtype}, its dtype", help="build it in i64, e.g. `(* (cast 65536 :i64) 65536)`, "
                                    "or as a float"), node.span)
    zero = zero_divisor(ctx, spec.name, pos, args)
    if zero is not None:
        return ir.Const(zero, node.span)
    static = dict(call.static)
    if spec.draw:
        static["place"] = place_hash(node.path)
        ctx.frame.effects.append(Effect("draw", spec.name, node.span, node.span, salted="salt" in kwargs))
    dyn_kwargs = tuple((k, v) for k, v in kwargs.items() if k in ("salt", "temperature", "mask"))   # tensors, lowered
    e = ir.Op(out, node.span, spec.name, tuple(args), dyn_kwargs, static)
    if spec.name in INDEXED:
        check_index(ctx, e, range_lookup(scope))
    if spec.name in WINDOWED:
        check_window(ctx, e, range_lookup(scope), form_lookup(scope), ctx.trips)
    if spec.draw and "salt" in kwargs:
        salt_across_trips(ctx, e, kwargs["salt"], varies_lookup(scope))
    return e


def _layer_argument(ctx: CheckContext, args: list, arg) -> str:
    """Inside a standard-library layer, which of the user's arguments an op that
    failed read (its own tensor passed through, matched by identity): `; [128 352]
    is the argument `w-down``, or "" when no operand is one argument as it was given."""
    operands = [args[arg]] if isinstance(arg, int) and arg < len(args) else args
    for a in operands:
        names = ctx.redirect_args.get(id(a.type))
        if names and type(a.type) is TensorType and a.type.shape:
            which = " or ".join(f"`{n}`" for n in names)
            return f"; {a.type.show()} is the argument {which}"
    return ""


def varies_lookup(scope: Scope):
    """Whether a name in `scope` changes between trips of `:step` (`trips`)."""
    def lookup(name: str) -> bool:
        b = scope.lookup(name)
        return b is not None and b.varies
    return lookup


def form_lookup(scope: Scope):
    """A name's trip form in `scope` (`ranges.trip_form`: a * trip + b in `:step`)."""
    def lookup(name: str):
        b = scope.lookup(name)
        return b.trip_form if b is not None else None
    return lookup


def range_lookup(scope: Scope):
    """A name's integer range in `scope` (`ranges.value_range`), for the names an expression reads."""
    def lookup(name: str):
        b = scope.lookup(name)
        return b.range if b is not None else None
    return lookup


def shadowed_constant(ctx: CheckContext, node: Node, scope: Scope) -> tuple[str, Definition, Definition] | None:
    """A name in `node` (an argument that must be a compile-time constant) bound here to a
    local that hides a `def` of a constant: (the name, the local's definition, the `def`'s)."""
    for n in walk(node):
        if not isinstance(n, Sym):
            continue
        b, g = scope.lookup(n.name), ctx.globals.lookup(n.name)
        if (b is not None and g is not None and b is not g and isinstance(g.ir, ir.Const)
                and not isinstance(b.ir, ir.Const) and b.definition is not None and g.definition is not None):
            return n.name, b.definition, g.definition
    return None


def _text(ctx: CheckContext, node: Node) -> str:
    return ctx.src.text[node.span.start:node.span.end]


def _resite(ctx: CheckContext, effects: list[Effect], site: Span) -> None:
    for e in effects:
        ctx.frame.effects.append(Effect(e.kind, e.name, e.origin, site, e.salted))


def call_model(ctx: CheckContext, node: ListNode, name: str, scope: Scope) -> ir.Expr:
    """A model call: reachability (E-MODEL-001), then its `:apply` (or the entry `(name :key ...)`
    names, `entries.entry_call`) checked for these argument types."""
    ctx.tracker.model_called()
    m = ctx.models.get(name)
    if m is not None and m.get("copy_of") is not None:
        return call_copy(ctx, node, name, m, scope)   # copies.py
    lam, arg_nodes, entry = entry_call(ctx, node, name, m) if m is not None else (None, node.items[1:], "apply")
    args = [infer(ctx, a, scope) for a in arg_nodes]
    if m is None or (lam is None and entry != "apply"):
        return ir.Const(ERROR, node.span)
    if ctx.root_model is not None and name not in ctx.reachable:
        return ir.Const(ctx.err("E-MODEL-001", node.span,
                                f"`{name}` is called, but `model` (`{ctx.root_model}`) cannot reach it through `:params`, "
                                "so it has no parameters in this run",
                                related=[Related(m["def"].span, f"`{name}` is defined here")],
                                help=f"add it to a reachable model's `:params`, e.g. `:{name} {name}`"), node.span)
    if ctx.root_model is None or lam is None:
        return ir.Const(ERROR, node.span)
    params = [p.name for p in lam.items[1].items]
    if len(args) != len(params) - 1:
        what = f"model `{name}`" + (f"'s entry `:{entry}`" if entry != "apply" else "")
        return ir.Const(ctx.err("E-FORM-003", node.span, f"{what} takes {len(params) - 1} arguments, got {len(args)}",
                                related=[Related(lam.items[1].span, f"its `:{entry}` parameters")]), node.span)
    if any(isinstance(a.type, ErrorType) for a in args):
        return ir.Const(ERROR, node.span)
    compute = "bf16" if ctx.precision == "bf16" else None
    arg_types = [TensorType(a.type.shape, "bf16") if compute and isinstance(a.type, TensorType) and is_float(a.type.dtype)
                 else a.type for a in args]
    # The whole type, its constant value included: the body is checked for these values (a `[0 pos]`
    # of a constant `pos` is a constant shape, a constant temperature a static one), so a call with
    # other constants must not reuse it.
    key = (name, tuple(exact(t) if not isinstance(t, TensorType) else t for t in arg_types))
    if entry != "apply":
        key = key + (entry,)
    # the arguments' integer ranges (token ids, positions) reach the body: checked once per distinct ranges
    ranges = tuple(r if isinstance(r := value_range(a, range_lookup(scope)), tuple) else None for a in args)
    if any(r is not None for r in ranges):
        key = key + (ranges,)
    else:
        ranges = ()
    if name in ctx.active:
        return ir.Const(ctx.err("E-MODEL-002", node.span, f"model `{name}` calls itself"), node.span)
    if key not in ctx.memo:
        before = len(ctx.diags)
        ctx.memo[key] = model_body(ctx, name, lam, params, arg_types, m["form"], ranges)
        called_here(ctx, before, node, name, entry, arg_types)
    body, effects = ctx.memo[key]
    _resite(ctx, effects, node.span)
    out = body.type
    items = body.body if isinstance(body, ir.Seq) else (body,)
    if m["remat"] not in (None, "everything-saveable"):
        for e in effects:
            if e.kind in ("metric", "diagnostic"):
                return ir.Const(ctx.err("E-MODEL-005", e.origin, f"a `{e.kind}` inside `{name}`, which has `:remat`: "
                                        "a rematerialised body reports nothing",
                                        related=[Related(m["kws"]["remat"][1].span, "its `:remat`")],
                                        help="report in the model that calls it, or drop `:remat`"), node.span)
    if name in ctx.repeats:
        return call_repeat(ctx, node, name, lam, params, args, arg_types, body, effects, items, compute)
    return ir.ModelCall(out, node.span, name, ctx.reachable[name], params[0], tuple(params[1:]), tuple(args),
                        items, compute, m["remat"], ctx.adapters_of(name))


def call_repeat(ctx: CheckContext, node: ListNode, name: str, lam: ListNode, params: list[str], args: list,
                arg_types: list[Type], body: ir.Expr, effects: list[Effect], items: tuple, compute) -> ir.Expr:
    """A call of repeated block `name` (`(repeat name N)`): its N layers in sequence, the first
    argument the carry. E-MODEL-004 where the body's result is not of the carry's type (at the
    result, with both types); E-MODEL-005 for a block without a carry, or one that reports or
    draws (a layer's reports and draws would not differ between layers)."""
    count, remat, entry = ctx.repeats[name]
    here = Related(entry.span, f"`{name}` is repeated {count} times here")
    if not args:
        return ir.Const(ctx.err("E-MODEL-005", node.span, f"the repeated block `{name}` takes no argument to carry "
                                "from layer to layer", related=[here],
                                help="give its `:apply` the activations first: `(lambda (self h ...) ...)`"), node.span)
    for e in effects:
        if e.kind in ("metric", "diagnostic", "counter", "draw"):
            what = "a draw" if e.kind == "draw" else f"a `{e.kind}`"
            return ir.Const(ctx.err("E-MODEL-005", e.origin, f"{what} inside the repeated block `{name}`: every layer "
                                    "would give the same one", related=[here],
                                    help="report or draw in the model that calls the block, outside the repeat"),
                            node.span)
    carry, out = arg_types[0], body.type
    if _holds_error(out):   # reported where it went wrong: the carry is not compared
        return ir.Const(ERROR, node.span)
    if not same_type(carry, out):
        at = lam.items[-1].span if len(lam.items) > 2 else lam.span
        return ir.Const(ctx.err("E-MODEL-004", at, f"the repeated block `{name}` returns {_shown(out)}, "
                                f"but its carry (its first argument) is {_shown(carry)}: "
                                "each layer's result is the next layer's first argument",
                                related=[Related(node.span, "the layers are applied here"), here],
                                help="return the carry's shape and dtype (and keys) from `:apply`, e.g. "
                                     "project back to the input width or `cast` to its dtype"), node.span)
    policy = remat if remat is not None else ctx.models[name]["remat"] or ctx.remat
    return ir.Repeat(out, node.span, name, ctx.reachable[name], params[0], tuple(params[1:]), tuple(args), items,
                     compute, policy, ctx.adapters_of(name), count)


def _holds_error(t: Type) -> bool:
    """Whether `t` is ERROR or a plist or tuple with an ERROR inside."""
    if isinstance(t, ErrorType):
        return True
    if isinstance(t, PlistType):
        return any(_holds_error(v) for _, v in t.entries)
    if isinstance(t, TupleType):
        return any(_holds_error(v) for v in t.items)
    return False


def _shown(t: Type) -> str:
    return t.strong().show() if isinstance(t, TensorType) else t.show()


def same_type(a: Type, b: Type) -> bool:
    """Whether a carry keeps its type: tensors of one shape and dtype (weak or not), plists of
    the same keys in order whose entries keep theirs."""
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        return a.shape == b.shape and a.dtype == b.dtype
    if isinstance(a, PlistType) and isinstance(b, PlistType):
        return a.keys == b.keys and all(same_type(x, y) for (_, x), (_, y) in zip(a.entries, b.entries))
    return exact(a) == exact(b)


def model_body(ctx: CheckContext, name: str, lam: ListNode, params: list[str], arg_types: list[Type], form: ListNode,
               ranges: tuple = ()) -> tuple:
    """A model's `:apply` body (`lam`, in the `defmodel` `form`) checked for these argument
    types (and integer `ranges`, `ranges.value_range`'s, where known): (body IR, its effects).
    From the cache when the body calls no other model and its arguments are tensors."""
    if (ctx.cache is None or ctx.redirect is not None or not all(type(t) is TensorType for t in arg_types)
            or "entries" in ctx.models.get(name, {}).get("kws", {})):
        return _model_body(ctx, name, lam, params, arg_types, ranges)
    key = ("apply", ctx.src.text[form.span.start:form.span.end], lam.path, name, tuple(arg_types),
           ctx.precision, ctx.frame.phase, tuple(ctx.frame.ctx_nil.items()), len(ctx.active), ranges)
    return incremental.reuse(ctx, key, form, "apply", lambda: _model_body(ctx, name, lam, params, arg_types, ranges))


def _model_body(ctx: CheckContext, name: str, lam: ListNode, params: list[str], arg_types: list[Type],
                ranges: tuple = ()) -> tuple:
    scope_m = ctx.globals.child()
    scope_m.names[params[0]] = Binding(SelfType(name), ctx.facts.define(
        Definition(params[0], "binding", lam.items[1].items[0].span, lam.span, f"self of {name}")))
    for i, (p, t, pn) in enumerate(zip(params[1:], arg_types, lam.items[1].items[1:])):
        scope_m.names[p] = Binding(t, ctx.facts.define(Definition(p, "binding", pn.span, lam.span, t.show())),
                                   range=ranges[i] if i < len(ranges) else None)
        ctx.note_type(pn, t)
    saved, ctx.frame = ctx.frame, Frame(ctx.frame.phase, ctx.frame.ctx_nil)
    ctx.active.append(name)
    try:
        body = infer_body(ctx, lam.items[2:], scope_m, lam.span)
    finally:
        ctx.active.pop()
        inner, ctx.frame = ctx.frame, saved
    return (body, inner.effects)


def call_function(ctx: CheckContext, node: ListNode, b: Binding, scope: Scope) -> ir.Expr:
    """A `def`'d or standard-library function, inlined for these argument types."""
    lam, fscope = b.fn
    params = [p.name for p in lam.items[1].items]
    args = [infer(ctx, a, scope) for a in node.items[1:]]
    if len(args) != len(params):
        return ir.Const(arity_error(ctx, node, params), node.span)
    if any(isinstance(a.type, ErrorType) for a in args):
        return ir.Const(ERROR, node.span)
    if len(ctx.active) > 32:
        return ir.Const(ctx.err("E-FORM-002", node.span, "functions call each other too deeply (recursion is not supported)"), node.span)
    if b.stdlib is not None and not check_stdlib_call(ctx, b.stdlib, params, args,
                                                      lambda a: value_range(a, range_lookup(scope)),
                                                      lambda a: trip_form(a, form_lookup(scope)), node.span):
        return ir.Const(ERROR, node.span)
    redirect = b.stdlib is not None and ctx.redirect is None
    if redirect:
        # The layer's text is not in this file: its facts are not this file's, and
        # its diagnostics show at this call.
        saved_facts, ctx.facts = ctx.facts, Facts()
        sig, doc = stdlib_docs()[b.stdlib]
        got = ", ".join(f"{p} {a.type.show()}" for p, a in zip(params, args))
        ctx.redirect = (node.span, b.stdlib, f"`{sig}` takes {doc.removesuffix(' (standard library)')}; "
                        f"this call gives {got}")
        ctx.redirect_args = {}
        for p, a in zip(params, args):
            ctx.redirect_args.setdefault(id(a.type), []).append(p)
    inner = fscope.child()
    for p, a, pn in zip(params, args, lam.items[1].items):
        inner.names[p] = Binding(a.type, ctx.facts.define(Definition(p, "binding", pn.span, lam.span, a.type.show())),
                                 range=value_range(a, range_lookup(scope)),
                                 varies=reads_varying(ctx, a, varies_lookup(scope)),
                                 trip_form=trip_form(a, form_lookup(scope)))
    saved, ctx.frame = ctx.frame, Frame(ctx.frame.phase, ctx.frame.ctx_nil)
    ctx.active.append("<fn>")
    try:
        body = infer_body(ctx, lam.items[2:], inner, lam.span)
    finally:
        ctx.active.pop()
        fr, ctx.frame = ctx.frame, saved
        if redirect:
            ctx.facts, ctx.redirect, ctx.redirect_args = saved_facts, None, {}
    _resite(ctx, fr.effects, node.span)
    return ir.Apply(body.type, node.span, tuple(params), tuple(args), body.body if isinstance(body, ir.Seq) else (body,),
                    b.stdlib)


#: The rule of each special form (`language.SPECIAL_FORMS`).
def form_checkpoint_config(ctx: CheckContext, node: ListNode, scope: Scope) -> ir.Expr:
    """`checkpoint-config` outside a `def`'s value: E-FORM-002 (its value is read once, for a `def`)."""
    return ir.Const(ctx.err("E-FORM-002", node.span, "`checkpoint-config` is a `def`'s value: "
                            "`(def layers (checkpoint-config \"dir\" :layers))`, then use the name"), node.span)


SPECIAL_RULES = {"let*": form_let_star, "lambda": form_lambda, "list": form_list, "getf": form_getf,
                 "field": form_field, "counter": form_counter, "metric": form_metric,
                 "diagnostic": form_diagnostic,
                 "checkpoint-config": form_checkpoint_config}
