"""The editor set-ups docs/editors-setup.md gives that no test runs in the editor itself:
Helix (not packaged for Debian 12) is checked as the TOML it is."""
from __future__ import annotations

import re
import tomllib

from helpers import ROOT


def test_the_helix_set_up_is_valid_toml_for_sexpgpu_lsp():
    docs = (ROOT / "docs" / "editors-setup.md").read_text()
    helix = docs[docs.index("## Helix"):]
    [block] = re.findall(r"```toml\n(.*?)```", helix, re.S)[:1]
    config = tomllib.loads(block)
    assert config["language-server"]["sexpgpu"] == {"command": "sexpgpu", "args": ["lsp"]}
    [language] = config["language"]
    assert language["file-types"] == ["sx"] and language["comment-token"] == ";"
    assert language["language-servers"] == ["sexpgpu"]


def test_the_docs_agree_that_the_language_server_reads_local_checkpoints():
    """One truth (issue 33): the server reads a `:pretrained` checkpoint's headers where the
    file is on its machine (tests/test_lsp_pretrained.py shows it); no page says otherwise."""
    denials = re.compile(r"(the )?language server (never opens?|opens? no file|does not (open|read))", re.I)
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = " ".join(page.read_text().split())
        assert not denials.search(text), f"{page.name}: {denials.search(text).group(0)!r}"
    editor = " ".join((ROOT / "docs" / "editor.md").read_text().split())
    assert "reads its safetensors headers and index" in editor
