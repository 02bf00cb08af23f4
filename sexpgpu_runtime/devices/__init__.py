"""Devices: what the hardware offers and how a run is laid out on it.

`sharding` holds the data-parallel mesh (batches split along it, the
parameters replicated or split under FSDP) and a multi-process run's
start; `device` the device's memory (and whether a run could ever fit in
it) and its compiler's target. It imports nothing of the runtime but
`errors`.
"""
