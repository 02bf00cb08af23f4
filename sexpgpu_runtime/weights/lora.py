"""LoRA adapters' files: written in PEFT's layout, read back, folded into the base for a merged export.

A run's adapters are the parameters `KEY.lora-a` `[in r]` and `KEY.lora-b` `[r out]` beside each
adapted base parameter `KEY` (sexpgpu_lang/check/lora.py, `ir.Program.adapters`). PEFT (the
`peft` library, `PeftModel.save_pretrained`) keeps them per linear module in torch's layout:

- `adapter_model.safetensors`: `base_model.model.<module>.lora_A.weight` `[r in]` and
  `base_model.model.<module>.lora_B.weight` `[out r]`, `<module>` the checkpoint's name of the
  projection (`model.layers.0.self_attn.q_proj`), one per layer;
- `adapter_config.json`: `peft_type` `LORA`, `r`, `lora_alpha`, `target_modules` (the modules'
  last names, `q_proj`), `lora_dropout`, `bias` `none`, `task_type` `CAUSAL_LM`,
  `base_model_name_or_path`, `use_rslora`, `fan_in_fan_out`.

The module of an adapted parameter is found from the `:pretrained` mapping that fills it: its
tensor (`model.layers.{i}.self_attn.q_proj.weight`) without `.weight`. The mapping is
`(transpose T)` or `(split-heads (transpose T) :axis a)` for torch's `[out in]` Linear, `T` or
`(split-heads T ...)` for a Conv1D `[in out]` (`fan_in_fan_out`); the flattening of `in` and `out`
is the reshape `split-heads` undoes, so `lora_A = A.T` and `lora_B = B.T` in both. A parameter
filled through a `split` (GPT-2's fused `c_attn`) has no module of its own: such an export is
refused (`adapter_modules`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sexpgpu_lang import ir
from sexpgpu_lang.name_mapping import LAYER, layer_name, leaf

from ..errors import CheckpointError, RunError

#: PEFT's file names.
ADAPTER_WEIGHTS, ADAPTER_CONFIG = "adapter_model.safetensors", "adapter_config.json"
#: The prefix PEFT gives every module of a `PeftModelForCausalLM`.
PEFT_PREFIX = "base_model.model."


def _source(program: ir.Program, path: tuple[str, ...]) -> tuple | None:
    """The mapping source of the parameter at `path`, from the `:pretrained` that fills it."""
    for spec in program.pretrained:
        if spec.fills(path):
            return dict(spec.names)[".".join(path[len(spec.prefix):])]
    return None


def adapter_modules(program: ir.Program) -> tuple[dict[tuple[str, ...], str], bool]:
    """Each adapter's base path -> its checkpoint module pattern (`model.layers.{i}.self_attn.q_proj`),
    and whether the modules are Conv1D's `[in out]` (`fan_in_fan_out`). CheckpointError where an
    adapted parameter has no module of its own (no `:pretrained` mapping fills it, or it is a part
    of a fused tensor), or where Linear and Conv1D modules are mixed."""
    out: dict[tuple[str, ...], str] = {}
    layouts = set()
    for ad in program.adapters:
        src = _source(program, ad.path)
        shown = ".".join(ad.path)
        if src is None:
            raise CheckpointError(f"the adapter of `{shown}` has no checkpoint module to be named by: no "
                                  "`:pretrained` mapping fills that parameter (PEFT names an adapter by its module)")
        inner = src[1] if src[0] == "split-heads" else src
        transposed = inner[0] == "transpose" and inner[2] is None
        if not (transposed and inner[1][0] == "tensor") and inner[0] != "tensor":
            raise CheckpointError(f"the adapter of `{shown}` cannot be written in PEFT's layout: its parameter is "
                                  f"a part of the checkpoint's `{leaf(src)[1]}` (a fused projection), not a module "
                                  "of its own")
        name = leaf(src)[1]
        if not name.endswith(".weight"):
            raise CheckpointError(f"the adapter of `{shown}`: `{name}` is not a module's `.weight`")
        if ad.in_axes == 2 and not (src[0] == "split-heads" and src[2] == 0):
            raise CheckpointError(f"the adapter of `{shown}`: its input axes are not the module's")
        out[ad.path] = name[:-len(".weight")]
        layouts.add(transposed)
    if len(layouts) > 1:
        raise CheckpointError("the adapters' modules mix torch's Linear `[out in]` and Conv1D `[in out]` layouts, "
                              "which one adapter_config.json cannot say (`fan_in_fan_out`)")
    return out, layouts == {False}


def _layers(ad: ir.AdapterIR, program: ir.Program) -> int:
    return next(p.layers for p in program.params if p.path == ad.path)


def peft_tensors(program: ir.Program, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The adapters of `flat` (parameter name -> value) by PEFT's names, `lora_A` `[r in]` and `lora_B`
    `[out r]`, float32, one per layer of a stacked parameter."""
    modules, _ = adapter_modules(program)
    out = {}
    for ad in program.adapters:
        key = ".".join(ad.path)
        a, b = np.asarray(flat[key + ".lora-a"], np.float32), np.asarray(flat[key + ".lora-b"], np.float32)
        n = _layers(ad, program)
        for i in range(max(n, 1)):
            module = PEFT_PREFIX + (layer_name(modules[ad.path], i) if n else modules[ad.path])
            out[module + ".lora_A.weight"] = np.ascontiguousarray((a[i] if n else a).T)
            out[module + ".lora_B.weight"] = np.ascontiguousarray((b[i] if n else b).T)
    return out


def target_modules(program: ir.Program, adapted: set[str]) -> list[str]:
    """PEFT's `target_modules` for the modules `adapted` (patterns): each module's last name (`q_proj`), or
    as many of its last names as keep it from naming a module of the checkpoint that is not adapted
    (GPT-2's `attn.c_proj` where `mlp.c_proj` is not), since peft adapts every module whose name ends
    with an entry."""
    others = {leaf(src)[1][:-len(".weight")] for spec in program.pretrained for _, src in spec.names
              if leaf(src)[1].endswith(".weight")} - adapted
    out = set()
    for m in adapted:
        parts = m.split(".")
        for n in range(1, len(parts) + 1):
            suffix = ".".join(parts[-n:])
            if not any(o == suffix or o.endswith("." + suffix) for o in others):
                break
        out.add(suffix)
    return sorted(out)


def peft_config(program: ir.Program) -> dict:
    """adapter_config.json's keys (PEFT's `LoraConfig`) for the run's adapters, all of one `:lora`."""
    modules, fan_in_fan_out = adapter_modules(program)
    settings = {(ad.rank, ad.alpha, ad.rslora, ad.dropout) for ad in program.adapters}
    if len(settings) > 1:
        raise CheckpointError("the adapters have different ranks, alphas or dropouts, which one adapter_config.json "
                              "cannot say")
    (rank, alpha, rslora, dropout), = settings
    base = next((spec.path for spec in program.pretrained if any(spec.fills(ad.path) for ad in program.adapters)), None)
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base,
            "r": rank, "lora_alpha": alpha, "lora_dropout": dropout, "bias": "none", "use_rslora": rslora,
            "fan_in_fan_out": fan_in_fan_out, "init_lora_weights": True, "inference_mode": True,
            "target_modules": target_modules(program, set(modules.values())),
            "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
            "rank_pattern": {}, "alpha_pattern": {}, "use_dora": False}


def export_adapter(program: ir.Program, path: Path, flat: dict[str, np.ndarray], run: str | None = None) -> str | None:
    """Write the adapters of `flat` (parameter name -> value) into the directory `path` in PEFT's layout
    (`adapter_model.safetensors`, `adapter_config.json`) as one export of the run `run`
    (export_files.write_export: a manifest, finished or saying so, an earlier export replaced file by
    file). Returns the line naming the files the directory held that the export left, or None.
    RunError where it cannot be written or named (`adapter_modules`)."""
    from safetensors.numpy import save_file
    from .export_files import write_export
    try:
        tensors, config = peft_tensors(program, flat), peft_config(program)
    except CheckpointError as e:
        raise RunError(f"cannot write the adapters to {path}: {e}")
    writers = [(ADAPTER_WEIGHTS, lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"})),
               (ADAPTER_CONFIG, lambda tmp: tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8"))]
    return write_export(Path(path), writers, run).left_line()


def merged(program: ir.Program, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`flat` (parameter name -> value) with each adapter folded into its base, `W + scale * (A @ B)`
    reshaped to W's shape (in float32, cast back to W's dtype), and the adapters left out: the
    model a merged export writes (peft's `merge_and_unload`)."""
    out = dict(flat)
    for ad in program.adapters:
        key = ".".join(ad.path)
        w = np.asarray(out[key])
        a, b = np.asarray(out.pop(key + ".lora-a"), np.float32), np.asarray(out.pop(key + ".lora-b"), np.float32)
        delta = np.matmul(a, b) * np.float32(ad.scale)
        out[key] = (w.astype(np.float32) + delta.reshape(w.shape)).astype(w.dtype)
    return out


def load_adapter(program: ir.Program, directory: Path) -> dict[str, np.ndarray]:
    """The adapters PEFT's layout holds in `directory` (adapter_model.safetensors), by parameter name
    (`layers.wq.lora-a` `[N in r]`), for a run that starts from them. CheckpointError naming the
    file and the tensor where one is missing or of another shape, or the config's rank or alpha
    differ from the file's `:lora`."""
    from safetensors.numpy import load_file
    directory = Path(directory)
    try:
        config = json.loads((directory / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        tensors = load_file(str(directory / ADAPTER_WEIGHTS))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read the adapters in {directory}: {e}")
    modules, _ = adapter_modules(program)
    out = {}
    for ad in program.adapters:
        if config.get("r") != ad.rank or float(config.get("lora_alpha", -1)) != ad.alpha:
            raise CheckpointError(f"{directory / ADAPTER_CONFIG} has r {config.get('r')} and lora_alpha "
                                  f"{config.get('lora_alpha')}; the file's `:lora` has `:rank` {ad.rank} and "
                                  f"`:alpha` {ad.alpha:g}")
        key = ".".join(ad.path)
        n = _layers(ad, program)
        want = {p.path[-1]: p.shape[1:] if n else p.shape for p in program.params
                if p.path[:-1] == ad.path[:-1] and p.path[-1] in (ad.path[-1] + ".lora-a", ad.path[-1] + ".lora-b")}
        for part, suffix in (("lora_A", ".lora-a"), ("lora_B", ".lora-b")):
            layers = []
            for i in range(max(n, 1)):
                name = PEFT_PREFIX + (layer_name(modules[ad.path], i) if LAYER in modules[ad.path] else
                                      modules[ad.path]) + f".{part}.weight"
                shape = want[ad.path[-1] + suffix]
                if name not in tensors:
                    raise CheckpointError(f"{directory / ADAPTER_WEIGHTS} has no tensor `{name}` (the adapter of `{key}`)")
                t = tensors[name].T
                if tuple(t.shape) != tuple(shape):
                    raise CheckpointError(f"{directory / ADAPTER_WEIGHTS}: `{name}` is [{' '.join(map(str, t.shape[::-1]))}], "
                                          f"the adapter of `{key}` needs [{' '.join(map(str, shape[::-1]))}]")
                layers.append(t)
            out[key + suffix] = np.stack(layers) if n else layers[0]
    return out
