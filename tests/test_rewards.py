"""`defgenerate`'s `:reward`: a Python function of the decoded rows (sexpgpu_lang/check/reward.py,
sexpgpu_runtime/run/rewards.py, docs/language.md "Rewards in Python").

The checker reads the file with `ast` only (E-REWARD-001..004, E-GEN-003 for the name); `lint`,
`explain` and the language server never import it; `sexpgpu run` calls it once per microbatch with the
decoded prompts and completions and the named fields, and its `[B] f32` result joins the batch. Its
failures are one line naming the function, the row and the step; a resume gets the same rewards.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, check, program_of
from runfile import RunFile
from sexpgpu_lang import SourceText

EXAMPLE = ROOT / "examples" / "grpo-arith.sx"
DATA = ROOT / "examples" / "data"

#: The example made tiny (place: new text, tests/runfile.py): 4 prompts, each answered 4 times (16 rows a
#: microbatch), width 32, every step logged.
SMALL = {"def dim": "(def dim 32)", "def prompts": "(def prompts 4)", "def group": "(def group 4)",
         "run :log :every": "1"}

#: A reward that checks the sum and writes each call's arguments to calls.jsonl beside it (a test's
#: side effect: the rewards are still a pure function of the rows).
LOGGING = '''
import json, os

def score(prompts, completions, row=None):
    with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as fh:
        fh.write(json.dumps({"prompts": prompts, "completions": completions,
                             "row": None if row is None else row.tolist(), "dtype": str(getattr(row, "dtype", ""))}) + "\\n")
    out = []
    for p, c in zip(prompts, completions):
        a, b = p.rstrip("=").split("+")
        want = f"{int(a) + int(b):02d}"
        out.append(sum(x == y for x, y in zip(c, want)) / 2)
    return out
'''


def small_text() -> RunFile:
    """The example's text, tiny (`SMALL`), with the data paths absolute; tests change it by place."""
    text = RunFile(EXAMPLE.read_text(encoding="utf-8").replace('"data/', f'"{DATA}/'))
    for place, new in SMALL.items():
        text = text.set(place, new)
    return text


def reward_at(text: str) -> str:
    """`line:col` (1-based) of `defgenerate`'s `:reward` settings in `text`: where the reward's
    diagnostics and run errors point."""
    line, col = SourceText(str(text)).line_col(RunFile(text).node("defgenerate :reward").span.start)
    return f"{line + 1}:{col + 1}"


def src_dir(tmp_path: Path, reward: str = LOGGING, name: str = "arith_reward.py") -> Path:
    """A folder holding the reward's Python file (`reward`, as `name`); the run file goes beside it."""
    d = tmp_path / "src"
    d.mkdir(exist_ok=True)
    (d / name).write_text(reward, encoding="utf-8")
    return d


def calls(d: Path) -> list[dict]:
    p = d / "calls.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


# -- the checker ------------------------------------------------------------------------------------

def test_the_rewards_join_the_batch_typed_rows_f32_and_the_ir_says_how_to_call(tmp_path):
    d = src_dir(tmp_path)
    text = small_text().set("defgenerate :reward :fields", "[:row]")
    p = program_of(text, str(d / "run.sx"))
    gen = p.generate
    assert gen.out.get("reward").show() == "[16] f32"
    assert "reward" not in gen.finish_out.keys and "row" in gen.finish_out.keys
    r = gen.reward
    assert (r.path, r.function, r.name, r.rows, r.text, r.prompt) == (str(d / "arith_reward.py"), "score", "reward",
                                                                      16, "row", 4)
    assert r.fields == (("row", "row"),)
    assert r.decode[0] == "tokenizer" and r.where == f"{d / 'run.sx'}:{reward_at(text)}"


def test_a_reward_read_as_another_name_hovers_as_generated(tmp_path):
    from sexpgpu_lang import analyze, ide
    d = src_dir(tmp_path)
    text = (small_text().set("defgenerate :reward :name", ":score")
            .edit("objective (group-advantages", "(field b :reward)", "(field b :score)")
            .edit("objective (grpo-objective", "(field b :reward)", "(field b :score)")
            .set("run :samples :values", "[:score :adv]"))
    res = analyze(text, str(d / "run.sx"), read_files=True)
    assert [x.message for x in res.diagnostics] == []
    assert res.program.generate.out.get("score").show() == "[16] f32"
    idx = ide.index(res)
    read = text.index("(field b :score)") + len("(field b :")   # in `group-advantages`
    hover = ide.hover(idx, read)
    assert hover is not None and "[16] f32" in hover.markdown and "the Python function `score`" in hover.markdown
    at = text.index(":name :score") + len(":name :")
    assert [t.span.start for t in ide.definition(idx, read)] == [at - 1]
    with pytest.raises(ide.RenameError):   # (without `:name` the name is `defgenerate`'s `:reward` keyword)
        ide.rename(idx, read, "points")


def test_missing_file_function_and_a_near_miss(tmp_path):
    d = src_dir(tmp_path)
    path = str(d / "run.sx")
    text = small_text().set("defgenerate :reward :python", '"nope.py"')
    check(text.mark("defgenerate :reward", '"nope.py"', "E-REWARD-001"), path, read_files=True)
    text = small_text().set("defgenerate :reward :function", '"scor"')
    res = check(text.mark("defgenerate :reward", '"scor"', "E-REWARD-002"), path, read_files=True)
    d0 = res.diagnostics[0]
    assert "defines no top-level `scor`; did you mean `score`?" in d0.message and d0.data == {"replace": '"score"'}
    (d / "broken.py").write_text("def score(:\n")
    text = small_text().set("defgenerate :reward :python", '"broken.py"')
    res = check(text.mark("defgenerate :reward", '"broken.py"', "E-REWARD-001"), path, read_files=True)
    assert "not valid Python" in res.diagnostics[0].message and "(line 1)" in res.diagnostics[0].message
    (d / "latin.py").write_bytes(b"# \xe9\ndef score(**k): pass\n")
    text = small_text().set("defgenerate :reward :python", '"latin.py"')
    check(text.mark("defgenerate :reward", '"latin.py"', "E-REWARD-001"), path, read_files=True)
    text = small_text().set("defgenerate :reward :function", '"not a name"')
    check(text.mark("defgenerate :reward", '"not a name"', "E-REWARD-002"), path, read_files=True)


def test_plain_lint_opens_no_file_so_says_nothing_of_a_missing_one(tmp_path):
    d = src_dir(tmp_path)
    text = small_text().set("defgenerate :reward :python", '"nope.py"')
    check(text, str(d / "run.sx"))   # no diagnostic: only `run`, `lint --read-files` and the editor read files


@pytest.mark.parametrize("signature,why", [
    ("def score(prompts, answers): pass", "it needs `answers`, which the call does not pass"),
    ("def score(prompts): pass", "it has no parameter `completions` and no `**kwargs`"),
    ("def score(prompts, completions, /): pass", "positional-only"),
    ("def score(*, prompts, completions, target): pass", "it needs `target`"),
    ("async def score(prompts, completions): pass", "is `async def`"),
])
def test_a_signature_that_cannot_take_the_call(tmp_path, signature, why):
    d = src_dir(tmp_path, signature + "\n")
    res = check(small_text().mark("defgenerate :reward", '"score"', "E-REWARD-003"), str(d / "run.sx"), read_files=True)
    assert why in res.diagnostics[0].message, res.diagnostics[0].message


@pytest.mark.parametrize("source", [
    "def score(prompts, completions): pass",
    "def score(completions, prompts, extra=1): pass",
    "def score(**kwargs): pass",
    "def score(prompts, *args, completions, **rest): pass",
    "score = lambda **k: [0.0]",
    "from somewhere import score",
    "class score:\n    pass",
])
def test_signatures_that_take_the_call_or_cannot_be_told(tmp_path, source):
    d = src_dir(tmp_path, source + "\n")
    check(small_text(), str(d / "run.sx"), read_files=True)


@pytest.mark.parametrize("key,value,snippet", [
    (":text", ":rows", ":rows"),              # nothing of the batch
    (":prompt", "seq", "seq"),                # no completion left
    (":fields", "[:prompt]", ":prompt"),      # [4 4]: a row per prompt, not per answer
    (":fields", "[:nothing]", ":nothing"),
])
def test_settings_that_do_not_fit_the_batch(tmp_path, key, value, snippet):
    d = src_dir(tmp_path)
    place = f"defgenerate :reward {key}"
    check(small_text().set(place, value).mark(place, snippet, "E-REWARD-004"), str(d / "run.sx"), read_files=True)


def no_reward_read(text: RunFile) -> RunFile:
    """`text` with a marker under each read of `:reward` (E-CONTRACT-001, E-SAMPLE-001): the rewards go by
    another name."""
    for place in ("objective (group-advantages", "objective (grpo-objective"):
        text = text.mark(place, ":reward", "E-CONTRACT-001")
    return text.mark("run :samples :values", ":reward", "E-SAMPLE-001")


def test_a_name_finish_or_a_loader_has(tmp_path):
    d = src_dir(tmp_path)
    text = small_text().set("defgenerate :reward :name", ":prompt")   # the loader's field
    text = no_reward_read(text.mark("defgenerate :reward :name", ":prompt", "E-GEN-003"))
    check(text, str(d / "run.sx"), read_files=True)
    text = small_text().set("defgenerate :reward :name", ":row")      # what `:finish` (here `:step`) makes
    text = no_reward_read(text.mark("defgenerate :reward :name", ":row", "E-REWARD-004"))
    res = check(text, str(d / "run.sx"), read_files=True)
    assert "makes `:row` already" in res.diagnostics[0].message


# -- never imported by lint, explain or the editor --------------------------------------------------

BOOBY_TRAP = '''
import os
open(os.path.join(os.path.dirname(__file__), "IMPORTED"), "w").write("imported")
raise SystemExit("imported")

def score(prompts, completions):
    return [0.0] * len(prompts)
'''


def test_lint_explain_and_the_editor_never_import_it(tmp_path):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    from sexpgpu_lang import analyze, ide
    d = src_dir(tmp_path, BOOBY_TRAP)
    run_file = d / "run.sx"
    run_file.write_text(small_text(), encoding="utf-8")
    before = set(sys.modules)
    for args in (["lint", str(run_file)], ["lint", "--read-files", str(run_file)], ["explain", str(run_file)]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, (args, r.output)
        if args[0] == "explain":
            assert ("reward: `score` of arith_reward.py, Python on the host after `generate.finish`, 1 call per "
                    "step (one per microbatch) · decodes :row · makes :reward [16] f32") in r.output, r.output
    res = analyze(run_file.read_text(), str(run_file), read_files="local")   # as the language server checks
    assert res.program is not None and not res.has_errors
    idx = ide.index(res)
    text = run_file.read_text()
    for at in (text.index('"score"'), text.index("(field b :reward)") + len("(field b :")):
        ide.hover(idx, at)
        ide.completions(idx, at)
    assert not (d / "IMPORTED").exists()
    assert not any(m.startswith("sexpgpu_reward") or m == "arith_reward" for m in set(sys.modules) - before)


# -- what the function receives, and its errors (no training) -------------------------------------

def reward_of(tmp_path, source: str, text: str | None = None):
    from sexpgpu_runtime.run.rewards import PythonReward
    d = src_dir(tmp_path, source)
    return PythonReward(program_of(text or small_text(), str(d / "run.sx")).generate.reward), d


def ids(text: str) -> list[int]:
    return ["0123456789+=".index(c) for c in text]


ROWS = np.array([ids("3+5=08"), ids("9+9=18"), ids("0+0=+=")], np.int32)


def test_it_receives_the_decoded_prompts_and_completions_and_the_named_fields(tmp_path):
    reward, d = reward_of(tmp_path, LOGGING, small_text().set("defgenerate :reward :fields", "[:row]"))
    got = reward.call({"row": ROWS}, "step 1, microbatch 0")
    assert got.dtype == np.float32 and got.tolist() == [1.0, 1.0, 0.0]
    (call,) = calls(d)
    assert call == {"prompts": ["3+5=", "9+9=", "0+0="], "completions": ["08", "18", "+="],
                    "row": ROWS.tolist(), "dtype": "int32"}


def test_a_stacked_group_calls_it_once_per_microbatch(tmp_path):
    reward, d = reward_of(tmp_path, LOGGING)
    stacked = np.stack([ROWS, ROWS[::-1]])   # [S B T], S = 2
    out = reward.join({"row": stacked, "prompt": np.zeros((2, 3, 4), np.int32)}, 7, 2, True)
    assert np.asarray(out["reward"]).tolist() == [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]
    assert [c["prompts"] for c in calls(d)] == [["3+5=", "9+9=", "0+0="], ["0+0=", "9+9=", "3+5="]]
    assert reward.calls == 2


@pytest.mark.parametrize("body,message", [
    ("return [1.0 / (int(c[0]) - 1) for c in completions]",
     "the reward function `score` of arith_reward.py raised ZeroDivisionError: float division by zero "
     "(arith_reward.py:2) at row 1 of step 4, microbatch 1"),
    ("return [float('nan') if p == '9+9=' else 0.0 for p in prompts]",
     "returned nan at row 1 of step 4, microbatch 1; return one finite float per row (3 of them)"),
    ("return [0.0, 1.0]", "returned 2 rewards for the 3 rows of step 4, microbatch 1"),
    ("return [0.0, 'eight', 1.0]", "returned str 'eight' at row 1 of step 4, microbatch 1, not a number"),
    ("return [0.0, None, 1.0]", "returned NoneType None at row 1"),
    ("return [0.0, True, 1.0]", "returned bool True at row 1"),
    ("return 1.0", "returned float 1.0 for step 4, microbatch 1, not a list"),
    ("return 'abc'", "returned str 'abc' for step 4, microbatch 1, not a list"),
    ("import numpy as np\n    return np.zeros((3, 1))", "returned an array of shape [3, 1] for step 4, microbatch 1, not [3]"),
    ("return [float('inf')] * 3", "returned inf at row 0"),
])
def test_its_failures_are_one_line_naming_the_function_the_row_and_the_step(tmp_path, body, message):
    from sexpgpu_runtime import RewardError
    reward, _ = reward_of(tmp_path, f"def score(prompts, completions):\n    {body}\n")
    with pytest.raises(RewardError) as e:
        reward.call({"row": ROWS}, "step 4, microbatch 1")
    text = str(e.value)
    assert "\n" not in text and message in text, text
    assert text.startswith(f"{tmp_path / 'src' / 'run.sx'}:{reward_at(small_text())}: ")


def test_numbers_of_any_numeric_type_are_rewards(tmp_path):
    reward, _ = reward_of(tmp_path, "import numpy as np\ndef score(prompts, completions):\n"
                                    "    return [np.float64(0.5), 1, np.int32(2)]\n")
    assert reward.call({"row": ROWS}, "step 1").tolist() == [0.5, 1.0, 2.0]
    reward, _ = reward_of(tmp_path, "import numpy as np\ndef score(prompts, completions):\n"
                                    "    return np.arange(3, dtype=np.float64) / 4\n")
    assert reward.call({"row": ROWS}, "step 1").tolist() == [0.0, 0.25, 0.5]


def test_an_import_that_fails_is_one_line_naming_the_file_and_its_line(tmp_path):
    from sexpgpu_runtime import RewardError
    with pytest.raises(RewardError) as e:
        reward_of(tmp_path, "import os\nx = 1 / 0\ndef score(prompts, completions):\n    return []\n")
    assert "raised ZeroDivisionError: division by zero (arith_reward.py:2) while it was imported" in str(e.value)
    with pytest.raises(RewardError) as e:
        reward_of(tmp_path, BOOBY_TRAP)   # (`raise SystemExit` at import: the run says so, and does not exit)
    assert "raised SystemExit: imported (arith_reward.py:4) while it was imported" in str(e.value)
    with pytest.raises(RewardError) as e:
        reward_of(tmp_path, "score = 3\n")
    assert "defines no function `score` (it is int)" in str(e.value)


# -- in a run ---------------------------------------------------------------------------------------

def train_small(tmp_path, run_dir: Path, steps: int, text: str | None = None, on_trip=None, **kw):
    from sexpgpu_runtime import RunOptions, train
    d = tmp_path / "src"
    return train(program_of(text or small_text(), str(d / "run.sx")),
                 RunOptions(steps=steps, run_dir=run_dir, quiet=True, **kw), on_trip=on_trip)


@pytest.mark.slow
def test_a_run_calls_it_once_per_microbatch_stacked_or_not_with_the_same_bits(tmp_path):
    from test_checkpoint import assert_same_params
    d = src_dir(tmp_path)
    two = small_text().set("run :microbatches", "2")
    plain = train_small(tmp_path, tmp_path / "plain", 3, two)
    plain_calls = calls(d)
    (d / "calls.jsonl").unlink()
    stacked = train_small(tmp_path, tmp_path / "stacked", 3,
                          two.set("run :stack", "2"))
    assert len(plain_calls) == 6 and all(len(c["prompts"]) == 16 for c in plain_calls)
    assert calls(d) == plain_calls   # the same rows, microbatch by microbatch, in the same order
    assert plain.history == stacked.history
    assert_same_params(plain.trainable, stacked.trainable)


@pytest.mark.slow
def test_a_resume_gets_the_same_rewards_and_bits(tmp_path):
    from sexpgpu_runtime import RunStopped
    from test_checkpoint import assert_same_params
    src_dir(tmp_path)
    text = small_text().set("run :checkpoint", "(:every 2)")
    full = train_small(tmp_path, tmp_path / "full", 6, text)

    def before_trip(step, trip):
        if (step, trip) == (3, 1):
            os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(RunStopped):
        train_small(tmp_path, tmp_path / "stopped", 6, text, on_trip=before_trip)
    resumed = train_small(tmp_path, tmp_path / "stopped", 6, text, resume=True)
    assert resumed.start == 3
    assert resumed.history == full.history[3:]   # the rewards' mean among each step's metrics
    assert_same_params(resumed.trainable, full.trainable)


@pytest.mark.slow
def test_sexpgpu_run_says_so_first_and_a_bad_reward_is_one_line(tmp_path):
    d = src_dir(tmp_path, "def score(prompts, completions):\n    return [float('nan')] * len(prompts)\n")
    run_file = d / "run.sx"
    run_file.write_text(small_text(), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "sexpgpu_cli.main", "run", str(run_file), "--run-dir",
                        str(tmp_path / "run"), "--steps", "2", "--no-progress"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith(f"sexpgpu: {run_file}:{reward_at(small_text())}: this run imports {d / 'arith_reward.py'} and calls "
                               "its function `score` on the host"), lines
    assert "Traceback" not in r.stderr
    assert lines[-1].endswith("the reward function `score` of arith_reward.py returned nan at row 0 of step 1, "
                              "microbatch 0; return one finite float per row (16 of them)"), lines


DP_CHILD = r'''
import json, sys
from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[1]) / "tests"))
import test_rewards as t
from sexpgpu_runtime.run.train import RunOptions, train
from helpers import program_of
tmp, devices = Path(sys.argv[2]), int(sys.argv[3])
res = train(program_of(t.small_text(), str(tmp / "src" / "run.sx")),
            RunOptions(steps=3, run_dir=tmp / f"run{devices}", quiet=True, devices=devices))
print(json.dumps({"history": res.history}))
'''


@pytest.mark.slow
def test_data_parallel_calls_it_with_every_row_of_the_microbatch(tmp_path):
    """On a mesh of 2 (CPU) devices the function gets the microbatch's 16 rows in one call, as on one
    device, and the run's metrics are one device's."""
    d = src_dir(tmp_path)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    out = {}
    for n in (1, 2):
        r = subprocess.run([sys.executable, "-c", DP_CHILD, str(ROOT), str(tmp_path), str(n)], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        out[n] = json.loads(r.stdout.strip().splitlines()[-1])["history"]
    got = calls(d)
    assert len(got) == 6 and all(len(c["prompts"]) == 16 for c in got)
    assert got[:3] == got[3:]   # the mesh's calls are one device's
    for a, b in zip(out[1], out[2]):
        assert a["reward"] == b["reward"]
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_an_evaluation_pass_that_runs_the_generator_calls_it_too(tmp_path):
    d = src_dir(tmp_path)
    text = small_text()
    held = (f'(loader held\n  :source {text.text_of("loader train :source")}\n  :batch prompts\n'
            '  :fields (:prompt [prompt] :i32))\n\n(pass check :loader held :every 2 :batches 1)')
    out = train_small(tmp_path, tmp_path / "run", 2, text.add(held, before="run"))
    got = calls(d)
    assert len(got) == 3 and all(len(c["prompts"]) == 16 for c in got)   # steps 1 and 2, then the pass
    assert 0.0 <= out.history[-1]["check/reward"] <= 1.0
    every = {"".join("0123456789+="[i] for i in row) for row in np.load(DATA / "sums.npz")["prompt"]}
    pass_prompts = got[2]["prompts"]   # 4 prompts of the pass's loader, each answered 4 times
    assert set(pass_prompts) <= every and all(pass_prompts[i] == pass_prompts[i - i % 4] for i in range(16))


def test_a_run_of_several_processes_is_refused(tmp_path, monkeypatch):
    from sexpgpu_runtime import RewardError
    from sexpgpu_runtime.run import rewards
    monkeypatch.setattr(rewards.jax, "process_count", lambda: 2)
    with pytest.raises(RewardError) as e:
        reward_of(tmp_path, LOGGING)
    assert "this run has 2 processes: run it in one" in str(e.value)
    assert not (tmp_path / "src" / "calls.jsonl").exists()


def test_a_text_mask_cuts_the_decoded_rows_as_samples_do(tmp_path):
    """With `TEXT-mask` in the batch (a loader's padding, a generator's completion mask) the function
    receives each row's prompt without its padding and its completion up to its stop, as `:samples`
    shows them (TRL cuts completions at EOS before rewarding)."""
    text = small_text().set("defgenerate :finish", "(lambda (state ctx) (list :row (getf state :row) "
                                                   ":row-mask (!= (getf state :row) 11)))")
    d = src_dir(tmp_path, LOGGING)
    spec = program_of(text, str(d / "run.sx")).generate.reward
    assert spec.mask == "row-mask"
    from sexpgpu_runtime.run.rewards import PythonReward
    reward = PythonReward(spec)
    reward.call({"row": ROWS, "row-mask": ROWS != 11}, "step 1, microbatch 0")   # 11 is `=`
    (call,) = calls(d)
    assert call["prompts"] == ["3+5", "9+9", "0+0"] and call["completions"] == ["08", "18", "+"]
