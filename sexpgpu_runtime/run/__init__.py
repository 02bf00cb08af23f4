"""The run: one training run from its options to its last step.

`train` holds the `Trainer` (the step and the passes) and `train()`, the
entry the CLI calls; `start` decides the start of a run (fresh, resumed,
started over) before anything trains; `loop` is the step loop (steps queued
ahead of the device, rows logged in order); `state` what a step changes;
`batches` the step's data; `checks` the NaN and Inf checks; `options` the
run's options; `run_dir` and `resume` the run dir's upkeep and what
`--resume` decides first; `checkpoint` the orbax checkpoints stamped with
the run's identity, `checkpoint_policy` when, what and how many to save;
each part is handed what it uses by `train`; `signals` SIGINT/SIGTERM noted and acted on where the
loop looks; `report` and `tensorboard` the terminal, metrics.jsonl and
TensorBoard rows. It uses every other sub-package; none of them imports it.
"""
