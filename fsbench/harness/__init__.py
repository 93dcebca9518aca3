"""fsbench harness: wires the kernels and eval into a benchmark, one room per role.

`cli` (the command line), `run` (one run: orchestration, settings, prompts, preflight, the run folder's writing),
`model` (the diffusers pipeline and its weight options), `precision` (schedules and the attention router),
`parallel` (the team of processes), `mlperf` (LoadGen, submission, compliance) and `measure` (profile, energy, clocks).
"""
