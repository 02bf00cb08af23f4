"""A setting whose value is none of its keywords (`:remat`, `:precision`, `:shard-params`): E-FORM-002
echoes the value as written and suggests the nearest one, with a quick fix to it (a tester found
`:remat`'s message named neither)."""
from __future__ import annotations

import pytest

from helpers import check, variant
from test_repeat_diagnostics import HEAD, LAYER, LM


def remat(value: str, caret: str) -> str:
    """A model with a repeated block whose `:remat` is `value`, marked `caret`."""
    return HEAD + LAYER + LM.replace("(repeat layer 2)", f"""(repeat layer 2 :remat {value})
;;                                        {caret} E-FORM-002""")


@pytest.mark.parametrize("value, message, fix", [
    (":dots-savable", "`:remat` has no policy `:dots-savable`; did you mean `:dots-saveable`?", ":dots-saveable"),
    (":dots_saveable", "`:remat` has no policy `:dots_saveable`; did you mean `:dots-saveable`?", ":dots-saveable"),
    (":save-nothing", "`:remat` has no policy `:save-nothing`; did you mean `:nothing-saveable`?", ":nothing-saveable"),
    (":save-dots", "`:remat` has no policy `:save-dots`; did you mean `:dots-saveable`?", ":dots-saveable"),
    ("dots-saveable", "`:remat` takes a keyword, not `dots-saveable`; did you mean `:dots-saveable`?", ":dots-saveable"),
    ('"everything"', '`:remat` takes a keyword, not `"everything"`; did you mean `:everything-saveable`?',
     ":everything-saveable"),
    (":full", "`:remat` has no policy `:full`", None),
    ("3", "`:remat` takes a keyword, not `3`", None),
])
def test_an_unknown_remat_policy_is_echoed_with_the_nearest_one(value, message, fix):
    res = check(remat(value, "^" * len(value)))
    d, = res.diagnostics
    assert (d.message, (d.data or {}).get("replace")) == (message, fix)
    assert d.help == ("it is `:nothing-saveable` (recomputes everything in the backward pass), `:dots-saveable` "
                      "(keeps matmul outputs) or `:everything-saveable` (keeps all: no remat)")


def test_the_run_settings_of_fixed_keywords_are_echoed_the_same_way():
    res = check(variant(":seed 0", """:shard-params :fsdb :seed 0
;;                 ^^^^^ E-FORM-002"""))
    d, = res.diagnostics
    assert (d.message, d.data) == ("`:shard-params` has no value `:fsdb`; did you mean `:fsdp`?", {"replace": ":fsdp"})
    assert d.help.startswith("it is `:replicated` or `:fsdp`; `:fsdp` splits every parameter")
    res = check(variant(":precision :f32", """:precision :fp32
;;              ^^^^^ E-FORM-002"""))
    d, = res.diagnostics
    assert (d.message, d.help) == ("`:precision` has no value `:fp32`; did you mean `:f32`?", "it is `:f32` or `:bf16`")
