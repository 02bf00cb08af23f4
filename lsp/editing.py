"""Writing code: completion, formatting of a document or a range, and quick
fixes (LSP 3.17, "Completion Request", "Document Formatting Request",
"Document Range Formatting Request", "Code Action Request").

Formatting uses `sexpgpu_lang.format`; a file with a syntax error is left
as it is (no edits), since recovery's guesses must not become text.
"""
from __future__ import annotations

from lsprotocol import types

from sexpgpu_lang import ide
from sexpgpu_lang.format import Layout, format_range, format_text
from sexpgpu_lang.source import Span

from . import convert
from .guard import guarded


def register(server) -> None:
    """Register the editing handlers on `server`."""

    @server.feature(types.TEXT_DOCUMENT_COMPLETION,
                    types.CompletionOptions(trigger_characters=["(", ":"]))
    @guarded(lambda: types.CompletionList(is_incomplete=False, items=[]))
    def completion(ls, params: types.CompletionParams):
        a = ls.analysis(params.text_document.uri)
        if a is None:
            return types.CompletionList(is_incomplete=False, items=[])
        pm = a.document.positions(ls.encoding)
        found = ide.completions(a.index, pm.offset(params.position))
        if found is None:
            return types.CompletionList(is_incomplete=False, items=[])
        return convert.to_lsp_completions(pm, found)

    @server.feature(types.TEXT_DOCUMENT_FORMATTING)
    @guarded(list)
    def formatting(ls, params: types.DocumentFormattingParams):
        doc = ls.store.get(params.text_document.uri)
        if doc is None:
            return []
        new = format_text(doc.text, Layout(ls.config.format_width))
        if new is None or new == doc.text:
            return []
        pm = doc.positions(ls.encoding)
        return convert.to_lsp_text_edits(pm, [ide.Edit(Span(0, len(doc.text)), new)])

    @server.feature(types.TEXT_DOCUMENT_RANGE_FORMATTING)
    @guarded(list)
    def range_formatting(ls, params: types.DocumentRangeFormattingParams):
        doc = ls.store.get(params.text_document.uri)
        if doc is None:
            return []
        pm = doc.positions(ls.encoding)
        span = pm.span(params.range)
        found = format_range(doc.text, span.start, span.end, Layout(ls.config.format_width))
        if found is None:
            return []
        where, new = found
        if doc.text[where.start:where.end] == new:
            return []
        return convert.to_lsp_text_edits(pm, [ide.Edit(where, new)])

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
    @guarded(list)
    def code_actions(ls, params: types.CodeActionParams):
        a = ls.analysis(params.text_document.uri)
        if a is None:
            return []
        only = params.context.only if params.context else None
        if only and not any(str(k).startswith("quickfix") for k in only):
            return []
        pm = a.document.positions(ls.encoding)
        fixes = ide.quick_fixes(a.index, pm.span(params.range))
        return [convert.to_lsp_code_action(pm, a.document.uri, f) for f in fixes]
