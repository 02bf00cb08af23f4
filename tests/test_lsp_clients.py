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


def start_as(name: str, capabilities: dict) -> RawClient:
    c = RawClient()
    c.request("initialize", {"processId": None, "rootUri": None, "capabilities": capabilities,
                             "clientInfo": {"name": name, "version": "1"}})
    c.send("initialized", {}, request=False)
    return c


def test_markdown_and_related_information_for_a_client_that_declares_them():
    c = start_as("Visual Studio Code", {"textDocument": {"hover": {"contentFormat": ["markdown", "plaintext"]},
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


@pytest.mark.parametrize("name", ["Neovim", None])
def test_help_in_the_message_for_a_client_not_known_to_show_related_information(name):
    """Neovim (0.7 to 0.11) declares `relatedInformation` and shows only the message
    (issue 33): the help ends the message; the related places are still sent."""
    caps = {"textDocument": {"publishDiagnostics": {"relatedInformation": True}}}
    c = start_as(name, caps) if name else start(caps)
    try:
        [d] = open_doc(c, "file:///work/cast.sx", CAST)["params"]["diagnostics"]
        first, help_line = d["message"].split("\n")
        assert first.startswith("`:step` returns `:row` as") and help_line.startswith("help: cast it back")
        assert [r["message"] for r in d["relatedInformation"]] == ["`:init` made `:row` here"]
    finally:
        c.close()


def test_a_request_whose_params_do_not_parse_is_answered_with_invalid_params(eglot):
    """JSON-RPC 2.0: error -32602 under the request's id (issue 33: pygls showed a
    message and never answered, so Neovim waited 15 s); the server goes on."""
    text = fixture_text()
    uri = "file:///work/bad-params.sx"
    open_doc(eglot, uri, text)
    before = len([m for m in eglot.messages if m.get("method") == "window/showMessage"])
    got = eglot.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": "three"}})
    assert got["error"]["code"] == -32602, got
    assert got["error"]["message"].startswith("invalid params for textDocument/hover: "), got
    got = eglot.request("textDocument/completion", {"textDocument": uri})
    assert got["error"]["code"] == -32602, got
    assert eglot.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                "position": pos(text, "(cast trip", 1)})["result"]
    assert len([m for m in eglot.messages if m.get("method") == "window/showMessage"]) == before
    assert "Traceback" not in eglot.stderr.decode()


def test_plain_text_signature_help_and_completion_documentation_for_eglot(eglot):
    """eglot 1.9 names no `documentationFormat` for completion or signature help: both
    come as plain text, without backticks (issue 33), as its hovers do."""
    text = fixture_text()
    uri = "file:///work/plain.sx"
    open_doc(eglot, uri, text)
    got = eglot.request("textDocument/signatureHelp", {"textDocument": {"uri": uri},
                                                       "position": pos(text, "(cast trip :i32)", len("(cast tr"))})
    [sig] = got["result"]["signatures"]
    assert sig["label"] == "(cast x :dtype)"
    assert sig["documentation"]["kind"] == "plaintext" and "`" not in sig["documentation"]["value"], sig
    got = eglot.request("textDocument/completion", {"textDocument": {"uri": uri},
                                                    "position": pos(text, "(cast trip :i32)", 1)})
    docs = [i["documentation"] for i in got["result"]["items"] if i.get("documentation")]
    assert docs and all(d["kind"] == "plaintext" and "`" not in d["value"] for d in docs), docs[:3]
