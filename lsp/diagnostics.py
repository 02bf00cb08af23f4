"""Document sync and diagnostics.

* `didOpen`, `didChange` (incremental or full), `didClose` (LSP 3.17,
  "Text Document Synchronization") update the `DocumentStore`; open and
  change schedule a check whose diagnostics are published only if the
  document has not changed since (`SexpServer.diagnose_later`; a change
  cancels the check of the version before); close publishes an empty list
  and drops what only that document read of other files
  (`sexpgpu_lang.kept`), and the last close everything kept
  (`sexpgpu_lang.forget_files`).
* `textDocument/diagnostic` (LSP 3.17, "Pull Diagnostics") answers with the
  diagnostics of the latest version, awaiting its check; its `resultId` is
  the version's serial, so a client that sends back the same id gets
  "unchanged".
* `sexpgpu/memoryUsage` (the server's own request, as rust-analyzer's
  `rust-analyzer/memoryUsage`): what is kept of the files the documents
  read, with the documents that read each, in bytes (estimated).
"""
from __future__ import annotations

import asyncio

from lsprotocol import types

from sexpgpu_lang import forget_files, kept

from .convert import to_lsp_diagnostics
from .guard import guarded

#: rust-analyzer's `rust-analyzer/memoryUsage`, for this server: what it keeps of the files the
#: documents read (`sexpgpu_lang.kept.usage`) and the open documents. Params: none (`{}`).
MEMORY_USAGE = "sexpgpu/memoryUsage"


def register(server) -> None:
    """Register the sync and diagnostics handlers on `server`."""

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @guarded()
    def did_open(ls, params: types.DidOpenTextDocumentParams) -> None:
        doc = ls.store.open(params.text_document)
        ls.diagnose_later(doc.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @guarded()
    def did_change(ls, params: types.DidChangeTextDocumentParams) -> None:
        doc = ls.store.change(params, ls.encoding)
        if doc is not None:
            ls.diagnose_later(doc.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @guarded()
    def did_close(ls, params: types.DidCloseTextDocumentParams) -> None:
        ls.store.close(params.text_document.uri)   # (drops what only this document read)
        ls.clear(params.text_document.uri)
        if not ls.store.uris():
            forget_files()   # nothing any document read stays in memory

    @server.feature(MEMORY_USAGE)
    @guarded(dict)
    def memory_usage(ls, params) -> dict:
        return {**kept.usage(), "documents": sorted(ls.store.uris())}

    def empty_report():
        return types.RelatedFullDocumentDiagnosticReport(items=[])

    @server.feature(types.TEXT_DOCUMENT_DIAGNOSTIC,
                    types.DiagnosticOptions(identifier="sexpgpu", inter_file_dependencies=False,
                                            workspace_diagnostics=False))
    @guarded(empty_report)
    async def pull(ls, params: types.DocumentDiagnosticParams):
        analysis = None
        while analysis is None:   # the check of the latest version (of a newer one, if it is superseded)
            doc = ls.store.get(params.text_document.uri)
            if doc is None:
                return empty_report()
            done = ls.store.finished(doc.uri)
            analysis = done if done is not None and done.document.serial == doc.serial else \
                await asyncio.shield(asyncio.wrap_future(ls.store.start(doc)))
        doc = analysis.document
        result_id = str(doc.serial)
        if params.previous_result_id == result_id:
            return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        pm = doc.positions(ls.encoding)
        items = to_lsp_diagnostics(pm, doc.uri, analysis.result.diagnostics, analysis.failure,
                                   *ls.config.diagnostic_style(pulled=True))
        return types.RelatedFullDocumentDiagnosticReport(items=items, result_id=result_id)
