"""Fuzzing the front end: every text ends in diagnostics, never an exception.

Inputs are the run files we have (`examples/`,
`tests/fixtures`, `tests/cases`, the diagnostic records' examples) mutated the ways half-typed text goes
wrong (deleted, duplicated and stray brackets, swapped tokens, truncations,
deleted and duplicated spans, random bytes and Unicode, deep nesting), plus
hypothesis's own text and token soups. For each one, `analyze` returns
diagnostics, every `sexpgpu_lang.ide` query at a few offsets answers, and
the formatter answers. `benchmarks/fuzz.py` runs the same `exercise` over
100,000 mutations and prints how many failed.
"""
from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import pytest

from sexpgpu_lang import analyze, ide
from sexpgpu_lang.format import format_range, format_text

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[1]
SEED_DIRS = [ROOT / "examples", ROOT / "tests" / "fixtures", ROOT / "tests" / "cases",
             *sorted(p for p in (ROOT / "sexpgpu_lang" / "diagnostic_docs").iterdir() if p.is_dir())]


@lru_cache(maxsize=1)
def seeds() -> list[str]:
    """Every run file we have, as text."""
    out = []
    for d in SEED_DIRS:
        out += [p.read_text(encoding="utf-8") for p in sorted(d.glob("*.sx"))]
    assert out, "no run files to mutate"
    return out


#: Characters random insertions draw from: brackets, quotes, the language's punctuation,
#: whitespace of every kind, control characters, a BOM, combining marks, astral planes.
ODD = list("()[]\"';:#\\ \t\n\r\x00\x0b\x0c\x1b\x7f\u00a0\u2028\u2029\ufeff\u0301\u200b\ufffd") + \
      ["\U0001F600", "\U00010348", "é", "ß", "𝑥", "\ud800", "1e999", "-0", "1.5e", "0x10", "9" * 40]
TOKENS = ["(", ")", "[", "]", ":f32", ":i32", ":row", "def", "lambda", "let", "defmodel", "defgenerate",
          "loader", "run", "objective", "prepare", "pass", "stage", "model", "+", "*", "matmul", "sum",
          "take", "cast", "where", "iota", "0", "1", "-1", "2.5", "\"x\"", "row", "batch", ":params",
          ":apply", ":pretrained", "\"w.safetensors\"", ":source", "(npz \"d.npz\")", "metric", ";; c\n"]


def mutate(rng: random.Random, text: str, deep: bool = True) -> str:
    """One to four random edits of `text` (`deep`: deep nesting among them, which is slow to check)."""
    for _ in range(rng.randint(1, 4)):
        n = len(text)
        pos = rng.randint(0, n)
        kind = rng.randrange(11 if deep else 10)
        if kind == 0:      # delete a bracket
            idx = [i for i, c in enumerate(text) if c in "()[]"]
            if idx:
                i = rng.choice(idx)
                text = text[:i] + text[i + 1:]
        elif kind == 1:    # duplicate a bracket
            idx = [i for i, c in enumerate(text) if c in "()[]"]
            if idx:
                i = rng.choice(idx)
                text = text[:i] + text[i] + text[i:]
        elif kind == 2:    # a stray bracket anywhere
            text = text[:pos] + rng.choice("()[]") + text[pos:]
        elif kind == 3:    # swap two tokens
            toks = text.split(" ")
            if len(toks) > 2:
                i, j = rng.randrange(len(toks)), rng.randrange(len(toks))
                toks[i], toks[j] = toks[j], toks[i]
                text = " ".join(toks)
        elif kind == 4:    # truncate
            text = text[:pos]
        elif kind == 5:    # delete a span
            text = text[:pos] + text[pos + rng.randint(1, 40):]
        elif kind == 6:    # duplicate a span
            end = min(n, pos + rng.randint(1, 80))
            text = text[:end] + text[pos:end] + text[end:]
        elif kind == 7:    # random bytes, decoded as Latin-1 (every byte a character)
            text = text[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))).decode("latin-1") + text[pos:]
        elif kind == 8:    # odd Unicode and odd numbers
            text = text[:pos] + "".join(rng.choice(ODD) for _ in range(rng.randint(1, 4))) + text[pos:]
        elif kind == 9:    # a token of the language where it does not belong
            text = text[:pos] + " " + rng.choice(TOKENS) + " " + text[pos:]
        else:              # deep nesting
            depth = rng.choice([50, 300, 1000, 3000])
            inner = rng.choice(["", "x", "(+ 1 2)", "[1 2]", ":f32"])
            closed = rng.random() < 0.5
            text = text[:pos] + "(" * depth + inner + (")" * depth if closed else "") + text[pos:]
    return text


def exercise(text: str, rng: random.Random, offsets: int = 4) -> None:
    """Analyze `text`, ask every editor query at `offsets` offsets (and the ends), and format it.
    Raises whatever the front end raises: the caller counts or fails on it."""
    res = analyze(text, "fuzz.sx")
    assert isinstance(res.diagnostics, (list, tuple))
    for d in res.diagnostics:
        res.source.line_col(d.span.start)
        res.source.line_col(d.span.end)
    ix = ide.index(res)
    n = len(text)
    picks = {0, n} | {rng.randint(0, n) for _ in range(offsets)}
    for off in sorted(picks):
        ide.hover(ix, off)
        ide.definition(ix, off)
        ide.references(ix, off)
        ide.highlights(ix, off)
        ide.prepare_rename(ix, off)
        try:
            ide.rename(ix, off, "renamed")
        except ide.RenameError:
            pass
        ide.completions(ix, off)
        ide.signature_help(ix, off)
        ide.quick_fixes(ix, type(res.diagnostics[0].span)(off, off) if res.diagnostics else _span(off))
    ide.document_symbols(ix)
    ide.folding_ranges(ix)
    ide.inlay_hints(ix)
    ide.semantic_tokens(ix)
    for d in res.diagnostics[:5]:
        ide.quick_fixes(ix, d.span)
    format_text(text)
    a, b = sorted((rng.randint(0, n), rng.randint(0, n)))
    format_range(text, a, b)


def _span(off: int):
    from sexpgpu_lang import Span
    return Span(off, off)


# --------------------------------------------------------------------------- mutations of our run files

#: How many mutations the test checks; every QUERY_EVERY-th also gets every editor query and the formatter.
MUTATIONS, QUERY_EVERY = 1000, 4


def test_mutated_run_files_end_in_diagnostics():
    rng = random.Random(20261129)
    texts = seeds()
    failures = []
    for i in range(MUTATIONS):
        text = mutate(rng, rng.choice(texts), deep=i % 20 == 0)
        try:
            if i % QUERY_EVERY == 0:
                exercise(text, rng, offsets=2)
            else:
                analyze(text, "fuzz.sx")
        except Exception as e:  # noqa: BLE001 - every exception is a front-end bug
            failures.append((i, type(e).__name__, str(e)[:200], text))
    assert not failures, f"{len(failures)} of {MUTATIONS} inputs raised; first: {failures[0][:3]}\n{failures[0][3][:2000]}"


def test_every_prefix_of_a_run_file_ends_in_diagnostics():
    # half-typed text: the fixture cut after every 23rd character, as if typed top to bottom
    rng = random.Random(7)
    text = (ROOT / "tests" / "fixtures" / "tiny-generate.sx").read_text(encoding="utf-8")
    for end in range(0, len(text), 23):
        exercise(text[:end], rng, offsets=1)


def test_deep_nesting_ends_in_diagnostics():
    rng = random.Random(3)
    for depth in (1000, 5000):
        for text in ("(" * depth, "(" * depth + ")" * depth, "[" * depth + "]" * depth,
                     "(def x " + "(+ 1 " * depth + "1" + ")" * depth + ")",
                     "(run :steps " + "(" * depth + ")"):
            exercise(text, rng, offsets=1)


def test_pretrained_paths_no_file_can_have_are_model_003_when_files_are_read():
    # found by benchmarks/fuzz.py: a lone surrogate (or a NUL) in a `:pretrained` path made open() raise
    # UnicodeEncodeError / ValueError out of the checker under read_files=True (`sexpgpu run`)
    text = (ROOT / "tests" / "cases" / "clean-pretrained-teacher.sx").read_text(encoding="utf-8")
    assert '"data/teacher.safetensors"' in text
    for bad in ("data/\ud800.safetensors", "data/a\x00b.safetensors", "", "/", "data"):
        res = analyze(text.replace('"data/teacher.safetensors"', f'"{bad}"'), "fuzz.sx", read_files=True)
        assert [d.code for d in res.diagnostics if d.is_error] == ["E-MODEL-003"], (bad, res.diagnostics)


# --------------------------------------------------------------------------- hypothesis

_settings = settings(max_examples=400, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@_settings
@given(st.text(max_size=300), st.randoms(use_true_random=False))
def test_any_text_ends_in_diagnostics(text, rng):
    exercise(text, rng, offsets=2)


@_settings
@given(st.lists(st.sampled_from(TOKENS + ODD + [" ", "\n"]), max_size=120), st.randoms(use_true_random=False))
def test_token_soup_ends_in_diagnostics(tokens, rng):
    exercise(" ".join(tokens), rng, offsets=2)


@settings(_settings, max_examples=100)
@given(st.sampled_from(range(len(seeds()))), st.integers(0, 2**32 - 1), st.randoms(use_true_random=False))
def test_hypothesis_drawn_mutations_end_in_diagnostics(which, seed, rng):
    exercise(mutate(random.Random(seed), seeds()[which]), rng, offsets=2)
