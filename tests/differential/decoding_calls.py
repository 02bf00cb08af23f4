"""Random calls of the decoding ops (`dynamic-slice`, `dynamic-update-slice`, `at-set`) for
`expressions.expr` (their operands, start indices and sizes), and the deliberate differences from
JAX they bring, as the fields of `rules.Rule` (name, code, pattern, reason, example, names): rules.py
appends them to `STRICT` and `LENIENT`. decoding.py has their JAX side.

Text only: nothing here checks, lowers or imports JAX.
"""
from __future__ import annotations

import random

#: The operand shape of a generated call: the random shapes (), (3,), (3 4), (2 3 4) broadcast to it.
OPERAND = "[2 3 4]"
#: Rejected by the checker, lowered by JAX (`rules.STRICT`).
STRICT_DECODING = [
    ("constant-starts-in-range", "E-SHAPE-003", r"puts a window of \d+ outside the axis|^`at-set`: index -?\d+ is outside",
         "`lax.dynamic_slice` and `dynamic_update_slice` clamp a start so that the window fits, and `x.at[i].set` "
         "drops an update out of range; a constant start or index known to be outside is a mistake, not a request "
         "to read or write somewhere else", "(dynamic-slice x [3 0] [2 4])", "x:[4 4]f32"),
    ("at-set-keeps-dtype", "E-TYPE-002", r"^`at-set`: the value is .* writing it would change",
         "`x.at[i].set(v)` casts v to x's dtype silently (a float written into an integer tensor is truncated); "
         "the value must already fit x's dtype", "(at-set i [0] 2.5)", "i:[4]i32"),
]

#: Accepted and lowered, refused by the JAX function a user calls (`rules.LENIENT`).
LENIENT_DECODING = [
    ("start-index-dtypes", None, r"index arguments to dynamic_(update_)?slice must be integers of the same type",
         "the start indices may mix integer dtypes (the trip is `i64`, a position `i32`); the runtime casts them "
         "to `i32`, where `lax.dynamic_slice` wants one dtype", "(dynamic-slice x [n m] [1 4])", "x:[4 4]f32 n:[]i64 m:[]i32"),
]

#: The ops `decoding_args` writes the arguments of.
DECODING_OPS = frozenset({"dynamic-slice", "dynamic-update-slice", "at-set"})


def decoding_args(name: str, rng: random.Random, sub) -> list[str] | None:
    """The arguments of a random call of `name` (`sub()` a random subexpression), or None for an op
    of another family: an operand broadcast to `OPERAND`, starts that are literals (sometimes out of the
    clamping range) or traced integer scalars, static sizes."""
    def start() -> str:
        r = rng.random()
        if r < 0.6:
            return str(rng.randint(0, 3))
        if r < 0.8:
            return f"(cast (sum {sub()}) :i32)"
        return str(rng.randint(-1, 1))

    if name == "dynamic-slice":
        sizes = [rng.randint(1, d) for d in (2, 3, 4)]
        return [f"(broadcast-to {sub()} {OPERAND})", "[" + " ".join(start() for _ in range(3)) + "]",
                "[" + " ".join(map(str, sizes)) + "]"]
    if name == "dynamic-update-slice":
        sizes = [rng.randint(1, d) for d in (2, 3, 4)]
        dt = rng.choice(["f32", "f32", "i32", "bf16"])
        return [f"(cast (broadcast-to {sub()} {OPERAND}) :f32)", f"(cast (broadcast-to {sub()} [{' '.join(map(str, sizes))}]) :{dt})",
                "[" + " ".join(start() for _ in range(3)) + "]"]
    if name == "at-set":
        n = rng.randint(1, 2)
        return [f"(broadcast-to {sub()} {OPERAND})", "[" + " ".join(start() for _ in range(n)) + "]", sub()]
    return None


#: The faults of an ill-typed call of each decoding op (faults.py's `OP_FAULTS` takes them).
DECODING_FAULTS = {
    "dynamic-slice": ["start-out-of-range", "start-count", "float-start", "start-not-scalar", "size-too-large",
                      "size-count"],
    "dynamic-update-slice": ["start-out-of-range", "start-count", "float-start", "update-too-large",
                             "update-dtype", "update-rank"],
    "at-set": ["index-out-of-range", "too-many-indices", "float-start", "value-clash", "value-dtype"],
}


def decoding_ill(b, op: str, fault) -> tuple[list[str], list[str]]:
    """The arguments and keywords of a call of `op` with `fault` (None: well-typed), built with
    faults.py's `Builder` `b`: an operand of rank 1 to 3, starts or indices, sizes or an update."""
    rng = b.rng
    s = tuple(rng.choice([2, 3, 4]) for _ in range(rng.randint(1, 3)))
    r = len(s)
    dt = rng.choice(["f32", "bf16", "i32", "i64"])
    x = b.t(s, dt)

    def starts(n, hi):
        out = [str(rng.randint(0, max(h, 0))) if rng.random() < 0.6 else b.t((), "i32", wrap=False) for h in hi[:n]]
        out += ["0"] * (n - len(out))
        if fault == "float-start" and out:
            out[rng.randrange(len(out))] = b.t((), "f32", wrap=False)
        if fault == "start-not-scalar" and out:
            out[rng.randrange(len(out))] = b.t((2,), "i32", wrap=False)
        if fault in ("start-out-of-range", "index-out-of-range") and out:
            k = rng.randrange(len(out))
            out[k] = str(s[k] + rng.randint(0, 2) if k < r else 9)
        return "[" + " ".join(out) + "]"

    if op == "dynamic-slice":
        sizes = [rng.randint(1, d) for d in s]
        if fault == "size-too-large":
            sizes[rng.randrange(r)] += 3
        if fault == "size-count":
            sizes = sizes + [1]
        n = r + (1 if fault == "start-count" else 0)
        return [x, starts(n, [d - z for d, z in zip(s, sizes)]), "[" + " ".join(map(str, sizes)) + "]"], []
    if op == "dynamic-update-slice":
        us = [rng.randint(1, d) for d in s]
        if fault == "update-too-large":
            us[rng.randrange(r)] += 2
        if fault == "update-rank":
            us = us + [1]
        udt = rng.choice([t for t in ("f32", "i32", "bf16") if t != dt]) if fault == "update-dtype" else dt
        n = r + (1 if fault == "start-count" else 0)
        return [x, b.t(tuple(us), udt), starts(n, [d - u for d, u in zip(s, us)])], []
    k = rng.randint(1, r) + (r if fault == "too-many-indices" else 0)
    rest = s[min(k, r):]
    vshape = rest if rng.random() < 0.5 else ()
    if fault == "value-clash":
        vshape = (5,)
    vdt = "f32" if fault == "value-dtype" and dt in ("i32", "i64") else (dt if rng.random() < 0.7 else rng.choice(["i32", "f32"]))
    return [x, starts(k, [d - 1 for d in s]), b.t(vshape, vdt)], []
