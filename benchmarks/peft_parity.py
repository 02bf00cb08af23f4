"""Parity with peft: LoRA adapters on the Llama 3 fixture checkpoint (tests/fixtures/hf/llama3), made by
peft itself, against sexpgpu's `:lora` model reading them.

    python -m benchmarks.peft_parity              # compare, print the figures
    python -m benchmarks.peft_parity --write      # and (re)write tests/fixtures/lora/

(also `python -m benchmarks.hf_parity --lora`). Needs the `reference` extra and peft; nothing
downloads. It

1. loads the fixture's checkpoint with transformers, gives it peft's LoRA (`LoraConfig` r 4,
   alpha 8, on q_proj, v_proj, o_proj and gate_proj: PEFT's initialisation, then `lora_B` drawn
   non-zero so the adapters change the logits) and saves the adapter (`save_pretrained`:
   adapter_model.safetensors, adapter_config.json);
2. runs tests/fixtures/lora/llama3-lora.sx, the one-form model of that checkpoint with
   `:lora (... :pretrained "adapter")`, and compares its logits and greedy tokens (`:decode`
   with the caches, the adapters applied) with peft's;
3. exports sexpgpu's adapters in PEFT's layout (`--export-adapter`) and loads the directory with
   `PeftModel.from_pretrained(base, DIR)`, whose logits must match again; and the merged model
   (`--export-names`) with `AutoModelForCausalLM.from_pretrained`, against peft's
   `merge_and_unload`;
4. on the GPT-2 fixture (Conv1D's `[in out]`: `fan_in_fan_out`), adapters on `:wo`, `:w1`, `:w2`
   drawn by sexpgpu, exported, and read back by sexpgpu and by peft: the same logits;
5. LoRA dropout in training (`:dropout 0.25`): peft's model in train mode with each adapter's
   `lora_dropout` replaced by a given mask (`x * mask / (1 - p)`, the masks drawn here), its logits,
   loss and the adapters' gradients, against sexpgpu's training forward (the adapters unmerged,
   sexpgpu_runtime/lowering/lora.py) with the same masks injected (`sexpgpu_train_mode`).

With `--write`, tests/fixtures/lora/ gets the adapter, lora.npz (the ids, peft's logits, greedy tokens
and the base's logits), layout.json (peft's tensor names and shapes and its adapter_config.json) and
dropout.npz (5: the masks by module, peft's train-mode logits, loss and gradients): tests/test_lora.py
and tests/test_lora_dropout.py check them on every run of the suite, without peft.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "tests" / "fixtures" / "hf" / "llama3"
FIXTURES = ROOT / "tests" / "fixtures" / "lora"
RUN = FIXTURES / "llama3-lora.sx"
TARGETS = ["q_proj", "v_proj", "o_proj", "gate_proj"]
RANK, ALPHA = 4, 8
DROPOUT = 0.25
#: sexpgpu's target key of each peft module name's last part
OURS = {"q_proj": "wq", "v_proj": "wv", "o_proj": "wo", "gate_proj": "w-gate"}


def build(directory: Path):
    """peft's adapted model of the fixture checkpoint, its adapter saved in `directory`: (model, ids,
    logits, greedy, base logits)."""
    import peft
    import torch
    import transformers
    from benchmarks.hf_parity import BATCH, PROMPT, SEQ
    base = transformers.AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32).eval()
    rng = np.random.default_rng(1)
    ids = rng.integers(0, base.config.vocab_size, size=(BATCH, SEQ)).astype(np.int32)
    with torch.no_grad():
        base_logits = base(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
    torch.manual_seed(0)
    config = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0,
                             task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.2 * torch.randn_like(p))
    model.save_pretrained(directory)
    with torch.no_grad():
        logits = model(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
        prompt = torch.as_tensor(ids[:, :PROMPT], dtype=torch.long)
        greedy = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=SEQ - PROMPT,
                                do_sample=False, pad_token_id=0).numpy().astype(np.int32)
    return model, ids, logits, greedy, base_logits


def peft_train_mode(model, ids: np.ndarray, p: float = DROPOUT) -> dict:
    """peft's `model` in train mode, each LoRA module's `lora_dropout` replaced by a mask drawn here
    (`x * mask / (1 - p)`, torch's dropout with that mask): {"mask|MODULE": [B T in] bool, "logits",
    "loss" (the mean cross-entropy of each position's own id, the fixture's objective), "grad|PARAM"
    (each lora_A and lora_B's gradient)}. The model is left as it was (eval, no dropout, no gradients)."""
    import torch
    rng = np.random.default_rng(2)
    out: dict = {}

    class Masked(torch.nn.Module):
        def __init__(self, mask):
            super().__init__()
            self.mask = torch.as_tensor(mask)

        def forward(self, x):
            return x * self.mask / (1 - p)

    kept = {}
    for name, module in model.named_modules():
        if hasattr(module, "lora_dropout") and "default" in module.lora_dropout:
            mask = rng.random((ids.shape[0], ids.shape[1], module.in_features)) >= p
            out["mask|" + name] = mask
            kept[name] = module.lora_dropout["default"]
            module.lora_dropout["default"] = Masked(mask)
    model.train()
    for name, param in model.named_parameters():
        param.requires_grad_("lora_" in name)
    labels = torch.as_tensor(ids, dtype=torch.long)
    with torch.enable_grad():
        logits = model(labels).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
    out["logits"], out["loss"] = logits.detach().numpy().astype(np.float32), np.float32(loss.item())
    for name, param in model.named_parameters():
        if "lora_" in name:
            out["grad|" + name] = param.grad.numpy().copy()
    model.zero_grad()
    model.eval()
    for name, module in model.named_modules():
        if name in kept:
            module.lora_dropout["default"] = kept[name]
    return out


def sexpgpu_train_mode(program, trainable, frozen, ids: np.ndarray, want: dict):
    """sexpgpu's training forward of the fixture's `:lora` model (`program`, its adapters of dropout p)
    with `want`'s masks (peft_train_mode's, by peft module) injected where its own would be drawn:
    (logits, loss, the gradient of the loss by parameter tree). The masks are put in place of lora.py's
    keys (`target_key`, patched for this call) and read by `LoraWeight.dropped`, by target and layer."""
    import jax
    import jax.numpy as jnp
    from unittest import mock
    from sexpgpu_runtime.lowering import lora
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lowering import Effects, run_phase
    from sexpgpu_runtime.weights.params import merge
    masks: dict = {}
    for k, v in want.items():
        if k.startswith("mask|"):
            module = k.split("|")[1]
            layer = int(module.split(".layers.")[1].split(".")[0])
            masks.setdefault(OURS[module.rsplit(".", 1)[1]], {})[layer] = v
    stacked = {key: jnp.asarray(np.stack([by[i] for i in sorted(by)])) for key, by in masks.items()}
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()}
    batch = {"row": jnp.asarray(ids), "stride": jnp.ones((ids.shape[0], 1), jnp.int32)}

    def dropped(self, x):
        path, layers = self.key
        mask = stacked[path[-1]][layers[0]]
        if mask.size != x.size:   # the fixture's `:decode` calls (a prompt, one token): not compared
            return x
        return jnp.where(mask.reshape(x.shape), x / jnp.asarray(1.0 - self.p, x.dtype), jnp.zeros((), x.dtype))

    def loss(t):
        fx = Effects(jax.random.key(0))
        fx.dropout_key = lora.dropout_key(fx.seed_key, ctx)
        params = merge(t, frozen)
        inputs = run_phase(program.prepare, [batch, ctx], params, fx)
        value = run_phase(program.objective, [inputs, ctx], params, fx)
        return value, inputs["logits"]

    with mock.patch.object(lora, "target_key", lambda key, path, layers=(): (path, layers)), \
            mock.patch.object(lora.LoraWeight, "dropped", dropped):
        (value, logits), grads = jax.value_and_grad(loss, has_aux=True)(trainable)
    return np.asarray(logits), float(value), grads


def peft_grad(want: dict, key: str, part: str, layers: int) -> np.ndarray:
    """peft's gradient of adapter `part` (`lora-a` or `lora-b`) of sexpgpu target `key`, stacked by layer
    and transposed to sexpgpu's `[in r]` / `[r out]`."""
    module = {v: k for k, v in OURS.items()}[key]
    name = "lora_A" if part == "lora-a" else "lora_B"
    found = [(int(k.split(".layers.")[1].split(".")[0]), v) for k, v in want.items()
             if k.startswith("grad|") and f".{module}.{name}." in k]
    return np.stack([v.T for _, v in sorted(found)])[:layers]


def layout(directory: Path) -> dict:
    """What peft wrote in `directory`: each tensor's name and shape, and adapter_config.json."""
    from safetensors.numpy import load_file
    tensors = load_file(str(directory / "adapter_model.safetensors"))
    return {"tensors": {k: list(v.shape) for k, v in sorted(tensors.items())},
            "config": json.loads((directory / "adapter_config.json").read_text())}


def gpt2_conv1d(tmp: Path) -> float:
    """GPT-2's Conv1D modules (`fan_in_fan_out`): adapters on `:wo`, `:w1`, `:w2` of the GPT-2 fixture
    checkpoint (tests/fixtures/hf/gpt2), `lora_B` drawn non-zero, exported in PEFT's layout, read back
    by sexpgpu (`:lora`'s `:pretrained`) and by peft (`PeftModel.from_pretrained`): the largest
    difference of the logits, relative to the largest."""
    import peft
    import torch
    import transformers
    import jax.numpy as jnp
    from benchmarks.hf_parity import FIXTURES as HF, relative, sexpgpu_forward
    from sexpgpu_runtime.weights.pretrained import export_params
    text = (HF / "gpt2.sx").read_text()
    text = text[:text.index("(defmodel layer")] + "(defmodel teacher :pretrained ckpt LORA)\n\n" + \
        text[text.index("(model teacher)"):]
    text = f"(def ckpt {json.dumps(str(HF / 'gpt2'))})\n" + text.replace('(checkpoint-config "gpt2"', "(checkpoint-config ckpt")
    lora = ":lora (:targets [:wo :w1 :w2] :rank 4 :alpha 8)"
    (tmp / "gpt2-lora.sx").write_text(text.replace("LORA", lora))
    _, program, trainable, frozen = sexpgpu_forward(tmp / "gpt2-lora.sx")
    rng = np.random.default_rng(2)
    for k, v in trainable["h"].items():
        if k.endswith(".lora-b"):
            trainable["h"][k] = jnp.asarray(0.2 * rng.standard_normal(v.shape), jnp.float32)
    export_params(tmp / "gpt2-adapter", trainable, frozen, program=program, adapter=True)
    (tmp / "gpt2-again.sx").write_text(text.replace("LORA", lora[:-1] + f" :pretrained {json.dumps(str(tmp / 'gpt2-adapter'))})"))
    forward = sexpgpu_forward(tmp / "gpt2-again.sx")[0]
    ids = np.random.default_rng(1).integers(0, 96, size=(2, 8)).astype(np.int32)
    base = transformers.AutoModelForCausalLM.from_pretrained(HF / "gpt2", torch_dtype=torch.float32).eval()
    model = peft.PeftModel.from_pretrained(base, tmp / "gpt2-adapter").eval()
    with torch.no_grad():
        theirs = model(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
    return relative(forward(ids), theirs)


def dropout_text(run: Path, p: float = DROPOUT) -> str:
    """The fixture's run file `run` with `:dropout p` in its `:lora`."""
    text = run.read_text()
    assert ":alpha 8 :pretrained" in text
    return text.replace(":alpha 8 :pretrained", f":alpha 8 :dropout {p} :pretrained")


def dropout_parity(work: Path, want: dict, ids: np.ndarray) -> tuple[float, float, float]:
    """sexpgpu's training forward with peft's masks against peft's train mode (`want`): the logits' and
    the loss's relative difference, and the largest of the adapters' gradients' (each relative to its
    largest entry)."""
    from benchmarks.hf_parity import relative
    from sexpgpu_lang import analyze
    from sexpgpu_runtime.weights.pretrained import initial_params
    path = work / "dropout.sx"
    path.write_text(dropout_text(work / RUN.name))
    res = analyze(path.read_text(), str(path))
    assert res.program is not None, [d.message for d in res.diagnostics]
    trainable, frozen = initial_params(res.program, 0)
    logits, loss, grads = sexpgpu_train_mode(res.program, trainable, frozen, ids, want)
    worst = 0.0
    for key in OURS.values():
        for part in ("lora-a", "lora-b"):
            ours = np.asarray(grads["layers"][f"{key}.{part}"])
            worst = max(worst, relative(ours, peft_grad(want, key, part, ours.shape[0])))
    return relative(logits, want["logits"]), abs(loss - float(want["loss"])) / abs(float(want["loss"])), worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="(re)write tests/fixtures/lora/")
    args = ap.parse_args(argv)
    import peft
    import torch
    import transformers
    from benchmarks.hf_parity import relative, sexpgpu_forward
    from sexpgpu_lang.name_mapping import stdlib_names
    from sexpgpu_runtime.weights.pretrained import export_params
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model, ids, logits, greedy, base_logits = build(tmp / "adapter")
        train = peft_train_mode(model, ids)   # (before `merge_and_unload` below takes the adapters out)
        # the run file reads the adapter beside it: run it from a copy of the fixture folder
        work = tmp / "lora"
        work.mkdir()
        shutil.copytree(tmp / "adapter", work / "adapter")
        text = RUN.read_text().replace('"../hf/llama3"', json.dumps(str(BASE)))
        (work / RUN.name).write_text(text)
        forward, program, trainable, frozen = sexpgpu_forward(work / RUN.name)
        got = forward(ids)
        rel = relative(got, logits)
        same = bool(np.array_equal(forward(ids, "greedy"), greedy))
        export_params(tmp / "export", trainable, frozen, program=program, adapter=True)
        base = transformers.AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32).eval()
        back = peft.PeftModel.from_pretrained(base, tmp / "export").eval()
        with torch.no_grad():
            rel_back = relative(back(torch.as_tensor(ids, dtype=torch.long)).logits.numpy(), got)
        export_params(tmp / "merged", trainable, frozen, names=dict(stdlib_names()["llama"]), program=program)
        shutil.copy(BASE / "config.json", tmp / "merged" / "config.json")
        merged = transformers.AutoModelForCausalLM.from_pretrained(tmp / "merged", torch_dtype=torch.float32).eval()
        with torch.no_grad():
            rel_merged = relative(merged(torch.as_tensor(ids, dtype=torch.long)).logits.numpy(), got)
            theirs = model.merge_and_unload()(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
        rel_theirs = relative(theirs, logits)
        rel_gpt2 = gpt2_conv1d(tmp)
        rel_train, rel_loss, rel_grad = dropout_parity(work, train, ids)
        ok = (rel <= 1e-5 and same and rel_back <= 1e-5 and rel_merged <= 1e-5 and rel_gpt2 <= 1e-5
              and rel_train <= 1e-5 and rel_loss <= 1e-5 and rel_grad <= 1e-4)
        print(f"lora llama3: logits rel {rel:.2e} (adapters move them {relative(base_logits, logits):.2e})  greedy "
              f"{same}  PEFT export reloaded by peft rel {rel_back:.2e}  merged export rel {rel_merged:.2e} "
              f"(peft's own merge {rel_theirs:.2e}); GPT-2's Conv1D adapters read by peft rel {rel_gpt2:.2e}  "
              f"{'ok' if ok else 'FAIL'}")
        print(f"lora dropout {DROPOUT} in training, peft's masks injected: logits rel {rel_train:.2e} (the masks move "
              f"them {relative(train['logits'], logits):.2e}), loss rel {rel_loss:.2e}, adapters' gradients rel "
              f"{rel_grad:.2e}")
        if args.write:
            np.savez_compressed(FIXTURES / "dropout.npz", ids=ids, p=np.float32(DROPOUT), **train)
            shutil.rmtree(FIXTURES / "adapter", ignore_errors=True)
            shutil.copytree(tmp / "adapter", FIXTURES / "adapter", ignore=shutil.ignore_patterns("README.md"))
            np.savez_compressed(FIXTURES / "lora.npz", ids=ids, logits=logits.astype(np.float32), greedy=greedy,
                                base_logits=base_logits.astype(np.float32))
            (FIXTURES / "layout.json").write_text(json.dumps(layout(tmp / "adapter"), indent=2) + "\n")
            (FIXTURES / "README.md").write_text(
                f"Written by `python -m benchmarks.peft_parity --write` (peft {peft.__version__}, transformers "
                f"{transformers.__version__}, torch {torch.__version__.split('+')[0]}): peft's LoRA adapter on "
                "tests/fixtures/hf/llama3 (`adapter/`, as `save_pretrained` wrote it), `lora.npz` (the ids, peft's "
                "logits and greedy tokens, the base's logits), `layout.json` (peft's tensor names, shapes and "
                "adapter_config.json), `dropout.npz` (peft in train mode with given dropout masks: the masks by "
                "module, its logits, loss and the adapters' gradients). `llama3-lora.sx` reads the adapter; "
                "tests/test_lora.py and tests/test_lora_dropout.py check them.\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
