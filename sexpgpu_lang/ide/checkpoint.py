"""What hover says about a `:pretrained` checkpoint, from what the check recorded
(`Facts.checkpoints`: the mapping's reads and, once read, the headers):

* on a parameter of a model loaded from a checkpoint (or of a block below
  one), the tensor it is read from, its file shape and dtype, and the cast
  on load: `model.embed_tokens.weight [16 64] bf16 → f32`;
* on the checkpoint's path string, the files it resolved to;
* on a mapping's key, the tensor it reads; on a mapping's source string,
  the parameters it fills.

Reads no file itself. Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

import os

from ..check.facts import Checkpoint, Definition
from ..syntax import Kw, ListNode, Node, Str
from .index import Index


def _shape(dims) -> str:
    return "[" + " ".join(str(d) for d in dims) + "]"


def _tensor_line(c: Checkpoint, tensor: str, expected: tuple[int, ...], dtype: str) -> str:
    """`name [file shape] file-dtype → dtype`: the tensor as the file has it and the cast on
    load (the arrow only where the dtypes differ); a shape other than the mapping's noted."""
    got = c.header.get(tensor) if c.header is not None else None
    if got is None:
        return f"`{tensor}` {_shape(expected)}" + ("" if c.header is None else " (not in the checkpoint)")
    line = f"`{tensor}` {_shape(got[0])} {got[1]}" + (f" → {dtype}" if got[1] != dtype else "")
    return line + (f" (the mapping needs {_shape(expected)})" if tuple(got[0]) != tuple(expected) else "")


def _reads_of(c: Checkpoint, rel: str) -> str | None:
    """The tensor lines of parameter `rel` of `c` (a stacked one: its first layer's and how many)."""
    found = c.reads.get(rel)
    if found is None:
        return None
    dtype, reads = found
    if not reads:
        return None
    tensor, shape = reads[0]
    line = _tensor_line(c, tensor, shape, dtype)
    if len(reads) > 1:
        line += f", and {len(reads) - 1} more, one a layer"
    return line


def _where(c: Checkpoint) -> str:
    return f"checkpoint `{c.rel}`" + ("" if c.header is not None else " (its headers not read: not on this machine)")


def param_lines(ix: Index, d: Definition) -> str | None:
    """For a parameter's definition (`:embed` in `:params`): each checkpoint tensor it is
    read from, or None when no `:pretrained` model loads it."""
    model = d.detail.split()[0] if d.detail else ""
    out = []
    for c in ix.facts.checkpoints.values():
        for rel, owner in c.owners.items():
            if owner == model and rel.rsplit(".", 1)[-1] == d.name:
                line = _reads_of(c, rel)
                if line is not None:
                    out.append(f"from {_where(c)}: {line}" + (f" (as `{c.model}`'s `{rel}`)" if rel != d.name else ""))
    if not out:   # a repeated block or a sub-model (`:layers (repeat layer 2)`): the tensors of each parameter below it
        for c in ix.facts.checkpoints.values():
            if c.model != model:
                continue
            below = [(rel, _reads_of(c, rel)) for rel in c.reads if rel.startswith(d.name + ".")]
            lines = [f"- `{rel}`: {line}" for rel, line in below if line is not None]
            if lines:
                out.append(f"from {_where(c)}:\n" + "\n".join(lines))
    return "\n\n".join(out) or None


def _enclosing_model(ix: Index, node: Node) -> str | None:
    top = node
    while ix.parent(top) is not None:
        top = ix.parent(top)
    if isinstance(top, ListNode) and top.head == "defmodel" and len(top.items) > 1:
        return getattr(top.items[1], "name", None)
    return None


def _pretrained_value(ix: Index, node: Node) -> bool:
    """True for the value of a `defmodel`'s `:pretrained`."""
    p = ix.parent(node)
    if not (isinstance(p, ListNode) and p.head == "defmodel"):
        return False
    items = p.items
    return any(items[i] is node and isinstance(items[i - 1], Kw) and items[i - 1].name == "pretrained"
               for i in range(1, len(items)))


def _after(parent: ListNode, node: Node) -> str | None:
    """The keyword just before `node` among `parent`'s items."""
    for i in range(1, len(parent.items)):
        if parent.items[i] is node and isinstance(parent.items[i - 1], Kw):
            return parent.items[i - 1].name
    return None


def checkpoint_hover(ix: Index, node: Node) -> str | None:
    """Hover text (Markdown) for the path string of a `:pretrained`, a mapping's key
    or source string; None for any other node."""
    parent = ix.parent(node)
    if not isinstance(parent, ListNode):
        return None
    model = _enclosing_model(ix, node)
    c = ix.facts.checkpoints.get(model) if model else None
    if c is None:
        return None
    if isinstance(node, Str) and (_pretrained_value(ix, node) or (_pretrained_value(ix, parent)
                                                                   and _after(parent, node) == "path")):
        if model in ix.facts.one_forms:
            from .describe import one_form_text
            return _files(c) + "\n\n" + one_form_text(ix.facts.one_forms[model])
        return _files(c)
    mapping, op = parent, None
    if parent.head is not None and not isinstance(parent.items[0], Kw):   # `(transpose "t")`
        mapping, op = ix.parent(parent), parent
    if not (isinstance(mapping, ListNode) and _pretrained_value(ix, ix.parent(mapping) or mapping)
            and _after(ix.parent(mapping), mapping) == "names"):
        return None
    if isinstance(node, Kw) and op is None and node.name in c.params:
        line = _reads_of(c, node.name)
        return f"parameter `{node.name}` of `{c.model}`" + (f", read from {line}" if line else "")
    if isinstance(node, Str):
        into = [rel for rel, (_, reads) in c.reads.items() if any(_matches(node.value, t) for t, _ in reads)]
        got = c.header.get(node.value) if c.header is not None else None
        head = f"tensor `{node.value}`" + (f" {_shape(got[0])} {got[1]} in `{_short(c, got[2])}`" if got else "")
        return head + (" into " + ", ".join(f"`{r}`" for r in into) if into else "")
    return None


def _matches(source: str, tensor: str) -> bool:
    """Whether a tensor name is the source's (`h.{i}.w` matches `h.0.w`)."""
    if "{i}" not in source:
        return source == tensor
    before, after = source.split("{i}", 1)
    mid = tensor[len(before):len(tensor) - len(after)] if tensor.startswith(before) and tensor.endswith(after) else ""
    return mid.isdigit()


def _cached(c: Checkpoint) -> bool:
    """Whether `c`'s path is a model id the Hugging Face cache resolved (to a snapshot elsewhere)."""
    return not os.path.isabs(c.rel) and not c.path.endswith(c.rel)


def _short(c: Checkpoint, file: str) -> str:
    """A file as the run file would name it (relative to it, where the path was; to the snapshot, for a
    model id)."""
    if os.path.isabs(c.rel):
        return file
    if _cached(c):
        return os.path.relpath(file, c.path) if file.startswith(c.path + os.sep) else file
    base = c.path[:len(c.path) - len(c.rel)]
    return os.path.relpath(file, base) if base else file


def _files(c: Checkpoint) -> str:
    if c.header is None:
        return f"checkpoint `{c.rel}` ({c.path}): its headers not read (not on this machine)"
    files = sorted({f for _, _, f in c.header.values()})
    shown = ", ".join(f"`{_short(c, f)}`" for f in files)
    where = f" (the Hugging Face cache's snapshot {c.path})" if _cached(c) else ""
    return (f"checkpoint `{c.rel}`{where}: {len(c.header)} tensor{'s' if len(c.header) != 1 else ''} "
            f"in {len(files)} file{'s' if len(files) != 1 else ''}: {shown}")
