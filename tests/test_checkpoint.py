"""Checkpoints and resume: bit-exact resume after a stop, identity, kills mid-write, bad values, full or
unwritable dirs, TensorBoard events, `sexpgpu plot`."""
import json
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, check, marked, program_of, run
from runfile import RunFile
from sexpgpu_runtime.weights.params import flatten
from sexpgpu_runtime import RunError, RunFinished, RunStopped

STEPS = 30
TEST_SEED = 20240605
# Every step logged (so every step's metrics can be compared), checkpoints every 7 steps, two kept.
TEXT = RunFile.fixture().set("run :log", "(:every 1 :tensorboard true)").set("run :checkpoint", "(:every 7 :keep 2)")


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_same_params(a, b):
    fa, fb = flatten(a), flatten(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        assert np.array_equal(np.asarray(fa[k]), np.asarray(fb[k])), k


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The uninterrupted 30-step run."""
    d = tmp_path_factory.mktemp("full")
    return run(TEXT, d, STEPS), d


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The same run, stopped by SIGTERM before a random trip of a random step, then resumed."""
    d = tmp_path_factory.mktemp("stopped")
    rng = random.Random(TEST_SEED)
    target = (rng.randrange(1, STEPS - 1), rng.randrange(6))   # (0-based step in flight, trip)

    def before_trip(step, trip):
        if (step, trip) == target:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(RunStopped) as stop:
        run(TEXT, d, STEPS, on_trip=before_trip)
    first_part = rows(d)
    resumed = run(TEXT, d, STEPS, resume=True)
    return target, stop.value, first_part, resumed, d


@pytest.mark.slow
def test_stop_abandons_the_step_in_flight_and_saves_the_last_completed(stopped):
    (step, trip), stop, first_part, _, d = stopped
    assert (stop.signal_name, stop.exit_code) == ("SIGTERM", 143)
    assert stop.step == step + 1          # the step in flight, numbered as in metrics.jsonl
    assert stop.saved == step             # the last completed step was saved (it is not a multiple of 7)
    assert [r["step"] for r in first_part] == list(range(1, step + 1))


@pytest.mark.slow
def test_resume_is_bit_exact_with_the_uninterrupted_run(full, stopped):
    full_result, full_dir = full
    (step, _), _, _, resumed, d = stopped
    assert resumed.start == step
    assert_same_params(resumed.trainable, full_result.trainable)
    assert_same_params(resumed.frozen, full_result.frozen)
    # Every step after the resume point has the uninterrupted run's metrics, and the
    # resumed metrics.jsonl kept the rows before it: one row per step, equal throughout.
    assert resumed.history == [r for r in rows(full_dir) if r["step"] > step]
    assert rows(d) == rows(full_dir)


class Crash(Exception):
    """A process that dies without saving (a kill, a lost machine)."""


@pytest.mark.slow
def test_a_crash_resumes_from_the_last_periodic_checkpoint_and_drops_the_later_rows(full, tmp_path):
    full_result, full_dir = full

    def before_trip(step, trip):
        if (step, trip) == (17, 2):
            raise Crash

    with pytest.raises(Crash):
        run(TEXT, tmp_path, STEPS, on_trip=before_trip)
    assert [r["step"] for r in rows(tmp_path)] == list(range(1, 18))
    resumed = run(TEXT, tmp_path, STEPS, resume=True)
    assert resumed.start == 14                  # the newest `:every 7` checkpoint
    assert rows(tmp_path) == rows(full_dir)              # rows 15-17 were dropped, then logged again
    assert_same_params(resumed.trainable, full_result.trainable)


@pytest.mark.slow
def test_keep_holds_the_newest_checkpoints(full):
    from sexpgpu_runtime.run.checkpoint import Checkpoints
    from sexpgpu_runtime.run.checkpoint_meta import Identity
    from sexpgpu_runtime.run.checkpoint_policy import checkpoint_spec
    _, d = full
    prog = program_of(TEXT)
    store = Checkpoints(checkpoint_spec(prog.run.checkpoint, d), Identity(prog.identity, prog.run.seed))
    try:
        assert store.steps() == [28, 30]  # every 7 and the last step; `:keep 2`
    finally:
        store.close()


@pytest.mark.slow
def test_checkpoint_of_another_file_is_refused_naming_both(full, tmp_path):
    _, d = full
    other = TEXT.set("run :optimizer :lr", "1e-3")
    with pytest.raises(RunError) as e:
        run(other, d, STEPS, resume=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert program_of(TEXT).identity in msg and program_of(other).identity in msg
    assert "seed 0" in msg and "cannot resume" in msg


@pytest.mark.slow
def test_a_file_that_differs_in_steps_alone_is_another_run_and_the_message_says_how_to_train_longer(full):
    _, d = full
    longer = TEXT.set("run :steps", "1600")
    assert program_of(longer).identity != program_of(TEXT).identity
    assert program_of(longer).identity_apart_from_steps == program_of(TEXT).identity_apart_from_steps
    with pytest.raises(RunError) as e:
        run(longer, d, STEPS, resume=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert "with `:steps 1500`; this file differs from it in `:steps` alone (1600 now)" in msg
    assert "keep `:steps 1500` in the file and resume with `--steps 1600`" in msg
    # any other change as well: the message names both identities, as for another file
    other = longer.set("run :optimizer :lr", "1e-3")
    assert program_of(other).identity_apart_from_steps != program_of(TEXT).identity_apart_from_steps
    with pytest.raises(RunError, match="this file has forms") as e:
        run(other, d, STEPS, resume=True)


@pytest.mark.slow
def test_comments_and_layout_keep_the_identity(full):
    reformatted = ";; a comment the identity ignores\n" + TEXT.replace("(run :loader train", "(run\n  :loader   train")
    assert program_of(reformatted).identity == program_of(TEXT).identity
    with pytest.raises(RunFinished, match=f"finished at step {STEPS} of {STEPS}"):   # the same run: it has finished
        run(reformatted, full[1], STEPS, resume=True)


@pytest.mark.slow
def test_samples_keep_the_identity(full):
    # `:samples` changes what the run shows, not what it trains: adding it keeps the checkpoint's run.
    shown = TEXT.replace("(run :loader train", "(run :samples (:every 5 :values [:correct]) :loader train", 1)
    assert shown != TEXT
    assert program_of(shown).identity == program_of(TEXT).identity
    assert program_of(shown).identity_apart_from_steps == program_of(TEXT).identity_apart_from_steps
    with pytest.raises(RunFinished, match=f"finished at step {STEPS} of {STEPS}"):
        run(shown, full[1], STEPS, resume=True)
    other = TEXT.replace(":seed 0", ":seed 1", 1)
    assert program_of(other).identity != program_of(TEXT).identity


@pytest.mark.slow
def test_fresh_run_into_a_dir_with_checkpoints_is_refused(full, tmp_path):
    run(TEXT, tmp_path, 7)                         # unfinished: resume it, or start over
    with pytest.raises(RunError, match="already holds checkpoints of this run .*--resume"):
        run(TEXT, tmp_path, STEPS)


@pytest.mark.slow
def test_fresh_run_of_a_finished_run_says_where_it_is_and_changes_nothing(full):
    """A second plain `sexpgpu run FILE` of a finished run (the README's command run twice) is
    RunFinished, exit 0, naming its metrics and checkpoints and how to train again."""
    before = sorted((p.relative_to(full[1]), p.stat().st_mtime_ns) for p in full[1].rglob("*") if p.is_file())
    with pytest.raises(RunFinished) as e:
        run(TEXT, full[1], STEPS)
    assert str(e.value) == (f"the run in {full[1]} finished at step {STEPS} of {STEPS}: nothing was changed; its "
                            f"metrics are in {full[1] / 'metrics.jsonl'}, its checkpoints in {full[1] / 'checkpoints'}. "
                            f"Pass --overwrite to train it again, or `--resume --steps N` above {STEPS} to train it "
                            "longer")
    assert sorted((p.relative_to(full[1]), p.stat().st_mtime_ns) for p in full[1].rglob("*") if p.is_file()) == before


def test_resume_without_a_checkpoint_says_so(tmp_path):
    with pytest.raises(RunError, match="nothing to resume: no complete checkpoint in"):
        run(TEXT, tmp_path, STEPS, resume=True)


@pytest.mark.slow
def test_a_checkpoint_without_its_meta_item_is_named_in_our_words_and_the_older_one_resumes(full, tmp_path):
    import shutil
    from sexpgpu_runtime.run.checkpoint import Checkpoints
    from sexpgpu_runtime.run.checkpoint_meta import Identity
    from sexpgpu_runtime.run.checkpoint_policy import checkpoint_spec
    from sexpgpu_runtime.errors import CheckpointError
    d = tmp_path / "run"
    shutil.copytree(full[1], d)
    shutil.rmtree(d / "checkpoints" / "30" / "meta")
    prog = program_of(TEXT)
    store = Checkpoints(checkpoint_spec(prog.run.checkpoint, d), Identity(prog.identity, prog.run.seed))
    try:
        with pytest.raises(CheckpointError) as e:
            store.meta(30)
        assert str(e.value) == (f"cannot read checkpoint step 30 in {d / 'checkpoints'}: it has no `meta` item (the "
                                "step, the identity and the digests sexpgpu writes beside the arrays), so sexpgpu did "
                                "not write it whole")
        assert store.newest_meta()[0] == 28
    finally:
        store.close()


@pytest.mark.slow
def test_a_checkpoint_whose_write_was_cut_short_is_named_by_the_resume(full, tmp_path):
    """A process killed while orbax wrote a checkpoint leaves `<step>.orbax-checkpoint-tmp-*`: the
    resume removes it and says so, from the older checkpoint or, with none, in its refusal."""
    import shutil
    from sexpgpu_runtime.run.checkpoint import Checkpoints
    from sexpgpu_runtime.run.checkpoint_meta import Identity
    from sexpgpu_runtime.run.checkpoint_policy import checkpoint_spec
    from sexpgpu_runtime.run.resume import resuming_line
    d = tmp_path / "run"
    shutil.copytree(full[1], d)
    (d / "checkpoints" / "30").rename(d / "checkpoints" / "30.orbax-checkpoint-tmp-1764612000")
    prog = program_of(TEXT)
    store = Checkpoints(checkpoint_spec(prog.run.checkpoint, d), Identity(prog.identity, prog.run.seed))
    try:
        assert store.cut_short == [30] and store.steps() == [28]
        assert resuming_line(28, 40, store.spec.dir, store.cut_short) == (
            f"sexpgpu: resuming from step 28 of 40 (checkpoint {store.spec.dir / '28'}); the checkpoint of step "
            "30 was cut short (its process was killed while writing it)")
    finally:
        store.close()
    assert not (d / "checkpoints" / "30.orbax-checkpoint-tmp-1764612000").exists()
    # with the older one cut short too, nothing is left to resume, and the refusal says why
    (d / "checkpoints" / "28").rename(d / "checkpoints" / "28.orbax-checkpoint-tmp-1764611000")
    with pytest.raises(RunError) as e:
        run(TEXT, d, 40, resume=True)
    assert str(e.value) == (f"nothing to resume: no complete checkpoint in {d / 'checkpoints'} (the write of step "
                            "28 was cut short: its process was killed while writing it); pass --overwrite instead of "
                            "--resume to start over at step 0 (metrics.jsonl holds the rows of a run none of whose "
                            "checkpoints was completed)")
    # killed before orbax made even its folder: metrics.jsonl's rows past `:every 7` tell the same
    for p in (d / "checkpoints").iterdir():
        shutil.rmtree(p)
    with pytest.raises(RunError) as e:
        run(TEXT, d, 40, resume=True)
    assert "(the write of step 28 was cut short: its process was killed while writing it)" in str(e.value)
    assert "none of whose checkpoints was completed" in str(e.value)


def test_unwritable_checkpoint_dir_is_one_error_before_training(tmp_path):
    (tmp_path / "a-file").write_text("not a dir")
    text = TEXT.set("run :checkpoint", '(:every 7 :dir "a-file/ckpt")')
    with pytest.raises(RunError) as e:
        run(text, tmp_path, STEPS)
    assert str(e.value) == (f"cannot write checkpoints to {tmp_path / 'a-file' / 'ckpt'}: "
                            f"{tmp_path / 'a-file'} is a file, not a directory")
    assert not (tmp_path / "metrics.jsonl").exists()


def test_full_disk_is_one_error_before_training(tmp_path, monkeypatch):
    import shutil
    from sexpgpu_runtime.run import checkpoint
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 4096, 4096))
    with pytest.raises(RunError, match=r"not enough free space for checkpoints in .*: one needs about 1\.\d MiB, 0\.0 MiB free"):
        run(TEXT, tmp_path, STEPS)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_a_disk_that_fills_during_the_run_fails_the_save_naming_the_newest_checkpoint(tmp_path, monkeypatch):
    import shutil
    from sexpgpu_runtime.run import checkpoint
    from sexpgpu_runtime.run.checkpoint import Checkpoints
    from sexpgpu_runtime.run.checkpoint_meta import Identity
    from sexpgpu_runtime.run.checkpoint_policy import CheckpointSpec
    from sexpgpu_runtime.errors import CheckpointError
    store = Checkpoints(CheckpointSpec(tmp_path, 1, 3), Identity("f00d", 0))
    tree = {"w": np.ones((64, 64), np.float32)}
    try:
        store.save(1, tree, records=64)
        monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 0))
        with pytest.raises(CheckpointError) as e:
            store.save(2, tree, records=128)
        assert str(e.value) == (f"not enough free space for checkpoint step 2 in {tmp_path}: one needs about 1.0 MiB, "
                                "0.0 MiB free; the newest complete checkpoint is step 1")
        assert store.steps() == [1]
    finally:
        store.close()


def test_bad_checkpoint_setting_is_one_line(tmp_path):
    from sexpgpu_runtime.run.checkpoint_policy import checkpoint_spec
    from sexpgpu_runtime.errors import CheckpointError
    bad = TEXT.set("run :checkpoint", "(:every 0)")
    check(marked(bad, "0", "E-TYPE-003", within=":every 0"))   # the checker's, statically
    with pytest.raises(CheckpointError, match=r"^`:checkpoint` `:keep` must be a whole number of 1 or more, got 0$"):
        checkpoint_spec({"keep": 0}, tmp_path)                                     # the IR's, defensively
    text = TEXT.set("run :checkpoint", '(:dir "")')
    with pytest.raises(RunError, match=r'^`:checkpoint` `:dir` must be a path in quotes like "checkpoints", got \'\'$'):
        run(text, tmp_path, STEPS)


#: TEXT whose loss is NaN from the 7th step on (log(6 - step) is -inf at ctx :step 6), logged every 50 steps.
NAN_FROM_STEP_7 = TEXT.set("objective (loss", "(loss (+ (mean (cross-entropy logits (getf inputs :target)))\n"
                                              "                  (* 0.0 (log (- 6.0 (cast (getf ctx :step) :f32))))))").set(
    "run :log", "(:every 50)")


@pytest.mark.slow
def test_nan_loss_names_the_step_the_metric_and_the_last_good_checkpoint(tmp_path):
    # log(6 - step) is -inf at the 7th step (ctx :step 6), so the loss is NaN there.
    text = NAN_FROM_STEP_7.set("run :checkpoint :every", "2")
    with pytest.raises(RunError) as e:
        run(text, tmp_path, 12)
    ckpts = tmp_path / "checkpoints"
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "(log (- 6.0" in s)
    col = text.splitlines()[line - 1].index("(log (- 6.0") + 1
    assert str(e.value) == ("step 7: `loss` is nan, so the run stopped; the first value of that step that was not "
                            f"finite: `log` at {tmp_path / 'run.sx'}:{line}:{col} (in `objective`) gave -inf from "
                            "finite inputs (likely a log of 0 or of a negative); the last good "
                            f"checkpoint is step 6 in {ckpts}")
    assert sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) == [4, 6]


@pytest.mark.slow
@pytest.mark.parametrize("stop_in", [None, 9])
def test_nan_loss_between_checks_names_its_step_and_is_never_saved(tmp_path, stop_in):
    # The loss is NaN from the 7th step on; nothing is logged or saved until step 10 (or SIGTERM in step 9).
    # The loss is read back only then, yet the error names step 7, and the checkpoint of step 5 is the
    # last one: step 10 (or the last completed step, 8, at the stop) is never saved.
    text = NAN_FROM_STEP_7.set("run :checkpoint", "(:every 5 :keep 3)")

    sent = []

    def before_trip(step, trip):
        if step + 1 == stop_in and trip == 2:
            sent.append(step + 1)   # the run got past the NaN step, into the window before the next check
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(RunError) as e:
        run(text, tmp_path, 12, on_trip=before_trip)
    assert sent == ([] if stop_in is None else [stop_in])
    ckpts = tmp_path / "checkpoints"
    assert str(e.value).startswith("step 7: `loss` is nan, so the run stopped;"), str(e.value)
    assert str(e.value).endswith(f"the last good checkpoint is step 5 in {ckpts}")
    assert sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) == [5]
    assert [r["step"] for r in rows(tmp_path)] == [1]


KILL_MID_WRITE = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import numpy as np
    from sexpgpu_runtime.run.checkpoint import Checkpoints
    from sexpgpu_runtime.run.checkpoint_meta import Identity
    from sexpgpu_runtime.run.checkpoint_policy import CheckpointSpec

    store = Checkpoints(CheckpointSpec(Path(sys.argv[1]), 1, 3), Identity("f00d", 0))
    store.save(1, {"w": np.full((256, 256), 1.0, np.float32), "n": np.array(1, np.int64)}, records=64)
    store.wait()
    real_rename = os.rename
    def slow_rename(src, dst, *a, **k):
        # Every file of checkpoint 2 is written; only the rename that commits it is left.
        if "tmp" in str(src):
            print("renaming", flush=True)
            time.sleep(120)
        return real_rename(src, dst, *a, **k)
    os.rename = slow_rename
    store.save(2, {"w": np.full((256, 256), 2.0, np.float32), "n": np.array(2, np.int64)}, records=128)
    store.wait()
    print("not killed", flush=True)
""")


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_write_leaves_the_previous_one_loadable(tmp_path):
    from sexpgpu_runtime.run.checkpoint import Checkpoints
    from sexpgpu_runtime.run.checkpoint_meta import Identity
    from sexpgpu_runtime.run.checkpoint_policy import CheckpointSpec
    d = tmp_path / "ckpt"
    p = subprocess.Popen([sys.executable, "-c", KILL_MID_WRITE, str(d)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "renaming", p.stderr.read()
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        p.kill()
    assert p.returncode == -signal.SIGKILL
    leftovers = sorted(x.name for x in d.iterdir())
    assert "1" in leftovers and "2" not in leftovers and any("tmp" in x for x in leftovers), leftovers
    store = Checkpoints(CheckpointSpec(d, 1, 3), Identity("f00d", 0))
    try:
        assert store.steps() == [1]
        step, tree, records = store.restore({"w": np.zeros((256, 256), np.float32), "n": np.array(0, np.int64)})
        assert (step, records, int(tree["n"])) == (1, 64, 1)
        assert np.all(np.asarray(tree["w"]) == 1.0)
    finally:
        store.close()
    assert sorted(x.name for x in d.iterdir() if not x.name.startswith(".")) == ["1"]   # the torn write is cleaned up


def tensorboard_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """Scalars of every event file under `run_dir` (TFRecord framing: length, crc, data, crc)."""
    from tensorboardX.proto import event_pb2
    out: dict[str, dict[int, float]] = {}
    for f in sorted(run_dir.glob("events.out.tfevents.*")):
        data = f.read_bytes()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            ev = event_pb2.Event.FromString(data[i + 12:i + 12 + n])
            i += 12 + n + 4
            for v in ev.summary.value:
                out.setdefault(v.tag, {})[ev.step] = v.simple_value
    return out


@pytest.mark.slow
def test_tensorboard_events_hold_every_logged_metric(full):
    result, d = full
    scalars = tensorboard_scalars(d)
    assert set(scalars) == {"loss", "lr", "generation-accuracy"}   # lr: the learning rate of each row
    assert sorted(scalars["loss"]) == list(range(1, STEPS + 1))
    for row in result.history:
        assert scalars["loss"][row["step"]] == pytest.approx(row["loss"], rel=1e-6)


@pytest.mark.slow
def test_plot_writes_a_png_of_every_metric(full, tmp_path):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    _, d = full
    with (d / "metrics.jsonl").open() as f:
        text = f.read()
    # a pass's metrics join the training metric's panel
    extra = "".join(json.dumps({"step": s, "held-out/loss": 2.8 - s / 100}) + "\n" for s in (10, 20, 30))
    (tmp_path / "metrics.jsonl").write_text(text + extra)
    r = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert r.exit_code == 0, r.output
    png = tmp_path / "metrics.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from sexpgpu_cli.plot import panels
    assert panels(["loss", "generation-accuracy", "held-out/loss", "held-out/f1"]) == {
        "loss": ["loss", "held-out/loss"], "generation-accuracy": ["generation-accuracy"], "held-out/f1": ["held-out/f1"]}


def test_plot_mistakes_are_one_line(tmp_path):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    r = CliRunner().invoke(app, ["plot", str(tmp_path / "nope")])
    assert (r.exit_code, r.output.strip()) == (2, f"sexpgpu: error: no run dir {tmp_path / 'nope'}; give the run dir "
                                                  "`sexpgpu run` wrote (runs/<file stem> by default)")
    r = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert r.exit_code == 1 and "has no metrics.jsonl" in r.output and len(r.output.strip().splitlines()) == 1
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\nnot json\n{"step": 3, "loss": 1.0}\n')
    r = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert (r.exit_code, r.output.strip()) == (1, f"sexpgpu: error: {tmp_path / 'metrics.jsonl'}:2 is corrupt: not a "
                                                  "metrics row (a JSON object with a numeric `step`)")


@pytest.mark.slow
def test_fresh_run_into_a_run_dir_with_metrics_but_no_checkpoints_is_refused(tmp_path):
    text = RunFile.fixture().set("run :log :every", "1")      # no `:checkpoint`: nothing saved while training
    run(text, tmp_path, 2)
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(RunError) as e:
        run(text, tmp_path, 3)
    assert str(e.value) == (f"{tmp_path} already holds the metrics.jsonl of an earlier run (and no checkpoint to "
                            "resume from); pass --overwrite to start over, or give another --run-dir")
    assert (tmp_path / "metrics.jsonl").read_text() == before          # untouched
    run(text, tmp_path, 3, overwrite=True)
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3]


def test_a_run_whose_data_cannot_be_read_leaves_no_empty_run_dir(tmp_path):
    text = TEXT.set("loader train :source", '(npz "missing.npz")')
    run_dir = tmp_path / "runs" / "tiny"
    with pytest.raises(RunError, match="no file .*missing.npz"):
        run(text, run_dir, 2, path=tmp_path / "run.sx")
    assert list(tmp_path.iterdir()) == []                 # neither runs/tiny nor runs/ is left
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match="no file .*missing.npz"):
        run(text, run_dir, 2, path=tmp_path / "run.sx")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["notes.txt"]   # what was there stays


@pytest.mark.slow
def test_an_empty_metrics_jsonl_is_no_earlier_run(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")         # left by a run that failed before its first logged step
    run(TEXT, tmp_path, 1)
    assert [r["step"] for r in rows(tmp_path)] == [1]


@pytest.mark.slow
def test_overwrite_starts_over_removing_checkpoints_metrics_and_events(full, tmp_path):
    full_result, full_dir = full
    run(TEXT, tmp_path, 9)                        # checkpoints 7 and 9, 9 rows, events to step 9
    with pytest.raises(RunFinished, match=r"has trained 9 steps, more than the 3 asked for: nothing was changed"):
        run(TEXT, tmp_path, 3)
    (tmp_path / "notes.txt").write_text("mine")
    again = run(TEXT, tmp_path, STEPS, overwrite=True)
    assert rows(tmp_path) == rows(full_dir)             # one fresh run's rows, nothing of the first
    assert_same_params(again.trainable, full_result.trainable)
    assert sorted(tensorboard_scalars(tmp_path)["loss"]) == list(range(1, STEPS + 1))
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == ["28", "30"]
    assert (tmp_path / "notes.txt").read_text() == "mine"   # nothing else is touched


@pytest.mark.slow
def test_overwrite_replaces_another_runs_checkpoints_and_refuses_resume_with_it(full, tmp_path):
    from sexpgpu_runtime import OptionError
    other = TEXT.set("run :optimizer :lr", "1e-3")
    run(other, tmp_path, 7)
    with pytest.raises(RunError, match=r"checkpoints of another run .*pass --overwrite to replace that run"):
        run(TEXT, tmp_path, 7)
    run(TEXT, tmp_path, 7, overwrite=True)
    assert [r["step"] for r in rows(tmp_path)] == list(range(1, 8))
    with pytest.raises(OptionError, match="^--resume continues the run in the run dir and --overwrite starts it over"):
        run(TEXT, tmp_path, STEPS, resume=True, overwrite=True)


def test_plot_output_format_comes_from_the_suffix(tmp_path):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.0}\n')
    for name in ("out.txt", "out"):
        r = CliRunner().invoke(app, ["plot", str(tmp_path), "-o", str(tmp_path / name)])
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1, r.output
        assert lines[0].startswith(f"sexpgpu: error: cannot write {tmp_path / name}: ") and "Traceback" not in r.output
        assert "plot writes .png, .svg, .pdf, " in lines[0]
        assert not (tmp_path / name).exists()
    r = CliRunner().invoke(app, ["plot", str(tmp_path), "-o", str(tmp_path / "out.svg")])
    assert r.exit_code == 0 and (tmp_path / "out.svg").read_text().lstrip().startswith("<?xml")
    r = CliRunner().invoke(app, ["plot", str(tmp_path), "-o", str(tmp_path / "no-dir" / "out.png")])
    assert r.exit_code == 2 and r.output.strip().endswith("No such file or directory")   # an output not writable


@pytest.mark.parametrize("text, line", [("garbage\n", 1), ("garbage", 1), ('{"loss": 2.0}\n', 1),
                                        ('{"step": 1, "loss": 2.0}\n{"ste\n', 2)])
def test_plot_names_a_corrupt_line_rather_than_no_metrics(tmp_path, text, line):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    (tmp_path / "metrics.jsonl").write_text(text)
    r = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert (r.exit_code, r.output.strip()) == (1, f"sexpgpu: error: {tmp_path / 'metrics.jsonl'}:{line} is corrupt: "
                                                  "not a metrics row (a JSON object with a numeric `step`)")


def test_plot_skips_a_torn_last_line(tmp_path):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.0}\n{"step": 3, "lo')
    r = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "metrics.png").exists()


@pytest.mark.slow
def test_resuming_a_finished_run_says_there_is_nothing_to_train(tmp_path):
    from typer.testing import CliRunner
    from sexpgpu_cli.main import app
    (tmp_path / "run.sx").write_text(TEXT)
    args = ["run", str(tmp_path / "run.sx"), "--steps", "2", "--run-dir", str(tmp_path / "d")]
    assert CliRunner().invoke(app, args).exit_code == 0
    r = CliRunner().invoke(app, args + ["--resume"])
    assert r.exit_code == 0, r.output
    line = r.stderr.strip().splitlines()[-1]
    assert line == (f"sexpgpu: the run in {tmp_path / 'd'} finished at step 2 of 2: nothing to resume, nothing was "
                    "changed; to train it longer, resume with `--steps N` above 2")


@pytest.mark.slow
def test_a_stop_while_a_bad_row_waits_for_the_device_names_the_bad_step_and_saves_nothing_past_it(tmp_path, monkeypatch):
    # On a device slower than the host, logged rows wait for it (`Loop._write_rows`); made to wait here.
    # The metric `odd` is -inf at the 10th step only; SIGTERM comes in step 13, while rows 8-12 wait. The run
    # must stop at the bad row, as if it had been written at its step: no checkpoint past it (found by a tester).
    from sexpgpu_runtime.run.loop import Loop
    real = Loop._write_rows
    monkeypatch.setattr(Loop, "_write_rows", lambda self, wait: real(self, wait) if wait else None)
    text = TEXT.edit("objective", "(metric :loss loss)",
                     "(metric :loss loss)\n    (metric :odd (log (abs (- (cast (getf ctx :step) :f32) 9.0))))")

    def before_trip(step, trip):
        if (step, trip) == (12, 0):
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(RunError) as e:
        run(text, tmp_path, STEPS, on_trip=before_trip)
    ckpts = tmp_path / "checkpoints"
    assert str(e.value).startswith("step 10: `odd` is -inf, so the run stopped;"), str(e.value)
    assert str(e.value).endswith(f"the last good checkpoint is step 7 in {ckpts}")
    assert sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) == [7]
    assert [r["step"] for r in rows(tmp_path)] == list(range(1, 10))


class FakeStore:
    """The writer's face the policy sees (checkpoint_policy.Store): what was saved and waited for."""

    def __init__(self, every, latest=None):
        from sexpgpu_runtime.run.checkpoint_policy import CheckpointSpec
        self.spec, self.events, self.newest = CheckpointSpec(Path("ck"), every, 2), [], latest

    def save(self, step, tree, records):
        self.events.append(("save", step, sorted(tree), records))
        self.newest = step

    def wait(self):
        self.events.append(("wait",))

    def latest(self):
        return self.newest


def policy_of(store, last=10):
    from types import SimpleNamespace
    from sexpgpu_runtime.run.checkpoint_policy import CheckpointPolicy
    checks = SimpleNamespace(check_params=lambda step, trainable: store.events.append(("check", step)))
    return CheckpointPolicy(store, last, lambda: store.events.append(("settle",)), checks, None)


def state_at(step):
    from sexpgpu_runtime.run.state import RunState
    return RunState(step, {"w": 1}, {"f": 2}, {"m": 3}, 4 * step, {"c": 0})


def test_the_policy_saves_every_n_steps_and_the_last_checked_first():
    store = FakeStore(every=4)
    policy = policy_of(store, last=10)
    assert [s for s in range(1, 11) if policy.due(s)] == [4, 8, 10]
    for s in range(1, 11):
        policy.after_step(state_at(s))
    saves = [e for e in store.events if e[0] == "save"]
    assert saves == [("save", s, ["counters", "opt_state", "trainable"], 4 * s) for s in (4, 8, 10)]
    # what is saved: the checkpoint tree (no frozen parameters), only after the losses and parameters are checked
    assert store.events[:3] == [("settle",), ("check", 4), ("save", 4, ["counters", "opt_state", "trainable"], 16)]
    assert not any(policy_of(FakeStore(every=None)).due(s) for s in range(1, 11))   # no `:checkpoint`


def test_at_a_stop_the_policy_saves_the_last_completed_step_unless_it_is_saved():
    from sexpgpu_runtime.errors import Stopped
    store = FakeStore(every=None)
    stopped = policy_of(store).at_stop(Stopped(signal.SIGINT), state_at(6))
    assert (stopped.step, stopped.saved, stopped.exit_code) == (7, 6, 130)
    assert [e[:2] for e in store.events] == [("wait",), ("settle",), ("settle",), ("check", 6), ("save", 6), ("wait",)]
    again = FakeStore(every=3, latest=6)
    assert policy_of(again).at_stop(Stopped(signal.SIGTERM), state_at(6)).saved == 6
    assert again.events == [("wait",)]   # its checkpoint is there already: nothing written twice
