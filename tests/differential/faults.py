"""Ill-typed calls (the ill-typed direction): a call of each op with one fault drawn from its family's
(shapes that do not broadcast, an axis out of range, a bad dtype, a negative size...) or a generic one
(arity, an unknown keyword, a string or a vector for a tensor); `ill_typed` writes one.

Text and the names' types only: nothing here checks, lowers or imports JAX.
"""
from __future__ import annotations

import random

from sexpgpu_lang.ops import REGISTRY

from .decoding_calls import DECODING_FAULTS, DECODING_OPS, decoding_ill
from sexpgpu_lang.types import TensorType


NUMERIC = ["f32", "bf16", "i32", "i64"]
FLOATS = ["f32", "bf16"]
INTS = ["i32", "i64"]
BAD_DTYPES = ["f64", "int32", "float", "u8", "x"]


class Builder:
    """Names bound to chosen types, for one program; `t` returns a name, sometimes wrapped in a
    type-preserving op, so the faulty call's operands are themselves compositions."""

    def __init__(self, rng: random.Random):
        self.rng, self.env = rng, {}

    def t(self, shape, dtype, wrap=True) -> str:
        name = "abcdefghijklmnopqrstuvwxyz"[len(self.env)]
        self.env[name] = TensorType(tuple(shape), dtype)
        r = self.rng.random() if wrap else 1.0
        if r < 0.15:
            return f"(stop-gradient {name})"
        if r < 0.25 and len(shape) >= 1:
            return f"(reshape {name} [{' '.join(map(str, shape))}])"
        if r < 0.32 and dtype != "bool":
            return f"(cast {name} :{dtype})"
        return name

    def shape(self, lo=0, hi=3):
        """Sizes 2 to 4, now and then 0 (an empty tensor)."""
        return tuple(self.rng.choice([2, 3, 4] * 10 + [0]) for _ in range(self.rng.randint(lo, hi)))

    def partner(self, s):
        """A shape that broadcasts with `s`."""
        k = self.rng.randint(0, len(s))
        return tuple(1 if self.rng.random() < 0.3 else d for d in s[len(s) - k:])

    def clash(self, s):
        """A shape that does not broadcast with `s` (rank >= 1)."""
        k = self.rng.randint(1, len(s))
        out = list(s[len(s) - k:])
        j = self.rng.randrange(len(out))
        out[j] = {0: 2, 4: 5}.get(out[j], out[j] + 1)
        return tuple(out)

    def pick(self, xs):
        return self.rng.choice(xs)


def _vec(dims) -> str:
    return "[" + " ".join(map(str, dims)) + "]"


def _bad_axis(rng, rank: int) -> int:
    return rng.choice([rank, rank + 1, -rank - 1])


def _axis_kw(b: Builder, fault: str | None, rank: int, *, name="axis") -> list[str]:
    """`:axis` (or `:axes`) for an op over `rank` axes, right, or wrong the way `fault` says."""
    rng = b.rng
    if fault == "axis-out-of-range":
        v = _bad_axis(rng, rank)
        return [f":{name} " + (f"[{v}]" if name == "axes" else str(v))]
    if fault == "axis-not-constant":
        return [f":{name} " + b.t((), "i32", wrap=False)]
    if fault == "axis-float":
        return [f":{name} 1.5"]
    if fault == "axes-repeated" and name == "axes" and rank:
        a = rng.randrange(rank)
        return [f":axes [{a} {a - rank}]"]
    if rank == 0 or rng.random() < 0.4:
        return []
    if name == "axes":
        return [f":axes [{' '.join(str(a) for a in sorted(rng.sample(range(rank), rng.randint(1, rank))))}]"]
    return [f":axis {rng.randint(-rank, rank - 1)}"]


AXIS_FAULTS = ["axis-out-of-range", "axis-not-constant", "axis-float"]


def _elementwise(b: Builder, op: str, fault):
    n = {"+": 2, "*": 2, "-": 2, "and": 2, "or": 2, "not": 1, "where": 3}.get(op, REGISTRY[op].min_args)
    s = b.shape()
    logic, compare = op in ("and", "or", "not"), op in ("=", "!=", "<", "<=", ">", ">=")
    dts = ["bool"] if logic else (NUMERIC + ["bool"] if compare else NUMERIC)
    dt = b.pick(dts)
    shapes = [s] + [b.partner(s) for _ in range(n - 1)]
    dtypes = [dt] * n
    if op == "where":
        dtypes[0] = "bool"
        dtypes[1:] = [b.pick(NUMERIC), b.pick(NUMERIC)]
    if fault == "shapes-clash" and s and n > 1:
        shapes[b.rng.randrange(1, n)] = b.clash(s)
    elif fault == "bool-operand":
        dtypes[b.rng.randrange(n)] = "bool"
    elif fault == "not-bool" :
        dtypes[0] = b.pick(NUMERIC)
    elif fault == "int-operand":
        dtypes[b.rng.randrange(n)] = b.pick(INTS)
    args = [b.t(sh, d) for sh, d in zip(shapes, dtypes)]
    if fault == "literal-operand":
        args[b.rng.randrange(n)] = b.pick(["2", "-1.5", "true", "2147483648", "-2147483649"])
    if fault == "negative-power":
        args[1] = b.pick(["-1", "-2"])
    return args, []


def _reduction(b: Builder, op: str, fault):
    arg = op in ("argmax", "argmin", "cumsum")   # along one `:axis`, not over `:axes`
    s = b.shape(0 if not arg else 1, 3) if fault != "scalar" else ()
    if fault == "empty-axis":
        s = (0,) + b.shape(0, 2)
        return [b.t(s, b.pick(NUMERIC))], [":axis 0" if arg else ":axes [0]"]
    x = b.t(s, b.pick(NUMERIC if fault != "bool-operand" else ["bool"]))
    kws = _axis_kw(b, fault, len(s), name="axis" if arg else "axes")
    if fault == "keepdims-not-bool":
        kws.append(f":keepdims {b.pick(['1', '0.5', b.t((), 'bool', wrap=False)])}")
    elif b.rng.random() < 0.3 and op != "cumsum":
        kws.append(f":keepdims {b.pick(['true', 'false'])}")
    return [x], kws


def _unary_network(b: Builder, op: str, fault):
    s = b.shape(1, 3) if fault != "scalar" else ()
    dt = "bool" if fault == "bool-operand" else b.pick(NUMERIC)
    return [b.t(s, dt)], _axis_kw(b, fault, len(s))


def _sortish(b: Builder, op: str, fault):
    args, kws = _unary_network(b, op, fault)
    if fault == "keepdims-not-bool":
        kws.append(f":descending {b.pick(['1', '0.5'])}")
    return args, kws


def _shape_op(b: Builder, op: str, fault):
    if op in DECODING_OPS:   # dynamic-slice, dynamic-update-slice, at-set (decoding_calls.py)
        return decoding_ill(b, op, fault)
    rng = b.rng
    s = b.shape(1, 3) if fault != "scalar" else ()
    r = len(s)
    dt = b.pick(NUMERIC + ["bool"])
    if op == "reshape":
        x = b.t(s, dt)
        n = 1
        for d in s:
            n *= d
        if fault == "size-mismatch":
            return [x, _vec((n + 1,))], []
        if fault == "two-wildcards":
            return [x, "[-1 -1]"], []
        if fault == "negative-size":
            return [x, _vec((-n,))], []
        if fault == "not-constant":
            return [x, b.t((1,), "i32", wrap=False)], []
        return [x, rng.choice([_vec(s[::-1]), "[-1]", _vec((n,))])], []
    if op == "transpose":
        x = b.t(s, dt)
        perm = list(range(r))
        rng.shuffle(perm)
        if fault == "not-a-permutation":
            perm = perm[:-1] if rng.random() < 0.5 else perm + [0]
        elif fault == "axis-out-of-range":
            perm[0] = _bad_axis(rng, r)
        return ([x, _vec(perm)] if rng.random() < 0.8 or fault else [x]), []
    if op in ("concat", "stack"):
        k = rng.randint(1, 3)
        shapes = [s] * k
        ax = rng.randrange(r + (op == "stack")) if r + (op == "stack") else 0
        if op == "concat" and r:
            shapes = [s[:ax] + (rng.choice([1, 2, 3]),) + s[ax + 1:] for _ in range(k)]
        if fault == "shapes-clash":
            shapes = shapes[:1] + [b.clash(shapes[0]) if rng.random() < 0.5 else shapes[0] + (2,)]
        if fault == "empty":
            return ["[]"], []
        if fault == "not-a-vector":
            return [b.t(s, dt)], []
        items = [b.t(sh, b.pick(NUMERIC) if rng.random() < 0.3 else dt) for sh in shapes]
        kws = _axis_kw(b, fault, r + (op == "stack")) if fault in AXIS_FAULTS else [f":axis {ax}"]
        return ["[" + " ".join(items) + "]"], kws
    if op == "expand-dims":
        return [b.t(s, dt)], _axis_kw(b, fault, r + 1)
    if op == "squeeze":
        j = rng.randrange(r + 1)
        s1 = s[:j] + (1,) + s[j:]
        x = b.t(s1, dt)
        if fault == "not-size-one" and r:
            k = rng.choice([k for k, d in enumerate(s1) if d != 1])
            return [x], [f":axes [{k}]"]
        if fault in AXIS_FAULTS + ["axes-repeated"]:
            return [x], _axis_kw(b, fault, r + 1, name="axes")
        return [x], ([f":axes [{j}]"] if rng.random() < 0.6 else [])
    if op == "broadcast-to":
        p = b.partner(s)
        x = b.t(p, dt)
        if fault == "shapes-clash":
            return [b.t(b.clash(s), dt)], []
        if fault == "negative-size":
            return [x, _vec(s[:-1] + (-1,))], []
        if fault == "not-constant":
            return [x, b.t((r,), "i32", wrap=False)], []
        if fault == "rank-down" and p:
            return [b.t(s + (2,), dt), _vec(s)], []
        return [x, _vec(s)], []
    if op == "slice":
        ax = rng.randrange(r) if r else 0
        n = s[ax] if r else 0
        start, end = rng.randint(0, n), None
        end = rng.randint(start, n)
        if fault == "out-of-range":
            start, end = rng.choice([(0, n + 1), (n, n + 2), (-n - 1, n), (2, 1)])
        kws = _axis_kw(b, fault, r) if fault in AXIS_FAULTS else [f":axis {ax}"]
        if fault == "not-constant":
            kws.append(":start " + b.t((), "i32", wrap=False))
        else:
            kws += [f":start {start}", f":end {end}"]
        return [b.t(s, dt)], kws
    if op in ("take", "take-along-axis"):
        x = b.t(s, dt)
        ax = rng.randrange(r) if r else 0
        along = op == "take-along-axis"
        ishape = tuple(d if k != ax else rng.choice([1, 2, 3]) for k, d in enumerate(s)) if along else b.shape(0, 2)
        idt = b.pick(INTS)
        if fault == "float-indices":
            idt = b.pick(FLOATS + ["bool"])
        if fault == "rank-mismatch":
            ishape = ishape + (2,)
        if fault == "shapes-clash" and along and r > 1:
            k = rng.choice([k for k in range(r) if k != ax])
            ishape = ishape[:k] + (ishape[k] + 1,) + ishape[k + 1:]
        idx = b.t(ishape, idt)
        if fault == "static-index-out-of-range" and not along and r:
            idx = _vec([0, s[ax] + rng.randint(0, 2)])
        elif not along and rng.random() < 0.3 and r and s[ax]:
            idx = _vec([rng.randrange(s[ax]) for _ in range(rng.randint(1, 3))])
        kws = _axis_kw(b, fault, r) if fault in AXIS_FAULTS else [f":axis {ax}"]
        return [x, idx], kws
    if op == "one-hot":
        idt = b.pick(FLOATS) if fault == "float-indices" else b.pick(INTS)
        n = {"zero-size": 0, "negative-size": -2}.get(fault, rng.randint(1, 5))
        kws = [f":dtype :{b.pick(BAD_DTYPES)}"] if fault == "bad-dtype" else ([f":dtype :{b.pick(NUMERIC)}"] if rng.random() < 0.3 else [])
        nn = b.t((), "i32", wrap=False) if fault == "not-constant" else str(n)
        return [b.t(b.shape(0, 2), idt), nn], kws
    if op in ("iota", "zeros", "ones", "full", "uniform", "normal"):
        dims = list(b.shape(0 if op not in ("iota",) else 1, 3))
        if fault == "negative-size" and dims:
            dims[rng.randrange(len(dims))] = rng.choice([-1, -2])
        shape = _vec(dims) if fault != "not-constant" else b.t((max(len(dims), 1),), "i32", wrap=False)
        args, kws = [shape], []
        if op == "full":
            vs = () if fault != "not-scalar" else b.shape(1, 2)
            args.append(b.t(vs, b.pick(NUMERIC)) if rng.random() < 0.7 else b.pick(["2", "0.5"]))
        if op == "iota":
            kws += _axis_kw(b, fault, len(dims)) if fault in AXIS_FAULTS else []
        dtypes = FLOATS if op in ("uniform", "normal") else NUMERIC + ["bool"]
        if fault == "bad-dtype":
            dtypes = BAD_DTYPES
        if fault == "int-dtype":
            dtypes = INTS + ["bool"]
        if rng.random() < 0.5 or fault in ("bad-dtype", "int-dtype"):
            d = b.pick(dtypes)
            if op in ("zeros", "ones", "full") and rng.random() < 0.5:
                args.append(f":{d}")
            else:
                kws.append(f":dtype :{d}")
        if op in ("uniform", "normal"):
            kws += _salt(b, fault)
            if fault == "param-not-constant":
                kws.append(f":{b.pick(['min', 'max'] if op == 'uniform' else ['std', 'mean'])} " + b.t((), "f32", wrap=False))
        return args, kws
    if op == "axis-size":
        x = b.t(s, dt)
        if fault == "axis-out-of-range":
            return [x, str(_bad_axis(rng, r))], []
        if fault == "axis-not-constant":
            return [x, b.t((), "i32", wrap=False)], []
        return [x, str(rng.randint(-r, r - 1) if r else 0)], []
    if op == "size":
        return [b.t(s, dt)], []
    raise KeyError(op)


def _salt(b: Builder, fault) -> list[str]:
    if fault == "salt-float":
        return [f":salt {b.pick(['0.5', b.t((), 'f32', wrap=False)])}"]
    if fault == "salt-not-scalar":
        return [":salt " + b.t((2,), "i32", wrap=False)]
    return [f":salt {b.pick(['1', b.t((), 'i32', wrap=False)])}"] if b.rng.random() < 0.8 else []


def _linalg(b: Builder, op: str, fault):
    rng = b.rng
    m, k, n = (rng.choice([2, 3, 4]) for _ in range(3))
    dt = [b.pick(NUMERIC), b.pick(NUMERIC)]
    if op == "matmul":
        batch = b.shape(0, 1)
        sa, sb = batch + (m, k), (k, n)
        if rng.random() < 0.2:
            sa = (k,)
        if rng.random() < 0.2:
            sb = (k,)
        if fault == "inner-mismatch":
            sb = (k + 1,) + sb[1:]
        elif fault == "scalar":
            sa = ()
        elif fault == "shapes-clash":
            sa, sb = (2, m, k), (3, k, n)
        return [b.t(sa, dt[0]), b.t(sb, dt[1])], []
    # einsum
    spec, shapes = rng.choice([("ij,jk->ik", [(m, k), (k, n)]), ("ij->ji", [(m, k)]), ("i,i->", [(k,), (k,)]),
                               ("bij,bjk->bik", [(2, m, k), (2, k, n)]), ("ij->", [(m, k)])])
    if fault == "operand-count":
        shapes = shapes + [shapes[0]] if rng.random() < 0.5 else shapes[:-1]
    elif fault == "rank-mismatch":
        shapes = [shapes[0] + (2,)] + shapes[1:]
    elif fault == "shapes-clash" and "," in spec:
        shapes = [shapes[0], tuple(d + 1 if d != 2 else 5 for d in shapes[1])]
    elif fault == "bad-output":
        spec = spec.split("->")[0] + "->" + rng.choice(["z", "iz", "ii"])
    elif fault == "implicit-output":
        spec = spec.split("->")[0]
    elif fault == "ellipsis":
        spec = "..." + spec.replace(",", ",...").replace("->", "->...")
    elif fault == "not-a-string":
        return [":ij"] + [b.t(s, b.pick(NUMERIC)) for s in shapes], []
    return [f'"{spec}"'] + [b.t(s, b.pick(NUMERIC)) for s in shapes], []


def _network(b: Builder, op: str, fault):
    rng = b.rng
    if op in ("softmax", "log-softmax"):
        return _unary_network(b, op, fault)
    if op == "cross-entropy":
        lead = b.shape(0, 2)
        v = rng.choice([2, 3, 4])
        lg_dt, lb_dt = b.pick(FLOATS), b.pick(INTS)
        lg, lb = lead + (v,), lead
        if fault == "int-operand":
            lg_dt = b.pick(INTS)
        elif fault == "float-indices":
            lb_dt = b.pick(FLOATS)
        elif fault == "shapes-clash":
            lb = lead + (v,) if rng.random() < 0.5 else (lead[:-1] + (lead[-1] + 1,) if lead else (2,))
        elif fault == "scalar":
            lg = ()
        return [b.t(lg, lg_dt), b.t(lb, lb_dt)], []
    raise KeyError(op)


def _selection(b: Builder, op: str, fault):
    rng = b.rng
    if op in ("sort", "argsort"):
        return _sortish(b, op, fault)
    s = b.shape(1, 3) if fault != "scalar" else ()
    k = rng.randint(1, s[-1]) if s and s[-1] else 1
    if fault == "k-out-of-range":
        k = rng.choice([0, -1, (s[-1] if s else 0) + 1])
    kk = b.t((), "i32", wrap=False) if fault == "not-constant" else str(k)
    return [b.t(s, b.pick(NUMERIC)), kk], []


def _misc(b: Builder, op: str, fault):
    rng = b.rng
    s = b.shape()
    if op == "cast":
        d = b.pick(BAD_DTYPES) if fault == "bad-dtype" else b.pick(NUMERIC + ["bool"])
        return [b.t(s, b.pick(NUMERIC + ["bool"])), f":{d}" if fault != "not-a-dtype" else "1"], []
    if op == "stop-gradient":
        if fault == "plist-operand":
            return [f"(top-k {b.t((3,), 'f32')} 2)"], []
        return [b.t(s, b.pick(NUMERIC + ["bool"]))], []
    if op == "categorical":
        lg = b.shape(1, 3) if fault != "scalar" else ()
        if fault == "empty-axis":
            lg = b.shape(0, 2) + (0,)
        dt = b.pick(INTS + ["bool"]) if fault == "int-operand" else b.pick(FLOATS)
        kws = _salt(b, fault)
        if fault == "temperature-not-scalar":
            kws.append(":temperature " + b.t((2,), "f32", wrap=False))
        elif rng.random() < 0.3:
            kws.append(":temperature 0.5")
        return [b.t(lg, dt)], kws
    if op == "dot-product-attention":
        return _attention(b, fault)
    if op == "bernoulli":
        p = b.pick(["1", "0", b.t(s, b.pick(INTS + ["bool"]))]) if fault == "int-operand" else b.t(s, b.pick(FLOATS))
        return [p], _salt(b, fault)
    raise KeyError(op)


def _attention(b: Builder, fault):
    """Query [B T N H], key and value [B S K H] (S is never 1 or N, so a fourth positional operand,
    JAX's `bias`, is refused by JAX too), with one fault: heads that do not group, a head width or
    a value that differs, two dtypes, a mask that is not bool or does not broadcast to [B N T S]."""
    rng = b.rng
    bt, t, n, h = 2, rng.choice([2, 3]), 4, 4
    s, kh = 3, rng.choice([1, 2, 4])
    dq = dk = b.pick(FLOATS)
    qs, ks, vs = (bt, t, n, h), (bt, s, kh, h), (bt, s, kh, h)
    if fault == "heads-not-grouped":
        ks = vs = (bt, s, 3, h)
    elif fault == "width-mismatch":
        ks = vs = (bt, s, kh, h + 1)
    elif fault == "value-mismatch":
        vs = (bt, s + 1, kh, h)
    elif fault == "two-dtypes":
        dk = "bf16" if dq == "f32" else "f32"
    args = [b.t(qs, dq), b.t(ks, dk), b.t(vs, dk)]
    kws = [f":causal {rng.choice(['true', 'false'])}"] if rng.random() < 0.5 else []
    if fault in ("mask-not-bool", "mask-clash") or rng.random() < 0.3:
        shape = rng.choice([(t, s), (bt, 1, t, s), (s,)])
        if fault == "mask-clash":
            shape = rng.choice([(t, s + 1), (bt, 3, t, s), (t + 2, s)])
        kws.append(":mask " + b.t(shape, b.pick(NUMERIC) if fault == "mask-not-bool" else "bool"))
    if rng.random() < 0.3:
        kws.append(f":scale {rng.choice(['0.5', '2'])}")
    return args, kws


#: Each op's family: the template that builds a well-typed call of it and the faults that make it
#: ill-typed (besides the ones every op gets: GENERIC_FAULTS).
FAMILIES = {
    "elementwise": (_elementwise, None),   # by arity and kind: elementwise_faults
    "reduction": (_reduction, AXIS_FAULTS + ["axes-repeated", "keepdims-not-bool", "scalar", "bool-operand", "empty-axis"]),
    "shape": (_shape_op, None),   # per op: OP_FAULTS
    "linalg": (_linalg, ["inner-mismatch", "scalar", "shapes-clash", "operand-count", "rank-mismatch", "bad-output",
                         "implicit-output", "ellipsis", "not-a-string"]),
    "network": (_network, AXIS_FAULTS + ["scalar", "bool-operand", "int-operand", "float-indices", "shapes-clash"]),
    "selection": (_selection, AXIS_FAULTS + ["scalar", "k-out-of-range", "not-constant", "keepdims-not-bool",
                                             "bool-operand"]),
    "misc": (_misc, None),    # per op: OP_FAULTS
}
#: The faults of each op of the families whose ops differ too much to share a list (the draws
#: `uniform` and `normal` use the shape ops' template).
OP_FAULTS = {
    "cast": ["bad-dtype", "not-a-dtype"],
    "stop-gradient": ["plist-operand"],
    "categorical": ["scalar", "int-operand", "temperature-not-scalar", "salt-float", "salt-not-scalar", "empty-axis"],
    "bernoulli": ["int-operand", "salt-float", "salt-not-scalar"],
    "dot-product-attention": ["heads-not-grouped", "width-mismatch", "value-mismatch", "two-dtypes", "mask-not-bool",
                              "mask-clash"],
    "reshape": ["size-mismatch", "two-wildcards", "negative-size", "not-constant"],
    "transpose": ["not-a-permutation", "axis-out-of-range"],
    "concat": AXIS_FAULTS + ["shapes-clash", "empty", "not-a-vector", "scalar"],
    "stack": AXIS_FAULTS + ["shapes-clash", "empty", "not-a-vector"],
    "expand-dims": AXIS_FAULTS,
    "squeeze": AXIS_FAULTS + ["axes-repeated", "not-size-one"],
    "broadcast-to": ["shapes-clash", "negative-size", "not-constant", "rank-down"],
    "slice": AXIS_FAULTS + ["out-of-range", "not-constant", "scalar"],
    "take": AXIS_FAULTS + ["float-indices", "static-index-out-of-range", "scalar"],
    "take-along-axis": AXIS_FAULTS + ["float-indices", "rank-mismatch", "shapes-clash", "scalar"],
    "one-hot": ["float-indices", "zero-size", "negative-size", "bad-dtype", "not-constant"],
    "iota": AXIS_FAULTS + ["negative-size", "bad-dtype", "not-constant", "int-dtype"],
    "zeros": ["negative-size", "bad-dtype", "not-constant"],
    "ones": ["negative-size", "bad-dtype", "not-constant"],
    "full": ["negative-size", "bad-dtype", "not-constant", "not-scalar"],
    "uniform": ["negative-size", "bad-dtype", "not-constant", "param-not-constant", "int-dtype", "salt-float",
                "salt-not-scalar"],
    "normal": ["negative-size", "bad-dtype", "not-constant", "param-not-constant", "int-dtype", "salt-float",
               "salt-not-scalar"],
    "axis-size": ["axis-out-of-range", "axis-not-constant", "scalar"],
    "size": ["scalar"],
}
OP_FAULTS.update(DECODING_FAULTS)
GENERIC_FAULTS = ["too-few-arguments", "too-many-arguments", "unknown-keyword", "string-operand", "vector-operand"]


def elementwise_faults(op: str) -> list[str]:
    if op in ("and", "or", "not", "where"):
        return ["shapes-clash", "not-bool", "int-operand", "literal-operand"][op == "not":]
    if op in ("=", "!=", "<", "<=", ">", ">="):
        return ["shapes-clash", "literal-operand"]
    if REGISTRY[op].min_args == 1 and op not in ("+", "*", "-"):
        return ["bool-operand", "literal-operand"]
    return ["shapes-clash", "bool-operand", "literal-operand"] + (["negative-power"] if op == "pow" else [])


def family_of(op: str) -> str:
    spec = REGISTRY[op]
    if op in ("cast", "stop-gradient", "categorical", "bernoulli", "dot-product-attention"):
        return "misc"
    if op in ("uniform", "normal"):
        return "shape"
    if spec.family == "tensor":
        return "elementwise"
    return spec.family


def ill_typed(rng: random.Random, op: str | None = None) -> tuple[str, dict, str, str]:
    """A call of `op` (random when None) with one fault: (text, names' types, op, fault).

    The fault is one of the op's family's (a clash of shapes, a bool operand, an axis out of
    range...) or a generic one (arity, an unknown keyword, a string or vector for a tensor); some faults
    do not apply to every op of a family, and those programs come out well-typed, which the
    benchmark counts as accepted.
    """
    op = op or rng.choice(sorted(REGISTRY))
    template, faults = FAMILIES[family_of(op)]
    faults = faults or (elementwise_faults(op) if template is _elementwise else OP_FAULTS[op])
    fault = rng.choice(faults + GENERIC_FAULTS)
    b = Builder(rng)
    args, kws = template(b, op, None if fault in GENERIC_FAULTS else fault)
    spec = REGISTRY[op]
    if fault == "too-few-arguments":
        args = args[:max(spec.min_args - 1, 0)] if spec.min_args else args
    elif fault == "too-many-arguments":
        args = args + [args[-1]] * ((spec.max_args or len(args)) + 1 - len(args)) if spec.max_args is not None else args
    elif fault == "unknown-keyword":
        kws = kws + [rng.choice([":bogus 1", ":salt 1", ":dtype :f32", ":axis 0", ":keepdims true"])]
    elif fault == "string-operand" and args:
        args = ['"x"'] + args[1:]
    elif fault == "vector-operand" and args:
        args = [rng.choice(["[0 1]", "[2]", "[]"])] + args[1:]
    text = "(" + " ".join([op] + args + kws) + ")"
    if rng.random() < 0.3 and op != "top-k":
        text = rng.choice(["(stop-gradient {})", "(expand-dims {} :axis 0)", "(size {})"]).format(text)
    return text, b.env, op, fault
