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
