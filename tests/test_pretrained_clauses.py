"""E-MODEL-003 says each thing once per checkpoint tensor: a fused tensor split into several parameters
(GPT-2's `c_attn` into `h.wq`, `h.wk`, `h.wv`) is one clause naming all of them (a tester found the
same clause once per split parameter)."""
from __future__ import annotations

import numpy as np

from test_hf_checkpoints import D, gpt2_tensors, one_error, write_hf


def clauses(message: str) -> list[str]:
    return message.removeprefix("`hf`: ").split("; ")


def test_a_split_tensor_of_the_wrong_shape_is_one_clause_naming_every_parameter(tmp_path):
    tensors = gpt2_tensors(np.random.default_rng(0))
    tensors["transformer.h.1.attn.c_attn.weight"] = tensors["transformer.h.1.attn.c_attn.weight"][:, :2 * D]
    del tensors["transformer.h.0.attn.c_attn.bias"]
    write_hf(tmp_path / "hf", tensors)
    d = one_error(tmp_path)
    assert d.code == "E-MODEL-003"
    assert clauses(d.message) == [
        "tensor `transformer.h.1.attn.c_attn.weight` is [32 64] bf16, parameters `h.wq`, `h.wk` and `h.wv` "
        "(each [2 32 4 8] f32) of `teacher` need [32 96] bf16 from it",
        "has no tensor `transformer.h.0.attn.c_attn.bias` (expected [96] bf16, for parameters `h.bq`, `h.bk` and `h.bv`)"]


def test_a_tensor_read_by_one_parameter_keeps_its_clause(tmp_path):
    tensors = gpt2_tensors(np.random.default_rng(0))
    tensors["transformer.h.0.mlp.c_fc.weight"] = tensors["transformer.h.0.mlp.c_fc.weight"][:, :64]
    write_hf(tmp_path / "hf", tensors)
    d = one_error(tmp_path)
    assert clauses(d.message) == [
        "tensor `transformer.h.0.mlp.c_fc.weight` is [32 64] bf16, parameter `h.w1` [2 32 128] f32 of `teacher` "
        "needs [32 128] bf16 from it"]
    assert d.help is None   # not "write `:names :gpt2`": the file's names are the mapping's already

