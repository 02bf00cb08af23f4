"""Run files built by form name: `RunFile`, a run file's text that tests change by naming the
form (and the keyword inside it) a change is made to, instead of replacing raw strings in the
whole file.

A *place* names a node of the syntax tree (sexpgpu_lang/syntax.py) in words:

* a top-level form by its key (`syntax.form_key`): `"defmodel student"`, `"def seq"`,
  `"loader train"`, `"pass eval"`, or by its head alone where one form has it: `"run"`,
  `"model"`, `"defgenerate"`, `"prepare"`, `"objective"`;
* then, one after another, a keyword (`:step`, `:log`, `:every`): the value after it in the
  list reached so far (a form's `:key value` pairs, or a plist such as `(:every 50)`);
* or `(NAME`: the list below the node reached so far whose head is the symbol NAME (a call
  `(argmax`, or a `let*` binding `(truth`), the outermost where such lists nest; two such lists
  side by side are refused.

So `"run :log :every"` is the `50` of `(run ... :log (:every 50))`, and
`"defgenerate :step (argmax"` is `(argmax (model row))` inside the generator's `:step`.

Every change returns a new `RunFile` (the text is a `str`, so `check`, `analyze` and
`train_quiet` read it as it is) and fails the test, naming what is there, when its place is
not: a change meant for a form never silently lands somewhere else or nowhere.

    RunFile.fixture().set("run :stack", "1")                  # a keyword's value
    RunFile.fixture().set("run :diagnostics", "[:nope]")      # added when the form lacks it
    RunFile.small().set("defmodel lm", "(defmodel lm ...)")   # a whole form
    RunFile.fixture().drop("run :microbatches")               # a `:key value` pair removed
    RunFile.fixture().add("(def extra 3)", before="defmodel student")
    RunFile.fixture().insert("defgenerate :step (guess", "(s (stop-rows ...))")   # a `let*` binding after it
    RunFile.fixture().edit("defgenerate :step", "(argmax (model row))", "(argmx (model row))")
    RunFile.fixture().set("defgenerate :step (argmax", "(argmx (model row))").mark(
        "defgenerate :step", "argmx", "E-NAME-001")           # a `;; ^^^ CODE` marker under it
"""
from __future__ import annotations

from pathlib import Path

from sexpgpu_lang import SourceText
from sexpgpu_lang.syntax import Kw, ListNode, Node, Sym, VecNode, form_key, parse, walk

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"


class RunFile(str):
    """A run file's text with edits addressed by place (see the module docstring)."""

    @classmethod
    def fixture(cls) -> "RunFile":
        """tests/fixtures/tiny-generate.sx: a loader, the model `student`, a generator
        (`defgenerate :trips 6`), `prepare`, `objective` and `run` (`:stack 2`, `:microbatches 2`,
        `:precision :f32`, `:seed 0`, `:log (:every 50)`)."""
        return cls(FIXTURE.read_text())

    @classmethod
    def small(cls) -> "RunFile":
        """helpers.SMALL: a loader `train`, the model `lm`, `prepare`, `objective` and `run`."""
        from helpers import SMALL
        return cls(SMALL)

    @classmethod
    def read(cls, path: Path) -> "RunFile":
        """The run file at `path`."""
        return cls(Path(path).read_text(encoding="utf-8"))

    # ------------------------------------------------------------------ places

    def _forms(self):
        return parse(SourceText(str(self))).forms

    def _form(self, key: str) -> Node:
        forms = self._forms()
        exact = [f for f in forms if form_key(f) == key]
        if len(exact) == 1:
            return exact[0]
        by_head = [f for f in forms if isinstance(f, ListNode) and f.head == key]
        if not exact and len(by_head) == 1:
            return by_head[0]
        keys = [form_key(f) for f in forms]
        raise AssertionError(f"{len(exact) or len(by_head)} forms named {key!r} in the run file (its forms: {keys})")

    def node(self, place: str) -> Node:
        """The syntax node at `place` (its `span` is its range in this text)."""
        key, steps = _split(place)
        node = self._form(key)
        for step in steps:
            node = _step(node, step, place, str(self))
        return node

    def text_of(self, place: str) -> str:
        """The text of the node at `place`."""
        span = self.node(place).span
        return str(self)[span.start:span.end]

    def _splice(self, start: int, end: int, new: str) -> "RunFile":
        return RunFile(str(self)[:start] + new + str(self)[end:])

    # ------------------------------------------------------------------ changes

    def set(self, place: str, value: str) -> "RunFile":
        """The node at `place` replaced by the text `value`. A place that ends with a keyword
        the form (or plist) lacks gets `:key value` added at its end, on a line of its own
        aligned with the keywords before it (or after the last item when they share a line)."""
        key, steps = _split(place)
        if steps and steps[-1].startswith(":"):
            parent = self.node(_join(key, steps[:-1]))
            if _keyword_index(parent, steps[-1]) is None:
                return self._append(parent, f"{steps[-1]} {value}")
        span = self.node(place).span
        return self._splice(span.start, span.end, value)

    def _append(self, parent: Node, text: str) -> "RunFile":
        if not isinstance(parent, (ListNode, VecNode)) or not parent.closed:
            raise AssertionError(f"cannot add {text!r} to {str(self)[parent.span.start:parent.span.end]!r}")
        source = SourceText(str(self))
        last = parent.items[-1] if parent.items else None
        keys = [i for i in parent.items if isinstance(i, Kw)]
        if last is None:
            return self._splice(parent.span.end - 1, parent.span.end - 1, text)
        same_line = source.line_col(keys[0].span.start)[0] == source.line_col(last.span.start)[0] if keys else True
        if same_line:
            return self._splice(last.span.end, last.span.end, " " + text)
        column = source.line_col(keys[-1].span.start)[1]
        return self._splice(last.span.end, last.span.end, "\n" + " " * column + text)

    def drop(self, place: str) -> "RunFile":
        """The text without the node at `place`: a keyword's `:key value` pair, a top-level form
        (with the blank line after it), or a list found by `(NAME`."""
        key, steps = _split(place)
        if not steps:
            form = self._form(key)
            text = str(self)
            end = form.span.end
            while end < len(text) and text[end] in " \t":
                end += 1
            end += text.startswith("\n\n", end) and 2 or text.startswith("\n", end)
            return self._splice(form.span.start, end, "")
        if steps[-1].startswith(":"):
            parent = self.node(_join(key, steps[:-1]))
            i = _keyword_index(parent, steps[-1])
            if i is None or i + 1 >= len(parent.items):
                raise AssertionError(f"no {steps[-1]} in {place!r}")
            return self._splice(parent.items[i - 1].span.end if i else parent.span.start + 1,
                                parent.items[i + 1].span.end, "")
        node = self.node(place)
        start = node.span.start
        while start > 0 and str(self)[start - 1] == " ":
            start -= 1
        return self._splice(start, node.span.end, "")

    def add(self, forms: str, *, before: str | None = None, after: str | None = None) -> "RunFile":
        """The text with the top-level `forms` (text) added: before or after the form named
        `before`/`after`, else at the end, each separated by a blank line."""
        forms = forms.strip("\n")
        if before is not None:
            at = self._form(before).span.start
            return self._splice(at, at, forms + "\n\n")
        if after is not None:
            at = self._form(after).span.end
            return self._splice(at, at, "\n\n" + forms)
        return self._splice(len(str(self).rstrip("\n")), len(self), "\n\n" + forms + "\n")

    def insert(self, place: str, text: str, *, before: bool = False) -> "RunFile":
        """`text` put after the node at `place` (before it with `before`), on a line of its own at
        the node's column: a `let*` binding after another, a statement before a body's last form."""
        span = self.node(place).span
        column = SourceText(str(self)).line_col(span.start)[1]
        if before:
            return self._splice(span.start, span.start, text + "\n" + " " * column)
        return self._splice(span.end, span.end, "\n" + " " * column + text)

    def edit(self, place: str, old: str, new: str) -> "RunFile":
        """`old` replaced by `new` inside the node at `place`, where `old` occurs exactly once
        (for a change below what a place can name: part of an expression, a `let*` line)."""
        span = self.node(place).span
        inside = str(self)[span.start:span.end]
        count = inside.count(old)
        if count != 1:
            raise AssertionError(f"{old!r} occurs {count} times in {place!r}, not once:\n{inside}")
        at = span.start + inside.index(old)
        return self._splice(at, at + len(old), new)

    def mark(self, place: str, snippet: str, code: str) -> "RunFile":
        """The text with a `;; ^^^ CODE` marker line (tests/helpers.check) under the one
        occurrence of `snippet` inside the node at `place`."""
        span = self.node(place).span
        text = str(self)
        inside = text[span.start:span.end]
        if inside.count(snippet) != 1:
            raise AssertionError(f"{snippet!r} occurs {inside.count(snippet)} times in {place!r}, not once")
        start = span.start + inside.index(snippet)
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        line_end = len(text) if line_end < 0 else line_end
        col = start - line_start
        marker = ";;" + " " * (col - 2) + "^" * len(snippet) + " " + code if col >= 2 else \
            ";; " + "^" * len(snippet) + f" {code} (from column {col + 1})"
        return self._splice(line_end, line_end, "\n" + marker)

    def header(self, lines: str) -> "RunFile":
        """The text with its leading `;;` comment lines replaced by `lines` (a case's `;; expect:`)."""
        body = str(self)
        while body.startswith(";;"):
            body = body.split("\n", 1)[1] if "\n" in body else ""
        return RunFile(lines.rstrip("\n") + "\n" + body)


def _split(place: str) -> tuple[str, list[str]]:
    words = place.split()
    i = next((k for k, w in enumerate(words) if w.startswith((":", "("))), len(words))
    if i == 0:
        raise AssertionError(f"a place starts with a top-level form's name, not {place!r}")
    return " ".join(words[:i]), words[i:]


def _join(key: str, steps: list[str]) -> str:
    return " ".join([key, *steps])


def _keyword_index(node: Node, keyword: str) -> int | None:
    if not isinstance(node, (ListNode, VecNode)):
        raise AssertionError(f"{keyword} asked of a node that is not a list")
    for i, item in enumerate(node.items[:-1]):
        if isinstance(item, Kw) and item.name == keyword[1:]:
            return i
    return None


def _step(node: Node, step: str, place: str, text: str) -> Node:
    if step.startswith(":"):
        i = _keyword_index(node, step)
        if i is None:
            keys = [f":{k.name}" for k in getattr(node, "items", ()) if isinstance(k, Kw)]
            raise AssertionError(f"no {step} in {place!r} (there: {keys})")
        return node.items[i + 1]
    name = step[1:]
    found = [n for n in walk(node) if n is not node and isinstance(n, ListNode) and n.items
             and isinstance(n.items[0], Sym) and n.items[0].name == name]
    found = [n for n in found if not any(o is not n and o.span.contains(n.span) for o in found)]   # the outermost
    if len(found) != 1:
        raise AssertionError(f"{len(found)} lists headed by {name!r} in {place!r}, not one: "
                             f"{[text[n.span.start:n.span.end] for n in found][:4]}")
    return found[0]
