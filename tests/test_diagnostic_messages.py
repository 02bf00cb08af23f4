"""Messages a new user and a real editor can act on (issue 21, items 4, 8 and 9).

- Control characters never reach a message: source text quoted into any message, help or
  related message shows them as `U+0000` (Emacs refuses a whole notification holding a NUL).
- One cause, one diagnostic: a renamed state key is one E-GEN-002 whose quick fix renames it
  back; a missing `)` is reported at the bracket that is really unclosed, and doing what its
  help says leaves a clean file; a lone `(` is one error.
- Messages that say what is really wrong: a generated name read in `:init`, the pass whose
  loader differs (E-CONTRACT-005), a local that shadows a `def` used as a constant, the trip
  read from the context, a `field` in `:step` or `:finish`.
"""
from __future__ import annotations

import pytest

from helpers import check, fixture_text, marked, variant
from sexpgpu_lang import analyze, ide
from sexpgpu_lang.diagnostics import Diagnostic, Related, Severity, quote_controls
from sexpgpu_lang.source import Span


def shown(text: str) -> list[Diagnostic]:
    return list(analyze(text, "case.sx").diagnostics)


def all_text(d: Diagnostic) -> str:
    return "\n".join([d.message, d.help or ""] + [r.message for r in d.related])


# --------------------------------------------------------------------------- item 4: control characters


def test_quote_controls_writes_each_unshowable_character_as_its_code_point():
    assert quote_controls("a\0b\x1b[2J\u202ec\x85d") == "aU+0000bU+001B[2JU+202EcU+0085d"
    assert quote_controls("one line\nand another") == "one line\nand another"
    assert quote_controls("`:row` and ümlaut") == "`:row` and ümlaut"


@pytest.mark.parametrize("old,new,code", [
    # a NUL inside a string the message quotes (einsum's subscripts)
    ("(matmul (+ here start next) (getf self :hidden))", '(einsum "ij\0,jk" (+ here start next) (getf self :hidden))',
     "E-FORM-002"),
    # a C1 control character and a bidirectional override inside names the messages quote
    ("(argmax (model row))", "(argmax (model r\x9bow))", "E-NAME-001"),
    ("(argmax (model row))", "(argmax (mo\u202edel row))", "E-NAME-001"),
    (":keepdims true)))", ":keep\x9bdims true)))", "E-NAME-003"),
])
def test_no_message_carries_a_control_character(old, new, code):
    ds = shown(variant(old, new))
    assert ds, "the variant must give a diagnostic"
    for d in ds:
        text = all_text(d)
        assert all(c.isprintable() or c == "\n" for c in text), repr(text)
    [d] = [d for d in ds if d.code == code]
    assert "U+" in d.message or "\\x00" in d.message, d.message


def test_every_diagnostic_and_related_message_is_quoted_however_it_is_made():
    from dataclasses import replace
    d = Diagnostic("E-NAME-001", Severity.ERROR, "`a\0b` is not defined", Span(0, 1), (Related(Span(0, 1), "x\0"),),
                   help="write \0")
    assert (d.message, d.help, d.related[0].message) == ("`aU+0000b` is not defined", "write U+0000", "xU+0000")
    assert replace(d, message="in `f`: \x07").message == "in `f`: U+0007"


def test_the_one_character_message_is_unchanged():
    [d] = shown(fixture_text() + "\n\0\n")
    assert d.code == "E-SYNTAX-003" and d.message == "unexpected character `U+0000`"


# --------------------------------------------------------------------------- item 8: one cause, one diagnostic


def fix_of(text: str, code: str):
    ix = ide.index(analyze(text, "case.sx"))
    [d] = [d for d in ix.result.diagnostics if d.code == code]
    fixes = [f for f in ide.quick_fixes(ix, d.span) if f.diagnostic is d]
    assert len(fixes) == 1, [f.title for f in fixes]
    out = text
    for e in sorted(fixes[0].edits, key=lambda e: e.span.start, reverse=True):
        out = out[:e.span.start] + e.text + out[e.span.end:]
    return d, fixes[0], out


@pytest.mark.parametrize("new_key", [":rows", ":next", ":row2"])
def test_a_renamed_state_key_is_one_diagnostic_with_a_fix_that_renames_it_back(new_key):
    src = variant("(list :row (where (= column at) guess row)", f"(list {new_key} (where (= column at) guess row)")
    res = check(marked(src, new_key, "E-GEN-002", within=f"(list {new_key}"))
    [d] = res.diagnostics
    assert d.message == (f"`:step` returns `{new_key}` where `:init` made `:row` ([64 8] i32): the key looks renamed")
    assert [r.message for r in d.related] == ["`:init` made `:row` here"]
    d, f, fixed = fix_of(src, "E-GEN-002")
    assert f.title == f"replace `{new_key}` with `:row`"
    check(fixed)


def test_a_dropped_key_and_an_unrelated_added_key_stay_two_diagnostics():
    # :stride is dropped and :guess added, of another shape and a far name: not a rename
    src = variant("                  :stride (getf state :stride))))", "                  :guess (getf state :row))))")
    codes = sorted((d.code, d.message.split(",")[0]) for d in shown(src))
    assert codes == [("E-GEN-002", "`:step` adds `:guess`"), ("E-GEN-002", "`:step` drops `:stride`")]


def test_a_renamed_key_of_another_dtype_is_still_one_diagnostic():
    src = variant("(list :row (where (= column at) guess row)", "(list :rows (cast (where (= column at) guess row) :f32)")
    [d] = shown(src)
    assert d.code == "E-GEN-002" and "looks renamed" in d.message


LET_BINDINGS = ("                 (guess (sum (where (= column (- at 1)) (argmax (model row)) 0)\n"
                "                             :axes [1]\n"
                "                             :keepdims true)))")


def test_a_let_star_whose_bindings_lack_their_closer_is_reported_at_the_bindings():
    # the `)` that ends the bindings is missing: the body `(list ...)` is read as a binding unless
    # the recovery sees that its line starts left of the lines the bindings hold
    src = variant(LET_BINDINGS, LET_BINDINGS[:-1])
    check(marked(src, "(", "E-SYNTAX-001", within="((row (getf state :row))"))
    [d] = shown(src)
    assert d.message == "this `(` is never closed"
    assert d.help == "add `)` before line 42, where the indentation shows it ends"


@pytest.mark.parametrize("old,new,at,within", [
    # a plist entry of `:params` on a line of its own, its `(list` left open
    ("(list :row (field batch :row)\n                :stride (field batch :stride)))",
     "(list :row (field batch :row\n                :stride (field batch :stride)))", "(", "(field batch :row\n"),
    # a model's `:params` plist whose last entry lacks its closer
    (":out (normal [dim vocab] :std 0.1))", ":out (normal [dim vocab] :std 0.1)", "(", "(:embed"),
])
def test_a_missing_closer_is_reported_at_the_bracket_whose_lines_it_breaks(old, new, at, within):
    src = variant(old, new)
    check(marked(src, at, "E-SYNTAX-001", within=within))
    [d] = shown(src)
    line = int(d.help.split("before line ")[1].split(",")[0])
    # the help's fix: the closer at the end of the line before the one it names
    lines = src.split("\n")
    lines[line - 2] += ")"
    check("\n".join(lines))


@pytest.mark.parametrize("where", ["alone", "between forms", "in a body", "at the end"])
def test_a_lone_open_bracket_is_one_error_that_says_delete_it(where):
    text = fixture_text()
    src = {"alone": "(",
           "between forms": text.replace("(model student)\n", "(model student)\n(\n"),
           "in a body": text.replace("  :step (lambda (state trip ctx)\n", "  :step (lambda (state trip ctx)\n          (\n"),
           "at the end": text + "\n(\n"}[where]
    [d] = shown(src)
    assert (d.code, d.message, d.help) == ("E-SYNTAX-001", "this `(` is never closed: it holds nothing", "delete it")
    assert src[d.span.start] == "("


def test_the_help_for_the_let_star_closer_is_followed_to_a_clean_file():
    src = variant(LET_BINDINGS, LET_BINDINGS[:-1])
    [d] = shown(src)
    line = int(d.help.split("before line ")[1].split(",")[0])
    lines = src.split("\n")
    lines[line - 1] = ")" + lines[line - 1]
    check("\n".join(lines))


# --------------------------------------------------------------------------- item 9: messages that say what is wrong


def test_a_generated_name_read_in_init_says_the_generator_makes_it_later():
    src = variant(":stride (field batch :stride)))", ":stride (field batch :sample)))")
    check(marked(src, ":sample", "E-CONTRACT-001", within=":stride (field batch :sample)"))
    [d] = shown(src)
    assert d.message == ("`:init` reads `:sample`, which the generator makes later (`:finish` returns it): "
                         "the batch `:init` reads has only loader `train`'s fields")
    assert d.help == "read a field of `train` here (`:row`, `:stride`); `prepare` reads `:sample`"
    [rel] = d.related
    assert src[rel.span.start:rel.span.end] == ":sample" and rel.message == "`:finish` makes `:sample` here"


def test_a_field_nobody_makes_read_in_init_keeps_the_near_miss():
    src = variant(":stride (field batch :stride)))", ":stride (field batch :strid)))")
    [d] = shown(src)
    assert d.code == "E-CONTRACT-001" and d.message.endswith("did you mean `:stride`?")


PROBE = ("(loader probe\n  :source (stride-rows :vocab vocab :seq seq)\n  :batch 32\n"
         "  :fields (:row [seq] :i32\n           :stride [1] :i32))\n\n(pass probe-eval :loader probe :every 100)\n")


def test_contract_005_points_at_the_pass_whose_loader_differs():
    src = fixture_text() + "\n" + PROBE
    [d] = shown(src)
    assert d.code == "E-CONTRACT-005"
    rel = {src[r.span.start:r.span.end]: r.message for r in d.related}
    assert rel["probe"] == ("pass `probe-eval` runs on loader `probe`, whose fields or batch size differ from the "
                            "training loader's")
    assert src.index(":loader probe") + len(":loader ") == next(r.span.start for r in d.related if r.message.startswith("pass"))


@pytest.mark.parametrize("old,new,name", [
    # a let* binding named like the `def` it hides
    ("(column (iota [1 seq] :axis 1))\n                 (guess",
     "(column (iota [1 seq] :axis 1))\n                 (seq (+ at 1))\n                 (guess", "seq"),
    # a lambda parameter named like a `def`
    ("(defmodel student", "(def width (lambda (x vocab) (sum (zeros [vocab 2] :i32))))\n\n(defmodel student", "vocab"),
])
def test_a_local_that_shadows_a_def_used_as_a_constant_says_so(old, new, name):
    src = variant(old, new)
    if name == "vocab":
        src = variant("(list :row (where (= column at) guess row)", "(list :row (+ (where (= column at) guess row) (width 1 at))", src)
    else:
        src = variant("(list :row (where (= column at) guess row)",
                      "(list :row (+ (where (= column at) guess row) (sum (zeros [seq 2] :i32)))", src)
    [d] = shown(src)
    assert d.code == "E-TYPE-003"
    assert d.message.endswith(f": `{name}` here is a lambda parameter or `let*` binding that shadows the `def` `{name}`")
    assert [src[r.span.start:r.span.end] for r in d.related] == [name, name]
    assert src[d.related[1].span.start - 5:d.related[1].span.start] == "(def "


@pytest.mark.parametrize("key", ["trip", "trips"])
def test_the_trip_read_from_the_context_says_it_is_steps_second_argument(key):
    src = variant("(at (+ (cast trip :i32) 2))", f"(at (+ (cast (getf ctx :{key}) :i32) 2))")
    [d] = check(marked(src, f":{key}", "E-NAME-004", within=f"(getf ctx :{key})")).diagnostics
    assert d.message == (f"the context has no key `:{key}`: the trip is `:step`'s second argument, "
                         "`(lambda (state trip ctx) ...)`")
    assert d.help == "use `trip`, `:step`'s second parameter (an `i64` scalar counting from 0)"


def test_the_trip_read_outside_step_says_only_step_sees_it():
    src = variant("(stride (getf state :stride))", "(stride (+ (getf state :stride) (cast (getf ctx :trip) :i32)))")
    [d] = shown(src)
    assert d.code == "E-NAME-004" and d.help == "only `:step` sees the trip; pass what a later phase needs in the state"


@pytest.mark.parametrize("phase,old,new", [
    ("finish", "(stride (getf state :stride))", "(stride (field batch :stride))"),
    ("step", "(let* ((row (getf state :row))\n                 (at", "(let* ((row (field batch :row))\n                 (at"),
])
def test_a_field_in_step_or_finish_says_the_batch_is_read_in_init(phase, old, new):
    src = variant(old, new)
    [d] = check(marked(src, "batch", "E-NAME-001", within=new)).diagnostics
    key = "stride" if phase == "finish" else "row"
    assert d.message == (f"`batch` is not defined in `:{phase}`: the batch is read in `:init`, and `:{phase}` sees the state")
    assert d.help == (f"read `:{key}` in `:init` into the state (`:{key} (field batch :{key})`), and here "
                      f"`(getf state :{key})`")


def test_a_field_of_the_state_that_it_lacks_says_the_batch_is_read_in_init():
    src = variant("(stride (getf state :stride))", "(stride (field state :label))")
    [d] = shown(src)
    assert d.code == "E-TYPE-001" and d.message.startswith("`field` reads a batch, and the batch is read in `:init`")
