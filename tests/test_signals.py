"""SIGINT and SIGTERM: noted by a handler, acted on where the loop looks; `sexpgpu run` stops, says how to
resume, exits 130 or 143, and `--resume` finishes the run."""
import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import signal_at_line, variant
from sexpgpu_runtime.errors import Stopped
from sexpgpu_runtime.run.signals import StopSignals


pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_is_noted_and_raised_where_the_loop_looks(sig, code):
    before = signal.getsignal(sig)
    with StopSignals() as stop:
        stop.check()
        os.kill(os.getpid(), sig)
        with pytest.raises(Stopped) as e:
            stop.check()
    assert (e.value.name, e.value.exit_code) == (signal.Signals(sig).name, code)
    assert signal.getsignal(sig) is before


def test_a_second_sigint_ends_the_process_at_once():
    code = ("import os, signal\n"
            "from sexpgpu_runtime.run.signals import StopSignals\n"
            "with StopSignals() as stop:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    assert stop.received == signal.SIGINT\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    print('not reached')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 130 and r.stdout == "", r.stderr
    assert r.stderr.startswith("sexpgpu: a second SIGINT: exiting now") and "Traceback" not in r.stderr


def sexpgpu(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "sexpgpu_cli.main", *args], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, **kw)


def test_sigint_stops_sexpgpu_run_and_resume_finishes_it(tmp_path):
    f = tmp_path / "tiny.sx"
    f.write_text(variant(":log (:every 50))", ":log (:every 1))"))
    d = tmp_path / "out"
    p = sexpgpu("run", str(f), "--steps", "60", "--run-dir", str(d), "--no-progress")
    lines, err = signal_at_line(p, "step 3/60", (signal.SIGINT,), timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    last = lines[-1].strip()
    saved = json.loads((d / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert last == (f"sexpgpu: stopped by SIGINT during step {saved + 1}; step {saved} is saved in {d / 'checkpoints'}; "
                    f"resume with `sexpgpu run {f} --resume --run-dir {d} --steps 60`")
    again = sexpgpu("run", str(f), "--resume", "--run-dir", str(d), "--steps", "60", "--no-progress")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert f"trained steps {saved + 1}-60" in err.splitlines()[-1]
    steps = [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 61))


def test_the_resume_hint_repeats_how_the_run_was_started():
    # Each process of a multi-process run is told its own command: coordinator, count and id included.
    from pathlib import Path
    from sexpgpu_runtime import resume_command
    assert resume_command(Path("f.sx")) == ["sexpgpu", "run", "f.sx", "--resume"]
    assert resume_command(Path("f.sx"), run_dir=Path("runs/two"), steps=60, mesh="data=4", fsdp=True,
                          coordinator="10.0.0.1:1234", num_processes=2, process_id=1) == [
        "sexpgpu", "run", "f.sx", "--resume", "--run-dir", "runs/two", "--steps", "60", "--mesh", "data=4", "--fsdp",
        "--coordinator", "10.0.0.1:1234", "--num-processes", "2", "--process-id", "1"]
    assert resume_command(Path("f.sx"), fsdp=False, distributed=True)[-2:] == ["--no-fsdp", "--distributed"]
