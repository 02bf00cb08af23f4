"""`sexpgpu lint` imports only what it needs (BENCHMARKS.md, "Fixed: lint"), and converting
option values without pydantic (`sexpgpu_cli.main._Coercion`) changes no value and no message."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import FIXTURE, modules_after

SEXPGPU = Path(sys.executable).with_name("sexpgpu")


def imported_by(*args: str) -> set[str]:
    """The top-level packages imported by `sexpgpu ARGS` run in a fresh interpreter."""
    return {m.split(".")[0] for m in modules_after("import sys\n"
                                                    f"sys.argv = ['sexpgpu', *{list(args)!r}]\n"
                                                    "from sexpgpu_cli.main import main\n"
                                                    "try:\n"
                                                    "    main()\n"
                                                    "except SystemExit:\n"
                                                    "    pass\n")}


def test_lint_imports_no_pydantic_lark_json_or_server():
    mods = imported_by("lint", str(FIXTURE))
    assert "sexpgpu_lang" in mods
    assert not mods & {"pydantic", "pydantic_core", "lark", "json", "rich", "lsprotocol", "pygls", "jax", "numpy"}


def test_json_format_imports_json_only_then():
    assert "json" in imported_by("lint", "--format", "json", str(FIXTURE))


@pytest.mark.slow
def test_bad_values_are_worded_by_typer():
    r = subprocess.run([str(SEXPGPU), "lint", "--format", "xml", str(FIXTURE)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr == ("sexpgpu: error: Invalid value for '--format' / '-f': 'xml' is not one of "
                        "'text', 'json', 'sarif'. (see `sexpgpu lint --help`)\n")
    r = subprocess.run([str(SEXPGPU), "run", "--steps", "0", str(FIXTURE)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Input should be greater than or equal to 1" in r.stderr


def test_values_are_converted_as_typer_converts_them(tmp_path):
    from typer.testing import CliRunner

    from sexpgpu_cli.main import Format, _Coercion, app
    seen = {}

    def spy(self, value, param, ctx):
        out = real(self, value, param, ctx)
        seen[param.name] = (out, self.typer_runtime().coerce(value, param=param, ctx=ctx))
        return out

    real = _Coercion.coerce
    _Coercion.coerce = spy
    try:
        out = tmp_path / "report.json"
        r = CliRunner().invoke(app, ["lint", "-f", "json", "-o", str(out), str(FIXTURE), str(FIXTURE.parent)])
    finally:
        _Coercion.coerce = real
    assert r.exit_code == 0, r.output
    assert seen["format"][0] is Format.json
    assert seen["files"][0] == [FIXTURE, FIXTURE.parent]
    assert seen["output"][0] == out
    for name, (ours, typers) in seen.items():
        assert ours == typers and type(ours) is type(typers), name
