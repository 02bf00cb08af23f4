"""Stop signals at awkward moments: in the first seconds of `sexpgpu run`
(before JAX is imported), twice in a row, and after the last step. Timing-robust: each test
waits for a sign (the handler shown in /proc, a printed step line) before signalling, and
accepts every outcome the protocol allows, with generous timeouts."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import signal_at_line, variant

pytestmark = pytest.mark.slow


SEXPGPU = [sys.executable, "-m", "sexpgpu_cli.main"]


def catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler for `sig` (the SigCgt mask of /proc/PID/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        pass
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_sigterm_in_the_first_seconds_is_reported_and_writes_nothing(tmp_path):
    f = tmp_path / "tiny.sx"
    f.write_text(variant(":log (:every 50))", ":log (:every 1))"))
    d = tmp_path / "out"
    p = subprocess.Popen(SEXPGPU + ["run", str(f), "--run-dir", str(d), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not catches(p.pid, signal.SIGTERM) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        p.send_signal(signal.SIGTERM)     # the handler is in; JAX is (most likely) still importing
        _, err = p.communicate(timeout=300)
    finally:
        p.kill()
    assert "Traceback" not in err
    assert p.returncode == 143, err
    last = err.strip().splitlines()[-1]
    if "while starting" in last:           # the usual case: before training began
        assert last == "sexpgpu: stopped by SIGTERM while starting, before any step; nothing was trained or written"
        assert not d.exists()
    else:                                  # a very fast machine reached the loop: the usual stop
        assert last.startswith("sexpgpu: stopped by SIGTERM during step ")


def test_two_sigints_end_a_run_promptly_and_the_checkpoints_still_resume(tmp_path):
    f = tmp_path / "tiny.sx"
    f.write_text(variant(":log (:every 50))", ":log (:every 1)\n     :checkpoint (:every 2 :keep 2))"))
    d = tmp_path / "out"
    p = subprocess.Popen(SEXPGPU + ["run", str(f), "--steps", "100000", "--run-dir", str(d), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = signal_at_line(p, "step 5/", (signal.SIGINT, signal.SIGINT), gap=0.002)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "Task exception" not in err
    # Two signals 2 ms apart may reach Python as one (then the run stops as for one); either way the
    # checkpoints on disk are complete, and the run resumes.
    again = subprocess.run(SEXPGPU + ["run", str(f), "--resume", "--run-dir", str(d), "--steps", "8",
                                      "--no-progress"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr


def test_a_signal_after_the_loop_looked_last_is_handed_back_to_the_start_up_handler():
    code = ("import os, signal\n"
            "import sexpgpu_cli.main\n"   # typer loaded, as under the command
            "from sexpgpu_cli.early_signals import EarlySignals\n"
            "from sexpgpu_runtime.run.signals import StopSignals\n"
            "early = EarlySignals.install()\n"
            "with StopSignals() as stop:\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"     # after the last check: the loop never raises
            "assert early.received == signal.SIGTERM, early.received\n"
            "print('handed back')\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"          # so this one is a second: exit at once
            "print('not reached')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout == "handed back\n" and r.returncode == 130, r.stderr
    assert r.stderr == "sexpgpu: a second SIGINT: exiting now\n"


def test_a_signal_noted_while_starting_stops_the_loop_at_its_first_look():
    code = ("import os, signal\n"
            "import sexpgpu_cli.main\n"   # typer loaded, as under the command
            "from sexpgpu_cli.early_signals import EarlySignals\n"
            "from sexpgpu_runtime.run.signals import StopSignals, Stopped\n"
            "early = EarlySignals.install()\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "with StopSignals() as stop:\n"
            "    try:\n"
            "        stop.check()\n"
            "    except Stopped as e:\n"
            "        print(e.name, e.exit_code)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout) == (0, "SIGINT 130\n"), r.stderr


def test_run_in_process_puts_back_the_handlers_it_found(tmp_path):
    """`run` installs its start-up handler first, and restores the caller's handlers when it returns:
    left installed, a signal one in-process run noted was taken by every later run as its own."""
    import signal as _signal
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    from sexpgpu_runtime.run.signals import StopSignals
    bad = tmp_path / "bad.sx"
    bad.write_text("(def x (/ 7 2))\n")
    before = {s: _signal.getsignal(s) for s in (_signal.SIGINT, _signal.SIGTERM)}
    r = CliRunner().invoke(app, ["run", str(bad), "--run-dir", str(tmp_path / "run")])
    assert r.exit_code == 1
    assert {s: _signal.getsignal(s) for s in before} == before
    with StopSignals() as stop:
        stop.check()   # nothing pending


def test_the_console_script_notes_signals_before_typer_is_imported(tmp_path):
    """`sexpgpu run`'s first handler is in place before typer (tens of milliseconds of imports)."""
    import subprocess
    import sys
    code = ("import builtins, signal, sys\n"
            f"sys.argv = ['sexpgpu', 'run', {str(tmp_path / 'missing.sx')!r}]\n"
            "real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'typer' and not hasattr(builtins, 'seen'):\n"
            "        builtins.seen = True\n"
            "        print('handler', type(signal.getsignal(signal.SIGTERM)).__name__, flush=True)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "import sexpgpu_cli\n"
            "sexpgpu_cli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[0] == "handler EarlySignals", (proc.stdout, proc.stderr)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
