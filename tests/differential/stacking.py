"""Stacking mode: random accepted run files trained with `:stack 1` and with `:stack 2` or `4`, a few
steps each, their parameters (and each step's losses) compared bit for bit (docs/runtime.md, "Stacking").

    .venv/bin/python -m tests.differential.stacking [--n 1000] [--first 0] [--steps 2] [--seed 0]
        [--cache DIR] [--keep DIR]

Each file (`stacking_file`) has a token loader, a model of an embedding, one to three random layers
and a projection to the vocabulary, and a loss; what varies: the layers (the standard library's
`layer-norm`, `rms-norm`, `mlp`, `swiglu-mlp`, `causal-self-attention`, `biased-self-attention`
(`dot-product-attention`), a softmax gate, a mean over the time axis, a logsumexp, a residual `tanh`,
`silu` or `sigmoid`), the loss (`cross-entropy`; a log-softmax pick; a softmax and one-hot squared
error), a random draw (noise on the logits, a `bernoulli` mask), a counter the objective reads, a
generator (`argmax` greedy or `categorical` sampling, GRPO-like: the sampled rows are trained on,
weighted by a reward), the precision (`f32`, `bf16`), the sizes and the degree. The checker must
accept it (a rejected file is a bug of this module, counted apart). Both runs go through
`Trainer.step` as `sexpgpu run` does, in this process (one JAX import, no run files or
checkpoints written), the stacked run from the unstacked run's initial state; any bit of any
parameter or loss that differs is a disagreement, and the file is kept under `--keep`. Prints the
tallies; exits 1 on a disagreement. File `i` of seed `s` is drawn from its own generator, so
`--first`/`--n` chunks run one after another (sharing `--cache`) add up to one long run.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

LAYERS = ("layer-norm", "rms-norm", "mlp", "swiglu", "attention", "sdpa", "softmax-gate", "time-mean",
          "logsumexp", "tanh", "silu", "sigmoid")
LOSSES = ("cross-entropy", "log-softmax", "softmax-mse")

_LAYER_PARAMS = {
    "layer-norm": ":g{i} (ones [dim]) :b{i} (zeros [dim])",
    "rms-norm": ":g{i} (ones [dim])",
    "mlp": ":w1{i} (normal [dim hid] :std 0.2) :b1{i} (zeros [hid]) :w2{i} (normal [hid dim] :std 0.2) :b2{i} (zeros [dim])",
    "swiglu": ":wg{i} (normal [dim hid] :std 0.2) :wu{i} (normal [dim hid] :std 0.2) :wd{i} (normal [hid dim] :std 0.2)",
    "attention": " ".join(f":{w}{{i}} (normal [dim heads kd] :std 0.2)" for w in ("wq", "wk", "wv"))
                 + " :wo{i} (normal [heads kd dim] :std 0.2)",
    "sdpa": " ".join(f":{w}{{i}} (normal [dim heads kd] :std 0.2) :{b}{{i}} (zeros [heads kd])"
                     for w, b in (("wq", "bq"), ("wk", "bk"), ("wv", "bv")))
            + " :wo{i} (normal [heads kd dim] :std 0.2) :bo{i} (zeros [dim])",
    "softmax-gate": "",
    "time-mean": "",
    "logsumexp": "",
    "tanh": "", "silu": "", "sigmoid": "",
}

_LAYER_BODY = {
    "layer-norm": "(layer-norm h (getf self :g{i}) (getf self :b{i}))",
    "rms-norm": "(rms-norm h (getf self :g{i}))",
    "mlp": "(+ h (mlp h (getf self :w1{i}) (getf self :b1{i}) (getf self :w2{i}) (getf self :b2{i})))",
    "swiglu": "(+ h (swiglu-mlp h (getf self :wg{i}) (getf self :wu{i}) (getf self :wd{i})))",
    "attention": "(+ h (causal-self-attention h (getf self :wq{i}) (getf self :wk{i}) (getf self :wv{i}) (getf self :wo{i})))",
    "sdpa": "(+ h (biased-self-attention h (getf self :wq{i}) (getf self :bq{i}) (getf self :wk{i}) (getf self :bk{i}) "
            "(getf self :wv{i}) (getf self :bv{i}) (getf self :wo{i}) (getf self :bo{i})))",
    "softmax-gate": "(* h (softmax h :axis -1))",
    "time-mean": "(- h (mean h :axes [1] :keepdims true))",
    "logsumexp": "(- h (logsumexp h :axes [-1] :keepdims true))",
    "tanh": "(+ h (tanh h))",
    "silu": "(silu h)",
    "sigmoid": "(* h (sigmoid h))",
}

_LOSS = {
    "cross-entropy": "(mean (cross-entropy logits target))",
    "log-softmax": "(neg (mean (take-along-axis (log-softmax logits :axis -1) (expand-dims target :axis -1) :axis -1)))",
    "softmax-mse": "(mean (pow (- (softmax logits :axis -1) (one-hot target vocab)) 2))",
}


@dataclass
class StackingFile:
    """One random run file and what it was drawn from (for the tallies): its `layers`, `loss`,
    `precision`, microbatches `mb` and degree `stack`, and whether it has a `generator` ("argmax",
    "categorical" or None), a `draw` in the objective and a `counter` the objective reads."""

    text: str
    layers: list
    loss: str
    precision: str
    mb: int
    stack: int
    generator: str | None
    draw: str | None
    counter: bool
    features: set = field(default_factory=set)


def _generator(kind: str) -> str:
    pick = ("(argmax (model row) :axis -1)" if kind == "argmax"
            else "(categorical (cast (model row) :f32) :salt trip)")
    return f"""
(defgenerate :trips 2
  :init (lambda (batch ctx) (list :row (field batch :row) :stride (field batch :stride)))
  :step (lambda (state trip ctx)
          (let* ((row (getf state :row))
                 (column (iota [1 seq] :axis 1))
                 (guess {pick}))
            (list :row (where (= column (+ (cast trip :i32) 1)) guess row) :stride (getf state :stride))))
  :finish (lambda (state ctx)
            (let* ((row (getf state :row)))
              (list :sample row
                    :reward (mean (cast (= row (field-of-truth row state)) :f32) :axes [1] :keepdims true)))))
""".replace("(field-of-truth row state)", "(mod (+ (take row [0] :axis 1) (* (iota [1 seq] :axis 1) (getf state :stride))) vocab)")


def stacking_file(rng: random.Random, seed: int) -> StackingFile:
    """A random run file the checker accepts, with `:stack 1` in its text (the caller sets the degree)."""
    layers = [rng.choice(LAYERS) for _ in range(rng.randint(1, 3))]
    loss = rng.choice(LOSSES)
    precision = rng.choice(("f32", "f32", "bf16"))
    mb, stack = rng.choice(((2, 2), (4, 2), (4, 4)))
    generator = rng.choice((None, None, "argmax", "categorical"))
    draw = rng.choice((None, None, "noise", "mask"))
    counter = rng.random() < 0.3
    vocab, seq, dim = rng.choice((8, 16)), rng.choice((4, 8)), rng.choice((16, 32))
    batch, hid, heads = rng.choice((8, 16)), rng.choice((16, 32, 64)), rng.choice((1, 2))
    params = " ".join(_LAYER_PARAMS[k].format(i=i) for i, k in enumerate(layers))
    body = "(embedding (getf self :embed) row)"
    for i, k in enumerate(layers):
        body = f"(let* ((h {body})) {_LAYER_BODY[k].format(i=i)})"
    logits = "(model (getf inputs :input))"
    if draw == "noise":
        logits = f"(+ {logits} (* 0.1 (normal [batch seq vocab] :salt (getf ctx :microbatch))))"
    elif draw == "mask":
        logits = f"(* {logits} (cast (bernoulli (full [batch seq vocab] 0.9)) :f32))"
    weight = "(getf inputs :reward)" if generator else None
    loss_text = _LOSS[loss]
    if weight:
        loss_text = f"(* {loss_text} (+ 1.0 (mean {weight})))"
    if counter:
        loss_text = f"(* {loss_text} (/ (cast (getf ctx :tokens) :f32) (cast (getf ctx :tokens) :f32)))"
    source = "(field batch :sample)" if generator else "(field batch :row)"
    extra = "\n        :reward (field batch :reward)" if generator else ""
    text = f"""
(def vocab {vocab})
(def seq {seq})
(def dim {dim})
(def hid {hid})
(def heads {heads})
(def kd {dim // heads // 2})
(def batch {batch})
(loader train :source (stride-rows :vocab vocab :seq seq) :batch batch :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel lm
  :params (:embed (normal [vocab dim] :std 0.3) {params} :out (normal [dim vocab] :std 0.2))
  :apply (lambda (self row) (matmul {body} (getf self :out))))
(model lm)
{_generator(generator) if generator else ""}
(prepare (lambda (batch ctx)
  {"(counter :tokens (size (field batch :stride)))" if counter else ""}
  (list :input {source}
        :target (mod (+ {source} (field batch :stride)) vocab){extra})))
(objective (lambda (inputs ctx)
  (let* ((logits {logits})
         (target (getf inputs :target))
         (loss {loss_text}))
    (metric :loss loss)
    loss)))
(run :loader train :steps 2 :microbatches {mb} :stack 1 :seed {seed} :precision :{precision}
     :optimizer (adam :lr 1e-2))
"""
    features = set(layers) | {loss, precision} | ({f"generator-{generator}"} if generator else set()) \
        | ({f"draw-{draw}"} if draw else set()) | ({"counter"} if counter else set())
    return StackingFile(text, layers, loss, precision, mb, stack, generator, draw, counter, features)


def train_bits(text: str, steps: int, start=None):
    """Train `text` `steps` steps through `Trainer.step` (as `sexpgpu run` does, no files written):
    (each step's losses as f32 bit patterns, the parameters' bit patterns keyed by path, the layout,
    the initial state on the host). `start`: an initial state on the host (numpy leaves) to begin
    from instead of fresh parameters: the stacked run starts from the unstacked run's, so that the
    parameter initialisers are compiled and run once a file (they are no part of what stacking
    changes: `Trainer.initial_state` does not read the degree)."""
    import jax
    import numpy as np

    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime.weights.params import flatten
    from sexpgpu_runtime.run.state import RunState
    from sexpgpu_runtime.run.train import Trainer

    res = analyze(text, "stacking.sx")
    if res.program is None:
        raise ValueError("; ".join(f"{d.code}: {d.message}" for d in res.diagnostics))
    with tempfile.TemporaryDirectory() as d:
        tr = Trainer(res.program, RunOptions(steps=steps, run_dir=Path(d), quiet=True))
        if start is None:
            state = tr.initial_state()
            start = RunState(0, *jax.device_get((state.trainable, state.frozen, state.opt_state)),
                             state.records, jax.device_get(state.counters))
        else:   # fresh device buffers (the run donates them)
            state = tr.place(RunState(0, *jax.device_put((start.trainable, start.frozen, start.opt_state)),
                                      start.records, jax.device_put(start.counters)))
        losses = []
        for _ in range(steps):
            state, rep = tr.step(state)
            losses.append([np.float32(x).view(np.uint32) for x in jax.device_get(rep.losses)])
        params = {k: np.asarray(v).view(np.uint16 if v.dtype.itemsize == 2 else np.uint32)
                  for k, v in flatten(jax.device_get(state.trainable)).items()}
    return losses, params, tr.layout, start


def compare(f: StackingFile, steps: int) -> str | None:
    """None when the stacked run's losses and parameters equal the unstacked run's bit for bit, else why."""
    import numpy as np
    l1, p1, lay1, start = train_bits(f.text, steps)
    l2, p2, lay2, _ = train_bits(f.text.replace(":stack 1", f":stack {f.stack}"), steps, start)
    if lay1.stack != 1 or lay2.stack != f.stack:
        return f"layouts {lay1} and {lay2}, not stack 1 and {f.stack}"
    for s, (a, b) in enumerate(zip(l1, l2), 1):
        if a != b:
            return f"step {s}: losses {np.array(a).view(np.float32)} and {np.array(b).view(np.float32)}"
    for k in p1:
        if not np.array_equal(p1[k], p2[k]):
            n = int(np.sum(p1[k] != p2[k]))
            return f"parameter {'.'.join(map(str, k))}: {n} of {p1[k].size} entries differ after {steps} steps"
    return None


def _share_compiles(folder: Path | None) -> None:
    """JAX's persistent compilation cache in `folder` (a temporary one when None), for any compile
    time: the two runs of a file compile the same update and accumulate graphs, once each here, and
    files of the same sizes share their parameter initialisers; chunks run one after another
    (`--cache`) share them all."""
    import jax
    folder = folder or Path(tempfile.mkdtemp(prefix="sexpgpu-stacking-"))
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.differential.stacking", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="random run files (default 1000)")
    ap.add_argument("--steps", type=int, default=2, help="steps of each run (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", type=int, default=0, help="the first file's index (chunks: --first 200 --n 100)")
    ap.add_argument("--cache", type=Path, default=None, metavar="DIR", help="JAX's compilation cache (default: a new one)")
    ap.add_argument("--keep", type=Path, default=None, metavar="DIR", help="write each disagreeing file here")
    a = ap.parse_args(argv)
    _share_compiles(a.cache)
    t0 = time.perf_counter()
    tally: dict[str, int] = {}
    bad, rejected = [], []
    for i in range(a.first, a.first + a.n):
        # each file drawn from its own generator: a chunk's files are those of one long run
        f = stacking_file(random.Random(a.seed * 100_003 + i), a.seed * 100_003 + i)
        try:
            why = compare(f, a.steps)
        except ValueError as e:
            rejected.append((f, str(e)))
            continue
        for feat in f.features | {f"stack-{f.stack}"}:
            tally[feat] = tally.get(feat, 0) + 1
        if why:
            bad.append((f, why))
            if a.keep:
                a.keep.mkdir(parents=True, exist_ok=True)
                (a.keep / f"stacking-{a.seed}-{i}.sx").write_text(f";; {why}\n{f.text}", encoding="utf-8")
        print(f"\r{i + 1 - a.first}/{a.n} files, {len(bad)} differ, {len(rejected)} rejected, "
              f"{time.perf_counter() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    for f, why in bad[:10]:
        print(f"{why}\n{f.text}")
    for f, why in rejected[:3]:
        print(f"rejected: {why}\n{f.text}")
    ran = a.n - len(rejected)
    print(f"{ran} run files (seed {a.seed}, files {a.first}-{a.first + a.n - 1}, {a.steps} steps, :stack 1 against :stack 2/4) in "
          f"{time.perf_counter() - t0:.0f} s: {len(bad)} differ, {len(rejected)} rejected by the checker")
    print("  " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    return 1 if bad or rejected else 0


if __name__ == "__main__":
    sys.exit(main())
