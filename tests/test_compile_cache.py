"""JAX's persistent compilation cache (sexpgpu_runtime/run/compile_cache.py): where it is (the option,
then SEXPGPU_COMPILE_CACHE, then the user's cache dir), `off`, and a run filling the directory given.
The suite runs with the cache off (tests/conftest.py), so no test touches a user's cache."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import FIXTURE, program_of


def test_the_suite_runs_with_the_cache_off():
    import os
    assert os.environ["SEXPGPU_COMPILE_CACHE"] == "off"


def test_where_the_cache_is(monkeypatch, tmp_path):
    from sexpgpu_runtime.run.compile_cache import cache_dir
    monkeypatch.delenv("SEXPGPU_COMPILE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "sexpgpu" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "sexpgpu" / "jax"
    monkeypatch.setenv("SEXPGPU_COMPILE_CACHE", str(tmp_path / "env"))
    assert cache_dir() == tmp_path / "env"
    assert cache_dir(str(tmp_path / "opt")) == tmp_path / "opt"   # the option wins
    assert cache_dir("off") is None and cache_dir(" OFF ") is None
    monkeypatch.setenv("SEXPGPU_COMPILE_CACHE", "off")
    assert cache_dir() is None


def test_a_directory_that_cannot_be_made_turns_the_cache_off(tmp_path, capsys):
    import jax
    from sexpgpu_runtime.run.compile_cache import configure
    (tmp_path / "file").write_text("x")
    try:
        assert configure(str(tmp_path / "file" / "cache")) is None
        assert jax.config.jax_compilation_cache_dir is None
        assert "the compilation cache is off for this run: cannot make" in capsys.readouterr().err
    finally:
        configure("off")


@pytest.mark.slow
def test_a_run_fills_the_cache_it_is_given(tmp_path):
    from sexpgpu_runtime.run.compile_cache import configure
    from sexpgpu_runtime import RunOptions, train
    cache = tmp_path / "cache"
    program = program_of(Path(FIXTURE).read_text(), str(tmp_path / "run.sx"))
    import jax
    jax.clear_caches()   # (a graph an earlier test compiled in this process would not be compiled again)
    try:
        train(program, RunOptions(steps=1, run_dir=tmp_path / "run", quiet=True, compile_cache=str(cache)))
        assert any(cache.iterdir())   # XLA's executables, one file per graph
    finally:
        configure("off")
