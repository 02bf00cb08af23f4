"""Quick fixes: the edits that fix the diagnostics overlapping a range (a near miss, a generator's
dtype or dropped key, a counter outside `prepare`, a metric inside the generator).

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

import re

from ..diagnostics import Diagnostic
from ..source import Span
from ..syntax import Kw, ListNode, Node, plist_pairs
from ..types import TensorType
from .index import Index, param_name
from .results import Edit, Fix

_REST_OF_LINE = re.compile(r"[ \t]*(\r\n|\r|\n)?")


def quick_fixes(ix: Index, span: Span) -> list[Fix]:
    """Fixes for the diagnostics that overlap `span`:

    * a near miss (`data["replace"]`): replace the name with the suggestion;
    * E-GEN-002 on a dtype: remove the entry's own `cast` when what it casts
      has the dtype `:init` made, else wrap the entry in `(cast ... :dtype)`
      with that dtype; E-GEN-002 for a dropped key: return it unchanged;
    * E-CONFIG-004 on a call's settings: each number written at the call
      becomes config.json's value, each top-level `def` it names is bound with
      `checkpoint-config` (`data["config_edits"]`);
    * E-CONTRACT-010: move the counter into `prepare` (making one if the
      file has none);
    * E-GEN-004: return the value from the generator (in the state, or as a
      generated name from `:finish`), pass it through `prepare`, and report
      it from `objective` (docs/dev/design.md#generation).
    """
    out: list[Fix] = []
    for d in ix.result.diagnostics:
        if not (d.span.start <= span.end and span.start <= d.span.end):
            continue
        try:
            out.extend(_fixes_for(ix, d))
        except (IndexError, KeyError, ValueError, AttributeError):  # a fix is optional: never fail the request
            continue
    return out


def _fixes_for(ix: Index, d: Diagnostic) -> list[Fix]:
    data = d.data or {}
    out = []
    if data.get("replace"):
        new = data["replace"]
        old = ix.text[d.span.start:d.span.end]
        out.append(Fix(f"replace `{old}` with `{new}`", d, (Edit(d.span, new),), True))
    if d.code == "E-GEN-002" and data.get("what") == "dtype" and data.get("want_dtype"):
        out.append(_cast_back(ix, d, data["want_dtype"], data.get("key", "")))
    elif d.code == "E-GEN-002" and "what" not in data and data.get("key") in ix.facts.state_keys:
        key = data["key"]
        res = ix.phase_result("generate.step")
        state = param_name(ix.phase_node("generate.step"), 0, "state")
        if res is not None:
            out.append(Fix(f"return `:{key}` unchanged", d, (_append_entry(ix, res, key, f"(getf {state} :{key})"),)))
    if d.code == "E-CONFIG-004" and data.get("config_edits"):
        edits = tuple(Edit(Span(a, b), text) for a, b, text in sorted(data["config_edits"], key=lambda e: -e[0]))
        out.append(Fix("use the checkpoint's config.json values", d, edits, True))
    if d.code == "E-CONTRACT-010":
        fix = _move_counter(ix, d)
        if fix is not None:
            out.append(fix)
    if d.code == "E-GEN-004":
        fix = _report_from_objective(ix, d)
        if fix is not None:
            out.append(fix)
    return out


def _cast_back(ix: Index, d: Diagnostic, want: str, key: str) -> Fix:
    """E-GEN-002 on a dtype: an entry that is a `cast` loses it when what it
    casts has the dtype `:init` made (`(cast x :f32)` of an i32 `x` becomes
    `x`), else casts to that dtype instead; any other entry is cast back,
    `(cast ... :i32)`."""
    node = ix.node(d.span)
    if isinstance(node, ListNode) and node.head == "cast" and len(node.items) == 3 and isinstance(node.items[2], Kw):
        operand, dtype = node.items[1], node.items[2]
        inner = ix.type_at(operand)
        if isinstance(inner, TensorType) and inner.dtype == want and not inner.weak:
            return Fix(f"remove the cast of `:{key}` to {dtype.name}", d,
                       (Edit(d.span, ix.text[operand.span.start:operand.span.end]),), True)
        return Fix(f"cast `:{key}` to {want} instead of {dtype.name}", d, (Edit(dtype.span, f":{want}"),), True)
    old = ix.text[d.span.start:d.span.end]
    return Fix(f"cast `:{key}` back to {want}", d, (Edit(d.span, f"(cast {old} :{want})"),), True)


def _append_entry(ix: Index, lst: ListNode, key: str, value: str) -> Edit:
    """Add `:key value` at the end of a `(list ...)`, on a line of its own, under the first
    key, when the list has its pairs on several lines or its closing brackets on a line
    of their own (which stay where they are)."""
    at = lst.span.end - 1 if lst.closed else lst.span.end
    src = ix.result.source
    pairs = plist_pairs(lst)
    own_line = len(lst.items) > 1 and not ix.line_indent(at)[1].strip()
    if pairs and (own_line or src.line_col(pairs[0][0].span.start)[0] != src.line_col(pairs[-1][0].span.start)[0]):
        col = src.line_col(pairs[0][0].span.start)[1]
        end = lst.items[-1].span.end if own_line else at
        return Edit(Span(end, end), f"{ix.eol()}{' ' * col}:{key} {value}")
    return Edit(Span(at, at), f" :{key} {value}")


def _delete_statement(ix: Index, span: Span) -> Edit:
    """Delete a form and the layout around it: its whole line when it stands alone."""
    text = ix.text
    line_start, before = ix.line_indent(span.start)
    m = _REST_OF_LINE.match(text, span.end)
    if not before.strip() and (m.group(1) or m.end() == len(text)):
        return Edit(Span(line_start, m.end()), "")
    start = span.start
    while start > 0 and text[start - 1] in " \t\r\n":
        start -= 1
    return Edit(Span(start, span.end), "")


def _insert_before(ix: Index, node: Node, stmt: str) -> Edit:
    """Insert a statement before a body item, on its own line with its indentation."""
    line_start, before = ix.line_indent(node.span.start)
    if not before.strip():
        return Edit(Span(line_start, line_start), f"{before}{stmt}{ix.eol()}")
    return Edit(Span(node.span.start, node.span.start), f"{stmt} ")


def _origin_form(ix: Index, d: Diagnostic, head: str) -> ListNode | None:
    """The form a generator effect reports: the diagnostic's own range, unless a model reports it."""
    if d.related:
        return None
    node = ix.node(d.span)
    return node if isinstance(node, ListNode) and node.head == head else None


def _move_counter(ix: Index, d: Diagnostic) -> Fix | None:
    counter = _origin_form(ix, d, "counter")
    if counter is None:
        return None
    stmt = ix.text[counter.span.start:counter.span.end]
    prep = ix.phase_node("prepare")
    edits = [_delete_statement(ix, counter.span)]
    if prep is not None:
        body = _result_siblings(prep.items[2:])
        if not body:
            return None
        edits.append(_insert_before(ix, body[-1], stmt))
    else:
        objective = next((f for f in ix.forms if isinstance(f, ListNode) and f.head == "objective"), None)
        if objective is None:
            return None
        eol = ix.eol()
        new = f"(prepare (lambda (batch ctx){eol}  {stmt}{eol}  batch)){eol}{eol}"
        edits.append(Edit(Span(objective.span.start, objective.span.start), new))
    return Fix("move the counter into `prepare`", d, tuple(sorted(edits, key=lambda e: e.span.start)))


def _report_from_objective(ix: Index, d: Diagnostic) -> Fix | None:
    metric = _origin_form(ix, d, "metric")
    if metric is None or len(metric.items) != 3 or not isinstance(metric.items[1], Kw):
        return None
    name = metric.items[1].name
    value = metric.items[2]
    t = ix.type_at(value)
    phase = ix.phase_at(metric.span.start)
    if not isinstance(t, TensorType) or phase not in ("generate.init", "generate.step", "generate.finish"):
        return None
    if name in ix.facts.state_keys or name in ix.facts.generated or \
            any(name in fs for fs in ix.facts.loader_fields.values()):
        return None
    vtext = ix.text[value.span.start:value.span.end]
    init, step, finish = (ix.phase_result(f"generate.{p}") for p in ("init", "step", "finish"))
    has_finish = ix.phase_node("generate.finish") is not None
    edits = [_delete_statement(ix, metric.span)]

    def carry(phase_name: str) -> str:
        return f"(getf {param_name(ix.phase_node(phase_name), 0, 'state')} :{name})"

    t = t.strong()
    zeros = f"(zeros [{' '.join(map(str, t.shape))}] :{t.dtype})"
    plan = {"generate.init": [(init, vtext), (step, carry("generate.step"))],
            "generate.step": [(init, zeros), (step, vtext)],
            "generate.finish": [(finish, vtext)]}[phase]
    if phase != "generate.finish" and has_finish:
        plan.append((finish, carry("generate.finish")))
    for lst, text in plan:
        if lst is None:
            return None
        edits.append(_append_entry(ix, lst, name, text))
    prep = ix.phase_result("prepare")
    obj = ix.phase_node("objective")
    inputs = param_name(obj, 0, "inputs")
    if ix.phase_node("prepare") is not None:
        if prep is None:
            return None
        batch = param_name(ix.phase_node("prepare"), 0, "batch")
        edits.append(_append_entry(ix, prep, name, f"(field {batch} :{name})"))
    if obj is not None:
        body = _result_siblings(obj.items[2:])
        if body:
            edits.append(_insert_before(ix, body[-1], f"(metric :{name} (getf {inputs} :{name}))"))
    edits.sort(key=lambda e: e.span.start)
    for a, b in zip(edits, edits[1:]):
        if a.span.end > b.span.start:
            return None
    return Fix(f"return `:{name}` from the generator and report it from `objective`", d, tuple(edits))


def _result_siblings(body: tuple[Node, ...]) -> tuple[Node, ...]:
    """The body (a lambda's, or the innermost `let*`'s) whose last item is the result."""
    while body and isinstance(body[-1], ListNode) and body[-1].head == "let*" and len(body[-1].items) >= 3:
        body = body[-1].items[2:]
    return body
