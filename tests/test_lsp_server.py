"""The language server end to end: a real LSP client (pytest-lsp) drives
`python -m lsp` over stdio, one server for the whole module.

The client declares Neovim 0.7's capabilities (it does not pull
diagnostics, so the server publishes them). The logic behind each feature
is tested in test_ide.py and test_format.py; these tests check that each
feature reaches a client, with the right ranges, and that diagnostics
follow the edits.
"""
from __future__ import annotations

import asyncio
import itertools

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from helpers import ROOT, fixture_text, variant
from lsp_client import Doc, apply_edits, client_fixture, published
from sexpgpu_lang import analyze
from sexpgpu_lang.format import format_text

pytestmark = pytest.mark.asyncio(loop_scope="module")

_uris = (f"file:///work/run-{i}.sx" for i in itertools.count())


client = client_fixture(client_capabilities("neovim@v0.7.0"))


def open_doc(client: LanguageClient, text: str | None = None) -> Doc:
    return Doc(client, next(_uris), fixture_text() if text is None else text)


# --------------------------------------------------------------------------- diagnostics


async def test_capabilities_list_every_feature(client: LanguageClient):
    caps = client.server_capabilities  # type: ignore[attr-defined]
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    for name in ("hover_provider", "definition_provider", "references_provider", "rename_provider",
                 "document_symbol_provider", "document_highlight_provider", "folding_range_provider",
                 "completion_provider", "signature_help_provider", "document_formatting_provider",
                 "document_range_formatting_provider", "semantic_tokens_provider", "code_action_provider",
                 "inlay_hint_provider", "diagnostic_provider"):
        assert getattr(caps, name), name
    assert caps.position_encoding == types.PositionEncodingKind.Utf16


async def test_diagnostics_on_open_carry_code_link_and_related(client: LanguageClient):
    doc = open_doc(client, variant("(list :row (where (= column at) guess row)",
                                   "(list :row (cast (where (= column at) guess row) :f32)"))
    got = await published(client, doc.uri, 1)
    [d] = got.diagnostics
    assert d.code == "E-GEN-002" and d.severity == types.DiagnosticSeverity.Error and d.source == "sexpgpu"
    assert d.range.start == doc.at("(cast (where")
    assert d.code_description.href.endswith("docs/errors.md#e-gen-002")
    made = [r for r in d.related_information if "`:init` made `:row` here" in r.message]
    assert made and made[0].location.range.start == doc.at(":row (field batch :row)")
    # A client not known to show related information (Neovim shows only the message) gets
    # the help as the message's last line, not as a related entry (issue 33).
    assert d.message.split("\n")[-1].startswith("help: cast it back"), d.message
    assert not any(r.message.startswith("help:") for r in d.related_information)


async def test_diagnostics_follow_edits_that_introduce_and_fix_gen_002(client: LanguageClient):
    doc = open_doc(client)
    assert (await published(client, doc.uri, 1)).diagnostics == ()
    # make :step return the row as f32: E-GEN-002 at the entry
    v2 = doc.change("guess row)\n                  :stride", "guess (cast row :f32))\n                  :stride")
    got = await published(client, doc.uri, v2)
    assert [d.code for d in got.diagnostics] == ["E-GEN-002"]
    assert "`:step` returns `:row` as `[64 8] f32`, but `:init` made it `[64 8] i32`" in got.diagnostics[0].message
    # apply the server's quick fix: cast back to the dtype :init made
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc.id, range=got.diagnostics[0].range,
        context=types.CodeActionContext(diagnostics=got.diagnostics)))
    [fix] = [a for a in actions if a.title.startswith("cast")]
    assert fix.kind == types.CodeActionKind.QuickFix and fix.diagnostics[0].code == "E-GEN-002"
    v3 = doc.edit(fix.edit.changes[doc.uri])
    assert (await published(client, doc.uri, v3)).diagnostics == ()
    # break it again with a weak float, then undo by hand
    fixed = "(cast (where (= column at) guess (cast row :f32)) :i32)"
    assert fixed in doc.text
    v4 = doc.change(fixed, "(+ (where (= column at) guess row) 0.5)")
    assert [d.code for d in (await published(client, doc.uri, v4)).diagnostics] == ["E-GEN-002"]
    v5 = doc.change("(+ (where (= column at) guess row) 0.5)", "(where (= column at) guess row)")
    assert (await published(client, doc.uri, v5)).diagnostics == ()


async def test_a_burst_of_edits_publishes_only_in_version_order(client: LanguageClient):
    doc = open_doc(client)
    first = len(client.published)
    value = "64"
    for i in range(30):  # toggle an error in and out, without waiting for the server
        new = "oops" if i % 2 == 0 else str(64 + i)
        doc.change(f"(def dim {value})", f"(def dim {new})")
        value = new
    got = await published(client, doc.uri, doc.version)
    assert [d.code for d in got.diagnostics] == [d.code for d in analyze(doc.text).diagnostics]
    versions = [p.version for p in client.published[first:] if p.uri == doc.uri]
    assert versions == sorted(versions) and versions[-1] == doc.version
    await asyncio.sleep(0.3)  # nothing older arrives late
    assert [p.version for p in client.published[first:] if p.uri == doc.uri][-1] == doc.version


async def test_close_clears_diagnostics(client: LanguageClient):
    doc = open_doc(client, variant("(argmax (model row))", "(argmx (model row))"))
    assert (await published(client, doc.uri, 1)).diagnostics
    n = len(client.published)
    doc.close()
    got = await published(client, doc.uri, after=n)
    assert got.diagnostics == ()


async def test_pull_diagnostics(client: LanguageClient):
    doc = open_doc(client, variant("(argmax (model row))", "(argmx (model row))"))
    report = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(text_document=doc.id))
    assert report.kind == "full" and [d.code for d in report.items] == ["E-NAME-001"]
    again = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=doc.id, previous_result_id=report.result_id))
    assert again.kind == "unchanged" and again.result_id == report.result_id
    doc.change("argmx", "argmax")
    fresh = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=doc.id, previous_result_id=report.result_id))
    assert fresh.kind == "full" and fresh.items == ()


async def test_any_text_gives_diagnostics_and_the_server_stays_up(client: LanguageClient):
    deep = "(def x " + "(+ 1 " * 600 + ")" * 601
    for text in ["(defgenerate :trips 6 :init (lambda (batch", "\x00\x01\ufffd(((]]]\"\n\r\r\n;", ")" * 50, deep, ""]:
        doc = open_doc(client, text)
        got = await published(client, doc.uri, 1)
        assert got.diagnostics or text == ""
        assert all(d.severity and d.message for d in got.diagnostics)
        for line in range(3):
            for character in (0, 3, 200):
                pos = types.Position(line=line, character=character)
                await client.text_document_hover_async(types.HoverParams(text_document=doc.id, position=pos))
                await client.text_document_completion_async(types.CompletionParams(text_document=doc.id, position=pos))
                await client.text_document_signature_help_async(
                    types.SignatureHelpParams(text_document=doc.id, position=pos))
        await client.text_document_semantic_tokens_full_async(types.SemanticTokensParams(text_document=doc.id))
        await client.text_document_formatting_async(types.DocumentFormattingParams(
            text_document=doc.id, options=types.FormattingOptions(tab_size=2, insert_spaces=True)))
    # a request about a document that is not open answers emptily
    missing = types.TextDocumentIdentifier(uri="file:///nowhere.sx")
    assert await client.text_document_hover_async(
        types.HoverParams(text_document=missing, position=types.Position(line=0, character=0))) is None


# --------------------------------------------------------------------------- information


async def test_hover_shows_type_and_doc(client: LanguageClient):
    doc = open_doc(client)
    hover = await client.text_document_hover_async(types.HoverParams(text_document=doc.id, position=doc.at("guess (sum", 2)))
    assert "guess: [64 1] i32" in hover.contents.value
    assert hover.range.start == doc.at("guess (sum")
    op = await client.text_document_hover_async(types.HoverParams(text_document=doc.id, position=doc.at("argmax")))
    assert "(argmax x :axis -1 :keepdims false)\n→ [64 8] i32" in op.contents.value
    assert "index of the largest entry" in op.contents.value


async def test_inlay_hints(client: LanguageClient):
    doc = open_doc(client)
    end = types.Position(line=doc.text.count("\n"), character=0)
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.id, range=types.Range(start=types.Position(line=0, character=0), end=end)))
    by_pos = {(h.position.line, h.position.character): h.label for h in hints}
    assert by_pos[(doc.at("guess (sum").line, doc.at("guess (sum", 5).character)] == ": [64 1] i32"
    assert by_pos[(doc.at(":row (field").line, doc.at(":row (field", 4).character)] == ": [64 8] i32"


async def test_signature_help(client: LanguageClient):
    doc = open_doc(client)
    help_ = await client.text_document_signature_help_async(types.SignatureHelpParams(
        text_document=doc.id, position=doc.at("[0] :axis 1)")))
    sig = help_.signatures[help_.active_signature]
    assert sig.label == "(take x indices :axis 0)"
    s, e = sig.parameters[help_.active_parameter].label
    assert sig.label[s:e] == "indices"


@pytest.mark.parametrize("delta,active", [(len("(repeat block layers :remat :dots"), ":remat policy"),
                                          (len("(repeat bl"), "model"), (len("(repeat block la"), "n")])
async def test_signature_help_inside_a_repeat_entry(client: LanguageClient, delta, active):
    """Inside `(repeat block layers :remat ...)` in `:params`: the entry's signature,
    not the enclosing `defmodel`'s (issue 33)."""
    doc = open_doc(client, (ROOT / "examples" / "llama.sx").read_text())
    help_ = await client.text_document_signature_help_async(types.SignatureHelpParams(
        text_document=doc.id, position=doc.at("(repeat block layers :remat :dots-saveable)", delta)))
    sig = help_.signatures[help_.active_signature]
    assert sig.label == "(repeat model n :remat policy)"
    s, e = sig.parameters[help_.active_parameter].label
    assert sig.label[s:e] == active


async def test_semantic_tokens(client: LanguageClient):
    doc = open_doc(client)
    legend = client.server_capabilities.semantic_tokens_provider.legend  # type: ignore[attr-defined]
    tokens = await client.text_document_semantic_tokens_full_async(types.SemanticTokensParams(text_document=doc.id))
    data = tokens.data
    assert len(data) % 5 == 0 and data
    line = char = 0
    decoded = []
    lines = doc.text.split("\n")
    for i in range(0, len(data), 5):
        dl, dc, length, kind, _mods = data[i:i + 5]
        line, char = line + dl, (char + dc if dl == 0 else dc)
        decoded.append((lines[line][char:char + length], legend.token_types[kind]))
    assert ("defgenerate", "keyword") in decoded and ("argmax", "function") in decoded
    assert ("student", "class") in decoded and (":i32", "type") in decoded


async def test_semantic_tokens_of_standard_library_layers_and_repeat(client: LanguageClient):
    """`llama-block` (prelude.sx) is a `function` of the `defaultLibrary`, as operations
    are; `repeat` in `:params` is a keyword of the language (issue 33)."""
    doc = open_doc(client, (ROOT / "examples" / "llama.sx").read_text())
    legend = client.server_capabilities.semantic_tokens_provider.legend  # type: ignore[attr-defined]
    data = (await client.text_document_semantic_tokens_full_async(
        types.SemanticTokensParams(text_document=doc.id))).data
    line = char = 0
    decoded = {}
    lines = doc.text.split("\n")
    for i in range(0, len(data), 5):
        dl, dc, length, kind, mods = data[i:i + 5]
        line, char = line + dl, (char + dc if dl == 0 else dc)
        decoded.setdefault(lines[line][char:char + length], set()).add(
            (legend.token_types[kind], tuple(m for b, m in enumerate(legend.token_modifiers) if mods >> b & 1)))
    assert decoded["llama-block"] == {("function", ("defaultLibrary",))}
    assert decoded["rms-norm"] == {("function", ("defaultLibrary",))}
    assert decoded["repeat"] == {("keyword", ())}


# --------------------------------------------------------------------------- navigation


async def test_definition_of_a_state_key_and_a_generated_name(client: LanguageClient):
    doc = open_doc(client)
    [link] = await client.text_document_definition_async(types.DefinitionParams(
        text_document=doc.id, position=doc.at("(getf state :row)", 13)))
    assert link.target_selection_range.start == doc.at(":row (field batch :row)")
    [link] = await client.text_document_definition_async(types.DefinitionParams(
        text_document=doc.id, position=doc.at("(field batch :sample)", 14)))
    assert link.target_selection_range.start == doc.at(":sample row")


async def test_references_highlight_and_rename(client: LanguageClient):
    doc = open_doc(client)
    pos = doc.at("(column (iota", 1)
    refs = await client.text_document_references_async(types.ReferenceParams(
        text_document=doc.id, position=pos, context=types.ReferenceContext(include_declaration=True)))
    assert len(refs) == 3
    marks = await client.text_document_document_highlight_async(types.DocumentHighlightParams(
        text_document=doc.id, position=pos))
    assert [m.kind for m in marks] == [types.DocumentHighlightKind.Write] + [types.DocumentHighlightKind.Read] * 2
    rng = await client.text_document_prepare_rename_async(types.PrepareRenameParams(text_document=doc.id, position=pos))
    assert rng.start == doc.at("column (iota")
    edit = await client.text_document_rename_async(types.RenameParams(text_document=doc.id, position=pos, new_name="col"))
    renamed = apply_edits(doc.text, edit.changes[doc.uri])
    assert renamed.count("(col (iota") == 1 and analyze(renamed).diagnostics == []
    with pytest.raises(Exception, match="built-in"):
        await client.text_document_rename_async(types.RenameParams(text_document=doc.id, position=pos, new_name="sum"))


async def test_document_symbols_and_folding(client: LanguageClient):
    doc = open_doc(client)
    symbols = await client.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=doc.id))
    assert [s.name for s in symbols] == ["vocab", "seq", "dim", "train", "student", "model", "defgenerate",
                                         "prepare", "objective", "run"]
    assert symbols[4].kind == types.SymbolKind.Class and symbols[4].children[0].name == "embed"
    folds = await client.text_document_folding_range_async(types.FoldingRangeParams(text_document=doc.id))
    assert (0, 3, types.FoldingRangeKind.Comment) in [(f.start_line, f.end_line, f.kind) for f in folds]
    assert (doc.at("(defgenerate").line, doc.at(":correct (mean").line) in [(f.start_line, f.end_line) for f in folds]


# --------------------------------------------------------------------------- writing


async def test_completion(client: LanguageClient):
    doc = open_doc(client)
    doc.change("(getf state :stride))))", "(getf state :))))")
    got = await client.text_document_completion_async(types.CompletionParams(
        text_document=doc.id, position=doc.at("(getf state :))))", 13)))
    assert {":row", ":stride"} <= {i.label for i in got.items}
    item = next(i for i in got.items if i.label == ":row")
    assert item.text_edit.range.start == doc.at("(getf state :))))", 12)
    doc.change(";; A student", ";; (getf state :")
    none = await client.text_document_completion_async(types.CompletionParams(
        text_document=doc.id, position=doc.at(";; (getf state :", 16)))
    assert none.items == ()


async def test_formatting_whole_and_range(client: LanguageClient):
    messy = "(def vocab   16)\n\n\n\n(def seq\n 8)\n(def dim (* vocab\n    seq))\n"
    doc = open_doc(client, messy)
    opts = types.FormattingOptions(tab_size=2, insert_spaces=True)
    edits = await client.text_document_formatting_async(types.DocumentFormattingParams(text_document=doc.id, options=opts))
    # spaces and blank lines go, the file's line breaks stay, indented by the rules
    assert apply_edits(messy, edits) == format_text(messy) == \
        "(def vocab 16)\n\n(def seq\n  8)\n(def dim (* vocab\n            seq))\n"
    edits = await client.text_document_range_formatting_async(types.DocumentRangeFormattingParams(
        text_document=doc.id, options=opts, range=types.Range(start=doc.at("(def seq"), end=doc.at("(def seq", 3))))
    assert apply_edits(messy, edits) == "(def vocab   16)\n\n\n\n(def seq\n  8)\n(def dim (* vocab\n    seq))\n"


async def test_formatting_answers_the_changed_lines_and_never_a_nul(client: LanguageClient):
    """Minimal edits (issue 33): lines the layout keeps are not sent back, so a NUL in a
    comment there does not travel (eglot refuses a reply holding one); a changed line
    holding a NUL is edited around it."""
    messy = "(def vocab   16)\n; keep \x00 this\n(def seq 8)\n(def dim (* vocab\n ; a \x00 b\n    seq))\n"
    doc = open_doc(client, messy)
    opts = types.FormattingOptions(tab_size=2, insert_spaces=True)
    edits = await client.text_document_formatting_async(types.DocumentFormattingParams(text_document=doc.id, options=opts))
    assert apply_edits(messy, edits) == format_text(messy)
    assert not any("\x00" in e.new_text for e in edits), edits
    assert all(e.range.start.line != 1 and e.range.start.line != 2 for e in edits), edits  # unchanged lines
    assert [(e.range.start.line, e.range.end.line) for e in edits][0] == (0, 1)  # the first line, whole


async def test_code_action_replaces_a_near_miss(client: LanguageClient):
    doc = open_doc(client, variant("(argmax (model row))", "(argmx (model row))"))
    got = await published(client, doc.uri, 1)
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc.id, range=got.diagnostics[0].range,
        context=types.CodeActionContext(diagnostics=got.diagnostics)))
    [action] = actions
    assert action.title == "replace `argmx` with `argmax`" and action.is_preferred
    assert analyze(apply_edits(doc.text, action.edit.changes[doc.uri])).diagnostics == []


@pytest.mark.parametrize("parens", ["\n                  )))", "\n)))", ")))"])
async def test_the_fix_returning_a_dropped_key_lands_under_the_first_key(client: LanguageClient, parens):
    """E-GEN-002 for a dropped `:stride`: "return `:stride` unchanged" puts it under `:row`,
    also when the list's closing brackets stand on a line of their own (issue 33)."""
    doc = open_doc(client, variant("\n                  :stride (getf state :stride))))", parens))
    [d] = (await published(client, doc.uri, 1)).diagnostics
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc.id, range=d.range, context=types.CodeActionContext(diagnostics=[d])))
    [action] = [a for a in actions if a.title == "return `:stride` unchanged"]
    fixed = apply_edits(doc.text, action.edit.changes[doc.uri])
    assert analyze(fixed).diagnostics == []
    lines = fixed.split("\n")
    row = next(i for i, line in enumerate(lines) if "(list :row (where" in line)
    if parens.startswith("\n"):
        assert lines[row + 1] == " " * lines[row].index(":row") + ":stride (getf state :stride)", lines[row:row + 3]
        assert lines[row + 2] == parens[1:], lines[row:row + 3]  # the brackets stay on their line
    else:
        assert lines[row].endswith(":stride (getf state :stride))))"), lines[row]


@pytest.mark.parametrize("old,new,code,title", [
    ("(list :sample row", "(metric :acc (mean (cast (= row truth) :f32)))\n              (list :sample row",
     "E-GEN-004", "return `:acc` from the generator and report it from `objective`"),
    ("(let* ((row (getf state :row))\n", "(counter :trips-run 1)\n          (let* ((row (getf state :row))\n",
     "E-CONTRACT-010", "move the counter into `prepare`"),
])
async def test_code_actions_for_generator_contracts(client: LanguageClient, old, new, code, title):
    doc = open_doc(client, variant(old, new))
    [d] = (await published(client, doc.uri, 1)).diagnostics
    assert d.code == code
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc.id, range=d.range, context=types.CodeActionContext(diagnostics=[d])))
    [action] = [a for a in actions if a.title == title]
    version = doc.edit(action.edit.changes[doc.uri])
    assert (await published(client, doc.uri, version)).diagnostics == ()
