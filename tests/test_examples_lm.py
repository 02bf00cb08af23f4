"""examples/gpt2.sx and examples/llama.sx: their full-size `def`s are GPT-2 small's and TinyLlama's
shapes, and at a small size each computes what the same model written by hand in JAX computes.

The Llama reference is benchmarks/depth.py's (the model, loss and optimizer its step row times the
sexpgpu run against), so this also checks that that benchmark compares like with like. The 10-step
training of both examples is in tests/test_examples.py (at a smaller size than their own).
"""
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sexpgpu_lang import analyze
from sexpgpu_runtime import RunOptions
from sexpgpu_runtime.run.train import Trainer

from benchmarks import depth

pytestmark = pytest.mark.slow


EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"


def with_defs(name: str, **defs) -> str:
    """The example's text with each named `def` set to a value (an integer or another def's name)."""
    text = (EXAMPLES_DIR / name).read_text(encoding="utf-8")
    for key, value in defs.items():
        lines = [line for line in text.splitlines() if line.startswith(f"(def {key} ")]
        assert len(lines) == 1, key
        text = text.replace(lines[0], f"(def {key} {value})")
    return text


def checked(text: str, name: str):
    res = analyze(text, str(EXAMPLES_DIR / name))
    errors = [d for d in res.diagnostics if d.severity <= 2]
    assert res.program is not None and not errors, [(d.code, d.message) for d in errors]
    return res.program


def param_count(program, under: str | None = None) -> int:
    return sum(math.prod(p.shape) for p in program.params if under is None or p.path[0] == under)


def test_gpt2_full_size_is_gpt2_small():
    """`(def reduce 1)`, 12 layers, a context of 1024: GPT-2 small's blocks, 85,054,464 parameters
    (12 x (12 d^2 + 13 d), d = 768), stacked [12 ...]; with its 2048-token table (the tokenizer's,
    examples/data/unittest-tokenizer.json, not GPT-2's 50257) and 1024 positions."""
    program = checked(with_defs("gpt2.sx", reduce=1, layers="small-layers", seq="small-seq"), "gpt2.sx")
    d = 768
    assert param_count(program, "blocks") == 12 * (12 * d * d + 13 * d) == 85_054_464
    assert param_count(program) == 85_054_464 + 2048 * d + 1024 * d + 2 * d
    shapes = {p.path: p.shape for p in program.params}
    assert shapes[("blocks", "wq")] == (12, d, 12, 64) and shapes[("blocks", "w1")] == (12, d, 4 * d)
    assert ("out",) not in shapes   # tied: the logits use the embedding table


def test_llama_full_size_is_tinyllama():
    """TinyLlama-1.1B's blocks: 22 x (2 d^2 + 2 d (d/8) + 3 d f + 2 d), d = 2048, f = 5632: 968,974,336
    parameters (TinyLlama's 1,100,048,384 less its 32000-token embedding and output)."""
    program = checked(with_defs("llama.sx", reduce=1, layers="tiny-layers", **{"kv-heads": "tiny-kv-heads"},
                                seq="tiny-seq"), "llama.sx")
    d, f = 2048, 5632
    blocks = 22 * (2 * d * d + 2 * d * (d // 8) + 3 * d * f + 2 * d)
    assert param_count(program, "blocks") == blocks == 968_974_336
    assert blocks + 2 * 32000 * d + d == 1_100_048_384
    shapes = {p.path: p.shape for p in program.params}
    assert shapes[("blocks", "wk")] == (22, d, 4, 64) and shapes[("blocks", "wq")] == (22, d, 32, 64)


SMALL = {"layers": 2, "seq": 16, "batch": 4}


def trainer(name: str) -> Trainer:
    return Trainer(checked(with_defs(name, **SMALL), name), RunOptions(quiet=True))


def sexpgpu_losses(tr: Trainer, steps: int) -> tuple[dict, list[float]]:
    """(the initial trainable parameters, the loss of each of `steps` steps of the real step)."""
    state = tr.initial_state()
    first = jax.tree_util.tree_map(np.asarray, state.trainable)
    losses = []
    for _ in range(steps):
        state, reports = tr.step(state)
        losses.append(float(reports.losses[0]))
    return first, losses


def test_llama_is_the_hand_written_scanned_model_and_optimizer():
    """Three steps of the small Llama: each step's loss is that of benchmarks/depth.py's model (one
    `lax.scan`, `dots_saveable`), loss and optimizer (clip, adamw, warmup-cosine, the decay mask), from
    the same initial parameters on the same batches."""
    tr = trainer("llama.sx")
    params, losses = sexpgpu_losses(tr, 3)
    assert params["blocks"]["wq"].shape == (2, 128, 2, 64) and params["blocks"]["wk"].shape == (2, 128, 1, 64)
    p = jax.tree_util.tree_map(jnp.asarray, params)
    opt = depth.llama_optimizer(p, tr.steps)
    s = opt.init(p)
    loader = tr.batches.loaders[tr.program.run.loader]

    @jax.jit
    def step(p, s, window):
        (loss, _), g = jax.value_and_grad(depth.llama_loss, has_aux=True)(p, window)
        u, s = opt.update(g, s, p)
        return jax.tree_util.tree_map(lambda a, b: a + b, p, u), s, loss
    ref = []
    for i in range(3):
        p, s, loss = step(p, s, jnp.asarray(loader.batch(i * tr.batches.batch_size)["tokens"]))
        ref.append(float(loss))
    np.testing.assert_allclose(losses, ref, rtol=2e-5)
    assert losses[2] != losses[0]   # the updates moved the model (the steps after warmup's lr 0)


def layer_norm(x, g, b):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b


def gpt2_logits(p, x):
    """GPT-2 by hand: token and position embeddings, pre-norm blocks with biased causal attention and a
    tanh-GELU MLP, a final layer-norm, logits tied to the embedding table."""
    h = p["embed"][x] + p["pos"]
    for i in range(p["blocks"]["wq"].shape[0]):
        b = {k: v[i] for k, v in p["blocks"].items()}
        a = layer_norm(h, b["ln1-gain"], b["ln1-bias"])
        q, k, v = (jnp.einsum("btd,dhk->bthk", a, b[w]) + b[bias]
                   for w, bias in (("wq", "bq"), ("wk", "bk"), ("wv", "bv")))
        att = jnp.einsum("bthk,hkd->btd", jax.nn.dot_product_attention(q, k, v, is_causal=True), b["wo"])
        h = h + att + b["bo"]
        m = layer_norm(h, b["ln2-gain"], b["ln2-bias"])
        h = h + jax.nn.gelu(m @ b["w1"] + b["b1"], approximate=True) @ b["w2"] + b["b2"]
    return layer_norm(h, p["lnf-gain"], p["lnf-bias"]) @ p["embed"].T


def test_gpt2_is_the_hand_written_model():
    """The small GPT-2's first loss is the hand-written GPT-2's (layers applied one by one in Python)
    on the same parameters and batch, and its tied table gets the gradient of both its uses."""
    tr = trainer("gpt2.sx")
    params, losses = sexpgpu_losses(tr, 1)
    window = jnp.asarray(tr.batches.loaders[tr.program.run.loader].batch(0)["tokens"])
    p = jax.tree_util.tree_map(jnp.asarray, params)

    def loss(p):
        logp = jax.nn.log_softmax(gpt2_logits(p, window[:, :-1]), -1)
        return -jnp.mean(jnp.take_along_axis(logp, window[:, 1:, None], -1))
    np.testing.assert_allclose(losses[0], float(jax.jit(loss)(p)), rtol=2e-5)
    assert params["pos"].shape == (16, 128) and params["blocks"]["w1"].shape == (2, 128, 512)


@pytest.mark.parametrize("name", ["gpt2.sx", "llama.sx"])
def test_the_example_is_one_scan(name):
    """The training graph of either example has one `while` (the scan over its layers), whatever
    the depth: at 2 and 6 layers the lowered train graph has the same number of operations."""
    sizes = []
    for layers in (2, 6):
        tr = Trainer(checked(with_defs(name, **{**SMALL, "layers": layers}), name), RunOptions(quiet=True))
        state = tr.initial_state()
        batch, rows, _ = tr.batches.next_group(0, 0, 0)
        hlo = tr.graphs.grads.lower(state.trainable, state.frozen, batch, rows, state.counters,
                                    tr.graphs.no_bad()).as_text()
        sizes.append((hlo.count("stablehlo.while"), len(hlo.splitlines())))
    assert sizes[0][0] >= 1 and sizes[0] == sizes[1], sizes
