#!/usr/bin/env python3
"""Shrink a diagnostic record's example (`sexpgpu_lang/diagnostic_docs/FAMILY/CODE[.SLUG].sx`)
to a small run file that gives the same diagnostics, and mark them again.

    python scripts/shrink_example.py PATH...          # print each shrunk file
    python scripts/shrink_example.py --write PATH...  # rewrite each file in place
    python scripts/shrink_example.py --write --fix ':bias' ':b' PATH   # its twin, given

A candidate is kept when the checker's diagnostics are the same as the original's as a
multiset of (code, severity, the text of the range's first line, the message with its
numbers blanked): the same mistakes at the same places, nothing new of any severity; when
every line of the record's ```lisp excerpts still appears in one of its examples
(tests/test_errors_examples.py); and, for an example that is tests/fixtures/tiny-generate.sx
with a few lines edited (or given `--fix MISTAKE FIXED`), when its twin (the candidate with
those lines put back) is clean.
The twin keeps the rest of the file a sensible run: an early error (a syntax or form
mistake) stops later checks, and without it a shrunk file could hide a second mistake.
The passes, repeated until none removes anything:

1. each group of `REWRITES` (whole-file edits of the fixture's body: no generation accuracy,
   no generator, a `:step` that writes the model's guess over the row, a two-parameter
   model, a one-line objective, `run` without its options);
2. each top-level block (lines between blank lines) that is not all comments, then each
   top-level form;
3. each `:key value` pair (not the last element of a list, nor a key in `PROTECT`), each
   `let*` binding, and each statement of a body before its last;
4. for a file whose brackets do not balance, each line that is balanced on its own.

Comment lines outside removed forms stay (a record's first line says what is wrong).
The output's `;; ^^^ CODE` markers are written from the shrunk file's diagnostics, in the
form `tests/helpers.check` reads. The result is a starting point: read it, and edit it by
hand until a reader sees the mistake at once. Imports sexpgpu_lang only (never JAX).
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sexpgpu_lang import analyze  # noqa: E402
from sexpgpu_lang.diagnostic_docs import drop_comment, excerpt_lines, normalise, records  # noqa: E402

_MARK = re.compile(r"^(\s*);;(\s*)(\^+)\s+([A-Z]+-[A-Z]+-\d+)(?:\s+\(from column (\d+)\))?\s*$")

#: Groups of (old, new) edits tried together: the fixture's generator and what reads its
#: output, replaced by a prepare that reads the loader's rows.
REWRITES: tuple[tuple[tuple[str | re.Pattern, str], ...], ...] = (
    (   # the generator's accuracy, and what reads it
        ("\n                   (column (iota [1 seq] :axis 1))\n"
         "                   (truth (mod (+ (take row [0] :axis 1) (* column stride)) vocab)))", ")"),
        ("\n                    :correct (mean (cast (= row truth) :f32) :axes [1] :keepdims true)", ""),
        ("\n        :correct (field batch :correct)", ""),
        ("\n    (metric :generation-accuracy (mean (getf inputs :correct)))", ""),
    ),
    (   # no generator: prepare reads the loader's rows
        (re.compile(r"\n\(defgenerate .*?\n(?=\n\()", re.S), ""),
        ("(field batch :sample)", "(field batch :row)"),
        ("(field batch :label)", "(mod (+ (field batch :row) (field batch :stride)) vocab)"),
    ),
    (   # a :step that writes the model's guess over the whole row
        (re.compile(r"  :step \(lambda \(state trip ctx\)\n          \(let\* \(\(row \(getf state :row\)\)\n"
                    r"                 \(at .*?\n                  :stride \(getf state :stride\)\)\)\)", re.S),
         "  :step (lambda (state trip ctx)\n"
         "          (list :row (argmax (model (getf state :row)))\n"
         "                :stride (getf state :stride)))"),
    ),
    (   # a two-parameter model
        (re.compile(r"\(defmodel student\n  :params \(:embed .*?\n\n", re.S),
         "(defmodel student\n"
         "  :params (:embed (normal [vocab dim] :std 0.1)\n"
         "           :out (normal [dim vocab] :std 0.1))\n"
         "  :apply (lambda (self row)\n"
         "           (matmul (take (getf self :embed) row) (getf self :out))))\n\n"),
    ),
    (   # a one-line objective
        (re.compile(r"\(objective \(lambda \(inputs ctx\)\n"
                    r"  \(let\* \(\(logits \(model \(getf inputs :input\)\)\)\n"
                    r"         \(loss \(mean \(cross-entropy logits \(getf inputs :target\)\)\)\)\)\n"
                    r"(?:    \(metric [^\n]*\n)*    loss\)\)\)"),
         "(objective (lambda (inputs ctx)\n"
         "  (mean (cross-entropy (model (getf inputs :input)) (getf inputs :target)))))"),
    ),
    (   # run's options that a file whose brackets do not balance cannot lose line by line
        ("\n     :log (:every 50))", ")"),
        ("\n     :optimizer (adam :lr 3e-3)", ""),
        ("\n     :precision :f32", ""),
        ("\n     :seed 0", ""),
        ("\n     :stack 2", ""),
        ("\n     :microbatches 2", ""),
    ),
)

#: Keys whose pair is never removed: a loader source's sizes, and arguments whose default
#: means something else (an axis, an initial scale), which would leave a wrong program.
PROTECT = frozenset({":vocab", ":seq", ":axis", ":axes", ":keepdims", ":std"})


def unmarked(text: str) -> str:
    """`text` without its marker lines."""
    return "\n".join(line for line in text.split("\n") if not _MARK.match(line))


# ---- the record's excerpts (as tests/test_errors_examples.py reads them) ----

def excerpt_patterns(explanation: str) -> list[re.Pattern]:
    """One pattern per code line of the ```lisp excerpts (`...` is any text): diagnostic_docs.excerpt_lines."""
    return [pat for _, pat in excerpt_lines(explanation)]


# ---- diagnostics ----

def signature(text: str, path: str) -> Counter:
    """The diagnostics of `text` as a multiset of (code, severity, range's first-line text,
    message with numbers blanked)."""
    res = analyze(text, path, build_ir=False)
    out = Counter()
    for d in res.diagnostics:
        span = text[d.span.start:d.span.end].split("\n", 1)[0]
        out[(d.code, str(d.severity), span, re.sub(r"\d+", "#", d.message))] += 1
    return out


def with_markers(text: str, path: str) -> str:
    """`text` (unmarked) with a marker line under each diagnostic's line (tests/helpers.check)."""
    res = analyze(text, path, build_ir=False)
    lines = text.split("\n")
    under: dict[int, list[str]] = {}
    for d in sorted(res.diagnostics, key=lambda d: (d.span.start, d.span.end, d.code)):
        (l0, c0), (l1, c1) = res.source.line_col(d.span.start), res.source.line_col(d.span.end)
        width = max(1, c1 - c0) if l1 == l0 else 1
        if c0 >= 2:
            marker = ";;" + " " * (c0 - 2) + "^" * width + " " + d.code
        else:
            marker = ";; " + "^" * width + f" {d.code} (from column {c0 + 1})"
        under.setdefault(l0, []).append(marker)
    out = []
    for i, line in enumerate(lines):
        out.append(line)
        out.extend(under.get(i, []))
    return "\n".join(out)


# ---- a tolerant reader of the file's forms ----

class Node:
    __slots__ = ("start", "end", "children", "kind")

    def __init__(self, start, end, kind, children=()):
        self.start, self.end, self.kind, self.children = start, end, kind, list(children)


_OPEN = {"(": ")", "[": "]", "{": "}"}


def read_forms(text: str) -> list[Node] | None:
    """The top-level forms of `text` with their offsets; None when the brackets do not balance."""
    stack: list[tuple[int, str, list]] = [(0, "", [])]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c == ";":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                return None
            stack[-1][2].append(Node(i, j + 1, "atom"))
            i = j + 1
        elif c in _OPEN:
            stack.append((i, _OPEN[c], []))
            i += 1
        elif c in ")]}":
            if len(stack) == 1 or stack[-1][1] != c:
                return None
            start, _, kids = stack.pop()
            stack[-1][2].append(Node(start, i + 1, "list", kids))
            i += 1
        else:
            j = i
            while j < n and text[j] not in " \t\r\n;\"()[]{}":
                j += 1
            stack[-1][2].append(Node(i, j, "atom"))
            i = j
    return stack[0][2] if len(stack) == 1 else None


def _walk(nodes):
    for node in nodes:
        yield node
        yield from _walk(node.children)


def _in_comment(text: str, pos: int) -> bool:
    """Whether offset `pos` is inside a `;` comment (of its line)."""
    line_start = text.rfind("\n", 0, pos) + 1
    prefix = text[line_start:pos + 1]
    return drop_comment(prefix) != prefix


def _cut(text: str, start: int, end: int) -> str:
    """`text` without [start, end) and the blank run before it (or after it, where the text
    before is an opening bracket or a comment)."""
    s = start
    while s > 0 and text[s - 1] in " \t\n":
        s -= 1
    if s == 0 or text[s - 1] in "([{" or _in_comment(text, s - 1):
        e = end
        blanks = " \t\n" if s and text[s - 1] in "([{" else " \t"
        while e < len(text) and text[e] in blanks:
            e += 1
        return text[:start] + text[e:]
    return text[:s] + text[end:]


def tidy(text: str) -> str:
    """Trailing blanks off, no run of blank lines, no blank line before a closing bracket."""
    lines = [line.rstrip() for line in text.split("\n")]
    out: list[str] = []
    for line in lines:
        if not line and out and not out[-1]:
            continue
        out.append(line)
    text = "\n".join(out).strip("\n") + "\n"
    return re.sub(r"\n\n+(\s*[)\]}])", r"\1", text)


def _head(text: str, node: Node) -> str:
    kid = node.children[0] if node.children else None
    return text[kid.start:kid.end] if kid is not None and kid.kind == "atom" else ""


def _removable(text: str, node: Node):
    """The (start, end) ranges of `node`'s children that may go: `:key value` pairs, `let*`
    bindings and the statements of a body before its last; never the last element of a list
    (no `()` or `(list)` is left)."""
    kids = node.children
    head = _head(text, node)
    floor = 2 if head and not head.startswith(":") else 1
    if head in ("let*", "let") and len(kids) > 1 and kids[1].kind == "list" and len(kids[1].children) > 1:
        for b in kids[1].children:
            yield b.start, b.end
    if head == "lambda":
        for kid in kids[2:-1]:
            yield kid.start, kid.end
    if head in ("let*", "let"):
        for kid in kids[2:-1]:
            yield kid.start, kid.end
    k = 1 if head and not head.startswith(":") else 0
    while k + 1 < len(kids):
        kid = kids[k]
        if kid.kind == "atom" and text[kid.start] == ":":
            if len(kids) - 2 >= floor and text[kid.start:kid.end] not in PROTECT:
                yield kid.start, kids[k + 1].end
            k += 2
        else:
            k += 1


def _balanced(line: str) -> bool:
    code = drop_comment(line)
    return read_forms(code) is not None and bool(code.strip())


def candidates(text: str, inner: bool = True):
    """Smaller texts: top-level blocks, then top-level forms, then removable children
    (largest first), then (for a file whose brackets do not balance) balanced lines."""
    forms = read_forms(text)
    blocks = re.split(r"(\n\s*\n)", text)
    for i in range(0, len(blocks), 2):
        body = blocks[i]
        if all(not l.strip() or l.lstrip().startswith(";") for l in body.split("\n")):
            continue
        yield "".join(blocks[:i] + blocks[i + 1:])
    if forms is not None:
        for form in forms:
            yield _cut(text, form.start, form.end)
        if not inner:
            return
        ranges = sorted({r for node in _walk(forms) if node.kind == "list" for r in _removable(text, node)},
                        key=lambda r: r[0] - r[1])
        for start, end in ranges:
            yield _cut(text, start, end)
    elif inner:
        lines = text.split("\n")
        for i in range(len(lines) - 1, -1, -1):
            if _balanced(lines[i]) and not lines[i].lstrip().startswith(";"):
                yield "\n".join(lines[:i] + lines[i + 1:])


def apply_rewrite(text: str, group) -> str | None:
    """`text` with a `REWRITES` group's edits made (a plain `old` that is not there is skipped);
    None when one of its patterns does not match."""
    for old, new in group:
        if isinstance(old, re.Pattern):
            text, n = old.subn(new, text, count=1)
            if not n:
                return None
        elif old in text:
            text = text.replace(old, new)
    return text


FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"


def mistakes(text: str) -> list[tuple[str, str]] | None:
    """The (fixture's text, example's text) of each hunk where `text` differs from the body of
    tests/fixtures/tiny-generate.sx (after its header comment); None when `text` is not such a
    variant (most of it is not the fixture's)."""
    import difflib
    fixture = FIXTURE.read_text(encoding="utf-8").split("\n\n", 1)[1].split("\n")
    lines = text.split("\n")
    first = next((i for i, l in enumerate(lines) if l.strip() and not l.startswith(";")), 0)
    body = lines[first:]
    sm = difflib.SequenceMatcher(None, fixture, body, autojunk=False)
    if sm.ratio() < 0.8:
        return None
    out = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        if j1 == j2:                       # lines dropped: anchor on the lines before, enough to be unique
            k = j1 - 1
            rest = _header(text)[1]
            while k >= 0 and (not "\n".join(body[k:j1]).strip() or rest.count("\n".join(body[k:j1])) != 1):
                k -= 1
            if k < 0:
                return None
            out.append(("\n".join([*body[k:j1], *fixture[i1:i2]]), "\n".join(body[k:j1])))
        else:
            out.append(("\n".join(fixture[i1:i2]), "\n".join(body[j1:j2])))
    return out


def twin(text: str, hunks: list[tuple[str, str]]) -> str | None:
    """`text` with each hunk's example text put back to the fixture's (the file without its
    mistake); None when a hunk's text is no longer in `text` whole."""
    head, body = _header(text)
    for old, new in hunks:
        if body.count(new) != 1:
            return None
        body = body.replace(new, old, 1)
    return head + body


def _header(text: str) -> tuple[str, str]:
    """`text` split after its leading comment and blank lines."""
    m = re.match(r"(?:[ \t]*(?:;[^\n]*)?\n)*", text)
    return text[:m.end()], text[m.end():]


def shrink(path: Path, others: list[str] | None = None, patterns: list[re.Pattern] | None = None,
           log=None, fixes: list[tuple[str, str]] | None = None) -> str:
    """The shrunk, marked text of the example at `path`; `others` are the unmarked texts of the
    record's other examples, `patterns` its excerpt lines (each must stay in one of them).
    `fixes` are (fixed text, mistaken text) pairs that make the twin of a file that is not a
    fixture variant (each mistaken text must be in the file once)."""
    name = str(path)
    text = tidy(unmarked(path.read_text(encoding="utf-8")))
    want = signature(text, name)
    others_norm = [normalise(t) for t in (others or [])]
    # only the excerpt lines the examples hold now (others may be in a tests/cases-files case)
    patterns = [p for p in patterns or [] if any(p.search(t) for t in [*others_norm, normalise(text)])]

    hunks = fixes if fixes else mistakes(text)
    if hunks is not None and (twin(text, hunks) is None or signature(twin(text, hunks), name)):
        hunks = None                       # its twin is not clean: shrink by the diagnostics alone

    def ok(candidate: str) -> bool:
        if hunks is not None:
            fixed = twin(candidate, hunks)
            if fixed is None or signature(fixed, name):
                return False
        if patterns:
            texts = [*others_norm, normalise(candidate)]
            if not all(any(p.search(t) for t in texts) for p in patterns):
                return False
        return signature(candidate, name) == want

    for group in REWRITES:
        new = apply_rewrite(text, group)
        if new is not None and new != text and ok(tidy(new)):
            text = tidy(new)
    changed = True
    while changed:
        changed = False
        for cand in candidates(text, inner=hunks is not None):
            cand = tidy(cand)
            if len(cand) < len(text) and ok(cand):
                text = cand
                changed = True
                if log:
                    log(f"  {path.name}: {text.count(chr(10))} lines")
                break
    return with_markers(text, name).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--write", action="store_true", help="rewrite each file in place")
    ap.add_argument("-v", action="store_true", help="print progress to stderr")
    ap.add_argument("--fix", nargs=2, action="append", metavar=("MISTAKE", "FIXED"), default=[],
                    help="the file's twin (the mistake undone) replaces MISTAKE by FIXED: for an "
                         "example that is not a variant of tests/fixtures/tiny-generate.sx")
    args = ap.parse_args(argv)
    recs = {str(p.resolve()): rec for rec in records().values() for p in rec.examples}
    for path in args.paths:
        rec = recs.get(str(path.resolve()))
        others, patterns = [], []
        if rec is not None:
            others = [unmarked(p.read_text(encoding="utf-8")) for p in rec.examples if p.resolve() != path.resolve()]
            patterns = excerpt_patterns(rec.explanation + "\n" + rec.fix)
        out = shrink(path, others, patterns, log=(lambda s: print(s, file=sys.stderr)) if args.v else None,
                     fixes=[(fixed, mistake) for mistake, fixed in args.fix])
        if args.write:
            path.write_text(out, encoding="utf-8")
            print(f"{path}: {out.count(chr(10))} lines", file=sys.stderr)
        else:
            sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
