"""Every conversion between the front end's data and LSP's, in one place.

The front end speaks code-point offsets into the text (`Span`); LSP speaks
positions: a 0-based line and a 0-based character counted in the position
encoding negotiated at `initialize` (LSP 3.17, "Position" and
"PositionEncodingKind": UTF-16 code units unless the client offered
`utf-8` or `utf-32`). Lines end at `\\n`, `\\r\\n` or `\\r` (LSP 3.17,
"Text Documents"), the same rule as `sexpgpu_lang.source.SourceText`.

`PositionMap` converts offsets and positions for one version of one
document; the `to_lsp_*` functions build lsprotocol objects from
`sexpgpu_lang` records (`Diagnostic`, and the `sexpgpu_lang.ide` results).
Nothing else in the server converts a position or builds a range.

Imports `sexpgpu_lang` and lsprotocol only; never JAX.
"""
from __future__ import annotations

import bisect
import re

from lsprotocol import types

from sexpgpu_lang.diagnostics import Diagnostic, doc_anchor
from sexpgpu_lang import ide
from sexpgpu_lang.render import DOCS_URL
from sexpgpu_lang.source import SourceText, Span


UTF8, UTF16, UTF32 = (types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16,
                      types.PositionEncodingKind.Utf32)


def _units(s: str, encoding: str) -> int:
    """The length of `s` in the encoding's code units."""
    if encoding == UTF32 or s.isascii():
        return len(s)
    if encoding == UTF8:
        return len(s.encode("utf-8", "surrogatepass"))
    return len(s) + sum(1 for c in s if ord(c) > 0xFFFF)


class PositionMap:
    """Offsets to LSP positions and back, for one text and one position encoding.

    `encoding` is a `PositionEncodingKind` value (`utf-8`, `utf-16`,
    `utf-32`); anything else is treated as UTF-16, LSP's default.
    """

    def __init__(self, text: str, encoding: str = UTF16):
        self.text = text
        self.encoding = encoding if encoding in (UTF8, UTF16, UTF32) else UTF16
        # The front end's line index (an array of offsets, built a chunk at a time): one list of
        # ints a line would take 36 bytes a line of a file of millions of lines.
        self.starts = SourceText(text).line_starts

    def line_end(self, line: int) -> int:
        """Offset just past the last character of `line`, before its line break."""
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        while end > self.starts[line] and self.text[end - 1] in "\r\n":
            end -= 1
        return end

    def line_char(self, offset: int) -> tuple[int, int]:
        """The 0-based line and character (in the encoding's units) of a code-point offset, clamped to the text."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        if offset > start and self.text[offset - 1] == "\r":
            offset -= 1  # between the CR and the LF of a CRLF: the line's end
        return line, _units(self.text[start:offset], self.encoding)

    def position(self, offset: int) -> types.Position:
        """The LSP position of a code-point offset (clamped to the text)."""
        line, char = self.line_char(offset)
        return types.Position(line=line, character=char)

    def offset(self, pos: types.Position) -> int:
        """The code-point offset of an LSP position. A line past the end gives the
        end of the text; a character past the line's end gives the line's end
        (LSP 3.17, "Position"); one inside a character counts as its start."""
        if pos.line < 0:
            return 0
        if pos.line >= len(self.starts):
            return len(self.text)
        start, end = self.starts[pos.line], self.line_end(pos.line)
        line = self.text[start:end]
        want = max(pos.character, 0)
        if self.encoding == UTF32 or line.isascii():
            return start + min(want, len(line))
        units = 0
        for i, c in enumerate(line):
            step = _units(c, self.encoding)
            if units + step > want:
                return start + i
            units += step
        return end

    def range(self, span: Span) -> types.Range:
        """The LSP range of a span."""
        return types.Range(start=self.position(span.start), end=self.position(span.end))

    def span(self, rng: types.Range) -> Span:
        """The span of an LSP range (start and end ordered)."""
        a, b = self.offset(rng.start), self.offset(rng.end)
        return Span(min(a, b), max(a, b))

    def line_of(self, offset: int) -> int:
        """The 0-based line of an offset."""
        return bisect.bisect_right(self.starts, max(0, min(offset, len(self.text)))) - 1


class Drift:
    """How a text differs from another (an older version of a document from the version a request is
    about): one changed region, `old[start:old_end]` became `new[start:new_end]`, the text before and
    after it the same (the longest common prefix, then suffix). Found a chunk at a time."""

    CHUNK = 1 << 16

    def __init__(self, old: str, new: str):
        n = min(len(old), len(new))
        start = 0
        while start < n and old[start:start + self.CHUNK] == new[start:start + self.CHUNK]:
            start += self.CHUNK
        start = min(start, n)
        while start < n and old[start] == new[start]:
            start += 1
        tail, most = 0, n - start
        while tail < most and old[len(old) - tail - self.CHUNK:len(old) - tail] == new[len(new) - tail - self.CHUNK:len(new) - tail] \
                and tail + self.CHUNK <= most:
            tail += self.CHUNK
        while tail < most and old[len(old) - tail - 1] == new[len(new) - tail - 1]:
            tail += 1
        self.start, self.old_end, self.new_end = start, len(old) - tail, len(new) - tail

    def to_old(self, offset: int) -> int | None:
        """The offset in the old text of the new text's `offset`, or None inside the changed region."""
        if offset <= self.start:
            return offset
        if offset >= self.new_end:
            return offset - self.new_end + self.old_end
        return None

    def to_new(self, offset: int, end: bool = False) -> int:
        """The offset in the new text of the old text's `offset`; inside the changed region, its
        start (or, for the `end` of a span, its end)."""
        if offset <= self.start and not (end and offset == self.start and self.old_end > self.start):
            return offset
        if offset >= self.old_end:
            return offset - self.old_end + self.new_end
        return self.new_end if end else self.start


class EditedRegion(Exception):
    """A request's position lies in what changed since the analysis it is answered from."""


class DriftedPositions:
    """A `PositionMap` for answering from the analysis of an older text (`drift.old`): offsets are
    the analysis's, positions the new text's (`pm`'s). A request's position inside the changed
    region raises `EditedRegion` (nothing there was analysed)."""

    def __init__(self, pm: PositionMap, drift: Drift):
        self.pm, self.drift, self.encoding = pm, drift, pm.encoding

    def position(self, offset: int) -> types.Position:
        return self.pm.position(self.drift.to_new(offset))

    def line_char(self, offset: int) -> tuple[int, int]:
        return self.pm.line_char(self.drift.to_new(offset))

    def line_of(self, offset: int) -> int:
        return self.pm.line_of(self.drift.to_new(offset))

    def range(self, span: Span) -> types.Range:
        a, b = self.drift.to_new(span.start), self.drift.to_new(span.end, end=True)
        return types.Range(start=self.pm.position(a), end=self.pm.position(max(a, b)))

    def offset(self, pos: types.Position) -> int:
        old = self.drift.to_old(self.pm.offset(pos))
        if old is None:
            raise EditedRegion()
        return old

    def span(self, rng: types.Range) -> Span:
        a, b = self.offset(rng.start), self.offset(rng.end)
        return Span(min(a, b), max(a, b))


def apply_change(text: str, change: types.TextDocumentContentChangeEvent, encoding: str,
                 pm: PositionMap | None = None) -> str:
    """The text after one `didChange` content change: a whole new text, or a
    range replaced (LSP 3.17, "TextDocumentContentChangeEvent"); the range is
    in the positions of `text`, the text before this change (`pm`, when given,
    is `text`'s position map in `encoding`)."""
    rng = getattr(change, "range", None)
    if rng is None:
        return change.text
    span = (pm if pm is not None and pm.text is text and pm.encoding == encoding
            else PositionMap(text, encoding)).span(rng)
    return text[:span.start] + change.text + text[span.end:]


# --------------------------------------------------------------------------- diagnostics


def doc_href(code: str) -> str:
    """The link to a code's entry in docs/errors.md."""
    return f"{DOCS_URL}#{doc_anchor(code)}"


def to_lsp_diagnostic(pm: PositionMap, uri: str, d: Diagnostic, related: bool = True,
                      help_in_message: bool | None = None) -> types.Diagnostic:
    """A front-end diagnostic as LSP's (LSP 3.17, "Diagnostic"): its code with a
    `codeDescription` link to docs/errors.md, its related places as
    `relatedInformation`, and its help as a last related entry at its own
    range. `related`: the client takes `relatedInformation`; when it does not,
    the related places are left out. `help_in_message` (by default: when not
    `related`): the help ends the message instead (`...\nhelp: ...`), where
    every client shows it."""
    if help_in_message is None:
        help_in_message = not related
    places = [types.DiagnosticRelatedInformation(
        location=types.Location(uri=uri, range=pm.range(r.span)), message=r.message) for r in d.related]
    message = d.message
    if d.help and not help_in_message:
        places.append(types.DiagnosticRelatedInformation(
            location=types.Location(uri=uri, range=pm.range(d.span)), message=f"help: {d.help}"))
    elif d.help:
        message = f"{message}\nhelp: {d.help}"
    return types.Diagnostic(
        range=pm.range(d.span),
        message=message,
        severity=types.DiagnosticSeverity(int(d.severity)),
        code=d.code,
        code_description=types.CodeDescription(href=doc_href(d.code)),
        source="sexpgpu",
        related_information=(places or None) if related else None,
    )


def to_lsp_failure(message: str) -> types.Diagnostic:
    """The one diagnostic shown when the front end failed on a file (a bug in
    sexpgpu, not in the file), at the file's start: without it, a file that
    could not be checked would look clean."""
    return types.Diagnostic(
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
        message=f"sexpgpu could not check this file (an internal error, please report it): {message}",
        severity=types.DiagnosticSeverity.Error, source="sexpgpu")


def to_lsp_diagnostics(pm: PositionMap, uri: str, diagnostics, failure: str | None = None,
                       related: bool = True, help_in_message: bool | None = None) -> list[types.Diagnostic]:
    """A file's diagnostics (`related`, `help_in_message` as for `to_lsp_diagnostic`),
    and the failure diagnostic when the front end failed."""
    out = [to_lsp_diagnostic(pm, uri, d, related, help_in_message) for d in diagnostics]
    if failure is not None:
        out.append(to_lsp_failure(failure))
    return out


# --------------------------------------------------------------------------- ide results


_FENCE = re.compile(r"^```[^\n]*\n(.*?)\n```$", re.M | re.S)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")


def plain_text(markdown: str) -> str:
    """The hover and completion Markdown the IDE answers, as plain text (for a
    client without Markdown, LSP 3.17 "MarkupContent"): code fences and the
    backticks of inline code dropped, their text kept."""
    return _INLINE_CODE.sub(r"\1", _FENCE.sub(r"\1", markdown))


def to_markup(markdown: str, as_markdown: bool = True) -> types.MarkupContent:
    """Markdown as MarkupContent: as it is, or as plain text when the client shows no Markdown."""
    if as_markdown:
        return types.MarkupContent(kind=types.MarkupKind.Markdown, value=markdown)
    return types.MarkupContent(kind=types.MarkupKind.PlainText, value=plain_text(markdown))


def to_lsp_hover(pm: PositionMap, h: ide.HoverInfo, markdown: bool = True) -> types.Hover:
    """The hover over the node's range: Markdown, or plain text when `markdown` is False
    (the client's `hover.contentFormat`)."""
    return types.Hover(contents=to_markup(h.markdown, markdown), range=pm.range(h.span))


def to_lsp_location_links(pm: PositionMap, uri: str, origin: Span | None, targets: list[ide.Target]
                          ) -> list[types.LocationLink]:
    """Definitions as LocationLinks: the name as the selection, the whole definition as the range."""
    return [types.LocationLink(target_uri=uri, target_range=pm.range(t.full),
                               target_selection_range=pm.range(t.span),
                               origin_selection_range=pm.range(origin) if origin is not None else None)
            for t in targets]


def to_lsp_locations(pm: PositionMap, uri: str, refs: list[ide.Ref]) -> list[types.Location]:
    """References as Locations."""
    return [types.Location(uri=uri, range=pm.range(r.span)) for r in refs]


def to_lsp_highlights(pm: PositionMap, refs: list[ide.Ref]) -> list[types.DocumentHighlight]:
    """Highlights: a definition (or a write of a state key) as Write, a use as Read."""
    return [types.DocumentHighlight(range=pm.range(r.span),
                                    kind=types.DocumentHighlightKind.Write if r.write else types.DocumentHighlightKind.Read)
            for r in refs]


_UNSENDABLE = re.compile("[\x00\ud800-\udfff]")


def sendable(text: str) -> bool:
    """Whether a client can take `text` in an edit: no NUL (Emacs's JSON parser
    refuses `\\u0000` and with it the whole reply) and no lone surrogate (not
    text in UTF-8, JSON-RPC's encoding)."""
    return _UNSENDABLE.search(text) is None


def to_lsp_text_edits(pm: PositionMap, edits) -> list[types.TextEdit]:
    """Edits as TextEdits (ranges in the text the edits apply to)."""
    return [types.TextEdit(range=pm.range(e.span), new_text=e.text) for e in edits]


def to_lsp_workspace_edit(pm: PositionMap, uri: str, edits) -> types.WorkspaceEdit:
    """Edits of one document as a WorkspaceEdit."""
    return types.WorkspaceEdit(changes={uri: to_lsp_text_edits(pm, edits)})


_SYMBOL_KINDS = {k.name.lower(): k for k in types.SymbolKind}


def to_lsp_symbols(pm: PositionMap, symbols: list[ide.Symbol]) -> list[types.DocumentSymbol]:
    """Hierarchical document symbols."""
    return [types.DocumentSymbol(name=s.name, kind=_SYMBOL_KINDS.get(s.kind, types.SymbolKind.Object),
                                 range=pm.range(s.span), selection_range=pm.range(s.selection),
                                 detail=s.detail or None, children=to_lsp_symbols(pm, list(s.children)) or None)
            for s in symbols]


def to_lsp_folding_ranges(pm: PositionMap, folds: list[ide.Fold]) -> list[types.FoldingRange]:
    """Folds as whole lines (LSP 3.17, "FoldingRange"): from the line of the
    opening bracket to the line of the closing one; single-line ones dropped."""
    out = []
    for f in folds:
        start, end = pm.line_of(f.span.start), pm.line_of(max(f.span.end - 1, f.span.start))
        if end > start:
            kind = types.FoldingRangeKind.Comment if f.kind == "comment" else types.FoldingRangeKind.Region
            out.append(types.FoldingRange(start_line=start, end_line=end, kind=kind))
    return out


_COMPLETION_KINDS = {k.name.lower(): k for k in types.CompletionItemKind}


def to_lsp_completions(pm: PositionMap, result: ide.Completions, markdown: bool = True) -> types.CompletionList:
    """Completion items that replace the word being typed; their documentation
    is Markdown, or plain text when `markdown` is False (the client's
    `completionItem.documentationFormat`)."""
    rng = pm.range(result.span)
    items = []
    for i, c in enumerate(result.items):
        items.append(types.CompletionItem(
            label=c.label, kind=_COMPLETION_KINDS.get(c.kind, types.CompletionItemKind.Text),
            detail=c.detail or None,
            documentation=to_markup(c.doc, markdown) if c.doc else None,
            sort_text=f"{i:04d}",
            filter_text=c.text or c.label,
            text_edit=types.TextEdit(range=rng, new_text=c.text or c.label)))
    return types.CompletionList(is_incomplete=False, items=items)


def to_lsp_signature_help(sig: ide.Signature, markdown: bool = True) -> types.SignatureHelp:
    """One signature; parameters as [start, end) offsets into its label. The
    labels are ASCII, so code points and every encoding's units agree. Its
    documentation is Markdown, or plain text when `markdown` is False (the
    client's `signatureInformation.documentationFormat`)."""
    params = [types.ParameterInformation(label=(s, e)) for s, e in sig.params]
    doc = to_markup(sig.doc, markdown) if sig.doc else None
    info = types.SignatureInformation(label=sig.label, documentation=doc, parameters=params,
                                      active_parameter=sig.active)
    return types.SignatureHelp(signatures=[info], active_signature=0, active_parameter=sig.active)


def to_lsp_inlay_hints(pm: PositionMap, hints: list[ide.InlayHint]) -> list[types.InlayHint]:
    """Type hints after names."""
    return [types.InlayHint(position=pm.position(h.offset), label=h.label, kind=types.InlayHintKind.Type,
                            padding_left=False) for h in hints]


def semantic_legend() -> types.SemanticTokensLegend:
    """The token types and modifiers `to_lsp_semantic_tokens` indexes into."""
    return types.SemanticTokensLegend(token_types=list(ide.TOKEN_TYPES), token_modifiers=list(ide.TOKEN_MODIFIERS))


def to_lsp_semantic_tokens(pm: PositionMap, tokens: list[ide.Token]) -> types.SemanticTokens:
    """Tokens in LSP's relative encoding (LSP 3.17, "Semantic Tokens"): five
    integers each, line delta, start delta (in the position encoding),
    length, type index, modifier bits. Tokens never span lines here."""
    types_ix = {t: i for i, t in enumerate(ide.TOKEN_TYPES)}
    mods_ix = {m: i for i, m in enumerate(ide.TOKEN_MODIFIERS)}
    data: list[int] = []
    prev_line, prev_char = 0, 0
    for t in tokens:
        line, char = pm.line_char(t.span.start)
        text = pm.text[t.span.start:t.span.end]
        if "\n" in text or "\r" in text:
            continue
        length = _units(text, pm.encoding)
        if length <= 0:
            continue
        bits = 0
        for m in t.modifiers:
            bits |= 1 << mods_ix[m]
        data += [line - prev_line, char - prev_char if line == prev_line else char, length, types_ix[t.type], bits]
        prev_line, prev_char = line, char
    return types.SemanticTokens(data=data)


def to_lsp_code_action(pm: PositionMap, uri: str, fix: ide.Fix, related: bool = True,
                       help_in_message: bool | None = None) -> types.CodeAction:
    """A quick fix with the diagnostic it fixes (as `to_lsp_diagnostic` writes it)."""
    return types.CodeAction(title=fix.title, kind=types.CodeActionKind.QuickFix,
                            diagnostics=[to_lsp_diagnostic(pm, uri, fix.diagnostic, related, help_in_message)],
                            edit=to_lsp_workspace_edit(pm, uri, fix.edits),
                            is_preferred=fix.preferred or None)
