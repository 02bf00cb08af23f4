"""`:until` on `defgenerate`: the trips end early once it holds; with the finished rows frozen
(the documented pattern) the run's parameters equal those of all `:trips`, bit for bit; E-GEN-006
for a predicate that is not a bool scalar; `:pass` in the context tells a pass from training."""
from __future__ import annotations

import numpy as np
import jax
import pytest

from helpers import check, program_of, run
from runfile import RunFile

#: The fixture's student writes greedily; a row is done once it wrote the end token 5 or column 3,
#: and a done row is frozen: only rows not done are written, and `:done` only grows.
FROZEN = (RunFile.fixture()
          .set("defgenerate :init (list :done", "(= (field batch :stride) -1)")
          .set("defgenerate :step (list :row", "(where (and (= column at) (not (getf state :done))) guess row)")
          .set("defgenerate :step (list :done", "(or (getf state :done) (= guess 5) (>= at 3))"))
UNTIL = FROZEN.set("defgenerate :until", "(lambda (state ctx) (= (sum (cast (getf state :done) :i32)) 64))")


def flat(tree):
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(tree)}


def trips_of(text, steps, run_dir):
    """The run's result and the (step, trip) of every trip it ran."""
    seen = []
    return run(text, run_dir, steps, on_trip=lambda step, trip: seen.append((step, trip))), seen


@pytest.mark.slow
def test_early_exit_equals_all_trips_bit_for_bit(tmp_path):
    full, all_trips = trips_of(FROZEN, 3, tmp_path / "full")
    early, few = trips_of(UNTIL, 3, tmp_path / "early")
    # one stacked group of 2 microbatches a step, 6 trips each
    assert len(all_trips) == 3 * 6
    # every row is done after trip 1 (column 3); its flag is read 3 trips late, before trip 4
    assert few == [(s, t) for s in range(3) for t in range(4)]
    a, b = flat(full.trainable), flat(early.trainable)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_until_must_be_a_bool_scalar():
    text = UNTIL.set("defgenerate :until (=", "(sum (cast (getf state :done) :i32))")
    check(text.mark("defgenerate :until", "(sum (cast (getf state :done) :i32))", "E-GEN-006"))


def test_until_is_in_the_ir():
    prog = program_of(UNTIL)
    assert prog.generate.until is not None and prog.generate.until.out.show() == "[] bool"
    assert program_of(FROZEN).generate.until is None


@pytest.mark.slow
def test_the_context_says_training_or_which_pass(tmp_path):
    """`:pass` is 0 while training and the pass's number (1, 2 ... in the file's order) in a pass,
    in the generator too: here `:finish` returns it and `objective` reports it."""
    text = (FROZEN.set("defgenerate :finish (list :seen", "(full [64 1] (getf ctx :pass))")
            .set("prepare (list :seen", "(field batch :seen)")
            .edit("objective", "    (metric :generation-accuracy (mean (getf inputs :correct)))",
                  "    (metric :generation-accuracy (mean (getf inputs :correct)))\n"
                  "    (metric :seen (mean (cast (getf inputs :seen) :f32)))")
            .add("(pass first :loader train :every 2 :batches 1)\n(pass second :loader train :every 2 :batches 1)",
                 before="run")
            .set("run :log :every", "1"))
    result = run(text, tmp_path, 2)
    last = result.history[-1]
    assert last["seen"] == 0.0 and last["first/seen"] == 1.0 and last["second/seen"] == 2.0, last
