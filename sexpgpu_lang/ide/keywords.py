"""The keyword tables of the editor queries: which keywords each form, initialiser and settings plist
takes, the fixed values some keywords take, and the keywords' one-line docs (hover, completion,
signature help).

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

from ..check import RUN_KEYS
from ..types import DTYPES

#: The keywords each keyword-taking form accepts. FIXME: check.py spells the
#: lists of `loader`, `defmodel`, `defgenerate`, `pass` and `stage` inline in
#: its methods; they are repeated here until it exports them.
FORM_KEYWORDS: dict[str, tuple[str, ...]] = {
    "loader": ("source", "batch", "fields"),
    "defmodel": ("params", "apply", "frozen", "pretrained"),
    "defgenerate": ("trips", "init", "step", "finish"),
    "run": RUN_KEYS,
    "pass": ("loader", "every", "batches", "prepare"),
    "stage": ("loader", "records"),
}
#: The keywords of a parameter initialiser in `:params` (check.py `model_param`).
INITIALIZER_KEYWORDS = {"normal": ("std", "mean", "dtype"), "uniform": ("min", "max", "dtype"),
                        "zeros": ("dtype",), "ones": ("dtype",)}
#: Data plists that are the value of a settings keyword (check.py `top_run`).
PLIST_KEYWORDS = {"log": ("every", "tensorboard"), "checkpoint": ("every", "dir", "keep")}
#: Keywords whose value is itself a keyword from a fixed set.
KEYWORD_VALUES = {"precision": ("f32", "bf16"), "stack": ("auto",), "dtype": DTYPES, "shard-params": ("replicated", "fsdp")}

#: One-line docs of the keywords of `defgenerate` (spec/generation.md) and the other forms.
KEYWORD_DOCS: dict[tuple[str, str], str] = {
    ("defgenerate", "trips"): "how many times `:step` runs, 1 or more",
    ("defgenerate", "init"): "the batch and the context to the state: a plist of tensors",
    ("defgenerate", "step"): "the state, the trip (`[] i64`) and the context to the next state, "
                             "with the keys, shapes and dtypes `:init` made",
    ("defgenerate", "finish"): "optional: the last state and the context, once, to any plist of tensors",
    ("loader", "source"): "where records come from: `(stride-rows ...)`, `(npz ...)`, `(text-bytes ...)`",
    ("loader", "batch"): "records per batch",
    ("loader", "fields"): "each field's per-record shape and dtype: `(:name [shape] :dtype ...)`",
    ("defmodel", "params"): "the parameters: initialisers or sub-models",
    ("defmodel", "apply"): "`(lambda (self x ...) ...)`: how the model applies",
    ("defmodel", "frozen"): "`true`: the parameters are never updated",
    ("defmodel", "pretrained"): "a file the parameters are loaded from",
    ("run", "loader"): "the training loader",
    ("run", "steps"): "optimizer steps",
    ("run", "microbatches"): "microbatches per step; gradients accumulate over them",
    ("run", "stack"): "microbatches vmapped into one call (`:auto`: all of them)",
    ("run", "precision"): "`:f32` or `:bf16`",
    ("run", "seed"): "the seed every draw derives from",
    ("run", "optimizer"): "`(adam :lr ...)`, `(adamw ...)`, `(sgd ...)`, `(lion ...)`",
    ("run", "devices"): "data parallel over this many devices; divides every loader's `:batch`",
    ("run", "shard-params"): "`:replicated` (every device holds every parameter) or `:fsdp` (each split over the mesh)",
    ("pass", "loader"): "the loader the pass reads",
    ("pass", "every"): "run the pass every this many steps",
}
