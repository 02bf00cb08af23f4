"""Weights: the parameters, where their values come from and where they go.

`params` initialises a model's parameters from the seed and walks their
trees; `pretrained` fills them from `:pretrained` checkpoints and writes
`--export`; `hf_layout` reads and writes checkpoints in Hugging Face's
layout through a name mapping, one tensor at a time; `optim` builds the
optimizer over them (optax: schedules, the weight-decay mask).
"""
