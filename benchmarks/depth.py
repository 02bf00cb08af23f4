"""examples/llama.sx at depth: its compile against itself at two depths, its step against JAX by hand.

    .venv/bin/python benchmarks/depth.py [--only compile,step,memory,microbatch-step] [--quick]

Four rows, each a ratio measured in this one run:

* compile   the Llama example (its reduced width and context; batches of 4, so
            that a step's run is small beside its compile) at 2 and at 24
            layers: the first training step (trace, compile and run of the
            training and update graphs) and the compile alone (the first step
            less a steady one), fresh graphs and `jax.clear_caches()` before
            each, the depths alternating over rounds (best of each). The layers are one
            `lax.scan`, so the compile should not grow with depth: target
            24-layer compile <= 1.5x the 2-layer one.
* step      the example's steady training step (the real loop, `Trainer.fit`,
            logging as the file says; the pass left out) against the same
            step written by hand in JAX and optax (`reference`): the same
            model as one `lax.scan` over the stacked layers under
            `jax.checkpoint(policy=dots_saveable)`, the same parameters (the
            sexpgpu run's initial ones), the same batches (the same loader),
            the same loss and metrics, the same optimizer (global-norm clip,
            adamw with the warmup-cosine schedule and the matrices-only decay
            mask), one jitted graph. Alternating blocks (as run_all.py's step
            row: best blocks, and the paired median). Target <= 1.05x.

* memory    XLA's own memory analysis of the step's graphs (compiled here, the
            running sum and the update's inputs donated as on an accelerator)
            at `:microbatches` 1, 2 and 8 (the same microbatch): the step's
            peak (the optimizer state beside each graph, the running sum
            beside a later group's) with the running sum inside the training
            graph (`Graphs.train_group`), against the reference of a separate
            add (each group's gradient out, then an add graph). Target: the
            peak at 8 is the peak at 1 (<= 1.02x).
* microbatch step  the steady step at `:microbatches 4` (the real loop)
            against the same loop with the separate add (`SeparateAddLoop`):
            alternating blocks, target <= 1.05x.

Not a test (the figures depend on the machine: BENCHMARKS.md records them);
`tests/test_examples_lm.py` checks that `reference` computes the example's loss.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

LLAMA = ROOT / "examples" / "llama.sx"
LAYERS_DEF = "(def layers 4)"
COMPILE_BATCH = 4
PASS_LINE = "(pass held-out-eval :loader held-out :every 100 :batches 4)\n"


def llama_text(layers: int | None = None, with_pass: bool = True, **defs: int) -> str:
    """examples/llama.sx with `(def layers N)` (and any other integer `def`, by name, e.g. batch=4)
    replaced, and without its held-out pass when `with_pass` is false."""
    text = LLAMA.read_text(encoding="utf-8")
    if layers is not None:
        defs["layers"] = layers
    for name, value in defs.items():
        lines = [line for line in text.splitlines() if line.startswith(f"(def {name} ")]
        assert len(lines) == 1, name
        text = text.replace(lines[0], f"(def {name} {value})")
    if not with_pass:
        assert PASS_LINE in text
        text = text.replace(PASS_LINE, "")
    return text


def trainer_for(text: str):
    """A `Trainer` of a run file's text (checked clean), with its options' defaults."""
    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime.run.train import Trainer
    res = analyze(text, str(LLAMA))
    errors = [d for d in res.diagnostics if d.is_error]
    assert res.program is not None and not errors, [(d.code, d.message) for d in errors]
    return Trainer(res.program, RunOptions(quiet=True))


# --------------------------------------------------------------------------- the reference

def rms_norm(x, gain):
    """Llama's RMSNorm (epsilon 1e-6), as the standard library's `rms-norm`."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * gain


def rotary(x, positions, base=10000.0):
    """Rotary embeddings in Hugging Face's rotate_half convention; x [B T N H], positions [T]."""
    h = x.shape[-1]
    inv_freq = base ** (jnp.arange(h // 2, dtype=jnp.float32) * (-2.0 / h))
    angles = positions.astype(jnp.float32)[:, None] * inv_freq
    emb = jnp.concatenate([angles, angles], axis=-1)[:, None, :]
    x1, x2 = x[..., : h // 2], x[..., h // 2:]
    return x * jnp.cos(emb) + jnp.concatenate([-x2, x1], axis=-1) * jnp.sin(emb)


def llama_layer(h, p, positions):
    """One Llama block (grouped-query attention through `jax.nn.dot_product_attention`)."""
    a = rms_norm(h, p["attn-norm"])
    q = rotary(jnp.einsum("btd,dnh->btnh", a, p["wq"]), positions)
    k = rotary(jnp.einsum("btd,dkh->btkh", a, p["wk"]), positions)
    v = jnp.einsum("btd,dkh->btkh", a, p["wv"])
    h = h + jnp.einsum("btnh,nhd->btd", jax.nn.dot_product_attention(q, k, v, is_causal=True), p["wo"])
    m = rms_norm(h, p["mlp-norm"])
    return h + (jax.nn.silu(m @ p["w-gate"]) * (m @ p["w-up"])) @ p["w-down"]


def llama_logits(params, x):
    """The example's model by hand: embedding, the stacked layers as one `lax.scan` with each layer under
    `jax.checkpoint(policy=dots_saveable)` (the file's `:remat :dots-saveable`), rms-norm, the output."""
    positions = jnp.arange(x.shape[1], dtype=jnp.int32)
    layer = jax.checkpoint(lambda h, p: (llama_layer(h, p, positions), None),
                           policy=jax.checkpoint_policies.dots_saveable)
    h, _ = jax.lax.scan(layer, params["embed"][x], params["blocks"])
    return rms_norm(h, params["norm"]) @ params["out"]


def llama_loss(params, window):
    """The example's prepare and objective: (loss, (bits-per-token, accuracy)) of a [B seq+1] batch."""
    x, y = window[:, :-1], window[:, 1:]
    logits = llama_logits(params, x)
    logp = jax.nn.log_softmax(logits, axis=-1)
    loss = -jnp.mean(jnp.take_along_axis(logp, y[..., None], axis=-1))
    return loss, (loss / 0.6931472, jnp.mean((jnp.argmax(logits, -1) == y).astype(jnp.float32)))


def llama_optimizer(params, steps: int):
    """The example's optimizer by hand: clip 1.0, then adamw (warmup-cosine 0 -> 2e-3 over 30 steps ->
    2e-4 at `steps`, weight decay 0.1) decaying the matrices of a layer but not the embedding table."""
    lr = optax.warmup_cosine_decay_schedule(0.0, 2e-3, 30, steps, 2e-4)
    mask = jax.tree_util.tree_map(lambda _: True, params)
    mask["embed"] = False
    mask["norm"] = False
    mask["blocks"]["attn-norm"] = mask["blocks"]["mlp-norm"] = False
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=0.1, mask=mask))


class RefLoop:
    """The hand-written step in blocks: one jitted graph (value_and_grad, the update), the batches from
    the trainer's own loader (numpy, as the trainer reads them), logging the loss every `log_every`."""

    def __init__(self, tr, warm: int = 5):
        state = tr.initial_state()
        self.params = jax.tree_util.tree_map(jnp.array, state.trainable)
        self.opt = llama_optimizer(self.params, tr.steps)
        self.opt_state = self.opt.init(self.params)
        self.loader, self.batch = tr.batches.loaders[tr.program.run.loader], tr.batches.batch_size
        self.log_every, self.step, self.rows = tr.program.run.log_every, 0, []

        @jax.jit
        def train(params, opt_state, window):
            (loss, metrics), g = jax.value_and_grad(llama_loss, has_aux=True)(params, window)
            updates, opt_state = self.opt.update(g, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss, metrics
        self.train = train
        self.block(warm)

    def block(self, n: int) -> float:
        jax.block_until_ready(self.params)
        t0 = time.perf_counter()
        for _ in range(n):
            window = self.loader.batch(self.step * self.batch)["tokens"]
            self.params, self.opt_state, loss, metrics = self.train(self.params, self.opt_state, window)
            self.step += 1
            if self.step % self.log_every == 0:
                self.rows.append((float(loss), *map(float, metrics)))
        jax.block_until_ready(self.params)
        return (time.perf_counter() - t0) / n


class SxLoop:
    """sexpgpu's real loop (`Trainer.fit`) in blocks, as run_all.py's."""

    def __init__(self, tr, warm: int = 5):
        from sexpgpu_runtime.run.report import Reporter
        self.dir = tempfile.TemporaryDirectory()
        self.tr = tr
        self.rep = Reporter(Path(self.dir.name), 10**9, False, True, "bench")
        self.state = tr.initial_state()
        self.block(warm)

    def block(self, n: int) -> float:
        jax.block_until_ready(self.state.trainable)
        t0 = time.perf_counter()
        self.state, _ = self.tr.fit(self.state, self.rep, self.state.step + n)
        jax.block_until_ready(self.state.trainable)
        return (time.perf_counter() - t0) / n

    def close(self):
        self.rep.close()
        self.dir.cleanup()


# --------------------------------------------------------------------------- the rows

def _timed_step(tr, state):
    """(the state after one training step, its wall seconds, the process's CPU seconds), waiting for it."""
    w, c = time.perf_counter(), time.process_time()
    state, _ = tr.step(state)
    jax.block_until_ready(state.trainable)
    return state, time.perf_counter() - w, time.process_time() - c


def first_step(layers: int, steady_steps: int = 2) -> dict[str, float]:
    """The example at `layers` layers in fresh graphs: the first training step (traced, compiled and
    run; parameters already initialised) and the best of `steady_steps` steady steps, wall and CPU
    (user + system of the whole process: the steadier figure when other jobs hold the cores)."""
    jax.clear_caches()
    tr = trainer_for(llama_text(layers, batch=COMPILE_BATCH))
    state = jax.block_until_ready(tr.initial_state())
    state, first, first_cpu = _timed_step(tr, state)
    steady = [_timed_step(tr, state)[1:] for _ in range(steady_steps)]
    wall, cpu = min(w for w, _ in steady), min(c for _, c in steady)
    return {"first": first, "compile": first - wall, "first cpu": first_cpu, "compile cpu": first_cpu - cpu,
            "steady": wall}


def bench_compile(rounds: int) -> tuple[str, ...]:
    first_step(2)   # warm JAX itself (its first compile ever pays for more than the graph)
    times: dict[int, list[dict]] = {2: [], 24: []}
    for _ in range(rounds):
        for layers in times:
            t = first_step(layers)
            times[layers].append(t)
            print(f"  {layers} layers: first step {t['first']:.2f} s, steady {t['steady']:.3f} s, compile "
                  f"{t['compile']:.2f} s wall, {t['compile cpu']:.2f} s CPU", flush=True)
    best = {n: {k: min(t[k] for t in v) for k in v[0]} for n, v in times.items()}
    a, b = best[24], best[2]
    return (f"compile, llama.sx 24 layers vs 2 (batch {COMPILE_BATCH})",
            f"compile {a['compile']:.2f} s wall, {a['compile cpu']:.2f} s CPU (first step {a['first']:.2f} s)",
            f"2 layers: {b['compile']:.2f} s wall, {b['compile cpu']:.2f} s CPU (first step {b['first']:.2f} s)",
            f"{a['compile'] / b['compile']:.2f}x wall, {a['compile cpu'] / b['compile cpu']:.2f}x CPU "
            f"(first step {a['first'] / b['first']:.2f}x)", "<= 1.5x")


def bench_step(steps: int, rounds: int) -> tuple[str, ...]:
    from run_all import interleaved, ratios
    text = llama_text(with_pass=False)
    sx, ref = SxLoop(trainer_for(text)), RefLoop(trainer_for(text))
    a, b, paired = interleaved(sx, ref, steps, rounds)
    sx.close()
    return ("training step, llama.sx (4 layers, scan + remat)", f"{a * 1000:.1f} ms/step",
            f"hand JAX+optax {b * 1000:.1f} ms/step", ratios(a, b, paired), "<= 1.05x")


def _live(fn, args, donate=()) -> int:
    """XLA's live set of one compiled graph: arguments + outputs + temporaries - aliases (bytes)."""
    m = jax.jit(fn, donate_argnums=donate).lower(*args).compile().memory_analysis()
    return m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes


def step_peaks(microbatches: int) -> tuple[int, int]:
    """XLA's peak of one step of the example at `:microbatches` (bytes): (with a separate add, with the
    running sum in the training graph)."""
    from sexpgpu_runtime.lowering.training_graphs import accumulate
    tr = trainer_for(llama_text(with_pass=False).replace(":seed 0", f":seed 0 :microbatches {microbatches}"))
    g, state = tr.graphs, tr.initial_state()
    batch, rows, _ = tr.batches.host_group(state.step, 0, 0)
    args = (state.trainable, state.frozen, batch, rows, state.counters, g.no_bad())
    size = lambda tree: sum(x.nbytes for x in jax.tree_util.tree_leaves(tree))  # noqa: E731
    opt, grad, params = size(state.opt_state), size(state.trainable), size((state.trainable, state.frozen))
    first = opt + _live(g.training._grads, args)
    update = _live(g.training._update, (state.trainable, state.opt_state, state.trainable), (0, 1))
    if microbatches == 1:
        return max(first, update), max(first, update)
    grads = [state.trainable]
    separate = max(first, first + grad, opt + params + _live(accumulate, (state.trainable, grads), (0,)), update)
    summing = max(first, opt + _live(g.training._grads_summing, args + (state.trainable,), (6,)), update)
    return separate, summing


def bench_memory() -> tuple[str, ...]:
    peaks = {m: step_peaks(m) for m in (1, 2, 8)}
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    for m, (separate, summing) in peaks.items():
        print(f"  :microbatches {m}: separate add {mib(separate)} MiB, sum in the graph {mib(summing)} MiB", flush=True)
    return ("XLA step peak, llama.sx (4 layers), :microbatches 1 / 2 / 8",
            "sum in the graph " + " / ".join(mib(peaks[m][1]) for m in peaks) + " MiB",
            "separate add " + " / ".join(mib(peaks[m][0]) for m in peaks) + " MiB",
            f"8 vs 1: {peaks[8][1] / peaks[1][1]:.3f}x sum in the graph, {peaks[8][0] / peaks[1][0]:.3f}x separate add",
            "<= 1.02x")


class SeparateAddLoop(SxLoop):
    """`SxLoop` whose groups return their gradients and add them in a separate graph (the reference
    the running sum inside the training graph is measured against)."""

    def __init__(self, tr, warm: int = 5):
        g = tr.graphs

        def separate(total, *args):
            l, gs, m, d, counters, bad = g.grads(*args)
            return l, g.add_group(total, gs), m, d, counters, bad
        g.train_group = separate
        super().__init__(tr, warm)


def bench_microbatch_step(steps: int, rounds: int) -> tuple[str, ...]:
    from run_all import interleaved, ratios
    text = llama_text(with_pass=False).replace(":seed 0", ":seed 0 :microbatches 4")
    sx, separate = SxLoop(trainer_for(text)), SeparateAddLoop(trainer_for(text))
    a, b, paired = interleaved(sx, separate, steps, rounds)
    sx.close()
    separate.close()
    return ("training step, llama.sx (4 layers) at :microbatches 4", f"{a * 1000:.1f} ms/step",
            f"separate add {b * 1000:.1f} ms/step", ratios(a, b, paired), "<= 1.05x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="compile,step,memory,microbatch-step")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    a = ap.parse_args()
    rows = []
    t0 = time.perf_counter()
    for name in a.only.split(","):
        print(f"[{name}]", flush=True)
        if name == "compile":
            rows.append(bench_compile(1 if a.quick else 2))
        elif name == "step":
            rows.append(bench_step(20 if a.quick else 100, 4 if a.quick else 10))
        elif name == "memory":
            rows.append(bench_memory())
        elif name == "microbatch-step":
            rows.append(bench_microbatch_step(8 if a.quick else 40, 4 if a.quick else 10))
        else:
            raise SystemExit(f"unknown row {name!r}: compile, step, memory or microbatch-step")
        print("  " + " | ".join(rows[-1]), flush=True)
    print()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, jax {jax.__version__}; "
          f"total {time.perf_counter() - t0:.0f} s")
    header = ("benchmark", "measured", "reference (same run)", "ratio", "target")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(5)]
    for r in [header, tuple("-" * w for w in widths)] + rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
