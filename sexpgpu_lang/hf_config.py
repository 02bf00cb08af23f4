"""A Hugging Face checkpoint's `config.json`: read, its settings under the names a run file uses, and the
refusals (docs/checkpoints.md "Settings from config.json").

`read(path)` finds the `config.json` of a checkpoint (`path` a directory, a
file inside one, or the `config.json` itself) and parses it, kept by path
until the file changes (the language server checks a file on every edit);
`ConfigError(file, message)` says in one line why it cannot be used.

`settings(config)` gives each setting a run file binds with
`(checkpoint-config "dir" :key)`, under one name for every family:

| key | GPT-2 (`gpt2`) | Llama, Mistral, Qwen2, Qwen3, OLMo 2 |
|---|---|---|
| `:layers` | `n_layer` | `num_hidden_layers` |
| `:width` | `n_embd` | `hidden_size` |
| `:heads` | `n_head` | `num_attention_heads` |
| `:kv-heads` | `n_head` | `num_key_value_heads` (else the heads) |
| `:head-width` | `n_embd / n_head` | `head_dim` (else width / heads; Qwen3's absent `head_dim` is 128) |
| `:hidden` | `n_inner` (else 4 x width) | `intermediate_size` |
| `:vocab` | `vocab_size` | `vocab_size` |
| `:positions` | `n_positions` | `max_position_embeddings` |
| `:eps` | `layer_norm_epsilon` | `rms_norm_eps` (absent: 1e-6; OLMo 2's 1e-5) |
| `:rope-base` | (none) | `rope_theta` |
| `:rope-factor`, `:rope-low-freq-factor`, `:rope-high-freq-factor`, `:rope-original-positions` | (none) | `rope_scaling`'s, as `rope-inv-freq` takes them |
| `:tied` | `tie_word_embeddings` (true) | `tie_word_embeddings` (false) |

Each value is `Setting(value, key, text)`: the number, the config key it
came from (`rope_scaling.factor`), and its JSON text for messages. A field
the standard library's blocks do not compute (a `model_type` of another
family, an unknown `rope_scaling` type, an activation other than the
block's, attention or MLP biases Llama's, Qwen3's and OLMo 2's mappings
do not read, Qwen2's and Qwen3's sliding window) is a refusal:
`refusals(config, mapping)` lists them, each one line naming the key, its
value and the way out. Pure Python; never JAX.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

#: The file's name beside a checkpoint's weights.
CONFIG = "config.json"

#: The `model_type`s read, by family: GPT-2's settings, or Llama's (Mistral and Qwen2 share its keys).
FAMILIES = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "llama"}
#: The `model_type`s each standard-library mapping is for, and whether it ties the output to the embedding.
MAPPINGS: dict[str, tuple[tuple[str, ...], bool]] = {
    "gpt2": (("gpt2",), True),
    "llama": (("llama", "mistral"), False),
    "llama-tied": (("llama", "mistral"), True),
    "qwen2": (("qwen2",), False),
    "qwen2-tied": (("qwen2",), True),
}


@dataclass(frozen=True)
class LlamaLike:
    """A family read with Llama's config keys whose transformers config class differs from Llama's:
    everything about it in one place (FAMILIES, MAPPINGS, ARCHITECTURES, `settings` and
    `export_config` take it from here; check/config.py its blocks' settings)."""

    model_type: str
    architecture: str       # the model class an export's config.json names
    mappings: dict          # each standard-library mapping (hf_names.sx) -> whether it ties the output
    block: str              # the prelude's block (and `BLOCK-cached`), Llama's argument order to `eps`
    defaults: dict          # a config key absent from config.json -> its config class's default
    export: dict            # the keys an export's config.json made from a run file alone adds to Llama's


#: Qwen3 (q/k rms-norms over each head's width, `head_dim` its own: 128 where absent) and OLMo 2
#: (q/k rms-norms over the whole projection, norms after attention and the MLP, epsilon 1e-5).
LLAMA_LIKE = {
    "qwen3": LlamaLike("qwen3", "Qwen3ForCausalLM", {"qwen3": False, "qwen3-tied": True}, "qwen3-block",
                       {"head_dim": 128, "rms_norm_eps": 1e-6},
                       {"attention_bias": False, "use_sliding_window": False}),
    "olmo2": LlamaLike("olmo2", "Olmo2ForCausalLM", {"olmo2": False}, "olmo2-block",
                       {"rms_norm_eps": 1e-5}, {"attention_bias": False}),
}


def defaults_of(model_type) -> dict:
    """The defaults of `model_type`'s config class that differ from Llama's (config key -> value)."""
    return LLAMA_LIKE[model_type].defaults if isinstance(model_type, str) and model_type in LLAMA_LIKE else {}


for _f in LLAMA_LIKE.values():
    FAMILIES[_f.model_type] = "llama"
    MAPPINGS.update({m: ((_f.model_type,), tied) for m, tied in _f.mappings.items()})

#: Each family's activation (`activation_function`, `hidden_act`) that its block computes.
ACTIVATIONS = {"gpt2": ("activation_function", ("gelu_new", "gelu_pytorch_tanh")),
               "llama": ("hidden_act", ("silu",))}
#: The keys `checkpoint-config` takes, one line each (hover and completion).
KEYS: dict[str, str] = {
    "layers": "the number of layers",
    "width": "the model's width (the residual stream)",
    "heads": "the query heads",
    "kv-heads": "the key-value heads (grouped-query attention)",
    "head-width": "each head's width",
    "hidden": "the MLP's hidden width",
    "vocab": "the vocabulary size",
    "positions": "the most positions (GPT-2's position table's rows)",
    "eps": "the norms' epsilon",
    "rope-base": "the rotary base, `rope_theta`",
    "rope-factor": "`rope_scaling`'s factor (1: no scaling)",
    "rope-low-freq-factor": "Llama 3's `low_freq_factor` (1 where unscaled)",
    "rope-high-freq-factor": "Llama 3's `high_freq_factor` (4 where unscaled)",
    "rope-original-positions": "Llama 3's `original_max_position_embeddings` (0: every frequency scaled alike)",
    "tied": "whether the output is tied to the embedding",
}
ROPE_KEYS = ("rope-factor", "rope-low-freq-factor", "rope-high-freq-factor", "rope-original-positions")

_READ: dict[str, tuple[tuple, object, Exception | None]] = {}


class ConfigError(Exception):
    """The config cannot be used: `file` is the file to blame, the message (one line) says why."""

    def __init__(self, file: str, message: str):
        super().__init__(message)
        self.file = file


@dataclass(frozen=True)
class Setting:
    """One setting: its value (int, float or bool), the config key it came from, and how the config wrote it."""

    value: object
    key: str
    text: str


def config_path(path: str) -> str:
    """The `config.json` of the checkpoint at `path`: inside a directory, beside a file, or `path` itself."""
    if os.path.basename(path) == CONFIG:
        return path
    if os.path.isdir(path) or not path.endswith((".safetensors", ".json")):
        return os.path.join(path, CONFIG)
    return os.path.join(os.path.dirname(path), CONFIG)


def _load(path: str) -> dict:
    import json   # (only where a config is read: `sexpgpu lint` of a file without one imports no json)
    from .bounded_read import CONFIG_JSON_LIMIT, JsonNumberTooLong, JsonTooDeep, loads_json, read_bounded
    try:   # (a regular file only, and bounded: a pipe or a device could wait forever, or never end)
        data = loads_json(read_bounded(path, CONFIG_JSON_LIMIT, "a config.json").decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(path, "no such file")
    except OSError as e:   # (NotRegularFile and TooLarge say what in their own words)
        raise ConfigError(path, e.strerror or str(e))
    except (JsonTooDeep, JsonNumberTooLong) as e:
        raise ConfigError(path, f"it is not a config ({e})")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(path, f"it is not JSON: {e}")
    except ValueError:
        raise ConfigError(path, "no such file (its name holds a character no file name can)")
    if not isinstance(data, dict):
        raise ConfigError(path, "it is not a JSON object of settings")
    return data


def read(path: str) -> tuple[str, dict]:
    """(the config's file, its settings as parsed) for the checkpoint at `path`. ConfigError."""
    file = config_path(path)
    try:
        st = os.stat(file)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except (OSError, ValueError):
        return file, _load(file)
    got = _READ.get(file)
    if got is None or got[0] != key:
        try:
            got = (key, _load(file), None)
        except ConfigError as e:
            got = (key, None, e)
        _READ[file] = got
        while len(_READ) > 64:
            _READ.pop(next(iter(_READ)))
    if got[2] is not None:
        raise got[2].with_traceback(None)
    return file, got[1]


def _text(v) -> str:
    """A config value as its JSON text (`null`, `true`, `"silu"`, `1e-05`), for messages."""
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (int, float)):
        return repr(v)
    import json
    return json.dumps(v)


#: The sizes each family's config always has: a config holding none of its `model_type`'s and all
#: of another family's has the wrong `model_type` (one cause, not one missing key per setting).
FAMILY_KEYS = {"gpt2": ("n_layer", "n_embd", "n_head"),
               "llama": ("num_hidden_layers", "hidden_size", "num_attention_heads")}


def family(config: dict) -> str:
    """`gpt2` or `llama` for the config's `model_type`; ConfigError for another, and for a
    `model_type` whose family's sizes (`FAMILY_KEYS`) the config lacks while it has another's."""
    mt = config.get("model_type")
    if mt not in FAMILIES:
        raise ConfigError("", f"`model_type` is {_text(mt)}, which the standard library does not read (it reads "
                          + ", ".join(f"`{t}`" for t in FAMILIES) + ")")
    fam = FAMILIES[mt]
    if not any(k in config for k in FAMILY_KEYS[fam]):
        other = next((f for f, keys in FAMILY_KEYS.items() if f != fam and all(k in config for k in keys)), None)
        if other is not None:
            raise ConfigError("", f"`model_type` is {_text(mt)}, but the config has none of that family's sizes ("
                              + ", ".join(f"`{k}`" for k in FAMILY_KEYS[fam]) + ") and has "
                              + ", ".join(f"`{k}`" for k in FAMILY_KEYS[other])
                              + f", which {other} configs have: is `model_type` {_text(other)}?")
    return fam


def _number(config: dict, key: str, integer: bool, default=None):
    """`config[key]` (or `default`): every size and setting read here is a count of 1 or more
    (`integer`) or a finite number above 0 (an epsilon, a rotary base, a scaling factor);
    ConfigError saying which it is not."""
    import math
    v = config.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 \
            or (integer and not float(v).is_integer()):
        raise ConfigError("", f"`{key}` is {_text(config.get(key))}, not "
                          + ("a count of 1 or more" if integer else "a finite number above 0"))
    return int(v) if integer else v


def rope(config: dict) -> dict[str, Setting]:
    """The four numbers `rope-inv-freq` takes after the base, from `rope_scaling` (absent or `default`:
    none; `linear`; `llama3`). ConfigError for another type."""
    rs = config.get("rope_scaling")
    where = "rope_scaling"
    if rs is None and isinstance(config.get("rope_parameters"), dict):   # transformers 5 writes these
        rs, where = config["rope_parameters"], "rope_parameters"
    if rs is None:
        return {"rope-factor": Setting(1.0, "rope_scaling", "null"),
                "rope-low-freq-factor": Setting(1.0, "rope_scaling", "null"),
                "rope-high-freq-factor": Setting(4.0, "rope_scaling", "null"),
                "rope-original-positions": Setting(0, "rope_scaling", "null")}
    if not isinstance(rs, dict):
        raise ConfigError("", f"`rope_scaling` is {_text(rs)}, not an object")
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default" or (kind is None and where == "rope_parameters"):
        return rope({**config, "rope_scaling": None, "rope_parameters": None})
    if kind == "linear":
        try:
            f = _number(rs, "factor", False)
        except ConfigError as e:
            raise ConfigError("", f"`{where}.{str(e).removeprefix('`')}")
        return {"rope-factor": Setting(f, f"{where}.factor", _text(rs["factor"])),
                "rope-low-freq-factor": Setting(1.0, "rope_scaling", "linear"),
                "rope-high-freq-factor": Setting(4.0, "rope_scaling", "linear"),
                "rope-original-positions": Setting(0, "rope_scaling", "linear")}
    if kind == "llama3":
        out = {}
        for name, key, integer in (("rope-factor", "factor", False), ("rope-low-freq-factor", "low_freq_factor", False),
                                   ("rope-high-freq-factor", "high_freq_factor", False),
                                   ("rope-original-positions", "original_max_position_embeddings", True)):
            try:
                out[name] = Setting(_number(rs, key, integer), f"{where}.{key}", _text(rs.get(key)))
            except ConfigError as e:
                raise ConfigError("", f"`{where}.{str(e).removeprefix('`')}")
        return out
    raise ConfigError("", f"`{where}` has type {_text(kind)}, which the standard library does not compute "
                      "(it computes `linear` and `llama3`); write the frequencies yourself, or use another checkpoint")


def settings(config: dict) -> dict[str, Setting | ConfigError]:
    """Each key of `KEYS` the config's family has, with its setting, or the ConfigError that says why
    it cannot be read (a missing or non-integer field, an unknown `rope_scaling` type). ConfigError
    for a `model_type` of no family read here."""
    fam = family(config)
    out: dict[str, Setting | ConfigError] = {}

    def put(name, key, integer=True, default=None, value=None):
        try:
            v = value if value is not None else _number(config, key, integer, default)
            out[name] = Setting(v, key, _text(config.get(key, v)))
        except ConfigError as e:
            out[name] = e

    if fam == "gpt2":
        put("layers", "n_layer")
        put("width", "n_embd")
        put("heads", "n_head")
        put("kv-heads", "n_head")
        put("vocab", "vocab_size")
        put("positions", "n_positions")
        put("eps", "layer_norm_epsilon", integer=False, default=1e-5)
        if isinstance(out.get("width"), Setting) and isinstance(out.get("heads"), Setting):
            w, h = out["width"].value, out["heads"].value
            out["head-width"] = (Setting(w // h, "n_embd", f"{w} / n_head {h}") if h and w % h == 0 else
                                 ConfigError("", f"`n_embd` {w} is not a multiple of `n_head` {h}"))
            inner = config.get("n_inner")
            if inner is None:
                out["hidden"] = Setting(4 * w, "n_inner", f"null (4 x n_embd {w})")
            else:
                put("hidden", "n_inner")
        tie = config.get("tie_word_embeddings", True)
        out["tied"] = Setting(bool(tie), "tie_word_embeddings", _text(tie))
        return out
    put("layers", "num_hidden_layers")
    put("width", "hidden_size")
    put("heads", "num_attention_heads")
    if config.get("num_key_value_heads") is None and isinstance(out.get("heads"), Setting):
        out["kv-heads"] = Setting(out["heads"].value, "num_attention_heads", _text(out["heads"].value))
    else:
        put("kv-heads", "num_key_value_heads")
    defaults = defaults_of(config.get("model_type"))
    if "head_dim" not in config and "head_dim" in defaults:   # Qwen3's: its own, whatever the width
        hd = defaults["head_dim"]
        out["head-width"] = Setting(hd, "head_dim", f"absent ({config['model_type']}'s default {hd})")
    elif config.get("head_dim") is None and isinstance(out.get("width"), Setting) and isinstance(out.get("heads"), Setting):
        w, h = out["width"].value, out["heads"].value
        out["head-width"] = (Setting(w // h, "hidden_size", f"{w} / num_attention_heads {h}") if h and w % h == 0
                             else ConfigError("", f"`hidden_size` {w} is not a multiple of `num_attention_heads` {h}"))
    else:
        put("head-width", "head_dim")
    put("hidden", "intermediate_size")
    put("vocab", "vocab_size")
    put("positions", "max_position_embeddings")
    put("eps", "rms_norm_eps", integer=False, default=defaults.get("rms_norm_eps", 1e-6))
    params = config.get("rope_parameters")
    if config.get("rope_theta") is None and isinstance(params, dict) and "rope_theta" in params:
        try:   # transformers 5 keeps the base in `rope_parameters`
            out["rope-base"] = Setting(_number(params, "rope_theta", False), "rope_parameters.rope_theta",
                                       _text(params["rope_theta"]))
        except ConfigError as e:
            out["rope-base"] = ConfigError("", f"`rope_parameters.{str(e).removeprefix('`')}")
    else:
        put("rope-base", "rope_theta", integer=False, default=10000.0)
    try:
        out.update(rope(config))
    except ConfigError as e:
        for k in ROPE_KEYS:
            out[k] = e
    tie = config.get("tie_word_embeddings", False)
    out["tied"] = Setting(bool(tie), "tie_word_embeddings", _text(tie))
    return out


def refusals(config: dict, mapping: str | None = None) -> list[str]:
    """Why the standard library's blocks (and the mapping `mapping`, when given) would not compute what
    the checkpoint was trained with: one line per field, naming it, its value and the way out; empty
    when nothing is refused."""
    try:
        fam = family(config)
    except ConfigError as e:
        return [str(e)]
    out = []
    mt = config.get("model_type")
    if mapping in MAPPINGS:
        types, tied = MAPPINGS[mapping]
        if mt not in types:
            fit = [m for m, (ts, t) in MAPPINGS.items() if mt in ts and t == bool(
                config.get("tie_word_embeddings", fam == "gpt2"))]
            out.append(f"`model_type` is {_text(mt)}, which the mapping `{mapping}` is not for (it is for "
                       + ", ".join(f"`{t}`" for t in types) + ")"
                       + (f"; use `:names :{fit[0]}`" if fit else ""))
        else:
            tie = bool(config.get("tie_word_embeddings", fam == "gpt2"))
            if tie != tied:
                other = [m for m, (ts, t) in MAPPINGS.items() if mt in ts and t == tie]
                out.append(f"`tie_word_embeddings` is {_text(tie)}, and the mapping `{mapping}` is for an "
                           f"{'untied' if not tied else 'tied'} output"
                           + (f"; use `:names :{other[0]}`" if other else "")
                           + (" (and an output tied to the embedding, `(matmul h (transpose embed))`)" if tie else
                              " (and a `:lm-head` parameter)"))
    key, acts = ACTIVATIONS[fam]
    act = config.get(key, acts[0])
    if act not in acts:
        out.append(f"`{key}` is {_text(act)}, and the standard library's {'GPT-2' if fam == 'gpt2' else 'SwiGLU'} "
                   f"MLP computes `{acts[0]}`; write the block yourself with that activation")
    if fam == "llama":
        for flag in ("attention_bias", "mlp_bias"):
            if config.get(flag) and not (flag == "attention_bias" and mt == "qwen2"):
                out.append(f"`{flag}` is true, which the mapping `{mapping or 'llama'}` does not read; write a "
                           "mapping of your own with the biases")
        if config.get("use_sliding_window"):
            out.append("`use_sliding_window` is true, and the standard library's attention is not windowed")
        try:
            rope(config)
        except ConfigError as e:
            out.append(str(e))
    return out


#: Each standard-library mapping's model class and `model_type`, for an export's config.json.
ARCHITECTURES = {"gpt2": ("GPT2LMHeadModel", "gpt2"), "llama": ("LlamaForCausalLM", "llama"),
                 "llama-tied": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
                 "qwen2-tied": ("Qwen2ForCausalLM", "qwen2")}
ARCHITECTURES.update({m: (f.architecture, f.model_type) for f in LLAMA_LIKE.values() for m in f.mappings})


def sizes(mapping: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The sizes a model read or written through the standard-library `mapping` has, from its parameters'
    shapes (path below the model -> shape, stacked ones with their layer axis first)."""
    if mapping == "gpt2":
        n, d, h, k = shapes["h.wq"]
        return {"layers": n, "width": d, "heads": h, "kv-heads": h, "head-width": k, "hidden": shapes["h.w1"][-1],
                "vocab": shapes["wte"][0], "positions": shapes["wpe"][0]}
    n, d, h, k = shapes["layers.wq"]
    return {"layers": n, "width": d, "heads": h, "kv-heads": shapes["layers.wk"][2], "head-width": k,
            "hidden": shapes["layers.w-gate"][-1], "vocab": shapes["embed"][0]}


def export_config(mapping: str, shapes: dict[str, tuple[int, ...]], stated: dict[str, object],
                  source: dict | None = None, dtype: str = "float32") -> dict:
    """The config.json of a model exported through the standard-library `mapping`: the `source`
    checkpoint's config (the model was loaded from it) with the model's sizes, else one made from the
    sizes and the settings its standard-library calls state (`stated`: `eps`, `rope-base`, the
    `rope-inv-freq` scaling numbers), the rest transformers' defaults. `dtype` is `torch_dtype`."""
    arch, model_type = ARCHITECTURES[mapping]
    got = sizes(mapping, shapes)
    tied = MAPPINGS[mapping][1]
    if mapping == "gpt2":
        made = {"n_layer": got["layers"], "n_embd": got["width"], "n_head": got["heads"],
                "n_inner": got["hidden"], "vocab_size": got["vocab"], "n_positions": got["positions"]}
        base = {"architectures": [arch], "model_type": model_type, "activation_function": "gelu_new",
                "layer_norm_epsilon": float(stated.get("eps", 1e-5)), "n_ctx": got["positions"],
                "tie_word_embeddings": True}
    else:
        made = {"num_hidden_layers": got["layers"], "hidden_size": got["width"],
                "num_attention_heads": got["heads"], "num_key_value_heads": got["kv-heads"],
                "head_dim": got["head-width"], "intermediate_size": got["hidden"], "vocab_size": got["vocab"]}
        base = {"architectures": [arch], "model_type": model_type, "hidden_act": "silu",
                "rms_norm_eps": float(stated.get("eps", 1e-6)), "rope_theta": float(stated.get("rope-base", 10000.0)),
                "max_position_embeddings": 2048, "tie_word_embeddings": tied, "attention_bias": False}
        factor = float(stated.get("rope-factor", 1.0))
        if factor != 1.0:
            original = int(stated.get("rope-original-positions", 0))
            base["rope_scaling"] = ({"rope_type": "linear", "factor": factor} if original == 0 else
                                    {"rope_type": "llama3", "factor": factor,
                                     "low_freq_factor": float(stated.get("rope-low-freq-factor", 1.0)),
                                     "high_freq_factor": float(stated.get("rope-high-freq-factor", 4.0)),
                                     "original_max_position_embeddings": original})
            if original:
                base["max_position_embeddings"] = max(2048, int(original * factor))
        if model_type == "qwen2":
            base.pop("attention_bias")
            base["use_sliding_window"] = False
        if model_type in LLAMA_LIKE:
            base.update(LLAMA_LIKE[model_type].export)
    if source is not None:
        out = dict(source)
        out.update(made)
        # the source's way of writing a default stays where the value is the default's
        if source.get("n_inner", 0) is None and got["hidden"] == 4 * got["width"]:
            out["n_inner"] = None
        if source.get("head_dim") is None and got["head-width"] * got["heads"] == got["width"] \
                and "head_dim" not in defaults_of(model_type):
            if "head_dim" in source:
                out["head_dim"] = None
            else:
                out.pop("head_dim", None)
        out.setdefault("architectures", [arch])
    else:
        out = {**base, **made}
    out["torch_dtype"] = dtype
    return out
