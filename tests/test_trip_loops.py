"""The generator's two trip loops (generator_graphs.TRIP_LOOPS): the compiled loop (one
`lax.while_loop` per group, the host asked before every trip) trains the host loop's (the
default's) bits, stacked,
unstacked, with `:until` and with a traced temperature; a stop seen inside a compiled loop abandons
the step in flight and the resume is bit-exact; the `TripWatch` maps each callback to its loop
and trip."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import jax
import numpy as np
import pytest

from helpers import program_of, variant
from test_until import UNTIL

GREEDY = "(sum (where (= column (- at 1)) (argmax (model row)) 0)"


def train_with(text: str, run_dir: Path, steps: int, loop: str, on_trip=None, **kw):
    from sexpgpu_runtime import RunOptions, train
    return train(program_of(text, str(run_dir / "run.sx")),
                 RunOptions(steps=steps, run_dir=run_dir, quiet=True, trip_loop=loop, **kw), on_trip=on_trip)


def flat(tree):
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(tree)}


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_same(a, b):
    fa, fb = flat(a), flat(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        np.testing.assert_array_equal(fa[k], fb[k], err_msg=k)


LOGGED = variant(":log (:every 50))", ":log (:every 1))")
CASES = {
    "stacked": LOGGED,
    "unstacked": variant(":stack 2", ":stack 1", LOGGED),
    "until": variant(":log (:every 50))", ":log (:every 1))", UNTIL),
    "temperature": variant(GREEDY, "(sum (where (= column (- at 1)) (categorical (model row) :salt 1 "
                                   ":temperature (+ 0.5 (cast (getf ctx :step) :f32))) 0)", LOGGED),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_compiled_loop_trains_the_host_loops_bits(case, tmp_path):
    text = CASES[case]
    host = train_with(text, tmp_path / "host", 4, "host")
    compiled = train_with(text, tmp_path / "compiled", 4, "compiled")
    assert compiled.traces == host.traces   # each graph traced once either way, under the same names
    assert_same(compiled.trainable, host.trainable)
    assert rows(tmp_path / "compiled") == rows(tmp_path / "host")


@pytest.mark.slow
def test_a_stop_inside_the_compiled_loop_abandons_the_step_and_the_resume_is_bit_exact(tmp_path):
    from sexpgpu_runtime import RunStopped
    full = train_with(LOGGED, tmp_path / "full", 10, "compiled")
    seen = []

    def before_trip(step, trip):   # called on the host from the loop's callback, before the trip
        seen.append((step, trip))
        if (step, trip) == (4, 3):
            os.kill(os.getpid(), signal.SIGTERM)

    d = tmp_path / "stopped"
    with pytest.raises(RunStopped) as stop:
        train_with(LOGGED, d, 10, "compiled", on_trip=before_trip)
    # the signal lands in step 5 (0-based 4) or, if its update was queued first, the next one
    assert stop.value.step in (5, 6) and stop.value.saved == stop.value.step - 1
    assert seen[:4 * 6] == [(s, t) for s in range(4) for t in range(6)]   # every trip looked at, in order
    assert [r["step"] for r in rows(d)] == list(range(1, stop.value.saved + 1))
    resumed = train_with(LOGGED, d, 10, "compiled", resume=True)
    assert resumed.start == stop.value.saved
    assert_same(resumed.trainable, full.trainable)
    assert rows(d) == rows(tmp_path / "full")


def test_a_no_ends_the_compiled_loop_before_that_trip(tmp_path):
    """The look before trip 2 says no: the loop runs trips 0 and 1 only, and the state is theirs."""
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime.run.train import Trainer
    from helpers import FIXTURE
    text = variant(":stack 2", ":stack 1", Path(FIXTURE).read_text())
    tr = Trainer(program_of(text, str(tmp_path / "run.sx")), RunOptions(run_dir=tmp_path, quiet=True,
                                                                        trip_loop="compiled"))
    g, st = tr.graphs, tr.initial_state()
    batch, rows_, _ = tr.batches.host_group(0, 0, 0)
    looked = []

    def look(trip):
        looked.append(trip)
        return trip < 2

    def start():
        return g.gen_init_1(st.trainable, st.frozen, batch, rows_)[2]

    cut = g.trips(st.trainable, st.frozen, start(), rows_, False, look)
    assert int(g.trips_run) == 2 and looked == [0, 1, 2]
    host = Trainer(program_of(text, str(tmp_path / "run.sx")), RunOptions(run_dir=tmp_path, quiet=True,
                                                                              trip_loop="host")).graphs
    state = start()
    for t in range(2):
        state = host.gen_step_1(st.trainable, st.frozen, state, host.generator.trip_values[t], rows_)
    for k in cut:
        np.testing.assert_array_equal(np.asarray(cut[k]), np.asarray(state[k]), err_msg=k)


def test_the_watch_maps_each_callback_to_its_loop_and_trip():
    from sexpgpu_runtime.lowering.generator_graphs import TripWatch
    w = TripWatch(3)
    seen = []
    w.queued(lambda t: seen.append(("a", t)) or True)
    w.queued(None)
    w.queued(lambda t: seen.append(("c", t)) or t < 1)
    assert [bool(w.first()), bool(w.next()), bool(w.next()), bool(w.next())] == [True] * 4   # loop a: 3 trips
    assert [bool(w.first()), bool(w.next())] == [True, True]                                  # loop b: no look
    assert [bool(w.first()), bool(w.next())] == [True, False]                                 # loop c: stops
    assert seen == [("a", 0), ("a", 1), ("a", 2), ("c", 0), ("c", 1)]

    def boom(t):
        raise KeyboardInterrupt
    w.queued(boom)
    assert not w.first() and isinstance(w.error, KeyboardInterrupt)


def _c_trainer(tmp_path):
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime.run.train import Trainer
    from runfile import RunFile
    text = RunFile.fixture().set("run :stack", "1")
    return Trainer(program_of(text, str(tmp_path / "run.sx")), RunOptions(run_dir=tmp_path, quiet=True)), text


def test_the_default_loop_on_one_cpu_device_is_the_compiled_one_looking_in_c(tmp_path):
    from sexpgpu_runtime.lowering.trip_look import library, why_not
    assert library() is not None, why_not()   # a C compiler is on this machine
    tr, _ = _c_trainer(tmp_path)
    assert tr.trip_loop == "compiled" and tr.graphs.generator.c_look is not None
    assert tr.looks.trip_hook(0) is None   # no Python look: the loop looks in C
    from sexpgpu_runtime.run.signals import StopLooks
    gen = tr.graphs.generator
    hooked = StopLooks(None, lambda step, trip: None, gen.watch, True, gen.c_look)
    assert callable(hooked.trip_hook(0))   # a Python hook must run before each trip: the callback's look


def test_a_stop_seen_in_c_ends_the_loop_before_that_trip(tmp_path):
    """A stop asked for just before trip 2 (the third look): the loop runs trips 0 and 1, its state is
    theirs, and the step is not committed."""
    tr, text = _c_trainer(tmp_path)
    g, st = tr.graphs, tr.initial_state()
    look = g.generator.c_look
    batch, rows_, _ = tr.batches.host_group(0, 0, 0)

    def start():
        return g.gen_init_1(st.trainable, st.frozen, batch, rows_)[2]

    whole = g.trips(st.trainable, st.frozen, start(), rows_, False, None)
    assert int(g.trips_run) == tr.program.generate.trips
    look.stop_at(3)
    cut = g.trips(st.trainable, st.frozen, start(), rows_, False, None)
    assert int(g.trips_run) == 2 and not look.commit(0)
    host = host_graphs(text, tmp_path)
    state = start()
    for t in range(2):
        state = host.gen_step_1(st.trainable, st.frozen, state, host.generator.trip_values[t], rows_)
    for k in cut:
        np.testing.assert_array_equal(np.asarray(cut[k]), np.asarray(state[k]), err_msg=k)
    assert any(not np.array_equal(np.asarray(cut[k]), np.asarray(whole[k])) for k in cut)


def host_graphs(text, tmp_path):
    from sexpgpu_runtime import RunOptions
    from sexpgpu_runtime.run.train import Trainer
    return Trainer(program_of(text, str(tmp_path / "run.sx")), RunOptions(run_dir=tmp_path, quiet=True,
                                                                          trip_loop="host")).graphs


def test_a_committed_step_runs_every_trip_after_a_stop_and_the_next_step_none(tmp_path):
    """The commit and the stop are one word in C: once step 0 is committed (its update queued), its
    loop, wherever it is, runs every trip; step 1's loop runs none and step 1 cannot be committed; an
    evaluation pass's loop runs every trip."""
    tr, _ = _c_trainer(tmp_path)
    g, st = tr.graphs, tr.initial_state()
    look = g.generator.c_look
    assert look.commit(0)
    look.stop()
    batch, rows0, _ = tr.batches.host_group(0, 0, 0)
    _, rows1, _ = tr.batches.host_group(1, 0, 0)
    g.trips(st.trainable, st.frozen, g.gen_init_1(st.trainable, st.frozen, batch, rows0)[2], rows0, False, None)
    assert int(g.trips_run) == tr.program.generate.trips
    g.trips(st.trainable, st.frozen, g.gen_init_1(st.trainable, st.frozen, batch, rows1)[2], rows1, False, None)
    assert int(g.trips_run) == 0 and not look.commit(1)
    passed = rows1.copy()
    passed[0, 5] = 1   # `:pass` 1: an evaluation pass's generator, past abandoning, runs every trip
    g.trips(st.trainable, st.frozen, g.gen_init_1(st.trainable, st.frozen, batch, passed)[2], passed, False, None)
    assert int(g.trips_run) == tr.program.generate.trips


def test_without_a_c_compiler_the_look_is_the_callbacks_and_the_default_loop_the_hosts(tmp_path, monkeypatch):
    from sexpgpu_runtime.lowering import trip_look
    from sexpgpu_runtime.lowering.generator_graphs import default_trip_loop
    monkeypatch.setattr(trip_look, "_state", {})
    monkeypatch.setenv("SEXPGPU_FFI_CACHE", str(tmp_path / "ffi"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert trip_look.library() is None and "could not be built" in trip_look.why_not()
    assert default_trip_loop(True) == "host" and not list((tmp_path / "ffi").glob("*.so"))


@pytest.mark.slow
def test_a_signal_during_the_c_looked_loop_abandons_the_step_and_the_resume_is_bit_exact(tmp_path):
    """A real SIGTERM sent while the default loop (compiled, looking in C) trains: whatever phase it
    lands in, the run stops with the last completed step saved and the resume trains the bits of an
    uninterrupted run."""
    import threading
    import time
    from sexpgpu_runtime import RunStopped
    STEPS = 60   # (many steps after the first row, so the signal lands before the run's end)
    full = train_with(LOGGED, tmp_path / "full", STEPS, None)
    d = tmp_path / "stopped"

    def send():
        while not (d / "metrics.jsonl").exists() or not (d / "metrics.jsonl").stat().st_size:   # step 1's row
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=send, daemon=True).start()
    with pytest.raises(RunStopped) as stop:
        train_with(LOGGED, d, STEPS, None)
    assert stop.value.saved == stop.value.step - 1 and stop.value.saved >= 1
    assert [r["step"] for r in rows(d)] == list(range(1, stop.value.saved + 1))
    resumed = train_with(LOGGED, d, STEPS, None, resume=True)
    assert resumed.start == stop.value.saved
    assert_same(resumed.trainable, full.trainable)
    assert rows(d) == rows(tmp_path / "full")
