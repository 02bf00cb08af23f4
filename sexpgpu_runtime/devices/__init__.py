"""Devices: what the hardware offers and how a run is laid out on it.

`sharding` holds the data-parallel mesh (batches split along it, the
parameters replicated or split under FSDP) and a multi-process run's
start; `device` the device's memory and compiler target; `xla_report` and
`xla_loops` XLA's own memory and cost analysis for `explain --xla`.
"""
