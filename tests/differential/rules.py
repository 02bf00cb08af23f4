"""Where the checker differs from JAX by design: `STRICT` (the checker rejects, JAX lowers), `LENIENT`
(the checker accepts, JAX's function refuses), and for whole run files `PHASE_STRICT` and
`PHASE_LENIENT`; each rule with its reason and an example (docs/language.md lists them,
tests/test_differential.py checks each example). The `*_rule` functions find the rule that
explains a difference, reading the lists here at each call.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from sexpgpu_lang.types import TensorType

from .decoding_calls import LENIENT_DECODING, STRICT_DECODING
from .run_files import PhaseFile


@dataclass(frozen=True)
class Rule:
    """A deliberate difference from JAX: `name`; for a strict rule the diagnostic `code` and a
    `pattern` of its message, for a lenient one a `pattern` of JAX's error; why; and an example
    (text and names' types, written `name:[dims]dtype`) that the test checks shows the difference."""

    name: str
    code: str | None
    pattern: str
    reason: str
    example: str
    names: str = ""


#: The checker rejects, JAX traces and lowers: the language is stricter by design. Listed in
#: docs/language.md ("Where the checker is stricter than JAX"); tests/test_differential.py checks
#: that each example is rejected with the rule's code and that JAX lowers it.
STRICT = [
    Rule("bool-arithmetic", "E-TYPE-002", r"needs numbers, got bool",
         "JAX computes with bool as 0 and 1 (`jnp.add` of two masks is their `or`, `jnp.exp(True)` is e, "
         "`softmax` of a mask is not refused everywhere); in a run file that is a missing comparison or `cast`",
         "(+ m m)", "m:[4]bool"),
    Rule("logic-needs-bool", "E-TYPE-002", r"^`(and|or|not)` needs bool operands",
         "`jnp.logical_and`/`or`/`not` read any number as a truth value (nonzero is true); the language asks "
         "for a comparison, so a float or integer tensor is not taken for a mask", "(not x)", "x:[4]f32"),
    Rule("where-needs-bool", "E-TYPE-002", r"^`where` needs a bool condition",
         "`jnp.where` treats a nonzero number as true; the condition must be a comparison",
         "(where (- i 1) x 0)", "i:[4]i32 x:[4]f32"),
    Rule("integer-indices", "E-TYPE-002", r"needs integer indices",
         "`jax.nn.one_hot` compares float indices with `arange` (2.5 gives a row of zeros), `jnp.take` "
         "takes bool indices as 0 and 1; indices must be i32 or i64", "(one-hot x 4)", "x:[2]f32"),
    Rule("float-logits", "E-TYPE-002", r"^`categorical` needs float logits",
         "`jax.random.categorical` refuses bool logits, but divided by a `:temperature` they are floats (0 and 2) "
         "and JAX draws from them; the logits must be float whatever the temperature",
         "(categorical m :salt 1 :temperature 0.5)", "m:[2 3]bool"),
    Rule("integer-salt", "E-TYPE-002", r"`:salt` must be an integer scalar",
         "`jax.random.fold_in` converts a float salt to an integer (0.5 and 0 give the same bits)",
         "(uniform [2] :salt 0.5)"),
    Rule("boolean-flags", "E-TYPE-003", r"must be `true` or `false`",
         "JAX reads `keepdims` and `descending` as Python truth values (1, 0.5); the language takes `true` or `false`",
         "(sum x :keepdims 1)", "x:[2 3]f32"),
    Rule("dtype-names", "E-TYPE-002", r"needs a dtype, one of",
         "a dtype is one of the language's six (`bool i32 i64 f16 bf16 f32`); NumPy's names are refused even "
         "where JAX takes them (`:float32`; `:float` is float64 in NumPy), with a suggestion",
         "(cast x :float32)", "x:[2]i32"),
    Rule("full-scalar-value", "E-SHAPE-005", r"^`full` needs a scalar value",
         "`jnp.full` broadcasts a tensor value to the shape; the language keeps that for `broadcast-to`",
         "(full [2 3] v)", "v:[3]f32"),
    Rule("non-empty-selection", None, r"^`top-k`: k = 0 |^`one-hot` needs 1 or more classes, got 0",
         "`lax.top_k(x, 0)` and `jax.nn.one_hot(i, 0)` give empty tensors; selecting nothing is taken for a mistake",
         "(top-k x 0)", "x:[4]f32"),
    Rule("stop-gradient-of-a-tensor", "E-TYPE-001", r"^`stop-gradient` needs a tensor",
         "`lax.stop_gradient` maps over any pytree; in the language ops take tensors, so a plist's entries are "
         "stopped one by one", "(stop-gradient (top-k x 2))", "x:[4]f32"),
    Rule("explicit-einsum-output", "E-FORM-002", r"need an explicit `->` output",
         "`jnp.einsum` without `->` outputs the letters that appear once, in alphabetical order, which hides "
         "the summed axes", '(einsum "ij,jk" a b)', "a:[2 3]f32 b:[3 4]f32"),
    Rule("no-einsum-ellipsis", "E-FORM-002", r"name every axis with a letter",
         "`jnp.einsum` reads `...` as the axes a subscript does not name; the language names every axis, so each "
         "operand's rank is checked", '(einsum "...j->j" x)', "x:[2 3]f32"),
    Rule("einsum-equal-sizes", "E-SHAPE-005", r"^`einsum`: axis '.' has sizes (1 and \d+|\d+ and 1)$",
         "`jnp.einsum` broadcasts a letter's size-1 axis against a larger one; in the language a letter names one "
         "size (`broadcast-to` first)", '(einsum "ij,jk->ik" a b)', "a:[2 1]f32 b:[3 4]f32"),
    Rule("exact-label-shape", "E-SHAPE-005", r"^`cross-entropy`: logits \[[\d ]*\] need labels",
         "optax's cross-entropy broadcasts labels against the logits' leading axes (labels `[1]` for logits "
         "`[3 4]`); the labels must have exactly the logits' leading shape", "(cross-entropy x l)", "x:[3 4]f32 l:[1]i32"),
    Rule("tensor-operands", "E-TYPE-001", r"needs a tensor here, got (string|\[[-\d ]*\] shape|\(:)|needs a vector of tensors like",
         "NumPy takes a string, a list or a dict for an array (`jnp.size(\"x\")` is 1, `jnp.asarray([0 1])`), and "
         "`jnp.stack`/`jnp.concatenate` iterate over a tensor's first axis; in the language `[0 1]` is a constant "
         "shape or list of axes, an op wants a tensor, and `stack` and `concat` a vector `[a b]`",
         "(stack x)", "x:[2 3]f32"),
    Rule("constant-draw-parameters", "E-TYPE-003", r"^`:(min|max|std|mean)` of `(uniform|normal)` must be a compile-time",
         "`jax.random.uniform` and `normal` take traced bounds; in the language a draw's distribution is fixed when "
         "the file is checked (scale a draw by a tensor instead: `(* s (normal [2] :salt 1))`)",
         "(uniform [2] :min s :salt 1)", "s:[]f32"),
    Rule("scalar-temperature", "E-SHAPE-005", r"^`:temperature` must be a scalar",
         "dividing the logits by a tensor broadcasts in JAX; a draw's temperature is one number",
         "(categorical x :salt 1 :temperature t)", "x:[2 3]f32 t:[3]f32"),
    Rule("integer-constants", "E-TYPE-003", r"needs a compile-time integer here, got \[\] (f|bf)",
         "`lax.broadcasted_iota` truncates a float dimension (1.5 is axis 1); an axis, a count or a size is an "
         "integer", "(iota [2 3] :axis 1.5)"),
    Rule("i32-literals", "E-TYPE-002", r"does not fit in i32, the dtype of an integer literal",
         "an integer literal is an i32 in the language; JAX wraps a bigger one silently when it meets an i32 "
         "(`x + 2147483648` is `x - 2147483648`) and makes an i64 of it alone", "(+ i 2147483648)", "i:[2]i32"),
    Rule("no-constant-zero-divisor", "E-TYPE-006", r"by .*: every element becomes",
         "`jnp.true_divide(x, 0.0)` gives inf and NaN and `jnp.mod(x, 0)` NaN or 0; a divisor the file makes a "
         "constant zero (a temperature of 0.0) is a mistake found before anything runs", "(/ x 0.0)", "x:[4]f32"),
    Rule("signature-keywords", "E-NAME-003", r"has no keyword",
         "an op takes the keywords its signature lists, even where the JAX function behind it takes more "
         "(`jnp.sum(x, axis=0)`: the language spells it `:axes`, and says so)", "(sum x :axis 0)", "x:[2 3]f32"),
    Rule("static-index-range", "E-SHAPE-003", r"^`take`: index .* is outside",
         "`jnp.take` fills (or clamps) an index out of range; a constant index known to be out of range is a mistake",
         "(take x [0 5])", "x:[4]f32"),
    Rule("cumsum-needs-an-axis", "E-SHAPE-003", r"^`cumsum` runs along an axis; a scalar has none",
         "`cumsum` runs along an axis, and a scalar has none; `jnp.cumsum` refuses a 0-d array too, but takes a "
         "Python number as a one-element vector (`jnp.cumsum(2.0, axis=-1)` is `[2.]`)", "(cumsum 2.0)", ""),
]

#: The checker accepts and the runtime lowers, but the JAX function a user would call refuses: the
#: language defines the conversion. Matched on JAX's error.
LENIENT = [
    Rule("integers-to-float", None, r"does not accept dtype int",
         "float-only ops (`sigmoid`, `silu`, `rsqrt`, `softmax`...) turn integers into f32, as `jnp.exp` does; "
         "`jax.nn.sigmoid`, `jax.nn.silu` and `lax.rsqrt` refuse integers", "(sigmoid i)", "i:[4]i32"),
    Rule("integer-as-vector", None, r"'int' object is not iterable",
         "where a vector of sizes or axes is expected, one integer counts as a vector of one (`(transpose x 0)` is "
         "`(transpose x [0])`); `jnp.transpose` wants a sequence", "(transpose x 0)", "x:[2]f32"),
    Rule("negative-axis", None, r"iota dimension must be between",
         "a negative axis counts from the end in every op; `lax.broadcasted_iota` takes only 0 to rank - 1",
         "(iota [2 3] :axis -1)"),
]


# The decoding ops' rules (dynamic-slice, dynamic-update-slice, at-set) live with their random calls.
STRICT += [Rule(*r) for r in STRICT_DECODING]
LENIENT += [Rule(*r) for r in LENIENT_DECODING]


def names_of(spec: str) -> dict[str, TensorType]:
    """`"a:[2 3]f32 b:[]i32"` as names' types."""
    return {name: TensorType(tuple(int(d) for d in dims.split()), dtype)
            for name, dims, dtype in re.findall(r"([\w-]+):\[([-\d ]*)\](\w+)", spec)}


def _strict_name(d) -> str | None:
    """The name of the first `STRICT` rule that explains the diagnostic `d` (its code and message), or None."""
    return next((r.name for r in STRICT if (r.code is None or r.code == d.code) and re.search(r.pattern, d.message)),
                None)


def strict_rule(errors) -> str | None:
    """The strict rule that explains every error of a rejected program JAX lowers, or None."""
    names = []
    for d in errors:
        rule = _strict_name(d)
        if rule is None:
            return None
        names.append(rule)
    return names[0] if names else None


def lenient_rule(jax_error: str) -> str | None:
    return next((r.name for r in LENIENT if re.search(r.pattern, jax_error)), None)


@dataclass(frozen=True)
class PhaseRule:
    """A deliberate difference from JAX in how phases fit together: `name`, why, and an example: what
    `:init` and `:step` return in `PHASE_EXAMPLE` (tests/test_differential.py checks it shows the
    difference). A strict one explains an E-GEN-002 of a dtype when `applies(want, got, jax_init,
    jax_step, weak)` holds (the checker's dtypes of the key as `:init` made it and as `:step` returns it,
    JAX's, and whether JAX's `:init` value is weakly typed); a lenient one matches JAX's error (`pattern`),
    and the file and JAX's error (`applies(pf, error)`) where it has `applies`. A strict rule of another
    `code` explains an error whose message matches its `pattern`."""

    name: str
    reason: str
    init: str
    step: str
    applies: Callable | None = None
    pattern: str = ""
    code: str = "E-GEN-002"


_WIDE = {"i32": {"i32", "i64"}, "f32": {"f32", "float64"}}
_THIRTY_TWO = ("a literal alone is an `i32` or `f32` (with a tensor, the tensor's dtype: `(maximum (gelu -1.5) x)` is "
               "`bf16` for a `bf16` `x`), an index (`argmax`, `argsort`) an `i32`, and a float-only op "
               "turns integers into `f32`; JAX, with 64-bit types enabled (a run needs them for `i64`), makes `int64` "
               "or `float64` there (`jnp.sum(2.0)`, `jnp.argmax`, `jnp.exp` of an `i64`), so the state's dtype can "
               "change between trips in one and not in the other")

#: Listed in docs/language.md with the expression-level rules.
PHASE_STRICT = [
    PhaseRule("strong-state", "`:init` fixes each state entry's dtype, even one computed from literals and sizes alone "
              "(weakly typed, as `(size x)` or `(>= -1.5 0.5)`); JAX's `fori_loop` lets a weakly typed carry take the "
              "dtype the step gives it (that dtype, or its 64-bit counterpart: see `32-bit-defaults`)", "(list :s0 (size f0))", "(list :s0 (zeros []))",
              applies=lambda want, got, ji, js, weak: weak and js in _WIDE.get(got, {got})),
    PhaseRule("32-bit-defaults", _THIRTY_TWO, "(list :s0 (argmax f0))", "(list :s0 (+ s0 (cast 1 :i64)))",
              applies=lambda want, got, ji, js, weak: (ji == js and ji in _WIDE.get(want, {want})
                                                       and js in _WIDE.get(got, {got}) and (ji, js) != (want, got))),
    PhaseRule("tensor-entries", "a generator phase returns a flat plist of tensors (E-GEN-001): a state or made "
              "record entry is a tensor, not a plist such as `top-k`'s; JAX's loop carries any pytree, nested dicts too",
              "(list :s0 (top-k f0 2))", "(list :s0 s0)", code="E-GEN-001", pattern=r"every entry must be a tensor"),
]


def _widened(pf, error: str) -> bool:
    """JAX's loop refuses a carry that changes between a type and its 64-bit counterpart (`float64`,
    `int64`), of the same kind and shape."""
    m = re.search(r"has type (\w+)(\[[\d,]*\]) but the corresponding output carry component has type (\w+)\2", error)
    if m is None or m.group(1) == m.group(3):
        return False
    kind = lambda t: "float" if "float" in t else "int" if t.startswith("int") else t  # noqa: E731
    return kind(m.group(1)) == kind(m.group(3)) and bool({m.group(1), m.group(3)} & {"float64", "int64"})


PHASE_LENIENT = [
    PhaseRule("32-bit-defaults", _THIRTY_TWO, "(list :s0 (sum 2.0))", "(list :s0 (cast s0 :f32))",
              applies=_widened, pattern=r"carry input and carry output must have equal types"),
    PhaseRule("f32-cross-entropy", "`cross-entropy` computes in `f32` and returns `f32` whatever its logits' float "
              "dtype (see Precision below); optax's `softmax_cross_entropy_with_integer_labels` returns the logits' "
              "dtype, so JAX's loop sees a state the language keeps `f32` become `bfloat16`",
              "(list :s0 (sum f0))", "(list :s0 (cross-entropy (cast (broadcast-to s0 [3]) :bf16) 0))",
              applies=lambda pf, error: any("cross-entropy" in e for e in pf.step.values()),
              pattern=r"has type float32(\[[\d,]*\]) but the corresponding output carry component has type bfloat16\1"),
]

#: The file the phase rules' examples change (`(list :s0 (sum f0))` and `(list :s0 (+ s0 1.0))`).
PHASE_EXAMPLE = """(loader train :source (npz "d.npz") :batch 2 :fields (:f0 [3] :f32))
(defmodel m :params (:w (normal [3] :std 0.1)) :apply (lambda (self x) (* (getf self :w) x)))
(model m)
(defgenerate :trips 2
  :init (lambda (batch ctx) (let* ((f0 (field batch :f0))) (list :s0 (sum f0))))
  :step (lambda (state trip ctx) (let* ((s0 (getf state :s0)) (p (m 1.0))) (list :s0 (+ s0 1.0)))))
(objective (lambda (batch ctx) (let* ((f0 (field batch :f0)) (s0 (field batch :s0)) (p (m f0)))
  (+ (mean (cast s0 :f32)) (mean (cast p :f32))))))
(run :loader train :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
"""


def phase_example(rule: PhaseRule) -> PhaseFile:
    """`PHASE_EXAMPLE` with the rule's `:init` and `:step`, as a `PhaseFile` the judge reads."""
    text = PHASE_EXAMPLE.replace("(list :s0 (sum f0))", rule.init).replace("(list :s0 (+ s0 1.0))", rule.step)
    body = lambda t: t[len("(list :s0 "):-1]  # noqa: E731
    return PhaseFile(text, "example", "ok", {"f0": TensorType((3,), "f32")}, TensorType((3,), "f32"), 2,
                     {"s0": body(rule.init)}, {"s0": body(rule.step)}, "1.0", None, "f0",
                     "(+ (mean (cast s0 :f32)) (mean (cast p :f32)))")


def phase_rule(errors, carry: dict) -> str | None:
    """The rule (expression-level `STRICT` or phase-level `PHASE_STRICT`) explaining every error, or None;
    `carry`: JAX's types of the state keys (`phase_jax_verdict`)."""
    names = []
    for d in errors:
        rule = _strict_name(d)
        data = d.data or {}
        if rule is None and d.code == "E-GEN-002" and data.get("what") == "dtype" and data.get("key") in carry:
            rule = next((r.name for r in PHASE_STRICT if r.code == d.code
                         and r.applies(data["want_dtype"], data["got_dtype"], *carry[data["key"]])), None)
        if rule is None:
            rule = next((r.name for r in PHASE_STRICT if r.code != "E-GEN-002" and r.code == d.code
                         and re.search(r.pattern, d.message)), None)
        if rule is None:
            return None
        names.append(rule)
    return names[0] if names else None


def phase_lenient_rule(jax_error: str, pf: PhaseFile | None = None) -> str | None:
    """The lenient rule explaining JAX's refusal of a phase the checker accepts (a phase rule's
    `applies(pf)`, where it has one, must hold too), or None."""
    return next((r.name for r in LENIENT + PHASE_LENIENT if re.search(r.pattern, jax_error)
                 and (getattr(r, "applies", None) is None or (pf is not None and r.applies(pf, jax_error)))), None)
