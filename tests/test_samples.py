"""`run`'s `:samples` at run time (sexpgpu_runtime/samples.py) and `sexpgpu samples` (sexpgpu_cli/samples.py):
greedy completions of a fixed model decoded exactly, a resume that keeps samples.jsonl exact, the
decoders, the terminal's lines, TensorBoard's text, and one clear error for each bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, program_of, run, variant
from sexpgpu_runtime.data.loaders import Loader
from sexpgpu_runtime.weights.params import init_params
from sexpgpu_runtime import RunError, SampleError
from sexpgpu_runtime.run.samples import cut, markdown_table, row_line

SAMPLES = "(:every 3 :rows 3 :text [:sample] :values [:correct :stride] :prompt 2)"


def text_with(samples: str = SAMPLES, extra: str = "", stack: str = "2") -> str:
    text = variant("     :log (:every 50))", f"     :log (:every 50)\n     :samples {samples}{extra})")
    text = variant(":stack 2", f":stack {stack}", text)
    return text + "\n(pass held :loader train :every 4 :batches 1)\n"


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def greedy(program, batch: dict) -> np.ndarray:
    """tiny-generate's generator by hand, in numpy, at the initial parameters: each trip writes the argmax
    of the logits at the column before it."""
    trainable, frozen = init_params(program.params, program.run.seed)
    p = {k: np.asarray(v) for k, v in {**trainable, **frozen}.items()}
    row = np.array(batch["row"])
    for at in range(2, 8):
        h = np.maximum((p["embed"][row] + p["first"][row[:, :1]] + p["second"][row[:, 1:2]]) @ p["hidden"], 0)
        row[:, at] = np.argmax(h @ p["out"], axis=-1)[:, at - 1]
    return row


@pytest.mark.slow
def test_the_first_steps_rows_are_the_greedy_completions_of_the_initial_model(tmp_path):
    # The generator's argmax at the parameters step 1 starts from: the rows are known exactly.
    text = text_with()
    program = program_of(text, str(tmp_path / "run.sx"))
    run(text, tmp_path, 7)
    got = rows(tmp_path)
    first = Loader(program.loaders["train"], program.run.seed).batch(0)
    want = greedy(program, first)
    step1 = [r for r in got if r["step"] == 1]
    assert [r["row"] for r in step1] == [0, 1, 2] and {r["pass"] for r in step1} == {"train"}
    for r in step1:
        i = r["row"]
        assert r["fields"]["sample"] == {"prompt": " ".join(map(str, want[i, :2])),
                                         "completion": " ".join(map(str, want[i, 2:]))}
        assert r["fields"]["stride"] == int(first["stride"][i, 0])
        truth = (want[i, 0] + np.arange(8) * first["stride"][i, 0]) % 16
        assert r["fields"]["correct"] == pytest.approx(float(np.mean(want[i] == truth)))
    # step 1, every 3 and the last; the pass at every 4 and the last, after its step's training rows
    assert [(r["step"], r["pass"]) for r in got[::3]] == [(1, "train"), (3, "train"), (4, "held"), (6, "train"),
                                                        (7, "train"), (7, "held")]


@pytest.mark.slow
def test_a_crash_and_a_resume_leave_samples_jsonl_as_the_uninterrupted_run_writes_it(tmp_path, capsys):
    # Unstacked, two groups a step: the crash comes in step 11's second group, after its rows were
    # gathered; they are never written, and the resume from step 8 writes 9-12 again, once.
    text = text_with("(:every 1 :rows 2 :text [:sample] :values [:correct] :prompt 2)",
                     "\n     :checkpoint (:every 4)", stack="1")
    full = tmp_path / "full"
    run(text, full, 12)
    calls = []

    def crash(step, trip):
        calls.append(step)
        if step == 10 and calls.count(10) == 7:   # the second group's first trip of step 11
            raise KeyboardInterrupt

    part = tmp_path / "part"
    with pytest.raises((KeyboardInterrupt, RunError)):
        run(text, part, 12, on_trip=crash)
    assert max(r["step"] for r in rows(part)) == 10
    capsys.readouterr()
    run(text, part, 12, quiet=False, progress=False, resume=True)
    err = capsys.readouterr().err.splitlines()
    assert (f"sexpgpu: dropped 4 rows of {part / 'samples.jsonl'} (steps 9-10), logged after checkpoint step 8 by "
            "the earlier run; they are sampled again") in err, err   # (two rows a step)
    assert rows(part) == rows(full)
    keys = [(r["step"], r["pass"], r["row"]) for r in rows(full)]
    assert len(keys) == len(set(keys)) and {s for s, _, _ in keys} == set(range(1, 13))


@pytest.mark.slow
def test_overwrite_removes_samples_jsonl_and_nothing_else(tmp_path):
    run(text_with(), tmp_path, 3)
    (tmp_path / "notes.txt").write_text("mine")
    run(variant(":stack 2", ":stack 2"), tmp_path, 2, overwrite=True)   # without `:samples`: no stale rows
    assert not (tmp_path / "samples.jsonl").exists() and (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_names_computed_in_prepare_and_objective_are_written_and_leave_the_training_bits_alone(tmp_path):
    # `:target` is what prepare returns (the generator's label: (row + stride) mod 16 of the greedy rows),
    # `:logits` and `:loss` what objective's let* binds; stacked, so the rows are the first copy's.
    text = text_with("(:every 3 :rows 2 :values [:target :logits :loss :stride])")
    program = program_of(text, str(tmp_path / "run.sx"))
    run(text, tmp_path / "with", 4)
    got = rows(tmp_path / "with")
    first = Loader(program.loaders["train"], program.run.seed).batch(0)
    want = greedy(program, first)
    step1 = [r for r in got if r["step"] == 1]
    assert [r["row"] for r in step1] == [0, 1]
    for r in step1:
        i = r["row"]
        assert r["fields"]["target"] == ((want[i] + first["stride"][i, 0]) % 16).tolist()
        assert r["fields"]["logits"]["shape"] == [8, 16] and len(r["fields"]["logits"]["first"]) == 64
        assert isinstance(r["fields"]["loss"], float) and r["fields"]["loss"] > 0
    assert step1[0]["fields"]["loss"] == step1[1]["fields"]["loss"]   # a scalar beside every row
    assert {r["pass"] for r in got} == {"train", "held"} and set(got[-1]["fields"]) == {"target", "logits", "loss",
                                                                                     "stride"}
    run(text_with("(:every 3 :rows 2 :values [:stride])"), tmp_path / "without", 4)
    metrics = [(tmp_path / d / "metrics.jsonl").read_text() for d in ("with", "without")]
    assert metrics[0] == metrics[1]   # the same losses, bit for bit


def test_a_run_without_samples_writes_no_file(tmp_path):
    run(variant("", ""), tmp_path, 2)
    assert not (tmp_path / "samples.jsonl").exists()


def test_a_missing_tokenizer_is_one_error_naming_it(tmp_path):
    text = text_with('(:text [:sample] :tokenizer "missing.json")')
    with pytest.raises(SampleError) as e:
        run(text, tmp_path, 2)
    assert "`:samples`: no tokenizer file" in str(e.value) and "missing.json" in str(e.value)


def test_the_decoders():
    from sexpgpu_runtime.run.samples import decoder
    assert decoder(("bytes",), "")(list(b"def f():\n")) == "def f():\n"
    assert decoder(("ids",), "")([3, 4, 15]) == "3 4 15"


def test_a_tokenizer_json_decodes_token_rows(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from tokenizers.decoders import WordPiece
    from sexpgpu_runtime.run.samples import decoder
    tok = Tokenizer(WordLevel({"the": 0, "cat": 1, "sat": 2, "[UNK]": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.decoder = WordPiece()
    tok.save(str(tmp_path / "tok.json"))
    decode = decoder(("tokenizer", "tok.json", str(tmp_path)), "")
    assert decode([0, 1, 2]) == "the cat sat"


def test_the_terminal_line_and_the_tensorboard_table():
    row = {"step": 10, "pass": "train", "row": 0,
           "fields": {"answer": {"prompt": "3 4", "completion": "5 6\n7"}, "reward": 0.5, "v": [1, 2, 3]}}
    assert row_line(row) == "step 10 train #0  answer 3 4▸5 6⏎7  reward 0.5  v [1 2 3]"
    assert cut("abcdef", 4) == "abc…" and cut("abc", 4) == "abc"
    assert markdown_table([row]).splitlines() == ["| row | answer | reward | v |", "|---|---|---|---|",
                                                  "| 0 | 3 4▸5 6⏎7 | 0.5 | [1 2 3] |"]


def test_a_terminal_line_cuts_the_text_and_never_the_values():
    row = {"step": 10, "pass": "train", "row": 0,
           "fields": {"answer": {"prompt": "p" * 60, "completion": "c" * 200}, "reward": 0.25, "v": [1, 2, 3]}}
    whole = row_line(row)
    assert whole.endswith("  reward 0.25  v [1 2 3]") and "c" * 200 in whole
    line = row_line(row, 80)
    assert len(line) <= 80 and line.startswith("step 10 train #0  answer pppp")
    assert line.endswith("…  reward 0.25  v [1 2 3]"), line
    values_only = {"step": 1, "pass": "train", "row": 0, "fields": {"reward": 0.5, "v": list(range(20))}}
    assert row_line(values_only, 10) == row_line(values_only)   # values are never cut


@pytest.mark.slow
def test_plain_output_shows_each_row_on_its_own_line_at_the_interval(tmp_path):
    sx = tmp_path / "t.sx"
    sx.write_text(text_with("(:every 2 :rows 2 :text [:sample] :prompt 2)"))
    out = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", str(sx), "--steps", "3", "--no-progress"],
                         capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "40"})
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("step ") and " #" in ln]
    assert [ln.split()[1] for ln in lines] == ["1", "1", "2", "2", "3", "3", "3", "3"]
    # without a terminal each row is whole, whatever COLUMNS says (a log keeps every value)
    assert lines[0].startswith("step 1 train #0  sample ") and any(len(ln) > 40 for ln in lines)
    assert all("…" not in ln for ln in lines), lines


# -- sexpgpu samples ------------------------------------------------------------------------------
def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "samples", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def write(path: Path, rows_: list[dict], tail: str = "") -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_) + tail)


ROWS = [{"step": s, "pass": p, "row": i, "fields": {"answer": {"prompt": "ab", "completion": f"c{s}{i}"}, "r": 0.25}}
        for s, p in ((1, "train"), (2, "train"), (2, "held")) for i in range(2)]


def test_samples_prints_the_table_newest_first_and_filters(tmp_path):
    write(tmp_path, ROWS)
    out = cli(str(tmp_path))
    assert out.returncode == 0, out.stderr
    body = [ln for ln in out.stdout.splitlines() if "│" in ln]
    assert [ln.split("│")[1].strip() for ln in body] == ["2", "2", "2", "2", "1", "1"]
    assert "ab▸c21" in out.stdout and "0.25" in out.stdout
    out = cli(str(tmp_path), "--step", "2", "--pass", "held")
    body = [ln for ln in out.stdout.splitlines() if "│" in ln]
    assert len(body) == 2 and all("held" in ln for ln in body)


def test_a_torn_last_line_is_skipped(tmp_path):
    write(tmp_path, ROWS, tail='{"step": 3, "pa')
    out = cli(str(tmp_path))
    assert out.returncode == 0 and "6 rows" in out.stdout, out.stderr


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "no run dir {d}/nope"),
    (lambda d: (d / "nope").mkdir(), "{d}/nope has no samples.jsonl: the run file's `run` has no `:samples`"),
    (lambda d: write(d / "nope", [ROWS[0], {"step": "x"}, ROWS[1]]),
     "{d}/nope/samples.jsonl:2 is corrupt: not a samples row"),
    (lambda d: write(d / "nope", ROWS), "{d}/nope/samples.jsonl has no rows of step 9; it has steps 1, 2 and passes "
                                        "`held`, `train`"),
])
def test_each_bad_run_dir_is_one_line(tmp_path, setup, message):
    setup(tmp_path)
    out = cli(str(tmp_path / "nope"), *(["--step", "9"] if "step 9" in message else []))
    assert out.returncode == (2 if message.startswith("no run dir") else 1) and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("sexpgpu: error: " + message.format(d=tmp_path)), out.stderr


def tensorboard_texts(run_dir: Path) -> dict[str, dict[int, str]]:
    """The text summaries of every event file under `run_dir` (TFRecord framing: length, crc, data,
    crc), by tag and step."""
    import struct
    from tensorboardX.proto import event_pb2
    out: dict[str, dict[int, str]] = {}
    for f in sorted(run_dir.glob("events.out.tfevents.*")):
        data, i = f.read_bytes(), 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            ev = event_pb2.Event.FromString(data[i + 12:i + 12 + n])
            i += 12 + n + 4
            for v in ev.summary.value:
                if v.HasField("tensor") and v.tensor.string_val:
                    out.setdefault(v.tag, {})[ev.step] = v.tensor.string_val[0].decode()
    return out


@pytest.mark.slow
def test_tensorboard_shows_each_sampled_step_as_a_table_of_its_rows(tmp_path):
    text = variant("     :log (:every 50)\n", "     :log (:every 50 :tensorboard true)\n", text_with())
    run(text, tmp_path, 4)
    texts = tensorboard_texts(tmp_path)
    written = rows(tmp_path)
    # the tags docs/metrics.md names: tensorboardX's add_text adds `/text_summary` to the tag given
    assert set(texts) == {"samples/text_summary", "held/samples/text_summary"}
    assert sorted(texts["samples/text_summary"]) == sorted({r["step"] for r in written if r["pass"] == "train"}) == [1, 3, 4]
    assert sorted(texts["held/samples/text_summary"]) == [4]
    for step, table in texts["samples/text_summary"].items():
        assert table == markdown_table([r for r in written if r["step"] == step and r["pass"] == "train"])
        assert table.count("\n") >= 3   # a header, its rule and the 3 rows


def test_control_characters_a_model_wrote_are_shown_not_sent_to_the_terminal(tmp_path):
    from sexpgpu_cli.samples import visible as cli_visible
    from sexpgpu_lang.render import visible
    from sexpgpu_runtime.run.samples import field_text
    text = "a\x1b[31mb\x00c\r\nd\te\x7f"
    assert visible(text) == cli_visible(text) == "a␛[31mb␀c␍\nd\te␡"
    assert field_text({"prompt": "p\x1b", "completion": "\x07x"}) == "p␛▸␇x"
    write(tmp_path, [{"step": 1, "pass": "train", "row": 0, "fields": {"t": "x\x1b[2Jy"}}])
    r = cli(str(tmp_path))
    assert r.returncode == 0 and "\x1b[2J" not in r.stdout and "x␛[2Jy" in r.stdout, r.stdout


def test_tensorboard_is_an_extra_the_docs_name():
    """`tensorboard --logdir runs` needs TensorBoard, which the base install does not bring: the
    `tensorboard` extra does, and the README and docs/metrics.md say how to install it."""
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("tensorboard") for r in extras["tensorboard"])
    for page in (ROOT / "README.md", ROOT / "docs" / "metrics.md"):
        assert "pip install -e '.[tensorboard]'" in page.read_text(), page


def word_tokenizer(path: Path, words: int) -> None:
    """A WordLevel tokenizer.json of `words` ids at `path`."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    Tokenizer(WordLevel({f"w{i}": i for i in range(words)}, unk_token="w0")).save(str(path))


def samples_diagnostics(tmp_path: Path, tokenizer: str) -> list[tuple[str, str]]:
    from sexpgpu_lang import analyze
    text = text_with(f'(:text [:sample] :tokenizer "{tokenizer}")')
    res = analyze(text, str(tmp_path / "run.sx"), read_files=True)
    return [(d.code, d.message) for d in res.diagnostics]


def test_lint_read_files_checks_the_samples_tokenizer_as_run_reads_it(tmp_path):
    """`:samples :tokenizer` at `lint --read-files`: what `run` refuses (missing, a FIFO, /dev/zero,
    not JSON, a symlink loop) is E-LOADER-001 at it; a vocabulary other than the training loader's
    (`stride-rows :vocab 16`) is W-SAMPLE-001; the model's size is clean."""
    word_tokenizer(tmp_path / "same.json", 16)
    assert samples_diagnostics(tmp_path, "same.json") == []
    word_tokenizer(tmp_path / "other.json", 40)
    (code, message), = samples_diagnostics(tmp_path, "other.json")
    assert code == "W-SAMPLE-001" and "has 40 ids, but loader `train`'s rows hold 16" in message
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "bad.json").write_text("{not json")
    os.symlink(tmp_path / "loop.json", tmp_path / "loop.json")
    for name, words in [("missing.json", "is not there"), ("fifo.json", "not a regular file"),
                        ("/dev/zero", "not a regular file"), ("bad.json", "cannot be read"),
                        ("loop.json", "leads back to itself")]:
        (code, message), = samples_diagnostics(tmp_path, name)
        assert code == "E-LOADER-001" and message.startswith("`:samples`'s tokenizer") and words in message, message
