"""Reads and writes at a traced position (`dynamic-slice`, `dynamic-update-slice`, `at-set`) and
sampling (`categorical`'s `:temperature`, `:top-k`, `:top-p`), against NumPy and JAX computed here."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import evaluate_expression
from sexpgpu_lang.check import check_expression
from sexpgpu_lang.types import TensorType

ENV = {"x": TensorType((4, 5), "f32"), "n": TensorType((), "i64"), "j": TensorType((3,), "i32"),
       "lg": TensorType((4000, 6), "f32"), "t": TensorType((), "f32"), "s": TensorType((), "i64")}
X = np.arange(20, dtype=np.float32).reshape(4, 5)
LOGITS = np.tile(np.log(np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04], np.float32)), (4000, 1))


DEFAULTS = {"x": X, "n": np.int64(0), "j": np.array([0, -1, 7], np.int32), "lg": LOGITS, "t": np.float32(1.0),
            "s": np.int64(0)}


def evaluated(src: str, **values):
    """`src`'s value with ENV's names bound to DEFAULTS, those given cast to their dtypes."""
    given = {k: np.asarray(v, DEFAULTS[k].dtype) for k, v in values.items()}
    return evaluate_expression(src, {**DEFAULTS, **given}, types=ENV).value


def codes(src: str):
    _, diags = check_expression(src, ENV)
    return [(d.code, d.message) for d in diags]


@pytest.mark.parametrize("start", [0, 1, 2, 3, 7])
def test_dynamic_slice_clamps_as_jax_does(start):
    got = evaluated("(dynamic-slice x [n 1] [2 3])", n=start)
    s = min(start, 4 - 2)   # JAX's rule: the start clamped into 0 ... axis - size
    np.testing.assert_array_equal(got, X[s:s + 2, 1:4])


@pytest.mark.parametrize("start", [0, 2, 3, 9])
def test_dynamic_update_slice_writes_only_the_window(start):
    got = evaluated("(dynamic-update-slice x (full [1 5] -1.0) [n 0])", n=start)
    want = X.copy()
    want[min(start, 3)] = -1.0
    np.testing.assert_array_equal(got, want)


def test_at_set_is_jax_at_set():
    got = evaluated("(at-set x [j (cast n :i32)] 7.0)", n=3)
    want = X.copy()
    want[0, 3] = want[-1, 3] = 7.0     # index 7 is out of range: its update is dropped
    np.testing.assert_array_equal(got, want)


def test_constant_starts_outside_the_clamping_range_are_errors():
    assert codes("(dynamic-slice x [3 0] [2 5])")[0][0] == "E-SHAPE-003"
    assert codes("(dynamic-update-slice x (ones [2 5]) [0 1])")[0][0] == "E-SHAPE-003"
    assert codes("(dynamic-slice x [n] [2 5])")[0][0] == "E-SHAPE-005"       # one start per axis
    assert codes("(at-set x [4] 1.0)")[0][0] == "E-SHAPE-003"
    assert codes("(dynamic-update-slice x (ones [1 5] :i32) [n 0])")[0][0] == "E-TYPE-002"
    assert codes("(dynamic-slice x [n 0] [2 5])") == []


def test_greedy_is_the_argmax_every_time():
    a = evaluated("(categorical lg :salt s :temperature 0)", s=1)
    b = evaluated("(categorical lg :salt s :temperature 0)", s=2)
    np.testing.assert_array_equal(a, np.zeros(4000))
    np.testing.assert_array_equal(a, b)
    # a traced temperature of 0 is the argmax too
    np.testing.assert_array_equal(evaluated("(categorical lg :salt s :temperature t)", t=0.0, s=3), a)


@pytest.mark.slow
def test_top_k_and_top_p_never_leave_their_sets():
    k2 = evaluated("(categorical lg :salt s :top-k 2)", s=5)
    assert set(np.unique(k2)) == {0, 1}
    # probabilities 0.4 0.25 0.15 ...: the classes before which less than 0.7 is summed are 0, 1, 2
    p7 = evaluated("(categorical lg :salt s :top-p 0.7)", s=6)
    assert set(np.unique(p7)) == {0, 1, 2}
    both = evaluated("(categorical lg :salt s :top-k 4 :top-p 0.5)", s=7)
    assert set(np.unique(both)) == {0, 1}
    # inside the set, the renormalised distribution: class 0 has 0.4 / 0.8 of top-p 0.7's mass
    assert abs(np.mean(p7 == 0) - 0.4 / 0.8) < 0.03
    # the same salt, the same bits
    np.testing.assert_array_equal(k2, evaluated("(categorical lg :salt s :top-k 2)", s=5))


def test_bad_sampling_constants_are_errors():
    assert codes("(categorical lg :temperature -1.0)")[0][0] == "E-RAND-001"
    assert codes("(categorical lg :top-k 7)")[0][0] == "E-RAND-001"
    assert codes("(categorical lg :top-p 0.0)")[0][0] == "E-RAND-001"
    assert codes("(categorical lg :top-p 1.5)")[0][0] == "E-RAND-001"
    assert codes("(categorical lg :temperature t :top-k 6 :top-p 1.0)") == []
