"""Benchmark: the incremental parser against a parser without caches, in one process.

Loads the reference parser from a commit whose parser has no caches (default
78a53e8) from git into a temporary module, and times on generated run files
(lsp_latency.generate) of 2,000 and 10,000 lines, CPU time, median of 5:
the reference parse; this parser cold (caches cleared); after an edit in the
last layer; and after an edit at the top that moves every form.

    .venv/bin/python benchmarks/parse_incremental.py [--before 78a53e8] [--check 3000]

`--check N` first compares the two parsers on every run file of the
repository and N random mutations of them (brackets, quotes, `\\n(`, BOMs,
deletions), each parsed twice by this parser (cold, then from its
caches): forms, spans, paths, diagnostics and comments must be identical.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lsp_latency import generate  # noqa: E402
from sexpgpu_lang import syntax  # noqa: E402
from sexpgpu_lang.source import SourceText  # noqa: E402


def old_parser(commit: str):
    src = subprocess.run(["git", "show", f"{commit}:sexpgpu_lang/syntax.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    src = src.replace("from .diagnostics", "from sexpgpu_lang.diagnostics").replace("from .source", "from sexpgpu_lang.source")
    src = src.replace('pathlib.Path(__file__).with_name("grammar.lark")', "pathlib.Path(" + repr(str(ROOT / "sexpgpu_lang" / "grammar.lark")) + ")")
    d = tempfile.mkdtemp()
    path = Path(d) / "old_syntax.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_syntax", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_syntax"] = mod   # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def dump(n):
    out = [type(n).__name__, n.span.start, n.span.end, n.path]
    for f in n.__dataclass_fields__:
        if f not in ("span", "path"):
            v = getattr(n, f)
            out.append(tuple(dump(c) for c in v) if f == "items" else v)
    return tuple(out)


def outcome(parser, text: str):
    r = parser.parse(SourceText(text, "x.sx"))
    return ([dump(f) for f in r.forms], [(d.code, d.span.start, d.span.end, d.message, d.help) for d in r.diagnostics],
            [(c.start, c.end) for c in r.comments])


def check(old, mutations: int) -> None:
    import random
    files = [f for f in ROOT.rglob("*.sx") if ".venv" not in f.parts and "node_modules" not in f.parts]
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    rng = random.Random(1)
    pieces = list("()[]\n \":;ab1.\\\t\ufeff") + ["\n(", "(def ", "(run ", "\n  "]
    cases = list(texts)
    for _ in range(mutations):
        t = rng.choice(texts)
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(t) + 1)
            t = t[:k] + rng.choice(pieces) + t[k:] if rng.random() < 0.5 else t[:k] + t[k + rng.randint(1, 3):]
        cases.append(t)
    bad = 0
    for t in cases:
        want = outcome(old, t)
        for _ in range(2):
            if outcome(syntax, t) != want:
                bad += 1
                print("differs:", repr(t[:120]))
    print(f"checked {len(cases)} texts ({len(files)} files, {mutations} mutations), twice each: {bad} differ")
    if bad:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="78a53e8")
    ap.add_argument("--check", type=int, default=0, metavar="N", help="compare the parsers first, with N mutations")
    a = ap.parse_args()
    old = old_parser(a.before)
    if a.check:
        check(old, a.check)
    print("lines  | reference | cold | edit in last layer | edit at top (moves every form)   [CPU ms]")
    for n in (2000, 10000):
        big = generate(n)
        k = big.rindex("(r (relu z))")
        top = big.index("(def dim 64)")
        res: dict[str, list[float]] = {"old": [], "cold": [], "last": [], "top": []}
        for i in range(5):
            t0 = time.process_time()
            old.parse(SourceText(big, "b"))
            t1 = time.process_time()
            for cache in (syntax._LEXED, syntax._BUILT, syntax._PLACED):
                cache.clear()
            syntax.parse(SourceText(big, "b"))
            t2 = time.process_time()
            syntax.parse(SourceText(big[:k] + f"(r (relu z{i}))" + big[k + 12:], "b"))
            t3 = time.process_time()
            syntax.parse(SourceText(big[:top] + f"(def dim 6{i}4)" + big[top + 12:], "b"))
            t4 = time.process_time()
            for key, v in zip(res, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                res[key].append(v * 1000)
        m = {k: statistics.median(v) for k, v in res.items()}
        print(f"{n:6d} | {m['old']:6.0f} | {m['cold']:11.0f} | {m['last']:25.0f} | {m['top']:6.0f}")


if __name__ == "__main__":
    main()
