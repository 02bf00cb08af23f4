"""Navigation: definition, references, document highlight, rename (with
prepareRename), document symbols and folding ranges (LSP 3.17, "Language
Features"). Each handler reads the analysis `lsp.handlers` finds and asks
`sexpgpu_lang.ide`: definition, references and highlights may answer from
an older version's while the request's own is checked; rename (with
prepareRename), symbols and folding ranges wait for their version's.
"""
from __future__ import annotations

from lsprotocol import types

from sexpgpu_lang import ide

from . import convert
from .guard import ContentModified, Refused, report
from .handlers import DocumentRequest, on_document, with_document


def register(server) -> None:
    """Register the navigation handlers on `server`."""

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    @on_document(list)
    def definition(ls, params: types.DefinitionParams, doc: DocumentRequest):
        node = doc.index.node_at(doc.offset)
        return convert.to_lsp_location_links(doc.positions, doc.uri, node.span if node else None,
                                             ide.definition(doc.index, doc.offset))

    @server.feature(types.TEXT_DOCUMENT_REFERENCES)
    @on_document(list)
    def references(ls, params: types.ReferenceParams, doc: DocumentRequest):
        include = params.context.include_declaration if params.context else True
        return convert.to_lsp_locations(doc.positions, doc.uri, ide.references(doc.index, doc.offset, include))

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
    @on_document(list)
    def highlight(ls, params: types.DocumentHighlightParams, doc: DocumentRequest):
        return convert.to_lsp_highlights(doc.positions, ide.highlights(doc.index, doc.offset))

    @server.feature(types.TEXT_DOCUMENT_PREPARE_RENAME)
    @on_document(fresh=True)
    def prepare_rename(ls, params: types.PrepareRenameParams, doc: DocumentRequest):
        span = ide.prepare_rename(doc.index, doc.offset)
        return doc.positions.range(span) if span is not None else None

    @with_document(fresh=True)
    def rename_edit(ls, params: types.RenameParams, doc: DocumentRequest):
        edits = ide.rename(doc.index, doc.offset, params.new_name)
        return convert.to_lsp_workspace_edit(doc.positions, doc.uri, edits)

    @server.feature(types.TEXT_DOCUMENT_RENAME)
    async def rename(ls, params: types.RenameParams):
        # Not `guarded`: a name that cannot be renamed is answered with an
        # error the client shows (LSP 3.17, "Rename Request"), as is a
        # version superseded before its check finished (ContentModified);
        # other errors are logged and answered with no edit.
        try:
            return await rename_edit(ls, params)
        except ide.RenameError as e:
            raise Refused(str(e)) from None
        except ContentModified:
            raise
        except Exception as exc:
            report(ls, "rename", exc)
            return None

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    @on_document(list, fresh=True)
    def symbols(ls, params: types.DocumentSymbolParams, doc: DocumentRequest):
        return convert.to_lsp_symbols(doc.positions, ide.document_symbols(doc.index))

    @server.feature(types.TEXT_DOCUMENT_FOLDING_RANGE)
    @on_document(list, fresh=True)
    def folding(ls, params: types.FoldingRangeParams, doc: DocumentRequest):
        return convert.to_lsp_folding_ranges(doc.positions, ide.folding_ranges(doc.index))
