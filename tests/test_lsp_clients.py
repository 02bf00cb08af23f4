"""What the server answers a client that declares less (issue 21): eglot 1.9's
capabilities, with no Markdown and no `relatedInformation`, and what the
server writes to stderr, which Neovim's lsp.log shows as errors.

The server (`python -m lsp`) is driven over stdio by a few lines of
JSON-RPC here, so that its stderr is the test's to read.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from helpers import ROOT, fixture_text, variant

pytestmark = pytest.mark.slow


WAIT_S = 30.0


class RawClient:
    """A JSON-RPC client of `python -m lsp` on pipes; stderr collected in `self.stderr`."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "lsp"], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages: list[dict] = []
        self.stderr = b""
        self._next = 0
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self):
        out = self.proc.stdout
        while True:
            length = None
            while (line := out.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length is None:
                return
            self.messages.append(json.loads(out.read(length)))

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr += line

    def send(self, method: str, params, request: bool = True) -> int | None:
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self._next += 1
            msg["id"] = self._next
        body = json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.proc.stdin.flush()
        return msg.get("id")

    def wait(self, pred) -> dict:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for m in self.messages:
                if pred(m):
                    return m
            time.sleep(0.01)
        raise AssertionError(f"no such message; got {self.messages}; stderr {self.stderr.decode()}")

    def request(self, method: str, params) -> dict:
        i = self.send(method, params)
        return self.wait(lambda m: m.get("id") == i and "method" not in m)

    def close(self) -> str:
        self.request("shutdown", None)
        self.send("exit", None, request=False)
        self.proc.wait(timeout=WAIT_S)
        time.sleep(0.1)
        return self.stderr.decode()


#: What eglot 1.9 (Debian bookworm's elpa-eglot) declares, as far as these answers go:
#: plain-text hovers without markdown-mode, no relatedInformation.
EGLOT_19 = {"textDocument": {"hover": {"dynamicRegistration": False, "contentFormat": ["plaintext"]},
                             "completion": {"completionItem": {"snippetSupport": False}},
                             "publishDiagnostics": {"relatedInformation": False}}}


def start(capabilities: dict) -> RawClient:
    c = RawClient()
    c.request("initialize", {"processId": None, "rootUri": None, "capabilities": capabilities})
    c.send("initialized", {}, request=False)
    return c


def open_doc(c: RawClient, uri: str, text: str) -> dict:
    c.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "sexpgpu", "version": 1,
                                                     "text": text}}, request=False)
    return c.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri)


def pos(text: str, needle: str, delta: int = 0) -> dict:
    offset = text.index(needle) + delta
    return {"line": text.count("\n", 0, offset), "character": offset - (text.rfind("\n", 0, offset) + 1)}


CAST = variant("(list :row (where (= column at) guess row)", "(list :row (cast (where (= column at) guess row) :f32)")


@pytest.fixture(scope="module")
def eglot():
    c = start(EGLOT_19)
    yield c
    c.close()


def test_plain_text_hover_for_a_client_without_markdown(eglot):
    text = fixture_text()
    open_doc(eglot, "file:///work/hover.sx", text)
    got = eglot.request("textDocument/hover", {"textDocument": {"uri": "file:///work/hover.sx"},
                                               "position": pos(text, "(cast trip :i32)", 2)})
    contents = got["result"]["contents"]
    assert contents["kind"] == "plaintext"
    assert "```" not in contents["value"] and "`" not in contents["value"]
    assert contents["value"].startswith("(cast x :dtype)\n→ [] i32")


def test_help_in_the_message_for_a_client_without_related_information(eglot):
    [d] = open_doc(eglot, "file:///work/cast.sx", CAST)["params"]["diagnostics"]
    assert d["code"] == "E-GEN-002" and "relatedInformation" not in d
    first, help_line = d["message"].split("\n")
    assert first.startswith("`:step` returns `:row` as")
    assert help_line.startswith("help: ") and "i32" in help_line


def test_markdown_and_related_information_for_a_client_that_declares_them():
    c = start({"textDocument": {"hover": {"contentFormat": ["markdown", "plaintext"]},
                                "publishDiagnostics": {"relatedInformation": True}}})
    try:
        [d] = open_doc(c, "file:///work/cast.sx", CAST)["params"]["diagnostics"]
        assert "\n" not in d["message"]
        assert [r["message"] for r in d["relatedInformation"]][-1].startswith("help: ")
        got = c.request("textDocument/hover", {"textDocument": {"uri": "file:///work/cast.sx"},
                                               "position": pos(CAST, "(cast trip :i32)", 2)})
        assert got["result"]["contents"]["kind"] == "markdown"
        assert got["result"]["contents"]["value"].startswith("```sexpgpu\n(cast x :dtype)")
    finally:
        c.close()


def test_stderr_stays_quiet_for_ordinary_protocol_events():
    """A refused rename, a cancel for a request already answered and notifications the
    server does not handle write nothing at WARNING or above (Neovim shows stderr as errors)."""
    c = start(EGLOT_19)
    text = fixture_text()
    uri = "file:///work/quiet.sx"
    open_doc(c, uri, text)
    refused = c.request("textDocument/rename", {"textDocument": {"uri": uri}, "position": pos(text, "(guess (sum", 1),
                                                "newName": "row"})
    assert refused["error"]["code"] == -32803
    assert refused["error"]["message"].startswith("`row` is already defined at line 36, column 19")
    c.send("$/cancelRequest", {"id": 12345}, request=False)
    c.send("textDocument/didSave", {"textDocument": {"uri": uri}}, request=False)
    c.send("workspace/didChangeConfiguration", {"settings": {}}, request=False)
    assert c.request("textDocument/hover", {"textDocument": {"uri": uri},
                                            "position": pos(text, "(cast trip", 1)})["result"]
    stderr = c.close()
    assert stderr == "", stderr
    assert not [m for m in c.messages if m.get("method") in ("window/showMessage", "window/logMessage")]
