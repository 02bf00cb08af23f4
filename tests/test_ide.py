"""The editor queries of `sexpgpu_lang.ide`, at the front end's boundary.

Most of the language server's logic is tested here, fast and without a
client: each test is a run file (the tiny-generate fixture with one change)
with `$0` marking the cursor (`helpers.cursor`), and the answer expected
there; a file a test expects diagnostics of shows them with `;; ^^^ CODE`
markers (`helpers.check`).
"""
from __future__ import annotations

import random
import re

import pytest

from helpers import check, cursor, cursor_at, fixture_text
from runfile import RunFile
from sexpgpu_lang import analyze, ide
from sexpgpu_lang.source import Span


def text_of(ix: ide.Index, span: Span) -> str:
    return ix.text[span.start:span.end]


def line_of(ix: ide.Index, span: Span) -> int:
    """1-based line of a span's start."""
    return ix.result.source.line_col(span.start)[0] + 1


def apply(text: str, edits) -> str:
    for e in sorted(edits, key=lambda e: e.span.start, reverse=True):
        text = text[:e.span.start] + e.text + text[e.span.end:]
    return text


# --------------------------------------------------------------------------- hover


@pytest.mark.parametrize("old,new,expect", [
    # an op call: its signature, result type and doc
    ("(take (getf self :embed) row)", "(ta$0ke (getf self :embed) row)",
     ["(take x indices :axis 0)", "→ [64 8 64] f32", "gather entries"]),
    # a let* binding
    ("(guess (sum", "(gu$0ess (sum", ["guess: [64 1] i32", "binding"]),
    # a use of a let* binding inside :step
    ("(list :row (where (= column at) guess row)", "(list :row (where (= column at) gue$0ss row)",
     ["guess: [64 1] i32"]),
    # the trip is i64
    ("(cast trip :i32)", "(cast tr$0ip :i32)", ["trip: [] i64"]),
    # a state key read in :step: the entry's type
    ("(row (getf state :row))\n                 (at", "(row (getf state :r$0ow))\n                 (at",
     [":row [64 8] i32", "state key"]),
    # a generated name read in prepare
    ("(field batch :sample)", "(field batch :sam$0ple)", [":sample [64 8] i32", "generated"]),
    # a model: its parameters
    ("(model student)", "(model stu$0dent)", ["(defmodel student", ":embed [16 64] f32", ":out [64 16] f32"]),
    # a model parameter read through self
    ("(getf self :hidden)", "(getf self :hid$0den)", ["student :hidden [64 64] f32"]),
    # a keyword argument of an op
    (":axes [1]\n", ":ax$0es [1]\n", ["keyword of `sum`"]),
    # a form's keyword: the doc from docs/dev/design.md#generation
    ("(defgenerate :trips 6", "(defgenerate :tri$0ps 6", ["how many times `:step` runs"]),
    # a top-level form
    ("(loader train", "(load$0er train", ["(loader name", "a named loader"]),
    # a special form with its result
    ("(let* ((logits", "(l$0et* ((logits", ["(let* ((name value) ...) body ...)", "→ [] f32"]),
    # the context plist, one key a line
    ("(objective (lambda (inputs ctx)", "(objective (lambda (inputs c$0tx)", [":tokens [] f32"]),
    # a dtype keyword
    ("(cast trip :i32)", "(cast trip :i$032)", ["dtype `i32`"]),
    # a loader
    ("(run :loader train", "(run :loader tr$0ain", ["loader train: batch 64"]),
    # a context key: its doc from the schema (language.CONTEXT_DOCS)
    ("(getf state :stride))))", "(getf ctx :st$0ep))))", [":step [] i64", "key of the context: the optimizer step, from 0"]),
    # a learning-rate schedule: its settings and doc (language.SCHEDULE_DOCS)
    (":optimizer (adam :lr 3e-3)", ":optimizer (adam :lr (warmup-cos$0ine-decay :peak-value 3e-3 :warmup-steps 10 :decay-steps 100))",
     ["(warmup-cosine-decay :init-value ... :peak-value ...", "learning-rate schedule: linear from `:init-value`"]),
    # every keyword of `run` has its doc (`:log` had none)
    ("     :log (:every 50))", "     :l$0og (:every 50))", ["what each logged step writes"]),
    # a weak literal: what its `*` means (issue 21)
    ("(at (+ (cast trip :i32) 2))", "(at (+ (cast trip :i32) $02))", ["[] i32*", "`*`: weakly typed"]),
])
def test_hover(old, new, expect):
    ix, offset = cursor(old, new)
    info = ide.hover(ix, offset)
    assert info is not None
    for piece in expect:
        assert piece in info.markdown, info.markdown


def test_hover_on_nothing_is_none():
    ix, offset = cursor("(def vocab 16)", "(def vocab 16)  $0  ")
    assert ide.hover(ix, offset) is None


# --------------------------------------------------------------------------- navigation


@pytest.mark.parametrize("old,new,target,line", [
    # a state key read in :step goes to where :init made it
    ("(row (getf state :row))\n                 (at", "(row (getf state :r$0ow))\n                 (at", ":row", 33),
    # a state key written by :step goes there too
    ("(list :row (where (= column at) guess row)", "(list :r$0ow (where (= column at) guess row)", ":row", 33),
    # a generated name read in prepare goes to where :finish made it
    ("(field batch :label)", "(field batch :lab$0el)", ":label", 50),
    # a loader field read in :init goes to the loader's :fields
    ("(field batch :stride)))", "(field batch :str$0ide)))", ":stride", 14),
    # a model parameter through self
    ("(getf self :hidden)", "(getf self :hid$0den)", ":hidden", 20),
    # a let* binding
    ("(= column at) guess", "(= column a$0t) guess", "at", 37),
    # a lambda parameter
    ("(cast trip :i32)", "(cast tr$0ip :i32)", "trip", 35),
    # a def
    (":vocab vocab", ":vocab voc$0ab", "vocab", 6),
    # a model
    ("(model student)", "(model stu$0dent)", "student", 16),
    # a loader
    ("(run :loader train", "(run :loader tr$0ain", "train", 10),
])
def test_definition(old, new, target, line):
    ix, offset = cursor(old, new)
    found = ide.definition(ix, offset)
    assert len(found) == 1
    assert text_of(ix, found[0].span) == target
    assert line_of(ix, found[0].span) == line
    assert found[0].full.contains(found[0].span)


def test_definition_of_a_builtin_is_empty():
    ix, offset = cursor("(argmax (model row))", "(arg$0max (model row))")
    assert ide.definition(ix, offset) == []


def test_references_of_a_state_key_include_the_step_write():
    ix, offset = cursor("(list :row (field batch :row)", "(list :r$0ow (field batch :row)")
    refs = ide.references(ix, offset)
    assert [(line_of(ix, r.span), r.write) for r in refs] == [(33, True), (36, False), (42, True), (45, False)]
    assert [r.span for r in ide.references(ix, offset, include_declaration=False)] == [r.span for r in refs[1:]]


def test_state_keys_are_found_whatever_the_state_parameter_is_called():
    text = fixture_text().replace("(lambda (state trip ctx)", "(lambda (s trip ctx)").replace(
        "(getf state :row))\n                 (at", "(getf s :row))\n                 (at").replace(
        "(getf state :stride))))", "(getf s :stride))))")
    check(text)
    ix, offset = cursor("(getf s :row))", "(getf s :r$0ow))", text)
    [target] = ide.definition(ix, offset)
    assert line_of(ix, target.span) == 33
    assert len(ide.rename(ix, offset, "cells")) == 4


def test_highlights_of_a_binding():
    ix, offset = cursor("(truth (mod", "(tru$0th (mod")
    refs = ide.highlights(ix, offset)
    assert [(text_of(ix, r.span), r.write) for r in refs] == [("truth", True), ("truth", False)]


@pytest.mark.parametrize("old,new,name,count", [
    ("(row (getf state :row))\n                 (at", "(row (getf state :r$0ow))\n                 (at", "tokens-row", 4),
    ("(guess (sum", "(gu$0ess (sum", "pick", 2),
    ("(model student)", "(model stu$0dent)", "learner", 2),
    ("(run :loader train", "(run :loader tr$0ain", "rows", 2),
    (":vocab vocab", ":vocab voc$0ab", "v", 8),
    ("(field batch :label)", "(field batch :lab$0el)", ":next", 2),
    ("(getf self :hidden)", "(getf self :hid$0den)", "mix", 2),
])
def test_rename_keeps_the_file_clean(old, new, name, count):
    ix, offset = cursor(old, new)
    assert ide.prepare_rename(ix, offset) is not None
    edits = ide.rename(ix, offset, name)
    assert len(edits) == count
    check(apply(ix.text, edits))


@pytest.mark.parametrize("old,new,name,message", [
    ("(guess (sum", "(gu$0ess (sum", "row", "`row` is already defined at line 36, column 19, and `guess` is used"),
    ("(guess (sum", "(gu$0ess (sum", "sum", "built-in"),
    ("(guess (sum", "(gu$0ess (sum", "1x", "not a valid name"),
    ("(row (getf state :row))\n                 (at", "(row (getf state :r$0ow))\n                 (at", "stride",
     "already a state key"),
    ("(field batch :label)", "(field batch :lab$0el)", "row", "field of loader"),
    ("(argmax (model row))", "(arg$0max (model row))", "x", "no renameable name"),
])
def test_rename_refuses(old, new, name, message):
    ix, offset = cursor(old, new)
    with pytest.raises(ide.RenameError, match=message):
        ide.rename(ix, offset, name)


def test_document_symbols():
    ix = ide.index(analyze(fixture_text()))
    symbols = ide.document_symbols(ix)
    assert [(s.name, s.kind) for s in symbols] == [
        ("vocab", "constant"), ("seq", "constant"), ("dim", "constant"), ("train", "struct"),
        ("student", "class"), ("model", "variable"), ("defgenerate", "event"), ("prepare", "function"),
        ("objective", "function"), ("run", "module")]
    student = symbols[4]
    assert [(c.name, c.detail) for c in student.children][:2] == [("embed", "[16 64] f32"), ("first", "[16 64] f32")]
    gen = symbols[6]
    assert [c.name for c in gen.children] == [":init", ":step", ":finish"]
    assert [k.name for k in gen.children[0].children] == ["row", "stride"]
    assert [k.name for k in gen.children[2].children] == ["sample", "label", "correct"]
    for s in symbols:
        assert s.span.contains(s.selection)


def test_folding_ranges():
    ix = ide.index(analyze(fixture_text()))
    folds = ide.folding_ranges(ix)
    assert folds[0] == ide.Fold(Span(0, ix.text.index("\n\n")), "comment")
    regions = [f for f in folds if f.kind == "region"]
    assert text_of(ix, regions[0].span).startswith("(loader train")
    assert all("\n" in text_of(ix, f.span) for f in regions)


# --------------------------------------------------------------------------- completion


def labels(ix, offset):
    found = ide.completions(ix, offset)
    return None if found is None else [c.label for c in found.items]


@pytest.mark.parametrize("old,new,expect,absent", [
    # state keys inside (getf state
    ("(getf state :stride))))", "(getf state :$0))))", [":row", ":stride"], [":step"]),
    # context keys inside (getf ctx; no counter inside a generator
    ("(getf state :stride))))", "(getf ctx :$0))))", [":step", ":microbatch", ":stage-records"], [":tokens"]),
    # objective's context has the counters prepare declares
    ("(metric :loss loss)", "(metric :loss (getf ctx :$0))", [":step", ":tokens"], []),
    # loader fields and generated names inside (field batch in prepare
    ("(field batch :label)", "(field batch :l$0)", [":row", ":stride", ":sample", ":label", ":correct"], []),
    # only loader fields in :init, where nothing is generated yet
    ("(field batch :row)\n", "(field batch :$0)\n", [":row", ":stride"], [":sample"]),
    # an op's keywords, without those already given
    (":axes [1]\n", ":axes [1] :$0\n", [":keepdims"], [":axes"]),
    (":axes [1]\n", ":a$0 [1]\n", [":axes", ":keepdims"], []),
    # a form's keywords
    ("(run :loader train", "(run :loader train :s$0", [":steps", ":stack", ":seed"], [":loader"]),
    ("(defgenerate :trips 6", "(defgenerate :trips 6 :$0", [":init", ":step", ":finish"], [":trips"]),
    # no colon typed yet: keywords where a keyword comes next
    ("(loader train\n", "(loader train $0\n", [":source", ":batch", ":fields"], ["vocab"]),
    (":batch 64\n", ":batch 64 $0\n", [":fields"], [":batch", ":source"]),
    # a settings plist's keys
    (":log (:every 50)", ":log (:every 50 :$0)", [":tensorboard"], [":every"]),
    # a setting's values
    (":precision :f32", ":precision :$0", [":f32", ":bf16"], [":i32"]),
    # dtypes after a cast
    ("(cast trip :i32)", "(cast trip :$0)", [":i32", ":bf16", ":bool"], []),
    # the head of a call: operations and forms, and the models in scope
    ("(argmax (model row))", "(arg$0 (model row))", ["argmax", "let*", "getf", "model", "student"], ["def"]),
    # a top-level head: the forms
    ("(def dim 64)", "(d$0 dim 64)", ["def", "defmodel", "defgenerate", "run"], ["argmax"]),
    # names in scope: bindings of the let* so far, lambda parameters, defs
    ("(argmax (model row))", "(argmax (model r$0))", ["row", "at", "column", "state", "trip", "vocab"], ["guess"]),
    # an initialiser inside :params
    (":params (:embed (normal", ":params (:embed ($0 (normal", ["normal", "zeros", "uniform"], ["argmax"]),
    # an optimizer
    (":optimizer (adam :lr 3e-3)", ":optimizer ($0)", ["adam", "adamw", "sgd"], []),
    # a state key the :step result does not hold yet
    (":stride (getf state :stride))))", ":$0)))", [":stride"], [":row"]),
])
def test_completion(old, new, expect, absent):
    ix, offset = cursor(old, new)
    got = labels(ix, offset)
    assert got is not None
    for e in expect:
        assert e in got, (e, got)
    for a in absent:
        assert a not in got, (a, got)


@pytest.mark.parametrize("old,new", [
    (";; A student learns", ";; A stu$0dent learns"),
    ('(def seq 8)', '(def seq 8) ; see (getf ctx :$0'),
    ('(def seq 8)', '(def name "a (getf ctx :$0 b")'),
    ('(def seq 8)', '(def name "unterminated (getf $0'),
])
def test_no_completion_in_comments_or_strings(old, new):
    ix, offset = cursor(old, new)
    assert ide.completions(ix, offset) is None


def test_completion_replaces_the_word_being_typed():
    ix, offset = cursor("(field batch :label)", "(field batch :lab$0)")
    found = ide.completions(ix, offset)
    assert text_of(ix, found.span) == ":lab"
    assert any(c.text == ":label" for c in found.items)


# --------------------------------------------------------------------------- signature help


@pytest.mark.parametrize("old,new,label,active", [
    (":axes [1]\n", ":axes [$01]\n", "(sum x :axes [..] :keepdims false)", ":axes [..]"),
    ("(take row [0] :axis 1)", "(take row $0[0] :axis 1)", "(take x indices :axis 0)", "indices"),
    ("(take row [0] :axis 1)", "(take $0row [0] :axis 1)", "(take x indices :axis 0)", "x"),
    ("(cast trip :i32)", "(cast trip $0:i32)", "(cast x :dtype)", ":dtype"),
    ("(+ here start next)", "(+ here start next $0)", "(+ a b ...)", "..."),
    ("(argmax (model row))", "(argmax (student $0row))", "(student row)", "row"),
    # issue 21: inside `(model ...)`, the bound model's call, not the enclosing `argmax`
    ("(argmax (model row))", "(argmax (model $0row))", "(model row)", "row"),
    ("(argmax (model row))", "(argmax (model row) :keep$0dims true)", "(argmax x :axis -1 :keepdims false)",
     ":keepdims false"),
    ("(iota [1 seq] :axis 1)", "(iota [1 seq] :axis $01)", "(iota [shape] :axis 0 :dtype :i32)", ":axis 0"),
    ("(field batch :stride)))", "(field batch $0:stride)))", "(field batch :name)", ":name"),
])
def test_signature_help(old, new, label, active):
    ix, offset = cursor(old, new)
    sig = ide.signature_help(ix, offset)
    assert sig is not None and sig.label == label
    assert sig.active is not None
    s, e = sig.params[sig.active]
    assert sig.label[s:e] == active


@pytest.mark.parametrize("new, active", [
    ("     :log $0(:every 50))", ":log (:every 50)"),
    ("     :log (:every 50) $0)", None),   # after the last keyword's value: nothing is being written
    ("     :log (:every 50) :samples $0)", ":samples (...)"),
    ("     :log (:every 50) :checkpoint $0)", ":checkpoint (:every n)"),
])
def test_runs_signature_has_every_keyword_and_marks_the_one_written(new, active):
    ix, offset = cursor("     :log (:every 50))", new)
    sig = ide.signature_help(ix, offset)
    from sexpgpu_lang.language import RUN_KEYS
    assert sig is not None and sig.label.startswith("(run :loader l ")
    assert all(f" :{k} " in sig.label for k in RUN_KEYS), sig.label
    if active is None:
        return
    s, e = sig.params[sig.active]
    assert sig.label[s:e] == active


def test_every_run_keyword_has_a_doc():
    from sexpgpu_lang.language import KEYWORD_DOCS, RUN_KEYS
    assert [k for k in RUN_KEYS if ("run", k) not in KEYWORD_DOCS] == []


def test_no_signature_outside_calls():
    ix, offset = cursor_at("$0" + fixture_text())
    assert ide.signature_help(ix, offset) is None


# --------------------------------------------------------------------------- inlay hints, tokens


def test_inlay_hints_after_bindings_and_state_keys():
    ix = ide.index(analyze(fixture_text()))
    hints = {(line_of(ix, Span(h.offset, h.offset)), re.search(r"[^\s()\[\]]+$", ix.text[:h.offset]).group()): h.label
             for h in ide.inlay_hints(ix)}
    assert hints[(36, "row")] == ": [64 8] i32"          # (row (getf state :row)) in :step
    assert hints[(39, "guess")] == ": [64 1] i32"
    assert hints[(33, ":row")] == ": [64 8] i32"         # the state key :init makes
    assert hints[(34, ":stride")] == ": [64 1] i32"
    assert hints[(42, ":row")] == ": [64 8] i32"         # the state key :step returns
    assert hints[(51, ":correct")] == ": [64 1] f32"     # a generated name
    assert hints[(61, "loss")] == ": [] f32"


def test_inlay_hints_in_a_range():
    ix, start = cursor("(objective", "$0(objective")
    hints = ide.inlay_hints(ix, Span(start, len(ix.text)))
    assert [h.label for h in hints] == [": [64 8 16] f32", ": [] f32"]


def test_semantic_tokens():
    ix = ide.index(analyze(fixture_text()))
    tokens = {(text_of(ix, t.span), t.type, t.modifiers) for t in ide.semantic_tokens(ix)}
    assert ("defgenerate", "keyword", ()) in tokens
    assert ("let*", "keyword", ()) in tokens
    assert ("argmax", "function", ("defaultLibrary",)) in tokens
    assert ("student", "class", ("declaration",)) in tokens
    assert ("train", "namespace", ()) in tokens
    assert ("trip", "parameter", ("declaration",)) in tokens
    assert ("vocab", "variable", ("declaration", "readonly")) in tokens
    assert (":i32", "type", ()) in tokens
    assert (":row", "property", ()) in tokens
    assert ("3e-3", "number", ()) in tokens
    assert (";; expect: clean", "comment", ()) in tokens
    starts = [t.span.start for t in ide.semantic_tokens(ix)]
    assert starts == sorted(starts)


# --------------------------------------------------------------------------- quick fixes


def fix(text: str, code: str) -> tuple[ide.Fix, str]:
    """The first fix of the first `code` diagnostic, and the text after applying it."""
    ix = ide.index(analyze(text, "case.sx"))
    diag = next(d for d in ix.result.diagnostics if d.code == code)
    fixes = [f for f in ide.quick_fixes(ix, diag.span) if f.diagnostic is diag]
    assert fixes, [d.code for d in ix.result.diagnostics]
    return fixes[0], apply(text, fixes[0].edits)


FIXTURE = RunFile.fixture()


def with_row(value: str) -> RunFile:
    """The fixture whose `:step` returns `value` as `:row`."""
    return FIXTURE.set("defgenerate :step (list :row", value)


def test_fix_near_miss():
    f, fixed = fix(FIXTURE.set("defgenerate :step (argmax", "(argmx (model row))"), "E-NAME-001")
    assert f.title == "replace `argmx` with `argmax`" and f.preferred
    check(fixed)


def test_fix_gen_002_dtype_removes_a_cast_away_from_the_init_dtype():
    text = with_row("(cast (where (= column at) guess row) :f32)")
    f, fixed = fix(text, "E-GEN-002")
    assert f.title == "remove the cast of `:row` to f32" and f.preferred
    assert fixed == fixture_text()
    check(fixed)


def test_fix_gen_002_dtype_casts_to_the_init_dtype():
    text = with_row("(* (where (= column at) guess row) 1.5)")
    f, fixed = fix(text, "E-GEN-002")
    assert f.title == "cast `:row` back to i32"
    assert "(cast (* (where (= column at) guess row) 1.5) :i32)" in fixed
    check(fixed)
    text = with_row("(cast (* (where (= column at) guess row) 1.5) :f32)")
    f, fixed = fix(text, "E-GEN-002")
    assert f.title == "cast `:row` to i32 instead of f32"
    assert "(cast (* (where (= column at) guess row) 1.5) :i32)" in fixed
    check(fixed)


def test_fix_gen_002_weak_float():
    text = with_row("(+ (where (= column at) guess row) 0.5)")
    _, fixed = fix(text, "E-GEN-002")
    check(fixed)


def test_fix_gen_002_dropped_key_returns_it():
    text = FIXTURE.drop("defgenerate :step (list :stride")
    f, fixed = fix(text, "E-GEN-002")
    assert "(getf state :stride)" in fixed
    check(fixed)


def test_fix_contract_010_moves_a_counter_from_step_into_prepare():
    text = FIXTURE.edit("defgenerate :step", "(let* ((row (getf state :row))\n",
                        "(counter :trips-run 1)\n          (let* ((row (getf state :row))\n")
    f, fixed = fix(text, "E-CONTRACT-010")
    assert f.title == "move the counter into `prepare`"
    check(fixed)
    assert fixed.index("(counter :trips-run 1)") > fixed.index("(prepare")


def test_fix_contract_010_makes_a_prepare_when_there_is_none():
    text = (FIXTURE.drop("prepare")
            .edit("objective", "(getf inputs :input)", "(getf inputs :sample)")
            .edit("objective", "(getf inputs :target)", "(getf inputs :label)")
            .edit("objective", "(metric :loss loss)", "(counter :seen 1)\n    (metric :loss loss)"))
    check(text.mark("objective", "(counter :seen 1)", "E-CONTRACT-010"))
    _, fixed = fix(text, "E-CONTRACT-010")
    check(fixed)


@pytest.mark.parametrize("where,old,new", [
    ("finish", "(list :sample row", "(metric :acc (mean (cast (= row truth) :f32)))\n              (list :sample row"),
    ("step", "(list :row (where (= column at) guess row)",
     "(metric :guessed (sum guess))\n            (list :row (where (= column at) guess row)"),
    ("init", "(list :row (field batch :row)", "(metric :first (sum (field batch :row)))\n          (list :row (field batch :row)"),
])
def test_fix_gen_004_reports_from_objective(where, old, new):
    text = FIXTURE.edit(f"defgenerate :{where}", old, new)
    check(text.mark(f"defgenerate :{where}", new.split("\n")[0], "E-GEN-004"))
    f, fixed = fix(text, "E-GEN-004")
    check(fixed)
    name = new.split()[1]
    assert f"(metric {name} (getf inputs {name}))" in fixed


def test_no_fix_for_a_metric_inside_a_model_the_generator_runs():
    text = FIXTURE.edit("defmodel student :apply", "(matmul h (getf self :out))",
                        "(metric :h (mean h))\n             (matmul h (getf self :out))")
    ix = ide.index(analyze(text))
    gen4 = [d for d in ix.result.diagnostics if d.code == "E-GEN-004"]
    assert gen4 and all(not ide.quick_fixes(ix, d.span) for d in gen4)


# --------------------------------------------------------------------------- robustness


QUERIES = [ide.hover, ide.definition, ide.references, ide.highlights, ide.prepare_rename, ide.completions,
           ide.signature_help]


@pytest.mark.parametrize("seed", range(4))
def test_queries_never_raise(seed):
    """Every query at every offset of mangled text answers (perhaps emptily)."""
    rng = random.Random(seed)
    text = fixture_text()
    chars = list(text)
    for _ in range(40):
        i = rng.randrange(len(chars))
        chars[i:i + rng.randrange(4)] = rng.choice(["(", ")", "[", '"', ";", ":", "\x00", "é", "😀", "\r", "", " "])
    text = "".join(chars)
    ix = ide.index(analyze(text))
    for offset in range(0, len(text) + 1, 7):
        for q in QUERIES:
            q(ix, offset)
        try:
            ide.rename(ix, offset, "fresh")
        except ide.RenameError:
            pass
    for q in (ide.document_symbols, ide.folding_ranges, ide.inlay_hints, ide.semantic_tokens):
        q(ix)
    ide.quick_fixes(ix, Span(0, len(text)))


def test_binary_text():
    text = bytes(range(256)).decode("latin-1") * 3
    ix = ide.index(analyze(text))
    for offset in range(0, len(text), 13):
        ide.hover(ix, offset)
        ide.completions(ix, offset)
        ide.signature_help(ix, offset)
    assert ide.semantic_tokens(ix) is not None


SAMPLES_RUN = RunFile.fixture().set("run :samples", "(:text [:sample] :values [:correct])")


@pytest.mark.parametrize("where", ["(list :sample$0 row", ":samples (:text [:sam$0ple]"])
def test_a_generated_name_renamed_from_anywhere_renames_its_samples_entry(where):
    """Renaming `:sample` (made by `:finish`) edits `:samples (:text [:sample])` too, so the file stays
    clean (it was E-SAMPLE-001); from inside `:samples`, prepareRename, references and highlights
    find the name."""
    text = SAMPLES_RUN
    plain = where.replace("$0", "")
    ix, offset = cursor_at(text.replace(plain, where, 1))
    assert ide.prepare_rename(ix, offset) is not None
    edits = ide.rename(ix, offset, ":draft")
    assert len(edits) == 4   # `:finish` makes it, `prepare` reads it twice, `:samples` shows it
    check(apply(ix.text, edits))
    refs = [text_of(ix, r.span) for r in ide.references(ix, offset)]
    assert refs.count(":sample") == 4
    assert len(ide.highlights(ix, offset)) == 4


def test_completion_in_samples_offers_what_may_be_shown():
    ix, offset = cursor_at(SAMPLES_RUN.edit("run :samples", ":values [:correct]", ":values [:correct :$0]"))
    found = {c.text: c.detail for c in ide.completions(ix, offset).items}
    assert found[":sample"].startswith("[64 8] i32 of the batch") and ":row" in found and ":input" in found
    assert ":correct" not in found   # already shown
