"""Lowering: the checked IR turned into JAX, and a step's phases into jitted graphs.

`lowering` holds one JAX lowering per registry op and the evaluator (an
`ir.Interpreter`) that traces a phase; `graphs` traces each phase of a step
into one jitted function; `stacking` runs a stacked graph as the unstacked
body once per copy; `accumulate` adds gradients across microbatches inside
the training graph; `draw_check` checks a generator's traced sampling
temperatures; `dtypes` maps dtype names to JAX's and checks a traced value
against its IR type. Nothing here reads a file, owns a run or touches a
device beyond tracing and calling the graphs.
"""
