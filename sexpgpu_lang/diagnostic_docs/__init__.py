"""The documentation of every diagnostic code: one record per code, from which
`scripts/gen_errors_doc.py` writes docs/errors.md (as scripts/gen_ops_doc.py
writes docs/ops.md from the op registry).

Layout: one folder per family, in page order (`FAMILIES`). Each folder holds

- `_family.md`: the family's heading (`# Title`, the first line) and its
  introduction (the text after it; may be empty);
- `CODE.md` for each code of the family (`E-GEN-002.md`): the record's
  explanation (Markdown, with ```lisp excerpts of its examples), then a
  paragraph starting `**Fix:**` and what follows it: how to fix it;
- `CODE.SLUG.sx`: the record's examples (`E-GEN-002.dtype-drift.sx`), each a
  complete run file whose diagnostics (every severity) are marked in
  place: `;; ^^^ CODE` under the range, as in `tests/helpers.check` (a range
  starting in column 1 or 2 is `;; ^^^ CODE (from column N)`). An example
  names its files relative to itself (`config/checkpoints/` holds the
  `config.json` files the config examples read). An example is as small as
  its mistake allows: `python scripts/shrink_example.py --write PATH` cuts
  what the diagnostics do not need and writes the markers again (then read
  it and edit it by hand).

The title is the code's entry in `sexpgpu_lang.diagnostics.CODES`, and the
codes of a family appear in the order of `CODES`. A code whose example needs
a checkpoint's tensors or a tokenizer read (what `sexpgpu run` and
`lint --read-files` open) has it as a case under `tests/cases-files` instead:
the page links every such case whose `;; expect:` header names the code.

To add a code: its line in `CODES`, a `CODE.md` and at least one
`CODE.SLUG.sx` in its family's folder, then
`python scripts/gen_errors_doc.py --write`. tests/test_errors_doc.py checks
that every code has a record, and that every example gives exactly its
markers (its own code among them); tests/test_errors_examples.py that each
```lisp excerpt is a part of one of the record's examples;
tests/test_generated_files.py that docs/errors.md is the generator's output.

Reads files only; imports nothing of the checker, never JAX.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import CODES
from .. import records as shared

HERE = Path(__file__).resolve().parent

#: The families' folders, in page order; each is also the family's anchor on the page.
FAMILIES: tuple[str, ...] = (
    "syntax", "names", "forms", "types", "shapes", "generation", "contract", "models",
    "config", "optimizer", "sampling", "samples", "reward", "loaders", "warnings",
)

FIX = "**Fix:**"


@dataclass(frozen=True, repr=False)
class Family(shared.Record):
    """One family's folder: `name` (its anchor), `title` (its heading) and `intro` (Markdown,
    possibly empty)."""

    name: str
    title: str
    intro: str


@dataclass(frozen=True, repr=False)
class Record(shared.Record):
    """One code's documentation: `explanation` (Markdown, when the code fires, with its
    excerpts), `fix` (the Markdown after `**Fix:**`), and `examples` (the paths of its
    marked run files, sorted by name)."""

    code: str
    title: str
    family: str
    explanation: str
    fix: str
    examples: tuple[Path, ...]


def family(name: str) -> Family:
    """The family in folder `name`; ValueError when its `_family.md` does not start `# Title`."""
    text = (HERE / name / "_family.md").read_text(encoding="utf-8")
    head, _, intro = text.partition("\n")
    if not head.startswith("# "):
        raise ValueError(f"{name}/_family.md: the first line must be `# Title`")
    return Family(name, head[2:].strip(), intro.strip("\n"))


def record(path: Path) -> Record:
    """The record of `path` (`FAMILY/CODE.md`); ValueError when it has no `**Fix:**` paragraph
    or its code is not in `CODES`."""
    code = path.stem
    if code not in CODES:
        raise ValueError(f"{path.name}: {code} is not in sexpgpu_lang.diagnostics.CODES")
    text = path.read_text(encoding="utf-8")
    if FIX not in text:
        raise ValueError(f"{path.name}: no `{FIX}` paragraph")
    explanation, _, fix = text.partition(FIX)
    main = path.with_suffix(".sx")
    examples = tuple([main] if main.is_file() else []) + tuple(sorted(path.parent.glob(f"{code}.*.sx")))
    return Record(code, CODES[code], path.parent.name, explanation.strip("\n"), fix.strip(), examples)


def records() -> dict[str, Record]:
    """Every record, by code: the families in `FAMILIES` order, each family's codes in the
    order of `CODES`. ValueError for a code with two records."""
    order = {code: i for i, code in enumerate(CODES)}
    out: dict[str, Record] = {}
    for name in FAMILIES:
        found = [record(p) for p in (HERE / name).glob("*.md") if p.name != "_family.md"]
        for rec in sorted(found, key=lambda r: order[r.code]):
            if rec.code in out:
                raise ValueError(f"{rec.code} has records in {out[rec.code].family}/ and {name}/")
            out[rec.code] = rec
    return out


def drop_comment(line: str) -> str:
    """The line of run-file text without its `;` comment (a `;` inside a string stays)."""
    in_string = False
    i = 0
    while i < len(line):
        c = line[i]
        if in_string and c == "\\":
            i += 2
            continue
        if c == '"':
            in_string = not in_string
        elif c == ";" and not in_string:
            return line[:i]
        i += 1
    return line


def normalise(text: str) -> str:
    """`text` with every run of whitespace one space (how excerpts are matched against examples)."""
    return " ".join(text.split())


def excerpt_lines(markdown: str) -> list[tuple[str, re.Pattern]]:
    """Each code line of the ```lisp excerpts in `markdown` (a record's prose), stripped, with its
    pattern over `normalise`d text (`...` is any text); comment-only and `...` lines left out. Every
    such line must appear in one of the record's examples (tests/test_errors_examples.py)."""
    out = []
    for block in re.findall(r"```lisp\n(.*?)```", markdown, flags=re.S):
        for line in block.splitlines():
            code = drop_comment(line)
            if not code.strip() or normalise(code) == "...":
                continue
            parts = [re.escape(p.strip()) for p in normalise(code).split("...")]
            out.append((line.strip(), re.compile(r".*?".join(parts))))
    return out
