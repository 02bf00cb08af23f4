"""A non-finite loss names the op of its step whose value went non-finite first (finite_check.py):
the bad microbatch re-run op by op from the same parameters, batch, context and counters."""
import numpy as np
import pytest

from helpers import SMALL, program_of, run, variant


def origin_of(text: str, path: str = "run.sx", step: int = 0, micro: int = 0):
    """`first_nonfinite_op` of `text`'s first training batch at fresh parameters (its context row
    that of step `step`, microbatch `micro`)."""
    import jax.numpy as jnp
    from sexpgpu_runtime.data.loaders import Loader
    from sexpgpu_runtime.lowering.context import Tracer
    from sexpgpu_runtime.lowering.finite_check import first_nonfinite_op
    from sexpgpu_runtime.weights.params import init_params
    program = program_of(text, path)
    trainable, frozen = init_params(program.params, program.run.seed)
    loader = Loader(program.loaders[program.run.loader], program.run.seed)
    rows = np.array([(step, micro, 0, 0, 0, 0)], np.int64)
    types = {c: "f32" for c in program.counters}
    origin = first_nonfinite_op(program, Tracer(program.run.seed), trainable, frozen, loader.batch(0), rows, rows,
                                {c: jnp.zeros((), jnp.float32) for c in types}, types)
    return program, origin


def test_a_division_by_zero_is_named_at_its_place_with_its_phase():
    text = SMALL.replace("(mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))",
                         "(let* ((l (cross-entropy (model (getf inputs :x)) (getf inputs :y)))\n"
                         "       (spread (* 0.0 (mean l))))\n"
                         "  (mean (/ l spread)))")
    program, origin = origin_of(text)
    assert origin is not None and (origin.op, origin.phase, origin.from_finite) == ("/", "objective", True)
    assert origin.describe(program) == ("`/` at run.sx:14:9 (in `objective`) gave inf from finite inputs "
                                        "(likely a division by 0)")
    assert text.splitlines()[13][8:].startswith("(/ l spread)")


def test_the_walk_back_from_the_loss_passes_a_nan_a_where_hid():
    # `bad` is NaN everywhere but the `where` hides it; the loss's own NaN is the log of -1.
    text = SMALL.replace("(mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))",
                         "(let* ((l (cross-entropy (model (getf inputs :x)) (getf inputs :y)))\n"
                         "       (bad (sqrt (- (* 0.0 l) 1.0)))\n"
                         "       (safe (where (> l 1e9) bad l)))\n"
                         "  (mean (* safe (log (- 0.0 (mean l))))))")
    program, origin = origin_of(text)
    assert origin.op == "log" and np.isnan(origin.value) and origin.from_finite
    assert program.source_text[origin.offset:].startswith("(log (- 0.0 (mean l)))")


def test_an_op_of_the_standard_library_is_named_at_its_call_in_the_file():
    text = SMALL.replace("(matmul (take (getf self :embed) row) (getf self :out))",
                         "(linear (* (take (getf self :embed) row) 1e38) (getf self :out) (zeros [vocab]))")
    text = text.replace("(normal [32 vocab] :std 0.1)", "(ones [32 vocab])").replace("(normal [vocab 32] :std 0.1)",
                                                                                     "(ones [vocab 32])")
    program, origin = origin_of(text)
    assert (origin.op, origin.stdlib) == ("matmul", "linear")
    line, col = program.line_col(origin.offset)
    assert text.splitlines()[line - 1][col - 1:].startswith("(linear (*")
    assert origin.describe(program).startswith(f"`matmul` inside `linear`, called at run.sx:{line}:{col} (in `objective`)")


def test_a_finite_step_has_no_origin():
    assert origin_of(SMALL)[1] is None


def test_a_repeated_block_is_run_layer_by_layer():
    text = """\
(def vocab 16)
(def seq 8)
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 4
  :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel layer
  :params (:w (normal [8 8] :std 1.0))
  :apply (lambda (self h) (exp (* (matmul h (getf self :w)) 30.0))))
(defmodel lm
  :params (:embed (normal [vocab 8] :std 1.0) :blocks (repeat layer 3 :remat :dots-saveable) :out (normal [8 vocab] :std 0.1))
  :apply (lambda (self row) (matmul (layer (take (getf self :embed) row)) (getf self :out))))
(model lm)
(prepare (lambda (batch ctx) (list :x (field batch :row) :y (field batch :row))))
(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))))
(run :loader train :steps 10 :optimizer (sgd :lr 0.1))
"""
    program, origin = origin_of(text)
    assert origin is not None and origin.op == "exp" and origin.from_finite
    assert program.source_text[origin.offset:].startswith("(exp (* (matmul h")


# -- through a run ----------------------------------------------------------------------------------


GRPO_NO_EPS = ("(reshape (/ centred (+ spread 1e-4)) [rows 1])", "(reshape (/ centred spread) [rows 1])")


@pytest.mark.slow
def test_grpo_dividing_by_a_group_spread_of_zero_names_the_division(tmp_path):
    from pathlib import Path
    from sexpgpu_runtime import RunError
    text = (Path(__file__).parent / "fixtures" / "grpo-by-hand.sx").read_text()
    text = variant(*GRPO_NO_EPS, text)
    # every answer scores alike from step 3 on (the reward is 0 before it): each group's spread is 0 there
    text = variant("(reward (/ (sum (cast right :f32) :axes [1]) (- seq 2)))",
                   "(reward (* (cast (< (getf ctx :step) 2) :f32) (/ (sum (cast right :f32) :axes [1]) (- seq 2))))",
                   text)
    with pytest.raises(RunError) as e:
        run(text, tmp_path, 5)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "(/ centred spread)" in s)
    col = text.splitlines()[line - 1].index("(/ centred spread)") + 1
    assert str(e.value) == (f"step 3: `loss` is nan, so the run stopped; the first value of that step that was not "
                            f"finite: `/` at {tmp_path / 'run.sx'}:{line}:{col} (in `generate.finish`) gave nan from "
                            "finite inputs (likely a division by 0); no checkpoint was saved")


@pytest.mark.slow
def test_a_later_microbatch_of_a_later_step_is_re_run_from_the_parameters_it_read(tmp_path):
    # NaN only in microbatch 1 of step 4 (ctx :step 3): the re-run must take that microbatch's batch,
    # context and the parameters after 3 updates (the update kept them), else it finds nothing.
    from sexpgpu_runtime import RunError
    text = SMALL.replace("(mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))",
                         "(+ (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))\n"
                         "   (sqrt (- 3.5 (cast (+ (getf ctx :step) (cast (getf ctx :microbatch) :i64)) :f32))))")
    text = text.replace("(run :loader train :steps 10", "(run :loader train :steps 10 :microbatches 2")
    with pytest.raises(RunError) as e:
        run(text, tmp_path, 8)
    msg = str(e.value)
    assert msg.startswith("step 4: `loss` is nan, so the run stopped; the first value of that step that was not "
                          f"finite: `sqrt` at {tmp_path / 'run.sx'}:13:4 (in `objective`) gave nan from finite "
                          "inputs (likely a square root of a negative)"), msg
