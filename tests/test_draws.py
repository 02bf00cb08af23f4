"""Random draws: bits are a pure function of the seed, the draw's place and its salt (docs/dev/design.md#forms-and-the-context)."""
import numpy as np
import pytest

from helpers import program_of, variant
from sexpgpu_runtime.lowering.context import make_ctx
from sexpgpu_runtime import RunOptions
from sexpgpu_runtime.run.train import Trainer

pytestmark = pytest.mark.slow


def noise_program(salt: str, prefix: str = ""):
    text = variant(":stride (field batch :stride)))",
                   f":stride (field batch :stride)\n                :noise (uniform [4] {salt})))")
    text = variant(":stride (getf state :stride))))", ":stride (getf state :stride)\n                  :noise (getf state :noise))))", text)
    return program_of(prefix + text)


def draws(program, points, tmp_path):
    tr = Trainer(program, RunOptions(run_dir=tmp_path, quiet=True))
    st = tr.initial_state()
    batch = tr.batches.loaders["train"].batch(0)
    out = []
    for step, mb in points:
        rows = np.array([list(make_ctx(step, mb, 0).values())], np.int64)
        _, _, state = tr.graphs.gen_init_1(st.trainable, st.frozen, batch, rows)
        out.append(np.asarray(state["noise"]))
    return out


def test_unsalted_draw_is_the_same_at_every_step_and_microbatch(tmp_path):
    a, b, c = draws(noise_program(""), [(0, 0), (0, 1), (7, 0)], tmp_path)
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_salted_by_step_and_microbatch_is_new_for_every_microbatch(tmp_path):
    prog = noise_program(":salt (+ (* (getf ctx :step) 65536) (getf ctx :microbatch))")
    assert not prog.stackable            # :microbatch keeps the run unstacked (W-STACK-001)
    a, b, c, a2 = draws(prog, [(0, 0), (0, 1), (1, 0), (0, 0)], tmp_path)
    assert not np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(b, c)
    assert np.array_equal(a, a2)


def test_salted_by_step_alone_is_new_every_step_and_stacks(tmp_path):
    prog = noise_program(":salt (getf ctx :step)")
    assert prog.stackable
    a, b, c = draws(prog, [(0, 0), (0, 1), (1, 0)], tmp_path)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_comments_and_other_forms_do_not_change_any_draw(tmp_path):
    salt = ":salt (getf ctx :step)"
    base = draws(noise_program(salt), [(3, 0)], tmp_path / "a")[0]
    edited = draws(noise_program(salt, prefix=";; a new comment\n(def unused 3)\n\n"), [(3, 0)], tmp_path / "b")[0]
    assert np.array_equal(base, edited)
