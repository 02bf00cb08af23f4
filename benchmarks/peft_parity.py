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
   drawn by sexpgpu, exported, and read back by sexpgpu and by peft: the same logits.

With `--write`, tests/fixtures/lora/ gets the adapter, lora.npz (the ids, peft's logits, greedy tokens
and the base's logits) and layout.json (peft's tensor names and shapes and its adapter_config.json):
tests/test_lora.py checks them on every run of the suite, without peft.
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
        ok = rel <= 1e-5 and same and rel_back <= 1e-5 and rel_merged <= 1e-5 and rel_gpt2 <= 1e-5
        print(f"lora llama3: logits rel {rel:.2e} (adapters move them {relative(base_logits, logits):.2e})  greedy "
              f"{same}  PEFT export reloaded by peft rel {rel_back:.2e}  merged export rel {rel_merged:.2e} "
              f"(peft's own merge {rel_theirs:.2e}); GPT-2's Conv1D adapters read by peft rel {rel_gpt2:.2e}  "
              f"{'ok' if ok else 'FAIL'}")
        if args.write:
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
                "adapter_config.json). `llama3-lora.sx` reads the adapter; tests/test_lora.py checks them.\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
