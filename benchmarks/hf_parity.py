"""Parity with transformers: tiny random models of each family the standard library reads, made by
transformers itself, against sexpgpu's run files that take every size and setting from config.json.

    python -m benchmarks.hf_parity                # compare, print the figures
    python -m benchmarks.hf_parity --write        # and (re)write tests/fixtures/hf/
    python -m benchmarks.hf_parity --lora         # LoRA adapters against peft (benchmarks/peft_parity.py)

Needs the `reference` extra (`pip install -e '.[reference]'`: torch and transformers); nothing
downloads: each model is built from a config object with random weights. For each family (GPT-2;
Llama 2; Llama 3 with rope_theta 5e5, rms_norm_eps 1e-5, grouped-query heads and `llama3` rope
scaling; Mistral; Qwen2 with its q/k/v biases and a tied output; Qwen3 with its per-head q/k norms
and a `head_dim` that is not width / heads, untied and tied; OLMo 2 with its q/k norms over the
whole projection and its norms after attention and the MLP; Llama with a tied output and `linear`
rope scaling) it

1. saves the model with `save_pretrained`, sharded (an index and several shards);
2. writes a run file that states no size or setting by hand (`checkpoint-config` binds them) and
   reads the checkpoint through the standard library's mapping;
3. compares sexpgpu's logits with transformers' (f32; the largest difference relative to the
   largest logit), and greedy decoding token for token: transformers' `generate` with its cache
   against the run file's `:decode` entry with its caches through the stacked layers, and without
   against sexpgpu's forward over the growing row;
4. exports sexpgpu's parameters in the HF layout (weights and config.json: the source checkpoint's,
   and one made from the run file's values alone, as for a model trained from scratch) and loads the
   directory with `AutoModelForCausalLM.from_pretrained`, whose logits must match again.

5. for GPT-2, Llama 3, Qwen2, Qwen3 and OLMo 2, decodes a batch of prompts of different lengths, left-padded, with
   an attention mask and an end-of-sequence id (chosen so that the rows stop at different trips),
   by `generate` with its cache and without, against `<family>-padded.sx`: the standard library's
   per-row positions (`left-padded-start`, `pos` [B]) and stops (`stop-rows`), with the caches and
   over the whole row each step.

With `--write`, tests/fixtures/hf/<family>/ gets the checkpoint, <family>.sx and expected.npz (the
ids, transformers' logits and greedy tokens), and the padded batch's files (`<family>-padded.*`): tests/test_hf_parity.py checks them on every run of
the suite without transformers.
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hf"
SEQ, PROMPT, BATCH = 8, 4, 2

#: Each family: transformers' config class and settings, and the standard-library mapping.
FAMILIES = {
    "gpt2": ("GPT2Config", dict(n_layer=2, n_embd=32, n_head=4, n_positions=16, vocab_size=96,
                                layer_norm_epsilon=1e-5), "gpt2"),
    "llama2": ("LlamaConfig", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                   num_key_value_heads=4, intermediate_size=64, vocab_size=96,
                                   max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0), "llama"),
    "llama3": ("LlamaConfig", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=64, vocab_size=96,
                                   max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=500000.0,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
               "llama"),
    "mistral": ("MistralConfig", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64, vocab_size=96,
                                      max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=1000000.0,
                                      sliding_window=None), "llama"),
    "qwen2": ("Qwen2Config", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                  intermediate_size=64, vocab_size=96, max_position_embeddings=64, rms_norm_eps=1e-6,
                                  rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False),
              "qwen2-tied"),
    "qwen3": ("Qwen3Config", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                  head_dim=16, intermediate_size=64, vocab_size=96, max_position_embeddings=64,
                                  rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False), "qwen3"),
    "qwen3-tied": ("Qwen3Config", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                       num_key_value_heads=4, head_dim=12, intermediate_size=48, vocab_size=96,
                                       max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                       tie_word_embeddings=True), "qwen3-tied"),
    "olmo2": ("Olmo2Config", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                  intermediate_size=64, vocab_size=96, max_position_embeddings=64, rms_norm_eps=1e-6,
                                  rope_theta=500000.0, tie_word_embeddings=False, eos_token_id=None), "olmo2"),
    "llama-tied": ("LlamaConfig", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                       num_key_value_heads=1, intermediate_size=48, vocab_size=96,
                                       max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                                       tie_word_embeddings=True, rope_scaling={"rope_type": "linear", "factor": 2.0}),
                   "llama-tied"),
}

_BINDS = ("layers", "width", "heads", "kv-heads", "head-width", "hidden", "vocab")
_ROPE = ("eps", "rope-base", "rope-factor", "rope-low-freq-factor", "rope-high-freq-factor", "rope-original-positions")


def run_file(family: str, mapping: str, padded: bool = False) -> str:
    """The run file of `family`'s fixture: every size and setting bound from `family/config.json`.
    With `padded`, the run file of the left-padded batch (`padded_tail`) instead of the rows'."""
    ck = f'"{family}"'
    binds = list(_BINDS) + (["positions", "eps"] if mapping == "gpt2" else list(_ROPE))
    head = "".join(f"(def {k} (checkpoint-config {ck} :{k}))\n" for k in binds)
    head += f"(def seq {SEQ})   ; the rows' length (the data's, not the model's)\n\n"
    head += (PADDED_LOADER.replace("FAMILY", family) if padded else
             "(loader rows\n  :source (stride-rows :vocab vocab :seq seq)\n  :batch 2\n"
             "  :fields (:row [seq] :i32 :stride [1] :i32))\n\n")
    g = lambda shape: f"(normal [{shape}] :std 0.02)"  # noqa: E731
    # Each layer takes the carry (:h [B T D] :k :v), the caches of every layer [L B S K H], and the
    # position of h's first row: it reads the first layer's cache, runs the cached block, and puts its
    # cache back last, so after the L layers the caches are in their order again.
    carry = """  :apply (lambda (self c pos)
           (let* ((ks (getf c :k))
                  (vs (getf c :v))
                  (n (axis-size ks 0))
                  (out (BLOCK (getf c :h) pos (take ks 0 :axis 0) (take vs 0 :axis 0)
ARGS)))
             (list :h (getf out :h)
                   :k (concat [(slice ks :axis 0 :start 1 :end n) (expand-dims (getf out :k) :axis 0)] :axis 0)
                   :v (concat [(slice vs :axis 0 :start 1 :end n) (expand-dims (getf out :v) :axis 0)] :axis 0)))))
"""
    if mapping == "gpt2":
        kv, stack, embed = "heads", "h", "(+ (embedding (getf self :wte) ids) (learned-positions (getf self :wpe) pos (axis-size ids 1)))"
        out = "(matmul (layer-norm-eps (getf c :h) (getf self :lnf-gain) (getf self :lnf-bias) eps) (transpose (getf self :wte)))"
        layer = f"""(defmodel layer
  :params (:ln1-gain (ones [width]) :ln1-bias (zeros [width])
           :wq {g("width heads head-width")} :bq (zeros [heads head-width])
           :wk {g("width heads head-width")} :bk (zeros [heads head-width])
           :wv {g("width heads head-width")} :bv (zeros [heads head-width])
           :wo {g("heads head-width width")} :bo (zeros [width])
           :ln2-gain (ones [width]) :ln2-bias (zeros [width])
           :w1 {g("width hidden")} :b1 (zeros [hidden]) :w2 {g("hidden width")} :b2 (zeros [width]))
""" + carry.replace("BLOCK", "gpt2-block-cached").replace("ARGS", """                         eps (getf self :ln1-gain) (getf self :ln1-bias)
                         (getf self :wq) (getf self :bq) (getf self :wk) (getf self :bk)
                         (getf self :wv) (getf self :bv) (getf self :wo) (getf self :bo)
                         (getf self :ln2-gain) (getf self :ln2-bias)
                         (getf self :w1) (getf self :b1) (getf self :w2) (getf self :b2)""")
        params = f""":wte {g("vocab width")} :wpe {g("positions width")} :h (repeat layer layers)
           :lnf-gain (ones [width]) :lnf-bias (zeros [width])"""
        note = ";; each row reads the position table's rows at its own positions (`learned-positions`)\n"
    else:
        family_of = mapping.removesuffix("-tied")
        tied = mapping.endswith("-tied")
        # each block's parameters after :wq [D N H], :wk and :wv [D K H], in the block's argument order
        extra = {"qwen2": ":bq (zeros [heads head-width])\n           :bk (zeros [kv-heads head-width])"
                          " :bv (zeros [kv-heads head-width])\n",
                 "qwen3": ":q-norm (ones [head-width]) :k-norm (ones [head-width])\n",
                 "olmo2": ":q-norm (ones [heads head-width]) :k-norm (ones [kv-heads head-width])\n"}.get(family_of, "")
        block = {"qwen2": "qwen2-block-cached", "qwen3": "qwen3-block-cached",
                 "olmo2": "olmo2-block-cached"}.get(family_of, "llama-block-freq-cached")
        args = {"qwen2": "(getf self :attn-norm) (getf self :wq) (getf self :bq) (getf self :wk) (getf self :bk) "
                         "(getf self :wv) (getf self :bv)",
                "qwen3": "(getf self :attn-norm) (getf self :wq) (getf self :wk) (getf self :wv) (getf self :q-norm) "
                         "(getf self :k-norm)",
                "olmo2": "(getf self :wq) (getf self :wk) (getf self :wv) (getf self :q-norm) (getf self :k-norm)"}.get(
            family_of, "(getf self :attn-norm) (getf self :wq) (getf self :wk) (getf self :wv)")
        olmo = family_of == "olmo2"   # norms after attention and the MLP, none before
        kv, stack, embed = "kv-heads", "layers", "(embedding (getf self :embed) ids)"
        lm = "(transpose (getf self :embed))" if tied else "(getf self :lm-head)"
        out = f"(matmul (rms-norm-eps (getf c :h) (getf self :norm) eps) {lm})"
        layer = f"""(defmodel layer
  :params ({"" if olmo else ":attn-norm (ones [width])"}
           :wq {g("width heads head-width")}
           :wk {g("width kv-heads head-width")} :wv {g("width kv-heads head-width")}
           {extra}           :wo {g("heads head-width width")} {":post-attn-norm" if olmo else ":mlp-norm"} (ones [width])
           :w-gate {g("width hidden")} :w-up {g("width hidden")} :w-down {g("hidden width")}{
               " :post-mlp-norm (ones [width])" if olmo else ""})
""" + carry.replace("BLOCK", block).replace("ARGS", f"""                         (rope-inv-freq head-width rope-base rope-factor rope-low-freq-factor
                                        rope-high-freq-factor rope-original-positions)
                         eps {args}
                         (getf self :wo) {"(getf self :post-attn-norm)" if olmo else "(getf self :mlp-norm)"} (getf self :w-gate) (getf self :w-up)
                         (getf self :w-down){" (getf self :post-mlp-norm)" if olmo else ""}""")
        params = f""":embed {g("vocab width")} :layers (repeat layer layers) :norm (ones [width])""" + (
            "" if tied else f"\n           :lm-head {g('width vocab')}")
        note = ""
    layer += f"""
;; `:apply` is the whole row at position 0 with empty caches; `:decode` the new tokens ids [B T] at
;; pos, with the caches k and v [layers B seq {kv} head-width] -> (:logits [B T vocab] :k :v)
{note}(defmodel teacher
  :params ({params})
  :apply (lambda (self ids)
           (let* ((pos 0)
                  (empty (zeros [layers (axis-size ids 0) seq {kv} head-width]))
                  (c ({stack_call(stack)} (list :h {embed} :k empty :v empty) pos)))
             {out}))
  :entries (:decode (lambda (self ids pos k v)
                      (let* ((c ({stack_call(stack)} (list :h {embed} :k k :v v) pos)))
                        (list :logits {out} :k (getf c :k) :v (getf c :v)))))
  :pretrained (:path {ck} :names :{mapping}))
"""
    steps = ["         (o0 (teacher :decode prompt 0 empty empty))",
             f"         (t{PROMPT} (argmax (slice (getf o0 :logits) :axis 1 :start {PROMPT - 1} :end {PROMPT})))"]
    for k, t in enumerate(range(PROMPT, SEQ - 1), start=1):
        steps.append(f"         (o{k} (teacher :decode t{t} (+ zero {t}) (getf o{k - 1} :k) (getf o{k - 1} :v)))")
        steps.append(f"         (t{t + 1} (argmax (getf o{k} :logits)))")
    tokens = " ".join(f"t{t}" for t in range(PROMPT, SEQ))
    tail = f"""
(model teacher)

;; the logits of the whole row, and greedy decoding with the caches: the prompt's {PROMPT} tokens at
;; position 0, then one token a step (`zero` is 0 computed from the data, so each step's position is
;; a traced value, as a generator's trip is)
(prepare (lambda (batch ctx)
  (let* ((row (field batch :row))
         (prompt (slice row :axis 1 :start 0 :end {PROMPT}))
         (zero (* 0 (sum (field batch :stride))))
         (empty (zeros [layers (axis-size row 0) seq {kv} head-width]))
{chr(10).join(steps)})
    (list :logits (teacher row) :greedy (concat [prompt {tokens}] :axis 1) :row row))))

(objective (lambda (inputs ctx)
  (mean (cross-entropy (model (getf inputs :row)) (getf inputs :row)))))

(run :loader rows :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
"""
    if padded:
        tail = padded_tail(kv)
    from sexpgpu_lang.format import format_text   # as `sexpgpu fmt` lays it out
    text = (f";; tests/fixtures/hf/{family}: written by benchmarks/hf_parity.py; every size and setting from "
            f"its config.json\n\n" + head + layer + tail)
    return format_text(text) or text


#: The left-padded batch: prompts of these lengths, left-padded to PROMPT with PAD, decoded greedily
#: for NEW tokens each, every row stopping at its end-of-sequence id (`padded.npz`).
PADDED_FAMILIES = ("gpt2", "llama3", "qwen2", "qwen3", "olmo2")
LENGTHS, NEW, PAD = (4, 1, 3, 2), SEQ - PROMPT, 0
PADDED_LOADER = f"""(loader prompts
  :source (npz "FAMILY-prompts.npz")
  :batch {len(LENGTHS)}
  :fields (:prompt [{PROMPT}] :i32 :prompt-mask [{PROMPT}] :bool :eos [] :i32))

"""


def padded_tail(kv: str) -> str:
    """The `prepare` of the padded run file: the left-padded prompts decoded greedily with the caches
    (`:decode` at each row's `left-padded-start`, then at each row's own position) and without (the
    whole row so far each step, empty caches), each row stopping at the batch's `:eos` (`stop-rows`),
    as a generator's trips would, unrolled."""
    def decode(cached: bool) -> list[str]:
        lines, tag = [], "c" if cached else "u"
        lines.append(f"         ({tag}s0 (list :completion none :mask never :done (< length 0)))")
        for t in range(NEW):
            prev = f"{tag}s{t}"
            if cached:
                if t == 0:
                    lines.append(f"         ({tag}o0 (teacher :decode prompt start empty empty))")
                    logits = f"(take (getf {tag}o0 :logits) {PROMPT - 1} :axis 1)"
                else:
                    ids = f"(expand-dims (getf {prev} :token) :axis 1)"
                    lines.append(f"         ({tag}o{t} (teacher :decode {ids} (+ length {t - 1}) (getf {tag}o{t - 1} :k) "
                                 f"(getf {tag}o{t - 1} :v)))")
                    logits = f"(take (getf {tag}o{t} :logits) 0 :axis 1)"
            else:
                row = f"(concat [prompt (getf {prev} :completion)] :axis 1)"
                lines.append(f"         ({tag}o{t} (teacher :decode {row} start empty empty))")
                logits = f"(take (getf {tag}o{t} :logits) {PROMPT - 1 + t} :axis 1)"
            lines.append(f"         ({tag}s{t + 1} (stop-rows (getf {prev} :completion) (getf {prev} :mask) "
                         f"(getf {prev} :done) (argmax {logits}) {t} eos {PAD}))")
        return lines
    steps = decode(True) + decode(False)
    return f"""
(model teacher)

;; the left-padded prompts decoded greedily, each row stopping at `eos`: with the caches (the prefill at
;; each row's first column's position, negative at its padding, then each row at its own position) and
;; without (the whole row so far at every step), as a generator's trips would, unrolled
(prepare (lambda (batch ctx)
  (let* ((prompt (field batch :prompt))
         (start (left-padded-start (field batch :prompt-mask)))
         (length (+ start {PROMPT}))
         (eos (take (field batch :eos) 0))
         (empty (zeros [layers (axis-size prompt 0) seq {kv} head-width]))
         (none (zeros [(axis-size prompt 0) {NEW}] :dtype :i32))
         (never (< none 0))
{chr(10).join(steps)})
    (list :greedy (getf cs{NEW} :completion) :greedy-uncached (getf us{NEW} :completion)
          :completion-mask (getf cs{NEW} :mask) :completion-length (completion-length (getf cs{NEW} :mask))
          :prompt prompt))))

(objective (lambda (inputs ctx)
  (mean (cross-entropy (model (getf inputs :prompt)) (getf inputs :prompt)))))

(run :loader prompts :steps 1 :seed 0 :optimizer (adam :lr 1e-3))
"""


def stack_call(stack: str) -> str:
    """The repeated block's model name (the fixtures call it `layer` whatever the parameter's key)."""
    return "layer"


def build(family: str, directory: Path):
    """transformers' random model of `family`, saved sharded in `directory`: (model, ids, logits, greedy)."""
    import torch
    import transformers
    cls, kw, _ = FAMILIES[family]
    config = getattr(transformers, cls)(**kw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    model.save_pretrained(directory, max_shard_size="40KB")
    rng = np.random.default_rng(1)
    ids = rng.integers(0, kw["vocab_size"], size=(BATCH, SEQ)).astype(np.int32)
    with torch.no_grad():
        logits = model(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
        prompt = torch.as_tensor(ids[:, :PROMPT], dtype=torch.long)
        greedy = {}
        for cache in (True, False):
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=SEQ - PROMPT,
                                 do_sample=False, use_cache=cache, pad_token_id=0)
            greedy[cache] = out.numpy().astype(np.int32)
    return model, ids, logits, greedy


def padded_generate(model, vocab: int) -> dict:
    """transformers' greedy `generate` of left-padded prompts of LENGTHS (an attention mask, PAD at the
    padding) for NEW tokens, with an end-of-sequence id chosen so that the rows stop at different
    trips: the prompts, their mask, the id, and the completions [B NEW] (PAD after a row's stop)
    with the cache and without."""
    import torch
    rng = np.random.default_rng(5)
    prompt = np.full((len(LENGTHS), PROMPT), PAD, np.int32)
    mask = np.zeros((len(LENGTHS), PROMPT), bool)
    for b, n in enumerate(LENGTHS):
        prompt[b, PROMPT - n:] = rng.integers(1, vocab, n)
        mask[b, PROMPT - n:] = True

    def gen(eos: int, cache: bool) -> np.ndarray:
        with torch.no_grad():
            out = model.generate(torch.as_tensor(prompt, dtype=torch.long),
                                 attention_mask=torch.as_tensor(mask, dtype=torch.long), max_new_tokens=NEW,
                                 do_sample=False, use_cache=cache, pad_token_id=PAD, eos_token_id=eos)
        done = out.numpy()[:, PROMPT:].astype(np.int32)   # shorter when every row stopped early
        return np.pad(done, ((0, 0), (0, NEW - done.shape[1])), constant_values=PAD)

    free = gen(vocab, True)   # an id no token reaches: no row stops

    def stops(eos: int) -> tuple:
        return tuple(int(np.argmax(r == eos)) if (r == eos).any() else NEW for r in free)
    eos = max(sorted({int(t) for t in free.ravel()} - {PAD}), key=lambda e: (len(set(stops(e))), sum(s < NEW for s in stops(e))))
    out = {"prompt": prompt, "prompt_mask": mask, "eos": np.int32(eos), "completion": gen(eos, True),
           "completion_uncached": gen(eos, False), "stops": np.asarray(stops(eos), np.int32)}
    return out


def compiled_prepare(run: Path):
    """The run file `run` checked with its files read, and its `prepare` compiled at the seed's
    parameters: (prepare(batch, params), the program, trainable, frozen). SystemExit naming the
    diagnostics of a file that does not check."""
    import jax
    import jax.numpy as jnp
    from sexpgpu_lang import analyze_file
    from sexpgpu_runtime.lowering.context import make_ctx
    from sexpgpu_runtime.lowering.lowering import Effects, run_phase
    from sexpgpu_runtime.weights.pretrained import initial_params
    res = analyze_file(str(run), read_files=True)
    if res.program is None or [d for d in res.diagnostics if d.is_error]:
        raise SystemExit(f"{run}: " + "; ".join(f"{d.code} {d.message}" for d in res.diagnostics))
    p = res.program
    trainable, frozen = initial_params(p, 0)
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()}
    prepare = jax.jit(lambda batch, params: run_phase(p.prepare, [batch, ctx], params, Effects(jax.random.key(0))))
    return prepare, p, trainable, frozen


def sexpgpu_batch(run: Path):
    """The run file `run`'s `prepare`, compiled: a function of a batch (field name -> array) to what it returns."""
    import jax.numpy as jnp
    from sexpgpu_runtime.weights.params import merge
    prepare, _, trainable, frozen = compiled_prepare(run)
    params = merge(trainable, frozen)
    return lambda batch: {k: np.asarray(v) for k, v in prepare({k: jnp.asarray(v) for k, v in batch.items()},
                                                                params).items()}


def padded_batch(want) -> dict:
    """The loader's batch of a `<family>-padded.npz`: the prompts, their mask and the id per row."""
    n = len(want["prompt"])
    return {"prompt": want["prompt"], "prompt-mask": want["prompt_mask"], "eos": np.full((n,), want["eos"], np.int32)}


def sexpgpu_forward(run: Path):
    """(a function of ids [B SEQ] -> logits, the program, its parameters) for the run file `run`."""
    import jax.numpy as jnp
    from sexpgpu_runtime.weights.params import merge
    prepare, p, trainable, frozen = compiled_prepare(run)
    params = merge(trainable, frozen)   # (a `:lora` model has both below one path)

    def forward(ids, key: str = "logits"):
        """The run file's `prepare` on rows `ids`: its `:logits` (or `key`: `:greedy`, decoded with the caches)."""
        batch = {"row": jnp.asarray(ids), "stride": jnp.ones((ids.shape[0], 1), jnp.int32)}
        return np.asarray(prepare(batch, params)[key])
    return forward, p, trainable, frozen


def greedy_of(forward, ids: np.ndarray) -> np.ndarray:
    """Greedy decoding of ids[:, :PROMPT] to SEQ tokens, each step the forward over the row so far
    (the positions after it padded with 0: causal attention does not read them)."""
    row = np.zeros_like(ids)
    row[:, :PROMPT] = ids[:, :PROMPT]
    for t in range(PROMPT, SEQ):
        row[:, t] = forward(row)[:, t - 1].argmax(-1)
    return row


def relative(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference relative to the largest reference magnitude."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="(re)write tests/fixtures/hf/")
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--lora", action="store_true", help="LoRA against peft instead (benchmarks/peft_parity.py)")
    args = ap.parse_args(argv)
    if args.lora:
        from benchmarks.peft_parity import main as lora_main
        return lora_main(["--write"] if args.write else [])
    import torch
    import transformers
    from sexpgpu_runtime.weights.hf_export import write_config
    from sexpgpu_runtime.weights.pretrained import export_params
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            _, _, mapping = FAMILIES[family]
            root = Path(tmp) / family
            root.mkdir()
            model, ids, logits, greedy = build(family, root / family)
            (root / f"{family}.sx").write_text(run_file(family, mapping))
            forward, program, trainable, frozen = sexpgpu_forward(root / f"{family}.sx")
            got = forward(ids)
            rel = relative(got, logits)
            ours = {True: forward(ids, "greedy"), False: greedy_of(forward, ids)}   # with the caches, and without
            same = {c: bool(np.array_equal(ours[c], g)) for c, g in greedy.items()}
            out = root / "export"
            export_params(out, trainable, frozen, True, dict(__import__("sexpgpu_lang.name_mapping", fromlist=["x"])
                                                            .stdlib_names()[mapping]))
            write_config(program, out, mapping)
            back = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
            with torch.no_grad():
                again = back(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
            rel_back = relative(again, got)
            # the config made from the run file's values alone, as for a model trained from scratch
            write_config(dataclasses.replace(program, pretrained=()), out, mapping)
            made = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
            with torch.no_grad():
                rel_made = relative(made(torch.as_tensor(ids, dtype=torch.long)).logits.numpy(), got)
            ok = rel <= 1e-4 and all(same.values()) and rel_back <= 1e-4 and rel_made <= 1e-4
            failed |= not ok
            print(f"{family:11s} logits rel {rel:.2e}  greedy cached {same[True]} uncached {same[False]}  "
                  f"export reloaded rel {rel_back:.2e} (config made from the file: {rel_made:.2e})  {'ok' if ok else 'FAIL'}")
            if family in PADDED_FAMILIES:
                padded = padded_generate(model, FAMILIES[family][1]["vocab_size"])
                batch = padded_batch(padded)
                np.savez(root / f"{family}-prompts.npz", **batch)
                (root / f"{family}-padded.sx").write_text(run_file(family, mapping, padded=True))
                got = sexpgpu_batch(root / f"{family}-padded.sx")(batch)
                rows_ok = bool(np.array_equal(padded["completion"], padded["completion_uncached"])
                               and np.array_equal(got["greedy"], padded["completion"])
                               and np.array_equal(got["greedy-uncached"], padded["completion"])
                               and np.array_equal(got["completion-length"], np.minimum(padded["stops"] + 1, NEW)))
                failed |= not rows_ok
                print(f"{family:11s} left-padded lengths {LENGTHS}, eos {int(padded['eos'])}, rows stop at trips "
                      f"{padded['stops'].tolist()}: cached and uncached tokens {'equal' if rows_ok else 'DIFFER'}")
                if args.write:
                    for name in (f"{family}-prompts.npz", f"{family}-padded.sx"):
                        shutil.copy(root / name, FIXTURES / name)
                    np.savez_compressed(FIXTURES / f"{family}-padded.npz", **padded)
            if args.write:
                target = FIXTURES / family
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(root / family, target)
                (FIXTURES / f"{family}.sx").write_text(run_file(family, mapping))
                np.savez_compressed(FIXTURES / f"{family}.npz", ids=ids, logits=logits.astype(np.float32),
                                    greedy=greedy[True], greedy_uncached=greedy[False])
    if args.write:
        (FIXTURES / "README.md").write_text(
            "Written by `python -m benchmarks.hf_parity --write` (transformers "
            f"{transformers.__version__}, torch {torch.__version__.split('+')[0]}): each family's random checkpoint as "
            "`save_pretrained` saved it (sharded), the run file that reads it stating no number by hand, and "
            "`<family>.npz` (the ids, transformers' logits and greedy tokens, cached and uncached); for "
            f"{', '.join(PADDED_FAMILIES)}, `<family>-padded.npz` (left-padded prompts of lengths {LENGTHS}, their "
            "mask, an end-of-sequence id, `generate`'s completions with an attention mask, cached and uncached, and "
            "the trip each row stops at), `<family>-prompts.npz` (the batch its loader reads) and "
            "`<family>-padded.sx` (the run file decoding it per row). "
            "tests/test_hf_parity.py checks them.\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
