"""The top level of a file: which form each list is, the order the forms are checked in, the result.

`check_file(ctx)` sorts the file's lists into top-level forms (E-FORM-004
for anything else, read as its near miss when there is one; E-NAME-002 for
a second form of a kind a file has one of), checks them in the order the
runtime runs them (`def`s, loaders, models, `run`, the generator,
`prepare` and `objective`, the passes, the curriculum, `run`'s `:samples`), reports the
required forms the file lacks (E-FORM-001) and builds the `CheckResult`.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from ..cancel import Cancelled
from ..diagnostics import Related
from ..language import REQUIRED_FORMS, SINGLE_FORMS, TOP_FORMS
from ..source import Span
from ..syntax import Kw, ListNode, Sym, walk
from .context import CheckContext, listed, near_miss
from .facts import CheckResult
from .forms import top_curriculum, top_def, top_loader, top_run
from .generate import top_generate
from .models import build_model, collect_params, declare_model, gradient_free_params, top_model_binding
from .one_form import expand_one_forms, strip_facts
from .phases import shown_metrics, top_passes, top_train
from .program import program
from .samples import top_samples


def check_file(ctx: CheckContext, build_ir: bool = True) -> CheckResult:
    """Check every form in the runtime's order and build the result (the IR only when there is no
    error, and only with `build_ir`: the language server needs none)."""
    ctx.build_ir = build_ir
    try:
        result = _check_forms(ctx, build_ir)
    except Cancelled:
        raise   # (the cache keeps what it had and what this check added: entries are verified on use)
    except BaseException:
        if ctx.cache is not None:
            ctx.cache.rotate()
        raise
    if ctx.cache is not None:
        ctx.cache.rotate()
    return result


def _check_forms(ctx: CheckContext, build_ir: bool) -> CheckResult:
    # A run of items outside any form (a form that lost its `(`, say) is reported at
    # its first item only, up to the next form.
    stray = False
    for n, form in enumerate(ctx.parsed.forms):
        if not n & 255:
            ctx.poll()
        if isinstance(form, ListNode) and not form.items and not form.closed:
            continue   # a lone `(`: its E-SYNTAX-001 says all there is to say
        if isinstance(form, ListNode) and not form.closed and not form.head:
            continue   # `((a` left unclosed: a list all the same; its E-SYNTAX-001 is the cause
        if not isinstance(form, ListNode) or not form.head:
            if not stray and isinstance(form, Sym) and form.name in TOP_FORMS:
                ctx.lost_heads.add(form.name)
                ctx.err("E-FORM-004", form.span, f"`{form.name}` is outside any list: the form has lost its `(`",
                        help=f"write `({form.name}` in column 1")
            elif not stray:
                ctx.err("E-FORM-004", form.span, "a top-level form must be a list like `(def name value)`",
                        help="if a form lost its `(`, put it back; what follows up to the next form is not reported again")
            stray = True
            continue
        head = form.head
        if head not in TOP_FORMS:
            hint = near_miss(head, TOP_FORMS)
            if stray and hint is None:
                continue
            stray = False
            ctx.err("E-FORM-004", form.items[0].span, f"unknown top-level form `{head}`"
                    + (f"; did you mean `{hint}`?" if hint else ""),
                    data={"replace": hint} if hint else None)
            if hint is None:
                continue
            # Check it as the form it most likely is, so that what it defines
            # is not reported again as missing or unbound.
            head = hint
        stray = False
        ctx.forms.setdefault(head, []).append(form)
        ctx.facts.calls[(form.span.start, form.span.end)] = head
    for head in SINGLE_FORMS:
        for extra in ctx.forms.get(head, [])[1:]:
            first = ctx.forms[head][0]
            ctx.err("E-NAME-002", extra.items[0].span, f"a second `{head}` form; a run file has one",
                    related=[Related(first.items[0].span, "the first one")])
    scan_counters(ctx)
    for f in ctx.forms.get("def", []):
        ctx.poll()
        top_def(ctx, f)
    for f in ctx.forms.get("loader", []):
        ctx.poll()
        top_loader(ctx, f)
    expand_one_forms(ctx)   # `(defmodel NAME :pretrained "dir")`: the written-out model its family's record makes
    for f in ctx.forms.get("defmodel", []):
        ctx.poll()
        declare_model(ctx, f)
    top_model_binding(ctx)
    for f in ctx.forms.get("defmodel", []):
        ctx.poll()
        build_model(ctx, f)
    ctx.tracker.models_built()
    collect_params(ctx)
    top_run(ctx)
    train = ctx.loaders.get(ctx.run_ir.loader) if ctx.run_ir else None
    if train is None and ctx.loaders and ctx.forms.get("run"):
        # `run` is broken (reported already): check the phases against the first loader
        # rather than not at all, so their own mistakes still show.
        train = next(iter(ctx.loaders.values()))
    ctx.poll()
    gen = top_generate(ctx, train)
    ctx.poll()
    prepare, objective = top_train(ctx, train, gen)
    if objective is not None and not any(d.is_error for d in ctx.diags):
        gradient_free_params(ctx, objective, gen)
    ctx.poll()
    passes = top_passes(ctx, train, gen)
    shown_metrics(ctx, objective)   # `:log (:show [...])`: metrics `objective` reports
    top_curriculum(ctx, train)
    top_samples(ctx, train, gen, prepare, objective)   # `run`'s `:samples`: names of the batch and phases
    ctx.poll()
    if ctx.stated_configs:   # each `:pretrained` model against its config.json, its bodies' values folded
        from .config import compare_configs   # (with hf_config: imported only where a file reads a config.json)
        compare_configs(ctx, gen)
    missing_forms(ctx)
    strip_facts(ctx)
    ctx.diags.sort(key=lambda d: (d.span.start, d.code))
    built = None
    if build_ir and not any(d.is_error for d in ctx.diags) and objective is not None and ctx.run_ir and train:
        built = program(ctx, gen, prepare, objective, passes)
    return CheckResult(ctx.src, ctx.parsed, ctx.diags, ctx.facts, built)


def missing_forms(ctx: CheckContext):
    """E-FORM-001 naming every required top-level form the file lacks."""
    # One diagnostic naming every missing form, at the first form's `(` (or the start of
    # a file with no form): several at one range would be merged into the first by `report`.
    needs = REQUIRED_FORMS
    if any(isinstance(f, ListNode) and not f.closed for f in ctx.parsed.forms):
        return   # an unclosed form (E-SYNTAX-001) may hold what looks missing: the file is being written
    if any(d.code == "E-SYNTAX-006" for d in ctx.parsed.diagnostics):
        return   # a file past TOKEN_LIMIT is not read: its one line says so
    missing = [h for h in needs if h not in ctx.forms and h not in ctx.lost_heads]
    if not missing:
        return
    start = ctx.parsed.forms[0].span.start if ctx.parsed.forms else 0
    ctx.err("E-FORM-001", Span(start, start + 1 if ctx.parsed.forms else start),
            f"the file has no {listed([f'`{h}`' for h in missing])} form", help="; ".join(needs[h] for h in missing))


def scan_counters(ctx: CheckContext):
    """The names `prepare` declares with `counter` (read before the generator is checked, for its nil reasons)."""
    names = []
    for f in ctx.forms.get("prepare", []):
        for n in walk(f):
            if isinstance(n, ListNode) and n.head == "counter" and len(n.items) > 1 and isinstance(n.items[1], Kw):
                names.append(n.items[1].name)
    ctx.counter_names = tuple(dict.fromkeys(names))
    ctx.facts.counters = ctx.counter_names
