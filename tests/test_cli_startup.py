"""`sexpgpu lint` imports only what it needs (benchmarks/run_all.py's lint row), and converting
option values without pydantic (`sexpgpu_cli.options.fast_process_value`) changes no value and no message."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import FIXTURE, modules_after

SEXPGPU = Path(sys.executable).with_name("sexpgpu")


def modules_of(*args: str) -> set[str]:
    """The modules imported by `sexpgpu ARGS` run in a fresh interpreter."""
    return modules_after("import sys\n"
                         f"sys.argv = ['sexpgpu', *{list(args)!r}]\n"
                         "from sexpgpu_cli.main import main\n"
                         "try:\n"
                         "    main()\n"
                         "except SystemExit:\n"
                         "    pass\n")


def imported_by(*args: str) -> set[str]:
    """The top-level packages imported by `sexpgpu ARGS` run in a fresh interpreter."""
    return {m.split(".")[0] for m in modules_of(*args)}


def test_lint_imports_no_pydantic_lark_json_or_server():
    mods = imported_by("lint", str(FIXTURE))
    assert "sexpgpu_lang" in mods
    assert not mods & {"pydantic", "pydantic_core", "lark", "json", "rich", "lsprotocol", "pygls", "jax", "numpy",
                        "jinja2", "tokenizers"}


def test_lint_reads_checkpoint_configs_with_modules_it_imports_only_for_them(tmp_path):
    """check/config.py and hf_config (the families' records) are imported where a file reads a config.json."""
    config = {"sexpgpu_lang.files.hf_config", "sexpgpu_lang.check.config"}
    assert not modules_of("lint", str(FIXTURE)) & config
    (tmp_path / "run.sx").write_text(FIXTURE.read_text() + '\n(def layers (checkpoint-config "ckpt" :layers))\n')
    assert config <= modules_of("lint", str(tmp_path / "run.sx"))


def test_lint_imports_huggingface_hub_only_for_a_model_id(tmp_path):
    """The Hugging Face cache is looked in (sexpgpu_lang/files/hf_cache.py) only where a path is a model id."""
    assert "huggingface_hub" not in imported_by("lint", str(FIXTURE))
    text = FIXTURE.read_text()
    assert "(model " in text
    (tmp_path / "run.sx").write_text(text + '\n(def layers (checkpoint-config "some-org/some-model" :layers))\n')
    assert "huggingface_hub" in imported_by("lint", str(tmp_path / "run.sx"))


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


def test_values_are_converted_as_typer_converts_them(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import sexpgpu_cli.main as main
    import sexpgpu_cli.options as options
    seen = {}
    real = options.fast_process_value

    def spy(param, ctx, value, base):
        out = real(param, ctx, value, base)
        seen[param.name] = (out, base.process_value(param, ctx, value))   # typer's own conversion
        return out

    monkeypatch.setattr(options, "fast_process_value", spy)
    out = tmp_path / "report.json"
    r = CliRunner().invoke(main.app, ["lint", "-f", "json", "-o", str(out), str(FIXTURE), str(FIXTURE.parent)])
    assert r.exit_code == 0, r.output
    assert seen["format"][0] is main.Format.json
    assert seen["files"][0] == [FIXTURE, FIXTURE.parent]
    assert seen["output"][0] == out
    assert seen["read_files"][0] is False
    for name, (ours, typers) in seen.items():
        assert ours == typers and type(ours) is type(typers), name


def test_the_cli_uses_no_private_module_of_typer():
    from pathlib import Path as P
    for path in sorted((P(__file__).resolve().parents[1] / "sexpgpu_cli").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "typer._" not in text and "._runtime_param" not in text and "type_descriptor" not in text, path.name
