"""The project's benchmarks, run from the repository root (BENCHMARKS.md has the numbers).

A package so that `python -m benchmarks.NAME` runs without editing `sys.path`. Nothing in
sexpgpu_lang, sexpgpu_runtime or sexpgpu_cli imports it.
"""
