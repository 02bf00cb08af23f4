"""The language's schema as plain data: its forms, their keywords, the context, the sources, the optimizers.

One home for what the checker (`check/`), the editor features (`ide`), the
cost report (`explain`), the grammar generator and the runtime's context rows
all spell: the top-level forms and special forms with their signature and a
one-line doc (docs/language.md), each keyword-taking form's keywords with a
one-line doc, the context keys in the order of the runtime's context rows
with their dtypes, the loader sources with their arguments and the
optimizers with their settings.

Plain data only: imports nothing but the dtype names of `types`, never JAX.
"""
from __future__ import annotations

from .types import DTYPES

#: Each top-level form (docs/dev/design.md#forms-and-the-context): its signature and a one-line doc.
TOP_FORMS: dict[str, tuple[str, str]] = {
    "def": ("(def name value)", "a compile-time constant: integer, float, shape, dtype keyword, or a function"),
    "loader": ("(loader name :source (...) :batch n :fields (:name [shape] :dtype ...))", "a named loader: where records come from and what they hold"),
    "defmodel": ("(defmodel name :params (...) :apply (lambda (self x) ...))", "a named model: its parameters and how it applies"),
    "model": ("(model name)", "binds `model`: the model objective trains"),
    "defgenerate": ("(defgenerate :trips n :init f :step f :finish f)", "make records on the device inside each step"),
    "prepare": ("(prepare (lambda (batch ctx) ...))", "batch to the plist objective reads; declares counters"),
    "objective": ("(objective (lambda (inputs ctx) ...))", "inputs to a float scalar loss"),
    "pass": ("(pass name :loader l :every n :batches k :prepare f)", "an evaluation pass: prepare and objective, no gradient"),
    "run": ("", "the run's settings"),   # the signature: made from RUN_KEYS below (RUN_PLACEHOLDERS)
    "curriculum": ("(curriculum (stage :loader l :records n) ...)", "switch the training loader as records are consumed"),
}

#: Heads of the top-level forms: a `(` in column 1 followed by one of these always starts a new
#: form, even inside an unclosed one (syntax.py).
TOP_LEVEL_HEADS: frozenset[str] = frozenset(TOP_FORMS)

#: Top-level forms a run file has at most one of.
SINGLE_FORMS: tuple[str, ...] = ("model", "defgenerate", "prepare", "objective", "run", "curriculum")

#: Names every file has (`model` once `(model NAME)` binds it, and the constants): no form may define them.
RESERVED_NAMES: tuple[str, ...] = ("model", "true", "false", "nil")

#: A checkpoint's config.json setting as a `def`'s value (check/config.py).
CONFIG_FORM = "checkpoint-config"

#: Each special form of expressions: its signature and a one-line doc.
SPECIAL_FORMS: dict[str, tuple[str, str]] = {
    "let*": ("(let* ((name value) ...) body ...)", "bind names in order, then evaluate the body"),
    "lambda": ("(lambda (param ...) body ...)", "a function; its parameters are typed at each call"),
    "list": ("(list :key value ...)", "a plist of values, a keyword before each"),
    "getf": ("(getf plist :key)", "the entry of a plist, the context, or a model's parameter"),
    "field": ("(field batch :name)", "a loader field or a generated name of the batch"),
    "counter": ("(counter :name value)", "add value to a run-long total that `objective` reads as `(getf ctx :name)`; only in `prepare`"),
    "metric": ("(metric :name value)", "report a value at every logged step; not inside a generator"),
    "diagnostic": ("(diagnostic :name value)", "report a value only when selected with `:diagnostics`"),
    CONFIG_FORM: ("(checkpoint-config \"dir\" :key)", "a setting of a checkpoint's config.json (`:layers`, `:width`, `:rope-base` ...); only as a `def`'s value"),
}

#: The keywords of `run`, in the order its signature shows them.
RUN_KEYS: tuple[str, ...] = ("loader", "steps", "microbatches", "stack", "precision", "seed", "optimizer", "log",
                             "checkpoint", "diagnostics", "devices", "model-parallel", "shard-params", "shard", "remat",
                             "samples")

#: Each of `run`'s keywords with the value its signature shows (signature help marks the one being written).
RUN_PLACEHOLDERS: dict[str, str] = {
    "loader": "l", "steps": "n", "microbatches": "m", "stack": "s", "precision": ":f32", "seed": "0",
    "optimizer": "(...)", "log": "(:every 50)", "checkpoint": "(:every n)", "diagnostics": "[..]", "devices": "n",
    "shard-params": ":fsdp", "model-parallel": "m", "shard": "(...)", "remat": ":policy", "samples": "(...)",
}
TOP_FORMS["run"] = ("(run " + " ".join(f":{k} {RUN_PLACEHOLDERS[k]}" for k in RUN_KEYS) + ")", TOP_FORMS["run"][1])

#: The keywords each keyword-taking form accepts (`stage` is the form inside `curriculum`).
FORM_KEYWORDS: dict[str, tuple[str, ...]] = {
    "loader": ("source", "batch", "fields", "like"),
    "defmodel": ("params", "apply", "frozen", "pretrained", "remat", "entries", "copy", "lora"),
    "repeat": ("remat",),
    "defgenerate": ("trips", "init", "step", "finish", "until", "reward"),
    "run": RUN_KEYS,
    "pass": ("loader", "every", "batches", "prepare"),
    "stage": ("loader", "records"),
}

#: A `:params` entry of repeated layers (docs/language.md "Repeated layers"): its signature and doc.
REPEAT_ENTRY: tuple[str, str] = ("(repeat model n :remat policy)",
                                 "n copies of `model` applied in sequence, the first argument carried from layer to "
                                 "layer; its parameters are stacked on a leading `[n ...]` axis")

#: The keywords of a parameter initialiser in `:params`.
INITIALIZER_KEYWORDS: dict[str, tuple[str, ...]] = {
    "normal": ("std", "mean", "dtype"), "uniform": ("min", "max", "dtype"),
    "zeros": ("dtype",), "ones": ("dtype",),
}

#: Data plists that are the value of a `run` setting: each key and the kind of its value,
#: `count` (an integer of 1 or more), `bool`, `string` or `names` (a vector of keywords).
PLIST_KEYWORDS: dict[str, dict[str, str]] = {
    "log": {"every": "count", "tensorboard": "bool", "show": "names"},
    "checkpoint": {"every": "count", "dir": "string", "keep": "count"},
    "samples": {"every": "count", "rows": "count", "text": "names", "values": "names", "prompt": "count",
                "tokenizer": "string"},
    "reward": {"python": "string", "function": "string", "text": "name", "prompt": "count", "fields": "names",
               "name": "name", "tokenizer": "string"},
}

#: One-line docs of `defgenerate`'s `:reward` settings (docs/language.md "Rewards in Python";
#: check/reward.py checks them). The function is called on the host by `sexpgpu run` only.
REWARD_DOCS: dict[str, str] = {
    "python": "the Python file (relative to the run file) that defines the reward function; "
              "`lint`, `explain` and the editor read it without importing it",
    "function": "the name of the function, called as `f(prompts=[...], completions=[...], **fields)` "
                "and returning one float per row",
    "text": "the integer `[B T]` batch tensor decoded to the prompts and completions",
    "prompt": "the first this many columns of each `:text` row are the prompt, the rest the completion; 0",
    "fields": "batch tensors the function also receives, as NumPy arrays `[B ...]` (`-` in a name is `_`)",
    "name": "the batch name the rewards join as, `[B] f32`, read in `prepare` with `field`; `:reward`",
    "tokenizer": "a tokenizer.json (relative to the run file) that decodes `:text`, instead of the loader's",
}

#: One-line docs of `:samples`' settings (docs/metrics.md "Samples"; check/samples.py checks them). A
#: name is the batch's (loader fields, generated names), an entry `prepare` returns, or a name the
#: top-level `let*` of `prepare` or `objective` binds.
SAMPLES_DOCS: dict[str, str] = {
    "every": "write the sampled rows every this many steps (and at step 1, the last step and every pass); 10",
    "rows": "how many rows of each named tensor, from the first; 4",
    "text": "integer token tensors (`[B T]` or `[B]`) shown as text: decoded with `:tokenizer`, "
            "the training loader's tokenizer, as bytes for `text-bytes`, else as token ids",
    "values": "tensors shown as numbers: `[B ...]` per row, a scalar `[]` beside every row",
    "prompt": "the first this many columns of each `:text` row are the prompt, the rest the completion",
    "tokenizer": "a tokenizer.json (relative to the run file) that decodes `:text`, instead of the loader's",
}

#: Rematerialisation policies (`:remat`), named for what the backward pass keeps of a layer's
#: forward values: `jax.checkpoint_policies.everything_saveable` (no remat), `nothing_saveable`
#: (keep only the layer's inputs, recompute the rest) and `dots_saveable` (keep matmul outputs).
REMAT_POLICIES: tuple[str, ...] = ("everything-saveable", "nothing-saveable", "dots-saveable")

#: Keywords whose value is itself a keyword from a fixed set (the first is the default).
KEYWORD_VALUES: dict[str, tuple[str, ...]] = {
    "precision": ("f32", "bf16"), "stack": ("auto",), "dtype": DTYPES, "shard-params": ("replicated", "fsdp"),
    "remat": REMAT_POLICIES,
}

#: One-line docs of the keywords of `defgenerate` (docs/dev/design.md#generation) and the other forms.
KEYWORD_DOCS: dict[tuple[str, str], str] = {
    ("defgenerate", "trips"): "how many times `:step` runs, 1 or more",
    ("defgenerate", "init"): "the batch and the context to the state: a plist of tensors",
    ("defgenerate", "step"): "the state, the trip (`[] i64`) and the context to the next state, "
                             "with the keys, shapes and dtypes `:init` made",
    ("defgenerate", "finish"): "optional: the last state and the context, once, to any plist of tensors",
    ("defgenerate", "reward"): "optional: a Python function of the decoded rows, called by `sexpgpu run` after "
                               "`:finish`; its `[B] f32` result joins the batch: `(:python \"reward.py\" "
                               ":function \"score\" :text :answer :prompt 4)`",
    ("defgenerate", "until"): "optional: the state after a trip and the context to a bool scalar; once it holds, "
                              "the trips may end early (`:trips` stays the upper bound)",
    ("loader", "source"): "where records come from: `(stride-rows ...)`, `(npz ...)`, `(text-bytes ...)`, "
                          "`(tokens ...)`, `(text-tokens ...)`, `(jsonl ...)`, `(parquet ...)`",
    ("loader", "batch"): "records per batch",
    ("loader", "fields"): "each field's per-record shape and dtype: `(:name [shape] :dtype ...)`",
    ("loader", "like"): "another loader, written before: its `:batch` and `:fields` for the ones this loader leaves "
                        "out (a held-out split: `(loader held-out :like train :source (npz \"held-out.npz\"))`)",
    ("defmodel", "params"): "the parameters: initialisers or sub-models",
    ("defmodel", "apply"): "`(lambda (self x ...) ...)`: how the model applies",
    ("defmodel", "entries"): "more functions over the same parameters: `(:decode (lambda (self tok cache pos) ...))`, "
                             "called `(name :decode tok cache pos)`",
    ("defmodel", "frozen"): "`true`: the parameters are never updated",
    ("defmodel", "copy"): "`student`: a frozen copy of that model's starting parameters (drawn or loaded), its "
                          "`:apply` and entries: a reference model; no `:params` or `:apply` of its own",
    ("defmodel", "pretrained"): "where the parameters are loaded from: a safetensors file, a Hugging Face directory or "
                                "its index; or `(:path \"dir\" :names :gpt2 :file-dtype :bf16)`",
    ("defmodel", "lora"): "LoRA adapters on named projections, the base frozen: `(:targets [:wq :wv] :rank 8 "
                          ":alpha 16 :dropout 0.0 :rslora false)`",
    ("defmodel", "remat"): "recompute this model's activations in the backward pass: `:nothing-saveable`, "
                           "`:dots-saveable` or `:everything-saveable` (no remat)",
    ("repeat", "remat"): "the remat policy of each repeated layer (overrides the block's and the run's)",
    ("run", "samples"): "generated rows worth reading, as text: `(:every 10 :rows 4 :text [:answer] "
                        ":values [:reward] :prompt 2)` (names of the batch, of what `prepare` returns or of "
                        "the top-level `let*` of `prepare` or `objective`), to samples.jsonl, the terminal "
                        "and TensorBoard",
    ("run", "remat"): "the default remat policy of every repeated layer: `:nothing-saveable`, `:dots-saveable`, "
                      "`:everything-saveable` (the default: no remat)",
    ("run", "log"): "what each logged step writes: `(:every 50 :tensorboard true :show [:loss :reward])`: a row "
                    "of metrics.jsonl every `:every` steps (and the last), TensorBoard scalars, the metrics the "
                    "progress bar shows",
    ("run", "checkpoint"): "orbax checkpoints: `(:every 100 :dir \"runs/x\" :keep 3)`, resumed with `--resume`",
    ("run", "diagnostics"): "the `diagnostic` names to compute and log, like `[:grad-norm]`",
    ("run", "loader"): "the training loader",
    ("run", "steps"): "optimizer steps",
    ("run", "microbatches"): "microbatches per step; their gradients are summed into one buffer as they are made",
    ("run", "stack"): "microbatches run as copies in one call (`:auto`: all of them)",
    ("run", "precision"): "`:f32` or `:bf16`",
    ("run", "seed"): "the seed every draw derives from",
    ("run", "optimizer"): "`(adam :lr ...)`, `(adamw ...)`, `(sgd ...)`, `(lion ...)`; `:lr` a number or a "
                          "schedule like `(warmup-cosine-decay ...)`",
    ("run", "devices"): "data parallel over this many devices; divides every loader's `:batch`",
    ("run", "model-parallel"): "tensor parallel over this many devices (the mesh's `model` axis): attention split "
                               "by heads, the MLP by its hidden width, embeddings and output by vocabulary",
    ("run", "shard"): "overrides of the `model` axis' split, per parameter name: `(:wq 2 :w-up :replicated)`",
    ("run", "shard-params"): "`:replicated` (every device holds every parameter) or `:fsdp` (each split over the mesh)",
    ("pass", "loader"): "the loader the pass reads",
    ("pass", "every"): "run the pass every this many steps",
}

#: The context keys every phase sees, with their dtypes, in the order of the runtime's context
#: rows (one `[S 6]` i64 row per copy; docs/language.md "Context", docs/runtime.md).
CONTEXT_KEYS: tuple[tuple[str, str], ...] = (
    ("step", "i64"), ("microbatch", "i32"), ("records", "i64"), ("stage", "i32"), ("stage-records", "i64"),
    ("pass", "i32"),
)

#: One-line docs of the context keys (docs/language.md "Context").
CONTEXT_DOCS: dict[str, str] = {
    "step": "the optimizer step, from 0",
    "microbatch": "the microbatch within the step",
    "records": "training records consumed before this microbatch",
    "stage": "the curriculum stage",
    "stage-records": "records consumed within the stage",
    "pass": "0 in training; in an evaluation pass, the pass's number, from 1 in the file's order",
}

#: Context keys that move between the microbatches of one stacked call (W-STACK-001).
PER_MICROBATCH_KEYS: tuple[str, ...] = ("microbatch", "records", "stage-records")
#: ... and, in a run with a curriculum, `:stage` too: a stage can end inside a group of microbatches.
PER_MICROBATCH_KEYS_CURRICULUM: tuple[str, ...] = PER_MICROBATCH_KEYS + ("stage",)

#: Each loader source and its keyword arguments; the first may also be written without its keyword.
SOURCES: dict[str, tuple[str, ...]] = {
    "stride-rows": ("vocab", "seq", "records"),
    "npz": ("path",),
    "text-bytes": ("glob", "seq", "stride"),
    "tokens": ("path", "dtype", "seq", "stride", "vocab"),
    "text-tokens": ("glob", "tokenizer", "seq", "stride", "separator", "vocab"),
    "jsonl": ("path", "tokenizer", "pad", "pad-side", "truncate", "vocab"),
    "parquet": ("path", "tokenizer", "pad", "pad-side", "truncate", "vocab"),
}

#: The values of a prompt source's `:pad-side` (the default first) and `:truncate` (sexpgpu_lang/prompt_rows.Layout).
PAD_SIDES: tuple[str, ...] = ("right", "left")
TRUNCATE_SIDES: tuple[str, ...] = ("left", "right")

#: The integer dtypes a token file may hold on disk (numpy's names; sexpgpu_runtime/data/token_files.py).
TOKEN_FILE_DTYPES: tuple[str, ...] = ("uint8", "uint16", "uint32", "int32", "int64")

#: Each optimizer and its settings (docs/runtime.md).
OPTIMIZERS: dict[str, tuple[str, ...]] = {
    "adam": ("lr", "b1", "b2", "eps", "clip"),
    "adamw": ("lr", "b1", "b2", "eps", "weight-decay", "decay-mask", "clip"),
    "sgd": ("lr", "momentum", "clip"),
    "lion": ("lr", "b1", "b2", "weight-decay", "decay-mask", "clip"),
}

#: One-line docs of the optimizers' settings (hover and completion inside `(adam ...)`).
OPTIMIZER_DOCS: dict[str, str] = {
    "lr": "the learning rate: a number, or a schedule such as `(warmup-cosine-decay :peak-value 3e-4 "
          ":warmup-steps 100 :decay-steps 1000)`",
    "b1": "the decay of the first moment (adam, adamw: 0.9; lion: 0.9)",
    "b2": "the decay of the second moment (adam, adamw: 0.999; lion: 0.99)",
    "eps": "added to the denominator (1e-8)",
    "weight-decay": "decoupled weight decay, applied where `:decay-mask` says (adamw 1e-4, lion 1e-3)",
    "decay-mask": "which parameters decay: `:matrices` (the default: rank 2 or more, not an embedding table), "
                  "`:all`, or a vector of parameter keys like `[:w1 :w2]`",
    "momentum": "sgd's momentum (none when absent)",
    "clip": "clip the gradient's global norm to this before the update",
}

#: Learning-rate schedules, each the optax schedule of the same name (`warmup-cosine-decay` is
#: `optax.warmup_cosine_decay_schedule`), with its settings named as optax's arguments, each
#: `(kind, default)`: kind `rate` (a number of 0 or more), `positive` (more than 0), `fraction`
#: (0 to 1), `steps` (an integer of 1 or more) or `begin` (an integer of 0 or more); default None:
#: the setting is required.
SCHEDULES: dict[str, dict[str, tuple[str, float | int | None]]] = {
    "constant": {"value": ("positive", None)},
    "linear": {"init-value": ("rate", None), "end-value": ("rate", None), "transition-steps": ("steps", None),
               "transition-begin": ("begin", 0)},
    "cosine-decay": {"init-value": ("rate", None), "decay-steps": ("steps", None), "alpha": ("fraction", 0.0),
                     "exponent": ("positive", 1.0)},
    "warmup-cosine-decay": {"init-value": ("rate", 0.0), "peak-value": ("positive", None),
                            "warmup-steps": ("begin", None), "decay-steps": ("steps", None),
                            "end-value": ("rate", 0.0), "exponent": ("positive", 1.0)},
    "warmup-constant": {"init-value": ("rate", 0.0), "peak-value": ("positive", None), "warmup-steps": ("steps", None)},
}

#: One-line docs of the schedules (hover on the schedule's name).
SCHEDULE_DOCS: dict[str, str] = {
    "constant": "`:value` at every step",
    "linear": "from `:init-value` to `:end-value` over `:transition-steps` steps after `:transition-begin`",
    "cosine-decay": "from `:init-value` down a half cosine to `:alpha` times it over `:decay-steps` steps",
    "warmup-cosine-decay": "linear from `:init-value` to `:peak-value` over `:warmup-steps`, then a half cosine "
                           "to `:end-value` at `:decay-steps` (counted from step 0, the warmup included)",
    "warmup-constant": "linear from `:init-value` to `:peak-value` over `:warmup-steps`, then `:peak-value`",
}

#: One-line docs of the schedules' settings (optax's arguments of the same names).
SCHEDULE_SETTING_DOCS: dict[str, str] = {
    "value": "the learning rate",
    "init-value": "the learning rate at step 0",
    "end-value": "the learning rate at the schedule's end, and after it",
    "peak-value": "the learning rate the warmup reaches",
    "warmup-steps": "steps of the linear warmup",
    "decay-steps": "the step the decay ends at",
    "transition-steps": "steps from `:init-value` to `:end-value`",
    "transition-begin": "steps at `:init-value` before the transition starts (0)",
    "alpha": "the end value as a fraction of `:init-value` (0)",
    "exponent": "the power the cosine is raised to (1)",
}

#: The values of `:decay-mask` written as a keyword (the first is the default); a vector of
#: parameter keys is the third way to write it.
DECAY_MASKS: tuple[str, ...] = ("matrices", "all")

#: One-line docs of `:log`'s settings (docs/metrics.md).
LOG_DOCS: dict[str, str] = {
    "every": "write a metrics.jsonl row every this many steps (and at the last); 50",
    "tensorboard": "`true`: the rows also go to TensorBoard event files in the run dir",
    "show": "the metrics the progress bar shows, like `[:loss :reward]` (`:loss`, `:lr` or a `metric` "
            "`objective` reports); `[:loss]`",
}

# Hover and completion read every keyword's doc from KEYWORD_DOCS, keyed by the form it is written in.
KEYWORD_DOCS.update({("log", k): doc for k, doc in LOG_DOCS.items()})
KEYWORD_DOCS.update({("samples", k): doc for k, doc in SAMPLES_DOCS.items()})
KEYWORD_DOCS.update({("reward", k): doc for k, doc in REWARD_DOCS.items()})
KEYWORD_DOCS.update({(o, k): OPTIMIZER_DOCS[k] for o, keys in OPTIMIZERS.items() for k in keys})
KEYWORD_DOCS.update({(sch, k): SCHEDULE_SETTING_DOCS[k] for sch, keys in SCHEDULES.items() for k in keys})
#: The optimizer of a `run` without `:optimizer`.
DEFAULT_OPTIMIZER: tuple[str, dict[str, float]] = ("adam", {"lr": 1e-3})

#: Top-level forms every run file needs, each with how to add it (E-FORM-001).
REQUIRED_FORMS: dict[str, str] = {
    "loader": "add a `(loader ...)` form",
    "model": "add `(model NAME)` naming the model objective trains",
    "objective": "add `(objective (lambda (inputs ctx) loss))`",
    "run": "add `(run :loader train :steps 100 :optimizer (adam :lr 1e-3))`",
}
