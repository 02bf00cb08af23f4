"""Writing code: completion, formatting of a document or a range, and quick
fixes (LSP 3.17, "Completion Request", "Document Formatting Request",
"Document Range Formatting Request", "Code Action Request").

Completion reads the analysis `lsp.handlers` finds (an older version's
while the request's own is checked: then the list is incomplete, and the
client asks again), quick fixes their version's; formatting, on a query
thread, uses `sexpgpu_lang.format` on the document's text and answers
the changed lines only, never a NUL or a lone surrogate (which eglot
refuses); a file with a syntax error is left as it is (no edits), since
recovery's guesses must not become text.
"""
from __future__ import annotations

from lsprotocol import types

from sexpgpu_lang import ide
from sexpgpu_lang.format import Layout, format_range, format_text, minimal_edits
from sexpgpu_lang.source import Span

from . import convert
from .guard import guarded
from .handlers import DocumentRequest, on_document


def register(server) -> None:
    """Register the editing handlers on `server`."""

    @server.feature(types.TEXT_DOCUMENT_COMPLETION,
                    types.CompletionOptions(trigger_characters=["(", ":"]))
    @on_document(lambda: types.CompletionList(is_incomplete=True, items=[]))
    def completion(ls, params: types.CompletionParams, doc: DocumentRequest):
        found = ide.completions(doc.index, doc.offset)
        if found is None:
            return None   # (an empty list, incomplete: the client asks again as the user types)
        answer = convert.to_lsp_completions(doc.positions, found, ls.config.completion_markdown)
        answer.is_incomplete = doc.stale   # from an older version's analysis: the client asks again as the user types
        return answer

    def edit_if_changed(ls, doc, found):
        """The edits putting `found`'s text (a span and its new text) in place, the changed
        lines only (`minimal_edits`), none holding text the client cannot take
        (`convert.sendable`); none when there is nothing to format or nothing changes."""
        if found is None:
            return []
        where, new = found
        old = doc.text[where.start:where.end]
        if old == new:
            return []
        edits = [ide.Edit(Span(where.start + s.start, where.start + s.end), t)
                 for s, t in minimal_edits(old, new, convert.sendable)]
        return convert.to_lsp_text_edits(doc.positions(ls.encoding), edits)

    def format_whole(ls, doc):
        new = format_text(doc.text, Layout(ls.config.format_width))
        return edit_if_changed(ls, doc, None if new is None else (Span(0, len(doc.text)), new))

    @server.feature(types.TEXT_DOCUMENT_FORMATTING)
    @guarded(list)
    async def formatting(ls, params: types.DocumentFormattingParams):
        doc = ls.store.get(params.text_document.uri)
        return [] if doc is None else await ls.off_loop(format_whole, ls, doc)

    def format_part(ls, doc, rng):
        span = doc.positions(ls.encoding).span(rng)
        return edit_if_changed(ls, doc, format_range(doc.text, span.start, span.end, Layout(ls.config.format_width)))

    @server.feature(types.TEXT_DOCUMENT_RANGE_FORMATTING)
    @guarded(list)
    async def range_formatting(ls, params: types.DocumentRangeFormattingParams):
        doc = ls.store.get(params.text_document.uri)
        return [] if doc is None else await ls.off_loop(format_part, ls, doc, params.range)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
    @on_document(list, fresh=True)
    def code_actions(ls, params: types.CodeActionParams, doc: DocumentRequest):
        only = params.context.only if params.context else None
        if only and not any(str(k).startswith("quickfix") for k in only):
            return []
        style = ls.config.diagnostic_style(pulled=not ls.config.push)
        return [convert.to_lsp_code_action(doc.positions, doc.uri, f, *style)
                for f in ide.quick_fixes(doc.index, doc.span)]
