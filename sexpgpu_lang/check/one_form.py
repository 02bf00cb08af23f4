"""The model from a checkpoint in one form: `(defmodel NAME :pretrained "dir")`, expanded into the
written-out model its family's record describes (docs/checkpoints.md "The model from a checkpoint").

A `defmodel` with `:pretrained` and neither `:params`, `:apply` nor `:entries` is the one form: its
`:pretrained` is the checkpoint's path (a string, a `def` of one, or `(:path P :file-dtype D)`);
`:frozen` and `:remat` may follow. `expand_one_forms` reads the checkpoint's `config.json`
(hf_config.py), takes its family's record (`hf_config.Family`) and writes the model out as text:

- `NAME.layer`, the repeated block: the record's parameters, its `:apply` the record's cached block
  over the carry `(:h [B T D] :k [L B S K H] :v [L B S K H])` at `pos`;
- `NAME`: the embedding, `(repeat NAME.layer L)`, the final norm and the output (tied or not, as
  `tie_word_embeddings` says); `:apply (lambda (self ids) ...)` ids [B T] -> logits [B T V] (at
  position 0, with caches of length T); `:entries (:decode (lambda (self ids pos k v) ...))` the new
  tokens ids [B T] at `pos` (an integer scalar, or [B] one per row: docs/stdlib.md "Per-row positions
  and padding") with the caches k and v [L B S K H] ->
  `(:logits [B T V] :k :v)`; `:pretrained (:path P :names :MAPPING)` with the family's mapping;

every size and setting a number from the config. That text is parsed and checked as the user's
own `defmodel`s would be (its nodes carry the range of the `:pretrained` value: a mistake in it
is reported there), so the one form is the written-out model and nothing else; `OneForm` keeps
the text and where each setting came from for hover. E-CONFIG-001: no config to read;
E-CONFIG-002: a family or setting the standard library does not compute. Never JAX.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..records import Record
from ..source import SourceText, Span
from ..syntax import Kw, ListNode, Node, Sym, parse
from ..types import ERROR
from .context import CheckContext, near_miss
from .keywords import const_value

if TYPE_CHECKING:
    from ..files.hf_config import Family

#: The keywords the one form takes besides `:pretrained`.
ONE_FORM_KEYS = ("pretrained", "frozen", "remat", "lora")
#: The keywords that make a `defmodel` a written-out model.
WRITTEN_OUT = ("params", "apply", "entries")


@dataclasses.dataclass(eq=False, repr=False)
class OneForm(Record):
    """A one-form model as the check expanded it: its family, the checkpoint (as written, and its
    config.json as shown), each setting (name, value, config key, the config's text), the
    mapping, and the written-out text it stands for."""

    model: str
    family: Family
    model_type: str
    rel: str
    config: str
    settings: tuple[tuple[str, object, str, str], ...]
    mapping: str
    text: str
    span: Span   # the `:pretrained` value's range: every node of the expansion has it
    value_type: object = None   # the type the check gave the `:pretrained` value itself (hover on it)


def is_one_form(f: ListNode) -> bool:
    """True for `(defmodel NAME :pretrained P ...)` with no `:params`, `:apply` or `:entries`."""
    kws = {it.name for it in f.items[2::2] if isinstance(it, Kw)} if f.head == "defmodel" else set()
    return "pretrained" in kws and not kws & set(WRITTEN_OUT)


def _one_form_with_params(f: ListNode) -> Kw | None:
    """The `:params` keyword of `(defmodel NAME :pretrained "dir" ... :params (...))` with neither `:apply`
    nor `:entries`, whose `:pretrained` gives no mapping (`:names`): the one form given parts, not a
    written-out model missing its `:apply`. None for anything else."""
    if f.head != "defmodel":
        return None
    kws = {it.name: (it, v) for it, v in zip(f.items[2::2], f.items[3::2]) if isinstance(it, Kw)}
    if "pretrained" not in kws or "params" not in kws or "apply" in kws or "entries" in kws or "copy" in kws:
        return None
    value = kws["pretrained"][1]
    if isinstance(value, ListNode) and any(isinstance(k, Kw) and k.name == "names" for k in value.items[::2]):
        return None
    return kws["params"][0]


def _num(v) -> str:
    """A setting as a SexpGPU literal (a float keeps its point or exponent)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(float(v)) if isinstance(v, float) else str(v)


def written_out(name: str, fam: Family, values: dict[str, object], rel: str, mapping: str, tied: bool,
                file_dtype: str | None = None) -> str:
    """The written-out model of family `fam` with the settings `values` (`KEYS` names -> numbers):
    the block model `NAME.layer` and the model `NAME` (module docstring), reading the checkpoint
    `rel` through `mapping` (its tensors' dtype `file_dtype` where given)."""
    layer = f"{name}.layer"
    fields = {k: _num(v) for k, v in values.items()}
    fields["layer"] = layer
    fields["head"] = fam.tied_out if tied else "(getf self :lm-head)"
    fill = lambda t: t.format(**fields)  # noqa: E731
    kv = fields["kv-heads"] if "kv-heads" in fields else fields["heads"]
    params = fill(fam.model_params) + ("" if tied or not fam.untied_out else "\n           " + fill(fam.untied_out))
    out = fill(fam.out.replace("{head}", fields["head"]))
    embed = fill(fam.embed)
    args = " ".join(fill(fam.block_args).split())   # (one line: the layout breaks it where `sexpgpu fmt` does)
    path = '"' + rel.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"""(defmodel {layer}
  :params ({fill(fam.layer_params)})
  :apply (lambda (self c pos)
           (let* ((ks (getf c :k))
                  (vs (getf c :v))
                  (n (axis-size ks 0))
                  (out ({fam.block} (getf c :h) pos (take ks 0 :axis 0) (take vs 0 :axis 0) {args})))
             (list :h (getf out :h)
                   :k (concat [(slice ks :axis 0 :start 1 :end n) (expand-dims (getf out :k) :axis 0)] :axis 0)
                   :v (concat [(slice vs :axis 0 :start 1 :end n) (expand-dims (getf out :v) :axis 0)] :axis 0)))))

(defmodel {name}
  :params ({params})
  :apply (lambda (self ids)
           (let* ((pos 0)
                  (empty (zeros [{fields['layers']} (axis-size ids 0) (axis-size ids 1) {kv} {fields['head-width']}]))
                  (c ({layer} (list :h {embed} :k empty :v empty) pos)))
             {out}))
  :entries (:decode (lambda (self ids pos k v)
                      (let* ((c ({layer} (list :h {embed} :k k :v v) pos)))
                        (list :logits {out} :k (getf c :k) :v (getf c :v)))))
  :pretrained (:path {path} :names :{mapping}{f" :file-dtype :{file_dtype}" if file_dtype else ""}))
"""


def _moved(node: Node, span: Span) -> Node:
    """`node` and its children with the range `span` (the one form's `:pretrained` value)."""
    items = getattr(node, "items", None)
    if items is None:
        return dataclasses.replace(node, span=span)
    return dataclasses.replace(node, span=span, items=tuple(_moved(i, span) for i in items))


def _path(ctx: CheckContext, node: Node) -> tuple[str | None, Node, Kw | None]:
    """The checkpoint's path from the one form's `:pretrained` value (a string, a `def` of one, or
    `(:path P :file-dtype D)`), the node to blame, and `:file-dtype`'s keyword; None after reporting."""
    dtype = None
    if isinstance(node, ListNode) and node.items and isinstance(node.items[0], Kw):
        pairs = dict((k.name, (k, v)) for k, v in zip(node.items[::2], node.items[1::2]) if isinstance(k, Kw))
        bad = [k for k in pairs if k not in ("path", "file-dtype")]
        if bad or "path" not in pairs or len(node.items) % 2:
            ctx.err("E-FORM-002", node.span, "the one form's `:pretrained` takes the checkpoint's path, or "
                    "`(:path \"dir\" :file-dtype :bf16)`",
                    help="`:names` is the family's own mapping; to give another, write the model out "
                         "(docs/checkpoints.md)")
            return None, node, None
        dtype = pairs.get("file-dtype", (None, None))[1]
        node = pairs["path"][1]
    rel = const_value(ctx, node)
    if not isinstance(rel, str):
        if rel is not None:
            ctx.err("E-FORM-002", node.span, "`:pretrained` takes the checkpoint's path, a string: "
                    "`(defmodel teacher :pretrained \"checkpoints/llama\")`")
        return None, node, None
    return rel, node, dtype


def expand(ctx: CheckContext, f: ListNode) -> list[ListNode] | None:
    """The written-out forms of the one form `f` (the block's `defmodel`, then the model's, whose
    name and `:frozen`/`:remat` are `f`'s own nodes), or None after reporting why not."""
    name = f.items[1] if len(f.items) > 1 else None
    if not isinstance(name, Sym):
        ctx.err("E-FORM-002", f.span, "`defmodel` needs a name: `(defmodel teacher :pretrained \"dir\")`")
        return None
    pairs = list(zip(f.items[2::2], f.items[3::2]))
    for kw, _ in pairs:
        if not isinstance(kw, Kw) or kw.name not in ONE_FORM_KEYS:
            hint = near_miss(kw.name, ONE_FORM_KEYS) if isinstance(kw, Kw) else None
            ctx.err("E-FORM-002", kw.span, "a model made from its checkpoint takes `:pretrained`, `:frozen`, "
                    "`:remat` and `:lora`" + (f"; did you mean `:{hint}`?" if hint else ""),
                    help="write the model out to change its parts (docs/checkpoints.md)",
                    data={"replace": f":{hint}"} if hint else None)
            return None
    if len(f.items) % 2:
        ctx.err("E-FORM-002", f.items[-1].span, f"`:{getattr(f.items[-1], 'name', '')}` has no value")
        return None
    kws = {kw.name: (kw, v) for kw, v in pairs}
    value = kws["pretrained"][1]
    rel, where, dtype = _path(ctx, value)
    if rel is None:
        return None
    from ..files.hf_config import Setting   # (with check/config.py: imported only for a one form)
    from .config import model_config
    made = model_config(ctx, name.name, rel, where)
    if made is None:
        return None
    shown, config, fam, got, mapping = made
    tied = bool(got["tied"].value)
    values = {k: s.value for k, s in got.items() if isinstance(s, Setting) and k != "tied"}
    text = written_out(name.name, fam, values, rel, mapping, tied, dtype.name if isinstance(dtype, Kw) else None)
    parsed = parse(SourceText(text, f"<{name.name} from {rel}>"))
    assert not parsed.diagnostics, parsed.diagnostics
    span = value.span
    block, model = (_moved(form, span) for form in parsed.forms)
    # the model's own name, head and `:frozen`/`:remat` are the user's nodes
    own = tuple(x for kw, v in pairs if kw.name != "pretrained" for x in (kw, v))
    model = dataclasses.replace(model, span=f.span, items=(f.items[0], name) + model.items[2:] + own)
    block = dataclasses.replace(block, span=f.span)
    from ..format import format_text   # (shown as `sexpgpu fmt` lays it out)
    shown_text = text if not own else _with_own(ctx, text, own)
    ctx.facts.one_forms[name.name] = OneForm(
        name.name, fam, str(config.get("model_type")), rel, shown,
        tuple((k, s.value, s.key, s.text) for k, s in got.items() if isinstance(s, Setting)), mapping,
        format_text(shown_text) or shown_text, span, ctx.facts.types.get((span.start, span.end)))
    ctx.expanded.update((id(block), id(model)))
    return [block, model]


def _with_own(ctx: CheckContext, text: str, own: tuple[Node, ...]) -> str:
    """The expansion's text with the user's `:frozen`/`:remat` as written, for hover."""
    written = " ".join(ctx.src.text[n.span.start:n.span.end] for n in own)
    return text.rstrip()[:-1] + f"\n  {written})\n"


def expand_one_forms(ctx: CheckContext) -> None:
    """Replace each one-form `defmodel` among the file's forms by its written-out forms; one that
    cannot be expanded (reported) still binds its name, typed ERROR, so its uses are not reported
    again."""
    from .forms import define_global
    out = []
    for f in ctx.forms.get("defmodel", []):
        params = _one_form_with_params(f)
        if params is not None:
            ctx.err("E-FORM-002", params.span, "a model made from its checkpoint in one form (`:pretrained` and no "
                    "`:apply`) takes no `:params`: its parameters are the checkpoint's",
                    help="drop `:params`, or write the model out: `:params`, `:apply` and `:pretrained (:path \"dir\" "
                         ":names :llama)` (docs/checkpoints.md)")
            if len(f.items) > 1 and isinstance(f.items[1], Sym):
                define_global(ctx, f.items[1], "model", f, ERROR)
            continue
        if not is_one_form(f):
            out.append(f)
            continue
        forms = expand(ctx, f)
        if forms is None:
            if len(f.items) > 1 and isinstance(f.items[1], Sym):
                define_global(ctx, f.items[1], "model", f, ERROR)
            continue
        out.extend(forms)
    if "defmodel" in ctx.forms:
        ctx.forms["defmodel"] = out


def strip_facts(ctx: CheckContext) -> None:
    """Drop the editor facts the expansions' nodes left at their `:pretrained` values' ranges (the
    one form's hover says what they are: `OneForm`), keeping the model's own."""
    spans = {o.span for o in ctx.facts.one_forms.values()}
    if not spans:
        return
    keys = {(s.start, s.end) for s in spans}
    facts = ctx.facts
    keep = [d for d in facts.definitions if d.span not in spans]
    gone = {id(d) for d in facts.definitions if d.span in spans}
    facts.definitions[:] = keep
    facts.uses[:] = [(s, d) for s, d in facts.uses if id(d) not in gone]
    for k in keys:
        facts.types.pop(k, None)
        facts.calls.pop(k, None)
    for o in facts.one_forms.values():
        if o.value_type is not None:
            facts.types[(o.span.start, o.span.end)] = o.value_type
