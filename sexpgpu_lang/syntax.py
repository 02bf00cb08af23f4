"""Text to syntax tree: the lark grammar, error recovery and ranged nodes.

`parse(source)` never fails: it returns the top-level forms it could read
plus syntax diagnostics. Recovery (docs/dev/design.md#syntax, docs/dev/style.md "Positions
and recovery"):

* A `(` in column 1 always starts a new top-level form, so one missing `)`
  costs one diagnostic and every other form is still read.
* An unclosed bracket is reported at the opening bracket (E-SYNTAX-001) and
  closed at the end of its top-level form; a stray closer is reported and
  dropped (E-SYNTAX-002); a closer of the other kind is reported
  (E-SYNTAX-004) and treated as the right one; a character that starts no
  token is reported (E-SYNTAX-003) and skipped (a run of one such character
  once; past `MAX_SAME_CHARACTER` places of one in a form, the rest once).

Tokens come from the terminals of `grammar.lark`: lark's compiled lexer
pattern, stored in `_lexer_table.py` so that a parse imports no lark (it is
used while its copy of the grammar equals grammar.lark; `write_lexer_table()`
writes it again, and tests/test_lexer_table.py compares it with lark's).
One pass over the text gives the tokens lark's lexer gives; it reports a
character that starts no token and resumes after it, so lexing stays linear
in the text's length however many characters are bad. Once
the balancer has paired every bracket, the grammar's two rules (`list`,
`vector`) are applied to the balanced tokens directly, building
dataclasses that carry a `Span`; this replaced feeding lark's LALR parser
token by token, which gave the same trees (benchmarks/parse_incremental.py
--check compares the two on every run file in the repository and random
edits of them) at several times the cost. Unchanged top-level forms are
reused from the previous parse of the same text. lark is imported only
when grammar.lark no longer matches the stored pattern.
"""
from __future__ import annotations

import itertools
import pathlib
import re
from dataclasses import dataclass, field
from functools import lru_cache

from .cancel import CancelToken
from .diagnostics import Diagnostic, error
from .kept import MISSING, Space
from .records import Record
from .language import TOP_LEVEL_HEADS
from .source import SourceText, Span

# --------------------------------------------------------------------------- nodes


@dataclass(slots=True, eq=False, repr=False)
class Node(Record):
    """A syntax node: its range in the file and its structural path.

    `path` is the node's position inside its top-level form: the top-level
    form's key (e.g. `defmodel student`) followed by child indices. It is
    what a random draw's place is hashed from, so comments and other forms
    do not change it.
    """

    span: Span
    path: tuple = field(default=(), repr=False)


@dataclass(slots=True, eq=False, repr=False)
class Sym(Node):
    """A symbol: `row`, `log-softmax`, `+`, `true`, `nil`."""

    name: str = ""


@dataclass(slots=True, eq=False, repr=False)
class Kw(Node):
    """A keyword `:name`; `name` is without the colon."""

    name: str = ""


@dataclass(slots=True, eq=False, repr=False)
class Num(Node):
    """An integer or float literal; `is_float` tells which."""

    value: float | int = 0
    is_float: bool = False


@dataclass(slots=True, eq=False, repr=False)
class Str(Node):
    """A string literal, escapes resolved."""

    value: str = ""


@dataclass(slots=True, eq=False, repr=False)
class ListNode(Node):
    """A list `( ... )`. `closed` is False when recovery supplied the `)`."""

    items: tuple[Node, ...] = ()
    closed: bool = True

    @property
    def head(self) -> str | None:
        """The head symbol's name, or None when the list is empty or headed by a non-symbol."""
        if self.items and isinstance(self.items[0], Sym):
            return self.items[0].name
        return None


@dataclass(slots=True, eq=False, repr=False)
class VecNode(Node):
    """A vector `[ ... ]`: shapes, axis lists, lists of tensors."""

    items: tuple[Node, ...] = ()
    closed: bool = True


@dataclass(slots=True, eq=False, repr=False)
class ErrorNode(Node):
    """A part of the file the parser did not read: brackets nested deeper than
    MAX_DEPTH (E-SYNTAX-005). The checker gives it the error type, so the rest of
    its form is still checked and nothing that depends on it is reported again."""


@dataclass(eq=False, repr=False)
class ParseResult(Record):
    """The forms of one file, the syntax diagnostics, and the comments' ranges."""

    source: SourceText
    forms: tuple[Node, ...]
    diagnostics: tuple[Diagnostic, ...]
    comments: tuple[Span, ...]


def walk(node: Node):
    """Yield `node` and every node below it, parents first."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ListNode, VecNode)):
            stack.extend(reversed(n.items))


def plist_pairs(node: ListNode) -> list[tuple[Kw, Node]]:
    """The `:key value` pairs of a `(list ...)`: items after the head, two at a time, where the first is a keyword."""
    items = node.items[1:]
    return [(k, v) for k, v in zip(items[0::2], items[1::2]) if isinstance(k, Kw)]


def keyword_value(node: ListNode, key: str, start: int = 1) -> Node | None:
    """The value after `:key` among `node`'s items from `start`; None where it is absent."""
    items = node.items
    for i in range(start, len(items) - 1):
        if isinstance(items[i], Kw) and items[i].name == key:
            return items[i + 1]
    return None


def result_node(body) -> Node | None:
    """The syntax node whose value a body (a sequence of nodes) returns, looking through `let*`; None for an empty body."""
    if not body:
        return None
    last = body[-1]
    while isinstance(last, ListNode) and last.head == "let*" and len(last.items) >= 3:
        last = last.items[-1]
    return last


# --------------------------------------------------------------------------- tokens


class Token:
    """One token: its terminal's name (`type`), its text, where it starts (offset, 1-based
    line and column) and its end offset. lark's `Token` fields, without lark; a token never
    spans lines. A closer that recovery supplied has an empty `value`."""

    __slots__ = ("type", "value", "start_pos", "line", "column", "end_pos")

    def __init__(self, type: str, value: str, start_pos: int, line: int | None, column: int | None, end_pos: int):
        self.type = type
        self.value = value
        self.start_pos = start_pos
        self.line = line
        self.column = column
        self.end_pos = end_pos

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Token({self.type!r}, {self.value!r}, {self.start_pos}, {self.line}, {self.column}, {self.end_pos})"


# --------------------------------------------------------------------------- lexer


_GRAMMAR = pathlib.Path(__file__).with_name("grammar.lark")
_CLOSER = {"LPAR": "RPAR", "LBRACK": "RBRACK"}
_OPENERS = frozenset(("LPAR", "LBRACK"))
_CLOSERS = frozenset(("RPAR", "RBRACK"))
_TEXT = {"LPAR": "(", "RPAR": ")", "LBRACK": "[", "RBRACK": "]"}


@lru_cache(maxsize=1)
def _lark():
    """grammar.lark as a lark parser (only its lexer's pattern is used; see `_scanner`)."""
    from lark import Lark
    # cache=True keeps lark's LALR table construction out of every start-up.
    return Lark(_GRAMMAR.read_text(), parser="lalr", lexer="basic", cache=True,
                maybe_placeholders=False)


TOKEN_LIMIT = 400_000
"""The most tokens (and comments and bad-character reports) a run file may hold: past it, `parse`
gives one E-SYNTAX-006 and no forms, having lexed only this far. It keeps every check of a file
(lint, explain, the language server) within docs/runtime.md's budget (1 GB, 10 s); a run file by
hand holds a few thousand."""


class _TooManyTokens(Exception):
    """Lexing passed its budget; `offset` is where (in the text lexed)."""

    def __init__(self, offset: int):
        super().__init__(offset)
        self.offset = offset


def _lex(text: str, diags: list[Diagnostic], unterminated: set[int] | None = None,
         limit: int | None = None) -> tuple[list[Token], list[Span]]:
    """All tokens of `text` and its comments' ranges, as lark's lexer gives them, in one pass.

    A character that starts no token is reported (E-SYNTAX-003) and skipped; an
    unterminated string is reported and closed at its line's end (its last character
    read as the `"`, so that the brackets it swallowed are not reported again; see
    `parse`) and its start offset goes into `unterminated`. Scanning resumes right
    after each repair, so the work is linear in the text's length however many
    characters are bad (it used to lex the whole text again after each one)."""
    unterminated = set() if unterminated is None else unterminated
    bad: dict = {}   # per bad character, in the current form: `_recover`'s count of its places
    patterns = _scanner()
    tokens: list[Token] = []
    comments: list[Span] = []
    pos, line, line_start, n = 0, 1, 0, len(text)
    recovered = 0   # bad characters reported: each counts as a token against `limit`
    while pos < n:
        # Each match starts where the previous one ended; one that starts later means that no
        # token starts at `pos ... start - 1`. Those characters are reported from this one
        # search and lexing goes on with its match, so that a run of bad characters is
        # searched through once, not once per character (which made recovery quadratic in
        # the run's length). An unterminated string's repair may skip past the match: the
        # search then starts again after it. With several patterns (another lark version),
        # the first that matches at `pos` wins, as in lark's scanner.
        if len(patterns) == 1:
            matches = patterns[0].finditer(text, pos)
        else:
            matches = iter(lambda: _match_first(patterns, text, pos), None)
        resumed = False
        for m in matches:
            start, end = m.span()
            if end == start:
                break
            while pos < start:
                pos = _recover(text, pos, line, pos - line_start + 1, tokens, diags, unterminated, bad)
                recovered += 1
                if limit is not None and recovered > limit:
                    raise _TooManyTokens(pos)
            if pos != start:
                resumed = True
                break
            kind = m.lastgroup
            if kind == "WS":
                k = text.count("\n", pos, end)
                if k:
                    line += k
                    line_start = text.rindex("\n", pos, end) + 1
            elif kind == "COMMENT":
                comments.append(Span(pos, end))
            else:
                tokens.append(Token(kind, m.group(), pos, line, pos - line_start + 1, end))
                if kind == "LPAR" and pos == line_start and bad:
                    bad.clear()   # a `(` in column 1 starts a form (as `_balance` reads it)
            if limit is not None and len(tokens) + len(comments) + recovered > limit:
                raise _TooManyTokens(pos)
            pos = end
        else:
            if len(patterns) == 1:
                # No token starts anywhere in the rest of the text: every character left
                # is bad (searching again after each would be quadratic).
                while pos < n:
                    pos = _recover(text, pos, line, pos - line_start + 1, tokens, diags, unterminated, bad)
                    recovered += 1
                    if limit is not None and recovered > limit:
                        raise _TooManyTokens(pos)
        if pos < n and not resumed:
            pos = _recover(text, pos, line, pos - line_start + 1, tokens, diags, unterminated, bad)
    return _glued_numbers(tokens, diags), comments


def _match_first(patterns, text: str, pos: int):
    """The first of `patterns` that matches at `pos`, or None (lark's scanner with several patterns)."""
    for p in patterns:
        m = p.match(text, pos)
        if m is not None:
            return m
    return None


#: How many places (runs) of one bad character a form reports one by one; its further places
#: are counted in one more diagnostic, at the first of them (1,000 NULs apart are not 1,000 lines).
MAX_SAME_CHARACTER = 10


def _recover(text: str, pos: int, line: int, column: int, tokens: list[Token],
             diags: list[Diagnostic], unterminated: set[int], bad: dict | None = None) -> int:
    """Report the character at `pos`, which starts no token, and return where lexing resumes.

    A run of one bad character is one diagnostic; past MAX_SAME_CHARACTER places of one
    character in a form (`bad` counts them; `_lex` empties it at each form), the rest are
    summed in one diagnostic at the first of them ("and N more after it before the next form").
    An unterminated string is closed in place when its line's last character can be read
    as the closing `"` (the token then carries that text), else skipped to the line's end."""
    if text[pos] != '"':
        # (a control character shows as `U+0000`: `diagnostics.quote_controls`)
        c, last = text[pos], diags[-1] if diags else None
        seen = None if bad is None else bad.setdefault(c, [0, None])
        if seen is not None and seen[1] is not None:
            i = seen[1]
            more = diags[i].data["more"] + 1
            diags[i] = error("E-SYNTAX-003", diags[i].span, f"unexpected character `{c}`, and {more:,} more after it "
                             "before the next form", data={"repeated": c, "count": diags[i].data["count"], "more": more})
            return pos + 1
        if last is not None and last.span.end == pos and last.data.get("repeated") == c:
            # A run of one bad character is one diagnostic over the run, with its count (as rustc's
            # "character appears N more times"): 1,000 NULs are one cause, not 1,000 lines.
            count = last.data["count"] + 1
            diags[-1] = error("E-SYNTAX-003", Span(last.span.start, pos + 1),
                              f"unexpected character `{c}` ({count:,} in a row)", data={"repeated": c, "count": count})
        elif seen is not None and seen[0] >= MAX_SAME_CHARACTER:
            seen[1] = len(diags)
            diags.append(error("E-SYNTAX-003", Span(pos, pos + 1), f"unexpected character `{c}`",
                               data={"repeated": c, "count": 1, "more": 0}))
        else:
            if seen is not None:
                seen[0] += 1
            diags.append(error("E-SYNTAX-003", Span(pos, pos + 1), f"unexpected character `{c}`",
                               data={"repeated": c, "count": 1}))
        return pos + 1
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    while end > pos + 1 and text[end - 1] == "\r":
        end -= 1
    diags.append(error("E-SYNTAX-003", Span(pos, end), "unterminated string: add the closing `\"` on this line"))
    if end - pos >= 2 and text[end - 2] != "\\":
        # No `"` before it is unescaped (else the string had ended), so this one closes it.
        tokens.append(Token("STRING", text[pos:end - 1] + '"', pos, line, column, end))
        unterminated.add(pos)
    return end


@lru_cache(maxsize=1)
def _scanner() -> tuple:
    """The terminals' compiled pattern, in lark's order: the stored copy (`_lexer_table`)
    while its grammar is grammar.lark's text, else built from lark's terminals (`lark_pattern`)."""
    from . import _lexer_table as table
    try:
        same = _GRAMMAR.read_text() == table.GRAMMAR
    except OSError:
        same = False
    if same:
        return (re.compile(table.PATTERN, table.FLAGS),)
    return (lark_pattern(),)


def lark_terminals(parser) -> list:
    """The terminals of a lark parser (`Lark.terminals`) in the order its basic lexer tries them:
    by priority, then the longest possible match, then the longest pattern text, then the name;
    a string terminal that a regular-expression terminal of the same priority matches whole is
    left to that one (lark's `unless` rule), so it is not among them. (lark's lexer, built from
    the same rules, is what `test_lexer_table` compares this with.)"""
    flags = parser.options.g_regex_flags
    terminals = sorted(parser.terminals, key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name))
    embedded = set()
    for retok in (t for t in terminals if t.pattern.type == "re"):
        for strtok in (t for t in terminals if t.pattern.type == "str" and t.priority == retok.priority):
            m = re.match(retok.pattern.to_regexp(), strtok.pattern.value, flags)
            if m and m.group(0) == strtok.pattern.value and strtok.pattern.flags <= retok.pattern.flags:
                embedded.add(strtok.name)
    return [t for t in terminals if t.name not in embedded]


def lark_pattern():
    """The compiled terminal pattern of grammar.lark, one named group per terminal in lark's order
    (`lark_terminals`), as lark's basic lexer builds it; None if it does not compile as one."""
    parser = _lark()
    pattern = "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in lark_terminals(parser))
    try:
        return re.compile(pattern, parser.options.g_regex_flags)
    except (re.error, AssertionError):   # (Python's limit on groups raises AssertionError)
        return None


def write_lexer_table(path: pathlib.Path | None = None) -> pathlib.Path:
    """Write `_lexer_table.py`: grammar.lark's text and lark's compiled pattern for it."""
    import lark
    pattern = lark_pattern()
    if pattern is None:
        raise SystemExit(f"lark {lark.__version__} builds more than one terminal pattern; not written")
    path = path or pathlib.Path(__file__).with_name("_lexer_table.py")
    path.write_text(
        '"""lark\'s compiled terminal pattern for grammar.lark, so that parsing imports no lark.\n\n'
        f'Written with lark {lark.__version__} by `python -c "from sexpgpu_lang.syntax import write_lexer_table;\n'
        'write_lexer_table()"`; do not edit. `syntax.py` uses it only while GRAMMAR is grammar.lark\'s text;\n'
        'tests/test_lexer_table.py compares it with lark\'s.\n'
        '"""\n\n'
        f"GRAMMAR = {_GRAMMAR.read_text()!r}\n\n"
        f"PATTERN = {pattern.pattern!r}\n\n"
        f"FLAGS = {int(pattern.flags)}\n", encoding="utf-8")
    return path


_ATOMS = ("INT", "FLOAT", "SYMBOL", "KEYWORD", "STRING")


def _glued_numbers(tokens: list[Token], diags: list[Diagnostic]) -> list[Token]:
    """Report a number with other atoms glued to it (`64x`, `0,1`, `1.5.2`) as one bad
    literal (E-SYNTAX-003) and keep only its leading number, instead of reading it as
    several atoms."""
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        out.append(tok)
        j = i + 1
        if tok.type in ("INT", "FLOAT"):
            while j < len(tokens) and tokens[j].type in _ATOMS and tokens[j].start_pos == tokens[j - 1].end_pos:
                j += 1
            if j > i + 1:
                text = "".join(t.value for t in tokens[i:j])
                diags.append(error("E-SYNTAX-003", Span(tok.start_pos, tokens[j - 1].end_pos),
                                   f"`{text}` is not a number",
                                   help="write an integer like `64` or a float like `0.1` or `3e-4`, "
                                        "and separate names with spaces"))
        i = j
    return out


#: Deeper nesting is refused (E-SYNTAX-005): it keeps every recursive walk of the tree
#: (conversion, checking, lowering) far inside Python's recursion limit.
MAX_DEPTH = 100


def _too_deep(chunk: list[Token], diags: list[Diagnostic]) -> bool:
    """Report (and return True for) a top-level form whose brackets nest deeper than MAX_DEPTH."""
    depth = 0
    for tok in chunk:
        if tok.type in _CLOSER:
            depth += 1
            if depth > MAX_DEPTH:
                diags.append(error("E-SYNTAX-005", Span(tok.start_pos, tok.end_pos),
                                   f"brackets nest more than {MAX_DEPTH} deep here; what this bracket holds is not checked",
                                   help="name intermediate values with `let*`"))
                return True
        elif tok.type in ("RPAR", "RBRACK"):
            depth = max(0, depth - 1)
    return False


def _balance(chunk: list[Token], diags: list[Diagnostic]) -> list[Token]:
    """Return `chunk` with its brackets balanced, reporting each repair.

    When the chunk lacks a closer or has one too many, the brackets are paired
    again guided by indentation, so that one bracket missing or extra in the
    middle of a form is reported where the indentation shows it, once, and the
    rest of the form keeps its shape (instead of `:finish` being read inside
    `:step`, or after the end of `defgenerate`).
    """
    plain: list[Diagnostic] = []
    out = _pair(chunk, plain)
    missing = sum(1 for t in chunk if t.type in _CLOSER) - sum(1 for t in chunk if t.type in ("RPAR", "RBRACK"))
    if not any(d.code in ("E-SYNTAX-001", "E-SYNTAX-002") for d in plain):
        diags.extend(plain)
        return out
    return _pair(chunk, diags, missing=max(missing, 0), extra=max(-missing, 0))


def _pair(chunk: list[Token], diags: list[Diagnostic], missing: int = 0, extra: int = 0) -> list[Token]:
    """Pair the brackets of `chunk`. With `missing` above 0, close the open brackets before
    a line that starts in the column of an item of a bracket they are inside (`:stride` under
    `:row` after `(list :row (field batch :row`), and close an open bracket before a line that
    starts left of the lines the bracket already holds (a `let*`'s body after bindings that
    lack their `)`), or, for a bracket that holds no line yet, a line that is not indented
    past the line the bracket opened on; with `extra` above 0, drop a closer at the end of a
    line when the next line is indented past the bracket it closes. Each at most that many
    times."""
    out: list[Token] = []
    stack: list[Token] = []
    indent: dict[int, int] = {}
    held: dict[int, int] = {}   # an open bracket (by id) -> the column of the first line it holds
    cols: dict[int, set] = {}   # an open bracket (by id) -> the columns its items start at
    for t in chunk:
        indent.setdefault(t.line, t.column)
    for i, tok in enumerate(chunk):
        starts_line = i == 0 or chunk[i - 1].line != tok.line
        sibling = 0   # how many open brackets this line's first token, aligned with an outer item, closes
        if missing and starts_line and tok.type not in ("RPAR", "RBRACK") and stack:
            j = next((j for j in range(len(stack) - 1, -1, -1) if tok.column in cols.get(id(stack[j]), ())), None)
            if j is not None and len(stack) - 1 - j <= missing:
                sibling = len(stack) - 1 - j
        while (missing and starts_line and tok.type not in ("RPAR", "RBRACK") and stack
               and stack[-1].line < tok.line
               and (sibling > 0 or tok.column < held.get(id(stack[-1]), indent[stack[-1].line] + 1))):
            sibling -= 1
            opener = stack.pop()
            missing -= 1
            empty = out[-1] is opener
            out.append(_synthetic_closer(opener, chunk[i - 1].end_pos))
            closer = _TEXT[_CLOSER[opener.type]]
            diags.append(error("E-SYNTAX-001", Span(opener.start_pos, opener.end_pos),
                               f"this `{opener}` is never closed" + (": it holds nothing" if empty else ""),
                               help="delete it" if empty else
                               f"add `{closer}` before line {tok.line}, where the indentation shows it ends"))
        if stack and tok.type not in ("RPAR", "RBRACK"):
            cols.setdefault(id(stack[-1]), set()).add(tok.column)
            if starts_line:
                held.setdefault(id(stack[-1]), tok.column)
        if tok.type in _CLOSER:
            stack.append(tok)
            out.append(tok)
        elif tok.type in ("RPAR", "RBRACK"):
            nxt = chunk[i + 1] if i + 1 < len(chunk) else None
            if (extra and stack and nxt is not None and nxt.line != tok.line
                    and stack[-1].line < nxt.line and nxt.column > stack[-1].column):
                extra -= 1
                diags.append(error("E-SYNTAX-002", Span(tok.start_pos, tok.end_pos),
                                   f"one `{tok}` too many: the next line is still inside the "
                                   f"`{stack[-1]}` opened at line {stack[-1].line}",
                                   help="delete it"))
                continue
            if not stack:
                diags.append(error("E-SYNTAX-002", Span(tok.start_pos, tok.end_pos),
                                   f"unexpected `{tok}`: no bracket is open here",
                                   help="delete it, or add the opening bracket it closes"))
                continue
            if missing and len(stack) > 1 and _CLOSER[stack[-1].type] != tok.type == _CLOSER[stack[-2].type]:
                # `(:row [seq :i32)`: the `[` lacks its closer, and this `)` is the `(`'s.
                opener = stack.pop()
                missing -= 1
                out.append(_synthetic_closer(opener, chunk[i - 1].end_pos))
                diags.append(error("E-SYNTAX-001", Span(opener.start_pos, opener.end_pos),
                                   f"this `{opener}` is never closed",
                                   help=f"add `{_TEXT[_CLOSER[opener.type]]}` before the `{tok}` at line {tok.line}"))
            opener = stack.pop()
            want = _CLOSER[opener.type]
            if tok.type != want:
                diags.append(error(
                    "E-SYNTAX-004", Span(tok.start_pos, tok.end_pos),
                    f"`{tok}` closes the `{opener}` opened at line {opener.line}, column {opener.column}; expected `{_TEXT[want]}`",
                    help=f"write `{_TEXT[want]}` here"))
                tok = Token(want, _TEXT[want], tok.start_pos, tok.line, tok.column, tok.end_pos)
            out.append(tok)
        else:
            out.append(tok)
    if stack:
        end = chunk[-1].end_pos
        for opener in reversed(stack):
            out.append(_synthetic_closer(opener, end))
        outer = stack[0]
        what = "form" if outer.type == "LPAR" else "vector"
        if len(stack) == 1 and chunk[-1] is outer:
            diags.append(error("E-SYNTAX-001", Span(outer.start_pos, outer.end_pos),
                               f"this `{outer}` is never closed: it holds nothing", help="delete it"))
            return out
        diags.append(error(
            "E-SYNTAX-001", Span(outer.start_pos, outer.end_pos),
            f"this `{outer}` is never closed: the {what} needs {len(stack)} more "
            f"`{_TEXT[_CLOSER[outer.type]]}`" if len(stack) == 1 or outer.type == "LPAR" else
            f"this `{outer}` is never closed",
            help="add the missing closing bracket at the end of the form"))
    return out


def _synthetic_closer(opener: Token, end: int) -> Token:
    # An empty value marks a closer that recovery supplied (a real one is never empty).
    return Token(_CLOSER[opener.type], "", end, None, None, end)


def _chunks(tokens: list[Token]) -> list[list[Token]]:
    """Split the token stream into top-level forms.

    A `(` in column 1 starts a new form when every bracket before it is
    closed, or when it opens a top-level form by name (`(run`, `(defmodel`
    ...): then a form left unclosed above costs one diagnostic, and every
    form after it is still read. A column-1 `(` inside a form that is still
    open and that names no top-level form (a `let*` binding written flush
    left, say) continues that form.
    """
    chunks: list[list[Token]] = []
    depth = 0
    for k, tok in enumerate(tokens):
        if tok.type == "LPAR" and tok.column == 1:
            nxt = tokens[k + 1] if k + 1 < len(tokens) else None
            names_form = nxt is not None and nxt.type == "SYMBOL" and nxt.value in TOP_LEVEL_HEADS
            if depth == 0 or names_form:
                chunks.append([])
                depth = 0
        if not chunks:
            chunks.append([])
        chunks[-1].append(tok)
        if tok.type in _CLOSER:
            depth += 1
        elif tok.type in ("RPAR", "RBRACK"):
            depth = max(0, depth - 1)
    return chunks


def parse(source: SourceText, cancel: CancelToken | None = None) -> ParseResult:
    """Parse a whole file. Never raises for any input text, but `Cancelled` once `cancel` is
    cancelled (checked between pieces of text and between top-level forms).

    Returns the top-level forms (each a `Node` with a `Span`), the syntax
    diagnostics (E-SYNTAX-001..004) and the comment ranges.

    Incremental: the text is cut before every `(` in column 1 (no token can
    span such a cut: strings and comments end at the line's end), each piece
    is lexed once per distinct text (`_LEXED`), each top-level form that
    parses without a diagnostic is balanced once per distinct text (`_BUILT`)
    and its nodes built once per text and offset (`_PLACED`). An edit re-lexes
    and re-balances only the forms whose text it changed, and rebuilds the
    nodes of the forms after it only when it moved them. A file with a lexing
    diagnostic is parsed whole (`_parse_whole`), as are the forms with
    bracket diagnostics, so every diagnostic is exactly the whole-file one.
    """
    text = source.text
    starts = [0] + [m.start() + 1 for m in itertools.islice(_PIECE.finditer(text), TOKEN_LIMIT + 1)]
    if len(starts) > TOKEN_LIMIT + 1:   # each piece starts with a `(`
        return _too_many_tokens(source, starts[TOKEN_LIMIT])
    if len(starts) > 1 and starts[1] == 0:
        starts.pop(0)
    pieces = []   # (offset, first line, lexed)
    line, prev, budget = 1, 0, TOKEN_LIMIT
    for k, s in enumerate(starts):
        if cancel is not None and not k & 255:
            cancel.check()
        e = starts[k + 1] if k + 1 < len(starts) else len(text)
        line += text.count("\n", prev, s)
        prev = s
        try:
            lexed = _lex_piece(text[s:e], budget)
        except _TooManyTokens as stop:
            return _too_many_tokens(source, s + stop.offset)
        if lexed is None:
            return _parse_whole(source, cancel)
        budget -= len(lexed[0]) + len(lexed[1])
        if budget < 0:
            return _too_many_tokens(source, s)
        pieces.append((s, line, lexed))
    # Group the pieces into top-level forms exactly as `_chunks` groups tokens.
    groups: list[list[int]] = []
    depth = 0
    for idx, (_, _, lexed) in enumerate(pieces):
        toks = lexed[0]
        if not toks:
            continue
        names_form = len(toks) > 1 and toks[1].type == "SYMBOL" and toks[1].value in TOP_LEVEL_HEADS
        if not groups or (toks[0].type == "LPAR" and toks[0].column == 1 and (depth == 0 or names_form)):
            groups.append([idx])
            depth = lexed[2]
        else:
            groups[-1].append(idx)
            depth = _depth_after(toks, depth)
    diags: list[Diagnostic] = []
    forms: list[Node] = []
    comments: list[Span] = []
    for s, _, lexed in pieces:
        comments.extend(Span(c.start + s, c.end + s) for c in lexed[1])
    for n, group in enumerate(groups):
        if cancel is not None and not n & 255:
            cancel.check()
        off, first_line, _ = pieces[group[0]]
        last = group[-1] + 1
        end = pieces[last][0] if last < len(pieces) else len(text)
        key = text[off:end]
        placed = _PLACED.lookup((key, off))
        if placed is MISSING:
            balanced = _BUILT.lookup(key)
            if balanced is MISSING:
                tokens = [t if (s - off, ln - first_line) == (0, 0) else _moved(t, s - off, ln - first_line)
                          for s, ln, lexed in (pieces[i] for i in group) for t in lexed[0]]
                local: list[Diagnostic] = []
                # A form nested too deep has a diagnostic for certain (E-SYNTAX-005): balance it
                # once, where it is, rather than here and again there (a 100,000-deep file).
                balanced = None if _too_deep(tokens, local) else _balanced_chunk(tokens, local, set())
                if local:
                    # Diagnostics name lines and offsets: parse this form where it is.
                    tokens = [_moved(t, s, ln - 1) for s, ln, lexed in (pieces[i] for i in group) for t in lexed[0]]
                    forms.extend(_build_all(_balanced_chunk(tokens, diags, set()), 0))
                    continue
                _remember(_BUILT, key, balanced, len(balanced))
            placed = _remember(_PLACED, (key, off), tuple(_build_all(balanced, off)), len(balanced))
        forms.extend(placed)
    diags.sort(key=lambda d: d.span.start)
    return ParseResult(source, tuple(forms), tuple(diags), tuple(comments))


_PIECE = re.compile(r"\n\(")
#: At most so many pieces, forms and placed forms kept (and the bytes of each space below).
_CACHE_MAX = 1 << 17
#: piece text -> (tokens, comments, bracket depth after it from 0), positions relative to the piece.
_LEXED = Space("lexed pieces of text", _CACHE_MAX, 48 << 20, files=False)
#: form text -> its balanced tokens, positions relative to the form's first piece (forms without diagnostics).
_BUILT = Space("balanced forms", _CACHE_MAX, 16 << 20, files=False)
#: (form text, offset) -> its forms at that offset.
_PLACED = Space("placed forms", _CACHE_MAX, 64 << 20, files=False)
#: The estimated bytes of a token (its object, its text), of a node and of an entry itself, for the
#: spaces' bounds (`sexpgpu_lang.kept`; measured with tracemalloc on the generated run files of benchmarks/).
TOKEN_BYTES, NODE_BYTES, ENTRY_BYTES = 120, 200, 300


def forget() -> None:
    """Drop the parse caches."""
    for cache in (_LEXED, _BUILT, _PLACED):
        cache.clear()


def _remember(cache: Space, key, value, tokens: int):
    """Keep `value` (from `tokens` tokens) in `cache` under `key`."""
    text = key if isinstance(key, str) else key[0]
    return cache.keep(key, value, ENTRY_BYTES + len(text) + tokens * (NODE_BYTES if cache is _PLACED else TOKEN_BYTES))


def _too_many_tokens(source: SourceText, offset: int) -> ParseResult:
    """The one E-SYNTAX-006 of a file past TOKEN_LIMIT, at the token that passed it; no forms."""
    at = Span(offset, min(offset + 1, len(source.text)))
    return ParseResult(source, (), (error(
        "E-SYNTAX-006", at, f"the file holds more than {TOKEN_LIMIT:,} tokens (TOKEN_LIMIT), so it is not "
        "checked", help="a run file states a run: generate data into a data file (`tokens`, `jsonl`, `npz`) "
        "and name it from a loader, rather than writing it into the run file"),), ())


def _lex_piece(piece: str, limit: int | None = None):
    """The piece's tokens, comments and closing depth (cached), or None when lexing it reports anything;
    _TooManyTokens past `limit` tokens and comments."""
    hit = _LEXED.lookup(piece)
    if hit is not MISSING:
        return hit
    diags: list[Diagnostic] = []
    tokens, comments = _lex(piece, diags, limit=limit)
    if diags:
        return None
    return _remember(_LEXED, piece, (tokens, comments, _depth_after(tokens, 0)), len(tokens) + len(comments))


def _depth_after(tokens: list[Token], depth: int) -> int:
    for tok in tokens:
        if tok.type in _CLOSER:
            depth += 1
        elif tok.type in ("RPAR", "RBRACK"):
            depth = max(0, depth - 1)
    return depth


def _moved(tok: Token, dpos: int, dline: int) -> Token:
    return Token(tok.type, tok.value, tok.start_pos + dpos, tok.line + dline, tok.column, tok.end_pos + dpos)


def _parse_whole(source: SourceText, cancel: CancelToken | None = None) -> ParseResult:
    """`parse` without the caches: lex the whole text, then parse each top-level form."""
    diags: list[Diagnostic] = []
    unterminated: set[int] = set()
    try:
        tokens, comments = _lex(source.text, diags, unterminated, limit=TOKEN_LIMIT)
    except _TooManyTokens as stop:
        return _too_many_tokens(source, stop.offset)
    forms: list[Node] = []
    for n, chunk in enumerate(_chunks(tokens)):
        if cancel is not None and not n & 255:
            cancel.check()
        forms.extend(_parse_chunk(chunk, diags, unterminated))
    diags.sort(key=lambda d: d.span.start)
    return ParseResult(source, tuple(forms), tuple(diags), tuple(comments))


def parse_region(text: str, start: int, end: int) -> tuple[tuple[Node, ...], tuple[Diagnostic, ...]]:
    """The top-level forms of `text[start:end]`, a region starting at a line's start and holding whole
    forms, with their spans in `text`: the nodes `parse` gives for them in the whole text. Also the
    region's syntax diagnostics, their spans relative to the region (a caller reading a trusted text
    in part expects none). The standard library's functions are parsed so, one at a time, when a
    file first calls them (check/scope.py)."""
    diags: list[Diagnostic] = []
    unterminated: set[int] = set()
    tokens, _ = _lex(text[start:end], diags, unterminated)
    forms: list[Node] = []
    for chunk in _chunks(tokens):
        forms.extend(_build_all(_balanced_chunk(chunk, diags, unterminated), start))
    return tuple(forms), tuple(diags)


def _parse_chunk(chunk: list[Token], diags: list[Diagnostic], unterminated: set[int]) -> list[Node]:
    """The forms of one top-level chunk of tokens, with their paths; its diagnostics go to `diags`."""
    return _build_all(_balanced_chunk(chunk, diags, unterminated), 0)


def _balanced_chunk(chunk: list[Token], diags: list[Diagnostic], unterminated: set[int]) -> list[Token]:
    """One top-level chunk of tokens balanced (and cut at MAX_DEPTH); its diagnostics go to `diags`."""
    deep = _too_deep(chunk, diags)
    before = len(diags)
    balanced = _balance(chunk, diags)
    if any(t.type == "STRING" and t.start_pos in unterminated for t in chunk):
        # The string swallowed the rest of its line, closing brackets included: the
        # E-SYNTAX-003 already said so; the brackets it ate are not reported again.
        diags[before:] = [d for d in diags[before:] if d.code not in ("E-SYNTAX-001", "E-SYNTAX-002", "E-SYNTAX-004")]
    if deep:
        balanced = _cut_deep(balanced)
    return balanced


def _build_all(balanced: list[Token], d: int) -> list[Node]:
    """The nodes of a balanced chunk, each with its path, spans moved by `d`."""
    out = []
    i = 0
    while i < len(balanced):
        node, i = _build(balanced, i, (_key_at(balanced, i),), d)
        out.append(node)
    return out


def _key_at(tokens: list[Token], i: int) -> str:
    """`form_key` of the form that starts at token `i`, read from the tokens."""
    if tokens[i].type != "LPAR":
        return "?"
    head = tokens[i + 1]
    if head.type != "SYMBOL" or head.value == "":
        return "?"
    name = tokens[i + 2]
    if head.value != "defgenerate" and (name.type == "KEYWORD" or (name.type == "SYMBOL" and name.value != "")):
        return f"{head.value} {name.value[1:] if name.type == 'KEYWORD' else name.value}"
    return head.value


def _build(tokens: list[Token], i: int, path: tuple, d: int = 0) -> tuple[Node, int]:
    """The node that starts at token `i` of a balanced token list, and the index after it.

    The token list is balanced (`_balance`) and nests at most MAX_DEPTH deep
    (`_cut_deep`), so this is the grammar's whole parse: a bracket, its items,
    its closer; or one atom. Spans are the tokens' positions plus `d`."""
    tok = tokens[i]
    kind = tok.type
    if kind == "LPAR" or kind == "LBRACK":
        items = []
        j = i + 1
        while tokens[j].type != "RPAR" and tokens[j].type != "RBRACK":
            node, j = _build(tokens, j, path + (len(items),), d)
            items.append(node)
        closer = tokens[j]
        span = Span(tok.start_pos + d, closer.end_pos + d)
        cls = ListNode if kind == "LPAR" else VecNode
        return cls(span, path, tuple(items), closer.value != ""), j + 1
    span = Span(tok.start_pos + d, tok.end_pos + d)
    if kind == "INT":
        return Num(span, path, int(tok.value), False), i + 1
    if kind == "FLOAT":
        return Num(span, path, float(tok.value), True), i + 1
    if kind == "STRING":
        return Str(span, path, _unescape(tok.value)), i + 1
    if kind == "KEYWORD":
        return Kw(span, path, tok.value[1:]), i + 1
    if tok.value == "":
        return ErrorNode(span, path), i + 1
    return Sym(span, path, tok.value), i + 1


def _cut_deep(tokens: list[Token]) -> list[Token]:
    """Replace each bracket nested deeper than MAX_DEPTH, with all it holds, by one
    placeholder (an empty SYMBOL, which no text lexes to) that becomes an `ErrorNode`."""
    out: list[Token] = []
    depth = i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.type in _CLOSER and depth == MAX_DEPTH:
            j, d = i, 0
            while j < len(tokens):   # the tokens are balanced: find this bracket's closer
                d += 1 if tokens[j].type in _CLOSER else -1 if tokens[j].type in ("RPAR", "RBRACK") else 0
                if d == 0:
                    break
                j += 1
            j = min(j, len(tokens) - 1)
            out.append(Token("SYMBOL", "", tok.start_pos, None, None, max(tok.end_pos, tokens[j].end_pos)))
            i = j + 1
            continue
        depth += 1 if tok.type in _CLOSER else -1 if tok.type in ("RPAR", "RBRACK") else 0
        out.append(tok)
        i += 1
    return out


_ESCAPE = re.compile(r"\\(.)", re.S)
_ESCAPED = {"n": "\n", "t": "\t"}


def _unescape(s: str) -> str:
    """A STRING token's value: the quotes dropped, `\\n` and `\\t` a newline and a tab, any other
    escaped character itself. One regular-expression pass (linear time, no list a character)."""
    body = s[1:-1]
    if "\\" not in body:
        return body
    if body.endswith("\\") and (len(body) - len(body.rstrip("\\"))) % 2:   # a lone backslash at the end stays
        return _ESCAPE.sub(lambda m: _ESCAPED.get(m.group(1), m.group(1)), body[:-1]) + "\\"
    return _ESCAPE.sub(lambda m: _ESCAPED.get(m.group(1), m.group(1)), body)


def form_key(form: Node) -> str:
    """The stable name of a top-level form: `defmodel student`, `defgenerate`, `pass eval`."""
    if isinstance(form, ListNode) and form.head:
        if len(form.items) > 1 and isinstance(form.items[1], (Sym, Kw)) and form.head not in ("defgenerate",):
            return f"{form.head} {form.items[1].name}"
        return form.head
    return "?"

