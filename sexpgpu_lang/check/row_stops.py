"""Per-row stops of a generator: which state entries `:step` writes past a row's stop (W-GEN-002).

A generator that stops rows keeps a per-row flag in its state (`:done`, a
bool tensor with the batch axis) and ends the trips with `:until` once every
row's flag holds. That is only right when a stopped row is frozen: `:until`
looks a few trips late, and an early exit skips the trips a full run would
take, so an entry that still changes after a row's stop makes the result
depend on when the loop noticed (docs/language.md "Ending early", the spec's
"early exit must not change a result's bits"). `unguarded_writes` finds, for
a generator whose `:until` reads such a flag, each entry that reaches the
generated fields (those `:finish` reads, or every entry without `:finish`)
whose new value in `:step` reads no per-row flag: nothing in it can hold a
stopped row still. `check/generate.py` reports them.

This is a dependency test on the typed IR, not a proof: a value that reads
the flag is taken as guarded (`where`, `stop-rows`), and an entry `:step`
passes through unchanged (`(getf state :k)`) never changes.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from .. import ir
from ..types import ErrorType, PlistType, TensorType


def per_row_flags(until: ir.Phase, state: PlistType) -> set[str]:
    """The state keys `:until` reads that are per-row stop flags: bool tensors with a batch axis."""
    keys = _state_reads(until.body, until.params[0])
    if keys is None:
        return set()
    out = set()
    for k in keys:
        t = state.get(k)
        if isinstance(t, TensorType) and t.dtype == "bool" and len(t.shape) >= 1:
            out.add(k)
    return out


def unguarded_writes(step: ir.Phase, finish: ir.Phase | None, until: ir.Phase,
                     state: PlistType) -> tuple[set[str], list[tuple[str, ir.Expr]]]:
    """(the per-row flags `:until` reads, [(key, its value in `:step`)] for each entry reaching the
    generated fields whose value reads none of them); ([], ...) when `:until` reads no per-row flag
    or `:step`'s result is not a `list` the test can follow."""
    flags = per_row_flags(until, state)
    if not flags:
        return flags, []
    reaching = set(state.keys()) if finish is None else _state_reads(finish.body, finish.params[0])
    if reaching is None:
        reaching = set(state.keys())
    found = _result_plist(step.body, {step.params[0]: _STATE})
    if found is None:
        return flags, []
    plist, env = found
    out = []
    for key, value in zip(plist.keys, plist.values):
        if key in flags or key not in reaching or isinstance(value.type, ErrorType):
            continue      # (an error in it is reported already: one cause, one diagnostic)
        if isinstance(value, ir.GetF) and value.key == key and _is_state(value.obj, env):
            continue      # passed through unchanged
        if not _reads(value, env, flags):
            out.append((key, value))
    return flags, out


#: the marker a name bound to the state itself carries in an environment
_STATE = object()


def _is_state(e, env: dict) -> bool:
    return isinstance(e, ir.Var) and env.get(e.name) is _STATE


def _state_reads(body: ir.Expr, param: str) -> set[str] | None:
    """The keys of the state (bound to `param`) that `body` reads with `getf`; None when the state
    itself goes elsewhere (a function's argument: then any key may be read)."""
    keys: set[str] = set()
    stack = [body]
    while stack:
        n = stack.pop()
        if isinstance(n, ir.GetF) and isinstance(n.obj, ir.Var) and n.obj.name == param:
            keys.add(n.key)
            continue
        if isinstance(n, ir.Var) and n.name == param:
            return None
        stack.extend(ir.children(n))
    return keys


def _result_plist(e: ir.Expr, env: dict):
    """The `list` `e` returns, through `let*`s, with the environment its values see: (Plist, env)."""
    while True:
        if isinstance(e, ir.Plist):
            return e, env
        if isinstance(e, ir.Let):
            env = dict(env)
            for name, value in zip(e.names, e.values):
                env[name] = _STATE if _is_state(value, env) else value
            if not e.body:
                return None
            e = e.body[-1]
            continue
        if isinstance(e, ir.Seq) and e.body:
            e = e.body[-1]
            continue
        return None


def _reads(e: ir.Expr, env: dict, flags: set[str], seen: set[int] | None = None) -> bool:
    """Whether `e` reads one of the state's `flags`, following the `let*` names of `env` (each bound
    to its value) and a function's parameters to its arguments."""
    seen = set() if seen is None else seen
    stack = [(e, env)]
    while stack:
        n, en = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, ir.GetF) and _is_state(n.obj, en):
            if n.key in flags:
                return True
            continue
        if isinstance(n, ir.Var):
            v = en.get(n.name)
            if isinstance(v, ir.Expr):
                stack.append((v, en))
            continue
        if isinstance(n, ir.Let):
            inner = dict(en)
            for name, value in zip(n.names, n.values):
                inner[name] = _STATE if _is_state(value, inner) else value
            stack.extend((b, inner) for b in n.body)
            continue
        if isinstance(n, ir.Apply):
            inner = dict(en)
            for name, arg in zip(n.params, n.args):
                inner[name] = _STATE if _is_state(arg, en) else arg
            stack.extend((b, inner) for b in n.body)
            continue
        if isinstance(n, ir.ModelCall):
            stack.extend((a, en) for a in n.args)
            continue
        stack.extend((c, en) for c in ir.children(n))
    return False
