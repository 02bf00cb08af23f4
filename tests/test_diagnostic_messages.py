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

from helpers import check, marked
from runfile import RunFile
from sexpgpu_lang import analyze, ide
from sexpgpu_lang.diagnostics import Diagnostic, Related, Severity, quote_controls
from sexpgpu_lang.source import Span


FIXTURE = RunFile.fixture()


def shown(text: str) -> list[Diagnostic]:
    return list(analyze(text, "case.sx").diagnostics)


def all_text(d: Diagnostic) -> str:
    return "\n".join([d.message, d.help or ""] + [r.message for r in d.related])


# --------------------------------------------------------------------------- item 4: control characters


def test_quote_controls_writes_each_unshowable_character_as_its_code_point():
    assert quote_controls("a\0b\x1b[2J\u202ec\x85d") == "aU+0000bU+001B[2JU+202EcU+0085d"
    assert quote_controls("one line\nand another") == "one line\nand another"
    assert quote_controls("`:row` and ümlaut") == "`:row` and ümlaut"


@pytest.mark.parametrize("place,old,new,code", [
    # a NUL inside a string the message quotes (einsum's subscripts)
    ("defmodel student (relu", "(matmul", '(einsum "ij\0,jk"', "E-FORM-002"),
    # a C1 control character and a bidirectional override inside names the messages quote
    ("defgenerate :step (argmax", "row", "r\x9bow", "E-NAME-001"),
    ("defgenerate :step (argmax", "model", "mo\u202edel", "E-NAME-001"),
    ("defgenerate :step (sum", ":keepdims", ":keep\x9bdims", "E-NAME-003"),
])
def test_no_message_carries_a_control_character(place, old, new, code):
    ds = shown(FIXTURE.edit(place, old, new))
    assert ds, "the changed file must give a diagnostic"
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
    [d] = shown(FIXTURE + "\n\0\n")
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
    src = FIXTURE.edit("defgenerate :step (list", ":row", new_key)
    res = check(src.mark("defgenerate :step (list", new_key, "E-GEN-002"))
    [d] = res.diagnostics
    assert d.message == (f"`:step` returns `{new_key}` where `:init` made `:row` ([64 8] i32): the key looks renamed")
    assert [r.message for r in d.related] == ["`:init` made `:row` here"]
    d, f, fixed = fix_of(src, "E-GEN-002")
    assert f.title == f"replace `{new_key}` with `:row`"
    check(fixed)


def test_a_dropped_key_and_an_unrelated_added_key_stay_two_diagnostics():
    # :stride is dropped and :guess added, of another shape and a far name: not a rename
    src = FIXTURE.drop("defgenerate :step (list :stride").set("defgenerate :step (list :guess", "(getf state :row)")
    codes = sorted((d.code, d.message.split(",")[0]) for d in shown(src))
    assert codes == [("E-GEN-002", "`:step` adds `:guess`"), ("E-GEN-002", "`:step` drops `:stride`")]


def test_a_renamed_key_of_another_dtype_is_still_one_diagnostic():
    src = FIXTURE.edit("defgenerate :step (list", ":row", ":rows").set("defgenerate :step (list :rows",
                                                                      "(cast (where (= column at) guess row) :f32)")
    [d] = shown(src)
    assert d.code == "E-GEN-002" and "looks renamed" in d.message


LET_BINDINGS = ("                 (guess (sum (where (= column (- at 1)) (argmax (model row)) 0)\n"
                "                             :axes [1]\n"
                "                             :keepdims true)))")


def test_a_let_star_whose_bindings_lack_their_closer_is_reported_at_the_bindings():
    # the `)` that ends the bindings is missing: the body `(list ...)` is read as a binding unless
    # the recovery sees that its line starts left of the lines the bindings hold
    src = FIXTURE.edit("defgenerate :step", LET_BINDINGS, LET_BINDINGS[:-1])
    check(marked(src, "(", "E-SYNTAX-001", within="((row (getf state :row))"))
    [d] = shown(src)
    assert d.message == "this `(` is never closed"
    assert d.help == "add `)` before line 42, where the indentation shows it ends"


@pytest.mark.parametrize("place,old,new,at,within", [
    # a plist entry of `:params` on a line of its own, its `(list` left open
    ("defgenerate :init (list", "(field batch :row)\n", "(field batch :row\n", "(", "(field batch :row\n"),
    # a model's `:params` plist whose last entry lacks its closer
    ("defmodel student :params", ":std 0.1))", ":std 0.1)", "(", "(:embed"),
])
def test_a_missing_closer_is_reported_at_the_bracket_whose_lines_it_breaks(place, old, new, at, within):
    src = FIXTURE.edit(place, old, new)
    check(marked(src, at, "E-SYNTAX-001", within=within))
    [d] = shown(src)
    line = int(d.help.split("before line ")[1].split(",")[0])
    # the help's fix: the closer at the end of the line before the one it names
    lines = src.split("\n")
    lines[line - 2] += ")"
    check("\n".join(lines))


@pytest.mark.parametrize("where", ["alone", "between forms", "in a body", "at the end"])
def test_a_lone_open_bracket_is_one_error_that_says_delete_it(where):
    src = {"alone": "(",
           "between forms": FIXTURE.add("(", after="model"),
           "in a body": FIXTURE.edit("defgenerate :step", "(lambda (state trip ctx)\n", "(lambda (state trip ctx)\n          (\n"),
           "at the end": FIXTURE.add("(")}[where]
    [d] = shown(src)
    assert (d.code, d.message, d.help) == ("E-SYNTAX-001", "this `(` is never closed: it holds nothing", "delete it")
    assert src[d.span.start] == "("


def test_the_help_for_the_let_star_closer_is_followed_to_a_clean_file():
    src = FIXTURE.edit("defgenerate :step", LET_BINDINGS, LET_BINDINGS[:-1])
    [d] = shown(src)
    line = int(d.help.split("before line ")[1].split(",")[0])
    lines = src.split("\n")
    lines[line - 1] = ")" + lines[line - 1]
    check("\n".join(lines))


# --------------------------------------------------------------------------- item 9: messages that say what is wrong


def test_a_generated_name_read_in_init_says_the_generator_makes_it_later():
    src = FIXTURE.set("defgenerate :init (list :stride", "(field batch :sample)")
    check(src.mark("defgenerate :init (list :stride", ":sample", "E-CONTRACT-001"))
    [d] = shown(src)
    assert d.message == ("`:init` reads `:sample`, which the generator makes later (`:finish` returns it): "
                         "the batch `:init` reads has only loader `train`'s fields")
    assert d.help == "read a field of `train` here (`:row`, `:stride`); `prepare` reads `:sample`"
    [rel] = d.related
    assert src[rel.span.start:rel.span.end] == ":sample" and rel.message == "`:finish` makes `:sample` here"


def test_a_field_nobody_makes_read_in_init_keeps_the_near_miss():
    src = FIXTURE.set("defgenerate :init (list :stride", "(field batch :strid)")
    [d] = shown(src)
    assert d.code == "E-CONTRACT-001" and d.message.endswith("did you mean `:stride`?")


PROBE = ("(loader probe\n  :source (stride-rows :vocab vocab :seq seq)\n  :batch 32\n"
         "  :fields (:row [seq] :i32\n           :stride [1] :i32))\n\n(pass probe-eval :loader probe :every 100)\n")


def test_contract_005_points_at_the_pass_whose_loader_differs():
    src = FIXTURE.add(PROBE)
    [d] = shown(src)
    assert d.code == "E-CONTRACT-005"
    rel = {src[r.span.start:r.span.end]: r.message for r in d.related}
    assert rel["probe"] == ("pass `probe-eval` runs on loader `probe`, whose fields or batch size differ from the "
                            "training loader's")
    assert src.index(":loader probe") + len(":loader ") == next(r.span.start for r in d.related if r.message.startswith("pass"))


SHADOWS = {
    # a let* binding named like the `def` it hides
    "seq": FIXTURE.set("defgenerate :step (column", "(column (iota [1 seq] :axis 1))\n                 (seq (+ at 1))")
                  .set("defgenerate :step (list :row", "(+ (where (= column at) guess row) (sum (zeros [seq 2] :i32)))"),
    # a lambda parameter named like a `def`
    "vocab": FIXTURE.add("(def width (lambda (x vocab) (sum (zeros [vocab 2] :i32))))", before="defmodel student")
                    .set("defgenerate :step (list :row", "(+ (where (= column at) guess row) (width 1 at))"),
}


@pytest.mark.parametrize("name", SHADOWS)
def test_a_local_that_shadows_a_def_used_as_a_constant_says_so(name):
    src = SHADOWS[name]
    [d] = shown(src)
    assert d.code == "E-TYPE-003"
    assert d.message.endswith(f": `{name}` here is a lambda parameter or `let*` binding that shadows the `def` `{name}`")
    assert [src[r.span.start:r.span.end] for r in d.related] == [name, name]
    assert src[d.related[1].span.start - 5:d.related[1].span.start] == "(def "


@pytest.mark.parametrize("key", ["trip", "trips"])
def test_the_trip_read_from_the_context_says_it_is_steps_second_argument(key):
    src = FIXTURE.set("defgenerate :step (at", f"(at (+ (cast (getf ctx :{key}) :i32) 2))")
    [d] = check(src.mark("defgenerate :step (at", f":{key}", "E-NAME-004")).diagnostics
    assert d.message == (f"the context has no key `:{key}`: the trip is `:step`'s second argument, "
                         "`(lambda (state trip ctx) ...)`")
    assert d.help == "use `trip`, `:step`'s second parameter (an `i64` scalar counting from 0)"


def test_the_trip_read_outside_step_says_only_step_sees_it():
    src = FIXTURE.set("defgenerate :finish (stride", "(stride (+ (getf state :stride) (cast (getf ctx :trip) :i32)))")
    [d] = shown(src)
    assert d.code == "E-NAME-004" and d.help == "only `:step` sees the trip; pass what a later phase needs in the state"


@pytest.mark.parametrize("phase,place,new", [
    ("finish", "defgenerate :finish (stride", "(stride (field batch :stride))"),
    ("step", "defgenerate :step (row", "(row (field batch :row))"),
])
def test_a_field_in_step_or_finish_says_the_batch_is_read_in_init(phase, place, new):
    src = FIXTURE.set(place, new)
    [d] = check(src.mark(place, "batch", "E-NAME-001")).diagnostics
    key = "stride" if phase == "finish" else "row"
    assert d.message == (f"`batch` is not defined in `:{phase}`: the batch is read in `:init`, and `:{phase}` sees the state")
    assert d.help == (f"read `:{key}` in `:init` into the state (`:{key} (field batch :{key})`), and here "
                      f"`(getf state :{key})`")


def test_a_field_of_the_state_that_it_lacks_says_the_batch_is_read_in_init():
    src = FIXTURE.set("defgenerate :finish (stride", "(stride (field state :label))")
    [d] = shown(src)
    assert d.code == "E-TYPE-001" and d.message.startswith("`field` reads a batch, and the batch is read in `:init`")
