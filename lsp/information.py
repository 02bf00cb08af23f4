"""Information about the code: hover, signature help, inlay hints and
semantic tokens (LSP 3.17, "Language Features"), all from `sexpgpu_lang.ide`
on the analysis `lsp.handlers` finds: hover and signature help may answer
from an older version's while the request's own is checked; inlay hints
and semantic tokens (the whole document) wait for their version's.
"""
from __future__ import annotations

from lsprotocol import types

from sexpgpu_lang import ide

from . import convert
from .handlers import DocumentRequest, on_document


def register(server) -> None:
    """Register the information handlers on `server`."""

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @on_document()
    def hover(ls, params: types.HoverParams, doc: DocumentRequest):
        info = ide.hover(doc.index, doc.offset)
        return convert.to_lsp_hover(doc.positions, info, ls.config.hover_markdown) if info is not None else None

    @server.feature(types.TEXT_DOCUMENT_SIGNATURE_HELP,
                    types.SignatureHelpOptions(trigger_characters=["(", " "], retrigger_characters=[":"]))
    @on_document()
    def signature_help(ls, params: types.SignatureHelpParams, doc: DocumentRequest):
        sig = ide.signature_help(doc.index, doc.offset)
        return convert.to_lsp_signature_help(sig, ls.config.signature_markdown) if sig is not None else None

    @server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
    @on_document(list, fresh=True)
    def inlay_hints(ls, params: types.InlayHintParams, doc: DocumentRequest):
        return convert.to_lsp_inlay_hints(doc.positions, ide.inlay_hints(doc.index, doc.span))

    @server.feature(types.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, convert.semantic_legend())
    @on_document(lambda: types.SemanticTokens(data=[]), fresh=True)
    def semantic_tokens(ls, params: types.SemanticTokensParams, doc: DocumentRequest):
        return convert.to_lsp_semantic_tokens(doc.positions, ide.semantic_tokens(doc.index))
