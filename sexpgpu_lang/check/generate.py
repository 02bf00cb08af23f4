"""The generator (`defgenerate`, docs/dev/design.md#generation): every E-GEN code is decided here and nowhere else.

Its three phases (`:init` the batch and context to the state, `:step` the
state to the next state `:trips` times, `:finish` the last state to what it
makes), each returning a plist of tensors (E-GEN-001); the check across
trips (E-GEN-002: `:step` returns exactly the keys, shapes and dtypes
`:init` made); generated names that are loader fields (E-GEN-003); what a
generator may not do (E-GEN-004 a metric; a counter is E-CONTRACT-010, in
`contracts`); `:trips` (E-GEN-005); `:until` (E-GEN-006), and a `:step` that
writes past the per-row stop `:until` ends on (W-GEN-002, found by `row_stops`).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from .. import ir
from ..diagnostics import Related, hint, warning
from ..language import FORM_KEYWORDS, PER_MICROBATCH_KEYS, PER_MICROBATCH_KEYS_CURRICULUM
from ..source import Span
from ..syntax import Kw, ListNode, Node, Sym, plist_pairs, result_node
from ..types import ERROR, ErrorType, PlistType, TensorType, same_tensor, scalar
from .context import CheckContext, generator_param, entry_span, near_miss, result_span
from .contracts import counter_in_generator
from .facts import Definition
from .infer import ctx_type, infer, phase
from .keywords import MAX_HOST_CALLS, keyword_args
from .ranges import loader_ranges
from .reward import check_reward
from .row_stops import unguarded_writes
from .scope import BatchType, Frame


def generator_frame(ctx: CheckContext, phase: str) -> Frame:
    """A frame for a generator phase: counters are nil there (spec: What a generator may read)."""
    reason = ("counter `:{}` is declared by `prepare`, which is traced after the generator, "
              "so `(getf ctx :{})` is nil inside a generator")
    return Frame(phase, {c: reason.format(c, c) for c in ctx.counter_names})


def top_generate(ctx: CheckContext, train: ir.LoaderIR | None):
    """`defgenerate`: its three phases, the check across trips, and what it makes (docs/dev/design.md#generation)."""
    forms = ctx.forms.get("defgenerate", [])
    if not forms:
        return None
    f = forms[0]
    kws = keyword_args(ctx, f, 1, FORM_KEYWORDS["defgenerate"], "defgenerate")
    trips = None
    if "trips" not in kws:
        ctx.err("E-FORM-005", f.items[0].span, "`defgenerate` needs `:trips`")
    else:
        tn = kws["trips"][1]
        t = infer(ctx, tn, ctx.globals).type
        if (isinstance(t, TensorType) and isinstance(t.value, int) and not isinstance(t.value, bool)
                and 1 <= t.value <= MAX_HOST_CALLS):
            trips = t.value
            ctx.trips = trips
        elif not isinstance(t, ErrorType):
            ctx.err("E-GEN-005", tn.span, f"`:trips` must be an integer from 1 to {MAX_HOST_CALLS}, got "
                    + (str(t.value) if isinstance(t, TensorType) and t.value is not None else t.show()),
                    help=f"`:step` runs `:trips` times, each a call from the host loop; write `:trips 1` to "
                         f"`:trips {MAX_HOST_CALLS}`")
    for need in ("init", "step"):
        if need not in kws:
            ctx.err("E-FORM-005", f.items[0].span, f"`defgenerate` needs `:{need}`")
    if train is None or "init" not in kws or "step" not in kws:
        return None
    batch = BatchType(train.batch_type().entries, train.name)
    init_frame = generator_frame(ctx, "generate.init")
    init = phase(ctx, "generate.init", kws["init"][1], [batch, ctx_type(ctx, "generate")], init_frame,
                 "`:init`", [loader_ranges(train)])
    if init is None:
        return None
    state = check_plist_of_tensors(ctx, init, "`:init`")
    if state is None:
        return None
    state = PlistType(tuple((k, t.strong() if isinstance(t, TensorType) else t) for k, t in state.entries))
    ctx.state_type = state   # `getf` on this very object reads a state key (whatever the parameter's name)
    # Definitions of the state keys, where :init made them.
    init_list = result_node(kws["init"][1].items[2:])
    key_defs: dict[str, Definition] = {}
    if isinstance(init_list, ListNode) and init_list.head == "list":
        for k, v in plist_pairs(init_list):
            key_defs[k.name] = ctx.facts.define(Definition(k.name, "state-key", k.span, v.span,
                                                           f"state :{k.name} {state.get(k.name)}"))
    ctx.facts.state_keys = key_defs
    if ctx.precision == "bf16" and isinstance(init_list, ListNode) and init_list.head == "list":
        f32_state_under_bf16(ctx, state, dict((k.name, v) for k, v in plist_pairs(init_list)))
    step_frame = generator_frame(ctx, "generate.step")
    step = phase(ctx, "generate.step", kws["step"][1], [state, scalar("i64"), ctx_type(ctx, "generate")],
                      step_frame, "`:step`")
    if step is not None:
        check_across_trips(ctx, step, state, key_defs, kws["step"][1])
    finish = None
    out = state
    frames = [init_frame, step_frame]
    if "finish" in kws:
        fin_frame = generator_frame(ctx, "generate.finish")
        finish = phase(ctx, "generate.finish", kws["finish"][1], [state, ctx_type(ctx, "generate")],
                            fin_frame, "`:finish`")
        frames.append(fin_frame)
        if finish is not None:
            got = check_plist_of_tensors(ctx, finish, "`:finish`")
            out = got if got is not None else PlistType(())
        else:
            out = PlistType(())
    check_generated_names(ctx, out, kws.get("finish", kws["step"])[1], train)
    gen_node = kws.get("finish", kws["step"])[1]
    fin_list = result_node(gen_node.items[2:]) if isinstance(gen_node, ListNode) else None
    if isinstance(fin_list, ListNode) and fin_list.head == "list":
        for k, v in plist_pairs(fin_list):
            ctx.facts.generated[k.name] = ctx.facts.define(
                Definition(k.name, "generated", k.span, v.span, f"generated :{k.name} {out.get(k.name)}"))
    until = None
    if "until" in kws and step is not None:
        until_frame = generator_frame(ctx, "generate.until")
        until = check_until(ctx, kws["until"][1], state, until_frame)
        frames.append(until_frame)
        if until is not None and step is not None:
            writes_past_stops(ctx, step, finish, until, state)
    ctx_keys = set()
    for fr in frames:
        generator_effects(ctx, fr)
        ctx_keys |= {e.name for e in fr.effects if e.kind == "ctx"}
    if step is None:
        return None
    out = PlistType(tuple((k, t.strong() if isinstance(t, TensorType) else t) for k, t in out.entries))
    reward = None
    if "reward" in kws:
        reward, name, t = check_reward(ctx, kws["reward"][1], train, out)
        if name is not None and name not in out.keys:   # (what reads it is checked even after an error)
            out = PlistType(out.entries + ((name, t),))
            reward_names(ctx, kws["reward"], name, reward, train, out)
    return ir.GenerateIR(trips or 0, init, step, finish, state, out, frozenset(ctx_keys), until, reward)


def reward_names(ctx: CheckContext, pair: tuple[Kw, Node], name: str, reward: ir.RewardIR | None,
                 train: ir.LoaderIR, out: PlistType) -> None:
    """The rewards' batch name (`:reward`'s `:name`): defined (kind `reward`: hover and go to definition,
    never renamed, since without `:name` it is written as `defgenerate`'s `:reward` keyword) where it is
    written, and E-GEN-003 when it is a loader's field."""
    kw, node = pair
    span = kw.span
    if isinstance(node, ListNode):
        for i, it in enumerate(node.items[:-1]):
            if isinstance(it, Kw) and it.name == "name":
                span = node.items[i + 1].span
    by = f" (the Python function `{reward.function}`, called by `sexpgpu run` after `:finish`)" if reward else ""
    ctx.facts.generated[name] = ctx.facts.define(
        Definition(name, "reward", span, node.span, f"generated :{name} {out.get(name)}{by}"))
    for ld in [train] + [ctx.loaders[l] for l in _pass_loaders(ctx) if l in ctx.loaders]:
        if any(n == name for n, _, _ in ld.fields):
            ctx.err("E-GEN-003", span, f"the generated name `:{name}` is a field of loader `{ld.name}`",
                    help=f"name the rewards otherwise, e.g. `:name :{name}-python`",
                    related=[Related(ld.span, f"loader `{ld.name}` declares `:{name}`")])
            break


def check_until(ctx: CheckContext, node: Node, state: PlistType, frame: Frame) -> ir.Phase | None:
    """`:until (lambda (state ctx) ...)`: E-GEN-006 unless it returns a bool scalar (`[] bool`).
    The runtime ends the trips once it holds (looking a few trips late, docs/language.md)."""
    ph = phase(ctx, "generate.until", node, [state, ctx_type(ctx, "generate")], frame, "`:until`")
    if ph is None or isinstance(ph.out, ErrorType):
        return None
    if not (isinstance(ph.out, TensorType) and ph.out.shape == () and ph.out.dtype == "bool"):
        ctx.err("E-GEN-006", result_span(ph.body), f"`:until` returns {ph.out.show()}, not a bool scalar `[] bool`",
                help="reduce the rows' flags to one, e.g. `(= (sum (cast done :i32)) rows)` for \"every row is done\"")
        return None
    return ph


def writes_past_stops(ctx: CheckContext, step: ir.Phase, finish: ir.Phase | None, until: ir.Phase,
                      state: PlistType) -> None:
    """W-GEN-002 (a warning): `:until` ends the trips on a per-row stop flag, but `:step` writes an
    entry that reaches the generated fields without reading that flag (`row_stops`), so a stopped
    row keeps changing and an early exit changes the result."""
    flags, writes = unguarded_writes(step, finish, until, state)
    flag = " or ".join(f"`:{k}`" for k in sorted(flags))
    for key, value in writes:
        ctx.report(warning("W-GEN-002", value.span,
                           f"`:step` writes `:{key}` without reading {flag}, the per-row stop `:until` ends on: a "
                           f"stopped row's `:{key}` keeps changing, so the trips an early exit skips would change it",
                           help=f"write it only in the rows not yet stopped, e.g. `(where (expand-dims done :axis -1) "
                                f"(getf state :{key}) new)`, or keep the completion with `stop-rows`"))


def f32_state_under_bf16(ctx: CheckContext, state: PlistType, made: dict[str, Node]) -> None:
    """W-GEN-001 (a hint): under `:precision :bf16`, a state entry `:init` makes `f32` with
    `zeros`, `ones`, `full` or a `cast` (`made`: each key's value in `:init`), which takes twice
    the bytes of a bf16 one: often a cache meant to hold what the bf16 model computes."""
    for k, t in state.entries:
        v = made.get(k)
        if not (isinstance(t, TensorType) and t.dtype == "f32" and isinstance(v, ListNode)
                and v.head in ("zeros", "ones", "full", "cast")):
            continue
        dims = " ".join(map(str, t.shape))
        fix = ("`(cast ... :bf16)`" if v.head == "cast" else f"`({v.head} [{dims}]{' ...' if v.head == 'full' else ''} :bf16)`")
        ctx.report(hint("W-GEN-001", v.span,
                        f"the state entry `:{k}` is `{t.show()}` under `:precision :bf16`: {_bytes(t.nbytes)} a "
                        f"microbatch, twice its {_bytes(t.nbytes // 2)} in bf16",
                        help=f"if it holds what the bf16 model computes, make it bf16 here with {fix}, and cast "
                             "what `:step` writes into it to `:bf16`; keep it `f32` if it accumulates"))


def _bytes(n: int) -> str:
    """`512 B`, `32 KiB`, `1.5 MiB`."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def check_plist_of_tensors(ctx: CheckContext, ph: ir.Phase, what: str) -> PlistType | None:
    """E-GEN-001 unless a phase returns a plist of tensors; returns the plist."""
    t = ph.out
    site = result_span(ph.body)
    if isinstance(t, ErrorType):
        return None
    if not isinstance(t, PlistType):
        ctx.err("E-GEN-001", site, f"{what} returns {t.show()}, not a plist of tensors",
                help="return `(list :name tensor ...)`")
        return None
    ok = True
    for k, v in t.entries:
        if isinstance(v, ErrorType):
            ok = False
        elif not isinstance(v, TensorType):
            ctx.err("E-GEN-001", entry_span(ph.body, k, site),
                    f"{what} returns `:{k}` as {v.show()}; every entry must be a tensor",
                    help="flatten nested plists into entries of their own")
            ok = False
    # An entry already reported stays, typed ERROR, so that reading it later
    # (`getf` in `:step`, `field` in `prepare`) is not reported again.
    return t if ok else PlistType(tuple((k, v if isinstance(v, TensorType) else ERROR) for k, v in t.entries))


def check_across_trips(ctx: CheckContext, step: ir.Phase, state: PlistType, key_defs: dict[str, Definition],
                       node: Node) -> None:
    """E-GEN-002: `:step` (checked as `step`, written at `node`) must return exactly the keys,
    shapes and dtypes `:init` made. A key `:step` adds in place of one it drops, of a near name
    or the one of that type, is one E-GEN-002 saying it looks renamed (a quick fix renames it
    back), not a dropped key and an added one."""
    t = step.out
    site = result_span(step.body)
    if isinstance(t, ErrorType):
        return
    if not isinstance(t, PlistType):
        ctx.err("E-GEN-001", site, f"`:step` returns {t.show()}, not a plist of tensors",
                help="return the next state: " + "`(list " + " ".join(f":{k} ..." for k in state.keys) + ")`")
        return

    def rel(k):
        return [Related(key_defs[k].span, f"`:init` made `:{k}` here")] if k in key_defs else []
    renamed = renamed_keys(state, t)
    key_spans = _result_key_spans(node)
    for new, old in renamed.items():
        want = state.get(old)
        ctx.err("E-GEN-002", key_spans.get(new, entry_span(step.body, new, site)),
                f"`:step` returns `:{new}` where `:init` made `:{old}` ({want.show()}): the key looks renamed",
                related=rel(old), help=f"rename it back to `:{old}`: the state keeps its keys from trip to trip",
                data={"replace": f":{old}", "key": old, "what": "renamed"})
    for k, want in state.entries:
        got = t.get(k)
        if isinstance(want, ErrorType) or k in renamed.values():
            continue
        if got is None:
            ctx.err("E-GEN-002", site, f"`:step` drops `:{k}`, which `:init` made as {want.show()}",
                    related=rel(k), help=f"return `:{k}` in the state, e.g. `:{k} (getf state :{k})`",
                    data={"key": k})
        elif isinstance(got, ErrorType):
            continue
        elif not isinstance(got, TensorType):
            ctx.err("E-GEN-001", entry_span(step.body, k, site),
                    f"`:step` returns `:{k}` as {got.show()}; every entry must be a tensor")
        elif not same_tensor(got, want):
            what = "dtype" if got.shape == want.shape else "shape"
            ctx.err("E-GEN-002", entry_span(step.body, k, site),
                    f"`:step` returns `:{k}` as `{got.strong().show()}`, but `:init` made it `{want.show()}`",
                    related=rel(k),
                    help=(f"cast it back: `(cast ... :{want.dtype})`" if what == "dtype" else
                          "the state has static shapes: write into a fixed-size tensor with `where`"),
                    data={"key": k, "want_dtype": want.dtype, "got_dtype": got.dtype, "what": what})
    for k, got in t.entries:
        if state.get(k) is None and k not in renamed:
            ctx.err("E-GEN-002", entry_span(step.body, k, site),
                    f"`:step` adds `:{k}`, which `:init` did not make",
                    help=f"make `:{k}` in `:init`, or drop it here")


def renamed_keys(state: PlistType, out: PlistType) -> dict[str, str]:
    """The keys `out` (what `:step` returns) adds that stand for keys of `state` it drops: each
    added key to the dropped one, where the names are near (`:rows` for `:row`) or where one key
    is dropped and one added, of the dropped key's shape and dtype."""
    dropped = [k for k in state.keys if out.get(k) is None and isinstance(state.get(k), TensorType)]
    added = [k for k in out.keys if state.get(k) is None]
    pairs: dict[str, str] = {}
    for k in added:
        old = near_miss(k, [d for d in dropped if d not in pairs.values()])
        if old is not None:
            pairs[k] = old
    rest_d = [d for d in dropped if d not in pairs.values()]
    rest_a = [k for k in added if k not in pairs]
    if len(rest_d) == 1 and len(rest_a) == 1:
        got = out.get(rest_a[0])
        if isinstance(got, TensorType) and same_tensor(got, state.get(rest_d[0])):
            pairs[rest_a[0]] = rest_d[0]
    return pairs


def _result_key_spans(node: Node) -> dict[str, Span]:
    """The keys of the `(list ...)` a phase's lambda (`node`) returns, each to its keyword's range."""
    res = result_node(node.items[2:]) if isinstance(node, ListNode) else None
    if isinstance(res, ListNode) and res.head == "list":
        return {k.name: k.span for k, _ in plist_pairs(res)}
    return {}


def check_generated_names(ctx: CheckContext, out: PlistType, node: Node, train: ir.LoaderIR):
    """E-GEN-003: a generated name may not be a field of the training loader or a pass's loader."""
    loaders = [train] + [ctx.loaders[l] for l in _pass_loaders(ctx) if l in ctx.loaders]
    for k, _ in out.entries:
        for ld in loaders:
            if any(n == k for n, _, _ in ld.fields):
                body = node.items[2:] if isinstance(node, ListNode) else ()
                res = result_node(body)
                span = res.span if res is not None else node.span
                if isinstance(res, ListNode) and res.head == "list":
                    for kk, _v in plist_pairs(res):
                        if kk.name == k:
                            span = kk.span
                ctx.err("E-GEN-003", span, f"the generated name `:{k}` is a field of loader `{ld.name}`",
                        help=f"rename it, e.g. `:{k}-generated`, and read that in `prepare`",
                        related=[Related(ld.span, f"loader `{ld.name}` declares `:{k}`")])
                break


def _pass_loaders(ctx: CheckContext):
    out = []
    for f in ctx.forms.get("pass", []):
        for i, it in enumerate(f.items):
            if isinstance(it, Kw) and it.name == "loader" and i + 1 < len(f.items) and isinstance(f.items[i + 1], Sym):
                out.append(f.items[i + 1].name)
    return out


def per_microbatch_keys(ctx: CheckContext) -> tuple[str, ...]:
    """The context keys whose value can differ between the copies of one stacked group: a generator
    that reads one keeps the run unstacked (W-STACK-001; its copies share the first copy's context)."""
    return PER_MICROBATCH_KEYS_CURRICULUM if ctx.forms.get("curriculum") else PER_MICROBATCH_KEYS


def unsalted_fix(ctx: CheckContext, phase: str) -> str:
    """The salt W-RAND-001 suggests in generator phase `phase` (`generate.init`, `.step`, `.finish`):
    new bits every step, and in `:step` every trip too (the step alone would draw the same bits at
    every trip: W-RAND-003), named by the file's own trip parameter."""
    if phase.split(".")[-1] == "step":
        return f"(+ (* (getf ctx :step) 65536) {generator_param(ctx, 'step', 1, 'trip')})"
    return "(getf ctx :step)"


def generator_effects(ctx: CheckContext, frame: Frame):
    """E-GEN-004, E-CONTRACT-010 (`contracts`), W-RAND-001 and W-STACK-001 from what a generator phase does."""
    stacks = ctx.run_ir is not None and (ctx.run_ir.stack > 1 or ctx.run_ir.stack_auto)
    where = f"`:{frame.phase.split('.')[-1]}`"
    for e in frame.effects:
        rel = [Related(e.origin, "reported here")] if e.origin != e.site else []
        if e.kind == "metric":
            ctx.err("E-GEN-004", e.site, f"a `metric` inside {where}: a generator may not report"
                    + (f" (the model it runs reports `:{e.name}`)" if rel else f" `:{e.name}`"),
                    related=rel, help="return the value in the state and report it from `objective`",
                    data={"name": e.name})
        elif e.kind == "counter":
            counter_in_generator(ctx, e, where, rel)
        elif e.kind == "draw" and not e.salted:
            ctx.report(warning("W-RAND-001", e.site, f"an unsalted draw inside {where} draws the same bits "
                               "at every step and microbatch", related=rel,
                               help=f"salt it, e.g. `:salt {unsalted_fix(ctx, frame.phase)}`"))
        elif e.kind == "ctx" and e.name in per_microbatch_keys(ctx) and stacks:
            moves = ("can move between the microbatches of a group (a curriculum stage can end inside one)"
                     if e.name == "stage" else "moves between microbatches")
            ctx.report(warning("W-STACK-001", e.site, f"{where} reads `:{e.name}`, which {moves}, so the "
                               "run stays unstacked", related=rel,
                               help=f"drop the read of `:{e.name}` to let the run stack its microbatches"))
