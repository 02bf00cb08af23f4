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

Every family is one record, `Family` in `RECORDS` (GPT-2; Llama and Mistral;
Qwen2; Qwen3; OLMo 2): its `model_type`s, its keys (`Key`: the config key and default of
each setting), its tied default, its refused settings, its mappings, where
its sizes are in a model's parameters, the block and templates of the one
form (check/one_form.py) and its export's architecture and settings. The
settings, the refusals, the comparisons of a model with its config
(check/config.py), the one form and `export_config` read the record and
nothing else; adding a family is one record (and its block, mappings and
parity fixture).

Each value is `Setting(value, key, text)`: the number, the config key it
came from (`rope_scaling.factor`), and its JSON text for messages. A field
the standard library's blocks do not compute (a `model_type` of another
family, an unknown `rope_scaling` type, an activation other than the
block's, attention or MLP biases Llama's, Qwen3's and OLMo 2's mappings do
not read, Qwen2's and Qwen3's sliding window) is a refusal: `refusals(config, mapping)` lists them,
each one line naming the key, its value and the way out. Pure Python;
never JAX.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..kept import MISSING, Space
from ..records import Record

#: The file's name beside a checkpoint's weights.
CONFIG = "config.json"

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
    "eos": "the end-of-sequence ids, `eos_token_id` (generation_config.json's where it has one), as a "
           "vector: `(stack eos)` is the `eos` of `stop-rows`",
}
ROPE_KEYS = ("rope-factor", "rope-low-freq-factor", "rope-high-freq-factor", "rope-original-positions")

#: Each config read, by its file: ((inode, size, mtime, ctime in ns) when read, the settings, or the
#: ConfigError raised), at most 64 of them and 128 MiB (bounded_read.json_memory's estimate) in all: the
#: language server keeps them between checks (`sexpgpu_lang.kept` also drops them when the documents
#: that read them close).
READ = Space("config.json", 64, 128 << 20)


def forget() -> None:
    """Drop every kept config."""
    READ.clear()


class ConfigError(Exception):
    """The config cannot be used: `file` is the file to blame, the message (one line) says why."""

    def __init__(self, file: str, message: str):
        super().__init__(message)
        self.file = file


@dataclass(frozen=True, repr=False)
class Setting(Record):
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


def _load(path: str) -> tuple[dict, int]:
    import json   # (only where a config is read: `sexpgpu lint` of a file without one imports no json)
    from .bounded_read import (CONFIG_JSON_LIMIT, JsonNumberTooLong, JsonTooDeep, JsonTooLarge, json_memory, loads_json,
                               read_bounded)
    try:   # (a regular file only, and bounded: a pipe or a device could wait forever, or never end)
        raw = read_bounded(path, CONFIG_JSON_LIMIT, "a config.json").decode("utf-8")
        data = loads_json(raw)
        size = json_memory(raw)
    except FileNotFoundError:
        raise ConfigError(path, "no such file")
    except OSError as e:   # (NotRegularFile and TooLarge say what in their own words)
        raise ConfigError(path, e.strerror or str(e))
    except (JsonTooDeep, JsonNumberTooLong) as e:
        raise ConfigError(path, f"it is not a config ({e})")
    except JsonTooLarge as e:
        raise ConfigError(path, str(e))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(path, f"it is not JSON: {e}")
    except ValueError:
        raise ConfigError(path, "no such file (its name holds a character no file name can)")
    if not isinstance(data, dict):
        raise ConfigError(path, "it is not a JSON object of settings")
    return data, size


def read(path: str) -> tuple[str, dict]:
    """(the config's file, its settings as parsed) for the checkpoint at `path`. ConfigError."""
    file = config_path(path)
    try:
        st = os.stat(file)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except (OSError, ValueError):
        return file, _load(file)[0]
    got = READ.lookup(file)
    if got is MISSING or got[0] != key:
        try:
            data, size = _load(file)
            got = (key, data, None)
        except ConfigError as e:
            got, size = (key, None, e), 1024
        READ.keep(file, got, size)
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


@dataclass(frozen=True, repr=False)
class Key(Record):
    """One setting of a family's config: the run file's name for it (`KEYS`), the config key it is read
    from (None: always derived), whether it is a count, its default where the key is absent, and
    `absent(config, out)`: the Setting (or ConfigError) where the key is absent or null and there is
    no default (`head-width` from width / heads)."""

    name: str
    config: str | None
    integer: bool = True
    default: object = None
    absent: object = None


def _ratio(config: dict, out: dict, a: str, b: str, ka: str, kb: str):
    if not (isinstance(out.get(a), Setting) and isinstance(out.get(b), Setting)):
        return None
    w, h = out[a].value, out[b].value
    return (Setting(w // h, ka, f"{w} / {kb} {h}") if h and w % h == 0 else
            ConfigError("", f"`{ka}` {w} is not a multiple of `{kb}` {h}"))


def _same_as(name: str, key: str):
    return lambda config, out: (Setting(out[name].value, key, _text(out[name].value))
                                if isinstance(out.get(name), Setting) else None)


@dataclass(frozen=True, repr=False)
class Family(Record):
    """One family of checkpoints the standard library reads: the one record the settings, the
    refusals, the comparisons of a model with its config.json, the one-form model
    (check/one_form.py) and an export's config.json read. Adding a family is one record here, its
    block in prelude.sx if new, its mappings in hf_names.sx and a parity fixture.

    - `model_types`: the config's `model_type`s it reads; `title` for messages.
    - `sizes`: config keys every config of the family has (a config with none of them and all of
      another family's has the wrong `model_type`).
    - `keys`: each setting (`Key`), in `KEYS` order; `rope`: whether the rotary base and
      `rope_scaling` are read (`rope-base`, `ROPE_KEYS`).
    - `tied`: `tie_word_embeddings`' default; `mappings`: the standard-library mapping (hf_names.sx)
      for an untied (False) and a tied (True) output.
    - `activation`: the config key and the values the family's block computes (the first is the
      block's); `refused`: config keys whose true value the blocks do not compute, each with the
      reason and the way out.
    - `params`: (parameter path below the model, axis, size key): where the model's sizes are in its
      parameters' shapes (a path below `stack`, the repeated block's key, without its layer axis).
    - `architecture`: the export's model class; `export`: the settings an export's config.json
      states besides the sizes (`stated` the model's settings: `eps`, `rope-base`, rope scaling).
    - `block`: the cached block (prelude.sx) the one-form model calls, and the templates of the
      one form's parameters (check/one_form.py reads them)."""

    name: str
    model_types: tuple[str, ...]
    title: str
    sizes: tuple[str, ...]
    keys: tuple[Key, ...]
    rope: bool
    tied: bool
    mappings: dict
    activation: tuple[str, tuple[str, ...]]
    refused: tuple[tuple[str, str], ...]
    stack: str
    params: tuple[tuple[str, int, str], ...]
    architecture: str
    export: object
    block: str
    layer_params: str
    block_args: str
    model_params: str
    embed: str
    out: str
    tied_out: str
    untied_out: str

    def mapping(self, tied: bool) -> str | None:
        """The standard-library mapping for this family with an output tied (or not) to the embedding."""
        return self.mappings.get(bool(tied))


_LLAMA_KEYS = (
    Key("layers", "num_hidden_layers"), Key("width", "hidden_size"), Key("heads", "num_attention_heads"),
    Key("kv-heads", "num_key_value_heads", absent=_same_as("heads", "num_attention_heads")),
    Key("head-width", "head_dim", absent=lambda c, o: _ratio(c, o, "width", "heads", "hidden_size",
                                                              "num_attention_heads")),
    Key("hidden", "intermediate_size"), Key("vocab", "vocab_size"), Key("positions", "max_position_embeddings"),
    Key("eps", "rms_norm_eps", integer=False, default=1e-6))
_LLAMA_PARAMS = (("embed", 0, "vocab"), ("embed", 1, "width"), ("layers.wq", 1, "heads"),
                 ("layers.wq", 2, "head-width"), ("layers.wk", 1, "kv-heads"), ("layers.w-gate", 1, "hidden"))


def _llama_export(stated: dict, tied: bool) -> dict:
    base = {"hidden_act": "silu", "rms_norm_eps": float(stated.get("eps", 1e-6)),
            "rope_theta": float(stated.get("rope-base", 10000.0)), "max_position_embeddings": 2048,
            "tie_word_embeddings": tied, "attention_bias": False}
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
    return base


def _qwen2_export(stated: dict, tied: bool) -> dict:
    base = _llama_export(stated, tied)
    base.pop("attention_bias")
    base["use_sliding_window"] = False
    return base


def _qwen3_export(stated: dict, tied: bool) -> dict:
    return {**_llama_export(stated, tied), "use_sliding_window": False}


def _olmo2_export(stated: dict, tied: bool) -> dict:
    return {**_llama_export(stated, tied), "rms_norm_eps": float(stated.get("eps", 1e-5))}


def _gpt2_export(stated: dict, tied: bool) -> dict:
    return {"activation_function": "gelu_new", "layer_norm_epsilon": float(stated.get("eps", 1e-5)),
            "tie_word_embeddings": True}


# The one form's templates: `{width}`-style fields are the settings' values (check/one_form.py).
_LLAMA_LAYER = """:attn-norm (ones [{width}])
           :wq (normal [{width} {heads} {head-width}] :std 0.02)
           :wk (normal [{width} {kv-heads} {head-width}] :std 0.02)
           :wv (normal [{width} {kv-heads} {head-width}] :std 0.02){biases}
           :wo (normal [{heads} {head-width} {width}] :std 0.02) :mlp-norm (ones [{width}])
           :w-gate (normal [{width} {hidden}] :std 0.02) :w-up (normal [{width} {hidden}] :std 0.02)
           :w-down (normal [{hidden} {width}] :std 0.02)"""
_LLAMA_ARGS = """(rope-inv-freq {head-width} {rope-base} {rope-factor} {rope-low-freq-factor}
                                 {rope-high-freq-factor} {rope-original-positions})
                  {eps} (getf self :attn-norm) {qkv}
                  (getf self :wo) (getf self :mlp-norm) (getf self :w-gate) (getf self :w-up)
                  (getf self :w-down)"""
_LLAMA_MODEL = ":embed (normal [{vocab} {width}] :std 0.02) :layers (repeat {layer} {layers}) :norm (ones [{width}])"
_LLAMA_OUT = "(matmul (rms-norm-eps (getf c :h) (getf self :norm) {eps}) {head})"
_QKV = "(getf self :wq) (getf self :wk) (getf self :wv)"
_QKV_BIASED = "(getf self :wq) (getf self :bq) (getf self :wk) (getf self :bk) (getf self :wv) (getf self :bv)"
_BIASES = """
           :bq (zeros [{heads} {head-width}]) :bk (zeros [{kv-heads} {head-width}])
           :bv (zeros [{kv-heads} {head-width}])"""
_BIASES_REFUSED = (("attention_bias", "which the mapping `{mapping}` does not read; write a mapping of your own with "
                    "the biases"),
                   ("mlp_bias", "which the mapping `{mapping}` does not read; write a mapping of your own with the "
                    "biases"))
# Qwen3: each head's queries and keys rms-normed over the head's width (one gain [H] for every head);
# `head_dim` its own, 128 where the config has none (Qwen3Config's default), whatever the width.
_QWEN3_KEYS = tuple(Key("head-width", "head_dim", default=128) if k.name == "head-width" else k for k in _LLAMA_KEYS)
_QK_NORMS = """
           :q-norm (ones [{head-width}]) :k-norm (ones [{head-width}])"""
_QKV_NORMED = "(getf self :wq) (getf self :wk) (getf self :wv) (getf self :q-norm) (getf self :k-norm)"
# OLMo 2: no norm before attention or the MLP; the query and key norms over the whole projection
# ([N H], [K H]); norms after attention and the MLP, before each residual; epsilon 1e-5 where absent.
_OLMO2_KEYS = tuple(Key("eps", "rms_norm_eps", integer=False, default=1e-5) if k.name == "eps" else k
                    for k in _LLAMA_KEYS)
_OLMO2_LAYER = """:wq (normal [{width} {heads} {head-width}] :std 0.02)
           :wk (normal [{width} {kv-heads} {head-width}] :std 0.02)
           :wv (normal [{width} {kv-heads} {head-width}] :std 0.02)
           :q-norm (ones [{heads} {head-width}]) :k-norm (ones [{kv-heads} {head-width}])
           :wo (normal [{heads} {head-width} {width}] :std 0.02) :post-attn-norm (ones [{width}])
           :w-gate (normal [{width} {hidden}] :std 0.02) :w-up (normal [{width} {hidden}] :std 0.02)
           :w-down (normal [{hidden} {width}] :std 0.02) :post-mlp-norm (ones [{width}])"""
_OLMO2_ARGS = """(rope-inv-freq {head-width} {rope-base} {rope-factor} {rope-low-freq-factor}
                                 {rope-high-freq-factor} {rope-original-positions})
                  {eps} (getf self :wq) (getf self :wk) (getf self :wv) (getf self :q-norm) (getf self :k-norm)
                  (getf self :wo) (getf self :post-attn-norm) (getf self :w-gate) (getf self :w-up)
                  (getf self :w-down) (getf self :post-mlp-norm)"""

#: The families, by record name.
RECORDS: dict[str, Family] = {f.name: f for f in (
    Family(
        name="gpt2", model_types=("gpt2",), title="GPT-2", sizes=("n_layer", "n_embd", "n_head"),
        keys=(Key("layers", "n_layer"), Key("width", "n_embd"), Key("heads", "n_head"), Key("kv-heads", "n_head"),
              Key("head-width", None, absent=lambda c, o: _ratio(c, o, "width", "heads", "n_embd", "n_head")),
              Key("hidden", "n_inner", absent=lambda c, o: (
                  Setting(4 * o["width"].value, "n_inner", f"null (4 x n_embd {o['width'].value})")
                  if isinstance(o.get("width"), Setting) else None)),
              Key("vocab", "vocab_size"), Key("positions", "n_positions"),
              Key("eps", "layer_norm_epsilon", integer=False, default=1e-5)),
        rope=False, tied=True, mappings={True: "gpt2"},
        activation=("activation_function", ("gelu_new", "gelu_pytorch_tanh")), refused=(), stack="h",
        params=(("wte", 0, "vocab"), ("wte", 1, "width"), ("wpe", 0, "positions"), ("h.wq", 1, "heads"),
                ("h.wq", 2, "head-width"), ("h.w1", 1, "hidden")),
        architecture="GPT2LMHeadModel", export=_gpt2_export, block="gpt2-block-cached",
        layer_params="""\
:ln1-gain (ones [{width}]) :ln1-bias (zeros [{width}])
           :wq (normal [{width} {heads} {head-width}] :std 0.02) :bq (zeros [{heads} {head-width}])
           :wk (normal [{width} {heads} {head-width}] :std 0.02) :bk (zeros [{heads} {head-width}])
           :wv (normal [{width} {heads} {head-width}] :std 0.02) :bv (zeros [{heads} {head-width}])
           :wo (normal [{heads} {head-width} {width}] :std 0.02) :bo (zeros [{width}])
           :ln2-gain (ones [{width}]) :ln2-bias (zeros [{width}])
           :w1 (normal [{width} {hidden}] :std 0.02) :b1 (zeros [{hidden}])
           :w2 (normal [{hidden} {width}] :std 0.02) :b2 (zeros [{width}])""",
        block_args="""{eps} (getf self :ln1-gain) (getf self :ln1-bias)
                  (getf self :wq) (getf self :bq) (getf self :wk) (getf self :bk)
                  (getf self :wv) (getf self :bv) (getf self :wo) (getf self :bo)
                  (getf self :ln2-gain) (getf self :ln2-bias)
                  (getf self :w1) (getf self :b1) (getf self :w2) (getf self :b2)""",
        model_params=""":wte (normal [{vocab} {width}] :std 0.02) :wpe (normal [{positions} {width}] :std 0.02)
           :h (repeat {layer} {layers}) :lnf-gain (ones [{width}]) :lnf-bias (zeros [{width}])""",
        embed="(+ (embedding (getf self :wte) ids) (learned-positions (getf self :wpe) pos (axis-size ids 1)))",
        out="(matmul (layer-norm-eps (getf c :h) (getf self :lnf-gain) (getf self :lnf-bias) {eps}) {head})",
        tied_out="(transpose (getf self :wte))", untied_out=""),
    Family(
        name="llama", model_types=("llama", "mistral"), title="Llama",
        sizes=("num_hidden_layers", "hidden_size", "num_attention_heads"), keys=_LLAMA_KEYS, rope=True, tied=False,
        mappings={False: "llama", True: "llama-tied"}, activation=("hidden_act", ("silu",)),
        refused=(("attention_bias", "which the mapping `{mapping}` does not read; write a mapping of your own "
                  "with the biases"),
                 ("mlp_bias", "which the mapping `{mapping}` does not read; write a mapping of your own with the "
                  "biases"),
                 ("use_sliding_window", "and the standard library's attention is not windowed")),
        stack="layers", params=_LLAMA_PARAMS, architecture="LlamaForCausalLM", export=_llama_export,
        block="llama-block-freq-cached", layer_params=_LLAMA_LAYER.replace("{biases}", ""),
        block_args=_LLAMA_ARGS.replace("{qkv}", _QKV), model_params=_LLAMA_MODEL,
        embed="(embedding (getf self :embed) ids)", out=_LLAMA_OUT,
        tied_out="(transpose (getf self :embed))", untied_out=":lm-head (normal [{width} {vocab}] :std 0.02)"),
    Family(
        name="qwen2", model_types=("qwen2",), title="Qwen2",
        sizes=("num_hidden_layers", "hidden_size", "num_attention_heads"), keys=_LLAMA_KEYS, rope=True, tied=False,
        mappings={False: "qwen2", True: "qwen2-tied"}, activation=("hidden_act", ("silu",)),
        refused=(("mlp_bias", "which the mapping `{mapping}` does not read; write a mapping of your own with the "
                  "biases"),
                 ("use_sliding_window", "and the standard library's attention is not windowed")),
        stack="layers", params=_LLAMA_PARAMS, architecture="Qwen2ForCausalLM", export=_qwen2_export,
        block="qwen2-block-cached", layer_params=_LLAMA_LAYER.replace("{biases}", _BIASES),
        block_args=_LLAMA_ARGS.replace("{qkv}", _QKV_BIASED), model_params=_LLAMA_MODEL,
        embed="(embedding (getf self :embed) ids)", out=_LLAMA_OUT,
        tied_out="(transpose (getf self :embed))", untied_out=":lm-head (normal [{width} {vocab}] :std 0.02)"),
    Family(
        name="qwen3", model_types=("qwen3",), title="Qwen3",
        sizes=("num_hidden_layers", "hidden_size", "num_attention_heads"), keys=_QWEN3_KEYS, rope=True, tied=False,
        mappings={False: "qwen3", True: "qwen3-tied"}, activation=("hidden_act", ("silu",)),
        refused=_BIASES_REFUSED + (("use_sliding_window", "and the standard library's attention is not windowed"),),
        stack="layers", params=_LLAMA_PARAMS, architecture="Qwen3ForCausalLM", export=_qwen3_export,
        block="qwen3-block-cached", layer_params=_LLAMA_LAYER.replace("{biases}", _QK_NORMS),
        block_args=_LLAMA_ARGS.replace("{qkv}", _QKV_NORMED), model_params=_LLAMA_MODEL,
        embed="(embedding (getf self :embed) ids)", out=_LLAMA_OUT,
        tied_out="(transpose (getf self :embed))", untied_out=":lm-head (normal [{width} {vocab}] :std 0.02)"),
    Family(
        name="olmo2", model_types=("olmo2",), title="OLMo 2",
        sizes=("num_hidden_layers", "hidden_size", "num_attention_heads"), keys=_OLMO2_KEYS, rope=True, tied=False,
        mappings={False: "olmo2"}, activation=("hidden_act", ("silu",)), refused=_BIASES_REFUSED,
        stack="layers", params=_LLAMA_PARAMS, architecture="Olmo2ForCausalLM", export=_olmo2_export,
        block="olmo2-block-cached", layer_params=_OLMO2_LAYER, block_args=_OLMO2_ARGS, model_params=_LLAMA_MODEL,
        embed="(embedding (getf self :embed) ids)", out=_LLAMA_OUT,
        tied_out="(transpose (getf self :embed))", untied_out=":lm-head (normal [{width} {vocab}] :std 0.02)"),
)}

#: Each `model_type` read, and its family's record.
MODEL_TYPES: dict[str, Family] = {t: f for f in RECORDS.values() for t in f.model_types}
#: Each standard-library mapping: its family's record and whether its output is tied to the embedding.
MAPPING_FAMILIES: dict[str, tuple[Family, bool]] = {m: (f, t) for f in RECORDS.values() for t, m in f.mappings.items()}
#: The `model_type`s each standard-library mapping is for, and whether it ties the output to the embedding.
MAPPINGS: dict[str, tuple[tuple[str, ...], bool]] = {m: (f.model_types, t) for m, (f, t) in MAPPING_FAMILIES.items()}
#: Each standard-library mapping's model class and `model_type`, for an export's config.json.
ARCHITECTURES = {m: (f.architecture, f.model_types[0]) for m, (f, _) in MAPPING_FAMILIES.items()}


def family(config: dict) -> Family:
    """The record of the config's `model_type` (`MODEL_TYPES`); ConfigError for another, and for a
    `model_type` whose family's sizes (`Family.sizes`) the config lacks while it has another's."""
    mt = config.get("model_type")
    if not isinstance(mt, str) and mt is not None:   # (a list or an object: a value of the wrong JSON type)
        raise ConfigError("", f"`model_type` is {_text(mt)}, not a string naming the family (like \"llama\")")
    fam = MODEL_TYPES.get(mt) if isinstance(mt, str) else None
    if fam is None:
        raise ConfigError("", f"`model_type` is {_text(mt)}, which the standard library does not read (it reads "
                          + ", ".join(f"`{t}`" for t in MODEL_TYPES) + ")")
    if not any(k in config for k in fam.sizes):
        other = next((f for f in RECORDS.values() if f.sizes != fam.sizes and all(k in config for k in f.sizes)), None)
        if other is not None:
            raise ConfigError("", f"`model_type` is {_text(mt)}, but the config has none of that family's sizes ("
                              + ", ".join(f"`{k}`" for k in fam.sizes) + ") and has "
                              + ", ".join(f"`{k}`" for k in other.sizes)
                              + f", which {other.name} configs have: is `model_type` {_text(other.model_types[0])}?")
    return fam


def _number(config: dict, key: str, integer: bool, default=None):
    """`config[key]` (or `default`): every size and setting read here is a count of 1 or more
    (`integer`) or a finite number above 0 (an epsilon, a rotary base, a scaling factor);
    ConfigError saying which it is not."""
    import math
    v = config.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 \
            or (integer and not float(v).is_integer()):
        want = "a count of 1 or more" if integer else "a finite number above 0"
        if key not in config:
            raise ConfigError("", f"it has no `{key}` ({want}), which the model's sizes are read from")
        raise ConfigError("", f"`{key}` is {_text(config.get(key))}, not {want}")
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
        unscaled = rope({**config, "rope_scaling": None, "rope_parameters": None})
        if where == "rope_parameters":   # (the key read is named: hover's "from" and messages)
            return {k: Setting(v.value, where, "default") for k, v in unscaled.items()}
        return unscaled
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


def eos_ids(path: str, config: dict) -> Setting | ConfigError:
    """The end-of-sequence ids of the checkpoint whose config.json is `path` (`config` its contents):
    `generation_config.json`'s `eos_token_id` beside it where it has one (what transformers' `generate`
    stops at), else config.json's; one id or a list, as a tuple of ids. Not a setting the model is read
    with (`settings` leaves it out, so a checkpoint with none still loads): `checkpoint-config :eos`."""
    import json
    from .bounded_read import CONFIG_JSON_LIMIT, loads_json, read_bounded
    where, got = CONFIG, config.get("eos_token_id")
    gen = os.path.join(os.path.dirname(path), "generation_config.json")
    if os.path.isfile(gen):
        try:
            data = loads_json(read_bounded(gen, CONFIG_JSON_LIMIT, "a generation_config.json").decode("utf-8"))
        except (OSError, ValueError, json.JSONDecodeError) as e:
            return ConfigError(gen, f"it cannot be read: {getattr(e, 'strerror', None) or e}")
        if isinstance(data, dict) and data.get("eos_token_id") is not None:
            where, got = "generation_config.json", data["eos_token_id"]
    ids = got if isinstance(got, list) else [got]
    if got is None or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        # (the file that holds it is the error's: a message names that one file)
        return ConfigError(path if where == CONFIG else gen,
                           f"`eos_token_id` is {_text(got)}, not an id or a list of ids")
    return Setting(tuple(ids), "eos_token_id", _text(got) + ("" if where == CONFIG else f" (in {where}, which wins)"))


def settings(config: dict) -> dict[str, Setting | ConfigError]:
    """Each key of `KEYS` the config's family has (`Family.keys`, and the rotary ones where it reads
    them), with its setting, or the ConfigError that says why it cannot be read (a missing or
    non-integer field, an unknown `rope_scaling` type). ConfigError for a `model_type` of no family
    read here."""
    fam = family(config)
    out: dict[str, Setting | ConfigError] = {}
    for k in fam.keys:
        try:
            if k.config is None or (config.get(k.config) is None and k.default is None and k.absent is not None):
                got = k.absent(config, out)
                if got is not None:
                    out[k.name] = got
                continue
            v = _number(config, k.config, k.integer, k.default)
            out[k.name] = Setting(v, k.config, _text(config.get(k.config, v)))
        except ConfigError as e:
            out[k.name] = e
    heads, kv = out.get("heads"), out.get("kv-heads")
    if isinstance(heads, Setting) and isinstance(kv, Setting) and heads.value % kv.value:
        out["kv-heads"] = ConfigError("", f"`{heads.key}` {heads.value} is not a multiple of `{kv.key}` {kv.value} "
                                      "(each key-value head serves the same number of query heads)")
    if fam.rope:
        params = config.get("rope_parameters")
        if config.get("rope_theta") is None and isinstance(params, dict) and "rope_theta" in params:
            try:   # transformers 5 keeps the base in `rope_parameters`
                out["rope-base"] = Setting(_number(params, "rope_theta", False), "rope_parameters.rope_theta",
                                           _text(params["rope_theta"]))
            except ConfigError as e:
                out["rope-base"] = ConfigError("", f"`rope_parameters.{str(e).removeprefix('`')}")
        else:
            try:
                v = _number(config, "rope_theta", False, 10000.0)
                out["rope-base"] = Setting(v, "rope_theta", _text(config.get("rope_theta", v)))
            except ConfigError as e:
                out["rope-base"] = e
        try:
            out.update(rope(config))
        except ConfigError as e:
            for k in ROPE_KEYS:
                out[k] = e
    tie = config.get("tie_word_embeddings", fam.tied)
    out["tied"] = Setting(bool(tie), "tie_word_embeddings", _text(tie))
    return {k: out[k] for k in KEYS if k in out}


def refusals(config: dict, mapping: str | None = None) -> list[str]:
    """Why the standard library's blocks (and the mapping `mapping`, when given) would not compute what
    the checkpoint was trained with: one line per field, naming it, its value and the way out; empty
    when nothing is refused. Read from the family's record (`Family.activation`, `Family.refused`,
    `Family.mappings`)."""
    try:
        fam = family(config)
    except ConfigError as e:
        return [str(e)]
    out = []
    mt = config.get("model_type")
    tie = bool(config.get("tie_word_embeddings", fam.tied))
    if mapping in MAPPINGS:
        types, tied = MAPPINGS[mapping]
        if mt not in types:
            fit = fam.mapping(tie)
            out.append(f"`model_type` is {_text(mt)}, which the mapping `{mapping}` is not for (it is for "
                       + ", ".join(f"`{t}`" for t in types) + ")"
                       + (f"; use `:names :{fit}`" if fit else ""))
        elif tie != tied:
            other = fam.mapping(tie)
            out.append(f"`tie_word_embeddings` is {_text(tie)}, and the mapping `{mapping}` is for "
                       f"{'an untied' if not tied else 'a tied'} output"
                       + (f"; use `:names :{other}`" if other else "")
                       + (" (and an output tied to the embedding, `(matmul h (transpose embed))`)" if tie else
                          " (and a `:lm-head` parameter)"))
    key, acts = fam.activation
    act = config.get(key, acts[0])
    if act not in acts:
        out.append(f"`{key}` is {_text(act)}, and the standard library's {fam.title} block "
                   f"computes `{acts[0]}`; write the block yourself with that activation")
    for flag, why in fam.refused:
        if config.get(flag):
            out.append(f"`{flag}` is true, " + why.format(mapping=mapping or fam.mapping(False)))
    if fam.rope:
        try:
            rope(config)
        except ConfigError as e:
            out.append(str(e))
    return out


def sizes(mapping: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The sizes a model read or written through the standard-library `mapping` has, from its parameters'
    shapes (path below the model -> shape, stacked ones with their layer axis first): `Family.params`."""
    fam = MAPPING_FAMILIES[mapping][0]
    out = {"layers": shapes[next(rel for rel, _, _ in fam.params if rel.startswith(fam.stack + "."))][0]}
    for rel, axis, key in fam.params:
        shape = shapes[rel][1:] if rel.startswith(fam.stack + ".") else shapes[rel]
        out.setdefault(key, shape[axis])
    out.setdefault("kv-heads", out["heads"])
    return out


def export_config(mapping: str, shapes: dict[str, tuple[int, ...]], stated: dict[str, object],
                  source: dict | None = None, dtype: str = "float32") -> dict:
    """The config.json of a model exported through the standard-library `mapping`: the `source`
    checkpoint's config (the model was loaded from it) with the model's sizes, else one made from the
    sizes and the settings its standard-library calls state (`stated`: `eps`, `rope-base`, the
    `rope-inv-freq` scaling numbers; `Family.export`), the rest transformers' defaults. `dtype` is
    `torch_dtype`."""
    fam, tied = MAPPING_FAMILIES[mapping]
    got = sizes(mapping, shapes)
    made = {k.config: got[k.name] for k in fam.keys if k.config and k.name in got}
    if source is not None:
        out = dict(source)
        out.update(made)
        # the source's way of writing a default stays where the value is the default's
        if source.get("n_inner", 0) is None and got["hidden"] == 4 * got["width"]:
            out["n_inner"] = None
        own_head_dim = any(k.name == "head-width" and k.default is not None for k in fam.keys)   # Qwen3's 128
        if source.get("head_dim") is None and got["head-width"] * got["heads"] == got["width"] and not own_head_dim:
            if "head_dim" in source:
                out["head_dim"] = None
            else:
                out.pop("head_dim", None)
        out.setdefault("architectures", [fam.architecture])
    else:
        out = {"architectures": [fam.architecture], "model_type": fam.model_types[0], **fam.export(stated, tied),
               **made}
        if "n_positions" in made:
            out["n_ctx"] = made["n_positions"]
    out["torch_dtype"] = dtype
    return out
