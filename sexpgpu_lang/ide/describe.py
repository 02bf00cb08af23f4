"""How the editor queries show names and types: a type's short form, a code block, and the hover
text of a name with its definition.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

from ..check import BatchType, CtxType, Definition
from ..language import TOP_FORMS
from ..types import PlistType, Type
from .index import Index


def show_type(t: Type | None) -> str:
    """A type's short form; a plist one key a line."""
    if t is None:
        return "?"
    if isinstance(t, PlistType) and len(t.entries) > 1:
        prefix = "ctx " if isinstance(t, CtxType) else "batch " if isinstance(t, BatchType) else ""
        lines = [f":{k} {v.show()}" for k, v in t.entries]
        return prefix + "(" + "\n ".join(lines) + ")"
    return t.show()


def code_block(text: str) -> str:
    """`text` as a fenced `sexpgpu` code block of hover markdown."""
    return f"```sexpgpu\n{text}\n```"


def model_params(ix: Index, model: str) -> list[str]:
    """`:name type` of each parameter of `defmodel` `model`, in the order they are written."""
    form = next((d.form_span for d in ix.defs.values() if d.kind == "model" and d.name == model), None)
    if form is None:
        return []
    out = []
    for d in sorted(ix.defs.values(), key=lambda d: d.span.start):
        if d.kind == "param" and form.contains(d.span):
            out.append(f":{d.name} " + d.detail.split(f":{d.name} ", 1)[-1])
    return out


def describe(ix: Index, d: Definition, t: Type | None) -> str:
    """Hover text for a name with its definition."""
    if d.kind == "model":
        if d.name in ix.facts.one_forms:
            return one_form_text(ix.facts.one_forms[d.name])
        params = model_params(ix, d.name)
        return code_block(f"(defmodel {d.name}" + "".join(f"\n  {p}" for p in params) + ")") + "\n\nmodel"
    if d.kind == "model-binding":
        return code_block(d.detail) + "\n\n" + TOP_FORMS["model"][1]
    if d.kind in ("param", "state-key", "generated", "reward", "field", "loader"):
        return code_block(d.detail)
    if d.kind == "function":
        return code_block(f"{d.name}: {d.detail}") + "\n\nfunction"
    shown = show_type(t) if t is not None else d.detail.split("\n")[0]
    what = {"def": "constant", "binding": "binding"}.get(d.kind, d.kind)
    if d.kind == "def" and "\n" in d.detail:   # bound by `checkpoint-config`: where the value came from
        what += ", " + d.detail.split("\n", 1)[1]
    return code_block(f"{d.name}: {shown}") + f"\n\n{what}"


def one_form_text(o) -> str:
    """Hover text for a model made from its checkpoint in one form (check/one_form.OneForm): its
    family, each size and setting with the config.json key it came from, its entries, and the
    written-out model it is."""
    shown = lambda v: ("true" if v else "false") if isinstance(v, bool) else v  # noqa: E731 (SexpGPU's spelling)
    rows = "\n".join(f"| `:{k}` | {shown(v)} | `{key}` |" for k, v, key, _ in o.settings)
    return (f"model `{o.model}`: a {o.family.title} causal LM (`model_type` `{o.model_type}`) made from "
            f"`{o.config}`, read through the mapping `{o.mapping}`\n\n| setting | value | from |\n|---|---|---|\n"
            f"{rows}\n\n`({o.model} ids)`: ids [B T] -> logits [B T V]; `({o.model} :decode ids pos k v)`: the "
            f"new tokens at `pos` with the caches k, v [layers B S kv-heads head-width] -> `(:logits :k :v)`\n\n"
            "the written-out model it is:\n\n" + code_block(o.text.rstrip()))
