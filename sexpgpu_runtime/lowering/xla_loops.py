"""XLA's cost analysis with each while loop counted as many times as it runs.

XLA's `cost_analysis()` counts a `while` loop's body once, whatever its trip
count (HloCostAnalysis::HandleWhile), so a repeated block lowered to
`lax.scan` (one body, N layers) shows about 1/N of its FLOPs. `loop_costs`
reads the optimised module's text (`compiled.as_text()`), finds each `while`
whose trip count XLA knows (`known_trip_count` in its backend config; a scan
always has one), costs its body alone (the module re-parsed with the body as
its entry computation, `hlo_module_from_text`, then
`hlo_module_cost_analysis`) and adds the N - 1 runs the analysis left out,
through nested loops too.

The cost of one computation of a compiled module has no public API in JAX
(`Compiled.cost_analysis()` and `Lowered.cost_analysis()` cost the whole
module, each loop once; a scan's body traced and compiled alone through
`jax.extend.core` costs a different module, so its figures are not XLA's).
So this uses two private names, `jax._src.lib.xla_client` (for
`hlo_module_cost_analysis`) and `jaxlib._hlo` (for `hlo_module_from_text`),
with jax and jaxlib pinned in pyproject.toml to the versions it was tested
with. Where they are missing or changed, `loop_costs` returns XLA's figures
as they are, each loop counted once, and says so (`UNCOUNTED`), never fails.

Units: FLOPs, transcendentals and bytes accessed per call of the graph.
"""
from __future__ import annotations

import re

import jax

from ..errors import LoopCostUnavailable

try:   # private: see above
    from jax._src.lib import xla_client
    from jaxlib import _hlo
except ImportError:   # (a jax or jaxlib outside the pinned range)
    xla_client = _hlo = None

#: The keys of XLA's cost analysis that a loop's trip count multiplies.
KEYS = ("flops", "transcendentals", "bytes accessed")

#: What `explain --xla` says when this jax cannot cost a loop's body alone.
UNCOUNTED = (f"this jax/jaxlib ({jax.__version__}) lacks the private API that costs a while loop's body "
             "alone, so XLA's FLOPs, transcendentals and bytes accessed count each loop (a repeated block's "
             "scan) once, not once a trip; install the jax and jaxlib versions pyproject.toml pins")

_HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) \(")
_WHILE = re.compile(r"\bwhile\(.*?\bbody=%?([\w.\-]+).*?\"known_trip_count\":\{\"n\":\"(\d+)\"")


def _computations(text: str) -> tuple[dict[str, list[str]], str | None]:
    """The module's computations by name (their lines) and the entry computation's name."""
    comps: dict[str, list[str]] = {}
    entry = None
    name = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m and line.rstrip().endswith("{"):
            name = m.group(2)
            comps[name] = []
            if m.group(1):
                entry = name
        elif line.startswith("}"):
            name = None
        elif name is not None:
            comps[name].append(line)
    return comps, entry


def _cost_of(text: str, comp: str, client) -> dict:
    """XLA's cost analysis of computation `comp` of the module `text`, as if it were the entry."""
    lines = []
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m and line.rstrip().endswith("{"):
            line = line[len("ENTRY "):] if m.group(1) else line
            if m.group(2) == comp:
                line = "ENTRY " + line
        lines.append(line)
    try:
        cost = xla_client._xla.hlo_module_cost_analysis(client, _hlo.hlo_module_from_text("\n".join(lines)))
    except (AttributeError, TypeError) as e:   # (xla_client or _hlo None, a name gone or its signature changed)
        raise LoopCostUnavailable(str(e)) from None
    return {k: float(cost.get(k, 0.0)) for k in KEYS}


def loop_costs(text: str, cost: dict, client=None) -> tuple[dict, list[dict] | None]:
    """`cost` (XLA's analysis of the module `text`) with every while loop counted trip-count times.

    Returns the corrected `{flops, transcendentals, bytes accessed}` and the
    loops found, each `{body, trips, flops}` (the body's FLOPs per run, its own
    loops counted). A module without a while loop is returned as it is. Where
    the installed jax cannot cost a body alone (`LoopCostUnavailable`), `cost`
    is returned as it is with None for the loops (`UNCOUNTED` says what that means).
    """
    base = {k: float(cost.get(k, 0.0)) for k in KEYS}
    if "while(" not in text:
        return base, []
    client = client or jax.devices()[0].client
    comps, entry = _computations(text)
    plain: dict[str, dict] = {}
    full: dict[str, dict] = {}
    loops: list[dict] = []

    def counted(comp: str) -> dict:
        """The cost of one run of `comp` with its loops counted (the plain cost plus what the loops
        inside it left out)."""
        if comp in full:
            return full[comp]
        own = plain.setdefault(comp, _cost_of(text, comp, client)) if comp != entry else base
        out = dict(own)
        for line in comps.get(comp, []):
            m = _WHILE.search(line)
            if m is None:
                continue
            body, n = m.group(1), int(m.group(2))
            inner = counted(body)
            once = plain[body]
            for k in KEYS:   # the analysis counted the body once, at its plain cost
                out[k] += n * inner[k] - once[k]
            loops.append({"body": body, "trips": n, "flops": inner["flops"]})
        full[comp] = out
        return out

    if entry is None:
        return base, []
    try:
        return counted(entry), loops
    except LoopCostUnavailable:
        return base, None
