"""Checkpoint name mappings (`:pretrained (... :names ...)`): from a checkpoint's tensors to a model's parameters.

A mapping is a plist from a parameter's path below the pretrained model
(`:h.wq`, keys joined with `.`) to a source, written as an expression
(docs/checkpoints.md "Name mappings"):

- `"transformer.wte.weight"`: a tensor of the file, as it is;
- `"transformer.h.{i}.ln_1.weight"`: a pattern over layer indices; for a
  parameter stacked by `(repeat block N)` it names one tensor per layer,
  `{i}` from 0 to N-1, stacked on the leading `[N ...]` axis;
- `(split SRC :axis a :parts p :index k)`: part k of p equal parts along
  axis a (`jnp.split`; GPT-2's fused `c_attn` into query, key and value);
  SRC is a tensor name or pattern;
- `(transpose SRC)`, `(transpose SRC [1 0 2])`: axes reversed, or
  permuted (as the `transpose` op, `jnp.transpose`; Llama's `[out in]`
  linear weights);
- `(split-heads SRC :axis a)`: axis a split into the parameter's two axes
  at a and a+1 (a reshape into heads, GPT-2's `_split_heads`).

Shapes flow from the parameter down: each source's expected shape is
computed from the parameter's (per layer, for a pattern), so the checker
compares the file's header with exact shapes, the runtime knows what each
tensor must be before it reads it, and an export runs the mapping
backwards without a header (sexpgpu_runtime/weights/hf_layout.py applies them). A mapping here is plain data (nested tuples):
`("tensor", name)`, `("split", src, axis, parts, index)`,
`("transpose", src, axes or None)`, `("split-heads", src, axis)`.
The standard library's mappings (`:names :gpt2`, `:names :llama`) are
hf_names.sx, read by the same parser. Pure Python; never JAX.
"""
from __future__ import annotations

import functools
import pathlib
from typing import Callable

from .syntax import Kw, ListNode, Node, Num, Str, VecNode

#: The standard library's mappings, one `(names NAME :param source ...)` form each.
STDLIB_NAMES = pathlib.Path(__file__).parent / "hf_names.sx"
#: The ops a mapping source may apply, each with its signature (E-MODEL-006 names them).
OPS = {"split": "(split SRC :axis a :parts p :index k)", "transpose": "(transpose SRC [perm])",
       "split-heads": "(split-heads SRC :axis a)"}
#: What a pattern writes for the layer index.
LAYER = "{i}"

Report = Callable[[Node, str, str], None]   # (node, message, help)


class MappingError(Exception):
    """A mapping source does not fit its parameter's shape (the message says how)."""


def parse_source(node: Node, report: Report):
    """The mapping expression `node` writes, or None after `report(node, message, help)`."""
    if isinstance(node, Str):
        if node.value.count(LAYER) > 1 or ("{" in node.value.replace(LAYER, "")):
            report(node, f"a tensor name holds `{{i}}` at most once, and no other `{{...}}`: `{node.value}`",
                   "write the layer index as `{i}`: `\"transformer.h.{i}.ln_1.weight\"`")
            return None
        return ("tensor", node.value)
    head = node.head if isinstance(node, ListNode) else None
    if head not in OPS:
        report(node, "a mapping source is a tensor name (a string) or " + ", ".join(f"`{s}`" for s in OPS.values()),
               "write `\"transformer.wte.weight\"`, or `(transpose \"model.layers.{i}.mlp.up_proj.weight\")`")
        return None
    if len(node.items) < 2:
        report(node, f"`{head}` needs a source: `{OPS[head]}`", "")
        return None
    src = parse_source(node.items[1], report)
    if src is None:
        return None
    if head == "transpose":
        perm = node.items[2] if len(node.items) == 3 else None
        if len(node.items) > 3 or (perm is not None and not (
                isinstance(perm, VecNode) and all(isinstance(e, Num) and isinstance(e.value, int) for e in perm.items))):
            report(node, f"`transpose` takes a source and, optionally, a vector of axes: `{OPS[head]}`", "")
            return None
        return ("transpose", src, tuple(e.value for e in perm.items) if perm is not None else None)
    kws = _keywords(node, report, {"split": ("axis", "parts", "index"), "split-heads": ("axis",)}[head])
    if kws is None:
        return None
    for key in {"split": ("axis", "parts", "index"), "split-heads": ("axis",)}[head]:
        if not isinstance(kws.get(key), int) or kws[key] < (1 if key == "parts" else 0):
            report(node, f"`{head}` needs `:{key}`, an integer of {1 if key == 'parts' else 0} or more: `{OPS[head]}`", "")
            return None
    if head == "split-heads":
        return ("split-heads", src, kws["axis"])
    if src[0] != "tensor":
        report(node.items[1], "`split` takes a tensor name, not another op's result", "split the file's tensor first: "
               "`(split-heads (split \"h.{i}.attn.c_attn.weight\" :axis 1 :parts 3 :index 0) :axis 1)`")
        return None
    if kws["index"] >= kws["parts"]:
        report(node, f"`:index` {kws['index']} of `split` is not below `:parts` {kws['parts']}", "")
        return None
    return ("split", src, kws["axis"], kws["parts"], kws["index"])


def _keywords(node: ListNode, report: Report, allowed: tuple[str, ...]) -> dict | None:
    """The `:key value` pairs after an op's source, as integers."""
    out, items = {}, node.items[2:]
    for i in range(0, len(items), 2):
        k, v = items[i], items[i + 1] if i + 1 < len(items) else None
        if not isinstance(k, Kw) or k.name not in allowed or v is None:
            report(k, f"`{node.head}` takes " + ", ".join(f"`:{a}`" for a in allowed) + f": `{OPS[node.head]}`", "")
            return None
        if isinstance(v, Num) and isinstance(v.value, int):
            out[k.name] = v.value
        else:
            report(v, f"`:{k.name}` of `{node.head}` takes an integer constant", "")
            return None
    return out


def parse_names(node: ListNode, start: int, report: Report) -> dict[str, tuple] | None:
    """The plist of a mapping from item `start` of `node`: parameter path -> source; None when an
    entry was reported (every entry is checked, so each mistake is reported once)."""
    out, ok, items = {}, True, node.items[start:]
    for i in range(0, len(items), 2):
        k = items[i]
        if not isinstance(k, Kw) or i + 1 >= len(items):
            report(k, "a mapping is `:parameter source` pairs: `(:wte \"transformer.wte.weight\" ...)`", "")
            return None
        src = parse_source(items[i + 1], report)
        if src is None:
            ok = False
        elif k.name in out:
            report(k, f"parameter `{k.name}` is mapped twice", "keep one entry")
            ok = False
        else:
            out[k.name] = src
    return out if ok else None


@functools.lru_cache(maxsize=1)
def stdlib_names() -> dict[str, dict[str, tuple]]:
    """The standard library's mappings (hf_names.sx), by name; each is checked as a user's is."""
    from .source import SourceText
    from .syntax import parse
    parsed = parse(SourceText(STDLIB_NAMES.read_text(encoding="utf-8"), str(STDLIB_NAMES)))
    assert not parsed.diagnostics, parsed.diagnostics
    out = {}
    for form in parsed.forms:
        def report(n, msg, help_, _f=form):
            raise AssertionError(f"hf_names.sx: {msg}")
        out[form.items[1].name] = parse_names(form, 2, report)
    return out


def patterned(expr: tuple) -> bool:
    """Whether the source names one tensor per layer (`{i}`)."""
    return LAYER in leaf(expr)[1]


def leaf(expr: tuple) -> tuple:
    """The `("tensor", name)` at the bottom of a source."""
    while expr[0] != "tensor":
        expr = expr[1]
    return expr


def layer_name(pattern: str, i: int) -> str:
    """The tensor a pattern names for layer `i`."""
    return pattern.replace(LAYER, str(i))


def child_shape(expr: tuple, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape the source below op `expr` must make for `expr` to make `shape`. Raises
    MappingError when the op's axes do not fit `shape`."""
    op, shown = expr[0], "[" + " ".join(map(str, shape)) + "]"
    if op == "transpose":
        axes = expr[2] if expr[2] is not None else tuple(reversed(range(len(shape))))
        if sorted(axes) != list(range(len(shape))):
            raise MappingError(f"the axes {list(axes)} of `transpose` are not an order of the axes of {shown}")
        below = [0] * len(shape)
        for j, a in enumerate(axes):
            below[a] = shape[j]
        return tuple(below)
    a = expr[2]
    if op == "split-heads":
        if a + 1 >= len(shape):
            raise MappingError(f"`split-heads` at axis {a} needs axes {a} and {a + 1} in its result, {shown}")
        return shape[:a] + (shape[a] * shape[a + 1],) + shape[a + 2:]
    if a >= len(shape):
        raise MappingError(f"`split` at axis {a} of a result of rank {len(shape)}, {shown}")
    return shape[:a] + (shape[a] * expr[3],) + shape[a + 1:]


def source_shape(expr: tuple, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape the file's tensor must have for the source `expr` to make `shape` (per layer
    for a pattern). Raises MappingError when an op's axes do not fit."""
    while expr[0] != "tensor":
        shape, expr = child_shape(expr, tuple(shape)), expr[1]
    return tuple(shape)


def shared_tensors(names: dict[str, tuple]) -> list[tuple[str, list[str]]]:
    """The tensors (by name or pattern) that more than one parameter of the mapping `names` is read
    from, other than as distinct parts of one `split` (GPT-2's `c_attn`): [(tensor, [parameter paths])].
    Reading them is fine; writing the mapping backwards would give such a tensor two values (a tied
    checkpoint's embedding read into an untied model's `:embed` and `:lm-head`), so an export refuses it."""
    parts: dict[str, list[tuple[object, str]]] = {}
    for rel, src in names.items():
        node, index = src, None
        while node[0] != "tensor":
            if node[0] == "split":
                index = node[2:]
            node = node[1]
        parts.setdefault(node[1], []).append((index, rel))
    out = []
    for tensor, reads in parts.items():
        indices = [i for i, _ in reads]
        if len(reads) > 1 and (None in indices or len(set(indices)) < len(indices)):
            out.append((tensor, [rel for _, rel in reads]))
    return out
