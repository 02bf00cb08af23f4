"""The incremental check (`CheckCache`) gives exactly what a check from scratch gives.

Random sequences of edits (insertions, deletions, a `def`'s value changed,
a model renamed, a bracket broken, a number changed, a name misspelt, an
undo back to an earlier text) are applied to real run files (examples/,
tests/cases/, the fixtures, the diagnostic records' examples) and to files with many models written to
exercise the cache (models that read `def`s, call `def`'d and
standard-library functions, report metrics, misspell parameters, run under
`:precision :bf16`). After every edit the file is checked twice: with the
cache kept across the sequence, as the language server does, and cold.
Diagnostics (codes, messages, ranges, related places, fixes), every editor
fact (types by range, definitions, uses and which definition each use
points to, calls, state keys, generated names), the IR, and hover, symbols,
inlay hints and semantic tokens must be equal.
"""
from __future__ import annotations

import dataclasses
import random
import re
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sexpgpu_lang import SourceText, ide
from sexpgpu_lang.check import CheckCache, check
from sexpgpu_lang.syntax import ListNode, VecNode, parse, walk

ROOT = Path(__file__).resolve().parents[1]
SEED_DIRS = [ROOT / "examples", ROOT / "tests" / "cases", ROOT / "tests" / "fixtures",
             *sorted(p for p in (ROOT / "sexpgpu_lang" / "diagnostic_docs").iterdir() if p.is_dir())]

LAYER = """\
;; layer {k}
(defmodel layer{k}
  :params (:w (normal [dim dim] :std 0.02)
           :b (zeros [dim]){extra_param})
  :apply (lambda (self h)
           (let* ((a (matmul h (getf self :w)))
                  (z (+ a (getf self :b)))
                  (r {body}))
             (+ h r))))

"""
BODIES = ["(relu z)", "(twice z)", "(linear z (getf self :w) (getf self :b))", "(* z scale)",
          "(relu (getf self :bb))", "(let* ((m (metric :act (mean z)))) (relu z))", "(tanh (* z half))",
          "(relu zz)"]
#: Bodies without an error, so that the file has an IR (a draw without a salt is a warning).
CLEAN_BODIES = ["(relu z)", "(twice z)", "(linear z (getf self :w) (getf self :b))", "(* z scale)",
                "(+ z (uniform [dim]))", "(tanh (* z half))"]


def many_models(n: int, precision: str = "f32", block: bool = True, clean: bool = False) -> str:
    """The tiny-generate fixture whose student runs `n` layers (and a block that calls a layer),
    each layer's body one of BODIES: reads of `def`s, `def`'d and standard-library functions,
    a metric, a misspelt parameter, an unbound name; or with `clean` one of CLEAN_BODIES."""
    base = (ROOT / "tests" / "fixtures" / "tiny-generate.sx").read_text()
    bodies = CLEAN_BODIES if clean else BODIES
    layers = "(def scale 2)\n(def half 0.5)\n(def twice (lambda (x) (* x scale)))\n\n" + "".join(
        LAYER.format(k=k, body=bodies[k % len(bodies)], extra_param="") for k in range(1, n + 1))
    if block:
        layers += LAYER.format(k=0, body="(layer1 z)", extra_param="\n           :inner layer1")
    subs = "\n".join(f"           :l{k} layer{k}" for k in range(1 if not block else 0, n + 1))
    calls = "\n".join(f"                  (h{k} (layer{k} h{k - 1}))" for k in range(1, n + 1))
    text = base.replace("           :out (normal [dim vocab] :std 0.1))",
                        "           :out (normal [dim vocab] :std 0.1)\n" + subs + ")")
    text = text.replace("                  (h (relu (matmul (+ here start next) (getf self :hidden)))))",
                        "                  (h0 (relu (matmul (+ here start next) (getf self :hidden))))\n"
                        + calls + ")")
    last = f"(layer0 h{n})" if block else f"h{n}"
    text = text.replace("             (matmul h (getf self :out)))))", f"             (matmul {last} (getf self :out)))))")
    text = text.replace(":precision :f32", f":precision :{precision}")
    return text.replace("(defmodel student", layers + "(defmodel student", 1)


SNIPPETS = ["x", " ", "\n", "(", ")", "[", "]", "zz", "1", ";; note\n", "\n(def extra 3)\n", " :w", "h",
            "(relu z)", "\n(defmodel", "dim", "0.5", ":bf16", "\"", "{", "#"]


def mutate(text: str, rng: random.Random, history: list[str]) -> str:
    """One random edit of a run file's text."""
    kind = rng.choice(["insert", "delete", "def", "rename", "bracket", "number", "misspell", "undo", "insert", "def",
                       "move", "move"])
    n = len(text)
    if kind == "insert" or n == 0:
        at = rng.randint(0, n)
        return text[:at] + rng.choice(SNIPPETS) + text[at:]
    if kind == "delete":
        at = rng.randrange(n)
        return text[:at] + text[at + rng.randint(1, 8):]
    if kind == "def" and (defs := list(re.finditer(r"\(def (\S+) ([0-9.]+)\)", text))):
        m = rng.choice(defs)
        return text[:m.start(2)] + rng.choice(["2", "3", "4", "8", "16", "64", "0.5", "1e-3"]) + text[m.end(2):]
    if kind == "rename" and (models := list(re.finditer(r"\(defmodel (\S+)", text))):
        name = rng.choice(models).group(1)
        new = name + rng.choice(["x", "2", ""])
        if rng.random() < 0.5:   # the definition only: its uses become unbound
            m = next(mm for mm in models if mm.group(1) == name)
            return text[:m.start(1)] + new + text[m.end(1):]
        return re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", new, text)
    if kind == "bracket" and (brackets := [i for i, c in enumerate(text) if c in "()[]"]):
        at = rng.choice(brackets)
        return text[:at] + text[at + 1:]
    if kind == "number" and (nums := list(re.finditer(r"(?<![\w.-])\d+(?![\w.])", text))):
        m = rng.choice(nums)
        return text[:m.start()] + str(rng.choice([1, 2, 3, 8, 16, 64])) + text[m.end():]
    if kind == "misspell" and (names := list(re.finditer(r"\((relu|matmul|getf|twice|linear|mean|layer\d+) ", text))):
        m = rng.choice(names)
        return text[:m.end(1)] + rng.choice(["x", "2", "-"]) + text[m.end(1):]
    if kind == "undo" and history:
        return rng.choice(history[-4:])
    if kind == "move" and (starts := [m.start() for m in re.finditer(r"^\(", text, re.M)]):
        # A blank line or a comment before a form, or a blank line less: the forms after it
        # move, unchanged (the text still checks as it did).
        at = rng.choice(starts)
        if at >= 2 and text[at - 2:at] == "\n\n" and rng.random() < 0.4:
            return text[:at - 1] + text[at:]
        return text[:at] + rng.choice(["\n", ";; moved\n", "\n\n"]) + text[at:]
    at = rng.randint(0, n)
    return text[:at] + rng.choice(SNIPPETS) + text[at:]


def structure(x, depth: int = 0):
    """A comparable form of IR and facts: dataclasses field by field (the IR compares by identity)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple(structure(getattr(x, f.name), depth + 1) for f in dataclasses.fields(x))
    if isinstance(x, (tuple, list)):
        return tuple(structure(i, depth + 1) for i in x)
    if isinstance(x, dict):
        return tuple((structure(k, depth + 1), structure(v, depth + 1)) for k, v in x.items())
    if isinstance(x, (set, frozenset)):
        return frozenset(x)
    return x


def observed(text: str, cache: CheckCache | None, queries: list[int], build_ir: bool = True):
    """Everything the check gives that an editor or the runtime reads."""
    r = check(parse(SourceText(text, "/work/x.sx")), cache=cache, build_ir=build_ir)
    f = r.facts
    at = {id(d): i for i, d in enumerate(f.definitions)}
    uses = [(span, d, at.get(id(d), -1)) for span, d in f.uses]
    ix = ide.index(r)
    return {
        "diagnostics": r.diagnostics,
        "types": list(f.types.items()),
        "definitions": f.definitions,
        "uses": uses,
        "calls": list(f.calls.items()),
        "state_keys": [(k, at.get(id(d), -1)) for k, d in f.state_keys.items()],
        "generated": [(k, at.get(id(d), -1)) for k, d in f.generated.items()],
        "rest": (f.loader_fields, f.counters, f.phases),
        "program": structure(r.program) if build_ir else None,
        "hover": [ide.hover(ix, q) for q in queries],
        "symbols": ide.document_symbols(ix),
        "inlay": ide.inlay_hints(ix),
        "tokens": ide.semantic_tokens(ix),
    }


def run_sequence(text: str, seed: int, edits: int) -> int:
    """Apply `edits` random edits; after each, the cached and the cold check must agree.
    One check in three is made without the IR, as the language server checks.
    Returns how many cached computations were reused."""
    rng = random.Random(seed)
    cache = CheckCache()
    history: list[str] = []
    for step in range(edits + 1):
        if step:
            history.append(text)
            text = mutate(text, rng, history)
        queries = [rng.randint(0, len(text)) for _ in range(6)]
        build_ir = step % 3 != 1
        warm = observed(text, cache, queries, build_ir)
        cold = observed(text, None, queries, build_ir)
        for key in cold:
            assert warm[key] == cold[key], (f"seed {seed}, edit {step}: `{key}` differs from a cold check", text)
    return cache.hits


def _seed_files() -> list[Path]:
    return [p for d in SEED_DIRS for p in sorted(d.glob("*.sx"))]


@pytest.mark.slow
@pytest.mark.parametrize("path", _seed_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_random_edits_of_run_files(path: Path):
    run_sequence(path.read_text(encoding="utf-8"), seed=zlib.crc32(path.name.encode()) % 1000, edits=10)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_random_edits_of_a_file_of_many_models(seed: int):
    text = many_models(12, precision="bf16" if seed % 3 == 2 else "f32", block=seed % 2 == 0)
    hits = run_sequence(text, seed, edits=40)
    assert hits > 40, "the cache should be reused for the forms an edit did not touch"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_random_edits_of_a_file_of_many_models_that_checks_clean(seed: int):
    text = many_models(10, precision="bf16" if seed == 3 else "f32", block=seed % 2 == 0, clean=True)
    r = check(parse(SourceText(text, "/work/x.sx")))
    assert r.program is not None and {d.code for d in r.diagnostics} == {"W-RAND-001", "W-RAND-002"}, r.diagnostics
    run_sequence(text, 100 + seed, edits=30)


def test_an_edit_in_one_layer_reuses_the_others():
    text = many_models(20, block=False)
    cache = CheckCache()
    check(parse(SourceText(text)), cache=cache)
    hits, misses = cache.hits, cache.misses
    edited = text.replace("(r (relu z))", "(r (relu (relu z)))", 1)   # the first layer that applies relu
    assert edited != text
    check(parse(SourceText(edited)), cache=cache)
    # Every layer is built and applied from the cache but the edited one, and the layers after
    # it (they moved); the student and the block, which call models, are always checked.
    reused = cache.hits - hits
    assert reused >= 2 * 5, reused
    assert observed(edited, cache, [0])["diagnostics"] == observed(edited, None, [0])["diagnostics"]


def test_a_moved_model_with_lora_points_its_diagnostics_at_the_new_place():
    # A `:lora` rank past the matrix is said at `:rank`'s value once the parameters are collected,
    # after the model is built (from the cache, when only an earlier form changed).
    text = (ROOT / "sexpgpu_lang" / "diagnostic_docs" / "models" / "E-MODEL-008.rank-past-the-matrix.sx").read_text()
    cache = CheckCache()
    check(parse(SourceText(text, "/work/x.sx")), cache=cache)
    moved = text.replace("(def dim 32)", "(def dim   32)", 1)   # every form after it moves by 2
    assert moved != text
    hits = cache.hits
    warm = check(parse(SourceText(moved, "/work/x.sx")), cache=cache).diagnostics
    cold = check(parse(SourceText(moved, "/work/x.sx"))).diagnostics
    assert cache.hits > hits, "the model should be built from the cache"
    assert "E-MODEL-008" in {d.code for d in cold} and warm == cold


def test_a_changed_def_is_seen_by_the_layers_that_read_it():
    text = many_models(8, block=False)
    cache = CheckCache()
    check(parse(SourceText(text)), cache=cache)
    # The same length: no form moves, so every layer's nodes are the same objects, but
    # `dim` changes every layer's parameter shapes: no layer may keep its old types.
    edited = text.replace("(def dim 64)", "(def dim 32)", 1)
    warm = check(parse(SourceText(edited)), cache=cache)
    cold = check(parse(SourceText(edited)))
    assert warm.diagnostics == cold.diagnostics and warm.facts == cold.facts
    assert any(t.show().startswith("[32 32]") for t in warm.facts.types.values())


# --------------------------------------------------------------------------- the server's re-check, generated edits

#: The fast tier's seed texts: the fixture (a generator), helpers.SMALL (None), and a transformer
#: from the standard library's layers.
PROPERTY_SEEDS = [ROOT / "tests" / "fixtures" / "tiny-generate.sx", None, ROOT / "examples" / "stdlib-transformer.sx"]
CHARACTERS = "()[] \n:\"x1;"


def edit_place(text: str, unit: str, i: int) -> tuple[int, int]:
    """The range a generated edit works on: a character, a token (an atom of the syntax tree) or a
    form (a list or vector of it), the `i`-th modulo how many the text has; an empty range at the
    end of a text that has none."""
    if unit == "character":
        return (i % len(text), i % len(text) + 1) if text else (0, 0)
    nodes = [n for form in parse(SourceText(text)).forms for n in walk(form)
             if isinstance(n, (ListNode, VecNode)) == (unit == "form")]
    if not nodes:
        return len(text), len(text)
    span = nodes[i % len(nodes)].span
    return span.start, span.end


def apply_edit(text: str, edit: tuple) -> tuple[int, int, str]:
    """(start, end, new text) of a generated edit `(kind, unit, i, j, ch)`: delete the place, replace
    it by another place's text (the `j`-th of the same unit) or a character, or insert before it a
    copy of another place or a character."""
    kind, unit, i, j, ch = edit
    start, end = edit_place(text, unit, i)
    other = text[slice(*edit_place(text, unit, j))] if unit != "character" else ch
    if kind == "delete":
        return start, end, ""
    if kind == "replace":
        return start, end, other
    return start, start, other + (" " if unit != "character" else "")


EDITS = st.tuples(st.sampled_from(["insert", "delete", "replace"]), st.sampled_from(["character", "token", "form"]),
                  st.integers(0, 10**6), st.integers(0, 10**6), st.sampled_from(CHARACTERS))


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate])   # no shrinking: a failure prints its seed text and edits
@given(seed=st.sampled_from(PROPERTY_SEEDS), edits=st.lists(EDITS, min_size=1, max_size=3),
       places=st.lists(st.integers(0, 10**6), min_size=3, max_size=3))
def test_the_servers_recheck_after_generated_edits_equals_a_cold_check(seed, edits, places):
    """The language server's document store (lsp/documents.py) applies each edit as an incremental
    `didChange` (a UTF-16 range) and re-checks with the document's `CheckCache`; after every edit
    its text, diagnostics, editor facts (types by range, definitions and uses) and hovers at three
    places equal a check from scratch of the same text."""
    from helpers import SMALL
    from lsp.documents import Document, DocumentStore, analyze_document
    from lsprotocol import types
    text = seed.read_text(encoding="utf-8") if seed is not None else SMALL
    store, uri = DocumentStore(), "untitled:edited.sx"
    store.open(types.TextDocumentItem(uri=uri, language_id="sexpgpu", version=1, text=text))
    store.analysis(uri)
    for version, edit in enumerate(edits, start=2):
        start, end, new = apply_edit(text, edit)
        positions = store.get(uri).positions("utf-16")
        change = types.TextDocumentContentChangePartial(
            range=types.Range(positions.position(start), positions.position(end)), text=new)
        store.change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=version, uri=uri), [change]), "utf-16")
        text = text[:start] + new + text[end:]
        warm = store.analysis(uri)
        cold = analyze_document(Document(uri, version, text))
        assert warm.document.text == text and warm.failure is None and cold.failure is None
        assert warm.result.diagnostics == cold.result.diagnostics, (edit, text)
        assert warm.result.facts == cold.result.facts, (edit, text)   # types by range, definitions, uses...
        for at in places:
            offset = at % (len(text) + 1)
            assert ide.hover(warm.index, offset) == ide.hover(cold.index, offset), (edit, offset, text)
