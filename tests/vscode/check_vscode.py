"""VS Code itself as the client (issue 21): code-server (VS Code in a browser) with the
built `sexpgpu.vsix` installed, driven in Debian's chromium by puppeteer-core.

Not part of the unit tests (its name is not `test_*.py`): `.ci/run` runs it after
them, once `tests/vscode/install.sh` has installed code-server, Node 24 and
chromium, and `vscode-extension/ci.sh` has built the .vsix:

    .venv/bin/pytest -q tests/vscode/check_vscode.py

The workspace is a temporary folder with a case file and a `.venv/bin/sexpgpu`
that runs this checkout's server; the PATH code-server and its extension host
see does not hold `sexpgpu`, so the extension must find it in the workspace's
`.venv` (item 15). `drive.mjs` opens the case, reads the Problems panel, the
inlay hints and a hover, applies the quick fix and waits for the problem to go;
these tests assert on what it saw. With SEXPGPU_VSCODE_DEBUG=1 the driver also
saves a screenshot of the Problems panel and the DOM it read, beside its result.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import sexpgpu_program, write_case  # noqa: E402

HERE = Path(__file__).resolve().parent
MODULES = HERE / "node_modules"
NODE = HERE / ".node" / "node_modules" / "node" / "bin" / "node"
CODE_SERVER = MODULES / "code-server" / "out" / "node" / "entry.js"
VSIX = ROOT / "vscode-extension" / "sexpgpu.vsix"
START_TIMEOUT_S = 120
DRIVE_TIMEOUT_S = 300
WAIT_MS = 60_000

pytestmark = pytest.mark.slow


def needed() -> tuple[str, str]:
    chromium = shutil.which("chromium")
    missing = [str(p) for p in (NODE, CODE_SERVER) if not p.exists()] + ([] if chromium else ["chromium"])
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run `bash tests/vscode/install.sh`", pytrace=False)
    if not VSIX.exists():
        pytest.fail(f"no {VSIX}: run `bash vscode-extension/ci.sh`", pytrace=False)
    program = sexpgpu_program()
    if not program:
        pytest.fail("no `sexpgpu` program beside the test's Python", pytrace=False)
    return chromium, program


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vscode(tmp_path_factory):
    chromium, program = needed()
    root = tmp_path_factory.mktemp("vscode")
    workspace = root / "workspace"
    (workspace / ".venv" / "bin").mkdir(parents=True)
    (workspace / ".venv" / "bin" / "sexpgpu").symlink_to(program)
    case = write_case("gen-002-dtype-drift.sx", workspace)
    data, extensions = root / "data", root / "extensions"
    (data / "User").mkdir(parents=True)
    (data / "User" / "settings.json").write_text(json.dumps({
        "workbench.startupEditor": "none", "security.workspace.trust.enabled": False,
        "editor.inlayHints.enabled": "on", "telemetry.telemetryLevel": "off",
        "workbench.tips.enabled": False, "extensions.autoCheckUpdates": False,
    }))
    # Node 24 first, the venv nowhere: the extension host finds the server only in the workspace's .venv.
    env = {"PATH": os.pathsep.join([str(NODE.parent), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": str(root / "home"), "LANG": "C.UTF-8"}
    base = [str(NODE), str(CODE_SERVER), "--user-data-dir", str(data), "--extensions-dir", str(extensions)]
    installed = subprocess.run(base + ["--install-extension", str(VSIX)], env=env, capture_output=True, text=True,
                               timeout=START_TIMEOUT_S)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    port = free_port()
    log = (root / "code-server.log").open("w")
    server = subprocess.Popen(base + ["--auth", "none", "--bind-addr", f"127.0.0.1:{port}", "--disable-telemetry",
                                      "--disable-update-check", "--disable-workspace-trust", str(workspace)],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (root / "code-server.log").read_text()
                time.sleep(0.2)
        source = case.read_text()
        line = next(i for i, t in enumerate(source.splitlines()) if "(cast (where (= column at) guess row) :f32)" in t)
        out = root / "vscode-result.json"
        config = {"url": f"http://127.0.0.1:{port}/?folder={workspace}", "file": case.name, "out": str(out),
                  "chromium": chromium, "timeout_ms": WAIT_MS, "line": line + 1,
                  "column": source.splitlines()[line].index("(cast") + 1, "debug": bool(os.environ.get("SEXPGPU_VSCODE_DEBUG"))}
        (root / "drive.json").write_text(json.dumps(config))
        drive = subprocess.run([str(NODE), str(HERE / "drive.mjs"), str(root / "drive.json")], cwd=HERE, env=env,
                               capture_output=True, text=True, timeout=DRIVE_TIMEOUT_S)
        context = f"drive exited {drive.returncode}\n{drive.stdout}\n{drive.stderr}\nscreenshot: {out.with_suffix('.png')}"
        assert out.exists(), context
        result = json.loads(out.read_text())
        result["context"] = context + "\ncode-server log:\n" + (root / "code-server.log").read_text()[-4000:]
        yield result
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_the_problems_panel_shows_the_diagnostic_its_related_places_and_help(vscode):
    assert "error" not in vscode, f"{vscode['error']}\n{vscode['context']}"
    problems = vscode["problems"]
    [row] = [p for p in problems if "E-GEN-002" in p]
    assert "`:step` returns `:row` as `[64 8] f32`" in row and "[Ln 40, Col 24]" in row, problems
    assert any(p.endswith("[Ln 40, Col 24]\n:\nhelp: cast it back: `(cast ... :i32)`") for p in problems), problems
    assert any(p.startswith("gen-002-dtype-drift.sx\n[Ln 31, Col 17]") and "`:init` made `:row` here" in p
               for p in problems), problems
    assert "help:" not in row  # VS Code shows related information: the help is not repeated in the message


def test_inlay_shapes_hover_and_the_quick_fix(vscode):
    assert "error" not in vscode, f"{vscode['error']}\n{vscode['context']}"
    assert ": [64 8 64] f32" in vscode["inlay"], vscode["inlay"]  # `(here ...)` in the model, as an inlay hint
    assert "[64 8] f32" in vscode["hover"], vscode["hover"]
    assert any("remove the cast of `:row` to f32" in f for f in vscode["fixes"]), vscode["fixes"]
    assert vscode["fixed_line"].strip() == "(list :row (where (= column at) guess row)", vscode["fixed_line"]
