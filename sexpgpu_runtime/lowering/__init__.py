"""Lowering: the checked IR turned into JAX, and a step's phases into jitted graphs.

`lowering` holds one JAX lowering per registry op and the evaluator (an
`ir.Interpreter`) that traces a phase; `graphs` builds a step's jitted
graphs, the generator's (`generator_graphs`) and the training's
(`training_graphs`), over what they share (`context`: the context rows, the
trace counter); `stacking` runs a stacked graph as the unstacked body once
per copy; `accumulate` adds gradients across microbatches inside the
training graph; `draw_check` checks a generator's traced sampling
temperatures; `xla_report` and `xla_loops` compile the graphs for
`explain --xla` and read XLA's own memory and cost analysis. Nothing here
reads a data file, owns a run or writes anything.
"""
