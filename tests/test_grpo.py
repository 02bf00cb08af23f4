"""examples/grpo.sx: GRPO on chat prompts of different lengths (left-padded) with a reward computed on
the device, the standard library's loss and a `:copy` reference; over 60 steps the reward rises well
above chance (1/18), though its
policy-gradient loss need not fall (tests/test_examples.py skips that assertion for it), and
`grpo-metrics` reports what people read, through `metric` to metrics.jsonl and `sexpgpu plot`."""
from pathlib import Path

import pytest

from sexpgpu_lang import analyze_file
from sexpgpu_runtime import RunOptions, train

pytestmark = pytest.mark.slow


GRPO = Path(__file__).resolve().parents[1] / "examples" / "grpo.sx"
METRICS = {"reward", "reward-std", "kl", "clip-ratio", "entropy", "completion-length", "completion-length-max",
           "stopped", "loss"}


def test_the_reward_rises_and_the_metrics_people_read_are_logged_and_plotted(tmp_path):
    from sexpgpu_cli.plot import panels, plot_run, read_rows
    res = analyze_file(str(GRPO))
    assert [d for d in res.diagnostics if d.severity <= 2] == []
    out = train(res.program, RunOptions(steps=60, run_dir=tmp_path, quiet=True))
    rewards = [row["reward"] for row in out.history]
    assert rewards[0] < 0.1 and max(rewards[-2:]) > 0.2, rewards
    first, last = out.history[0], out.history[-1]
    assert METRICS <= set(first)
    assert first["kl"] == 0.0 and last["kl"] > 0.01         # the policy leaves its frozen copy
    assert last["entropy"] < first["entropy"] <= 2.8904      # ln 18: uniform over the vocabulary at most
    assert first["completion-length"] == first["completion-length-max"] == 6 and first["stopped"] == 0
    assert first["clip-ratio"] == 0.0                        # one update per sampled batch: the ratio is 1
    image = plot_run(tmp_path)
    assert image.is_file() and image.stat().st_size > 0
    assert METRICS <= set(panels(sorted({k for r in read_rows(tmp_path / "metrics.jsonl") for k in r} - {"step"})))


ARITH = GRPO.parent / "grpo-arith.sx"


def test_the_python_reward_rises(tmp_path):
    """examples/grpo-arith.sx: the reward `score` in arith_reward.py computes on the decoded text rises
    from chance (about 0.1: each of the answer's two characters right one time in twelve) within 150 steps,
    under `grpo-objective` (the metrics people read logged beside it)."""
    res = analyze_file(str(ARITH), read_files=True)
    assert [d for d in res.diagnostics if d.severity <= 2] == []
    assert res.program.generate.reward.function == "score"
    text = ARITH.read_text(encoding="utf-8").replace(":log (:every 50)", ":log (:every 10)")
    from sexpgpu_lang import analyze
    program = analyze(text, str(ARITH), read_files=True).program
    out = train(program, RunOptions(steps=150, run_dir=tmp_path, quiet=True))
    rewards = [row["reward"] for row in out.history]
    assert rewards[0] < 0.15 and sum(rewards[-3:]) / 3 > 0.4, rewards
    first, last = out.history[0], out.history[-1]
    assert METRICS <= set(first) and first["kl"] == 0.0 and last["kl"] > 0.01
    assert first["completion-length"] == 2 and last["entropy"] < first["entropy"]
