"""Document sync and diagnostics.

* `didOpen`, `didChange` (incremental or full), `didClose` (LSP 3.17,
  "Text Document Synchronization") update the `DocumentStore`; open and
  change schedule a check whose diagnostics are published only if the
  document has not changed since (`SexpServer.diagnose_later`); close
  publishes an empty list, and the last close drops everything kept of the
  files the documents named (`sexpgpu_lang.forget_files`).
* `textDocument/diagnostic` (LSP 3.17, "Pull Diagnostics") answers with the
  diagnostics of the latest version; its `resultId` is the version's serial,
  so a client that sends back the same id gets "unchanged".
"""
from __future__ import annotations

from lsprotocol import types

from sexpgpu_lang import forget_files

from .convert import to_lsp_diagnostics
from .guard import guarded


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
        ls.store.close(params.text_document.uri)
        ls.clear(params.text_document.uri)
        if not ls.store.uris():
            forget_files()   # nothing the closed documents read stays in memory

    def empty_report():
        return types.RelatedFullDocumentDiagnosticReport(items=[])

    @server.feature(types.TEXT_DOCUMENT_DIAGNOSTIC,
                    types.DiagnosticOptions(identifier="sexpgpu", inter_file_dependencies=False,
                                            workspace_diagnostics=False))
    @guarded(empty_report)
    def pull(ls, params: types.DocumentDiagnosticParams):
        analysis = ls.analysis(params.text_document.uri)
        if analysis is None:
            return empty_report()
        doc = analysis.document
        result_id = str(doc.serial)
        if params.previous_result_id == result_id:
            return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        pm = doc.positions(ls.encoding)
        items = to_lsp_diagnostics(pm, doc.uri, analysis.result.diagnostics, analysis.failure,
                                   *ls.config.diagnostic_style(pulled=True))
        return types.RelatedFullDocumentDiagnosticReport(items=items, result_id=result_id)
