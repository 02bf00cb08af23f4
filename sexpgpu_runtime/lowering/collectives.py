"""The collectives of a compiled graph, read from its HLO text: what each call moves between devices.

On a mesh XLA inserts the collectives itself (GSPMD: the parameters' and inputs' shardings in,
sexpgpu_runtime/devices/sharding.py): all-gathers of FSDP-split parameters, all-reduces of partial sums
(a tensor-parallel attention's or MLP's output, the gradients), reduce-scatters of FSDP's gradients.
`collectives(text)` counts them in the compiled module's text (`compiled.as_text()`), each while loop's
body (a repeated block's scan) counted its known trip count times, as xla_loops.py counts FLOPs.

Units: bytes of each collective's result on one device (an all-gather's gathered array, an
all-reduce's reduced one), summed per kind, per call of the graph.
"""
from __future__ import annotations

import re

from .xla_loops import _WHILE, _computations

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_OP = re.compile(r"=\s*(.*?)\s(" + "|".join(KINDS) + r")(-start)?\(")
_SHAPE = re.compile(r"\b(pred|s8|u8|s16|u16|s32|u32|s64|u64|f16|bf16|f32|f64|c64|c128)\[([\d,]*)\]")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}


def _nbytes(dtype: str, dims: str) -> int:
    n = _BYTES[dtype]
    for d in filter(None, dims.split(",")):
        n *= int(d)
    return n


def _own(lines: list[str]) -> dict[str, list[int]]:
    """The collectives written in one computation's lines: kind -> [count, bytes]."""
    out: dict[str, list[int]] = {}
    for line in lines:
        m = _OP.search(line)
        if m is None:
            continue
        shapes = _SHAPE.findall(m.group(1))
        if not shapes:
            continue
        # an async `-start` returns (operands..., results...): its result is the last; a synchronous one's
        # result is the whole (a tuple when it reduces several arrays at once)
        b = _nbytes(*shapes[-1]) if m.group(3) else sum(_nbytes(*s) for s in shapes)
        entry = out.setdefault(m.group(2), [0, 0])
        entry[0] += 1
        entry[1] += b
    return out


def collectives(text: str) -> dict[str, dict[str, int]]:
    """Each kind of collective one call of the compiled module `text` runs: `{kind: {"count", "bytes"}}`
    (bytes of the results on one device), a while loop's body counted its known trip count times; {} on
    one device (no collective)."""
    if not any(k in text for k in KINDS):
        return {}
    comps, entry = _computations(text)
    done: dict[str, dict[str, list[int]]] = {}

    def counted(comp: str) -> dict[str, list[int]]:
        if comp in done:
            return done[comp]
        out = {k: list(v) for k, v in _own(comps.get(comp, [])).items()}
        for line in comps.get(comp, []):
            m = _WHILE.search(line)
            if m is None:
                continue
            for k, (c, b) in counted(m.group(1)).items():
                e = out.setdefault(k, [0, 0])
                e[0] += int(m.group(2)) * c
                e[1] += int(m.group(2)) * b
        done[comp] = out
        return out

    if entry is None:
        return {}
    return {k: {"count": c, "bytes": b} for k, (c, b) in sorted(counted(entry).items())}


def total_bytes(found: dict[str, dict[str, int]]) -> int:
    """Every collective's bytes of `collectives`' answer together."""
    return sum(v["bytes"] for v in found.values())
