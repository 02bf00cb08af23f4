"""Shared test helpers: the fixture, a small run file, variants and case copies; `check` (a run
file whose `;; ^^^ CODE` markers show every diagnostic) and `cursor` (`$0` marks the offset an
editor query is asked at); a case's `;; expect:` header, docs/errors.md's sections, `run` (a
training run in this process), `evaluate_expression` and `lowered_expression` (one expression
checked and evaluated by the runtime with arrays bound), and the modules a fresh interpreter
imported."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"
ERRORS_DOC = ROOT / "docs" / "errors.md"


def fixture_text() -> str:
    """The tiny-generate run file."""
    return FIXTURE.read_text()


def variant(old: str, new: str, text: str | None = None) -> str:
    """`text` (the fixture when None) with the first `old` replaced by `new` (asserting it was there).

    String surgery on the whole file, held under a ceiling (tests/test_test_conventions.py): a new
    test changes a run file by form name with tests/runfile.py's `RunFile` instead."""
    text = fixture_text() if text is None else text
    assert old in text, old
    return text.replace(old, new, 1)


#: A small clean run file (no generator) for tests whose mistake needs only a file around it:
#: a loader, a model, prepare, objective and run.
SMALL = """\
(def vocab 16)
(def seq 8)
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 32
  :fields (:row [seq] :i32 :stride [1] :i32))
(defmodel lm
  :params (:embed (normal [vocab 32] :std 0.1) :out (normal [32 vocab] :std 0.1))
  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))
(model lm)
(prepare (lambda (batch ctx) (list :x (field batch :row) :y (mod (+ (field batch :row) (field batch :stride)) vocab))))
(objective (lambda (inputs ctx) (mean (cross-entropy (model (getf inputs :x)) (getf inputs :y)))))
(run :loader train :steps 10 :optimizer (sgd :lr 0.1))
"""

_MARK = re.compile(r"^(\s*);;(\s*)(\^+)\s+([A-Z]+-[A-Z]+-\d+)(?:\s+\(from column (\d+)\))?\s*$")


def check(source: str, path: str = "check.sx", read_files: bool | str = False):
    """Assert that the diagnostics of `source` (every severity) are exactly those its markers
    show, as a multiset of (code, range); return the `CheckResult` for further assertions.

    A marker line `;; ^^^ CODE` points at the nearest line above it that is not a marker:
    the carets' columns are the range's columns on that line. A range that ends on a later
    line is marked by one caret under its start. A range that starts in column 1 or 2, where
    no caret can stand under it, is marked `;; ^^^ CODE (from column N)`: N is its 1-based
    start column, the carets its length. The test style of docs/dev/style.md (after
    rust-analyzer's fixtures). `read_files` is `analyze`'s (the files the run file names read).
    """
    from sexpgpu_lang import analyze
    lines = source.split("\n")
    expected = []
    target = None
    for i, line in enumerate(lines):
        m = _MARK.match(line)
        if m and target is not None:
            col = int(m.group(5)) - 1 if m.group(5) else line.index("^")
            expected.append((m.group(4), target + 1, col + 1, col + 1 + len(m.group(3))))
        elif not m:
            target = i
    res = analyze(source, path, read_files)
    got = []
    for d in res.diagnostics:
        (l0, c0), (l1, c1) = res.source.line_col(d.span.start), res.source.line_col(d.span.end)
        got.append((d.code, l0 + 1, c0 + 1, c1 + 1 if l1 == l0 else c0 + 2))
    assert sorted(got) == sorted(expected), "\n".join(
        [f"expected {sorted(expected)}", f"got      {sorted(got)}"] + [f"{d.code} {d.message}" for d in res.diagnostics])
    return res


def unmarked(text: str) -> str:
    """`text` without its `;; ^^^ CODE` marker lines (what `check` reads as expectations)."""
    return "\n".join(line for line in text.split("\n") if not _MARK.match(line))


def marked(text: str, snippet: str, code: str, within: str | None = None) -> str:
    """`text` with a `;; ^^^ CODE` marker line under `snippet` (its first occurrence
    inside the first occurrence of `within`, when given)."""
    start = text.index(snippet, text.index(within) if within else 0)
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    col = start - line_start
    marker = ";;" + " " * (col - 2) + "^" * len(snippet) + " " + code
    return text[:line_end] + "\n" + marker + text[line_end:]


def cursor_at(text: str):
    """Index `text` with its `$0` marker removed for the editor queries; return the
    `ide.Index` and the marker's offset."""
    from sexpgpu_lang import analyze, ide
    offset = text.index("$0")
    text = text.replace("$0", "", 1)
    return ide.index(analyze(text, "case.sx")), offset


def cursor(old: str, new: str, text: str | None = None):
    """`cursor_at` of the fixture (or `text`) with `old` replaced by `new`, which holds `$0`."""
    return cursor_at(variant(old, new, text))


def edited(*edits: tuple[str, str]) -> str:
    """The fixture with each `(old, new)` edit applied once, in turn (asserting each `old` was
    there): a whole run file that differs from tests/fixtures/tiny-generate.sx where a test says."""
    text = fixture_text()
    for old, new in edits:
        text = variant(old, new, text)
    return text


def fixture_case(header: str, *edits: tuple[str, str]) -> str:
    """The fixture with its leading `;;` header replaced by `header` (whole lines) and each
    `(old, new)` edit applied once, as most `../shared/cases` files are written."""
    text = fixture_text()
    body = text.split("\n\n", 1)[1]
    text = header.rstrip("\n") + "\n\n" + body
    for old, new in edits:
        text = variant(old, new, text)
    return text


#: The project's own copies of the `../shared/cases` files that tests read, byte for byte, so
#: that the suite passes on a clone without `../shared` (`.ci/run` checks the originals).
CASE_COPIES = {
    "gen-002-dtype-drift.sx": fixture_case(
        ";; expect: E-GEN-002 40\n;; E-GEN-002: :step turns the i32 row into f32.",
        ("(list :row (where (= column at) guess row)", "(list :row (cast (where (= column at) guess row) :f32)")),
    "warn-unsalted-draw.sx": fixture_case(
        ";; expect: W-RAND-001 37\n"
        ";; W-RAND-001: the student samples without a salt, so it draws the same bits at every step.",
        ("(argmax (model row))", "(categorical (model row))")),
    "warn-stack-microbatch.sx": fixture_case(
        ";; expect: W-STACK-001 32\n"
        ";; W-STACK-001: :init reads :microbatch, so the run cannot stack its two microbatches.",
        (":stride (field batch :stride)))", ":stride (+ (field batch :stride) (* 0 (getf ctx :microbatch)))))")),
    "teacher-reachable-clean.sx": fixture_case(
        ";; expect: clean\n;; clean: a frozen teacher reachable from model labels the rows the student wrote.",
        ("(model student)", "(defmodel teacher\n  :frozen true\n  :params (:embed (normal [vocab dim] :std 0.1)\n"
                            "           :out (normal [dim vocab] :std 0.1))\n"
                            "  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))\n\n"
                            "(defmodel pair\n  :params (:student student :teacher teacher)\n"
                            "  :apply (lambda (self row) (student row)))\n\n(model pair)"),
        (":label (mod (+ row stride) vocab)", ":label (argmax (teacher row))")),
}


def write_case(name: str, directory: Path) -> Path:
    """Write the copy of `../shared/cases/<name>` (see CASE_COPIES) into `directory`; return its path."""
    path = directory / name
    path.write_text(CASE_COPIES[name])
    return path


_EXPECT = re.compile(r";;\s*expect:\s*(\S+)(?:\s+(\d+)(?::\d+)?)?\s*$")


def case_expectations(path: Path) -> tuple[list[tuple[str, int | None]], bool]:
    """The `(code, line)` pairs and the `clean` flag of a case's `;; expect:` header.

    The header is the file's leading `;;` lines; the rules are those of
    `../shared/tools/check_cases.py` (tests/cases/README.md). Stricter than that tool in
    one way: an `;; expect` line that does not parse, or a file with no expectation at
    all, is an error here instead of being skipped.
    """
    out: list[tuple[str, int | None]] = []
    clean = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith(";;"):
            break
        if not re.match(r";;\s*expect", line):
            continue
        m = _EXPECT.match(line)
        if m is None:
            raise AssertionError(f"{path.name}: malformed expectation {line!r}")
        if m.group(1) == "clean":
            clean = True
        else:
            out.append((m.group(1), int(m.group(2)) if m.group(2) else None))
    if not out and not clean:
        raise AssertionError(f"{path.name}: no `;; expect:` line in its header")
    if out and clean:
        raise AssertionError(f"{path.name}: `;; expect: clean` beside other expectations")
    return out, clean


def expected_codes(path: Path) -> set[str]:
    """The codes (or `CODE-*` families) a case's header expects."""
    return {code for code, _ in case_expectations(path)[0]}


def errors_doc_sections() -> dict[str, dict]:
    """docs/errors.md's `## CODE: title` sections: code -> {title, anchor (the `<a id>` on the
    line before the heading, or None), body (the lines up to the next heading or anchor)}."""
    lines = ERRORS_DOC.read_text(encoding="utf-8").splitlines()
    out: dict[str, dict] = {}
    for i, line in enumerate(lines):
        m = re.match(r"## ([EW]-[A-Z]+-\d{3}): (.+)$", line)
        if not m:
            continue
        assert m.group(1) not in out, f"two sections for {m.group(1)}"
        prev = lines[i - 1] if i else ""
        a = re.fullmatch(r'<a id="([^"]+)"></a>', prev.strip())
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("#") or lines[j].startswith("<a id=")),
                   len(lines))
        out[m.group(1)] = {"title": m.group(2), "anchor": a.group(1) if a else None,
                           "body": "\n".join(lines[i + 1:end])}
    return out


def linked_cases(body: str) -> list[Path]:
    """The run files (a record's examples, tests/cases-files cases) a docs/errors.md section links."""
    return [(ERRORS_DOC.parent / link).resolve() for link in re.findall(r"\]\((\.\./[^)]+\.sx)\)", body)]


def program_of(text: str, path: str = "variant.sx"):
    """Check `text` and return its IR, failing the test with the diagnostics when it has errors."""
    from sexpgpu_lang import analyze
    res = analyze(text, path)
    assert res.program is not None, [f"{d.code}: {d.message}" for d in res.diagnostics]
    return res.program


def run(text: str, run_dir: Path, steps: int, *, on_trip=None, path: Path | None = None, quiet: bool = True,
        program=None, **kw):
    """Train a run file's text for `steps` steps in this process, as `sexpgpu run` does (the
    runtime's `train`), writing into `run_dir`; return its `RunResult`.

    The text is checked first (its diagnostics fail the test, see `program_of`) as the file
    `path` (`run_dir/run.sx` by default: a file the run file names is read beside it), unless
    `program` gives its IR (the check's, for a test of what the run does to it); `kw`
    are `RunOptions`' (`resume`, `overwrite`, `export`, `stop_at`...), `on_trip` is `train`'s.
    Without terminal output unless `quiet=False`. The one place tests start a training run in
    this process; a `sexpgpu run` process is started with `sexpgpu_program()`."""
    from sexpgpu_runtime import RunOptions, train
    if program is None:
        program = program_of(text, str(path if path is not None else run_dir / "run.sx"))
    return train(program, RunOptions(steps=steps, run_dir=run_dir, quiet=quiet, **kw), on_trip=on_trip)


#: NumPy/JAX dtype names to the language's.
DTYPE_NAMES = {"float32": "f32", "int32": "i32", "int64": "i64", "bool": "bool", "bfloat16": "bf16"}


def types_of(values: dict) -> dict:
    """{name: TensorType} of arrays (NumPy or JAX): each array's shape and dtype (`DTYPE_NAMES`)."""
    import numpy as np
    from sexpgpu_lang.types import TensorType
    return {k: TensorType(tuple(np.shape(v)), DTYPE_NAMES[str(getattr(v, "dtype", np.asarray(v).dtype))])
            for k, v in values.items()}


def lowered_expression(src: str, types: dict, *, seed: int = 0, clean: bool = False):
    """`src` checked as an expression in user code is (`check_expression`, the names typed by
    `types`: {name: TensorType}), asserting it has no error diagnostic (no diagnostic at all when
    `clean`); (the checked expression, a function of {name: JAX array} giving its value as the
    runtime's lowering computes it, with the random key of `seed`). The function is pure, so a
    test may `jax.jit` or `jax.grad` it. The one place tests check and evaluate an expression."""
    import sexpgpu_runtime  # noqa: F401  (enables x64)
    import jax
    from sexpgpu_lang.check import check_expression
    from sexpgpu_runtime.lowering.lowering import Effects, evaluate
    expr, diags = check_expression(src, types)
    shown = [f"{d.code}: {d.message}" for d in diags]
    assert not (diags if clean else [d for d in diags if d.is_error]), shown
    return expr, lambda values, effects=None: evaluate(expr, values, effects or Effects(seed_key=jax.random.key(seed)))


class Evaluated(NamedTuple):
    """What `evaluate_expression` gives: the checked type, the value as NumPy (an array; a dict of
    arrays for a plist; None for no value) and the metrics the expression reported ({name: float})."""
    type: object
    value: object
    metrics: dict


def evaluate_expression(src: str, values: dict, *, types: dict | None = None, seed: int = 0,
                        clean: bool = False) -> Evaluated:
    """`src` checked with each name of `values` typed by `types` (by default each array's own shape
    and dtype, `types_of`), asserting no error diagnostic (none at all when `clean`), then evaluated
    by the runtime's lowering with `values` bound (as JAX arrays) and the random key of `seed`. A
    tensor result's shape and dtype must be its checked type's (asserted)."""
    import numpy as np
    import jax
    import jax.numpy as jnp
    from sexpgpu_lang.types import TensorType
    from sexpgpu_runtime.dtypes import name_of
    from sexpgpu_runtime.lowering.lowering import Effects
    expr, fn = lowered_expression(src, types_of(values) if types is None else types, seed=seed, clean=clean)
    effects = Effects(seed_key=jax.random.key(seed))
    out = fn({k: jnp.asarray(v) for k, v in values.items()}, effects)
    if out is not None and isinstance(expr.type, TensorType):
        out = jnp.asarray(out)
        assert (tuple(out.shape), name_of(out.dtype)) == (expr.type.shape, expr.type.dtype), expr.type
    value = None if out is None else jax.tree.map(np.asarray, out)
    return Evaluated(expr.type, value, {k: float(np.asarray(v)) for k, v in effects.metrics.items()})


def sexpgpu_program() -> str | None:
    """The `sexpgpu` program installed beside this interpreter (the project's venv), else the
    one on PATH, else None."""
    beside = Path(sys.executable).with_name("sexpgpu")
    return str(beside) if beside.exists() else shutil.which("sexpgpu")


def modules_after(code: str) -> set[str]:
    """Every name in `sys.modules` once `code` has run in a fresh interpreter started in the
    repository root (`python -c`); fails the test with the interpreter's output when `code`
    fails. The list is printed without importing anything more."""
    script = code + "\nimport sys\nprint('modules:', ' '.join(sorted(sys.modules)))\n"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("modules: "), r.stdout
    return set(last.removeprefix("modules: ").split())


def numpy_attention(q, k, v, *, causal=False, mask=None, scale=None):
    """Attention written out in NumPy, the reference for `dot-product-attention` and the layers on it:
    q [B T N H], k and v [B S K H] (JAX's layout); query head n reads key head n // (N / K); `mask`
    bool, broadcastable to [B N T S]; `scale` 1/sqrt(H) by default."""
    import math
    import numpy as np
    k = np.repeat(k, q.shape[2] // k.shape[2], axis=2)
    v = np.repeat(v, q.shape[2] // v.shape[2], axis=2)
    s = np.einsum("btnh,bsnh->bnts", q, k) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    allowed = np.ones(s.shape, bool)
    if causal:
        allowed &= np.tril(np.ones(s.shape[-2:], bool))
    if mask is not None:
        allowed &= mask
    s = np.where(allowed, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bnts,bsnh->btnh", w / w.sum(-1, keepdims=True), v)


def signal_at_line(proc, prefix: str, signals, gap: float = 0.0, timeout: float = 120) -> tuple[list[str], str]:
    """Read `proc`'s stderr (a text pipe) until a line starts with `prefix`, send it `signals` in
    turn (`gap` seconds apart), then wait for it to end (killed in any case); (its stderr lines, all
    of it as one text)."""
    import time
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith(prefix):
                for i, sig in enumerate(signals):
                    if i:
                        time.sleep(gap)
                    proc.send_signal(sig)
                break
        lines += proc.stderr.readlines()
        proc.wait(timeout=timeout)
    finally:
        proc.kill()
    return lines, "".join(lines)
