"""Several processes through jax.distributed on the CPU (docs/sharding.md, "Several processes").

Each test starts local processes that run CHILD: it joins the run (unless
it is the only process), trains the fixture with a checkpoint every 2
steps and FSDP, logs every record read (`Loader.batch(position, lo, hi)`)
and writes one JSON file: the losses, the reads and the parameters'
shardings. Two processes with two CPU devices each make a mesh of four.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow


CHILD = textwrap.dedent(r'''
    import json, sys
    from pathlib import Path
    root, port, procs, pid, steps, run_dir, resume, out = sys.argv[1:9]
    sys.path.insert(0, str(Path(root) / "tests"))
    from sexpgpu_runtime.devices import sharding
    if int(procs) > 1:
        sharding.initialize(f"127.0.0.1:{port}", int(procs), int(pid))
    import jax, numpy as np
    from helpers import variant, program_of
    from sexpgpu_runtime.data import loaders
    from sexpgpu_runtime.run import train as tr
    from sexpgpu_runtime.weights.params import flatten
    text = variant(":log (:every 50))", ":log (:every 1) :checkpoint (:every 2))")
    reads = []
    batch = loaders.Loader.batch
    def logged(self, start, *rows):
        got = batch(self, start, *rows)
        reads.append([int(start), *map(int, rows), {k: np.asarray(v).tolist() for k, v in got.items()}])
        return got
    loaders.Loader.batch = logged
    opts = tr.RunOptions(steps=int(steps), run_dir=Path(run_dir), quiet=True, fsdp=True, resume=resume == "resume",
                         export=None if resume == "resume" else Path(run_dir + f"-{steps}.safetensors"))
    try:
        res = tr.train(program_of(text, str(Path(run_dir) / "run.sx")), opts)
    except tr.RunError as e:
        Path(out).write_text(json.dumps({"error": str(e)}))
        sys.exit(1)
    specs = {".".join(k): str(getattr(v.sharding, "spec", None)) for k, v in flatten(res.trainable).items()}
    Path(out).write_text(json.dumps({"process": jax.process_index(), "devices": len(jax.devices()),
                                     "losses": [r["loss"] for r in res.history], "steps": [r["step"] for r in res.history],
                                     "reads": reads, "specs": specs}))
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp_path, name: str, procs: int, steps: int, run_dir, resume: bool = False) -> list:
    """Start `procs` processes of CHILD (two CPU devices each; one device and no mesh when alone) in the
    run dir `tmp_path/run_dir` (a list: one per process); [(process, its JSON file)]."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={2 if procs > 1 else 1}"}
    port = free_port()
    dirs = run_dir if isinstance(run_dir, list) else [run_dir] * procs
    return [(subprocess.Popen([sys.executable, str(script), str(ROOT), str(port), str(procs), str(i), str(steps),
                               str(tmp_path / dirs[i]), "resume" if resume else "no", str(tmp_path / f"{name}{i}.json")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), tmp_path / f"{name}{i}.json")
            for i in range(procs)]


def finish(started: list, ok: bool = True) -> list[dict]:
    outs = []
    for p, path in started:
        log, _ = p.communicate(timeout=240)
        if ok:
            assert p.returncode == 0, (log[-3000:], path.read_text() if path.exists() else None)
        outs.append(json.loads(path.read_text()))
    return outs


def test_two_processes_read_their_own_rows_and_save_a_checkpoint_that_resumes(tmp_path):
    """Two processes (FSDP over a mesh of 4) train as one process does: each reads only its half of
    every global batch (the halves are one process's batch), the losses agree, process 0 alone writes
    metrics.jsonl, the checkpoint both wrote resumes on two processes bit for bit and on one process."""
    a, one = start(tmp_path, "a", 2, 2, "shared"), start(tmp_path, "one", 1, 4, "one")
    a, (one,) = finish(a), finish(one)
    shutil.copytree(tmp_path / "shared", tmp_path / "copy")
    b, u, r1 = (start(tmp_path, "b", 2, 4, "shared", resume=True), start(tmp_path, "u", 2, 4, "uninterrupted"),
                start(tmp_path, "r", 1, 4, "copy", resume=True))
    b, u, (r1,) = finish(b), finish(u), finish(r1)

    # Each process read rows [0, 32) or [32, 64) of every batch of 64, and the halves are one process's batches.
    assert [x["process"] for x in a] == [0, 1] and a[0]["devices"] == 4 and one["devices"] == 1
    assert [r[1:3] for r in a[0]["reads"]] == [[0, 32]] * 4 and [r[1:3] for r in a[1]["reads"]] == [[32, 64]] * 4
    assert [r[0] for r in a[0]["reads"]] == [r[0] for r in a[1]["reads"]] == [r[0] for r in one["reads"][:4]] == [0, 64, 128, 192]
    for r0, r1_, whole in zip(a[0]["reads"], a[1]["reads"], one["reads"]):
        for field in whole[1]:
            assert r0[3][field] + r1_[3][field] == whole[1][field], field
    # The parameters are split over both processes' devices.
    assert a[0]["specs"] == a[1]["specs"] and a[0]["specs"]["hidden"] == "P('data',)"
    # Both processes log the global losses, which are one process's within float tolerance.
    for x in a + u:
        np.testing.assert_allclose(x["losses"], one["losses"][:len(x["losses"])], rtol=1e-5)
    # The two-process checkpoint of step 2 resumes on two processes exactly as the run that never stopped...
    assert b[0]["steps"] == [3, 4] and b[0]["losses"] == b[1]["losses"] == u[0]["losses"][2:]
    # ... and on one process (no mesh) as a one-process run.
    assert r1["steps"] == [3, 4]
    np.testing.assert_allclose(r1["losses"], one["losses"][2:], rtol=1e-5)
    # --export: the parameters gathered from both processes' shards, written once, as one process's.
    from safetensors.numpy import load_file
    two, alone = load_file(tmp_path / "uninterrupted-4.safetensors"), load_file(tmp_path / "one-4.safetensors")
    assert sorted(two) == sorted(alone) == ["embed", "first", "hidden", "out", "second"]
    for k in two:
        np.testing.assert_allclose(two[k], alone[k], rtol=1e-4, atol=1e-6)
    rows = [json.loads(line) for line in (tmp_path / "shared" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r["loss"] for r in rows] == a[0]["losses"] + b[0]["losses"]


def test_two_processes_with_different_run_dirs_are_refused(tmp_path):
    """Their checkpoints would be split between two dirs: both processes stop with one line."""
    started = start(tmp_path, "e", 2, 2, ["d0", "d1"])
    outs = finish(started, ok=False)
    assert all(p.returncode == 1 for p, _ in started)
    for i, out in enumerate(outs):
        assert out["error"].startswith("the processes of this run write checkpoints to different dirs "
                                       f"(this one, process {i}: {tmp_path / f'd{i}' / 'checkpoints'}; "
                                       f"process {1 - i} another)"), out
