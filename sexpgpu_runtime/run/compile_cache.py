"""JAX's persistent compilation cache for `sexpgpu run`: on by default, in the user's cache dir.

A second run of the same file (or a resume) reads each graph XLA compiled before from the cache
instead of compiling it again, as MaxText and levanter configure it (`jax_compilation_cache_dir`,
every graph kept whatever its compile time or size). Where (`cache_dir`, first that applies):
`RunOptions.compile_cache` (`--compile-cache DIR`, or `off`), the environment variable
`SEXPGPU_COMPILE_CACHE` (a directory, or `off`), then `$XDG_CACHE_HOME/sexpgpu/jax` (default
`~/.cache/sexpgpu/jax`). A directory that cannot be made turns the cache off for the run, said in
one line. JAX does not cache a graph that calls back to the host (the compiled trip loop:
generator_graphs.py), so that graph compiles on every run. docs/runtime.md, "Compilation cache".
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

#: The environment variable that moves the cache or turns it off (`off`); the tests set it to `off`.
ENV = "SEXPGPU_COMPILE_CACHE"


def cache_dir(option: str | None = None) -> Path | None:
    """The directory the compilation cache lives in, or None when it is off: `option` (`--compile-cache`),
    else `$SEXPGPU_COMPILE_CACHE`, else the user's cache dir (XDG: `$XDG_CACHE_HOME/sexpgpu/jax`)."""
    chosen = option if option is not None else os.environ.get(ENV) or None
    if chosen is not None:
        return None if chosen.strip().lower() == "off" else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sexpgpu" / "jax"


def configure(option: str | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at `cache_dir(option)` (made if missing), every graph
    cached; or turn it off. Returns the directory in use, None when off. Call before anything compiles."""
    where = cache_dir(option)
    if where is not None:
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            print(f"sexpgpu: warning: the compilation cache is off for this run: cannot make {where} "
                  f"({e.strerror or e}); give --compile-cache DIR or --compile-cache off", file=sys.stderr)
            where = None
    jax.config.update("jax_compilation_cache_dir", None if where is None else str(where))
    jax.config.update("jax_enable_compilation_cache", where is not None)
    if where is not None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # JAX decides once per process, at its first compile, whether the cache is used: a later run in
    # the same process (another `train` call) would keep the first run's choice without this.
    compilation_cache.reset_cache()
    return where
