"""A model's entry points beside `:apply` (`:entries`): several functions over one set of parameters.

`(defmodel lm :params (...) :apply (lambda (self row) ...) :entries (:decode (lambda (self tok cache pos) ...)))`
gives `lm` a second function, called `(lm :decode tok cache pos)` (or `(model :decode ...)`): a
training forward and a one-position decode step with a cache share the parameters, which still
belong to the one model (docs/dev/design.md#forms-and-the-context). Each entry is a
lambda taking `self` first, checked where it is called for the argument types it is given, as
`:apply` is; hover on the keyword at a call shows the entry's parameters. `read_entries` reads
`:entries` when the model is built (`models._build_model`); `entry_call` picks the lambda a call
names (`infer.call_model`).

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

import dataclasses

from ..diagnostics import Related
from ..syntax import Kw, ListNode, Node
from .context import CheckContext, near_miss
from .facts import Definition


def read_entries(ctx: CheckContext, name: str, node: Node) -> dict[str, tuple[ListNode, Definition]]:
    """`:entries (:key (lambda (self ...) ...) ...)` of model `name`: each entry's lambda and
    definition by key (E-FORM-002 for a value that is not a lambda taking `self` first; `apply` is `:apply`'s name)."""
    from .infer import lambda_params   # (infer imports this module for `entry_call`)
    from .keywords import keyword_args
    out: dict[str, tuple[ListNode, Definition]] = {}
    if not isinstance(node, ListNode) or (node.items and not isinstance(node.items[0], Kw)):
        ctx.err("E-FORM-002", node.span, "`:entries` takes `(:name (lambda (self x ...) ...) ...)`")
        return out
    for key, (kw, lam) in keyword_args(ctx, node, 0, None, ":entries").items():
        if key == "apply":
            ctx.err("E-FORM-002", kw.span, f"`:apply` of `{name}` is its own keyword, not an entry",
                    help="give the entry another name, e.g. `:decode`")
            continue
        params = lambda_params(ctx, lam, None, f"entry `:{key}` of `{name}`")
        if params is None:
            continue
        if not params:
            ctx.err("E-FORM-003", lam.span, f"entry `:{key}` takes `self` first: `(lambda (self x) ...)`")
            continue
        shown = " ".join(p.name for p in params)
        d = ctx.facts.define(Definition(key, "entry", kw.span, lam.span,
                                        f"({name} :{key} {' '.join(p.name for p in params[1:])})".replace(" )", ")")
                                        + f"  ; (lambda ({shown}) ...)"))
        out[key] = (lam, d)
        ctx.facts.entries.setdefault(name, {})[key] = d.detail
    return out


def entry_call(ctx: CheckContext, node: ListNode, name: str, m: dict) -> tuple[ListNode | None, tuple, str]:
    """The lambda a call of model `name` runs, the argument nodes it is given, and its label:
    `(lm x ...)` is `:apply`; `(lm :key x ...)` the entry `:key` (E-NAME-004 for an entry the
    model does not have, with the nearest one). (None, args, label) after an error."""
    items = node.items[1:]
    if items and isinstance(items[0], Kw):
        kw = items[0]
        if kw.name not in m["entries"]:
            hint = near_miss(kw.name, m["entries"])
            known = ", ".join(f"`:{k}`" for k in m["entries"])
            ctx.err("E-NAME-004", kw.span, f"model `{name}` has no entry `:{kw.name}`"
                    + (f"; did you mean `:{hint}`?" if hint else ""),
                    help=(f"its entries are {known}" if known else f"declare it: `:entries (:{kw.name} (lambda (self ...) ...))`")
                    + f"; `({name} x ...)` runs `:apply`", data={"replace": f":{hint}"} if hint else None)
            return None, tuple(items[1:]), kw.name
        lam, d = m["entries"][kw.name]
        ctx.facts.uses.append((kw.span, d))
        return lam, tuple(items[1:]), kw.name
    return m["apply"], tuple(items), "apply"


def called_here(ctx: CheckContext, before: int, call: ListNode, name: str, entry: str, arg_types: list) -> None:
    """Each error the body of model `name`'s `entry` (`apply` or an `:entries` key) gave for these
    argument types (the diagnostics from `before` on) gets the call that passed them as a related
    place, `(name :entry ...)` with each argument's type: the mistake may be the caller's. Called from
    inside a standard-library function's body (`ctx.redirect`), the place is the user's call of it."""
    shown = f"`({name}{'' if entry == 'apply' else ' :' + entry} ...)` is called here with " + \
        ", ".join(t.show() for t in arg_types)
    at = call.span
    if ctx.redirect is not None:
        # A call in a standard-library body (prelude.sx, not this file): the place is the user's
        # call of that function, which passed the model.
        call_span, fn, _ = ctx.redirect
        shown = f"`{fn}` (standard library) calls `({name}{'' if entry == 'apply' else ' :' + entry} ...)` " \
            "from here with " + ", ".join(t.show() for t in arg_types)
        at = call_span
    for i in range(before, len(ctx.diags)):
        d = ctx.diags[i]
        if d.is_error and not any(r.span == at for r in d.related):
            ctx.diags[i] = dataclasses.replace(d, related=d.related + (Related(at, shown),))
