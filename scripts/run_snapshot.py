"""A snapshot of what runs leave, to compare across a change that must not change them.

Each example of examples/ (gpt2.sx and llama.sx at tests/test_examples.py's smaller size; the
teachers distill.sx, distill-gpt2.sx and lora.sx load made by code-lm.sx and gpt2-teacher.sx first)
and the fixtures the tests train (tests/fixtures/*.sx but tinyllama.sx, TinyLlama's full size,
refused by the memory check in words that name the host's free memory) trains STEPS steps in this process with
`:checkpoint (:every 2 :keep 2)` added where its `run` form has none, exports, then resumes for one
more step. tiny-generate.sx is also stopped by a SIGINT sent from its generator's trip 1 of step 2
and resumed. Written per run: the metrics.jsonl and samples.jsonl rows (the values the run prints),
each checkpoint's step, records and per-array CRC-32 (the arrays' bytes), the export's files'
SHA-256, the final parameters' SHA-256, the result's steps, start step and batches read, or the
error a run ended with.

    python scripts/run_snapshot.py OUT.json          # write a snapshot
    python scripts/run_snapshot.py OUT.json --compare BEFORE.json   # and say what differs

Takes some minutes on two loaded CPU cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
STEPS = 3
SMALLER = {"gpt2.sx": {"layers": 2, "seq": 16, "batch": 4}, "llama.sx": {"layers": 2, "seq": 16, "batch": 4}}


def runnable(path: Path, teachers: dict[str, Path]) -> str:
    """`path`'s text as it trains here: smaller `def`s, data paths absolute, teachers this snapshot's,
    a checkpoint every 2 steps."""
    text = path.read_text(encoding="utf-8")
    for name, value in SMALLER.get(path.name, {}).items():
        line = next(x for x in text.splitlines() if x.startswith(f"(def {name} "))
        text = text.replace(line, f"(def {name} {value})")
    if "code-lm" in teachers:
        text = text.replace('"code-lm.safetensors"', f'"{teachers["code-lm"]}"')
    if "gpt2-teacher" in teachers:
        text = text.replace(':pretrained "gpt2-teacher"', f':pretrained "{teachers["gpt2-teacher"]}"')
        text = text.replace('(def ckpt "gpt2-teacher")', f'(def ckpt "{teachers["gpt2-teacher"]}")')
    text = text.replace('"data/', f'"{path.parent / "data"}/')
    head, sep, tail = text.partition("\n(run ")
    if sep and ":checkpoint" not in tail:
        text = head + sep + ":checkpoint (:every 2 :keep 2) " + tail
    return text


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows(path: Path) -> list:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def checkpoints(run_dir: Path) -> dict:
    """Each checkpoint's meta item: its step, records and array digests (the bytes of its arrays)."""
    out = {}
    ck = run_dir / "checkpoints"
    for step_dir in sorted(ck.iterdir() if ck.is_dir() else [], key=lambda p: p.name):
        meta = step_dir / "meta" / "metadata"
        if step_dir.name.isdigit() and meta.is_file():
            m = json.loads(meta.read_text())
            out[step_dir.name] = {k: m.get(k) for k in ("step", "records", "digests")}
    return out


def export_hashes(export: Path) -> dict:
    if export.is_file():
        return {export.name: sha(export)}
    if export.is_dir():
        return {str(p.relative_to(export)): sha(p) for p in sorted(export.rglob("*")) if p.is_file()
                and p.name != "sexpgpu-export.json"}
    return {}


def params_hash(tree) -> str:
    import numpy as np
    import jax
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        h.update(jax.tree_util.keystr(path).encode())
        h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()


def result_fields(res) -> dict:
    return {"steps": res.steps, "start": res.start, "batches": res.data.batches, "history": res.history,
            "params": params_hash(res.trainable), "frozen": params_hash(res.frozen)}


def one(name: str, text: str, where: Path, run_dir: Path, export: Path | None, export_names=None, stop_at=None):
    from sexpgpu_lang import analyze
    from sexpgpu_runtime import RunOptions, RunStopped, train
    path = where / name
    path.write_text(text, encoding="utf-8")
    if (EXAMPLES / "arith_reward.py").is_file() and "arith_reward.py" in text:   # a `:reward`'s file, beside it
        shutil.copy(EXAMPLES / "arith_reward.py", where / "arith_reward.py")
    res = analyze(text, str(path), read_files=True)
    errors = [f"{d.code} {d.message}" for d in res.diagnostics if d.severity <= 2]
    if errors or res.program is None:
        return {"diagnostics": errors}
    out = {}

    def on_trip(step, trip):
        if stop_at is not None and (step, trip) == stop_at:
            os.kill(os.getpid(), signal.SIGINT)

    for phase, steps, resume in (("train", STEPS, False), ("resume", STEPS + 1, True)):
        try:
            r = train(res.program, RunOptions(steps=steps, run_dir=run_dir, quiet=True, resume=resume, export=export,
                                               export_names=export_names), on_trip=on_trip if not resume else None)
            out[phase] = result_fields(r)
        except RunStopped as e:
            out[phase] = {"stopped": [e.saved, str(e)]}
        except Exception as e:   # an error is an output too
            out[phase] = {"error": f"{type(e).__name__}: {e}".replace(str(where), "<tmp>")}
        out[phase + "_metrics"] = rows(run_dir / "metrics.jsonl")
        out[phase + "_samples"] = rows(run_dir / "samples.jsonl")
        out[phase + "_checkpoints"] = checkpoints(run_dir)
        if export is not None:
            out[phase + "_export"] = export_hashes(export)
    return out


def snapshot() -> dict:
    import jax  # noqa: F401 (the runtime's first import, as the CLI's)
    out: dict = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        teachers: dict[str, Path] = {}
        order = ["code-lm.sx", "gpt2-teacher.sx"] + sorted(p.name for p in EXAMPLES.glob("*.sx")
                                                         if p.name not in ("code-lm.sx", "gpt2-teacher.sx"))
        for name in order:
            work = tmp / name
            work.mkdir()
            export, names = work / "export.safetensors", None
            if name == "gpt2-teacher.sx":
                export, names = work / "hf", "gpt2"
            print(f"snapshot: {name}", file=sys.stderr, flush=True)
            out[f"examples/{name}"] = one(name, runnable(EXAMPLES / name, teachers), work, work / "run", export,
                                          names)
            if name == "code-lm.sx":
                teachers["code-lm"] = export
            if name == "gpt2-teacher.sx":
                teachers["gpt2-teacher"] = export
        for path in sorted(p for p in FIXTURES.glob("*.sx") if p.name != "tinyllama.sx"):
            work = tmp / ("fixture-" + path.name)
            work.mkdir()
            print(f"snapshot: {path.name}", file=sys.stderr, flush=True)
            out[f"fixtures/{path.name}"] = one(path.name, runnable(path, teachers), work, work / "run",
                                               work / "export.safetensors")
        work = tmp / "stopped"
        work.mkdir()
        print("snapshot: tiny-generate.sx stopped at step 2, trip 1", file=sys.stderr, flush=True)
        out["fixtures/tiny-generate.sx stopped"] = one("tiny-generate.sx", runnable(FIXTURES / "tiny-generate.sx", {}),
                                                       work, work / "run", None, stop_at=(1, 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--compare")
    args = ap.parse_args()
    got = json.loads(re.sub(r"/tmp/tmp[^/\"]+", "<tmp>", json.dumps(snapshot())))
    Path(args.out).write_text(json.dumps(got, indent=1, sort_keys=True))
    if args.compare:
        before = json.loads(re.sub(r"/tmp/tmp[^/\"]+", "<tmp>", Path(args.compare).read_text()))
        differ = sorted(k for k in set(before) | set(got) if before.get(k) != got.get(k))
        print("same outputs" if not differ else "differ: " + ", ".join(differ))
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
