"""Neovim as a second, independent LSP client of `sexpgpu lsp` (issue 3).

Neovim runs headless with `tests/nvim/lsp_client.lua`: it opens a case (the
project's copy of a `../shared/cases` file, `helpers.CASE_COPIES`), starts the server with `vim.lsp.start_client` (Debian's
Neovim is 0.7: no `vim.lsp.start`, no `-l`), waits for the diagnostics, asks
for hovers, edits the buffer and waits for the new diagnostics, and writes
what Neovim itself saw as JSON. These tests assert on that JSON.

Neovim must be installed (`tests/nvim/install.sh`); without it the test fails
with that instruction rather than skipping. Imports nothing from the project
(only the test helpers' text): the server is reached only through the
`sexpgpu lsp` program.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import case_expectations, sexpgpu_program, write_case

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[1]
NVIM_DIR = Path(__file__).resolve().parent / "nvim"
DRIVER = NVIM_DIR / "lsp_client.lua"
#: The Neovim setup docs/editors-setup.md gives, verbatim.
DOCUMENTED_INIT = NVIM_DIR / "init.lua"
#: Per wait inside Neovim (start-up, diagnostics, a hover, the exit).
WAIT_MS = 30_000
#: For the whole Neovim process.
PROCESS_TIMEOUT_S = 120

SEVERITY = {1: "error", 2: "warning", 3: "information", 4: "hint"}  # vim.diagnostic.severity


def nvim_program() -> str:
    nvim = shutil.which("nvim")
    if nvim is None:
        pytest.fail("`nvim` is not on PATH: install Neovim with `sh tests/nvim/install.sh` "
                    "(Debian's `neovim` package) to run the Neovim client test", pytrace=False)
    return nvim


def server_command() -> list[str]:
    """`sexpgpu lsp` as an editor starts it: the venv's program, else PATH's."""
    program = sexpgpu_program()
    if program:
        return [program, "lsp"]
    return [sys.executable, "-c", "from sexpgpu_cli.main import app; app()", "lsp"]


def position_of(text: str, line_text: str, word: str) -> dict:
    """0-based position of `word` on the first line containing `line_text` (ASCII lines only)."""
    for number, line in enumerate(text.splitlines()):
        if line_text in line:
            return {"line": number, "character": line.index(line_text) + line_text.index(word)}
    raise AssertionError(f"no line contains {line_text!r}")


def nvim_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment with a private home for Neovim: its lsp.log lands in tmp_path."""
    env = dict(os.environ, **extra)
    for var in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        env[var] = str(tmp_path / "xdg" / var.lower())
    return env


def run_neovim(tmp_path: Path, config: dict) -> dict:
    """Run the Lua driver with `config`; return what it wrote, or fail with its log."""
    nvim = nvim_program()
    out = tmp_path / "nvim-result.json"
    stderr = tmp_path / "server-stderr.txt"
    # The server's stderr goes to a file (Neovim would chop it into its lsp.log); `exec` keeps
    # the server itself as the process Neovim talks to.
    cmd = ["sh", "-c", 'exec "$@" 2>>"$0"', str(stderr), *server_command()]
    config = {"root": str(ROOT), "cmd": cmd, "timeout_ms": WAIT_MS, "out": str(out), **config}
    config_path = tmp_path / "nvim-config.json"
    config_path.write_text(json.dumps(config))
    env = nvim_env(tmp_path, SEXPGPU_NVIM_CONFIG=str(config_path))
    proc = subprocess.run(
        [nvim, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {DRIVER}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S,
    )
    logs = sorted((tmp_path / "xdg").rglob("lsp.log"))
    context = (f"nvim exited {proc.returncode}\nnvim stdout:\n{proc.stdout}\nnvim stderr:\n{proc.stderr}\n"
               + (f"server stderr:\n{stderr.read_text()[-6000:]}\n" if stderr.exists() else "")
               + "".join(f"{log}:\n{log.read_text()[-3000:]}\n" for log in logs))
    assert out.exists(), f"the Neovim driver wrote no result\n{context}"
    result = json.loads(out.read_text())
    assert "error" not in result, f"the Neovim driver failed: {result['error']}\n" \
        f"log: {json.dumps(result.get('log'), indent=1)}\n{context}"
    assert proc.returncode == 0, context
    return result


def problems(diagnostics: list[dict]) -> set[tuple[str, int]]:
    """Errors and warnings as (code, 1-based line), as the cases state them."""
    return {(str(d["code"]), d["lnum"] + 1) for d in diagnostics if SEVERITY.get(d["severity"]) in ("error", "warning")}


def hover_text(hover: dict) -> str:
    assert not hover.get("error"), f"hover at {hover['line']}:{hover['character']} failed: {hover['error']}"
    return "\n".join(hover.get("lines") or [])


def test_neovim_shows_diagnostics_and_hover_and_follows_an_edit(tmp_path):
    file = write_case("gen-002-dtype-drift.sx", tmp_path)  # the buffer is edited, never saved
    source = file.read_text()

    bad = "(list :row (cast (where (= column at) guess row) :f32)"
    bad_at = position_of(source, bad, ":f32")
    assert bad_at["line"] == 39  # line 40, where the case expects E-GEN-002
    hovers = [
        position_of(source, "(let* ((row (getf state :row))", "row"),  # the state's row, in :step
        position_of(source, bad, "cast"),  # the call that turns it into f32
    ]
    result = run_neovim(tmp_path, {
        "file": str(file),
        "hovers": hovers,
        "edit": {"line": bad_at["line"], "start": bad_at["character"],
                 "finish": bad_at["character"] + len(":f32"), "text": ":i32"},
    })

    assert result["attached"] is True
    assert result["offset_encoding"] == "utf-16"

    # On open: exactly the case's expectations, E-GEN-002 on line 40, read back from Neovim.
    opened = result["opened"]["diagnostics"]
    assert problems(opened) == set(case_expectations(file)[0]) == {("E-GEN-002", 40)}, opened
    gen002 = next(d for d in opened if d["code"] == "E-GEN-002")
    assert SEVERITY[gen002["severity"]] == "error"
    assert (gen002["lnum"], gen002["col"]) == (39, source.splitlines()[39].index("(cast"))
    assert "`:init` made it `[64 8] i32`" in gen002["message"], gen002["message"]
    assert "[64 8] f32" in gen002["message"], gen002["message"]
    # Neovim shows only the message (not relatedInformation, which it declares): the help is in it (issue 33)
    assert gen002["message"].split("\n")[-1].startswith("help: cast it back"), gen002["message"]
    assert "errors.md" in (gen002.get("codeDescription") or {}).get("href", ""), gen002
    related = gen002.get("relatedInformation") or []
    init_line = position_of(source, "(list :row (field batch :row)", ":row")["line"]
    assert any(r["location"]["range"]["start"]["line"] == init_line for r in related), related

    # Hover: the types Neovim's float would show.
    state_row, cast_call = result["hovers"]
    assert "[64 8] i32" in hover_text(state_row), state_row
    assert "[64 8] f32" in hover_text(cast_call), cast_call

    # Neovim sends the edit; the diagnostics follow: casting back to i32 fixes the file.
    edited = result["edited"]
    assert edited["line"].strip().startswith("(list :row (cast (where (= column at) guess row) :i32)")
    assert problems(edited["diagnostics"]) == set(), edited["diagnostics"]
    publishes = result["publishes"] or []
    versions = [p["version"] for p in publishes if isinstance(p.get("version"), int)]
    assert versions == sorted(versions), f"diagnostics published out of order: {publishes}"
    assert not any(c.startswith("E-GEN-002@") for c in publishes[-1]["codes"]), publishes

    # Neovim's shutdown and exit: the server ends cleanly.
    assert result["exit"] == {"code": 0, "signal": 0}, result["exit"]


def test_the_documented_neovim_setup_attaches_sexpgpu_lsp(tmp_path):
    """docs/editors-setup.md's Neovim 0.7 lines, run as they are: `*.sx` gets the
    `sexpgpu` filetype and `sexpgpu lsp` (found on PATH) publishes diagnostics."""
    snippet = DOCUMENTED_INIT.read_text().strip()
    docs = (ROOT / "docs" / "editors-setup.md").read_text()
    assert snippet in docs, "docs/editors-setup.md must show tests/nvim/init.lua verbatim"

    nvim = nvim_program()
    program = server_command()[0]
    assert Path(program).name == "sexpgpu", f"no `sexpgpu` program beside {sys.executable} or on PATH"
    file = write_case("gen-002-dtype-drift.sx", tmp_path)
    out = tmp_path / "init-result.json"
    env = nvim_env(tmp_path, SEXPGPU_NVIM_OUT=str(out))
    env["PATH"] = os.pathsep.join([str(Path(program).parent), env.get("PATH", "")])
    proc = subprocess.run(
        [nvim, "--headless", "-u", str(DOCUMENTED_INIT), "-i", "NONE", "-n", str(file),
         "-c", f"luafile {NVIM_DIR / 'check_init.lua'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S,
    )
    logs = "".join(log.read_text()[-3000:] for log in (tmp_path / "xdg").rglob("lsp.log"))
    assert out.exists(), f"nvim exited {proc.returncode}: {proc.stdout}\n{proc.stderr}\n{logs}"
    result = json.loads(out.read_text())
    assert result["filetype"] == "sexpgpu", result
    assert result["clients"] == ["sexpgpu"], f"{result}\nlsp.log:\n{logs}"
    assert result["waited"], f"no diagnostics arrived\nlsp.log:\n{logs}"
    assert {(d["code"], d["lnum"] + 1) for d in result["diagnostics"]} == {("E-GEN-002", 40)}, result
    # the documented 'iskeyword': completion replaces `:stride` and `cross-entropy` whole (issue 21)
    starts = result["completion_starts"]
    assert [s["word"] for s in starts] == [":stride", "cross-entropy"], starts
    assert all(s["got"] == s["expected"] for s in starts), starts


def test_neovim_shows_which_argument_of_a_standard_library_layer_is_wrong(tmp_path):
    """E-SHAPE-002 inside `llama-block` with `w-down` transposed: the message Neovim
    shows names `w-down` and ends with the help, the layer's argument shapes (issue 33)."""
    good = "           :w-down (normal [hidden width] :std 0.02))"
    source = (ROOT / "examples" / "llama.sx").read_text()
    assert good in source
    file = tmp_path / "llama.sx"
    file.write_text(source.replace(good, good.replace("[hidden width]", "[width hidden]")))
    result = run_neovim(tmp_path, {"file": str(file), "hovers": []})
    [d] = result["opened"]["diagnostics"]
    assert str(d["code"]) == "E-SHAPE-002" and d["lnum"] + 1 == 75, d
    message, help_line = d["message"].split("\n")
    assert message.startswith("in `llama-block` (standard library): `matmul` of"), message
    assert message.endswith("is the argument `w-down`"), message
    assert help_line.startswith("help: `(llama-block x positions") and "w-down [128 352] f32" in help_line, help_line
