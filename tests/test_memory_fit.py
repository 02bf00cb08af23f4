"""What `sexpgpu run` checks of memory before it allocates (sexpgpu_runtime/run/fits.py): a step
whose memory plan could never fit the device is refused in one line naming its largest tensor, and
XLA running out of memory during a run anyway is one line naming the checkpoint `--resume` continues
from. The decision is tested with a fake memory size; one `sexpgpu run` of the refused file proves
the command line says it in one line and allocates nothing."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT, program_of, sexpgpu_program, variant

jax = pytest.importorskip("jax")

from sexpgpu_lang.explain import device_peak, memory_plan, step_graphs  # noqa: E402
from sexpgpu_runtime.devices import device  # noqa: E402
from sexpgpu_runtime.devices.device import FIT_MARGIN, fit_verdict  # noqa: E402
from sexpgpu_runtime import RunError  # noqa: E402
from sexpgpu_runtime.run import fits  # noqa: E402
from sexpgpu_runtime import RunOptions, train  # noqa: E402

GRPO = (ROOT / "tests" / "fixtures" / "grpo-by-hand.sx").read_text()   # examples/grpo.sx as written by hand
#: The tester's mutant: every prompt answered 1048577 times (about 160 GiB by the memory plan,
#: 130 GiB by XLA's own analysis of the compiled training graph on the CPU).
HUGE = GRPO.replace("(def group 8)", "(def group 1048577)")
GiB = 2 ** 30


def plan_peak(program, target: str = "cpu", donate: bool = False) -> int:
    return device_peak(program, memory_plan(program, step_graphs(program, 1, target), 1, donate), 1)


def test_the_grpo_mutant_is_refused_in_one_line_naming_its_largest_tensor():
    program = program_of(HUGE, "grpo.sx")
    why = fit_verdict(program, 16 * GiB, "fake memory", 1, "cpu", donate=False)
    assert why is not None and "\n" not in why
    assert why.startswith("the step needs about 160.6 GiB by the memory plan of `sexpgpu explain`")
    assert "more than the 16.0 GiB of fake memory" in why
    # (+ here start next) in the policy's :apply, on every answer (16 prompts x 1048577) of the generator
    line = next(i for i, text in enumerate(HUGE.splitlines(), 1) if "(+ here start next)" in text)
    col = HUGE.splitlines()[line - 1].index("(+ here start next)") + 1
    assert f"its largest tensor is the `+` at grpo.sx:{line}:{col}, [16777232 8 64] f32 (32.0 GiB)" in why
    assert "a smaller `:batch`" in why and "`:remat`" in why
    assert why.endswith("`sexpgpu explain grpo.sx --memory-budget 16.0GiB`")


def test_devices_sharing_one_memory_are_counted_together():
    # the CPU devices of a mesh in one process share the host's memory: two halves of the records
    program = program_of(HUGE.replace(":seed 0", ":seed 0 :devices 2"), "grpo.sx")
    why = fit_verdict(program, 16 * GiB, "fake memory", 1, "cpu", donate=False, shared=2)
    assert why is not None and why.startswith("the step needs about 160.6 GiB on its 2 devices together by the")
    alone = fit_verdict(program, 16 * GiB, "fake memory", 1, "cpu", donate=False)
    assert alone is not None and alone.startswith("the step needs about 80.3 GiB per device by the")


def test_the_margin_refuses_only_a_plan_beyond_it():
    program = program_of(HUGE, "grpo.sx")
    peak = plan_peak(program)
    just_fits = int(peak / FIT_MARGIN) + 1   # the plan is within FIT_MARGIN of it: left to run
    assert fit_verdict(program, just_fits, "fake memory", 1, "cpu", donate=False) is None
    assert fit_verdict(program, just_fits - 2, "fake memory", 1, "cpu", donate=False) is not None


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.sx")), ids=lambda p: p.name)
@pytest.mark.parametrize("target", ["cpu", "accelerator"])
def test_every_example_fits_a_small_machine(path, target):
    # 1 GiB of memory: far less than the machines the examples run on, and none is refused
    program = program_of(path.read_text(), str(path))
    assert fit_verdict(program, GiB, "fake memory", 1, target, donate=target != "cpu") is None


def test_parameters_alone_too_big_are_said_as_such():
    program = program_of(GRPO.replace("(def dim 64)", "(def dim 2000000000)"), "grpo.sx")
    why = fit_verdict(program, 80 * GiB, "H100 memory")
    assert why is not None and why.startswith("the parameters and optimizer state take ")
    assert "more than the 80.0 GiB of H100 memory: the run could never fit" in why


def test_the_cpu_holds_the_plan_to_the_host_memory(monkeypatch):
    monkeypatch.setattr(device, "device_budget", lambda: (None, "cpu backend reports no memory limit"))
    monkeypatch.setattr(device, "host_memory", lambda: 3 * GiB)
    assert device.memory_available() == (3 * GiB, "host memory available")
    monkeypatch.setattr(device, "host_memory", lambda: None)
    assert device.memory_available()[0] is None
    monkeypatch.setattr(device, "device_budget", lambda: (80 * GiB, "H100 memory"))
    assert device.memory_available() == (80 * GiB, "H100 memory")


def test_host_memory_is_a_positive_figure_here():
    got = device.host_memory()
    assert got is None or got > 0


def test_train_refuses_before_the_run_dir_is_made(tmp_path, monkeypatch):
    monkeypatch.setattr(fits, "memory_available", lambda: (16 * GiB, "fake memory"))
    run_dir = tmp_path / "runs" / "grpo"
    with pytest.raises(RunError) as e:
        train(program_of(HUGE, "grpo.sx"), RunOptions(steps=1, run_dir=run_dir, quiet=True))
    assert "its largest tensor is the `+` at grpo.sx:" in str(e.value)
    assert not (tmp_path / "runs").exists()   # nothing made, nothing allocated


def test_no_memory_figure_refuses_nothing(monkeypatch):
    monkeypatch.setattr(fits, "memory_available", lambda: (None, "no limit"))
    fits.refuse_never_fits(program_of(HUGE, "grpo.sx"), RunOptions(steps=1, run_dir=Path("unused"), quiet=True))


def test_out_of_memory_is_recognised_by_its_status():
    oom = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 279.00GiB.")
    assert fits.is_out_of_memory(oom)
    assert not fits.is_out_of_memory(jax.errors.JaxRuntimeError("INTERNAL: something else"))
    assert not fits.is_out_of_memory(MemoryError("RESOURCE_EXHAUSTED"))
    line = str(fits.out_of_memory(oom, 3, 2, "runs/x/checkpoints"))
    assert "\n" not in line
    assert line.startswith("the device ran out of memory in step 3 (RESOURCE_EXHAUSTED: Out of memory while trying "
                           "to allocate 279.00GiB.)")
    assert line.endswith("the last checkpoint is step 2 in runs/x/checkpoints, which --resume continues from")


@pytest.mark.slow
def test_a_run_that_fits_runs_and_one_out_of_memory_anyway_resumes(tmp_path, monkeypatch):
    """A tight fake memory (the plan within FIT_MARGIN of it) still runs; XLA's RESOURCE_EXHAUSTED in
    step 4 (raised where a trip starts) is one RunError naming the checkpoint of step 2, and the
    resumed run trains the remaining steps."""
    text = variant(":log (:every 25)", ":log (:every 1)\n     :checkpoint (:every 2)", GRPO)
    program = program_of(text, str(tmp_path / "grpo.sx"))
    tight = int(plan_peak(program) / FIT_MARGIN) + 1
    monkeypatch.setattr(fits, "memory_available", lambda: (tight, "fake memory"))

    def oom(step, trip):
        if step == 3 and trip == 1:
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB.")

    run_dir = tmp_path / "run"
    with pytest.raises(RunError) as e:
        train(program, RunOptions(steps=6, run_dir=run_dir, quiet=True), on_trip=oom)
    assert str(e.value).startswith("the device ran out of memory in step 4 (RESOURCE_EXHAUSTED")
    assert str(e.value).endswith(f"the last checkpoint is step 2 in {run_dir / 'checkpoints'}, which --resume "
                                 "continues from")
    result = train(program, RunOptions(steps=6, run_dir=run_dir, quiet=True, resume=True))
    assert result.steps == 6 and result.start == 2
    steps = [json.loads(r)["step"] for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_sexpgpu_run_refuses_the_mutant_in_one_line(tmp_path):
    exe = sexpgpu_program()
    assert exe is not None
    text, need = HUGE, "160.6 GiB"
    host = device.host_memory()
    if host is not None and plan_peak(program_of(HUGE)) <= host * FIT_MARGIN:   # a machine that big: 64 times more
        text, need = HUGE.replace("(def prompts 16)", "(def prompts 1024)"), ""
    path = tmp_path / "grpo.sx"
    path.write_text(text)
    proc = subprocess.run([exe, "run", str(path), "--run-dir", str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"sexpgpu: error: the step needs about {need}"), lines[0]
    assert "of host memory available: its largest tensor is the `+` at " in lines[0]
    assert not (tmp_path / "run").exists()


def test_parameters_too_big_alone_name_the_largest_with_its_place():
    text = GRPO.replace("(def dim 64)", "(def dim 300000)")
    why = fit_verdict(program_of(text, "grpo.sx"), 80 * GiB, "H100 memory", 1, "cpu", donate=False)
    assert why is not None and "\n" not in why
    assert why.startswith("the parameters and optimizer state take 1006.0 GiB per device, more than the 80.0 GiB "
                          "of H100 memory: the run could never fit")
    line = next(i for i, s in enumerate(text.splitlines(), 1) if ":hidden (normal [dim dim]" in s)
    col = text.splitlines()[line - 1].index("(normal [dim dim]") + 1
    assert (f"its largest parameter is `hidden` [300000 300000] f32 (335.3 GiB), declared at grpo.sx:{line}:{col}"
            in why)
