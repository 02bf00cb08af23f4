"""`sexpgpu run` semantics on the CPU: learning, tracing once, stacking bits, passes, precision, draws."""
import json

import numpy as np
import pytest

from helpers import fixture_text, program_of, run
from runfile import RunFile
from sexpgpu_runtime.weights.params import flatten

FIXTURE = RunFile.fixture()


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("short")
    return run(FIXTURE.set("run :log :every", "25"), d, 250), d


@pytest.mark.slow
def test_loss_falls_and_generation_accuracy_rises(short_run):
    result, _ = short_run
    first, last = result.history[0], result.history[-1]
    assert last["step"] == 250
    assert last["loss"] < first["loss"] - 0.5
    assert last["generation-accuracy"] > first["generation-accuracy"] + 0.05


@pytest.mark.slow
def test_no_graph_is_traced_twice(short_run):
    result, _ = short_run
    assert result.traces, "no graph was traced"
    assert set(result.traces) >= {"generate.init stacked", "generate.step stacked", "generate.finish stacked",
                                  "train stacked", "update"}
    assert all(n == 1 for n in result.traces.values()), result.traces


@pytest.mark.slow
def test_metrics_jsonl_has_a_row_per_logged_step(short_run):
    result, d = short_run
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] + list(range(25, 251, 25))
    assert all({"step", "loss", "generation-accuracy"} <= set(r) for r in rows)
    assert rows == result.history


@pytest.mark.slow
def test_stacked_run_equals_unstacked_bit_for_bit(tmp_path):
    stacked = run(fixture_text(), tmp_path / "s2", 20)
    unstacked = run(FIXTURE.set("run :stack", "1"), tmp_path / "s1", 20)
    assert "train stacked" in stacked.traces and "train" in unstacked.traces
    a, b = flatten(stacked.trainable), flatten(unstacked.trainable)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k


@pytest.mark.slow
def test_a_run_is_a_pure_function_of_file_and_seed(tmp_path):
    a = run(fixture_text(), tmp_path / "a", 5)
    b = run(fixture_text(), tmp_path / "b", 5)
    c = run(FIXTURE.set("run :seed", "1"), tmp_path / "c", 5)
    fa, fb, fc = flatten(a.trainable), flatten(b.trainable), flatten(c.trainable)
    assert all(np.array_equal(fa[k], fb[k]) for k in fa)
    assert not all(np.array_equal(fa[k], fc[k]) for k in fa)


def with_held_out_pass(records: int) -> str:
    """The fixture with a `held-out` loader of `records` records (the training loader's fields) and a
    pass `held-out-eval` of 2 batches every 4 steps."""
    return FIXTURE.add(f"""(loader held-out
  :source (stride-rows :vocab vocab :seq seq :records {records})
  :batch 64
  :fields (:row [seq] :i32
           :stride [1] :i32))""", after="model").add("(pass held-out-eval :loader held-out :every 4 :batches 2)")


@pytest.mark.slow
def test_pass_on_the_training_loaders_shape_runs_the_generator(tmp_path):
    text = with_held_out_pass(512)
    prog = program_of(text)
    assert prog.passes[0].runs_generator
    result = run(text, tmp_path, 8)
    rows = [r for r in result.history if "held-out-eval/loss" in r]
    assert [r["step"] for r in rows] == [4, 8]
    assert "held-out-eval/generation-accuracy" in rows[0]
    assert all(n == 1 for n in result.traces.values()), result.traces


@pytest.mark.slow
def test_bf16_keeps_the_cache_bf16_and_params_f32(tmp_path):
    text = (FIXTURE.set("defgenerate :init (list :cache", "(zeros [64 seq vocab] :bf16)")
            .set("defgenerate :step (list :cache", "(cast (model row) :bf16)")
            .set("run :precision", ":bf16"))
    prog = program_of(text)
    assert prog.generate.state.get("cache").dtype == "bf16"
    result = run(text, tmp_path, 3)
    assert all(str(v.dtype) == "float32" for v in flatten(result.trainable).values())
    assert np.isfinite(result.history[-1]["loss"])


@pytest.mark.slow
def test_export_then_pretrained_frozen_teacher(tmp_path):
    """One run's student is the next run's teacher: --export names match `:pretrained`."""
    from sexpgpu_lang import analyze
    student = run(FIXTURE, tmp_path / "a", 3, export=tmp_path / "student.safetensors")
    teacher = FIXTURE.set("model", "(model pair)").add("""(defmodel teacher
  :frozen true
  :pretrained "student.safetensors"
  :params (:embed (normal [vocab dim] :std 0.1)
           :first (normal [vocab dim] :std 0.1)
           :second (normal [vocab dim] :std 0.1)
           :hidden (normal [dim dim] :std 0.1)
           :out (normal [dim vocab] :std 0.1))
  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))

(defmodel pair
  :params (:student student :teacher teacher)
  :apply (lambda (self row) (student row)))""", before="model")
    teacher = teacher.set("defgenerate :finish (list :label", "(argmax (teacher row))")
    path = tmp_path / "next.sx"
    path.write_text(teacher)
    res = analyze(teacher, str(path))
    assert res.program is not None, [d.message for d in res.diagnostics]
    out = run(teacher, tmp_path / "b", 2, path=path)
    got = flatten(out.frozen)
    want = flatten(student.trainable)
    assert set(k[1] for k in got) == {"embed", "first", "second", "hidden", "out"}
    for k, v in got.items():
        assert np.array_equal(np.asarray(v), np.asarray(want[(k[1],)])), k   # loaded, and never updated
    # a file whose tensor has another shape is refused by the checker, naming file, tensor, expected and found
    bad = teacher.set("defmodel teacher :params :out", "(normal [dim dim] :std 0.1)")
    res = analyze(bad, str(path), read_files=True)   # as `sexpgpu run` checks it
    msgs = [d.message for d in res.diagnostics if d.code == "E-MODEL-003"]
    assert msgs and "student.safetensors" in msgs[0] and "`out`" in msgs[0] and "[64 16]" in msgs[0] and "[64 64]" in msgs[0]


def with_curriculum() -> str:
    """The fixture with a curriculum: 256 records of an `easy` loader (2 steps of 2 x 64), then `train`."""
    return FIXTURE.add("""(loader easy
  :source (stride-rows :vocab vocab :seq seq :records 256)
  :batch 64
  :fields (:row [seq] :i32
           :stride [1] :i32))

(curriculum (stage :loader easy :records 256)
            (stage :loader train))""", after="model")


@pytest.mark.slow
def test_curriculum_switches_loader_and_sets_stage(tmp_path):
    text = (with_curriculum().edit("objective", "(metric :loss loss)", "(metric :loss loss)\n    (metric :stage (cast (getf ctx :stage) :f32))")
            .set("run :log :every", "1"))
    prog = program_of(text)
    assert prog.stages == (("easy", 256), ("train", None))
    result = run(text, tmp_path, 4)
    # 2 microbatches of 64 per step: steps 1-2 read `easy` (256 records), then `train`
    assert [r["stage"] for r in result.history] == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.slow
def test_a_pass_sees_the_curriculum_stage_training_is_in(tmp_path):
    text = (with_curriculum().edit("objective", "(metric :loss loss)", "(metric :loss loss)\n    (metric :stage (cast (getf ctx :stage) :f32))"
                                   "\n    (metric :within (cast (getf ctx :stage-records) :f32))")
            .set("run :log :every", "1").add("(pass now :loader train :every 1 :batches 1)"))
    rows = run(text, tmp_path, 4).history
    # 128 records a step; the pass runs after the step, at the position training reached: 128, 256, 384, 512
    # records, i.e. stage 0 with 128 consumed, then stage 1 (from 256 on) with 0, 128, 256 consumed in it
    assert [(r["now/stage"], r["now/within"]) for r in rows] == [(0.0, 128.0), (1.0, 0.0), (1.0, 128.0), (1.0, 256.0)]


#: The fixture whose objective reports the diagnostic `logit-mean` (computed only when selected).
WITH_LOGIT_MEAN = FIXTURE.edit("objective", "(metric :loss loss)", "(metric :loss loss)\n    (diagnostic :logit-mean (mean logits))")


@pytest.mark.slow
def test_unselected_diagnostic_is_not_computed_and_selected_one_is(tmp_path):
    text = WITH_LOGIT_MEAN
    assert "logit-mean" not in run(text, tmp_path / "a", 1).history[-1]
    assert "logit-mean" in run(text, tmp_path / "b", 1, diagnostics=("logit-mean",)).history[-1]


@pytest.mark.slow
def test_stack_auto_takes_the_degree_the_cost_model_picks(tmp_path):
    from sexpgpu_runtime.lowering.graphs import layout_of
    prog = program_of(FIXTURE.set("run :stack", ":auto"))
    assert layout_of(prog).stack == 2          # the fixture fits easily: both microbatches in one call
    result = run(FIXTURE.set("run :stack", ":auto"), tmp_path, 2)
    assert "train stacked" in result.traces


# -- mistakes found before (or at) the step that would have hidden them ------------------------------


def test_cross_entropy_of_a_label_out_of_range_is_nan():
    import jax.numpy as jnp
    from sexpgpu_runtime.lowering.lowering import LOWERINGS, LowerCall
    logits = jnp.zeros((5, 4), jnp.float32)
    labels = jnp.array([0, 3, 4, -1, 2**40], jnp.int64)   # 2**40 would wrap to 0 in i32
    out = np.asarray(LOWERINGS["cross-entropy"](LowerCall([logits, labels], {}, {}, None, None)))
    assert np.allclose(out[:2], np.log(4.0))
    assert np.isnan(out[2:]).all(), out          # not the clamped (or wrapped) class's loss


@pytest.mark.slow
def test_a_label_out_of_range_stops_the_run_naming_the_cross_entropy(tmp_path):
    from sexpgpu_runtime import RunError
    text = FIXTURE.set("defgenerate :finish (list :label", "(+ (mod (+ row stride) vocab) 1)")   # 1 ... vocab
    with pytest.raises(RunError) as e:
        run(text, tmp_path, 3)
    msg = str(e.value)
    assert msg.startswith("step 1: `loss` is nan, so the run stopped; the first value of that step that was not "
                          "finite: `cross-entropy` at "), msg
    assert "gave nan from finite inputs (likely a label outside 0 to V-1" in msg and "\n" not in msg


@pytest.mark.slow
def test_export_is_checked_before_training_and_written_with_normal_permissions(tmp_path):
    import os
    import stat
    from sexpgpu_runtime.paths import umask
    from sexpgpu_runtime import OptionError
    for bad, why in [(tmp_path / "nowhere" / "x.safetensors", f"there is no directory {tmp_path / 'nowhere'}"),
                     (tmp_path, "it is a directory")]:
        with pytest.raises(OptionError) as e:
            run(FIXTURE, tmp_path / "a", 1, export=bad)
        assert str(e.value) == f"cannot write {bad}: {why}"
        assert not (tmp_path / "a" / "metrics.jsonl").exists()          # refused before anything ran
    out = tmp_path / "student.safetensors"
    run(FIXTURE, tmp_path / "b", 1, export=out)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~umask()         # 0644 under umask 022, not 0600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no temporary left


def test_a_diagnostic_name_the_file_does_not_report_is_refused_before_training(tmp_path):
    from sexpgpu_runtime import OptionError, RunError
    text = WITH_LOGIT_MEAN
    with pytest.raises(OptionError) as e:
        run(text, tmp_path / "a", 1, diagnostics=("nope",))
    assert str(e.value) == "no diagnostic named `nope`; the file reports: `logit-mean`"
    with pytest.raises(RunError) as e:
        run(text.set("run :diagnostics", "[:nope]"), tmp_path / "b", 1)
    assert str(e.value) == ("`run` selects `:diagnostics` `nope`, but no diagnostic is named `nope`; "
                            "the file reports: `logit-mean`")
    with pytest.raises(OptionError, match=r"^no diagnostic named `nope`; the file reports none"):
        run(fixture_text(), tmp_path / "c", 1, diagnostics=("nope",))
    assert not any((tmp_path / d / "metrics.jsonl").exists() for d in "abc")


@pytest.mark.slow
def test_diagnostics_option_adds_to_the_run_forms(tmp_path):
    text = (WITH_LOGIT_MEAN.edit("objective", "(diagnostic :logit-mean (mean logits))",
                                 "(diagnostic :logit-mean (mean logits))\n    (diagnostic :logit-max (max logits))")
            .set("run :diagnostics", "[:logit-max]"))
    row = run(text, tmp_path, 1, diagnostics=("logit-mean",)).history[-1]
    assert {"logit-mean", "logit-max"} <= set(row)


def test_a_pass_reading_more_records_than_its_loader_holds_is_refused(tmp_path):
    from sexpgpu_runtime import RunError
    text = with_held_out_pass(100)
    with pytest.raises(RunError) as e:
        run(text, tmp_path, 1)
    assert str(e.value) == ("pass `held-out-eval` reads 2 batches of 64 (128 records), but loader `held-out` has 100; "
                            "lower its `:batches`, or give the loader more records")


def test_a_run_dir_that_is_a_file_says_so(tmp_path):
    from sexpgpu_runtime import RunError
    (tmp_path / "afile").write_text("notes")
    with pytest.raises(RunError) as e:
        run(fixture_text(), tmp_path / "afile", 1)
    assert str(e.value) == f"cannot use {tmp_path / 'afile'} as the run dir: it is a file, not a directory"
    with pytest.raises(RunError) as e:
        run(fixture_text(), tmp_path / "afile" / "run", 1)
    assert str(e.value) == (f"cannot use {tmp_path / 'afile' / 'run'} as the run dir: "
                            f"{tmp_path / 'afile'} is a file, not a directory")
