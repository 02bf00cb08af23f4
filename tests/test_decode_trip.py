"""One KV-cached decoding trip (prelude.sx `row-token`, `decode-trip`; docs/stdlib.md "One decoding
trip") against NumPy, their arguments checked at the call (check/stdlib_args.py); `text-bytes`' second
field, the next-byte targets (data/loaders.py, check/loader_sources.py); a loader `:like` another
(check/forms.py; docs/language.md "loader")."""
from __future__ import annotations

import glob
import sysconfig

import numpy as np
import pytest

from helpers import SMALL, check, evaluate_expression, marked, program_of, variant
from sexpgpu_lang.ir import LoaderIR
from sexpgpu_lang.source import Span

B, S, V = 3, 6, 7


def evaluated(text: str, env: dict, seed: int = 0):
    """`text`'s value (NumPy; a dict of them for a plist), checked without any diagnostic."""
    return evaluate_expression(text, env, seed=seed, clean=True).value


def _env():
    rng = np.random.default_rng(0)
    return {"r": rng.integers(0, V, (B, S)).astype(np.int32),
            "l": rng.standard_normal((B, 1, V)).astype(np.float32),
            "k": rng.standard_normal((B, S, 2, 4)).astype(np.float32),
            "a": np.array([1, 4, 5], np.int32)}


def test_row_token_is_each_row_s_token_at_its_column():
    env = _env()
    r = env["r"]
    assert evaluated("(row-token r 2)", env).tolist() == r[:, 2:3].tolist()
    assert evaluated("(row-token r a)", env).tolist() == r[np.arange(B), env["a"]][:, None].tolist()


def test_decode_trip_at_temperature_0_writes_the_argmax_at_each_row_s_column_and_keeps_the_caches():
    env = _env()
    r, l, k = env["r"], env["l"], env["k"]
    out = evaluated("(decode-trip r (list :logits l :k k :v (* k 2.0)) a 3 0)", env)
    want = r.copy()
    want[np.arange(B), env["a"]] = l[:, 0].argmax(-1)
    assert out["row"].tolist() == want.tolist()
    np.testing.assert_array_equal(out["k"], k)
    np.testing.assert_array_equal(out["v"], k * 2)
    out = evaluated("(decode-trip r (list :logits l :k k :v k) 2 3 0)", env)   # one column for every row
    want = r.copy()
    want[:, 2] = l[:, 0].argmax(-1)
    assert out["row"].tolist() == want.tolist()
    # a column past the row is not written (as `cache-write` drops a position past the cache)
    assert evaluated("(decode-trip r (list :logits l :k k :v k) 6 3 0)", env)["row"].tolist() == r.tolist()


def test_decode_trip_samples_from_the_logits_salted():
    env = _env()
    env["l"] = np.full((B, 1, V), -1e9, np.float32)
    env["l"][:, 0, [2, 5]] = 0.0                       # two tokens alike, every other impossible
    seen = set()
    for salt in range(12):
        out = evaluated(f"(decode-trip r (list :logits l :k k :v k) a {salt} 1)", env)["row"]
        picked = out[np.arange(B), env["a"]]
        assert set(picked.tolist()) <= {2, 5}
        untouched = np.ones((B, S), bool)
        untouched[np.arange(B), env["a"]] = False
        assert (out[untouched] == env["r"][untouched]).all()
        seen.update(picked.tolist())
        again = evaluated(f"(decode-trip r (list :logits l :k k :v k) a {salt} 1)", env)["row"]
        assert again.tolist() == out.tolist()          # a pure function of the seed and the salt
    assert seen == {2, 5}


def test_decode_trip_s_arguments_are_checked_at_the_call():
    from sexpgpu_lang.check import check_expression
    from sexpgpu_lang.types import TensorType
    types = {"r": TensorType((B, S), "i32"), "f": TensorType((B, S), "f32"), "l": TensorType((B, 1, V), "f32"),
             "a": TensorType((B + 1,), "i32"), "p": TensorType((), "f32")}
    for text, code, what in [("(row-token f 2)", "E-TYPE-002", "[B S] token ids"),
                             ("(row-token r a)", "E-SHAPE-005", "one per row"),
                             ("(row-token r p)", "E-TYPE-002", "an integer column"),
                             ("(decode-trip f (list :logits l :k l :v l) 2 0 1)", "E-TYPE-002", "[B S] token ids")]:
        _, diags = check_expression(text, types)
        assert [d.code for d in diags] == [code], (text, [d.message for d in diags])
        assert what in diags[0].message


def _spec(fields, batch=4):
    return LoaderIR("data", ("text-bytes", {"glob": "$STDLIB/json/*.py", "seq": 16, "stride": 5}), batch, fields,
                    Span(0, 0), ".")


def test_text_bytes_second_field_is_the_next_byte_target():
    from sexpgpu_runtime.data.loaders import Loader
    one = Loader(_spec((("x", (16,), "i32"),)), 0)
    two = Loader(_spec((("x", (16,), "i32"), ("y", (16,), "i32"))), 0)
    b = two.batch(0)
    assert b["x"].shape == b["y"].shape == (4, 16)
    src = b"".join(open(p, "rb").read() for p in sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/json/*.py")))
    data = np.frombuffer(src, np.uint8)
    for x, y in zip(b["x"], b["y"]):
        start = [i for i in range(0, len(data) - 16, 5) if (data[i:i + 16] == x).all()][0]
        assert (data[start + 1:start + 17] == y).all()   # x one byte on
    # a window reads one byte more: at most one record fewer than the windows alone
    assert one.records - 1 <= two.records <= one.records


TWO = variant("""(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 32
  :fields (:row [seq] :i32 :stride [1] :i32))""", """(loader text
  :source (text-bytes "$STDLIB/json/*.py" :seq seq)
  :batch 32
  :fields (:x [seq] :i32 :y [seq] :i32 :z [seq] :i32))
(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 32
  :fields (:row [seq] :i32 :stride [1] :i32))""", SMALL)


def test_text_bytes_declares_one_field_or_two():
    check(marked(TWO, '(text-bytes "$STDLIB/json/*.py" :seq seq)', "E-FORM-002"))
    check(variant(" :z [seq] :i32", "", TWO))
    check(marked(variant(":y [seq] :i32 :z [seq] :i32", ":y [4] :i32", TWO),
                 '(text-bytes "$STDLIB/json/*.py" :seq seq)', "E-FORM-002"))


LIKE = variant("(model lm)", """(loader held-out :like train :source (stride-rows :vocab vocab :seq seq :records 64))
(pass held-out-eval :loader held-out :every 5)
(model lm)""", SMALL)


def test_a_loader_like_another_takes_its_batch_and_fields():
    prog = program_of(LIKE)
    train, held = prog.loaders["train"], prog.loaders["held-out"]
    assert (held.batch, held.fields) == (train.batch, train.fields) and held.source != train.source
    assert [p.runs_generator for p in prog.passes] == [False]   # (no generator here)
    smaller = program_of(variant(":records 64))", ":records 64) :batch 8)", LIKE)).loaders["held-out"]
    assert (smaller.batch, smaller.fields) == (8, train.fields)


@pytest.mark.parametrize("like,code", [("trian", "E-NAME-001"), ("vocab", "E-TYPE-001")])
def test_like_names_a_loader(like, code):
    check(marked(variant(":like train", f":like {like}", LIKE), like, code, within="(loader held-out"))


def test_a_loader_without_like_needs_its_batch_and_fields():
    text = variant(":like train ", "", LIKE)
    result = check(marked(text, "held-out", "E-FORM-005", within="(loader held-out"), )
    assert "`:like` another loader" in result.diagnostics[0].message


def test_a_field_read_from_a_loader_like_another_goes_to_that_loader_s_fields():
    from helpers import cursor
    from sexpgpu_lang import ide
    text = variant("(pass held-out-eval :loader held-out :every 5)",
                   "(pass held-out-eval :loader held-out :every 5\n"
                   "  :prepare (lambda (batch ctx) (list :x (field batch :r$0ow) :y (field batch :row))))", LIKE)
    ix, offset = cursor(":r$0ow)", ":r$0ow)", text)
    [found] = ide.definition(ix, offset)
    assert ix.text[found.span.start:found.span.end] == ":row"
    assert ix.text.rfind("(loader", 0, found.span.start) == ix.text.index("(loader train")
