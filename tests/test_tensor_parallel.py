"""Tensor parallelism: the mesh's `model` axis (sexpgpu_lang/mesh.py's rules, sexpgpu_runtime/devices/sharding.py),
on the CPU's 8 fake devices, in a child process (XLA_FLAGS must be set before JAX starts; this pytest
process has started it with one device).

The teacher is tests/fixtures/hf/llama3.sx's (the one form's block, `llama-block-freq-cached`, with its
caches through the stacked layers) at 8 query heads over 2 KV heads, random weights: split 2, 4 and 8
ways along `model` its logits and its greedy tokens (decoded with the caches) are one device's."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT

EIGHT = "--xla_force_host_platform_device_count=8"
FIXTURE = ROOT / "tests" / "fixtures" / "hf" / "llama3.sx"
SIZES = {"layers": 2, "width": 32, "heads": 8, "kv-heads": 2, "head-width": 4, "hidden": 64, "vocab": 96,
         "eps": 1e-5, "rope-base": 500000.0, "rope-factor": 8.0, "rope-low-freq-factor": 1.0,
         "rope-high-freq-factor": 4.0, "rope-original-positions": 16}


def teacher_text(**sizes) -> str:
    """The llama3 fixture's run file with its sizes written out (8 query heads over 2 KV heads) and its
    weights drawn from the seed rather than read."""
    text = FIXTURE.read_text()
    for key, value in {**SIZES, **sizes}.items():
        text, n = re.subn(rf'\(def {key} \(checkpoint-config "llama3" :{key}\)\)', f"(def {key} {value})", text)
        assert n == 1, key
    return text.replace('\n  :pretrained (:path "llama3" :names :llama))', ")")


TEACHER_CHILD = textwrap.dedent(r'''
    import json, sys
    import jax, jax.numpy as jnp
    import numpy as np
    from benchmarks.hf_parity import sexpgpu_forward
    from sexpgpu_runtime.devices.sharding import DataParallel
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lowering import Effects, run_phase

    _, program, trainable, frozen = sexpgpu_forward(__import__("pathlib").Path(sys.argv[1]))
    params = {**trainable, **frozen}
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()}
    ids = np.random.default_rng(0).integers(0, 96, (2, 8)).astype(np.int32)
    batch = {"row": jnp.asarray(ids), "stride": jnp.ones((2, 1), jnp.int32)}
    prepare = jax.jit(lambda batch, params: run_phase(program.prepare, [batch, ctx], params, Effects(jax.random.key(0))))
    out = {}
    for ways in (1, 2, 4, 8):
        placed = params
        if ways > 1:
            dp = DataParallel(1, model=ways)
            placed = dp.put_state(params)
            batch_on = dp.put_replicated(batch)
        else:
            batch_on = batch
        got = prepare(batch_on, placed)
        layers = placed["layers"]
        out[ways] = {"logits": np.asarray(got["logits"]).tolist(), "greedy": np.asarray(got["greedy"]).tolist(),
                     "specs": {k: str(getattr(v.sharding, "spec", "")) for k, v in layers.items()},
                     "shard": {k: list(v.addressable_shards[0].data.shape) for k, v in layers.items()},
                     "embed": str(getattr(placed["embed"].sharding, "spec", "")),
                     "lm_head": str(getattr(placed["lm-head"].sharding, "spec", ""))}
    print(json.dumps(out))
''')


def child(script: str, *args: str, timeout: int = 300) -> dict:
    env = {**os.environ, "XLA_FLAGS": EIGHT, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_teacher_split_2_4_and_8_ways_gives_one_device_s_logits_and_greedy_tokens(tmp_path):
    run = tmp_path / "teacher.sx"
    run.write_text(teacher_text())
    out = child(TEACHER_CHILD, str(run))
    one = out["1"]
    for ways in ("2", "4", "8"):
        got = out[ways]
        np.testing.assert_allclose(got["logits"], one["logits"], rtol=1e-5, atol=1e-6)
        assert got["greedy"] == one["greedy"], ways
    # The weights are split as their structure says: query heads, MLP width, vocabulary; the 2 KV heads
    # split 2 ways and are replicated (MaxText's rule) 4 and 8 ways.
    two, four, eight = out["2"], out["4"], out["8"]
    assert two["specs"]["wq"] == "P(None, None, 'model')" and two["shard"]["wq"] == [2, 32, 4, 4]
    assert eight["shard"]["wq"] == [2, 32, 1, 4] and eight["shard"]["wo"] == [2, 1, 4, 32]
    assert two["specs"]["wk"] == "P(None, None, 'model')" and two["shard"]["wk"] == [2, 32, 1, 4]
    assert four["specs"]["wk"] == "P()" and four["shard"]["wk"] == [2, 32, 2, 4]
    assert four["shard"]["w-up"] == [2, 32, 16] and four["shard"]["w-down"] == [2, 16, 32]
    assert four["specs"]["attn-norm"] == "P()"
    assert four["embed"] == "P('model',)" and four["lm_head"] == "P(None, 'model')"
