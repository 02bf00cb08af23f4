"""Benchmark: LoRA against full fine-tuning of the same model, and LoRA with dropout against without, in
one process: step time and memory.

A Llama-family checkpoint with random weights (width 256, 4 layers, 4 heads of 64, MLP 704, vocabulary
2048 by default: `--width`, `--layers`, ...) is written to a temporary directory (config.json and
model.safetensors, the names `save_pretrained` gives), and the one-form model of it is fine-tuned by
two run files that differ only in `:lora (:targets [:wq :wk :wv :wo :w-gate :w-up :w-down] :rank 8
:alpha 16)`: every parameter trained with adam, or the adapters alone on the frozen base; a third adds
`:dropout` (`--dropout`, 0.1 by default), whose training step applies the adapters unmerged on their
dropped-out inputs (sexpgpu_runtime/lowering/lora.py) where the second folds them into the weights.

Step time: each variant trained `--long` steps in a fresh run dir (the runs alternate, `--repeats`
times), timed by the host from step `--short` to step `--long - 1` (a one-trip generator that copies
the batch gives the loop its `on_trip` clock, the same in both), so loading, compilation and start-up
are left out; wall and CPU time, the median over the repeats, and the ratios LoRA / full and LoRA with
dropout / LoRA without.
Memory: the memory plan `sexpgpu explain` prints (parameters, optimizer state, the training graph's
peak: sexpgpu_lang.explain), and XLA's own analysis of the compiled training graph (arguments,
temporaries, outputs: sexpgpu_runtime.lowering.xla_report.compile_graphs), with the ratios.

    .venv/bin/python benchmarks/lora_step.py [--short 3 --long 23 --repeats 3 --batch 8 --seq 128 --dropout 0.1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGETS = "[:wq :wk :wv :wo :w-gate :w-up :w-down]"


def write_checkpoint(directory: Path, width: int, layers: int, heads: int, hidden: int, vocab: int) -> None:
    """A Llama checkpoint of random weights in `directory`: config.json and model.safetensors."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(0)
    hw = width // heads

    def w(*shape):
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)
    t = {"model.embed_tokens.weight": w(vocab, width), "model.norm.weight": np.ones(width, np.float32),
         "lm_head.weight": w(vocab, width)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": np.ones(width, np.float32),
                  p + "post_attention_layernorm.weight": np.ones(width, np.float32),
                  p + "self_attn.q_proj.weight": w(heads * hw, width), p + "self_attn.k_proj.weight": w(heads * hw, width),
                  p + "self_attn.v_proj.weight": w(heads * hw, width), p + "self_attn.o_proj.weight": w(width, heads * hw),
                  p + "mlp.gate_proj.weight": w(hidden, width), p + "mlp.up_proj.weight": w(hidden, width),
                  p + "mlp.down_proj.weight": w(width, hidden)})
    directory.mkdir(parents=True)
    save_file(t, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": width,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": heads,
        "head_dim": hw, "intermediate_size": hidden, "vocab_size": vocab, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"}))


def run_text(ckpt: Path, lora: bool, batch: int, seq: int, dropout: float = 0.0) -> str:
    extra = f" :dropout {dropout}" if dropout else ""
    setting = f"\n  :lora (:targets {TARGETS} :rank 8 :alpha 16{extra})" if lora else ""
    return f"""(def ckpt {json.dumps(str(ckpt))})
(def vocab (checkpoint-config ckpt :vocab))
(loader rows
  :source (stride-rows :vocab vocab :seq {seq})
  :batch {batch}
  :fields (:row [{seq}] :i32 :stride [1] :i32))
(defmodel student :pretrained ckpt{setting})
(defgenerate :trips 1   ; (the step's clock: the host calls `on_trip` before each step's trip)
  :init (lambda (batch ctx) (list :t (field batch :row)))
  :step (lambda (state trip ctx) state))
(model student)
(objective (lambda (inputs ctx)
  (mean (cross-entropy (model (field inputs :row)) (field inputs :row)))))
(run :loader rows :steps 1000 :seed 0 :optimizer (adam :lr 1e-4))
"""


def step_seconds(program, short: int, long: int) -> tuple[float, float]:
    """The mean step time of one run of `long` steps in a fresh run dir, from the host starting step
    `short` to it starting step `long - 1` (the generator's one trip; compilation and start-up left
    out, and the host held back by the device, so that is the device's pace): (wall seconds, the
    process's CPU seconds, every thread's: less moved by other jobs on a shared machine)."""
    from sexpgpu_runtime import RunOptions, train
    at: dict[int, tuple[float, float]] = {}

    def on_trip(step: int, trip: int) -> None:
        if trip == 0 and step in (short, long - 1):
            at[step] = (time.perf_counter(), time.process_time())
    with tempfile.TemporaryDirectory() as d:
        train(program, RunOptions(steps=long, run_dir=Path(d) / "run", quiet=True), on_trip=on_trip)
    n = long - 1 - short
    return (at[long - 1][0] - at[short][0]) / n, (at[long - 1][1] - at[short][1]) / n


def memory(program) -> dict:
    """The memory plan's figures and XLA's analysis of the compiled training graph (bytes)."""
    from sexpgpu_lang.explain import memory_plan, optimizer_bytes, param_bytes, step_graphs
    from sexpgpu_lang.explain.memory import device_peak
    from sexpgpu_runtime.lowering.xla_report import compile_graphs
    plan = memory_plan(program, step_graphs(program, 1, "accelerator"), 1)
    xla = compile_graphs(program, 1)["train"]
    return {"params": param_bytes(program), "trainable": param_bytes(program, frozen=False),
            "optimizer": optimizer_bytes(program), "plan_peak": device_peak(program, plan, 1),
            "xla_train": xla["args"] + xla["temps"] + xla["outputs"], "xla_temps": xla["temps"]}


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", type=int, default=3)
    ap.add_argument("--long", type=int, default=23)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=704)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--dropout", type=float, default=0.1)
    args = ap.parse_args(argv)
    import jax
    from sexpgpu_lang import analyze
    with tempfile.TemporaryDirectory() as d:
        ckpt = Path(d) / "ckpt"
        write_checkpoint(ckpt, args.width, args.layers, args.heads, args.hidden, args.vocab)
        programs = {}
        for name, lora, p in (("full", False, 0.0), ("lora", True, 0.0), ("drop", True, args.dropout)):
            res = analyze(run_text(ckpt, lora, args.batch, args.seq, p), str(Path(d) / f"{name}.sx"), read_files=True)
            assert res.program is not None, [d.message for d in res.diagnostics]
            programs[name] = res.program
        mem = {name: memory(p) for name, p in programs.items()}
        for name, m in mem.items():
            print(f"{name:4s} params {mib(m['params'])} (trainable {mib(m['trainable'])}), optimizer "
                  f"{mib(m['optimizer'])}, plan peak {mib(m['plan_peak'])}; XLA train graph {mib(m['xla_train'])} "
                  f"(temps {mib(m['xla_temps'])})", flush=True)
        step_seconds(programs["lora"], 1, 3)   # warm-up: imports
        per_step: dict[str, list[tuple[float, float]]] = {"full": [], "lora": [], "drop": []}
        for r in range(args.repeats):
            for name in (("full", "lora", "drop") if r % 2 == 0 else ("drop", "lora", "full")):
                t = step_seconds(programs[name], args.short, args.long)
                per_step[name].append(t)
                print(f"repeat {r + 1} {name:4s} {t[0] * 1e3:.1f} ms/step wall, {t[1] * 1e3:.1f} CPU", flush=True)
        print(f"device {jax.devices()[0].device_kind}; model width {args.width}, {args.layers} layers, batch "
              f"{args.batch} x {args.seq}")
        for i, what in ((0, "wall"), (1, "CPU")):
            full = statistics.median(t[i] for t in per_step["full"])
            lora = statistics.median(t[i] for t in per_step["lora"])
            drop = statistics.median(t[i] for t in per_step["drop"])
            print(f"step time ({what}): full {full * 1e3:.1f} ms, LoRA {lora * 1e3:.1f} ms, LoRA with dropout "
                  f"{args.dropout} {drop * 1e3:.1f} ms; LoRA / full {lora / full:.3f}; with dropout / without "
                  f"{drop / lora:.3f}")
        f, lo, dr = mem["full"], mem["lora"], mem["drop"]
        print(f"with dropout / without: memory plan peak {dr['plan_peak'] / lo['plan_peak']:.3f}, XLA train graph "
              f"{dr['xla_train'] / lo['xla_train']:.3f} (temps {dr['xla_temps'] / lo['xla_temps']:.3f})")
        print(f"memory plan peak: full {mib(f['plan_peak'])}, LoRA {mib(lo['plan_peak'])}; LoRA / full "
              f"{lo['plan_peak'] / f['plan_peak']:.3f} (optimizer state {lo['optimizer'] / f['optimizer']:.4f})")
        print(f"XLA train graph + optimizer state: full {mib(f['xla_train'] + f['optimizer'])}, LoRA "
              f"{mib(lo['xla_train'] + lo['optimizer'])}; LoRA / full "
              f"{(lo['xla_train'] + lo['optimizer']) / (f['xla_train'] + f['optimizer']):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
