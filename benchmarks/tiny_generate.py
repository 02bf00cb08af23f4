"""Benchmark: `sexpgpu run` on the tiny-generate fixture against the same step written by hand in JAX and optax.

Both run in this process, on the same machine, one after the other: the
hand-written reference has one jitted graph per phase (generate.init,
generate.step with the trip as an i64 input, generate.finish, the training
graph with the update), the trips in a host loop, and the same data,
model, initialisation scale, optimizer and steps. Prints each wall time
(compile included), each final generation accuracy, and the ratio.

    .venv/bin/python benchmarks/tiny_generate.py [--steps 1500]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VOCAB, SEQ, DIM, BATCH, TRIPS, MICRO = 16, 8, 64, 64, 6, 2


def reference_parts(seed: int = 0):
    """The fixture's model and step written by hand in JAX and optax, shared by the benchmarks:
    (params, optimizer, step, finish, train, batch). `step(p, rows, strides, trip)` and
    `finish(rows, strides)` take one microbatch (vmap them over the stacked ones); `train`
    is jitted (value_and_grad, then one adam update); `batch(rng)` makes the stacked rows and
    strides of one step, [MICRO BATCH SEQ] and [MICRO BATCH 1] i32."""
    k = jax.random.split(jax.random.key(seed), 5)
    params = {n: jax.random.normal(k[i], s, jnp.float32) * 0.1 for i, (n, s) in enumerate(
        [("embed", (VOCAB, DIM)), ("first", (VOCAB, DIM)), ("second", (VOCAB, DIM)), ("hidden", (DIM, DIM)), ("out", (DIM, VOCAB))])}
    opt = optax.adam(3e-3)
    column = jnp.arange(SEQ, dtype=jnp.int32)[None, :]

    def model(p, row):
        h = jax.nn.relu((p["embed"][row] + p["first"][row[..., :1]] + p["second"][row[..., 1:2]]) @ p["hidden"])
        return h @ p["out"]

    def step(p, rows, strides, trip):
        at = trip.astype(jnp.int32) + 2
        guess = jnp.sum(jnp.where(column == at - 1, jnp.argmax(model(p, rows), -1).astype(jnp.int32), 0), 1,
                        keepdims=True, dtype=jnp.int32)
        return jnp.where(column == at, guess, rows), strides

    def finish(rows, strides):
        truth = (rows[:, :1] + column * strides) % VOCAB
        return rows, (rows + strides) % VOCAB, jnp.mean((rows == truth).astype(jnp.float32), 1, keepdims=True)

    @jax.jit
    def train(p, s, samples, labels):
        def loss_fn(p):
            logp = jax.nn.log_softmax(jax.vmap(model, in_axes=(None, 0))(p, samples))
            return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], -1))
        loss, g = jax.value_and_grad(loss_fn)(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    def batch(rng):
        start = rng.integers(0, VOCAB, (MICRO, BATCH, 1))
        stride = rng.integers(1, VOCAB, (MICRO, BATCH, 1))
        rows = ((start + np.arange(SEQ) * stride) % VOCAB).astype(np.int32)
        return jnp.asarray(rows), jnp.asarray(stride.astype(np.int32))

    return params, opt, step, finish, train, batch


def reference(steps: int, seed: int = 0) -> tuple[float, float]:
    """The fixture's step by hand; returns (seconds, final generation accuracy)."""
    t0 = time.perf_counter()
    params, opt, step, finish, train, batch = reference_parts(seed)
    opt_state = opt.init(params)
    init_j = jax.jit(jax.vmap(lambda rows, strides: (rows, strides)))
    step_j, finish_j = jax.jit(jax.vmap(step, in_axes=(None, 0, 0, None))), jax.jit(jax.vmap(finish))
    rng = np.random.default_rng(seed)
    trips = [jnp.asarray(t, jnp.int64) for t in range(TRIPS)]
    acc = 0.0
    for i in range(steps):
        r, s_ = init_j(*batch(rng))
        for t in trips:
            r, s_ = step_j(params, r, s_, t)
        samples, labels, correct = finish_j(r, s_)
        params, opt_state, loss = train(params, opt_state, samples, labels)
        if i == steps - 1:
            acc = float(jnp.mean(correct))
    jax.block_until_ready(params)
    return time.perf_counter() - t0, acc


def sexpgpu(steps: int) -> tuple[float, float]:
    """`sexpgpu run` on the fixture, checked and trained in this process."""
    from sexpgpu_lang import analyze_file
    from sexpgpu_runtime import RunOptions, train
    t0 = time.perf_counter()
    res = analyze_file(str(ROOT / "tests" / "fixtures" / "tiny-generate.sx"))
    with tempfile.TemporaryDirectory() as d:
        out = train(res.program, RunOptions(steps=steps, run_dir=Path(d), quiet=True))
    return time.perf_counter() - t0, out.history[-1]["generation-accuracy"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1500)
    a = ap.parse_args()
    ref_s, ref_acc = reference(a.steps)
    sx_s, sx_acc = sexpgpu(a.steps)
    print(f"reference (hand-written JAX): {ref_s:6.2f} s  final generation-accuracy {ref_acc:.3f}")
    print(f"sexpgpu run:                  {sx_s:6.2f} s  final generation-accuracy {sx_acc:.3f}")
    print(f"ratio sexpgpu / reference:    {sx_s / ref_s:6.2f}")


if __name__ == "__main__":
    main()
