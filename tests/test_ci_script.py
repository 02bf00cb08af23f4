"""`.ci/run` means what it says: its steps are README.md's test command, one command a line,
and any step that fails fails the run.

bash's `set -e` does not stop a script at a failure inside an `&&` or `||` list (bash(1),
"The shell does not exit if the command that fails is part of ... any command executed in a
&& or || list except the command following the final && or ||"): a chain of steps could stop
at a failing install and still let the script go on to exit 0 with no test run. So each step
stands on its own line between the `# steps: begin` and `# steps: end` markers, and the test
below runs the script's own text in a scratch copy with one step at a time replaced by `false`.
"""
from __future__ import annotations

import re
import subprocess

import pytest

from helpers import ROOT

CI = ROOT / ".ci" / "run"
README = ROOT / "README.md"


def ci_text() -> str:
    return CI.read_text(encoding="utf-8")


def ci_steps() -> list[str]:
    """The lines between `.ci/run`'s step markers, comments and blank lines left out."""
    text = ci_text()
    body = text.split("# steps: begin\n", 1)[1].split("# steps: end\n", 1)[0]
    return [l for l in body.splitlines() if l.strip() and not l.lstrip().startswith("#")]


def readme_test_block() -> list[str]:
    """The lines of the README's test command: the ```sh block after "Install what the tests need"."""
    text = README.read_text(encoding="utf-8")
    after = text.split("Install what the tests need and run them", 1)[1]
    block = re.search(r"```sh\n(.*?)```", after, flags=re.S)
    assert block, "README.md's Set-up has no ```sh block after 'Install what the tests need'"
    return [l for l in block.group(1).splitlines() if l.strip()]


def test_the_steps_are_the_readmes_test_command():
    assert ci_steps() == readme_test_block(), \
        "README.md's test command and .ci/run's steps differ: keep the two the same, line for line"


def test_the_script_stops_at_the_first_failure():
    text = ci_text()
    assert re.search(r"^set -euo pipefail$", text, flags=re.M), ".ci/run must start with `set -euo pipefail`"


@pytest.mark.parametrize("line", ci_steps())
def test_each_step_is_one_command(line):
    # A list (`a && b`, `a || b`, `a; b`) or a background job hides the status of all but its
    # last command from `set -e`.
    for op in ("&&", "||", ";", " & "):
        assert op not in line.split("#", 1)[0], f"{line!r}: one command a line, no {op!r}"


def scratch_copy(tmp_path, failing: int):
    """`.ci/run`'s text with every step replaced by a line that records its number, except step
    `failing`, replaced by `false`; the shared-cases line after the steps records "cases"."""
    text = ci_text()
    head, rest = text.split("# steps: begin\n", 1)
    _, tail = rest.split("# steps: end\n", 1)
    log = tmp_path / "ran.log"
    lines = ["false" if i == failing else f"echo {i} >> {log}" for i in range(len(ci_steps()))]
    tail_lines = [f"echo cases >> {log}" if l.strip() and not l.startswith("#") else l
                  for l in tail.splitlines()]
    # `cd "$(dirname "$0")/.."` would leave the scratch dir: keep it, it only moves the shell.
    script = tmp_path / "ci" / "run"
    script.parent.mkdir()
    script.write_text(head + "\n".join(lines) + "\n" + "\n".join(tail_lines) + "\n", encoding="utf-8")
    return script, log


@pytest.mark.parametrize("failing", range(len(ci_steps())))
def test_a_failing_step_fails_the_run(tmp_path, failing):
    script, log = scratch_copy(tmp_path, failing)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    ran = log.read_text().split() if log.exists() else []
    assert proc.returncode != 0, f"step {failing} failed and the run still exited 0"
    assert ran == [str(i) for i in range(failing)], f"steps run after step {failing} failed: {ran}"


def test_with_no_failure_every_step_and_the_cases_run(tmp_path):
    script, log = scratch_copy(tmp_path, failing=-1)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().split() == [*map(str, range(len(ci_steps()))), "cases"]


@pytest.mark.parametrize("editor", ["nvim", "emacs"])
def test_an_editor_install_step_fails_when_the_editor_binary_fails(tmp_path, editor):
    """The install scripts' version line is no pipe (`x --version | head` under /bin/sh hides x's
    status): an editor binary on PATH that fails makes the step fail, so CI stops there."""
    fake = tmp_path / editor
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    fake.chmod(0o755)
    script = ROOT / "tests" / editor / "install.sh"
    r = subprocess.run(["sh", str(script)], capture_output=True, text=True,
                       env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert r.returncode != 0, (r.stdout, r.stderr)
