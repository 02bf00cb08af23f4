"""Navigation: definition, references, document highlight, rename (with
prepareRename), document symbols and folding ranges (LSP 3.17, "Language
Features"). Each handler reads the latest analysis and asks `sexpgpu_lang.ide`.
"""
from __future__ import annotations

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from sexpgpu_lang import ide

from . import convert
from .guard import guarded, report


def _at(ls, params):
    """(analysis, position map, offset) for a request with a position; None when the document is not open."""
    a = ls.analysis(params.text_document.uri)
    if a is None:
        return None
    pm = a.document.positions(ls.encoding)
    return a, pm, pm.offset(params.position)


def register(server) -> None:
    """Register the navigation handlers on `server`."""

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    @guarded(list)
    def definition(ls, params: types.DefinitionParams):
        found = _at(ls, params)
        if found is None:
            return []
        a, pm, offset = found
        node = a.index.node_at(offset)
        return convert.to_lsp_location_links(pm, a.document.uri, node.span if node else None,
                                             ide.definition(a.index, offset))

    @server.feature(types.TEXT_DOCUMENT_REFERENCES)
    @guarded(list)
    def references(ls, params: types.ReferenceParams):
        found = _at(ls, params)
        if found is None:
            return []
        a, pm, offset = found
        include = params.context.include_declaration if params.context else True
        return convert.to_lsp_locations(pm, a.document.uri, ide.references(a.index, offset, include))

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
    @guarded(list)
    def highlight(ls, params: types.DocumentHighlightParams):
        found = _at(ls, params)
        if found is None:
            return []
        a, pm, offset = found
        return convert.to_lsp_highlights(pm, ide.highlights(a.index, offset))

    @server.feature(types.TEXT_DOCUMENT_PREPARE_RENAME)
    @guarded()
    def prepare_rename(ls, params: types.PrepareRenameParams):
        found = _at(ls, params)
        if found is None:
            return None
        a, pm, offset = found
        span = ide.prepare_rename(a.index, offset)
        return pm.range(span) if span is not None else None

    @server.feature(types.TEXT_DOCUMENT_RENAME)
    def rename(ls, params: types.RenameParams):
        # Not `guarded`: a name that cannot be renamed is answered with an
        # error the client shows (LSP 3.17, "Rename Request"); other errors
        # are logged and answered with no edit.
        try:
            found = _at(ls, params)
            if found is None:
                return None
            a, pm, offset = found
            edits = ide.rename(a.index, offset, params.new_name)
            return convert.to_lsp_workspace_edit(pm, a.document.uri, edits)
        except ide.RenameError as e:
            raise JsonRpcException(str(e), code=int(types.LSPErrorCodes.RequestFailed)) from None
        except Exception as exc:
            report(ls, "rename", exc)
            return None

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    @guarded(list)
    def symbols(ls, params: types.DocumentSymbolParams):
        a = ls.analysis(params.text_document.uri)
        if a is None:
            return []
        return convert.to_lsp_symbols(a.document.positions(ls.encoding), ide.document_symbols(a.index))

    @server.feature(types.TEXT_DOCUMENT_FOLDING_RANGE)
    @guarded(list)
    def folding(ls, params: types.FoldingRangeParams):
        a = ls.analysis(params.text_document.uri)
        if a is None:
            return []
        return convert.to_lsp_folding_ranges(a.document.positions(ls.encoding), ide.folding_ranges(a.index))
