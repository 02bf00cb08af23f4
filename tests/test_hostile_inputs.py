"""Every input bounded in memory and time (issue 45, failures 1 to 6).

1. A string literal costs memory linear in its length with a small constant (the STRING
   pattern keeps no regular-expression state per character; unescaping is one pass).
2. A run file past TOKEN_LIMIT tokens (or comments, or bad characters) is one E-SYNTAX-006
   and nothing else, lexed only that far.
3. A glob is bounded: entries walked and paths matched (GLOB_WALK_LIMIT, GLOB_MATCH_LIMIT),
   never into /proc, /sys or /dev; past a bound, one line naming it.
4. Parsed JSON is bounded in memory (`json_memory` against JSON_MEMORY_BUDGET), and the kept
   configs in total (hf_config.READ, a `sexpgpu_lang.kept` space); the server's last close drops them.
5. A value quoted in a message is clipped with an ellipsis; a type of 40,000 entries is short.
6. The formatter fills a long literal vector on lines of the usual width.

Memory is measured with tracemalloc (peak bytes the parse allocates), never time. The bounded-RSS
check of whole commands on 64 MB files is the slow tier's (a child's ru_maxrss) and
benchmarks/reliability.py's `hostile` trial.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from sexpgpu_lang import analyze, forget_files, syntax
from sexpgpu_lang.files import bounded_read, hf_config
from sexpgpu_lang.files.bounded_read import GlobTooLarge, JsonTooLarge, glob_bounded, json_memory, loads_json
from sexpgpu_lang.diagnostics import MESSAGE_LIMIT, QUOTE_LIMIT, Severity, error
from sexpgpu_lang.format import Layout, format_text
from sexpgpu_lang.source import SourceText, Span

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = (ROOT / "tests" / "fixtures" / "tiny-generate.sx").read_text()


def peak_bytes(fn) -> int:
    """The peak of Python allocations while `fn()` runs (tracemalloc), less what was held before."""
    syntax.forget()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


# -- 1. string literals -------------------------------------------------------------------------
def test_a_string_literal_costs_a_few_bytes_a_byte():
    n = 2_000_000
    text = FIXTURE + f'\n(def s "{"a" * n}")\n'
    res = analyze(text, "s.sx", build_ir=False)
    assert not [d for d in res.diagnostics if d.is_error]
    # Text, token, node value and line index: each a copy at most; it was about 270 bytes a byte.
    assert peak_bytes(lambda: analyze(text, "s.sx", build_ir=False)) < 12 * n


def test_escapes_are_unescaped_as_before():
    forms = syntax.parse(SourceText(FIXTURE + '\n(def s "a\\nb\\tc\\"d\\\\e\\qf")\n')).forms
    strs = [n for f in forms for n in syntax.walk(f) if isinstance(n, syntax.Str)]
    assert strs[-1].value == 'a\nb\tc"d\\eqf'


# -- 2. many tokens ------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    "(def v [" + "1 " * 1_200 + "])\n",                  # one literal vector
    "".join(f"(def d{i} {i})\n" for i in range(400)),   # many definitions
    ";\n" * 1_200,                                       # comments
    "\x00 " * 1_200,                                     # bad characters
    "\n(" * 1_200,                                       # a piece each
])
def test_past_token_limit_a_file_is_one_line(monkeypatch, body):
    monkeypatch.setattr(syntax, "TOKEN_LIMIT", 1_000)
    syntax.forget()
    res = analyze(FIXTURE + body, "big.sx")
    assert [d.code for d in res.diagnostics] == ["E-SYNTAX-006"], [d.message for d in res.diagnostics][:3]
    assert "more than 1,000 tokens (TOKEN_LIMIT)" in res.diagnostics[0].message


def test_within_token_limit_a_file_is_checked(monkeypatch):
    monkeypatch.setattr(syntax, "TOKEN_LIMIT", 100_000)
    syntax.forget()
    res = analyze(FIXTURE + "".join(f"(def d{i} {i})\n" for i in range(400)), "ok.sx")
    assert not [d for d in res.diagnostics if d.is_error]


def test_a_file_of_many_lines_keeps_a_small_line_index():
    text = "\n" * 1_000_000
    src = SourceText(text)
    assert len(src.line_starts) == 1_000_001 and src.line_col(500_000) == (500_000, 0)
    assert peak_bytes(lambda: SourceText(text)) < 8 * len(text)   # 4 bytes a line (a list took 36)


# -- 3. globs -------------------------------------------------------------------------------------
def tree(root: Path) -> None:
    for d in ("a", "a/b", "a/b/c", ".hidden", "d"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for f in ("x.txt", "a/y.txt", "a/b/z.txt", "a/b/c/w.md", ".hidden/h.txt", "d/.dot.txt", "d/v.txt"):
        (root / f).write_text("t")


@pytest.mark.parametrize("pattern", ["*.txt", "**/*.txt", "**", "a/**/*.txt", "*/*.txt", "a/b/c/*", "[ad]/*.txt",
                                     "?/y.txt", "d/.*", "missing/*.txt", "x.txt", "**/c/*.md"])
def test_a_bounded_glob_matches_as_glob_does(tmp_path, pattern):
    tree(tmp_path)
    full = str(tmp_path / pattern)
    want = sorted(p.rstrip("/") for p in glob.glob(full, recursive=True))
    assert glob_bounded(full) == sorted(set(want))


def test_a_glob_past_its_bounds_is_one_line(tmp_path):
    tree(tmp_path)
    with pytest.raises(GlobTooLarge, match="looks at more than 5 directory entries .GLOB_WALK_LIMIT."):
        glob_bounded(str(tmp_path / "**" / "*"), walk_limit=5)
    with pytest.raises(GlobTooLarge, match="matches more than 2 paths .GLOB_MATCH_LIMIT."):
        glob_bounded(str(tmp_path / "**" / "*.txt"), match_limit=2)


def test_a_glob_never_enters_proc_sys_or_dev():
    assert glob_bounded("/proc/*/status") == []
    assert glob_bounded("/dev/*") == []
    assert glob_bounded("/sys/**/*") == []
    assert glob_bounded("/proc/self/status") == ["/proc/self/status"]   # a path named outright is still one


def test_lint_read_files_says_a_glob_over_everything_in_one_line(tmp_path, monkeypatch):
    from tests.test_lint_read_files_data import TOKENIZER, TOKENS, lint
    monkeypatch.setattr(bounded_read, "GLOB_WALK_LIMIT", 50)
    (tmp_path / "tok.json").write_text(TOKENIZER)
    got = lint(tmp_path, '(text-tokens "/**/*" :tokenizer "tok.json" :seq 3)', text=TOKENS)
    assert [(c, at) for c, at, _, _ in got] == [("E-LOADER-001", '"/**/*"')]
    assert "looks at more than 50 directory entries (GLOB_WALK_LIMIT)" in got[0][2]


def test_the_runtime_refuses_a_glob_past_its_bounds_in_one_line(tmp_path, monkeypatch):
    from sexpgpu_runtime.data.files import glob_files
    from sexpgpu_runtime.errors import LoaderError
    tree(tmp_path)
    monkeypatch.setattr(bounded_read, "GLOB_MATCH_LIMIT", 2)
    with pytest.raises(LoaderError, match=r"^loader `t`: the glob .* matches more than 2 paths"):
        glob_files(str(tmp_path / "**" / "*.txt"), "loader `t`")


# -- 4. parsed JSON --------------------------------------------------------------------------------
JSON_SHAPES = {
    "numbers": "[" + ",".join(str(i) for i in range(50_000)) + "]",
    "empty objects": "[" + ",".join("{}" for _ in range(50_000)) + "]",
    "empty arrays": "[" + ",".join("[]" for _ in range(50_000)) + "]",
    "keys": "{" + ",".join(f'"k{i}":{i}' for i in range(50_000)) + "}",
    "strings": "[" + ",".join('"ab"' for _ in range(50_000)) + "]",
    "a vocabulary": '{"model":{"vocab":{' + ",".join(f'"t{i}":{i}' for i in range(30_000)) + '},"merges":['
                    + ",".join(f'"a{i} b{i}"' for i in range(30_000)) + "]}}",
    "one long string": '"' + "a" * 1_000_000 + '"',
}


@pytest.mark.parametrize("shape", sorted(JSON_SHAPES))
def test_the_json_estimate_is_an_upper_bound_of_the_parse(shape):
    raw = JSON_SHAPES[shape]
    tracemalloc.start()
    try:
        json.loads(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0.8 * peak <= json_memory(raw) <= 6 * peak


def test_json_past_its_memory_budget_is_not_parsed():
    raw = JSON_SHAPES["empty objects"]
    with pytest.raises(JsonTooLarge, match=r"more than the 1,000 bytes one JSON file is read into \(JSON_MEMORY_BUDGET\)"):
        loads_json(raw, budget=1_000)
    assert len(loads_json(raw)) == 50_000


def test_a_config_past_the_json_budget_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(bounded_read, "JSON_MEMORY_BUDGET", 10_000)
    monkeypatch.setattr(bounded_read.loads_json, "__defaults__", (10_000,))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "pad": list(range(5_000))}))
    hf_config.forget()
    with pytest.raises(hf_config.ConfigError, match="JSON_MEMORY_BUDGET"):
        hf_config.read(str(tmp_path))


def test_kept_configs_are_bounded_in_memory_and_dropped_on_the_last_close(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_config.READ, "max_bytes", 200_000)
    hf_config.forget()
    for i in range(6):
        d = tmp_path / f"m{i}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "pad": list(range(2_000 + i))}))
        hf_config.read(str(d))
    assert 1 <= len(hf_config.READ) < 6
    assert hf_config.READ.nbytes <= 200_000
    forget_files()
    assert not len(hf_config.READ) and hf_config.READ.nbytes == 0


# -- 5. quoted values ------------------------------------------------------------------------------
def test_a_quoted_value_is_clipped_with_an_ellipsis():
    d = error("E-TYPE-001", Span(0, 1), f'`model_type` is "{"x" * 1_000_000}", which the standard library does not read '
                                       '(it reads `gpt2`)')
    assert len(d.message) < 2 * QUOTE_LIMIT and "x…x" in d.message and d.message.endswith('", which the standard '
                                                                                          "library does not read (it reads `gpt2`)")
    d = error("E-TYPE-001", Span(0, 1), "got `" + "y" * 5_000 + "`", help="z" * 100_000)
    assert "…" in d.message and len(d.message) < 2 * QUOTE_LIMIT and len(d.help) <= MESSAGE_LIMIT


def test_a_type_of_40000_entries_is_short_in_a_message():
    vec = " ".join(str(i % 10) for i in range(40_000))
    res = analyze(FIXTURE + f'\n(def a (sum [{vec}]))\n(def b (sum ["s" {vec}]))\n', "v.sx")
    msgs = [d.message for d in res.diagnostics if d.code == "E-TYPE-001"]
    assert len(msgs) == 2 and all(len(m) < 400 for m in msgs), [len(m) for m in msgs]
    assert "… 39,984 more] shape" in msgs[0] and "… 39,985 more]" in msgs[1]


def test_a_long_model_type_is_clipped_in_its_diagnostic(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text(json.dumps({"model_type": "q" * 1_000_000}))
    res = analyze(FIXTURE + '\n(def h (checkpoint-config "ck" :width))\n', str(tmp_path / "r.sx"), read_files=True)
    said = [d for d in res.diagnostics if d.severity == Severity.ERROR]
    assert said and all(len(d.message) <= MESSAGE_LIMIT for d in said)
    assert any(d.message.startswith("`ck/config.json`: `model_type` is \"qqq") and "q…q" in d.message
               and "\", which the standard library does not read" in d.message for d in said), [d.message[:200] for d in said]


# -- 6. the formatter fills a literal vector --------------------------------------------------------
def test_a_long_literal_vector_is_filled():
    nums = " ".join(str(i) for i in range(20_000))
    out = format_text(f"(def table [{nums}])\n")
    lines = out.splitlines()
    assert all(len(ln) <= Layout().width for ln in lines)
    assert len(lines) < 20_000 * 6 / (Layout().width - 20)   # a fill, not one number a line
    assert format_text(out) == out
    assert out.split() == f"(def table [{nums}])".split()


def test_a_vector_broken_by_hand_keeps_its_breaks():
    text = "(def table [1 2 3\n            4 5 6])\n"
    assert format_text(text) == text


# -- the budget, on whole commands (slow: 64 MB files) ----------------------------------------------
#: A small launcher: runs its arguments as a child and prints the child's peak resident memory (KiB).
#: Started fresh, so the child it forks is small: a child forked from pytest itself (a worker that has
#: run many tests) would count the worker's pages in its peak.
_LAUNCH = ("import resource, subprocess, sys\n"
           "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)\n"
           "sys.stdout.buffer.write(p.stdout)\n"
           "print('\\nmaxrss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def child_maxrss_mib(args: list[str]) -> tuple[int, str]:
    """Run `args` from a fresh launcher (`_LAUNCH`); its peak resident memory (MiB, getrusage of the
    launcher's children) and output."""
    p = subprocess.run([sys.executable, "-c", _LAUNCH, *args], capture_output=True, cwd=ROOT)
    out = p.stdout.decode("utf-8", "replace")
    body, _, peak = out.rpartition("\nmaxrss ")
    return int(peak) // 1024, body


@pytest.mark.slow
@pytest.mark.parametrize("name,body", [
    ("literal", lambda: '(def s "' + "a" * 60_000_000 + '")\n'),
    ("vector", lambda: "(def v [" + "1 " * 32_000_000 + "])\n"),
    ("lines", lambda: "\n(" * 32_000_000),
    ("comments", lambda: ";\n" * 32_000_000),
])
def test_lint_and_explain_of_a_64_mb_file_stay_under_1_gb(tmp_path, name, body):
    f = tmp_path / f"{name}.sx"
    f.write_text(FIXTURE + body())
    for command in ("lint", "explain"):
        rss, out = child_maxrss_mib([sys.executable, "-m", "sexpgpu_cli.main", command, str(f)])
        assert rss < 1024, f"{command} {name}: {rss} MiB"
        assert "Traceback" not in out
