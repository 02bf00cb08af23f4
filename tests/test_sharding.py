"""Data parallel over a mesh (sexpgpu_runtime/devices/sharding.py), on the CPU's 8 fake devices.

XLA_FLAGS=--xla_force_host_platform_device_count=8 must be set before JAX
starts, and this pytest process started JAX with one device already, so
every multi-device run happens in a child process (CHILD below) that prints
one JSON line: each step's loss, the records each step read, the shardings
it saw, and how often each graph was traced.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers import ROOT, cursor, fixture_text, program_of
from runfile import RunFile

FIXTURE = RunFile.fixture()

CHILD = textwrap.dedent(r'''
    import json, sys
    from pathlib import Path
    sys.path.insert(0, str(Path(sys.argv[1]) / "tests"))
    import jax
    import numpy as np
    from helpers import program_of
    from runfile import RunFile
    from sexpgpu_runtime.data import loaders
    from sexpgpu_runtime.run import train as tr
    from sexpgpu_runtime.weights.params import flatten

    devices, stack, steps, run_dir = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
    fsdp = sys.argv[6] == "fsdp"
    text = RunFile.fixture().set("run :log :every", "1").set("run :stack", str(stack))
    read = []
    batch = loaders.Loader.batch
    def logged(self, start, *rows):
        out = batch(self, start, *rows)
        read.append([int(start), float(sum(np.asarray(v, np.float64).sum() for v in out.values()))])
        return out
    loaders.Loader.batch = logged
    seen = {}
    generate = tr.Graphs.generate
    def watched(self, *a, **k):   # the group's batch on the device, as generate.init returns it
        out = generate(self, *a, **k)
        seen["batch"] = [str(v.sharding) for v in out[0].values()]
        seen["batch_devices"] = sorted({len(v.sharding.device_set) for v in out[0].values()})
        return out
    tr.Graphs.generate = watched
    step = tr.Trainer.step
    def stepped(self, state, *a, **k):
        new, reports = step(self, state, *a, **k)
        seen["opt_state"] = sorted({str(getattr(v.sharding, "spec", None)) for v in jax.tree_util.tree_leaves(new.opt_state)})
        return new, reports
    tr.Trainer.step = stepped
    opts = tr.RunOptions(steps=steps, run_dir=run_dir, quiet=True, devices=devices, fsdp=fsdp or None)
    res = tr.train(program_of(text, str(run_dir / "run.sx")), opts)
    params = {".".join(k): np.asarray(v).tolist() for k, v in flatten(res.trainable).items()}
    params_devices = sorted({len(v.sharding.device_set) for v in flatten(res.trainable).values()})
    seen["params"] = {".".join(k): [str(getattr(v.sharding, "spec", None)), [list(s.data.shape) for s in v.addressable_shards]]
                      for k, v in flatten(res.trainable).items()}
    print(json.dumps({"devices": len(jax.devices()), "losses": [r["loss"] for r in res.history],
                      "records": read, "traces": res.traces, "params": params, "seen": seen,
                      "params_devices": params_devices}))
''')


# Eight CPU devices share this machine's cores: on 2 loaded cores one device's thread can reach a
# collective more than XLA:CPU's default 40 s after the others, which aborts the process; the
# limit is raised to just under the child's own timeout.
EIGHT_DEVICES = ("--xla_force_host_platform_device_count=8 --xla_cpu_collective_call_terminate_timeout_seconds=280 "
                 "--xla_cpu_collective_call_warn_stuck_timeout_seconds=60")


def child(devices: int, stack: int, steps: int, run_dir, fsdp: bool = False) -> dict:
    env = {**os.environ, "XLA_FLAGS": EIGHT_DEVICES, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(devices), str(stack), str(steps), str(run_dir),
                          "fsdp" if fsdp else "replicated"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("stack", [1, 2])
def test_eight_devices_give_one_devices_losses_and_record_order(tmp_path, stack):
    one = child(1, stack, 4, tmp_path / "one")
    eight = child(8, stack, 4, tmp_path / "eight")
    assert one["devices"] == eight["devices"] == 8
    # One device: no mesh. Eight: every batch split over the eight, the parameters on all of them.
    assert one["seen"]["batch_devices"] == [1] and eight["seen"]["batch_devices"] == [8]
    assert all(("None, " if stack > 1 else "") + "'data'" in s for s in eight["seen"]["batch"]), eight["seen"]
    assert eight["params_devices"] == [8]
    assert eight["records"] == one["records"]
    assert len(one["losses"]) == 4
    np.testing.assert_allclose(eight["losses"], one["losses"], rtol=1e-4, atol=1e-5)
    for k in one["params"]:
        np.testing.assert_allclose(eight["params"][k], one["params"][k], rtol=1e-3, atol=1e-5)
    assert all(n == 1 for n in eight["traces"].values()), eight["traces"]


@pytest.mark.slow
@pytest.mark.parametrize("stack", [1, 2])
def test_fsdp_on_eight_devices_gives_one_devices_losses_with_the_parameters_split(tmp_path, stack):
    """`--fsdp`: every parameter and its optimizer state split along `data` on its largest axis that 8
    divides; the losses and the trained parameters are one device's, within float tolerance, with
    `:microbatches 2` stacked (stack 2) or not (stack 1)."""
    from sexpgpu_lang.mesh import fsdp_spec
    one = child(1, stack, 4, tmp_path / "one")
    eight = child(8, stack, 4, tmp_path / "eight", fsdp=True)
    assert eight["records"] == one["records"]
    np.testing.assert_allclose(eight["losses"], one["losses"], rtol=1e-4, atol=1e-5)
    for k in one["params"]:
        np.testing.assert_allclose(eight["params"][k], one["params"][k], rtol=1e-3, atol=1e-5)
    shapes = {k: np.shape(v) for k, v in one["params"].items()}   # embed [16 64], hidden [64 64], out [64 16], ...
    for k, (spec, shards) in eight["seen"]["params"].items():
        want = fsdp_spec(shapes[k], 8)
        assert spec.replace(",)", ")") == want, (k, spec, want)
        d = want.count("None")   # the split axis: each device holds 1/8 of it
        assert len(shards) == 8 and all(s[d] == shapes[k][d] // 8 for s in shards), (k, shards)
    assert eight["seen"]["params"]["hidden"][0] == "P('data',)"
    assert eight["seen"]["params"]["embed"][0] == "P(None, 'data')"
    # Adam's moments are split as their parameters are (its step count, a scalar, is replicated).
    assert set(eight["seen"]["opt_state"]) == {"P()", "P('data',)", "P(None, 'data')"}
    replicated = child(8, stack, 1, tmp_path / "rep")
    assert set(replicated["seen"]["opt_state"]) == {"P()"}
    assert all(n == 1 for n in eight["traces"].values()), eight["traces"]


def test_fsdp_splits_the_largest_axis_the_mesh_divides():
    from sexpgpu_lang.mesh import fsdp_dim, fsdp_spec
    assert fsdp_dim((16, 64), 8) == 1 and fsdp_dim((64, 64), 8) == 0 and fsdp_dim((64, 16), 8) == 0
    assert fsdp_dim((3, 5), 8) is None and fsdp_dim((), 8) is None and fsdp_dim((64,), 1) is None
    assert fsdp_dim((4, 24), 8) == 1 and fsdp_dim((4,), 8) is None
    assert fsdp_spec((16, 64), 8) == "P(None, 'data')" and fsdp_spec((3,), 8) == "P()"


def test_shard_params_in_the_file_is_checked():
    from sexpgpu_lang import analyze
    assert program_of(FIXTURE.set("run :shard-params", ":fsdp")).run.shard_params == "fsdp"
    assert program_of(fixture_text()).run.shard_params == "replicated"
    res = analyze(FIXTURE.set("run :shard-params", ":zero3"), "x.sx")
    assert [d.message for d in res.diagnostics if d.code == "E-FORM-002"] == ["`:shard-params` has no value `:zero3`"]


def test_a_mesh_larger_than_the_devices_is_refused(tmp_path):
    from sexpgpu_runtime import OptionError, RunOptions, train
    import jax
    n = len(jax.devices()) + 1
    with pytest.raises(OptionError, match=f"asks for {n} devices"):
        train(program_of(fixture_text()), RunOptions(steps=1, run_dir=tmp_path, quiet=True, devices=n))


def test_devices_in_the_file_must_divide_every_batch():
    from sexpgpu_lang import analyze
    res = analyze(FIXTURE.set("run :devices", "5"), "x.sx")
    errs = [d for d in res.diagnostics if d.code == "E-FORM-002"]
    assert errs and "`:devices 5` does not divide `:batch 64` of loader `train`" in errs[0].message
    assert program_of(FIXTURE.set("run :devices", "8")).run.devices == 8
    assert program_of(fixture_text()).run.devices is None


def test_parse_mesh():
    from sexpgpu_runtime import parse_mesh
    assert parse_mesh("data=8") == (8, 1) and parse_mesh("4") == (4, 1)
    assert parse_mesh("data=2,model=4") == (2, 4) and parse_mesh("model=8") == (1, 8)
    for bad in ("data=x", "data=0", "model=0", "data=2,data=2"):
        with pytest.raises(ValueError):
            parse_mesh(bad)
    with pytest.raises(ValueError, match="--mesh names the axis `pipe`; the axes are `data` and `model`"):
        parse_mesh("data=8,pipe=2")


@pytest.mark.slow
def test_a_coordinator_that_is_not_host_and_port_is_one_line():
    from sexpgpu_lang.mesh import check_coordinator
    check_coordinator("10.0.0.1:1234"), check_coordinator("[::1]:80"), check_coordinator("node-0:65535")
    for bad in ("nonsense", "host:99999", "host:", ":123", "127.0.0.1:x", "host:0"):
        with pytest.raises(ValueError, match=f"--coordinator takes HOST:PORT.*got `{re.escape(bad)}`"):
            check_coordinator(bad)
    r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", str(ROOT / "tests" / "fixtures" / "tiny-generate.sx"),
                        "--coordinator", "nonsense", "--num-processes", "2", "--process-id", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "sexpgpu: error: --coordinator takes HOST:PORT, the address and port of process 0 with a port from 1 "
        "to 65535 (e.g. 10.0.0.1:1234), got `nonsense`"], r.stderr


def test_explain_shows_the_mesh_and_the_peak_per_device():
    from sexpgpu_lang.explain import explain, fmt_bytes, to_text
    one = explain(program_of(fixture_text()))
    assert one["mesh"] is None and "mesh:" not in to_text(one)
    report = explain(program_of(FIXTURE.set("run :devices", "8")))
    mesh = report["mesh"]
    assert mesh["devices"] == 8 and mesh["records_per_device"] == {"train": 8}
    assert mesh["shardings"]["batch"] == "P(None, 'data')" and mesh["shardings"]["params"] == "P()"
    mem = report["memory"]
    assert mem["params"] + mem["optimizer"] < mesh["peak_per_device"] < mem["peak"]
    assert "mesh: data=8 · records per device: `train` 8" in to_text(report)
    # The memory line is per device: the phases hold 1/8 of the records' bytes, the parameters whole.
    per = mesh["memory_per_device"]
    assert per["params"] == mem["params"] and per["optimizer"] == mem["optimizer"]
    assert per["train"] == -(-mem["train"] // 8) and per["generation"] == -(-mem["generation"] // 8)
    assert per["peak"] == mesh["peak_per_device"]
    text = to_text(report)
    line = next(l for l in text.splitlines() if l.startswith("memory per device (1 of data=8): "))
    assert f"train {fmt_bytes(per['train'])}" in line and f"peak {fmt_bytes(per['peak'])}" in line
    assert "memory: " not in text and f"memory of the whole run, unsharded (as one device would hold it): params {fmt_bytes(mem['params'])}" in text
    # Each graph's inputs and their shardings, under the graph's `in` line.
    shards = [l.split("shard ", 1)[1] for l in text.splitlines() if "  shard " in l]
    assert shards[:2] == ["batch P(None, 'data'), ctx P(), params P()",
                          "state P(None, 'data'), trip P(), ctx P(), params P()"]
    assert len(shards) == len(report["graphs"])
    assert "  shard " not in to_text(one)
    # A memory budget is one device's: the peak per device is what must fit in it.
    budget = (mesh["peak_per_device"] + mem["peak"]) // 2
    on_mesh = explain(program_of(FIXTURE.set("run :devices", "8")), budget, "given")
    assert on_mesh["memory"]["fits"] and not explain(program_of(fixture_text()), budget, "given")["memory"]["fits"]
    assert f"peak per device {fmt_bytes(mesh['peak_per_device'])} fits in" in to_text(on_mesh)
    # and `:stack :auto` picks its degree against it: on 8 devices the stacked step fits where on one it does not.
    from sexpgpu_lang.explain import choose_stack
    auto = FIXTURE.set("run :stack", ":auto")
    one_cands = dict((c["degree"], c["peak"]) for c in choose_stack(program_of(auto), 10 ** 12)[1])
    mesh_cands = dict((c["degree"], c["peak"]) for c in
                      choose_stack(program_of(auto.set("run :devices", "8")), 10 ** 12)[1])
    tight = (one_cands[2] + mesh_cands[2]) // 2
    assert choose_stack(program_of(auto), tight)[0] == 1
    assert choose_stack(program_of(auto.set("run :devices", "8")), tight)[0] == 2


def test_explain_with_fsdp_divides_the_parameters_and_optimizer_state_per_device():
    from sexpgpu_lang.explain import explain, to_text
    from sexpgpu_lang.mesh import with_mesh
    replicated = explain(program_of(FIXTURE.set("run :devices", "8")))
    fsdp = explain(program_of(FIXTURE.set("run :devices", "8").set("run :shard-params", ":fsdp")))
    mem, mesh = fsdp["memory"], fsdp["mesh"]
    assert mesh["shard_params"] == "fsdp" and replicated["mesh"]["shard_params"] == "replicated"
    # Every parameter of the fixture has an axis 8 divides: each device holds 1/8, and 1/8 of Adam's moments.
    assert mesh["params_per_device"] == mem["params"] // 8 and replicated["mesh"]["params_per_device"] == mem["params"]
    assert mesh["optimizer_per_device"] == -(-(mem["optimizer"]) // 8)
    assert mesh["param_shardings"] == {"embed": "P(None, 'data')", "first": "P(None, 'data')",
                                       "second": "P(None, 'data')", "hidden": "P('data')", "out": "P('data')"}
    assert mesh["peak_per_device"] < replicated["mesh"]["peak_per_device"]
    assert "params per device 4.0 KiB, optimizer per device 8.0 KiB" in to_text(fsdp)
    per = mesh["memory_per_device"]
    assert (per["params"], per["optimizer"]) == (mesh["params_per_device"], mesh["optimizer_per_device"])
    assert per["update"] == -(-mem["update"] // 8) and per["peak"] == mesh["peak_per_device"]
    assert "memory per device (1 of data=8): params 4.0 KiB · optimizer 8.0 KiB" in to_text(fsdp)
    # --mesh and --fsdp from the command line give the file's report.
    cli = explain(with_mesh(program_of(fixture_text()), 8, fsdp=True))
    assert cli["mesh"] == mesh
    with pytest.raises(ValueError, match="`:batch 64`, which does not divide by the 5 devices"):
        with_mesh(program_of(fixture_text()), 5)


def test_explain_mesh_is_the_command_line_s_mesh_and_refuses_fsdp_without_one():
    from sexpgpu_lang.explain import explain
    from sexpgpu_lang.mesh import explain_mesh
    program = program_of(fixture_text())
    assert explain_mesh(program, None, None) is program
    assert explain(explain_mesh(program, "data=8", True))["mesh"]["shard_params"] == "fsdp"
    assert explain_mesh(program, None, False).run.shard_params == "replicated"
    with pytest.raises(ValueError, match=r"^--fsdp splits the parameters over a mesh, and this run has none"):
        explain_mesh(program, None, True)
    with pytest.raises(ValueError, match="--mesh data=N needs N >= 1"):
        explain_mesh(program, "data=0", None)
    assert explain_mesh(program_of(FIXTURE.set("run :devices", "8")), None, True).run.devices == 8


@pytest.mark.slow
def test_sexpgpu_explain_takes_the_mesh_from_the_command_line():
    run = lambda *a: subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "explain",
                                     str(ROOT / "tests" / "fixtures" / "tiny-generate.sx"), *a],
                                    capture_output=True, text=True, timeout=120)
    r = run("--mesh", "data=8", "--fsdp", "--format", "json")
    assert r.returncode == 0, r.stderr
    mesh = json.loads(r.stdout)["mesh"]
    assert mesh["devices"] == 8 and mesh["shard_params"] == "fsdp" and mesh["param_shardings"]["hidden"] == "P('data')"
    r = run("--mesh", "data=8")
    assert r.returncode == 0 and "mesh: data=8 · records per device: `train` 8 · inputs: batch P(None, 'data')" in r.stdout
    r = run("--mesh", "data=5")
    assert r.returncode == 2 and r.stderr.strip() == ("sexpgpu: error: loader `train` has `:batch 64`, which does not "
                                                      "divide by the 5 devices of the mesh; make `:batch` a multiple of 5")
    r = run("--fsdp")
    assert r.returncode == 2 and r.stderr.strip() == ("sexpgpu: error: --fsdp splits the parameters over a mesh, and "
                                                      "this run has none: give --mesh data=N (or `:devices N` in `run`)")


@pytest.mark.slow
def test_two_processes_on_one_machine_train_as_one(tmp_path):
    """docs/sharding.md's two-process run: two local processes through jax.distributed, one CPU device
    each, a mesh of two, the coordinator from `JAX_COORDINATOR_ADDRESS` (read by JAX); process 0 logs the
    losses a one-process run logs, once, into the run dir both share."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    base = [sys.executable, "-m", "sexpgpu_cli.main", "run", str(ROOT / "tests" / "fixtures" / "tiny-generate.sx"),
            "--steps", "2", "--no-progress"]
    procs = [subprocess.Popen(base + ["--run-dir", str(tmp_path / "two"), "--num-processes", "2", "--process-id", str(i)],
                              env={**env, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    one = subprocess.run(base + ["--run-dir", str(tmp_path / "one")], env=env, capture_output=True, text=True, timeout=120)
    outs = [p.communicate(timeout=120) for p in procs]
    assert one.returncode == 0, one.stderr[-2000:]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    rows = lambda d: [json.loads(l) for l in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
    want, got = rows("one"), rows("two")
    assert [r["step"] for r in got] == [r["step"] for r in want] == [1, 2]
    np.testing.assert_allclose([r["loss"] for r in got], [r["loss"] for r in want], rtol=1e-5)
    assert "step 2/2" in outs[0][1] and "step 2/2" not in outs[1][1]   # process 0 alone prints the rows


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--num-processes", "2", "--process-id", "1"], ["--distributed"]])
def test_a_multi_process_run_without_a_coordinator_is_one_line(args):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COORDINATOR_ADDRESS", None)
    r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", str(ROOT / "tests" / "fixtures" / "tiny-generate.sx"),
                        "--steps", "1", *args], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip() == ("sexpgpu: error: cannot join a multi-process run: coordinator_address should be defined; "
                                "give --coordinator HOST:PORT, --num-processes N and --process-id I (or run where JAX "
                                "finds them: JAX_COORDINATOR_ADDRESS, SLURM, Open MPI, Kubernetes, Cloud TPU)")


@pytest.mark.slow
def test_a_run_on_eight_devices_saves_and_resumes_its_checkpoint(tmp_path):
    """Orbax saves the state of a run on one device and restores it onto a mesh of eight (and a mesh's
    checkpoint resumes on a mesh, an FSDP one on one device); the resumed steps log what the
    uninterrupted run logs."""
    run_file = tmp_path / "ck.sx"
    run_file.write_text(FIXTURE.set("run :log :every", "1").set("run :checkpoint", "(:every 2)"))
    env = {**os.environ, "XLA_FLAGS": EIGHT_DEVICES, "JAX_PLATFORMS": "cpu"}
    base = [sys.executable, "-m", "sexpgpu_cli.main", "run", str(run_file), "--no-progress"]
    a, b, c = (["--run-dir", str(tmp_path / d)] for d in "abc")
    for args in (["--steps", "2", "--mesh", "data=1"] + a, ["--steps", "4", "--mesh", "data=8", "--resume"] + a,
                 ["--steps", "2", "--mesh", "data=8"] + b, ["--steps", "4", "--mesh", "data=8", "--resume"] + b,
                 # FSDP: split on 8 devices, resumed on one (no mesh), whole
                 ["--steps", "2", "--mesh", "data=8", "--fsdp"] + c, ["--steps", "4", "--mesh", "data=1", "--resume"] + c):
        r = subprocess.run(base + args, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
    rows = lambda d: [json.loads(l) for l in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows("a")] == [r["step"] for r in rows("b")] == [r["step"] for r in rows("c")] == [1, 2, 3, 4]
    np.testing.assert_allclose([r["loss"] for r in rows("a")], [r["loss"] for r in rows("b")], rtol=1e-5)
    np.testing.assert_allclose([r["loss"] for r in rows("c")], [r["loss"] for r in rows("b")], rtol=1e-5)


def test_the_editor_completes_shard_params_and_its_values():
    from sexpgpu_lang import ide
    ix, at = cursor(":seed 0", ":shard-params :f$0 :seed 0")
    assert [c.label for c in ide.completions(ix, at).items] == [":replicated", ":fsdp"]
    ix, at = cursor(":seed 0", ":shard-p$0 :seed 0")
    assert ":shard-params" in [c.label for c in ide.completions(ix, at).items]


@pytest.mark.slow
def test_a_long_fsdp_run_on_eight_devices_keeps_few_steps_in_flight(tmp_path):
    # Logged every 50 steps, the loop queues many steps between reads; unbounded, XLA:CPU's eight
    # device threads deadlocked in an FSDP all-gather and aborted the run (SIGABRT) after about 60 s.
    # The loop waits for the step before once a step is queued (STEPS_AHEAD, sexpgpu_runtime/run/loop.py).
    env = {**os.environ, "XLA_FLAGS": EIGHT_DEVICES, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", str(ROOT / "tests" / "fixtures" / "tiny-generate.sx"),
                        "--steps", "150", "--mesh", "data=8", "--fsdp", "--run-dir", str(tmp_path / "run")],
                       env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows][-1] == 150
