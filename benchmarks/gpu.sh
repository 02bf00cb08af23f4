#!/usr/bin/env bash
# GPU section of BENCHMARKS.md: the one command a session with a device machine runs.
#
# Through the `device` tool, in one call (about 4-6 minutes of device time, plus the machine's start):
#
#     run(command="bash benchmarks/gpu.sh", timeout_s=540)
#
# Carry nothing. The device machine's own `python3` (/opt/torch/.venv, Python 3.12) already has jax
# with CUDA (jax-cuda13-plugin), optax, orbax-checkpoint, numpy, typer, rich, safetensors and pytest
# (/work/.library/device/KINDS.md); this script puts the checkout on PYTHONPATH instead of installing
# it. Do not carry .venv: it is this machine's CPU-only jax for Python 3.11, and far over the 64 MiB
# a call may carry. lark, pygls and tensorboardX are not there, and neither gpu.py nor the tests run
# below import them (checked on the CPU with those imports blocked), except tests/test_checkpoint.py,
# which needs tensorboardX: to run it too, first, here (pure Python; numpy, packaging and protobuf,
# which it needs, are there):
#
#     echo /.whl/ >> .git/info/exclude && .venv/bin/pip download -q --no-deps -d .whl tensorboardX==2.6.5
#
# and call run(command="bash benchmarks/gpu.sh", carry=[".whl"], timeout_s=540). This script installs
# .whl/*.whl into /tmp/site when that folder exists (any other missing package can travel the same way;
# the device README's Notes say how to fetch binary wheels for its Python 3.12).
#
# What it does, each step under its own `timeout` (300 s + 150 s at most: under 8 minutes in all):
#   1. nvidia-smi's one-line view of the GPU;
#   2. benchmarks/gpu.py (bf16 MFU of a 101M-parameter transformer's training step, and the trip
#      loop against lax.fori_loop), under JAX_PLATFORMS=cuda so that a missing GPU fails loudly;
#   3. the runtime, checkpoint and signal tests on the GPU (donated buffers, bf16), which the CPU
#      runs of CI never exercise.
# Logs (gpu.log, pytest.log) and gpu.json go to $OUT, so they come back with the reply.
#
# On this (CPU) machine, as a smoke test: `bash benchmarks/gpu.sh --small` (arguments go to gpu.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

if command -v nvidia-smi >/dev/null 2>&1; then
    PY="${PY:-python3}"
    export JAX_PLATFORMS="${JAX_PLATFORMS:-cuda}"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv || true
else
    PY="${PY:-.venv/bin/python}"
fi
if [ -d .whl ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import sys, jax; print('python', sys.version.split()[0], '| jax', jax.__version__, '|', jax.devices())" || exit 1

status=0
timeout 300 "$PY" benchmarks/gpu.py --budget-s 180 --json "$OUT/gpu.json" "$@" 2>&1 | tee "$OUT/gpu.log" || status=1

# The tests that train (tiny fixtures: compilation dominates), on the GPU. Bit-for-bit comparisons in
# them were written for the CPU; a failure here is a finding to read, not a reason to drop the table.
# Some tests start `sexpgpu run` in a second process: no process preallocates 75% of the GPU here.
# tests/test_checkpoint.py needs tensorboardX (a shared fixture logs events), which the device machine
# lacks: carry its wheel (see the top) or that file is skipped.
if [ "${GPU_SH_TESTS:-1}" = 1 ]; then
    tests=(tests/test_runtime.py tests/test_signals.py)
    if "$PY" -c "import tensorboardX" 2>/dev/null; then
        tests+=(tests/test_checkpoint.py)
    else
        echo "gpu.sh: no tensorboardX here: tests/test_checkpoint.py skipped"
    fi
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 "$PY" -m pytest -q -p no:cacheprovider "${tests[@]}" 2>&1 \
        | tee "$OUT/pytest.log" || status=1
fi
echo "gpu.sh: logs in $OUT; exit $status"
exit $status
