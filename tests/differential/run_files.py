"""Random whole run files (`--phases`): a loader of random fields, a model, a generator whose `:init`,
`:step` and `:finish` and an `objective` hold random compositions; `phase_file` writes one as a
`PhaseFile`, which keeps what it was built from so that JAX can run the same phases directly.

Text and types only (the checker types single compositions, `_typed`); nothing here lowers or
imports JAX.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from sexpgpu_lang.check import check_expression
from sexpgpu_lang.types import TensorType

from .expressions import DTYPES, expr as random_expr


FIELD_SHAPES = [(), (3,), (2, 3), (3, 4), (4,)]
PARAM_SHAPES = [(), (3,), (4,), (3, 4)]
BATCH = 2
STEP_KINDS = ["keep", "keep", "keep", "drift", "raw"]
LOSS_KINDS = ["ok", "ok", "ok", "not-reduced", "not-float", "raw"]
#: The remat policies a file's model or repeated block may have (sexpgpu_lang.language.REMAT_POLICIES).
REMATS = ["nothing-saveable", "dots-saveable", "everything-saveable"]


@dataclass
class PhaseFile:
    """One random run file, and what it was built from, so that JAX can run the same phases directly.

    The loader gives `fields` (per-record types); the model `m` multiplies its parameter `w`
    (`param`) by its argument. `:init` binds each field to its name and makes `init` (state key ->
    expression); `:step` binds each state key to its name, `k` to `(getf ctx :step)` and `p` to
    `(m step_x)`, and returns `step` (key -> expression; a key it drops is absent, one it adds
    present); `:finish`, when there is one, binds the state keys and returns `finish`. `objective`
    reads each field and generated name (`field` or `getf`), binds `p` to `(m obj_x)` and returns `loss`.
    The run has `precision` (under `bf16` a model call computes in bf16) and stacks `stack` microbatches.
    With `layers` (1 or more), `m` is that many layers of a block `layer` (`(repeat layer N)`, its
    scalar parameter `w` stacked `[N]`) each multiplying its carry by its `w`: the carry's dtype may
    change from layer to layer (an integer or bf16 argument times an f32 `w`: E-MODEL-004, and JAX's
    `lax.scan` refuses it too). `remat` (a policy, or "") goes on the `repeat` entry, else on `m`.
    """

    text: str
    step_kind: str
    loss_kind: str
    fields: dict
    param: TensorType
    trips: int
    init: dict
    step: dict
    step_x: str
    finish: dict | None
    obj_x: str
    loss: str
    precision: str = "f32"
    stack: int = 1
    layers: int = 0
    remat: str = ""
    #: `:until`'s expression over the state keys and `k` (or ""), and its kind (`UNTIL_KINDS`)
    until: str = ""
    until_kind: str = "none"


#: How a file ends its trips: no `:until`; `freeze`, the documented pattern (a state key `fz` that
#: only grows, every other key kept once it holds, `:until` the flag); `scalar`, a bool scalar of
#: the state; `raw`, a composition as it comes (a bool scalar or not).
UNTIL_KINDS = ["none", "none", "none", "freeze", "freeze", "scalar", "raw"]


def _until(rng, init: dict, step: dict, state: dict, expr) -> tuple[str, str]:
    """`:until` for a file (`UNTIL_KINDS`): (its kind, its expression). Under `freeze`, adds the flag
    `fz` to `init`, `step` and `state`, and wraps each step value of a state key in
    `(where fz key value)`. Its draws come from a generator seeded by `rng`'s state, which it leaves
    as it was: the rest of each file is the one a seed made before `:until` was covered."""
    rng = random.Random(repr(rng.getstate()[1][:8]))
    kind = rng.choice(UNTIL_KINDS)
    if kind == "none":
        return kind, ""
    if kind == "freeze":
        for key in list(step):
            if key in state:
                step[key] = f"(where fz {key} {step[key]})"
        init["fz"], step["fz"] = "(= 1 2)", f"(or fz (>= trip {rng.randint(0, 2)}))"
        state["fz"] = TensorType((), "bool")
        return kind, "fz"
    env = {k: t for k, t in state.items() if t is not None}
    env.update(k=TensorType((), "i64"))
    if kind == "scalar":
        key = rng.choice(list(env))
        return kind, f"(> ({rng.choice(['mean', 'min', 'max'])} (cast {key} :f32)) {rng.choice(['0.0', '0.5', '-1.0'])})"
    return kind, expr(rng, env, 1, top=True)


def _dims(shape) -> str:
    return "[" + " ".join(map(str, shape)) + "]"


def _typed(text: str, env: dict):
    """The checker's type of one expression over `env` (None when it rejects it)."""
    try:
        e, diags = check_expression(text, env)
    except Exception:  # noqa: BLE001 - judged again as part of the whole file
        return None
    if e is None or any(d.is_error for d in diags) or not isinstance(e.type, TensorType):
        return None
    return e.type


def _broadcasts(src, dst) -> bool:
    return len(src) <= len(dst) and all(a in (1, b) for a, b in zip(reversed(src), reversed(dst)))


def _in_model(t: TensorType, precision: str) -> TensorType:
    """A float parameter or argument as a model sees it: bf16 under `:precision :bf16`."""
    return TensorType(t.shape, "bf16") if precision == "bf16" and t.dtype in ("f32", "bf16", "f16") else t


def _model_type(x: str, env: dict, param: TensorType, precision: str, layers: int = 0):
    """The checker's type of `(m x)`: the parameter times `x`, each as the model sees it; with
    `layers`, None unless that keeps the carry's type (the argument's, as the model sees it)."""
    xt = _in_model(env.get(x, TensorType((), "f32", True)), precision)
    t = _typed("(* w x)", {"w": _in_model(param, precision), "x": xt})
    if layers and t is not None and not xt.weak and (t.shape, t.dtype) != (xt.shape, xt.dtype):
        return None
    return t


def _model_arg(rng, env: dict, param: TensorType, precision: str = "f32", layers: int = 0) -> str:
    """A name `(m x)` multiplies the parameter by, preferring one the checker accepts (else `1.0`)."""
    names = list(env)
    rng.shuffle(names)
    ok = [n for n in names if _model_type(n, env, param, precision, layers) is not None]
    if ok and rng.random() < 0.9:
        return ok[0]
    return names[0] if names and rng.random() < 0.5 else "1.0"


def _keep(rng, text: str, t, want: TensorType, key: str) -> str:
    """`text` (of checker type `t`, or None) made into a value of type `want`, the state key's."""
    if t is None:
        return key if rng.random() < 0.5 else text
    if t.shape != want.shape:
        text = (f"(broadcast-to {text} {_dims(want.shape)})" if _broadcasts(t.shape, want.shape) and rng.random() < 0.7
                else f"(broadcast-to ({rng.choice(['sum', 'mean', 'max'])} (cast {text} :f32)) {_dims(want.shape)})")
    if t.dtype != want.dtype or t.weak or rng.random() < 0.2:
        text = f"(cast {text} :{want.dtype})"
    if rng.random() < 0.3:
        text = f"(where (> trip {rng.randint(0, 2)}) {text} {key})"
    return text


def _drift(rng, text: str, want: TensorType) -> str:
    """A value of another type than `want`: another dtype, or another shape."""
    r = rng.random()
    if r < 0.4:
        return f"(cast {text} :{rng.choice([d for d in ('f32', 'bf16', 'i32', 'i64', 'bool') if d != want.dtype])})"
    if r < 0.6:
        return f"(expand-dims {text} :axis 0)"
    if r < 0.8 and want.shape:
        return f"(broadcast-to (mean (cast {text} :f32)) {_dims(want.shape[1:])})"
    return f"(+ {text} {rng.choice(['1.0', '(cast trip :i64)', '(cast 1 :i64)', 'k'])})"


def phase_file(rng: random.Random, depth: int = 2) -> PhaseFile:
    """A random run file whose `:step` and `objective` hold random compositions of the registry's ops.

    Mostly (`typed`) each composition is one the checker types alone, so that what is wrong with a
    file, if anything, is how its phases fit: a `:step` that keeps the state (`keep`: each value made
    into its key's shape and dtype with `broadcast-to`, a reduction, `cast`, `where` on the trip),
    that changes one key's dtype or shape or drops or adds a key (`drift`), or that returns
    compositions as they come (`raw`); a loss reduced to an f32 scalar with the parameter in it
    (`ok`), not reduced, cast to a non-float (or bf16) dtype, or a composition as it comes (`raw`).
    Otherwise compositions are taken as they come, ill-typed or not.
    """
    typed = rng.random() < 0.85

    def expr(rng, env, depth, top=True):
        for _ in range(30 if typed else 1):
            text = random_expr(rng, env, depth, top=top)
            if _typed(text, env) is not None:
                break
        return text
    fields = {f"f{i}": TensorType(rng.choice(FIELD_SHAPES), rng.choice(DTYPES)) for i in range(rng.randint(1, 3))}
    batch = {k: TensorType((BATCH,) + t.shape, t.dtype) for k, t in fields.items()}
    layers = rng.randint(1, 3) if rng.random() < 0.3 else 0
    param = TensorType(() if layers else rng.choice(PARAM_SHAPES), "f32")   # a repeated layer keeps its carry's shape
    remat = rng.choice(REMATS) if rng.random() < 0.5 else ""
    precision = "bf16" if rng.random() < 0.2 else "f32"
    stack = 2 if rng.random() < 0.2 else 1
    trips = rng.randint(1, 3)
    init = {}
    for i in range(rng.randint(1, 3)):
        init[f"s{i}"] = rng.choice(list(batch)) if rng.random() < 0.4 else expr(rng, batch, depth, top=True)
    state = {k: _typed(e, batch) for k, e in init.items()}
    state = {k: (t.strong() if t is not None else None) for k, t in state.items()}
    step_kind = rng.choice(STEP_KINDS)
    env = {k: t for k, t in state.items() if t is not None}
    env.update(trip=TensorType((), "i64"), k=TensorType((), "i64"))
    step_x = _model_arg(rng, {n: t for n, t in env.items() if n != "k"}, param, precision, layers)
    p = _model_type(step_x, env, param, precision)
    if p is not None:
        env["p"] = p
    step = {}
    for key in init:
        text = key if rng.random() < 0.3 else expr(rng, env, depth, top=True)
        if step_kind == "raw":
            step[key] = text
        elif state[key] is None:
            step[key] = key
        else:
            step[key] = _keep(rng, text, _typed(text, env), state[key], key)
    if step_kind == "drift":
        key = rng.choice(list(init))
        r = rng.random()
        if r < 0.15:
            del step[key]
        elif r < 0.3:
            step["extra"] = key
        elif state[key] is not None:
            step[key] = _drift(rng, step[key], state[key])
    until_kind, until = _until(rng, init, step, state, expr)
    finish = None
    if rng.random() < 0.5:
        senv = {k: t for k, t in state.items() if t is not None} or {"s0": TensorType((), "f32")}
        finish = {f"g{i}": expr(rng, senv, depth, top=True) if rng.random() < 0.7 else rng.choice(list(init))
                  for i in range(rng.randint(1, 2))}
    out_types = state if finish is None else {k: _typed(e, {k2: t for k2, t in state.items() if t is not None})
                                              for k, e in finish.items()}
    oenv = dict(batch)
    oenv.update({k: t for k, t in out_types.items() if t is not None})
    obj_x = _model_arg(rng, oenv, param, precision, layers)
    p = _model_type(obj_x, oenv, param, precision)
    if p is not None:
        oenv["p"] = p
    loss_kind = rng.choice(LOSS_KINDS)
    e = expr(rng, oenv, depth, top=True)
    pl = "(mean (cast p :f32))"
    loss = {"ok": f"(+ ({rng.choice(['mean', 'sum', 'max'])} (cast {e} :f32)) {pl})",
            "not-reduced": f"(+ (cast {e} :f32) {pl})",
            "not-float": f"(cast (+ (mean (cast {e} :f32)) {pl}) :{rng.choice(['i32', 'i64', 'bool', 'bf16'])})",
            "raw": e}[loss_kind]
    generated = list(finish or init)
    text = phase_text(fields, param, trips, init, step, step_x, finish, generated, obj_x, loss, rng, precision, stack,
                      layers, remat, until)
    return PhaseFile(text, step_kind, loss_kind, fields, param, trips, init, step, step_x, finish, obj_x, loss,
                     precision, stack, layers, remat, until, until_kind)


def model_text(param: TensorType, layers: int = 0, remat: str = "") -> list[str]:
    """The lines of model `m`: `(* w x)`, or `layers` layers of it as a repeated block; `remat` on the
    `repeat` entry, else on `m`."""
    policy = f" :remat :{remat}" if remat else ""
    if not layers:
        return ["(defmodel m" + policy,
                f"  :params (:w (normal {_dims(param.shape)} :std 0.1))",
                "  :apply (lambda (self x) (* (getf self :w) x)))"]
    return ["(defmodel layer",
            f"  :params (:w (normal {_dims(param.shape)} :std 0.1))",
            "  :apply (lambda (self h) (* (getf self :w) h)))",
            "",
            "(defmodel m",
            f"  :params (:layers (repeat layer {layers}{policy}))",
            "  :apply (lambda (self x) (layer x)))"]


def phase_text(fields, param, trips, init, step, step_x, finish, generated, obj_x, loss, rng,
               precision="f32", stack=1, layers=0, remat="", until="") -> str:
    def plist(d):
        return "(list " + " ".join(f":{k} {v}" for k, v in d.items()) + ")"

    state_binds = " ".join(f"({k} (getf state :{k}))" for k in init)
    reads = " ".join(f"({k} ({rng.choice(['field', 'getf'])} batch :{k}))" for k in list(fields) + generated)
    lines = [
        "(loader train",
        '  :source (npz "d.npz")',
        f"  :batch {BATCH}",
        "  :fields (" + " ".join(f":{k} {_dims(t.shape)} :{t.dtype}" for k, t in fields.items()) + "))",
        "",
        *model_text(param, layers, remat),
        "",
        "(model m)",
        "",
        f"(defgenerate :trips {trips}",
        "  :init (lambda (batch ctx)",
        "          (let* (" + " ".join(f"({k} (field batch :{k}))" for k in fields) + ")",
        f"            {plist(init)}))",
        "  :step (lambda (state trip ctx)",
        f"          (let* ({state_binds} (k (getf ctx :step)) (p (m {step_x})))",
        f"            {plist(step)}))",
    ]
    if until:
        lines += ["  :until (lambda (state ctx)",
                  f"           (let* ({state_binds} (k (getf ctx :step)))",
                  f"             {until}))"]
    if finish is not None:
        lines += ["  :finish (lambda (state ctx)",
                  f"            (let* ({state_binds})",
                  f"              {plist(finish)}))"]
    lines[-1] += ")"
    lines += ["",
              "(objective (lambda (batch ctx)",
              f"  (let* ({reads} (p (m {obj_x})))",
              f"    {loss})))",
              "",
              f"(run :loader train :steps 1 :microbatches {stack} :stack {stack} :precision :{precision} :seed 0",
              "     :optimizer (adam :lr 1e-3))", ""]
    return "\n".join(lines)
