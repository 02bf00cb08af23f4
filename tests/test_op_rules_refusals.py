"""What JAX refuses to run is refused by the checker, at the range that causes it: one test per
diagnostic code, each a one-line edit of the fixture with the range marked (`helpers.check`).
These are finds of the differential check (tests/differential), kept as regressions."""
from __future__ import annotations

import pytest

from helpers import check, marked, variant

LABEL = ":label (mod (+ row stride) vocab)"
COLUMN = "(column (iota [1 seq] :axis 1))"
CORRECT = ":correct (mean (cast (= row truth) :f32) :axes [1] :keepdims true)))))"


def refused(old: str, new: str, snippet: str, code: str, after: str | None = None):
    """The one diagnostic of the fixture with `old` replaced by `new`, checked with the first
    `snippet` in `new` (or in `new` past its text `after`) marked `code`."""
    return check(marked(variant(old, new), snippet, code, within=after or new)).diagnostics[0]


@pytest.mark.parametrize("old,new,snippet,after,message", [
    ("(guess (sum (where (= column (- at 1)) (argmax (model row)) 0)",
     "(guess (sum (where (and (= column (- at 1)) (bernoulli 1 :salt trip)) (argmax (model row)) 0)",
     "1", "(bernoulli", "`bernoulli` needs float probabilities, got [] i32*"),
    (LABEL, ":label (mod (+ row stride 2147483648) vocab)", "2147483648", None,
     "`+`: the integer 2147483648 does not fit in i32, the dtype of an integer literal"),
    (COLUMN, "(column (iota [1 seq] :axis 1 :dtype :bool))", ":bool", None,
     "`iota` counts in numbers; `:dtype` cannot be `:bool`"),
    (LABEL, ":label (mod (+ row (pow stride -1)) vocab)", "-1", None,
     "`pow`: an integer to the negative power -1 is not an integer"),
    (CORRECT, ":correct (mean (softmax (= row truth)) :axes [1] :keepdims true)))))", "(= row truth)", None,
     "`softmax` needs numbers, got bool"),
], ids=["bernoulli-of-an-integer", "integer-literal-past-i32", "iota-of-bool", "integer-to-a-negative-power",
        "softmax-of-bool"])
def test_type_002(old, new, snippet, after, message):
    assert refused(old, new, snippet, "E-TYPE-002", after).message.startswith(message)


def test_form_002_an_einsum_output_that_names_an_axis_twice():
    d = refused("(matmul h (getf self :out)))))", '(einsum "bsd,dv->bss" h (getf self :out)))))', '"bsd,dv->bss"',
                "E-FORM-002")
    assert d.message.startswith("`einsum` output 'bss' names an axis twice")


def test_name_002_a_dtype_given_twice():
    d = refused(COLUMN, "(column (+ (iota [1 seq] :axis 1) (zeros [1 seq] :i32 :dtype :i64)))", ":i64", "E-NAME-002")
    assert d.message.startswith("`zeros`: the dtype is given twice, as an argument and as `:dtype`")


def test_shape_003_an_axis_named_twice():
    d = refused(CORRECT, ":correct (mean (cast (= row truth) :f32) :axes [1 -1] :keepdims true)))))", "[1 -1]",
                "E-SHAPE-003")
    assert d.message.startswith("`mean`: `:axes` [1 -1] names an axis twice")


def test_shape_004_a_reduction_over_an_empty_axis():
    d = refused(LABEL, ":label (mod (+ row (max (slice stride :axis 1 :end 0) :axes [1] :keepdims true)) vocab)",
                "(slice stride :axis 1 :end 0)", "E-SHAPE-004")
    assert d.message.startswith("`max` over an axis of size 0 has no value ([64 0])")
