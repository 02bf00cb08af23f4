"""Emacs with eglot as an LSP client of `sexpgpu lsp` (issue 21): Debian's Emacs 28
and eglot 1.9, which declare neither Markdown hovers nor `relatedInformation`.

Emacs runs in batch mode with the documented set-up (`tests/emacs/init.el`, shown
verbatim in docs/editors-setup.md) and `tests/emacs/driver.el`: it opens a case
file (the project's copy of a `../shared/cases` file), so that `sexpgpu-mode`
starts eglot, and records what Emacs itself shows: flymake's diagnostics,
eldoc's hover, the buffer after the quick fix, a completion and formatting. These
tests assert on that record.

Emacs must be installed (`tests/emacs/install.sh`); without it the test fails
with that instruction rather than skipping. The server is reached only through
the `sexpgpu` program on PATH, as the documented set-up finds it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import sexpgpu_program, write_case
from sexpgpu_lang.format import format_text

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[1]
EMACS_DIR = Path(__file__).resolve().parent / "emacs"
#: The eglot set-up docs/editors-setup.md gives, verbatim.
DOCUMENTED_INIT = EMACS_DIR / "init.el"
#: Per wait inside Emacs (the connection, diagnostics, a hover, ...), and for the whole process.
WAIT_S = 30
PROCESS_TIMEOUT_S = 180


def emacs_program() -> str:
    emacs = shutil.which("emacs")
    if emacs is None:
        pytest.fail("`emacs` is not on PATH: install Emacs and eglot with `sh tests/emacs/install.sh` "
                    "(Debian's `emacs-nox` and `elpa-eglot`) to run the Emacs client test", pytrace=False)
    return emacs


def position_of(text: str, line_text: str, word: str) -> dict:
    """0-based position of `word` on the first line containing `line_text`."""
    for number, line in enumerate(text.splitlines()):
        if line_text in line:
            return {"line": number, "character": line.index(line_text) + line_text.index(word)}
    raise AssertionError(f"no line contains {line_text!r}")


def run_emacs(tmp_path: Path, config: dict) -> dict:
    emacs = emacs_program()
    program = sexpgpu_program()
    assert program, f"no `sexpgpu` program beside {sys.executable} or on PATH"
    out = tmp_path / "emacs-result.json"
    config_path = tmp_path / "emacs-config.json"
    config_path.write_text(json.dumps({"out": str(out), "timeout_s": WAIT_S, **config}))
    env = dict(os.environ, HOME=str(tmp_path / "home"), SEXPGPU_EMACS_CONFIG=str(config_path))
    env["PATH"] = os.pathsep.join([str(Path(program).parent), env.get("PATH", "")])
    (tmp_path / "home").mkdir()
    proc = subprocess.run([emacs, "--batch", "-q", "-l", str(DOCUMENTED_INIT), "-l", str(EMACS_DIR / "driver.el")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    context = f"emacs exited {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-6000:]}"
    assert out.exists(), f"the Emacs driver wrote no result\n{context}"
    result = json.loads(out.read_text())
    assert "error" not in result, f"the Emacs driver failed: {result['error']}\n{json.dumps(result, indent=1)}\n{context}"
    return result


def test_eglot_shows_diagnostics_hover_fix_completion_and_formatting(tmp_path):
    file = write_case("gen-002-dtype-drift.sx", tmp_path)
    # A NUL in a comment on a line formatting keeps: the formatting reply must not carry it
    # (Emacs's JSON parser refuses `\u0000`, and with it the whole reply; issue 33).
    first = file.read_text().split("\n", 1)[0]
    assert first.startswith(";")
    file.write_text(file.read_text().replace(first, first + " \x00", 1))
    source = file.read_text()
    bad = "(list :row (cast (where (= column at) guess row) :f32)"
    fix_at = position_of(source, bad, "(cast")
    assert fix_at["line"] == 39  # line 40, where the case expects E-GEN-002
    stride = position_of(source, "(getf state :stride)", ":stride")
    result = run_emacs(tmp_path, {
        "file": str(file),
        "hover": position_of(source, "(cast trip :i32)", "trip"),
        "fix": fix_at,
        "complete": {"line": stride["line"], "character": stride["character"] + len(":str")},
        "complete_deleted": "ide",
        "messy": {"old": "(def vocab 16)", "new": "(def   vocab\t16)"},
    })
    assert result["mode"] == "sexpgpu-mode"

    # Diagnostics where the case expects them, the help in the message (eglot 1.9 shows
    # no relatedInformation), and no control character or Markdown in sight.
    [d] = result["diagnostics"]
    assert (d["line"], d["column"], d["type"]) == (39, source.splitlines()[39].index("(cast"), "eglot-error")
    message, help_line = d["text"].split("\n")
    assert message.startswith("sexpgpu [E-GEN-002]: `:step` returns `:row` as `[64 8] f32`"), d["text"]
    assert help_line.startswith("help: ") and "i32" in help_line, d["text"]

    # Hover: plain text (eglot without markdown-mode asks for it), no backtick fences.
    assert result["hover"].startswith("trip: [] i64"), result["hover"]
    assert "`" not in result["hover"], result["hover"]

    # eldoc shows the signature of the call and the hover together (issue 33): the
    # documented mode composes eldoc's sources, where eglot's strategy shows one.
    assert result["eldoc_strategy"] == "eldoc-documentation-compose", result
    shown = "\n".join(result["eldoc"])
    assert "(cast x :dtype)" in shown and "trip: [] i64" in shown, result["eldoc"]

    # The quick fix removes the cast, and the diagnostics go.
    assert result["fixed_line"].strip() == "(list :row (where (= column at) guess row)"

    # Completion of `:str` replaces the word whole: `:stride`, not `::stride` or `:str:stride`.
    assert "(getf state :stride)" in result["completed_line"], result["completed_line"]

    # Formatting through eglot is the formatter's answer.
    assert "(def   vocab\t16)" in result["before_format"]
    assert result["formatted"] == format_text(result["before_format"])
    assert "\x00" in result["formatted"].split("\n", 1)[0]
    assert "(def vocab 16)" in result["formatted"]
    assert result["shutdown"] is True


def test_the_documented_emacs_setup_is_shown_verbatim():
    docs = (ROOT / "docs" / "editors-setup.md").read_text()
    assert DOCUMENTED_INIT.read_text().strip() in docs, "docs/editors-setup.md must show tests/emacs/init.el verbatim"
