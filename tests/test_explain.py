"""`sexpgpu explain`: the static report (no JAX), and its estimates against XLA's own on the CPU.

The first half checks the report on the fixture and small variants of it:
the tree of graphs, the lowering rows, the `generation` and `memory` lines,
the memory plan, `:stack :auto`, the units. The second half compiles every
graph of the step with JAX on the CPU (`sexpgpu_runtime.lowering.xla_report`) and
holds the static estimate for the CPU target (`explain(..., target="cpu")`)
to XLA's memory and cost analysis: parameter, state, argument and output
bytes exactly, FLOPs and every graph's live set within 25%; and the default
accelerator model within 25% where the CPU's library fusions play no part
(docs/explain.md, "Checked against XLA").
"""
import json
import re
import subprocess
import sys
import time

import pytest

from helpers import FIXTURE, ROOT, SMALL, fixture_text, modules_after, program_of, write_case
from runfile import RunFile
from sexpgpu_lang.language import CONTEXT_KEYS
from sexpgpu_lang import analyze_file
from sexpgpu_lang.explain import (DEFAULT_BUDGET, TARGETS, choose_stack, einsum_layout, explain,
                                  fmt_bytes, fmt_flops, generation_line, memory_plan, parse_bytes, step_graphs,
                                  to_text, plist_bytes as _plist_bytes)
from sexpgpu_lang.explain.cost import COSTS as FLOP_RULES
from sexpgpu_lang.ops import REGISTRY

SEXPGPU = [sys.executable, "-m", "sexpgpu_cli.main"]
EXAMPLES = sorted((ROOT / "examples").glob("*.sx"))

# The fixture's parameters: embed, first, second [16 64], hidden [64 64], out [64 16], all f32.
PARAMS = (3 * 16 * 64 + 64 * 64 + 64 * 16) * 4
STATE = (64 * 8 + 64 * 1) * 4          # :row [64 8] i32, :stride [64 1] i32, per copy
MADE = (64 * 8 * 2) * 4 + 64 * 4       # :sample, :label [64 8] i32, :correct [64 1] f32

# Two attention blocks with layer norm and a gelu MLP: a model shaped like the ones people train.
ATTENTION = """
(def vocab 32)
(def seq 16)
(def dim 64)
(def hidden 256)
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 32
  :fields (:row [seq] :i32 :stride [1] :i32))
(def norm (lambda (x)
  (let* ((mu (mean x :axes [-1] :keepdims true))
         (d (- x mu))
         (var (mean (* d d) :axes [-1] :keepdims true)))
    (* d (rsqrt (+ var 1e-5))))))
(defmodel block
  :params (:q (normal [dim dim] :std 0.05) :k (normal [dim dim] :std 0.05) :v (normal [dim dim] :std 0.05)
           :o (normal [dim dim] :std 0.05) :up (normal [dim hidden] :std 0.05) :down (normal [hidden dim] :std 0.05))
  :apply (lambda (self x)
    (let* ((h (norm x))
           (s (einsum "bqd,bkd->bqk" (matmul h (getf self :q)) (matmul h (getf self :k))))
           (mask (>= (iota [seq seq] :axis 0) (iota [seq seq] :axis 1)))
           (p (softmax (where mask (* s 0.125) -1e9)))
           (x2 (+ x (matmul (einsum "bqk,bkd->bqd" p (matmul h (getf self :v))) (getf self :o)))))
      (+ x2 (matmul (gelu (matmul (norm x2) (getf self :up))) (getf self :down))))))
(defmodel block2
  :params (:q (normal [dim dim] :std 0.05) :k (normal [dim dim] :std 0.05) :v (normal [dim dim] :std 0.05)
           :o (normal [dim dim] :std 0.05) :up (normal [dim hidden] :std 0.05) :down (normal [hidden dim] :std 0.05))
  :apply (lambda (self x)
    (let* ((h (norm x))
           (s (einsum "bqd,bkd->bqk" (matmul h (getf self :q)) (matmul h (getf self :k))))
           (mask (>= (iota [seq seq] :axis 0) (iota [seq seq] :axis 1)))
           (p (softmax (where mask (* s 0.125) -1e9)))
           (x2 (+ x (matmul (einsum "bqk,bkd->bqd" p (matmul h (getf self :v))) (getf self :o)))))
      (+ x2 (matmul (gelu (matmul (norm x2) (getf self :up))) (getf self :down))))))
(defmodel lm
  :params (:embed (normal [vocab dim] :std 0.1) :b1 block :b2 block2 :out (normal [dim vocab] :std 0.1))
  :apply (lambda (self row) (matmul (norm (block2 (block (take (getf self :embed) row)))) (getf self :out))))
(model lm)
(defgenerate :trips 4
  :init (lambda (batch ctx) (list :row (field batch :row) :stride (field batch :stride)))
  :step (lambda (state trip ctx)
          (let* ((row (getf state :row))
                 (at (+ (cast trip :i32) 2))
                 (column (iota [1 seq] :axis 1))
                 (guess (sum (where (= column (- at 1)) (argmax (model row)) 0) :axes [1] :keepdims true)))
            (list :row (where (= column at) guess row) :stride (getf state :stride))))
  :finish (lambda (state ctx)
            (list :sample (getf state :row) :label (mod (+ (getf state :row) (getf state :stride)) vocab))))
(prepare (lambda (batch ctx) (list :input (field batch :sample) :target (field batch :label))))
(objective (lambda (inputs ctx)
  (let* ((loss (mean (cross-entropy (model (getf inputs :input)) (getf inputs :target)))))
    (metric :loss loss)
    loss)))
(run :loader train :steps 100 :microbatches 4 :stack 2 :seed 0 :optimizer (adamw :lr 3e-3))
"""


def fixture_program():
    return program_of(fixture_text(), str(FIXTURE))


def sx(*args):
    return subprocess.run(SEXPGPU + list(args), capture_output=True, text=True, timeout=300)


# =========================================================================== the static report


def test_one_flop_rule_per_registry_op():
    assert set(FLOP_RULES) == set(REGISTRY)


@pytest.mark.parametrize("subscripts, layout", [
    # a plain dot: operands in (batch, free, contracting) order, the output (batch, lhs free, rhs free)
    ("ij,jk->ik", (None, None, None, None)), ("ij,kj->ik", (None, None, None, None)),
    ("bhtk,bhsk->bhts", (None, None, None, None)), ("bhts,bhsk->bhtk", (None, None, None, None)),
    # the dot writes (b, t, h, k), then a transposing copy makes (b, h, t, k)
    ("btd,dhk->bhtk", (None, None, "bthk", "bhtk")),
    # the lhs's free (b, t) and contracting (h, k) axes interleave: it is copied to (b, t, h, k) first
    ("bhtk,hkd->btd", ("bthk", None, "btd", "btd")),
    ("ij,jk->ki", (None, None, "ik", "ki")),
    ("ii,ij->j", None), ("ij,jk->i", None)])  # a diagonal, an axis summed within one operand: not modelled
def test_einsum_layout_is_the_dot_general_xla_runs(subscripts, layout):
    lhs, rest = subscripts.split(",")
    assert einsum_layout(subscripts, len(lhs), len(rest.split("->")[0])) == layout


def test_the_report_is_built_without_jax():
    mods = modules_after("from sexpgpu_lang import analyze_file\n"
                         "from sexpgpu_lang.explain import explain, generation_line, to_text\n"
                         f"p = analyze_file({str(FIXTURE)!r}).program\n"
                         "to_text(explain(p)); generation_line(p)\n")
    assert not any(m == "jax" or m.startswith("jax.") for m in mods)


def test_the_tree_lists_the_step_graphs_under_the_step():
    text = to_text(explain(fixture_program()))
    lines = text.splitlines()
    assert lines[0].startswith("step of ") and "2 microbatches, stacked 2 per call (1 call)" in lines[0]
    heads = [l for l in lines if l.startswith(("├─ ", "└─ "))]
    assert [h.split()[1] for h in heads] == ["generate.init", "generate.step", "generate.finish", "train", "update"]
    assert "stacked ×2  ×6 trips  (6 calls per step)" in heads[1]
    i = lines.index(heads[0])
    assert lines[i + 1].split() == ["│", "in", "batch", "(:row", "[2", "64", "8]", "i32", ":stride", "[2", "64", "1]",
                                    "i32),", "ctx", "[2", "6]", "i64"]
    assert lines[i + 2].split()[1:] == ["out", "state", "(:row", "[2", "64", "8]", "i32", ":stride", "[2", "64", "1]",
                                        "i32),", "batch", "(:row", "[2", "64", "8]", "i32", ":stride", "[2", "64", "1]",
                                        "i32),", "ctx", "[2", "6]", "i64"]
    assert re.match(r"│ +cost \S+ \S*FLOP · \S+ \S+ moved · live \S+ \S+ \(args .*, out .*, temps .*\)", lines[i + 3])


def test_lowering_rows_generation_line_and_memory_line():
    report = explain(fixture_program())
    rows = report["lowering"]
    assert [(r["row"], r["degree"], r["graphs"], r["calls_per_step"]) for r in rows] == [
        ("generate stacked", 2, 3, 8), ("train", 2, 1, 1), ("update", 1, 1, 1)]
    gen = report["generation"]
    assert (gen["trips"], gen["graphs"], gen["state_bytes"], gen["state_bytes_stacked"], gen["made_bytes"]) == (
        6, 3, STATE, 2 * STATE, MADE)
    mem = report["memory"]
    assert (mem["params"], mem["trainable"], mem["frozen"], mem["optimizer"]) == (PARAMS, PARAMS, 0, 2 * PARAMS + 4)
    text = to_text(report).splitlines()
    assert "generation: 6 trips · 3 graphs · 8 calls per step · state 2.2 KiB ×2 stacked = 4.5 KiB · " \
           "made 4.2 KiB per copy" in text
    memory = next(l for l in text if l.startswith("memory:"))
    assert re.fullmatch(r"memory: params 32\.0 KiB · optimizer 64\.0 KiB · generation \d+\.\d KiB · "
                        r"train \d+\.\d MiB · peak \d+\.\d MiB", memory), memory
    assert mem["peak"] == PARAMS + 2 * PARAMS + 4 + max(mem["generation"], mem["train"], mem["update"])


def test_the_step_graph_counts_its_matmuls_and_the_trips():
    report = explain(fixture_program())
    step = next(g for g in report["graphs"] if g["name"] == "generate.step")
    matmuls = 2 * (2 * 64 * 8) * 64 * 64 + 2 * (2 * 64 * 8) * 64 * 16  # two copies of [64 8 64]·[64 64], ·[64 16]
    assert matmuls <= step["flops"] <= 1.05 * matmuls
    gen_row = report["lowering"][0]
    init, finish = report["graphs"][0], report["graphs"][2]
    assert gen_row["flops_per_step"] == init["flops"] + 6 * step["flops"] + finish["flops"]


def test_the_training_graph_costs_about_three_forward_passes():
    text = RunFile.fixture().set("run :stack", "1").add("(pass eval :loader train :every 10)")
    report = explain(program_of(text))
    train = next(g for g in report["graphs"] if g["name"] == "train")
    forward = report["passes"][0]
    assert 2.8 <= train["flops"] / forward["flops"] <= 3.2


def test_an_unstacked_run_has_a_generate_row():
    report = explain(program_of(RunFile.fixture().set("run :stack", "1")))
    assert [r["row"] for r in report["lowering"]] == ["generate", "train", "update"]
    assert report["lowering"][0]["calls_per_step"] == 2 * 8  # two microbatches, init + 6 trips + finish each
    assert report["step"]["groups"] == 2


def test_a_generator_reading_the_microbatch_keeps_the_run_unstacked(tmp_path):
    res = analyze_file(str(write_case("warn-stack-microbatch.sx", tmp_path)))
    report = explain(res.program)
    assert report["step"]["stack"] == 1 and report["lowering"][0]["row"] == "generate"
    assert any("W-STACK-001" in n for n in report["notes"])


def test_a_pass_on_the_training_loaders_shape_runs_the_generator_unstacked():
    report = explain(program_of(fixture_text() + "\n(pass eval :loader train :every 10 :batches 2)\n"))
    row = report["lowering"][-1]
    assert (row["row"], row["graphs"], row["every"], row["calls_per_pass"]) == ("pass eval", 4, 10, 2 * 9)
    sub = report["passes"][0]["generator"]
    assert [g["name"] for g in sub] == ["pass eval generate.init", "pass eval generate.step", "pass eval generate.finish"]
    assert all(g["stack"] == 1 for g in sub)
    assert [p["phase"] for p in report["plan"]][-2:] == ["pass eval generate", "pass eval"]


@pytest.mark.parametrize("optimizer, state", [
    ("(adam :lr 3e-3)", 2 * PARAMS + 4), ("(adamw :lr 3e-3)", 2 * PARAMS + 4), ("(lion :lr 3e-4)", PARAMS + 4),
    ("(sgd :lr 0.1)", 0), ("(sgd :lr 0.1 :momentum 0.9)", PARAMS)])
def test_optimizer_state_bytes(optimizer, state):
    report = explain(program_of(RunFile.fixture().set("run :optimizer", optimizer)))
    assert report["memory"]["optimizer"] == state


def test_frozen_parameters_count_in_params_but_not_in_the_optimizer(tmp_path):
    report = explain(analyze_file(str(write_case("teacher-reachable-clean.sx", tmp_path))).program)
    mem = report["memory"]
    teacher = (16 * 64 + 64 * 16) * 4
    assert (mem["params"], mem["frozen"], mem["optimizer"]) == (PARAMS + teacher, teacher, 2 * PARAMS + 4)


def test_the_memory_plan_has_a_phase_per_generator_graph():
    report = explain(fixture_program())
    plan = {p["phase"]: p["parts"] for p in report["plan"]}
    assert list(plan) == ["generate.init", "generate.step", "generate.finish", "train", "accumulate", "update"]
    batch, state, made = 2 * STATE, 2 * STATE, 2 * MADE  # two stacked copies; the batch holds :row and :stride
    for phase in ("generate.init", "generate.step", "generate.finish"):
        assert plan[phase]["batch"] == batch and plan[phase]["state"] == state  # the batch :init read, the state
    assert "made" not in plan["generate.init"] and "made" not in plan["generate.step"]
    # init returns the batch and the [2 6] i64 context rows (one i64 per context key)
    assert plan["generate.init"]["copies"] == batch + 2 * 8 * len(CONTEXT_KEYS)
    assert plan["generate.finish"]["made"] == made and plan["train"]["made"] == made  # lives until train reads it
    assert "state" not in plan["train"]
    assert plan["generate.step"]["state out"] == 0  # donated to each trip
    assert plan["train"]["gradients out"] == 2 * PARAMS and plan["accumulate"]["gradients"] == 2 * PARAMS
    assert plan["update"]["gradients"] == PARAMS   # the one running sum (test_accumulation.py)


def test_earlier_groups_gradients_are_held_until_the_update():
    report = explain(program_of(RunFile.fixture().set("run :microbatches", "4")))
    assert report["step"]["groups"] == 2
    assert report["memory"]["gradients_held"] == PARAMS   # summed into one running buffer
    assert " · gradients 32.0 KiB · " in to_text(report)


def test_stack_auto_picks_the_largest_degree_whose_peak_fits():
    program = program_of(RunFile.fixture().set("run :microbatches", "4").set("run :stack", ":auto"))
    _, cands = choose_stack(program, DEFAULT_BUDGET)
    peaks = {c["degree"]: c["peak"] for c in cands}
    assert list(peaks) == [1, 2, 4] and peaks[1] < peaks[2] < peaks[4]
    assert choose_stack(program, peaks[4])[0] == 4
    assert choose_stack(program, peaks[4] - 1)[0] == 2
    report = explain(program, budget=peaks[2], budget_source="test")
    assert report["step"]["stack"] == 2 and report["stack_auto"]["chosen"] == 2 and report["memory"]["fits"]
    assert ":stack :auto: degree 2, the largest whose peak fits" in to_text(report)
    report = explain(program, budget=peaks[1] - 1, budget_source="test")
    assert report["step"]["stack"] == 1 and not report["memory"]["fits"]
    assert "does NOT fit" in to_text(report)


def test_without_a_budget_16_gib_is_assumed_and_said():
    report = explain(fixture_program())
    assert report["memory"]["budget"] == DEFAULT_BUDGET == 16 * 1024 ** 3
    assert "assumed" in report["memory"]["budget_source"]
    assert "fits in 16.0 GiB (assumed" in to_text(report)


def test_generation_line_for_the_hover():
    line = generation_line(fixture_program())
    assert re.fullmatch(r"generation: 6 trips · 3 graphs · state 2\.2 KiB ×2 stacked · \d+\.\d MFLOP per step · "
                        r"live \d+\.\d KiB", line), line
    assert generation_line(program_of(SMALL)) is None
    assert generation_line(None) is None


def test_a_file_without_a_generator():
    report = explain(program_of(SMALL))
    assert report["generation"] is None
    assert [r["row"] for r in report["lowering"]] == ["train", "update"]
    assert "generation" not in next(l for l in to_text(report).splitlines() if l.startswith("memory:"))


def test_units():
    assert parse_bytes("16GiB") == 16 * 1024 ** 3
    assert parse_bytes("80 GB") == 80 * 10 ** 9
    assert parse_bytes("512MiB") == 512 * 1024 ** 2
    assert parse_bytes("1.5e9") == 1_500_000_000
    with pytest.raises(ValueError):
        parse_bytes("lots")
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(12.1 * 1024 ** 2) == "12.1 MiB"
    assert fmt_bytes(0.4 * 1024 ** 3) == "0.4 GiB"
    assert fmt_flops(32.3e6) == "32.3 MFLOP"


def test_explain_is_quick():
    program = fixture_program()
    t0 = time.perf_counter()
    explain(program)
    assert time.perf_counter() - t0 < 1.0


def test_cli_json_is_the_same_report():
    r = sx("explain", "--format", "json", str(FIXTURE))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads(json.dumps(explain(analyze_file(str(FIXTURE)).program)))


def test_cli_memory_budget():
    r = sx("explain", "--memory-budget", "1MiB", str(FIXTURE))
    assert r.returncode == 0, r.stderr
    assert "does NOT fit in 1.0 MiB (--memory-budget)" in r.stdout
    r = sx("explain", "--memory-budget", "lots", str(FIXTURE))
    assert r.returncode == 2
    assert "sexpgpu: error: cannot read 'lots' as a size" in r.stderr


def _example(name):
    res = analyze_file(str(ROOT / "examples" / name))
    assert res.program is not None, [d.message for d in res.diagnostics]
    return res.program


def test_the_accelerator_target_is_the_default():
    program = fixture_program()
    report = explain(program)
    assert TARGETS == ("accelerator", "cpu") and report["step"]["target"] == "accelerator"
    assert json.dumps(report) == json.dumps(explain(program, target="accelerator"))
    assert explain(program, target="cpu")["step"]["target"] == "cpu"
    assert "live sets for the cpu target" in to_text(explain(program, target="cpu")).splitlines()[0]
    assert "target" not in to_text(report).splitlines()[0]
    with pytest.raises(ValueError, match="unknown target 'gpu'"):
        explain(program, target="gpu")


def test_the_cpu_target_holds_the_select_a_library_reduction_reads():
    # distill-gpt2's generator sums the logits at one column, `(sum (where mask logits 0.0) :axes [1])`:
    # an accelerator fuses the select into the reduction, the CPU's library reduction reads it as a
    # buffer of the logits' size (f32 [32 64 1024], 8 MiB) beside the logits
    program = _example("distill-gpt2.sx")
    acc, cpu = (step_graphs(program, 1, t)["generate.step"] for t in TARGETS)
    logits = 32 * 64 * 1024 * 4
    assert cpu.temps + cpu.outputs >= 2 * logits > acc.temps + acc.outputs
    assert (cpu.flops, cpu.args, cpu.outputs) == (acc.flops, acc.args, acc.outputs)


def test_outputs_buffers_hold_temporaries_until_the_outputs_are_computed():
    # distill's :finish returns the teacher's logits (2 MiB), computed last: until then XLA packs the
    # attention's and the MLP's temporaries into its buffer, so the temporaries counted beside the
    # outputs are well under the peak of temporaries alone (the attention's scores and the MLP's
    # hidden layer, each 2 MiB or more, are not counted twice)
    g = step_graphs(_example("distill.sx"), 1)["generate.finish"]
    assert g.outputs >= 32 * 64 * 256 * 4
    assert g.temps <= 32 * 64 * 256 * 4 + 1024 ** 2 // 2


def test_the_trips_donated_state_is_counted_once():
    # generate.step's state is donated (sexpgpu_runtime/lowering/generator_graphs.py): XLA writes each
    # output leaf into its argument's buffer and counts it once; select.sx's trip returns its state as it is
    g = step_graphs(_example("select.sx"), 1)["generate.step"]
    assert g.aliased == g.outputs > 0 and g.live == g.args + g.temps
    assert step_graphs(_example("select.sx"), 1)["generate.finish"].aliased == 0


def test_a_scatter_into_zeros_materialises_them():
    # code-lm.sx's prefill writes its keys and values (`cache-write`, an `at-set`) into empty caches
    # (`zeros` [32 64 4 16] f32): XLA fills a buffer with the zeros first, then scatters into it
    cache = 32 * 64 * 4 * 16 * 4
    program = _example("code-lm.sx")
    init, step = (step_graphs(program, 1, "cpu")[f"generate.{p}"] for p in ("init", "step"))
    assert init.temps >= cache
    assert step.temps < 3 * cache   # a trip scatters into the caches it was given, in place


def test_lora_weights_are_folded_on_every_call():
    # lora.sx's adapters are the only trainable parameters: the training graph reads each adapted weight
    # as `KEY + scale * reshape(A @ B)`, so its gradient runs back through the student (about twice its
    # forward again), where a trace of the frozen weights alone would have no gradient at all and cost
    # what the pass does (the student's forward and the base's)
    graphs = step_graphs(_example("lora.sx"), 1, "cpu")
    train, held_out = graphs["train"], graphs["pass held-out-eval"]
    assert train.flops > 1.5 * held_out.flops
    assert train.temps > 4 * 32 * 64 * 1024 * 4   # the backward's logits-sized buffers


def test_the_cpu_runs_independent_chains_side_by_side():
    # lora.sx's pass computes the student's and the frozen base's logits ([32 64 1024] f32 each) before
    # either cross-entropy reads them on the CPU (XLA's schedule, by depth); an accelerator's estimate keeps
    # the file's order, one model's logits at a time
    logits = 32 * 64 * 1024 * 4
    program = _example("lora.sx")
    cpu, acc = (step_graphs(program, 1, t)["pass held-out-eval"] for t in ("cpu", "accelerator"))
    assert cpu.temps >= 2 * logits > acc.temps


def test_cli_target():
    r = sx("explain", "--target", "cpu", "--format", "json", str(FIXTURE))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads(json.dumps(explain(analyze_file(str(FIXTURE)).program, target="cpu")))
    r = sx("explain", "--target", "gpu", str(FIXTURE))
    assert r.returncode == 2 and "sexpgpu: error: unknown --target 'gpu'" in r.stderr


# =========================================================================== against XLA, on the CPU

CHECKED = {"fixture": (FIXTURE, None), "attention": (None, ATTENTION)}
CHECKED.update({f"example {p.name}": (p, None) for p in EXAMPLES})


def _program(key):
    path, text = {**CHECKED, "bf16": (None, RunFile.fixture().set("run :precision", ":bf16"))}[key]
    if path is not None:
        res = analyze_file(str(path))
        assert res.program is not None, [d.message for d in res.diagnostics]
        return res.program
    return program_of(text)


_XLA: dict = {}


def checked(key):
    """(program, static report for the CPU target, XLA's analysis of each graph on the CPU), compiled
    once per test session."""
    if key not in _XLA:
        from sexpgpu_runtime import backend_target, xla_report
        assert backend_target() == "cpu"
        program = _program(key)
        report = explain(program, target="cpu")
        _XLA[key] = (program, report, xla_report(program, report)["graphs"])
    return _XLA[key]


def estimates(report) -> dict:
    out = {g["name"]: g for g in report["graphs"]}
    for p in report["passes"]:
        out[p["name"]] = p
        out.update({s["name"]: s for s in p["generator"]})
    return out


@pytest.mark.slow
@pytest.mark.parametrize("key", list(CHECKED) + ["bf16"])
def test_parameter_state_argument_and_output_bytes_are_exact(key):
    import jax
    from sexpgpu_runtime.weights.optim import make_optimizer
    from sexpgpu_runtime.weights.params import init_params
    program, report, xla = checked(key)
    assert all("error" not in x for x in xla.values()), xla
    trainable, frozen = jax.eval_shape(lambda: init_params(program.params, 0))
    nbytes = lambda tree: sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(tree))
    mem = report["memory"]
    assert mem["params"] == nbytes((trainable, frozen)) and mem["frozen"] == nbytes(frozen)
    assert mem["optimizer"] == nbytes(jax.eval_shape(make_optimizer(program.run.optimizer).init, trainable))
    gen, S = report["generation"], report["step"]["stack"]
    if gen is not None:
        # generate.init also returns the group's batch and context rows ([S 6] i64), the copies later graphs read
        batch = _plist_bytes(program.loaders[program.run.loader].batch_type())
        assert xla["generate.init"]["outputs"] == gen["state_bytes_stacked"] + S * (batch + 8 * len(CONTEXT_KEYS))
        assert gen["state_bytes_stacked"] == S * gen["state_bytes"]
        assert xla["generate.step"]["outputs"] == gen["state_bytes_stacked"]
        assert xla["generate.finish"]["outputs"] == S * gen["made_bytes"]
    # the summed gradient, not M; and the i64 step of the first non-finite loss (the update keeps the parameters then)
    assert xla["update"]["args"] == mem["trainable"] * 2 + mem["optimizer"] + 8
    for name, e in estimates(report).items():
        assert (e["live"]["args"], e["live"]["outputs"]) == (xla[name]["args"], xla[name]["outputs"]), name


@pytest.mark.slow
@pytest.mark.parametrize("key", list(CHECKED) + ["bf16"])
def test_flops_within_25_percent(key):
    _, report, xla = checked(key)
    for name, e in estimates(report).items():
        x = xla[name]["flops"]
        assert abs(e["flops"] - x) <= 0.25 * x + 1e3, (name, e["flops"], x)


_PEAK_SCRIPT = """
import sys
from sexpgpu_lang import analyze, analyze_file
from sexpgpu_runtime.lowering.xla_report import compile_graphs
path, text, stack = sys.argv[1], sys.stdin.read(), int(sys.argv[2])
res = analyze(text, "case.sx") if text else analyze_file(path)
compile_graphs(res.program, stack)
"""


def xla_peak_live(key, stack: int) -> dict[str, int]:
    """XLA's own peak live set (bytes) of each graph of `key`'s step on the CPU, by jit name
    (`pass_held-out-eval`, `train` ...): the peak of its buffer assignment's live ranges (arguments
    included), read from the `*-live-range.txt` that `--xla_dump_to` writes, where the allocation
    `memory_analysis()` reports also holds the heap's fragmentation."""
    import os
    import tempfile
    from pathlib import Path
    path, text = {**CHECKED}[key]
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={d}", JAX_PLATFORMS="cpu")
        r = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(path or ""), str(stack)], input=text or "",
                           capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        out = {}
        for f in Path(d).glob("*.jit_*.cpu_after_optimizations-live-range.txt"):
            m = re.search(r"Stack trace breakdown for peak usage: ([\d ]+) bytes", f.read_text())
            out[f.name.split(".")[1][len("jit_"):]] = int(m.group(1).replace(" ", ""))
        return out


@pytest.mark.slow
@pytest.mark.parametrize("key", list(CHECKED))
def test_live_sets_within_25_percent(key):
    # Against the allocation XLA reports; where that is more than 25% over XLA's own peak live set
    # (its heap's fragmentation, which depends on the order XLA packs buffers in: code-lm.sx's eval
    # pass, whose attention scores take three 2 MiB slots where two are live at once), against that
    # peak instead, within 25% as well.
    _, report, xla = checked(key)
    peaks = None
    for name, e in estimates(report).items():
        x, est = xla[name]["live"], e["live"]["total"]
        if abs(est - x) <= 0.25 * x:
            continue
        peaks = peaks or xla_peak_live(key, report["step"]["stack"])
        jit = ("generate " + name.split(" generate.")[1]) if " generate." in name else name  # a pass's generator
        if report["step"]["stack"] > 1 and not name.startswith("pass ") and name != "update":
            jit += " stacked"   # the step's stacked graphs (sexpgpu_runtime/lowering/graphs.py names them so)
        peak = peaks[jit.replace(" ", "_").replace(".", "_")]
        assert x > 1.25 * peak and abs(est - peak) <= 0.25 * peak, (name, est, x, peak)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["fixture", "attention"])
def test_the_accelerator_model_agrees_where_the_cpus_library_plays_no_part(key):
    # The fixture and the attention model have no select before a large reduction, no softmax that
    # XLA's CPU fuses into a matmul, no flattened matmul output read by a rank-3 fusion: the default
    # (accelerator) estimate is within 25% of the CPU's too.
    program, _, xla = checked(key)
    for name, e in estimates(explain(program)).items():
        x = xla[name]["live"]
        assert abs(e["live"]["total"] - x) <= 0.25 * x, (name, e["live"]["total"], x)


@pytest.mark.slow
def test_bf16_live_sets_are_what_the_cpu_makes_of_them():
    # The CPU computes bf16 matmuls in f32: it converts their operands and results, so its temporaries
    # around a matmul are f32-sized, up to twice the bf16 buffers an accelerator holds (docs/explain.md).
    _, report, xla = checked("bf16")
    for name, e in estimates(report).items():
        est, x = e["live"]["temps"], xla[name]["temps"]
        assert est <= x + 1024 and x <= 2.25 * est + 1024, (name, est, x)


@pytest.mark.slow
def test_cli_xla_prints_both_numbers(tmp_path):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    path = tmp_path / "small.sx"
    path.write_text(SMALL)
    r = CliRunner().invoke(app, ["explain", "--xla", "--format", "json", str(path)])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    xla = report["xla"]
    assert xla["backend"] == "cpu" and set(xla["graphs"]) == set(estimates(report))
    assert report["step"]["target"] == "cpu"  # --xla on the CPU estimates for the CPU: like with like
    assert all(0.75 <= g["ratio"]["flops"] <= 1.25 for g in xla["graphs"].values())
    text = to_text(report)
    assert "(cpu backend reports no memory limit; assumed 16 GiB)" in text
    assert len([l for l in text.splitlines() if re.match(r"[│ ]+xla  \S+ \S*FLOP · ", l)]) == 2  # train, update
    assert re.search(r"XLA on cpu \(cpu\): 2 of 2 graphs compiled; estimate / XLA: FLOPs \S+, live set \S+", text)
