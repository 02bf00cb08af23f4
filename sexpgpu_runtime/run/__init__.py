"""The run: one training run from its options to its last step.

`train` holds the `Trainer` (the step loop, passes, stops) and `train()`,
the entry the CLI calls; `options` the run's options and their checks;
`run_dir`, `paths` and `resume` the run dir's upkeep, directories proven
writable and what `--resume` decides first; `checkpoint` the orbax
checkpoints stamped with the run's identity; `signals` SIGINT/SIGTERM
noted and acted on where the loop looks; `report` and `tensorboard` the
terminal, metrics.jsonl and TensorBoard rows. It uses every other
sub-package; none of them imports it.
"""
