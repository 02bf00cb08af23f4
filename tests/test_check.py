"""Front-end checks, written as the language: a run file with `;; ^^^ CODE` markers under
each range a diagnostic must cover (`helpers.check`; docs/dev/style.md, rust-analyzer's fixtures)."""
from helpers import SMALL, check, fixture_text, marked
from runfile import RunFile
from sexpgpu_lang import analyze

FIXTURE = RunFile.fixture()


def test_fixture_is_clean():
    check(fixture_text())


def test_unbound_name_is_reported_once_not_at_every_enclosing_call():
    check(FIXTURE.set("defgenerate :step (argmax", "(argmx (model row))").mark("defgenerate :step", "argmx", "E-NAME-001"))


def test_after_E_GEN_002_later_phases_use_the_state_init_made():
    # :finish and prepare read :row as [64 8] i32 (what :init made), so nothing after the drift is reported
    drift = "(cast (where (= column at) guess row) :f32)"
    check(FIXTURE.set("defgenerate :step (list :row", drift).mark("defgenerate :step (list :row", drift, "E-GEN-002"))


def test_broadcast_mismatch_quotes_both_shapes():
    src = FIXTURE.set("defgenerate :finish (truth", "(truth (mod (+ (take row [0] :axis 1) (* column stride)) vocab))\n"
                                                     "                   (bad (+ row (iota [3])))")
    [d] = check(src.mark("defgenerate :finish (bad", "(+ row (iota [3]))", "E-SHAPE-001")).diagnostics
    assert "[64 8] and [3]" in d.message


def test_unknown_keyword_suggests_the_near_miss():
    src = FIXTURE.edit("defgenerate :finish (list :correct", ":axes", ":axis")
    check(src.mark("defgenerate :finish (list :correct", ":axis", "E-NAME-003"))


def test_hover_types_come_from_the_rules():
    text = fixture_text()
    res = analyze(text, "t.sx")

    def type_of(snippet, nth=0):
        start = -1
        for _ in range(nth + 1):
            start = text.index(snippet, start + 1)
        return res.facts.types[(start, start + len(snippet))].show()

    assert type_of("(cast trip :i32)") == "[] i32"
    assert type_of("(+ (cast trip :i32) 2)") == "[] i32"           # a literal is weak: i32 stays i32
    assert type_of("(argmax (model row))") == "[64 8] i32"
    assert type_of("(iota [1 seq] :axis 1)") == "[1 8] i32"
    assert type_of("(size (field batch :sample))") == "[] i64"
    assert type_of("(model (getf inputs :input))") == "[64 8 16] f32"


def test_bf16_precision_shows_bf16_inside_models():
    text = FIXTURE.set("run :precision", ":bf16")
    res = analyze(text, "t.sx")
    start = text.index("(model (getf inputs :input))")
    assert res.facts.types[(start, start + len("(model (getf inputs :input))"))].show() == "[64 8 16] bf16"
    start = text.index("(mean (cross-entropy logits")
    assert res.facts.types[(start, start + len("(mean (cross-entropy logits (getf inputs :target)))"))].show() == "[] f32"


def test_weak_float_promotes_like_jax():
    weak = "(+ (where (= column at) guess row) 0.5)"
    check(FIXTURE.set("defgenerate :step (list :row", weak).mark("defgenerate :step (list :row", weak, "E-GEN-002"))


def test_objective_must_return_a_float_scalar():
    src = FIXTURE.edit("objective", "\n    loss)", "\n    (argmax logits))")   # the value the objective returns
    check(src.mark("objective", "(argmax logits)", "E-CONTRACT-002"))


def test_half_typed_and_binary_text_never_raise():
    for text in ["(", ")", "(defgenerate :trips", "(loader", "\x00\xff(run :loader", "(((((", "[:a :b",
                 fixture_text()[:500], fixture_text()[:1234], "(def x (lambda", '(def s "unterminated']:
        res = analyze(text, "half.sx")
        assert isinstance(res.diagnostics, list)


def test_deep_nesting_is_one_diagnostic_not_a_crash():
    deep = "(def x " + "(+ 1 " * 600 + "1" + ")" * 600 + ")\n"
    res = analyze(deep + SMALL, "deep.sx")
    assert [d.code for d in res.diagnostics if d.is_error] == ["E-SYNTAX-005"]
    assert res.source.line_col(res.diagnostics[0].span.start)[0] == 0


def test_a_long_let_star_checks():
    body = "(let* (" + " ".join(f"(v{i} (+ row {i}))" for i in range(2000)) + ") v1999)"
    check(FIXTURE.set("defgenerate :step (list :row", f"(where (= column at) guess {body})"))


def test_near_misses_for_sources_optimizers_initialisers_and_dtypes():
    cases = [("loader train :source", "(stride-row :vocab vocab :seq seq)", "E-FORM-002", "did you mean `stride-rows`?"),
             ("run :optimizer", "(adma :lr 3e-3)", "E-FORM-002", "did you mean `adam`?"),
             ("defmodel student :params :embed", "(norml [vocab dim] :std 0.1)", "E-FORM-002", "did you mean `normal`?"),
             ("defgenerate :finish (cast", "(cast (= row truth) :float32)", "E-TYPE-002", "did you mean `:f32`?")]
    for place, new, code, hint in cases:
        snippet = new if code == "E-FORM-002" else ":float32"
        [d] = check(FIXTURE.set(place, new).mark(place, snippet, code)).diagnostics
        assert hint in d.message, d.message
    [d] = check(FIXTURE.edit("loader train :fields", ":i32\n", ":int32\n").mark("loader train :fields", ":int32", "E-TYPE-002")).diagnostics
    assert "did you mean `:i32`?" in d.message, d.message


def test_a_misspelt_op_keyword_is_read_as_meant_and_not_reported_again():
    src = FIXTURE.edit("defgenerate :step (sum", ":keepdims", ":kepdims")
    check(src.mark("defgenerate :step (sum", ":kepdims", "E-NAME-003"))


def test_learning_rate_must_be_positive_and_constant_take_indices_in_range():
    check(FIXTURE.set("run :optimizer :lr", "-1").mark("run :optimizer", "-1", "E-FORM-002"))
    src = FIXTURE.edit("defgenerate :finish (truth", "[0]", "[9]")
    check(src.mark("defgenerate :finish (truth", "[9]", "E-SHAPE-003"))


def test_a_flush_left_binding_inside_a_balanced_form_does_not_split_it():
    check(FIXTURE.edit("objective", "(let* ((logits", "(let* (\n(logits"))


def test_standard_library_layers_check_like_user_code():
    """prelude.sx's layers are in scope; a mistake inside one shows at the user's call, naming it."""
    text = FIXTURE.set("defmodel student (h",
                       "(h (mlp (layer-norm (+ here start next) (getf self :first) (getf self :second))\n"
                       "                           (getf self :hidden) (getf self :second) (getf self :hidden) (getf self :second)))")
    # :first is [16 64], not a gain of [64]: a broadcast error inside `layer-norm`, shown at its call
    # (and the `mlp` around it is not reported again)
    call = "(layer-norm (+ here start next) (getf self :first) (getf self :second))"
    [err] = check(text.mark("defmodel student (h", call, "E-SHAPE-001")).diagnostics
    assert err.message.startswith("in `layer-norm` (standard library): "), err
    ok = FIXTURE.set("defmodel student (h",
                     "(h (linear (layer-norm (+ here start next) (take (getf self :first) 0) (take (getf self :second) 0))\n"
                     "                           (getf self :hidden) (take (getf self :hidden) 0)))")
    check(ok)


def test_an_unterminated_string_is_one_diagnostic():
    check(marked(RunFile.small().add('(def title "tiny', after="def seq"), '"tiny', "E-SYNTAX-003"))


def test_a_misspelt_model_binding_still_checks_the_rest():
    text = FIXTURE.set("model", "(model studnt)").edit("objective", "(metric :loss loss)", '(metric :loss (+ "x" loss))')
    check(text.mark("model", "studnt", "E-NAME-001").mark("objective", '"x"', "E-TYPE-001"))


def test_standard_library_mistakes_say_what_the_layer_takes_and_got():
    call = "(linear (+ here start next) (getf self :out) (getf self :hidden))"
    [d] = check(FIXTURE.set("defmodel student (h", f"(h {call})").mark("defmodel student (h", call, "E-SHAPE-001")).diagnostics
    assert d.message.startswith("in `linear` (standard library): `+`: shapes [64 8 16] and [64 64] do not broadcast")
    assert "`(linear x w b)` takes" in d.help and "w [64 16] f32" in d.help
    call = "(linear (+ here start next) (getf self :hidden))"
    [d] = check(FIXTURE.set("defmodel student (h", f"(h {call})").mark("defmodel student (h", call, "E-FORM-003")).diagnostics
    assert d.message == "`linear` takes 3 arguments `(linear x w b)`, got 2"
