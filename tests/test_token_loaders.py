"""Token streams (`tokens` over a nanoGPT .bin or a .npy), text tokenized once (`text-tokens`), the tokenizer
trainer, read-ahead and resume: on files each test makes, with windows, widening and positions asserted exactly."""
import re
from pathlib import Path

import numpy as np
import pytest

from helpers import check, run
from sexpgpu_lang.ir import LoaderIR
from sexpgpu_lang.source import Span
from sexpgpu_runtime.data import loaders
from sexpgpu_runtime.data.loaders import Loader
from sexpgpu_runtime.errors import LoaderError
from sexpgpu_runtime.data.token_files import permuted, widens


def spec(source, fields, batch=4, base="."):
    return LoaderIR("data", source, batch, fields, Span(0, 0), str(base))


def pair(seq, dtype="i32"):
    return (("x", (seq,), dtype), ("y", (seq,), dtype))


@pytest.fixture
def stream(tmp_path) -> np.ndarray:
    """train.bin: 10,000 uint16 ids 55000, 55001, ... (above int16's range, so a wrong widening shows)."""
    ids = (55000 + np.arange(10_000)).astype(np.uint16)
    ids.tofile(tmp_path / "train.bin")
    return ids


def test_bin_windows_and_shifted_targets_are_exact_slices_widened_to_the_declared_dtype(tmp_path, stream):
    ld = Loader(spec(("tokens", {"path": "train.bin", "dtype": "uint16", "seq": 16, "stride": 10}), pair(16),
                     base=tmp_path), 7)
    assert ld.records == (10_000 - 17) // 10 + 1                     # windows of seq + 1 (the target) every 10
    idx = ld.indices(0, 4)
    b = ld.batch(0)
    assert b["x"].dtype == np.int32 and b["x"].shape == (4, 16)
    for row, i in enumerate(idx):
        assert np.array_equal(b["x"][row], stream[i * 10:i * 10 + 16].astype(np.int32))
        assert np.array_equal(b["y"][row], stream[i * 10 + 1:i * 10 + 17].astype(np.int32))
    assert b["x"].min() >= 55000                                         # uint16 widened by value, not wrapped


def test_one_field_takes_windows_of_seq_and_each_epoch_visits_every_window_once(tmp_path, stream):
    s = spec(("tokens", {"path": "train.bin", "dtype": "uint16", "seq": 8}), (("x", (8,), "i64"),), base=tmp_path)
    a, b, c = Loader(s, 1), Loader(s, 1), Loader(s, 2)
    assert a.records == 1250                                             # stride defaults to seq: 10,000 / 8
    epoch0, epoch1 = a.indices(0, 1250), a.indices(1250, 1250)
    assert sorted(epoch0) == list(range(1250)) and sorted(epoch1) == list(range(1250))
    assert list(epoch0) != list(epoch1)
    assert np.array_equal(a.batch(1248)["x"], b.batch(1248)["x"])      # across the epoch boundary: the position is the state
    assert not np.array_equal(c.indices(0, 1250), epoch0)                # another seed, another order
    first = a.batch(0)["x"][0]
    assert np.array_equal(first, stream[epoch0[0] * 8:epoch0[0] * 8 + 8])


def test_the_order_is_a_permutation_computed_per_index():
    for n in (1, 2, 3, 17, 1000, 4097):
        got = permuted(np.arange(n), n, 5, "train", 0)
        assert sorted(got) == list(range(n))
        assert np.array_equal(permuted(np.arange(n)[::-1], n, 5, "train", 0), got[::-1])   # a function of each index
    assert not np.array_equal(permuted(np.arange(100), 100, 5, "train", 0), permuted(np.arange(100), 100, 5, "eval", 0))


def test_the_permutation_on_python_ints_and_on_numpy_is_one_function(monkeypatch):
    from sexpgpu_runtime.data import token_files
    for n in (3, 1000, 3001, 1 << 20, (1 << 20) + 7):
        idx = np.arange(min(n, 3000))
        monkeypatch.setattr(token_files, "_PYTHON_UP_TO", 10**9)
        python = permuted(idx, n, 9, "train", 4)
        monkeypatch.setattr(token_files, "_PYTHON_UP_TO", 0)
        assert np.array_equal(permuted(idx, n, 9, "train", 4), python)


def test_npy_stream_reads_its_dtype_from_the_header_and_uint32_needs_vocab_for_i32(tmp_path):
    ids = np.arange(3000, dtype=np.uint32) * 7
    np.save(tmp_path / "train.npy", ids)
    src = {"path": "train.npy", "seq": 8}
    with pytest.raises(LoaderError, match=r"holds uint32 ids, which do not all fit field `x`'s i32; declare it `:i64`, or give `:vocab V`"):
        Loader(spec(("tokens", src), (("x", (8,), "i32"),), base=tmp_path), 0)
    ld = Loader(spec(("tokens", {**src, "vocab": 21000}), (("x", (8,), "i32"),), base=tmp_path), 0)
    i = ld.indices(0, 1)[0]
    assert np.array_equal(ld.batch(0)["x"][0], (ids[i * 8:i * 8 + 8]).astype(np.int32))
    with pytest.raises(LoaderError, match=r"token 7000 at position 1000 is outside `:vocab 7000` \(ids 0 to 6999\)"):
        Loader(spec(("tokens", {**src, "vocab": 7000}), (("x", (8,), "i32"),), base=tmp_path), 0)
    with pytest.raises(LoaderError, match=r"holds uint32 ids \(its header says so\), but `:dtype` says uint16"):
        Loader(spec(("tokens", {**src, "dtype": "uint16"}), (("x", (8,), "i64"),), base=tmp_path), 0)
    np.save(tmp_path / "grid.npy", np.zeros((10, 8), np.uint16))
    with pytest.raises(LoaderError, match=r"shape \[10 8\]; a token stream is one-dimensional"):
        Loader(spec(("tokens", {"path": "grid.npy", "seq": 8}), (("x", (8,), "i32"),), base=tmp_path), 0)


def test_the_widening_rule():
    assert widens("uint8", "i32") and widens("uint16", "i32") and widens("uint16", "i64") and widens("int32", "i32")
    assert widens("uint32", "i64") and not widens("uint32", "i32") and widens("uint32", "i32", vocab=128_256)
    assert not widens("uint32", "i32", vocab=2**32) and not widens("uint16", "f32") and not widens("float32", "i32")


def test_bad_token_files_are_one_line_naming_the_file_and_fix(tmp_path, stream):
    def err(src, fields=(("x", (8,), "i32"),)):
        with pytest.raises(LoaderError) as e:
            Loader(spec(("tokens", src), fields, base=tmp_path), 0)
        assert "\n" not in str(e.value)
        return str(e.value)
    (tmp_path / "odd.bin").write_bytes(b"\x01\x02\x03")
    assert "odd.bin is 3 bytes, not a whole number of uint16 ids" in err({"path": "odd.bin", "dtype": "uint16", "seq": 8})
    (tmp_path / "empty.bin").write_bytes(b"")
    assert "empty.bin holds no tokens" in err({"path": "empty.bin", "dtype": "uint16", "seq": 8})
    assert "no file" in err({"path": "gone.bin", "dtype": "uint16", "seq": 8})
    assert "raw token file with no header; give its `:dtype`" in err({"path": "train.bin", "seq": 8})
    (tmp_path / "fake.npy").write_bytes(b"hello")
    assert "fake.npy is not a .npy file" in err({"path": "fake.npy", "seq": 8})
    assert "fewer than one window of 20001" in err({"path": "train.bin", "dtype": "uint16", "seq": 20000},
                                                   pair(20000))
    np.save(tmp_path / "floats.npy", np.zeros(100, np.float32))
    assert "holds float32 values" in err({"path": "floats.npy", "seq": 8})


def test_a_file_cut_under_a_run_is_one_clear_error(tmp_path, stream):
    ld = Loader(spec(("tokens", {"path": "train.bin", "dtype": "uint16", "seq": 64}), (("x", (64,), "i32"),),
                     batch=8, base=tmp_path), 0)
    (tmp_path / "train.bin").write_bytes(b"")
    from sexpgpu_runtime.errors import TokenFileError
    with pytest.raises(TokenFileError, match="train.bin is shorter than when the run started"):
        ld.batch(0)


# -- a real tokenizer ---------------------------------------------------------------------------

CORPUS = ["def add(a, b):\n    return a + b\n" * 20, "class Point:\n    def __init__(self, x):\n        self.x = x\n" * 20]


@pytest.fixture
def tokenizer(tmp_path) -> Path:
    """A byte-level BPE trained in the test on a tiny corpus (corpus/*.txt), with `<|endoftext|>`."""
    from sexpgpu_cli.tokenizer import train_bpe
    (tmp_path / "corpus").mkdir()
    for i, text in enumerate(CORPUS):
        (tmp_path / "corpus" / f"{i}.txt").write_text(text)
    size = train_bpe(sorted(str(p) for p in (tmp_path / "corpus").glob("*.txt")), 300, str(tmp_path / "tok.json"),
                     special_tokens=("<|endoftext|>",))
    assert 257 <= size <= 300
    return tmp_path / "tok.json"


def test_text_tokens_tokenize_once_into_a_cache_keyed_by_content(tmp_path, tokenizer, monkeypatch):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tokenizer))
    eot = tok.token_to_id("<|endoftext|>")
    src = {"glob": "corpus/*.txt", "tokenizer": "tok.json", "seq": 8, "separator": "<|endoftext|>"}
    ld = Loader(spec(("text-tokens", src), pair(8), base=tmp_path), 0)
    expected = np.concatenate([tok.encode(t, add_special_tokens=False).ids + [eot] for t in CORPUS])
    assert ld.records == (len(expected) - 9) // 8 + 1
    i = ld.indices(0, 1)[0]
    assert np.array_equal(ld.batch(0)["x"][0], expected[i * 8:i * 8 + 8])
    assert np.array_equal(ld.batch(0)["y"][0], expected[i * 8 + 1:i * 8 + 9])
    cached = list((tmp_path / ".sexpgpu-cache").glob("*.bin"))
    assert len(cached) == 1 and cached[0].name.endswith(".uint16.bin")
    assert np.array_equal(np.fromfile(cached[0], np.uint16), expected)
    assert (tmp_path / ".sexpgpu-cache" / (cached[0].name + ".size")).read_text() == str(expected.size * 2)
    from sexpgpu_runtime.data import tokenize
    monkeypatch.setattr(tokenize, "_write_tokens", lambda *a: pytest.fail("tokenized again"))
    Loader(spec(("text-tokens", src), pair(8), base=tmp_path), 0)     # the same text and tokenizer: the cache
    monkeypatch.undo()
    (tmp_path / "corpus" / "0.txt").write_text(CORPUS[0] + "x = 1\n")
    Loader(spec(("text-tokens", src), pair(8), base=tmp_path), 0)
    assert len(list((tmp_path / ".sexpgpu-cache").glob("*.bin"))) == 2       # new content, new key


def test_a_cut_short_token_cache_is_tokenized_again_with_a_warning(tmp_path, tokenizer, capsys):
    src = {"glob": "corpus/*.txt", "tokenizer": "tok.json", "seq": 8}
    first = Loader(spec(("text-tokens", src), pair(8), base=tmp_path), 0)
    (cached,) = (tmp_path / ".sexpgpu-cache").glob("*.bin")
    whole = cached.read_bytes()
    cached.write_bytes(whole[:40])                                      # 20 uint16 ids of many more
    again = Loader(spec(("text-tokens", src), pair(8), base=tmp_path), 0)
    assert capsys.readouterr().err == (f"sexpgpu: warning: the tokenized text {cached} is 40 bytes, not the "
                                       f"{len(whole)} written (cut short or changed); tokenizing again\n")
    assert cached.read_bytes() == whole and again.records == first.records
    (tmp_path / ".sexpgpu-cache" / (cached.name + ".size")).unlink()   # a cache from before lengths were kept
    Loader(spec(("text-tokens", src), pair(8), base=tmp_path), 0)
    assert "has no readable record of its length" in capsys.readouterr().err
    assert cached.read_bytes() == whole


def test_text_tokens_errors(tmp_path, tokenizer, stream):
    def err(src):
        with pytest.raises(LoaderError) as e:
            Loader(spec(("text-tokens", {"seq": 8, **src}), (("x", (8,), "i32"),), base=tmp_path), 0)
        return str(e.value)
    (tmp_path / "bad.json").write_text("{\"model\": 3")
    assert "bad.json is not a Hugging Face tokenizer.json" in err({"glob": "corpus/*.txt", "tokenizer": "bad.json"})
    assert "no tokenizer file" in err({"glob": "corpus/*.txt", "tokenizer": "none.json"})
    (tmp_path / "model" / "empty").mkdir(parents=True)
    (tmp_path / "model" / "tokenizer.json").write_bytes((tmp_path / "tok.json").read_bytes())
    assert f"model is a directory, not a tokenizer file; give the tokenizer.json inside it " \
           f"({tmp_path / 'model' / 'tokenizer.json'})" in err({"glob": "corpus/*.txt", "tokenizer": "model"})
    assert "empty is a directory, not a tokenizer file; give a tokenizer.json file" in err(
        {"glob": "corpus/*.txt", "tokenizer": "model/empty"})
    assert "train.bin is not UTF-8 text" in err({"glob": "train.bin", "tokenizer": "tok.json"})
    assert "has no token '<eos>' for `:separator`" in err({"glob": "corpus/*.txt", "tokenizer": "tok.json", "separator": "<eos>"})
    # the tokenizer and its vocabulary against `:vocab`, not the cache file the user never made
    from tokenizers import Tokenizer
    size = Tokenizer.from_file(str(tokenizer)).get_vocab_size()
    line = err({"glob": "corpus/*.txt", "tokenizer": "tok.json", "vocab": 258})
    assert f"tokenizer {tokenizer} has a vocabulary of {size} ids, more than `:vocab 258`, and the text gives token " \
        in line and f"raise `:vocab` to {size}, the tokenizer's" in line and ".sexpgpu-cache" not in line
    assert not list((tmp_path / ".sexpgpu-cache").glob("*.tmp"))      # a failed tokenization leaves no half file


def test_tokenizer_train_command(tmp_path):
    import subprocess
    import sys
    (tmp_path / "a.txt").write_text(CORPUS[0])
    exe = str(Path(sys.executable).with_name("sexpgpu"))
    out = subprocess.run([exe, "tokenizer", "train", str(tmp_path / "*.txt"), "-o", str(tmp_path / "t.json"),
                          "--vocab-size", "280"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "wrote" in out.stderr, out.stderr
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tmp_path / "t.json"))
    assert tok.decode(tok.encode(CORPUS[0]).ids) == CORPUS[0]           # byte-level: any text round-trips
    (tmp_path / "b.txt").write_bytes(b"\xff\xfe\x00")
    bad = subprocess.run([exe, "tokenizer", "train", str(tmp_path / "b.txt"), "-o", str(tmp_path / "u.json")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "b.txt is not UTF-8 text (byte 0 is 0xff)" in bad.stderr


# -- the checker --------------------------------------------------------------------------------

def test_the_checker_reads_token_sources():
    check("""(loader train
  :source (tokens "train.bin" :dtype :uint61 :seq 8)
;;                                   ^^^^^^^ E-FORM-002
  :batch 4
  :fields (:x [8] :i32))
(loader raw
  :source (tokens "train.bin" :seq 8)
;;        ^^^^^^^^^^^^^^^^^^^^^^^^^^^ E-FORM-005
  :batch 4
  :fields (:x [8] :i32))
(loader three
  :source (tokens "t.npy" :seq 8)
;;        ^^^^^^^^^^^^^^^^^^^^^^^ E-FORM-002
  :batch 4
  :fields (:x [8] :i32 :y [8] :i32 :z [8] :i32))
(loader floats
  :source (tokens "t.npy")
;;        ^^^^^^^^^^^^^^^^ E-TYPE-002
  :batch 4
  :fields (:x [8] :f32))
(loader text
  :source (text-tokens "*.txt" :seq 8)
;;        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^ E-FORM-005
  :batch 4
  :fields (:x [8] :i32))
(loader wide
  :source (tokens "t.npy" :seq 8)
;;        ^^^^^^^^^^^^^^^^^^^^^^^ E-FORM-002
  :batch 4
  :fields (:x [9] :i32))
(loader ok
  :source (tokens "t.bin" :dtype :uint16 :seq 8 :vocab 50304)
  :batch 4
  :fields (:x [8] :i32 :y [8] :i32))
(loader prompts
  :source (jsonl "p.jsonl" :tokenizer "tok.json" :pad 0)
  :batch 4
  :fields (:prompt [8] :i32 :prompt-length [] :i32))
(loader past
  :source (jsonl "p.jsonl" :tokenizer "tok.json" :vocab 96 :pad 100)
;;                                                              ^^^ E-FORM-002
  :batch 4
  :fields (:prompt [8] :i32))
(loader last
  :source (jsonl "p.jsonl" :tokenizer "tok.json" :vocab 96 :pad 95)
  :batch 4
  :fields (:prompt [8] :i32))
(defmodel m :params (:w (zeros [8])) :apply (lambda (self x) (* x (getf self :w))))
(model m)
(objective (lambda (batch ctx) (mean (model (cast (field batch :x) :f32)))))
(run :loader ok :steps 1)
""")


# -- read-ahead and resume ----------------------------------------------------------------------

RUN = """(def vocab 64)
(loader train
  :source (tokens "DATA" :dtype :uint16 :seq 8 :vocab vocab)
  :batch 8
  :fields (:tokens [8] :i32 :next [8] :i32))
(defmodel lm
  :params (:embed (normal [vocab 16] :std 0.1) :out (normal [16 vocab] :std 0.1))
  :apply (lambda (self x) (matmul (take (getf self :embed) x :axis 0) (getf self :out))))
(model lm)
(objective (lambda (batch ctx) (mean (cross-entropy (model (field batch :tokens)) (field batch :next)))))
(run :loader train :steps 4 :seed 3 :optimizer (adam :lr 1e-2) :log (:every 1) :checkpoint (:every 2))
"""


@pytest.mark.slow
def test_a_resumed_run_reads_the_exact_records_and_ends_with_the_same_bits(tmp_path, monkeypatch):
    (np.arange(4000) % 64).astype(np.uint16).tofile(tmp_path / "train.bin")
    text = RUN.replace("DATA", str(tmp_path / "train.bin"))
    reads = []
    batch = loaders.Loader.batch
    monkeypatch.setattr(loaders.Loader, "batch", lambda self, p, *r: reads.append(int(p)) or batch(self, p, *r))
    full = run(text, tmp_path / "full", 4)
    assert reads == [0, 8, 16, 24]                                       # read ahead, in order, never past the run
    assert full.data.batches == 4 and full.data.read_s > 0
    reads.clear()
    run(text, tmp_path / "half", 2)
    resumed = run(text, tmp_path / "half", 4, resume=True)
    assert reads == [0, 8, 16, 24] and resumed.start == 2      # the resume continues at record 16
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in full.history][2:]
    for k in full.trainable:
        assert np.array_equal(np.asarray(full.trainable[k]), np.asarray(resumed.trainable[k]))


def test_a_read_that_fails_on_the_thread_is_raised_in_the_loop_at_its_batch():
    from sexpgpu_runtime.data.prefetch import Prefetch

    def read(p):
        if p == 20:
            raise LoaderError("boom at 20")
        return p
    feed = Prefetch(read, 10, 40)
    assert feed.take(0) == 0 and feed.take(10) == 10
    with pytest.raises(LoaderError, match="boom at 20"):
        feed.take(20)
    assert feed.take(30) == 30 and feed.take(0) == 0                     # any other position starts over
    assert feed.take(40) == 40                                           # past the end: read at once
    feed.close()
    assert feed.stats().batches == 5


def test_tokenizer_train_names_the_first_byte_that_is_not_text(tmp_path):
    from sexpgpu_cli.tokenizer import TokenizeError, check_text
    for data, first in ((b"\xff\xfe\x00", "byte 0 is 0xff"), (b"ab\x00\xff", "byte 2 is 0x00"),
                        (b"h\xc3\xa9\xe9", "byte 3 is 0xe9")):
        (tmp_path / "b.txt").write_bytes(data)
        with pytest.raises(TokenizeError, match=re.escape(f"b.txt is not UTF-8 text ({first})")):
            check_text(str(tmp_path / "b.txt"))
    (tmp_path / "ok.txt").write_text("héllo\n")
    check_text(str(tmp_path / "ok.txt"))


def test_lint_read_files_warns_of_a_tokenizer_larger_than_vocab(tmp_path, tokenizer):
    from tokenizers import Tokenizer
    from sexpgpu_lang import analyze
    size = Tokenizer.from_file(str(tokenizer)).get_vocab_size()   # with its added <|endoftext|>
    run = tmp_path / "r.sx"

    def warnings(vocab, read_files=True, source="text-tokens \"corpus/*.txt\" :seq 8"):
        text = RUN.replace('tokens "DATA" :dtype :uint16 :seq 8 :vocab vocab',
                           f'{source} :tokenizer "tok.json" :vocab vocab').replace("(def vocab 64)", f"(def vocab {vocab})")
        res = analyze(text, str(run), read_files)
        return [d for d in res.diagnostics if d.code == "W-LOADER-001"], text
    found, text = warnings(size - 1)
    assert len(found) == 1 and found[0].message == (
        f"tokenizer `tok.json` has a vocabulary of {size} ids, more than `:vocab {size - 1}`: its ids {size - 1} to "
        f"{size - 1} would be outside the model's vocabulary")
    assert text[found[0].span.start:found[0].span.end] == '"tok.json"'
    assert warnings(size)[0] == [] and warnings(size - 1, read_files=False)[0] == []
    assert len(warnings(200, source='jsonl "p.jsonl"')[0]) == 1      # a prompt source's tokenizer too
    (tmp_path / "tok.json").write_text("{}")                          # not a tokenizer.json: the runtime says so
    assert warnings(1)[0] == []
