"""The differential check, a test oracle: the checker against JAX in both directions, on random programs.

tests/test_differential.py runs a few hundred programs of each kind; `python -m tests.differential`
runs thousands, over the registry's operations.

Well-typed direction. Random compositions of `sexpgpu_lang.ops.REGISTRY`'s
ops (random arity, keywords such as `:axis`, `:axes`, `:keepdims`,
`:dtype`, `:salt`), nested up to `--depth`, over random names bound to
random shapes and dtypes, and literals. `check_expression` types each;
when the checker accepts one, the runtime's evaluator traces it with JAX
(`jax.eval_shape`) and compares every op's JAX result with the type the
checker inferred for that node, and the whole result with the
expression's type: an accepted program that fails to lower, or a node
whose JAX type differs, is a disagreement.

Ill-typed direction. `ill_typed` writes a call of each op in turn with
one fault drawn from its family's (shapes that do not broadcast, a
scalar where an axis is needed, an axis out of range or not constant,
repeated axes, bool or integer operands, a bad dtype, a negative size, a
matmul inner-size mismatch, a wrong einsum, a non-permutation, an index
out of range...) or a generic one (too few or too many arguments, an
unknown keyword, a string or a vector for a tensor); operands are sometimes wrapped
in type-preserving ops and the call in another op. The random
compositions the checker rejects count here too.

JAX's own verdict. Every program, accepted or not, is also evaluated
with `DIRECT`: each op as a JAX user writes it (the jnp, lax, jax.nn,
jax.random function, or optax's cross-entropy), with none of the
runtime's conversions or type checks, traced and lowered with
`jax.jit(...).lower`. A rejected program JAX also refuses is an
agreement; one JAX lowers is a deliberate strictness when a rule of
`STRICT` explains each of its errors (docs/language.md, "Where the
checker is stricter than JAX"), else a disagreement. An accepted program
JAX's function refuses is explained by a rule of `LENIENT` (the
language converts, e.g. integers to f32 for `sigmoid`) or is a
disagreement.

Whole run files (`--phases`). `phase_file` writes a run file: a loader
of random fields (shapes, dtypes), a model `m` multiplying a trainable
parameter by its argument, a generator whose `:init` makes a state from
the fields, whose `:step` reads the state, the trip, `(getf ctx :step)`
and a model call and returns a state that keeps each key's shape and
dtype (`keep`), changes one, drops one or adds one (`drift`), or is
random compositions as they come (`raw`), an optional `:finish`, and an
`objective` reading every field and generated name (`field` or `getf`),
calling the model, and returning an f32 scalar loss with the parameter
in it (`ok`), an unreduced one, one cast to a non-float (or bf16) dtype,
or a composition as it comes. The compositions are random calls of the
registry's ops, mostly ones the checker types alone. When the checker
accepts a file (`analyze`: no error, an IR), `phase_runtime` lowers every
graph of its step as `sexpgpu run` builds them (`Graphs`:
`generate.init`, `.step`, `.finish`, `train` with its gradient, `update`)
from `jax.ShapeDtypeStruct`s and compares JAX's types of the state, the
made record, the loss and the gradient with the checker's (tracing, the
runtime compares each node's too: `InternalTypeError`). Every file,
accepted or not, is also run as a JAX user writes it, phase by phase
(`phase_jax_verdicts`: `DIRECT` ops, the generator as `lax.fori_loop`
with the state as its carry, `jax.grad` of the objective on what the
generator makes), and each phase is judged alone (`PhaseTally.judge`): a
phase the checker rejects and JAX runs is explained by a rule of `STRICT`
or `PHASE_STRICT`, one it accepts and JAX refuses by `LENIENT` or
`PHASE_LENIENT`, or it is a disagreement.

Prints the counts per category, both directions, and the unexplained
disagreements (goal 0; exit status 1 otherwise). `--keep DIR` writes
each one as `expr` plus its names' types, or as a run file, for a regression case.

    .venv/bin/python -m tests.differential [--n 3000] [--ill 2000] [--phases 1000] [--seed 0] [--depth 3]
        [--phase-depth 2] [--keep DIR]

One file in five runs under `:precision :bf16`, one in five stacks two
microbatches (the stacked generator and training graphs are lowered too).

Not covered by the random files: `prepare`, evaluation passes, curriculum
stages, sub-models, frozen or pretrained parameters, and `def`'d functions.

The modules: `expressions` (random compositions), `faults` (ill-typed
calls), `run_files` (random run files), `jax_direct` (each op as a JAX user
writes it: JAX's own verdict), `runtime_check` (the runtime's verdict),
`rules` (the deliberate differences, `STRICT`, `LENIENT`, `PHASE_STRICT`,
`PHASE_LENIENT`), `judge` (the tallies and the runs), `cli` (the command
line). The rule lists are read where they live, in `rules`: a test that
swaps one swaps `rules.STRICT`. This package imports the front end and the
runtime; nothing of the project imports it.
"""
from __future__ import annotations

import sexpgpu_runtime  # noqa: F401  (enables x64, as a run does)

from .expressions import expr, random_env
from .faults import ill_typed
from .jax_direct import DIRECT, jax_verdict, phase_jax_verdict, phase_jax_verdicts
from .judge import PhaseTally, Tally, run, run_phases
from .rules import (LENIENT, PHASE_LENIENT, PHASE_STRICT, STRICT, PhaseRule, Rule, lenient_rule, names_of,
                    phase_example, strict_rule)
from .run_files import PhaseFile, phase_file
from .runtime_check import lower, phase_runtime

__all__ = ["DIRECT", "LENIENT", "PHASE_LENIENT", "PHASE_STRICT", "PhaseFile", "PhaseRule", "PhaseTally",
           "Rule", "STRICT", "Tally", "expr", "ill_typed", "jax_verdict", "lenient_rule", "lower", "names_of",
           "phase_example", "phase_file", "phase_jax_verdict", "phase_jax_verdicts", "phase_runtime",
           "random_env", "run", "run_phases", "strict_rule"]
