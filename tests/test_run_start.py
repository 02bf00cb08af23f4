"""What `sexpgpu run` says before it trains (issue 21, item 11): the diagnostics `lint` gives
for the file (its warnings), then the devices and the mesh it trains on."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import ROOT, write_case


pytestmark = pytest.mark.slow


def test_run_prints_lints_warnings_then_its_devices_and_mesh(tmp_path):
    case = write_case("warn-unsalted-draw.sx", tmp_path)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", str(case), "--steps", "1", "--no-progress",
                        "--mesh", "data=2", "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    lint = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "lint", str(case)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "warning[W-RAND-001]" in lint.stdout
    err = r.stderr
    # lint's report of the file, word for word, comes first
    assert err.startswith(lint.stdout), err[:2000]
    devices = "sexpgpu: training on 2 cpu devices of the 2 JAX sees; mesh data=2, parameters replicated\n"
    assert devices in err and err.index(devices) < err.index("step 1/1"), err[-2000:]


def test_a_run_without_a_mesh_says_which_device_it_uses():
    import jax
    from sexpgpu_runtime.devices.sharding import run_devices
    dev = jax.devices()[0]
    kind = "" if dev.device_kind == dev.platform else f" ({dev.device_kind})"
    assert run_devices(None) == f"1 {dev.platform} device{kind} of the {len(jax.devices())} JAX sees; no mesh"
