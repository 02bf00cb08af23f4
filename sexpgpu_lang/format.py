"""The canonical layout of a run file: `format_text` and `format_range`.

Pure functions from text to text, used by the language server's
`textDocument/formatting` and `textDocument/rangeFormatting` (LSP 3.17,
"Document Formatting Request", "Document Range Formatting Request").

Like cljfmt, the formatter keeps the lines the text already breaks; unlike
it, it also breaks a line that is too long. So formatting is idempotent
(formatting a formatted file changes nothing) and a file laid out by hand
in this style, the examples included, is left as it is written. The rules,
in the style of Lisp formatters (Emacs `lisp-indent`, cljfmt):

* A list or vector written on one line, holding no comment, that fits in
  `Layout.width` columns stays on one line (a loader's `:fields` of
  several fields excepted).
* A list or vector the text breaks keeps its breaks between units (a node,
  a keyword and its value, a field triple): a unit stays on the line of the
  one before when the text has it there and it fits (or is itself broken in
  the text); the indentation follows the rules below.
* A list or vector written on one line that does not fit breaks after its
  header: a call puts its head and first argument on the first line and
  aligns the other arguments under the first; a keyword and its value
  (`:axes [1]`) stay together on one line.
* Body forms indent their body by two: `lambda` and `let*` after their
  parameters or bindings; `loader`, `defmodel`, `pass` and `def` after their
  name; `defgenerate` and `curriculum` by two from the form, `defgenerate`
  keeping its first keyword pair on the head line; `run` is a call (its
  keywords aligned under the first); `prepare` and `objective` keep
  `(lambda (...)` on the head line and indent its body by two from the form.
* A vector of atoms (a literal vector of numbers or names) that does not
  fit is filled: each element continues the line while it fits, a new line
  (aligned under the first element) when it does not; a break the text
  already has is kept. So a 100 KB vector takes lines of the usual width,
  not one element a line.
* A data plist (`(:every 50 :keep 3)`) breaks into `:key value` pairs, a
  `let*`'s bindings into one binding a line, a loader's `:fields` into one
  `:name [shape] :dtype` triple a line.
* Every comment is kept: a comment after code stays at the end of that
  code's line, with the spaces it had before it; a comment on a line of its own stays on a line of its own,
  before the same form. Between top-level forms, blank lines collapse to at
  most one; inside a form they are dropped.
* Indentation is spaces; the file keeps its line ending (`\\n`, `\\r\\n` or
  `\\r`, as its first line break) and ends with exactly one.

A file with a syntax error (any E-SYNTAX diagnostic) is not formatted: the
functions return None, since recovery's guesses must not become edits.

`minimal_edits` turns a formatted text into the changed lines (what the server
answers). Imports only `sexpgpu_lang.syntax` and `sexpgpu_lang.source`; never JAX.
"""
from __future__ import annotations

import bisect
import difflib
import re
from dataclasses import dataclass, field

from .records import Record
from .source import SourceText, Span
from .syntax import Kw, ListNode, Node, Sym, VecNode, parse

#: Forms whose body is indented by two after `n` header items on the head line.
BODY_FORMS = {"lambda": 1, "let*": 1, "def": 1, "loader": 1, "defmodel": 1, "pass": 1, "stage": 0}
#: Forms that keep their first keyword pair on the head line, then indent by two.
PAIR_HEAD_FORMS = ("defgenerate",)
#: Forms that hang a lambda on the head line and indent its body by two from the form.
HANG_LAMBDA_FORMS = ("prepare", "objective")
#: Forms with a body of items indented by two, none on the head line.
PLAIN_BODY_FORMS = ("curriculum",)


@dataclass(frozen=True, repr=False)
class Layout(Record):
    """Formatting settings: `width` is the column limit in code points."""

    width: int = 120


@dataclass(repr=False)
class _Entry(Record):
    """A child node with the comments around it: own-line comments before it, and
    the comment after it on the same line (comment ranges)."""

    node: Node
    leading: list[Span] = field(default_factory=list)
    trailing: Span | None = None


@dataclass(repr=False)
class _Content(Record):
    """A container's children, the comment right after its opening bracket, and
    own-line comments after its last child."""

    entries: list[_Entry]
    after_open: Span | None = None
    dangling: list[Span] = field(default_factory=list)


@dataclass(frozen=True, repr=False)
class TopItem(Record):
    """One top-level item: a form (with the comment that ends its last line) or
    a comment on its own line; `span` is its original range, `text` its
    formatted text (lines joined by `\\n`), `blank_before` whether a blank
    line precedes it."""

    span: Span
    text: str
    blank_before: bool


class _Formatter:
    def __init__(self, src: SourceText, comments: tuple[Span, ...], layout: Layout):
        self.src = src
        self.text = src.text
        self.layout = layout
        self.comments = sorted(comments)
        self.comment_starts = [c.start for c in self.comments]

    # -- comments --------------------------------------------------------------
    def comments_in(self, start: int, end: int) -> list[Span]:
        """Comments that start inside [start, end)."""
        i = bisect.bisect_left(self.comment_starts, start)
        j = bisect.bisect_left(self.comment_starts, end)
        return self.comments[i:j]

    def ctext(self, span: Span) -> str:
        """A comment's text, trailing spaces dropped."""
        return self.text[span.start:span.end].rstrip()

    def gap(self, comment: Span) -> str:
        """The spaces before a comment that ends a line of code: as many as the text
        has (so a column of aligned comments stays aligned), at least one."""
        before = self.text[:comment.start]
        return " " * max(1, len(before) - len(before.rstrip(" \t")))

    def line_of(self, offset: int) -> int:
        return self.src.line_col(offset)[0]

    def content(self, node: ListNode | VecNode) -> _Content:
        """Attach the comments directly inside `node` to its children."""
        inner_start, inner_end = node.span.start + 1, node.span.end - (1 if node.closed else 0)
        items = list(node.items)
        comments = [c for c in self.comments_in(inner_start, inner_end)
                    if not any(it.span.start <= c.start < it.span.end for it in items)]
        return self.attach(items, comments, self.line_of(node.span.start))

    def attach(self, items: list[Node], comments: list[Span], open_line: int | None) -> _Content:
        """A comment on the line where the previous child ends is that child's
        trailing comment (or, before any child, the opener's); any other
        comment leads the next child, or dangles after the last."""
        entries = [_Entry(n) for n in items]
        out = _Content(entries)
        pending: list[Span] = []
        ci = 0
        prev_line = open_line
        prev: _Entry | None = None
        for entry in [*entries, None]:
            limit = entry.node.span.start if entry is not None else len(self.text) + 1
            while ci < len(comments) and comments[ci].start < limit:
                c = comments[ci]
                ci += 1
                same_line = prev_line is not None and not pending and self.line_of(c.start) == prev_line
                if same_line and prev is not None and prev.trailing is None:
                    prev.trailing = c
                elif same_line and prev is None and out.after_open is None:
                    out.after_open = c
                else:
                    pending.append(c)
            if entry is None:
                out.dangling = pending
                break
            entry.leading, pending = pending, []
            prev = entry
            prev_line = self.line_of(max(entry.node.span.end - 1, entry.node.span.start))
        return out

    def has_comment(self, node: Node) -> bool:
        return bool(self.comments_in(node.span.start, node.span.end))

    # -- flat text --------------------------------------------------------------
    def flat(self, node: Node) -> str:
        """The node on one line (only for nodes without comments)."""
        if isinstance(node, ListNode):
            return "(" + " ".join(self.flat(i) for i in node.items) + ")"
        if isinstance(node, VecNode):
            return "[" + " ".join(self.flat(i) for i in node.items) + "]"
        return self.text[node.span.start:node.span.end]

    # -- layout -----------------------------------------------------------------
    def multiline(self, node: Node) -> bool:
        """The node spans more than one line of the text."""
        return self.line_of(node.span.start) != self.line_of(max(node.span.end - 1, node.span.start))

    def broken_before(self, prev: _Entry, entry: _Entry) -> bool:
        """The text breaks the line between `prev` (or its trailing comment) and `entry`."""
        return self.line_of(max(prev.node.span.end - 1, prev.node.span.start)) != self.line_of(entry.node.span.start)

    def flat_able(self, node: Node) -> bool:
        """Only a node on one line of the text, without comments and without a
        loader's `:fields` of several fields is ever written on one line."""
        return not (isinstance(node, (ListNode, VecNode))
                    and (self.multiline(node) or self.has_comment(node) or _several_fields(node)))

    def fits_flat(self, node: Node, col: int, trail: int) -> bool:
        """The node may be written on one line from `col`, `trail` closers after it, within the width."""
        return self.flat_able(node) and col + len(self.flat(node)) + trail <= self.layout.width

    def write(self, node: Node, out: list[str], hint: str = "", trail: int = 0) -> None:
        """Append `node` to the last line of `out` (a list of lines), breaking lines
        as needed; `trail` closing brackets will follow it on its last line."""
        col = len(out[-1])
        if not isinstance(node, (ListNode, VecNode)):
            out[-1] += self.flat(node)
            return
        forced = (hint == "bindings" and len(node.items) > 1) or (hint == "triples" and len(node.items) > 3)
        if not forced and self.fits_flat(node, col, trail):
            out[-1] += self.flat(node)
            return
        self.write_broken(node, out, col, hint, trail)

    def units(self, node: ListNode | VecNode, entries: list[_Entry], hint: str) -> tuple[list[list[_Entry]], str, int]:
        """Group the children into units that share a line, and choose the style.

        Returns (units, style, header): style is `call`, `body`, `hang`,
        `pairhead` or `data`; header is how many units go on the head line.
        """
        if isinstance(node, VecNode) or not entries:
            return [[e] for e in entries], "data", 0
        if hint == "triples":
            return _chunks(entries, 3), "data", 0
        head = node.head
        if isinstance(node.items[0], Kw):
            return _pairs(entries), "data", 0
        if head in HANG_LAMBDA_FORMS and len(entries) == 2 and isinstance(entries[1].node, ListNode) \
                and entries[1].node.head == "lambda":
            return [[e] for e in entries], "hang", 2
        if head in PAIR_HEAD_FORMS:
            return [[entries[0]], *_pairs(entries[1:])], "pairhead", 2
        if head in PLAIN_BODY_FORMS:
            return [[e] for e in entries], "body", 1
        if head in BODY_FORMS:
            n = 1 + BODY_FORMS[head]
            keyed = head in ("loader", "defmodel", "pass", "stage")
            rest = _pairs(entries[n:]) if keyed else [[e] for e in entries[n:]]
            return [[e] for e in entries[:n]] + rest, "body", n
        if head is None:
            return [[e] for e in entries], "data", 0
        return [[entries[0]], *_pairs(entries[1:])], "call", 2

    def write_broken(self, node: ListNode | VecNode, out: list[str], col: int, hint: str, trail: int) -> None:
        opener, closer = ("(", ")") if isinstance(node, ListNode) else ("[", "]")
        content = self.content(node)
        units, style, header = self.units(node, content.entries, hint)
        # A form the text already breaks keeps its breaks between units (the
        # user's grouping); one written on one line breaks after its header.
        keep = self.multiline(node)
        if style == "call":
            head = units[0][0].node
            head_len = len(self.flat(head)) if isinstance(head, Sym) else 0
            # Align the arguments under the first one, unless the first
            # argument is not on the head line.
            aligned = 0 < head_len and len(units) > 1 and content.after_open is None \
                and not (keep and self.broken_before(units[0][-1], units[1][0]))
            indent = col + 2 + head_len if aligned else col + 2
        elif style == "data":
            indent = col + 1
        else:
            indent = col + 2
        # A vector of atoms (a literal vector: numbers, names) is filled: as many elements a line as fit.
        fill = isinstance(node, VecNode) and all(not isinstance(e.node, (ListNode, VecNode)) for e in content.entries)
        out[-1] += opener
        broke = False
        if content.after_open is not None:
            out[-1] += " " + self.ctext(content.after_open)
            broke = True
        last_trail = 0 if content.dangling else trail + 1
        for i, unit in enumerate(units):
            if style == "hang" and i == 1:
                out[-1] += " "
                broke = self.write_hang(unit[0], out, indent, last_trail)
                continue
            unit_trail = last_trail if i == len(units) - 1 else 0
            if self.same_line(units, i, header, keep and hint not in ("bindings", "triples"), broke, out, unit_trail,
                              fill):
                if i:
                    out[-1] += " "
            else:
                out.append(" " * indent)
            child_hint = "bindings" if isinstance(node, ListNode) and node.head == "let*" and i == 1 else ""
            broke = self.write_unit(unit, out, unit_trail, child_hint)
        for c in content.dangling:
            out.append(" " * indent + self.ctext(c))
            broke = True
        if broke:
            out.append(" " * indent)
        out[-1] += closer

    def same_line(self, units: list[list[_Entry]], i: int, header: int, keep: bool, broke: bool,
                  out: list[str], trail: int, fill: bool = False) -> bool:
        """Unit `i` continues the current line: never after a comment or before its own;
        a header unit does unless the kept text breaks before it; any other unit does
        only when the text is kept and has it on the line of the unit before, and then
        when it fits on one line or is itself broken in the text (its own layout breaks it).
        In a `fill` (a vector of atoms) a unit the text does not break before continues the
        line whenever it fits, the text kept or not."""
        unit = units[i]
        if broke or unit[0].leading:
            return False
        if i == 0:
            return True
        text_breaks = keep and self.broken_before(units[i - 1][-1], unit[0])
        if i < max(header, 1):
            return not text_breaks
        if text_breaks or not (keep or fill):
            return False
        col = len(out[-1]) + 1
        for e in unit[:-1]:
            if e.trailing is not None or not self.flat_able(e.node):
                return False
            col += len(self.flat(e.node)) + 1
        last = unit[-1].node
        return not self.flat_able(last) or col + len(self.flat(last)) + trail <= self.layout.width

    def write_unit(self, unit: list[_Entry], out: list[str], trail: int = 0, hint: str = "") -> bool:
        """Write one unit (a node, a keyword pair, a field triple) from the end of
        the last line, `trail` closers after it; True when a comment ends its last line."""
        unit_col = len(out[-1])
        broke = False
        for j, e in enumerate(unit):
            if e.leading:
                if out[-1].strip():
                    out.append(" " * unit_col)
                for c in e.leading:
                    out[-1] += self.ctext(c)
                    out.append(" " * unit_col)
            elif j and broke:
                out.append(" " * unit_col)
            elif j:
                out[-1] += " "
            if j and isinstance(unit[0].node, Kw) and unit[0].node.name == "fields":
                hint = "triples"
            last = j == len(unit) - 1
            self.write(e.node, out, hint if last or len(unit) == 1 else "",
                       trail if last and e.trailing is None else 0)
            broke = e.trailing is not None
            if broke:
                out[-1] += self.gap(e.trailing) + self.ctext(e.trailing)
        return broke

    def write_hang(self, entry: _Entry, out: list[str], indent: int, trail: int) -> bool:
        """`(lambda (params)` on the head line, its body at `indent`; True when a comment ends the last line."""
        lam = entry.node
        assert isinstance(lam, ListNode)
        if entry.leading:
            out.append(" " * indent)
            for c in entry.leading:
                out[-1] += self.ctext(c)
                out.append(" " * indent)
        content = self.content(lam)
        out[-1] += "("
        broke = False
        if content.after_open is not None:
            out[-1] += " " + self.ctext(content.after_open)
            broke = True
        entries = content.entries
        inner_trail = 0 if content.dangling or entry.trailing is not None else trail + 1
        for i, e in enumerate(entries):
            if i < 2 and not broke and not e.leading:
                if i:
                    out[-1] += " "
            else:
                out.append(" " * indent)
            broke = self.write_unit([e], out, inner_trail if i == len(entries) - 1 else 0)
        for c in content.dangling:
            out.append(" " * indent + self.ctext(c))
            broke = True
        if broke:
            out.append(" " * indent)
        out[-1] += ")"
        if entry.trailing is not None:
            out[-1] += self.gap(entry.trailing) + self.ctext(entry.trailing)
            return True
        return False

    # -- top level --------------------------------------------------------------
    def top_items(self, forms: tuple[Node, ...]) -> list[TopItem]:
        """Each top-level form and own-line comment, formatted."""
        top_comments = [c for c in self.comments if not any(f.span.start <= c.start < f.span.end for f in forms)]
        content = self.attach(list(forms), top_comments, None)
        items: list[TopItem] = []
        prev_end: int | None = None

        def blank_before(start: int) -> bool:
            return prev_end is not None and self.line_of(start) - self.line_of(prev_end) >= 2

        for entry in content.entries:
            for c in entry.leading:
                items.append(TopItem(c, self.ctext(c), blank_before(c.start)))
                prev_end = c.end
            lines = [""]
            self.write(entry.node, lines)
            end = entry.node.span.end
            if entry.trailing is not None:
                lines[-1] += self.gap(entry.trailing) + self.ctext(entry.trailing)
                end = entry.trailing.end
            text = "\n".join(line.rstrip() for line in lines)
            items.append(TopItem(Span(entry.node.span.start, end), text, blank_before(entry.node.span.start)))
            prev_end = end
        for c in content.dangling:
            items.append(TopItem(c, self.ctext(c), blank_before(c.start)))
            prev_end = c.end
        return items


def _several_fields(node: Node) -> bool:
    """`node` holds a `:fields` keyword followed by more than one `:name [shape] :dtype` triple."""
    if not isinstance(node, (ListNode, VecNode)):
        return False
    items = node.items
    for k, v in zip(items, items[1:]):
        if isinstance(k, Kw) and k.name == "fields" and isinstance(v, ListNode) and len(v.items) > 3:
            return True
    return any(_several_fields(i) for i in items)


def _pairs(entries: list[_Entry]) -> list[list[_Entry]]:
    """Group each keyword with its value (`:axes [1]`, `:precision :f32`); any
    other node, or a keyword a comment separates from its value, stands alone."""
    units, i = [], 0
    while i < len(entries):
        e = entries[i]
        nxt = entries[i + 1] if i + 1 < len(entries) else None
        if isinstance(e.node, Kw) and nxt is not None and e.trailing is None and not nxt.leading \
                and (not isinstance(nxt.node, Kw) or nxt.node.name in _KEYWORD_VALUES):
            units.append([e, nxt])
            i += 2
        else:
            units.append([e])
            i += 1
    return units


#: Keywords that are values rather than keys: dtypes and `:auto` (`:precision :f32`, `:stack :auto`).
_KEYWORD_VALUES = ("bool", "i32", "i64", "f16", "bf16", "f32", "auto")


def _chunks(entries: list[_Entry], n: int) -> list[list[_Entry]]:
    """Units of `n` entries in order (a loader's `:name [shape] :dtype` triples)."""
    return [entries[i:i + n] for i in range(0, len(entries), n)]


def _line_ending(text: str) -> str:
    for i, c in enumerate(text):
        if c == "\r":
            return "\r\n" if text[i + 1:i + 2] == "\n" else "\r"
        if c == "\n":
            return "\n"
    return "\n"


def top_items(text: str, layout: Layout = Layout()) -> list[TopItem] | None:
    """The formatted top-level items of `text`, or None when it has a syntax error."""
    src = SourceText(text)
    parsed = parse(src)
    if parsed.diagnostics:
        return None
    return _Formatter(src, parsed.comments, layout).top_items(parsed.forms)


def _join(items: list[TopItem], eol: str) -> str:
    out: list[str] = []
    for i, it in enumerate(items):
        if i and it.blank_before:
            out.append("")
        out.extend(it.text.split("\n"))
    return eol.join(out)


def format_text(text: str, layout: Layout = Layout()) -> str | None:
    """The whole file in the canonical layout, or None when it has a syntax error.

    Idempotent: `format_text(format_text(t)) == format_text(t)`. Every comment
    of `text` appears in the result, in the same order.
    """
    items = top_items(text, layout)
    if items is None:
        return None
    if not items:
        return ""
    eol = _line_ending(text)
    return _join(items, eol) + eol


def format_range(text: str, start: int, end: int, layout: Layout = Layout()) -> tuple[Span, str] | None:
    """Format the top-level items that overlap `[start, end)` (code-point offsets).

    Returns the original range those items cover and its replacement, or None
    when the file has a syntax error or no item overlaps the range. The
    replacement is exactly what `format_text` writes for those items.
    """
    items = top_items(text, layout)
    if not items:
        return None
    if end <= start:
        end = start + 1
    chosen = [i for i, it in enumerate(items) if it.span.start < end and start < it.span.end]
    if not chosen:
        return None
    lo, hi = chosen[0], chosen[-1]
    sel = items[lo:hi + 1]
    eol = _line_ending(text)
    joined = _join([TopItem(sel[0].span, sel[0].text, False)] + sel[1:], eol)
    return Span(sel[0].span.start, sel[-1].span.end), joined


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _lines(text: str) -> list[str]:
    """`text`'s lines, each with its line break (`\\n`, `\\r\\n` or `\\r`)."""
    return _LINE.findall(text)


def minimal_edits(old: str, new: str, sendable=lambda s: True) -> list[tuple[Span, str]]:
    """Edits turning `old` into `new`, whole lines each (a run of changed lines
    replaced by its new lines), as (span of `old`, new text), in order and never
    overlapping: what a formatter answers, so that an editor moves neither the
    cursor nor the marks on lines the layout keeps.

    `sendable(text)` says whether an edit's new text may be sent (the language
    server: no NUL, no lone surrogate). An edit whose text may not is split into
    the characters that change; when one of those still may not be sent, those
    lines are left as they are."""
    a, b = _lines(old), _lines(new)
    starts = [0]
    for line in a:
        starts.append(starts[-1] + len(line))
    out: list[tuple[Span, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        span, text = Span(starts[i1], starts[i2]), "".join(b[j1:j2])
        if sendable(text):
            out.append((span, text))
            continue
        was = old[span.start:span.end]
        fine = [(Span(span.start + k1, span.start + k2), text[m1:m2])
                for t, k1, k2, m1, m2 in difflib.SequenceMatcher(None, was, text, autojunk=False).get_opcodes()
                if t != "equal"]
        if all(sendable(t) for _, t in fine):
            out.extend(fine)
    return out
