"""The server's parts without a client: `lsp/convert.py` (offsets to LSP
positions and back in each encoding, and the LSP records), the document
store, the settings, and the guard around handlers."""
from __future__ import annotations

import re

import pytest
from lsprotocol import types

from helpers import modules_after
from lsp.config import ServerConfig
from lsp.convert import UTF8, UTF16, UTF32, PositionMap, apply_change, to_lsp_diagnostic, to_lsp_semantic_tokens
from lsp import documents
from lsp.documents import Document, DocumentStore
from lsp.guard import guarded
from sexpgpu_lang import analyze, ide
from sexpgpu_lang.source import SourceText

TEXT = 'ab\r\n"é😀\t→" x\rlast\n\x0cform feed\u2028same line\n'


def pos(line, character):
    return types.Position(line=line, character=character)


@pytest.mark.parametrize("encoding", [UTF8, UTF16, UTF32])
def test_round_trip_and_agreement_with_the_front_end(encoding):
    pm = PositionMap(TEXT, encoding)
    src = SourceText(TEXT)
    for offset in range(len(TEXT) + 1):
        p = pm.position(offset)
        line, col = src.line_col(offset)
        assert p.line == line  # one line-break rule: \n, \r\n, \r and nothing else
        if TEXT[offset - 1:offset + 1] != "\r\n":
            assert pm.offset(p) == offset


def test_units_of_each_encoding():
    x_at = TEXT.index("x")
    assert PositionMap(TEXT, UTF32).position(x_at) == pos(1, 7)
    assert PositionMap(TEXT, UTF16).position(x_at) == pos(1, 8)   # the emoji is two units
    assert PositionMap(TEXT, UTF8).position(x_at) == pos(1, 13)   # é 2, emoji 4, arrow 3
    assert PositionMap(TEXT, "latin-1").encoding == UTF16  # unknown: LSP's default


def test_positions_out_of_range_clamp():
    pm = PositionMap(TEXT, UTF16)
    assert pm.offset(pos(0, 99)) == 2                      # past the line's end: the line's end
    assert pm.offset(pos(99, 0)) == len(TEXT)              # past the last line: the end
    assert pm.offset(pos(1, 3)) == TEXT.index("😀")        # inside the surrogate pair: the character's start
    assert pm.position(TEXT.index("\r\n") + 1) == pos(0, 2)  # between CR and LF: the line's end


def test_apply_change():
    rng = types.Range(start=pos(1, 2), end=pos(1, 4))      # the emoji, in UTF-16 units
    change = types.TextDocumentContentChangePartial(range=rng, text="!")
    assert apply_change(TEXT, change, UTF16) == TEXT.replace("😀", "!")
    assert apply_change(TEXT, types.TextDocumentContentChangeWholeDocument(text="new"), UTF16) == "new"


def test_diagnostic_record():
    text = "(def a 1)\n(def b (+ a c))\n"
    res = analyze(text)
    pm = PositionMap(text)
    lsp = [to_lsp_diagnostic(pm, "file:///x.sx", d) for d in res.diagnostics]
    unbound = next(d for d in lsp if d.code == "E-NAME-001")
    assert unbound.range == types.Range(start=pos(1, 12), end=pos(1, 13))
    assert unbound.code_description.href.endswith("docs/errors.md#e-name-001")
    assert unbound.source == "sexpgpu" and unbound.severity == types.DiagnosticSeverity.Error


def test_semantic_token_lengths_in_units():
    text = '(def s "😀")\n(def t 1)\n'
    ix = ide.index(analyze(text))
    data = to_lsp_semantic_tokens(PositionMap(text, UTF16), ide.semantic_tokens(ix)).data
    tokens = [data[i:i + 5] for i in range(0, len(data), 5)]
    string = tokens[2]
    assert string[:3] == [0, 2, 4]                          # `"😀"` is 4 UTF-16 units
    assert tokens[3][:2] == [1, 1]                          # next line, relative line and absolute start


# --------------------------------------------------------------------------- store, settings, guard


def test_store_applies_changes_and_keys_analyses_by_version():
    store = DocumentStore()
    doc = store.open(types.TextDocumentItem(uri="file:///a.sx", language_id="sexpgpu", version=1, text="(def a 1)\n"))
    first = store.analysis(doc.uri)
    assert first.document is doc and store.analysis(doc.uri) is first
    change = types.TextDocumentContentChangePartial(range=types.Range(start=pos(0, 7), end=pos(0, 8)), text="b")
    new = store.change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=doc.uri, version=2), content_changes=[change]), UTF16)
    assert new.text == "(def a b)\n" and new.serial > doc.serial and not store.is_latest(doc)
    assert "E-NAME-001" in [d.code for d in store.analysis(doc.uri).result.diagnostics]
    store.remember(first)  # a stale result is not kept
    assert store.analysis(doc.uri).document is new
    store.close(doc.uri)
    assert store.analysis(doc.uri) is None and store.get(doc.uri) is None


def test_settings_from_initialize():
    def params(diagnostic=None, **options):
        caps = types.ClientCapabilities(text_document=types.TextDocumentClientCapabilities(diagnostic=diagnostic))
        return types.InitializeParams(capabilities=caps, initialization_options=options or None)

    pulls = types.DiagnosticClientCapabilities()
    assert ServerConfig.from_initialize(params()).push
    assert not ServerConfig.from_initialize(params(pulls)).push
    assert ServerConfig.from_initialize(params(pulls, diagnostics="both")).push
    assert not ServerConfig.from_initialize(params(diagnostics="pull")).push
    assert ServerConfig.from_initialize(params(formatWidth=100)).format_width == 100
    bad = ServerConfig.from_initialize(params(formatWidth="wide", diagnostics=3))
    assert (bad.push, bad.format_width) == (ServerConfig().push, ServerConfig().format_width)


@pytest.mark.parametrize("formats,markdown", [
    (None, False), ([types.MarkupKind.Markdown, types.MarkupKind.PlainText], True),
    ([types.MarkupKind.PlainText], False), ([types.MarkupKind.PlainText, types.MarkupKind.Markdown], False),
])
def test_markup_and_related_information_follow_the_client(formats, markdown):
    td = types.TextDocumentClientCapabilities(
        hover=types.HoverClientCapabilities(content_format=formats),
        completion=types.CompletionClientCapabilities(
            completion_item=types.ClientCompletionItemOptions(documentation_format=formats)),
        signature_help=types.SignatureHelpClientCapabilities(
            signature_information=types.ClientSignatureInformationOptions(documentation_format=formats)),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(related_information=markdown))
    config = ServerConfig.from_initialize(types.InitializeParams(capabilities=types.ClientCapabilities(text_document=td)))
    assert (config.hover_markdown, config.completion_markdown, config.signature_markdown) == (markdown,) * 3
    assert config.related_pushed == markdown
    assert config.related_pulled == markdown  # a 3.17 client's pull capability does not say: as for published ones
    td.diagnostic = types.DiagnosticClientCapabilities(related_information=not markdown)
    config = ServerConfig.from_initialize(types.InitializeParams(capabilities=types.ClientCapabilities(text_document=td)))
    assert config.related_pulled == (not markdown)


@pytest.mark.parametrize("name,shown", [
    ("Visual Studio Code", True), ("code-server", True), ("Code - OSS", True), ("VSCodium", True),
    ("Neovim", False), ("Emacs", False), (None, False),
])
def test_the_help_goes_in_related_information_only_for_a_client_known_to_show_it(name, shown):
    td = types.TextDocumentClientCapabilities(
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(related_information=True))
    info = types.ClientInfo(name=name) if name else None
    config = ServerConfig.from_initialize(types.InitializeParams(
        capabilities=types.ClientCapabilities(text_document=td), client_info=info))
    assert config.diagnostic_style(pulled=False) == (True, not shown)
    td.publish_diagnostics = types.PublishDiagnosticsClientCapabilities(related_information=False)
    config = ServerConfig.from_initialize(types.InitializeParams(
        capabilities=types.ClientCapabilities(text_document=td), client_info=info))
    assert config.diagnostic_style(pulled=False) == (False, True)


def test_guard_logs_and_answers_emptily():
    logged = []

    class Server:
        def window_log_message(self, params):
            logged.append(params)

    @guarded(list)
    def broken(ls, params):
        raise KeyError("boom")

    assert broken(Server(), None) == []
    [message] = logged
    assert message.type == types.MessageType.Error
    assert "internal error in broken" in message.message and "boom" in message.message


def test_the_server_never_imports_jax():
    assert "jax" not in modules_after("import lsp.server; lsp.server.build_server()")


def test_a_front_end_failure_is_shown_not_hidden(monkeypatch):
    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(documents, "check", broken)
    a = documents.analyze_document(Document("file:///deep.sx", 1, "((((x))))"))
    assert a.result.diagnostics == [] and "RecursionError" in a.failure
    from lsp.convert import to_lsp_diagnostics
    [d] = to_lsp_diagnostics(PositionMap(a.document.text), a.document.uri, a.result.diagnostics, a.failure)
    assert d.severity == types.DiagnosticSeverity.Error and "could not check this file" in d.message
    assert ide.hover(a.index, 3) is None


def test_the_servers_position_map_has_the_front_ends_line_starts():
    # The server converts the front end's offsets with its own line index: both must cut lines alike.
    from sexpgpu_lang import SourceText
    for text in ["", "a", "\n", "\r", "\r\n", "a\nb\r\nc\rd", "\r\r\n\n\r", "x\u2028y\x0cz\n", "é\r\n😀\n"]:
        want = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]   # LSP's line breaks
        assert list(PositionMap(text).starts) == list(SourceText(text).line_starts) == want, repr(text)


class _Cycle:
    def __init__(self):
        self.me = self


def test_the_quiet_collector_freezes_after_a_check_and_collects_after_every_n_checks():
    import gc
    import weakref

    from lsp.server import QuietCollector
    collector = QuietCollector(idle_s=3600, every=2)
    try:
        dead = weakref.ref(_Cycle())
        collector.checked()              # freezes what is alive, the cycle too
        gc.collect()
        assert dead() is not None, "a frozen cycle is left to the quiet collection"
        collector.checked()              # the second check: the full collection
        assert dead() is None
    finally:
        gc.unfreeze()


def test_the_quiet_collector_collects_when_the_checks_pause():
    import gc
    import time
    import weakref

    from lsp.server import QuietCollector
    collector = QuietCollector(idle_s=0.2, every=1000)
    collector.start()
    try:
        dead = weakref.ref(_Cycle())
        collector.checked()
        deadline = time.monotonic() + 10
        while dead() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dead() is None, "no collection after the checks paused"
    finally:
        collector.stop()
        gc.unfreeze()
