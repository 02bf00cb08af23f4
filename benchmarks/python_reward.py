"""Benchmark: a step with a Python `:reward` against the same reward computed on the device, in one process.

The run file is examples/grpo-arith.sx (128 rows of 6 tokens a step, 2 trips) with a trivial reward,
1.0 where an answer's first character is `0`: in the `python` variant `:reward` calls

    def first_is_zero(prompts, completions):
        return [float(c[:1] == "0") for c in completions]

on the host (the rows copied over, decoded with the character tokenizer, the call, the rewards put
back), in the `device` variant a `:finish` computes the same `[128] f32` on the device as `:reward`, so
`prepare` and `objective` are the same. Each variant is trained in turn (each first as often as
second) `--repeats` times; a run's step time is the time between the host starting step `--short`
and step `--long - 1` over the steps between (compilation and start-up left out). Prints each
measurement and the median ratio python / device, of the wall time and of the process's CPU time
(every thread's), and the host's work of one call alone (`PythonReward.join` on device arrays of the
batch's shapes) as a share of the device variant's step.

    .venv/bin/python benchmarks/python_reward.py [--short 20 --long 320 --repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sexpgpu_lang import analyze  # noqa: E402
from sexpgpu_runtime import RunOptions, train  # noqa: E402

EXAMPLE = ROOT / "examples" / "grpo-arith.sx"
REWARD = '''
def first_is_zero(prompts, completions):
    return [float(c[:1] == "0") for c in completions]
'''
PYTHON_REWARD = (':reward (:python "arith_reward.py" :function "score" :text :row :prompt prompt\n'
                 '           :tokenizer "data/sums-tokenizer.json")')
DEVICE_REWARD = (':finish (lambda (state ctx)\n'
                 '            (let* ((row (getf state :row)))\n'
                 '              (list :row row\n'
                 '                    :reward (reshape (cast (= (slice row :axis 1 :start prompt :end (+ prompt 1)) 0)'
                 ' :f32) [(axis-size row 0)]))))')


def variants(folder: Path) -> dict[str, str]:
    """grpo-arith.sx with the trivial reward in Python (its file written into `folder`) and on the device;
    the samples left out, the data paths absolute."""
    text = EXAMPLE.read_text(encoding="utf-8")
    assert text.count(PYTHON_REWARD) == 1
    start = text.index("     :samples (")
    text = text[:start].rstrip("\n") + ")\n"
    (folder / "first_zero.py").write_text(REWARD, encoding="utf-8")
    python = text.replace(PYTHON_REWARD, ':reward (:python "first_zero.py" :function "first_is_zero" :text :row '
                                         ':prompt prompt :tokenizer "data/sums-tokenizer.json")')
    device = text.replace(PYTHON_REWARD, DEVICE_REWARD)
    data = str(ROOT / "examples" / "data")
    return {k: v.replace('"data/', f'"{data}/') for k, v in (("python", python), ("device", device))}


def step_seconds(text: str, path: Path, short: int, long: int) -> tuple[float, float]:
    """The mean step time of one run of `long` steps in a fresh run dir, from the host starting step
    `short` to it starting step `long - 1`: (wall seconds, the process's CPU seconds, all threads)."""
    res = analyze(text, str(path), read_files=True)
    assert res.program is not None, [d.message for d in res.diagnostics]
    at: dict[int, tuple[float, float]] = {}

    def on_trip(step: int, trip: int) -> None:
        if trip == 0 and step in (short, long - 1):
            at[step] = (time.perf_counter(), time.process_time())
    with tempfile.TemporaryDirectory() as d:
        train(res.program, RunOptions(steps=long, run_dir=Path(d) / "run", quiet=True), on_trip=on_trip)
    n = long - 1 - short
    return (at[long - 1][0] - at[short][0]) / n, (at[long - 1][1] - at[short][1]) / n


def host_seconds(text: str, path: Path, n: int = 200) -> float:
    """The host's work of one step's reward alone: `PythonReward.join` (the rows copied to the host,
    decoded, the call, the rewards put on the device) on device arrays of the batch's shapes."""
    import jax
    import jax.numpy as jnp
    from sexpgpu_runtime.run.rewards import PythonReward
    spec = analyze(text, str(path), read_files=True).program.generate.reward
    reward = PythonReward(spec)
    batch = {"row": jnp.zeros((128, 6), jnp.int32)}
    for i in range(10):
        jax.block_until_ready(reward.join(batch, i, 0, False)["reward"])
    t = time.perf_counter()
    for i in range(n):
        jax.block_until_ready(reward.join(batch, i, 0, False)["reward"])
    return (time.perf_counter() - t) / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", type=int, default=20)
    ap.add_argument("--long", type=int, default=320)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        path = folder / "grpo-arith.sx"
        texts = variants(folder)
        per_step: dict[str, list[tuple[float, float]]] = {k: [] for k in texts}
        step_seconds(texts["device"], path, 1, 3)   # warm-up: imports and the first compilations
        names = list(texts)
        for r in range(args.repeats):
            for name in names[r % 2:] + names[:r % 2]:   # each variant first as often as second
                t = step_seconds(texts[name], path, args.short, args.long)
                per_step[name].append(t)
                print(f"repeat {r + 1} {name:6s} {t[0] * 1e3:.3f} ms/step wall, {t[1] * 1e3:.3f} CPU", flush=True)
        for i, what in ((0, "wall"), (1, "CPU")):
            ratios = [p[i] / q[i] for p, q in zip(per_step["python"], per_step["device"])]
            print(f"{what}: ratios {' '.join(f'{x:.3f}' for x in ratios)}; median python/device "
                  f"{statistics.median(ratios):.3f}")
        host = host_seconds(texts["python"], path)
        step = statistics.median(w for w, _ in per_step["device"])
        print(f"host work of one reward call {host * 1e3:.3f} ms: {host / step:.3f} of a device-reward step "
              f"({step * 1e3:.3f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
