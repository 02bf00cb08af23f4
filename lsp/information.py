"""Information about the code: hover, signature help, inlay hints and
semantic tokens (LSP 3.17, "Language Features"), all from `sexpgpu_lang.ide`.
"""
from __future__ import annotations

from lsprotocol import types

from sexpgpu_lang import ide

from . import convert
from .guard import guarded


def register(server) -> None:
    """Register the information handlers on `server`."""

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @guarded()
    def hover(ls, params: types.HoverParams):
        a = ls.analysis(params.text_document.uri)
        if a is None:
            return None
        pm = a.document.positions(ls.encoding)
        info = ide.hover(a.index, pm.offset(params.position))
        return convert.to_lsp_hover(pm, info) if info is not None else None

    @server.feature(types.TEXT_DOCUMENT_SIGNATURE_HELP,
                    types.SignatureHelpOptions(trigger_characters=["(", " "], retrigger_characters=[":"]))
    @guarded()
    def signature_help(ls, params: types.SignatureHelpParams):
        a = ls.analysis(params.text_document.uri)
        if a is None:
            return None
        pm = a.document.positions(ls.encoding)
        sig = ide.signature_help(a.index, pm.offset(params.position))
        return convert.to_lsp_signature_help(sig) if sig is not None else None

    @server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
    @guarded(list)
    def inlay_hints(ls, params: types.InlayHintParams):
        a = ls.analysis(params.text_document.uri)
        if a is None:
            return []
        pm = a.document.positions(ls.encoding)
        return convert.to_lsp_inlay_hints(pm, ide.inlay_hints(a.index, pm.span(params.range)))

    @server.feature(types.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, convert.semantic_legend())
    @guarded(lambda: types.SemanticTokens(data=[]))
    def semantic_tokens(ls, params: types.SemanticTokensParams):
        a = ls.analysis(params.text_document.uri)
        if a is None:
            return types.SemanticTokens(data=[])
        return convert.to_lsp_semantic_tokens(a.document.positions(ls.encoding), ide.semantic_tokens(a.index))
