"""What `sexpgpu run` shows while it trains (sexpgpu_runtime/run/loop.py and report.py): each step
reported when it ends, the host at most one step ahead of what is shown, each logged row at its
step's end, and the steady rate (steps/s, tokens/s) without the first step's compilation or the
time of passes and saves. Unit tests of the loop and the reporter's pieces, on a fake device."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sexpgpu_runtime.run import loop as loop_mod
from sexpgpu_runtime.run.report import Reporter, Throughput, batch_tokens, rate_text
from sexpgpu_runtime.run.state import StepReport


class Marker:
    """A device value that is ready once the fake device has run its step, or once waited for."""

    def __init__(self, step: int, events: list):
        self.step, self.events, self.ready = step, events, False

    def is_ready(self) -> bool:
        return self.ready

    def block_until_ready(self):
        if not self.ready:
            self.events.append(("wait", self.step))
            self.ready = True
        return self


class FakeDevice:
    """The run's face the loop sees (loop.LoopParts): a device `behind` steps behind the host (a step's
    marker is ready once step + behind is queued)."""

    def __init__(self, steps: int, log_every: int, behind: int = 3, passes=()):
        self.steps, self.log_every, self.passes, self.events, self.behind = steps, log_every, passes, [], behind
        self.markers: dict[int, Marker] = {}

    def parts(self) -> loop_mod.LoopParts:
        checks = SimpleNamespace(check_records=lambda bad, draw, *a: None, check_row=lambda row: None)
        feed = SimpleNamespace(close=lambda: None)
        return loop_mod.LoopParts(self.step, self.run_pass, self.settle, checks, lambda step: 0.1,
                                  lambda records, steps: feed, self.log_every, self.passes)

    def settle(self):
        for m in self.markers.values():
            m.block_until_ready()

    def run_pass(self, ps, state, samples):
        self.events.append(("pass", state.step))
        return {f"{ps.name}/loss": 1.0}

    def step(self, state, samples):
        done = state.step + 1
        self.events.append(("queue", done))
        for k, m in self.markers.items():   # the device has run every step `behind` before this one
            if k <= done - self.behind:
                m.ready = True
        m = self.markers[done] = Marker(done, self.events)
        return SimpleNamespace(step=done, records=0), StepReport([float(done)], [], [], (m, m), None, 64)


class FakeReporter:
    def __init__(self, events: list):
        self.events = events

    def ended(self, done, tokens=None):
        self.events.append(("ended", done))

    def pause(self, seconds):
        self.events.append(("pause", round(seconds, 6) >= 0))

    def log(self, row, done):
        self.events.append(("log", done))


def run_loop(device: FakeDevice) -> list:
    loop = loop_mod.Loop(device.parts(), FakeReporter(device.events), device.steps)
    loop.run(SimpleNamespace(step=0, records=0))
    return device.events


def test_each_step_is_reported_when_it_ends_and_the_host_is_at_most_one_step_ahead():
    events = run_loop(FakeDevice(steps=12, log_every=1))
    ended = [s for e, s in events if e == "ended"]
    assert ended == list(range(1, 13))   # every step once, in order
    for i, (e, n) in enumerate(events):
        if e == "queue":   # when step n is queued, every step before n - 1 has been shown
            shown = {s for k, s in events[:i] if k == "ended"}
            assert set(range(1, n - 1)) <= shown, (n, shown)
    # a slow device: the loop waits for step n - 1 right after queueing step n
    assert [s for e, s in events if e == "wait"][:3] == [1, 2, 3]


def test_each_logged_row_comes_right_after_its_step_ends_not_in_a_burst():
    events = run_loop(FakeDevice(steps=12, log_every=2))
    logs = [i for i, (e, _) in enumerate(events) if e == "log"]
    assert [events[i][1] for i in logs] == [1, 2, 4, 6, 8, 10, 12]
    for i in logs:
        assert events[i - 1] == ("ended", events[i][1])   # at the moment its step is shown ended


def test_a_pass_waits_for_every_queued_step_and_its_time_is_left_out_of_the_rate():
    ps = SimpleNamespace(name="held", every=5)
    events = run_loop(FakeDevice(steps=6, log_every=100, passes=(ps,)))
    at = events.index(("pass", 5))
    assert {s for e, s in events[:at] if e == "ended"} == {1, 2, 3, 4, 5}
    assert events[at + 1:at + 3] == [("log", 5), ("pause", True)]


def test_the_steady_rate_leaves_out_the_first_step_and_paused_time():
    now = [0.0]
    t = Throughput(start=0, clock=lambda: now[0])
    assert t.rates() == (None, None)
    now[0] = 30.0   # the first step: 30 s of compilation
    t.ended(1, 100)
    assert t.rates() == (None, None)
    for k in range(2, 12):   # ten steps of 0.5 s, 100 tokens each
        now[0] += 0.5
        t.ended(k, 100)
    assert t.rates() == pytest.approx((2.0, 200.0))
    now[0] += 10.0
    t.pause(10.0)   # a pass of 10 s, then one more step
    now[0] += 0.5
    t.ended(12, 100)
    assert t.rates() == pytest.approx((2.0, 200.0))
    plain = Throughput(start=5, clock=lambda: now[0])
    plain.ended(6, None)
    now[0] += 1.0
    plain.ended(7, None)
    assert plain.rates() == (1.0, None)


def test_the_rate_as_the_terminal_shows_it():
    assert rate_text(None, None) == "- steps/s"
    assert rate_text(31.94, 48_912.0) == "31.9 steps/s  48.9k tokens/s"
    assert rate_text(117.2, 1.5e6) == "117 steps/s  1.5M tokens/s"
    assert rate_text(2.0, None) == "2 steps/s"


def test_a_batch_counts_the_tokens_of_its_largest_integer_rows():
    batch = {"tokens": np.zeros((4, 64), np.int32), "next": np.zeros((4, 64), np.int32),
             "stride": np.zeros((4, 1), np.int32), "weight": np.zeros((4, 64, 2), np.float32),
             "length": np.zeros((4,), np.int32)}
    assert batch_tokens(batch, stacked=False) == 256   # a window and its shifted target count once
    assert batch_tokens({"row": np.zeros((2, 4, 8), np.int32), "n": np.zeros((2, 4), np.int32)}, stacked=True) == 64
    assert batch_tokens({"wave": np.zeros((4, 16), np.float32)}, stacked=False) == 0


def test_plain_lines_show_the_steady_rate_once_known(tmp_path, capsys):
    rep = Reporter(tmp_path, total=3, progress=False, quiet=False, name="t")
    rep.ended(1, 10)
    rep.log({"step": 1, "loss": 2.0}, 1)
    rep.ended(2, 10)
    rep.log({"step": 2, "loss": 1.5}, 2)
    rep.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "step 1/3  loss 2"   # the first step holds the compilation: no rate yet
    assert lines[1].startswith("step 2/3  loss 1.5  ") and lines[1].endswith(" tokens/s")
    assert " steps/s  " in lines[1]


@pytest.mark.slow
def test_a_real_run_shows_each_step_before_the_host_is_two_steps_past_it(tmp_path, capsys):
    # When the host starts step k's generator, the line of step k - 2 is on the terminal already: a stop
    # signal sent at a line lands at most two steps after it (queued eight ahead, it landed six later).
    from helpers import program_of, variant
    from sexpgpu_runtime import RunOptions, train
    text = variant(":log (:every 50))", ":log (:every 1))")
    shown_at: dict[int, int] = {}

    def on_trip(step: int, trip: int) -> None:   # `step` steps completed: the host starts step + 1
        if trip == 0:
            lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("step ")]
            shown_at[step + 1] = max([int(ln.split()[1].split("/")[0]) for ln in lines] + [shown_at.get(step, 0)])
    train(program_of(text, str(tmp_path / "run.sx")),
          RunOptions(steps=30, run_dir=tmp_path / "run", progress=False), on_trip=on_trip)
    assert all(shown_at[k] >= k - 2 for k in range(3, 31)), shown_at


def test_the_bar_shows_the_metrics_the_file_names(tmp_path):
    """`:log (:show [:loss :reward])`: the progress bar's text holds each named metric of the row."""
    rep = Reporter(tmp_path, total=3, progress=True, quiet=False, name="t", shown=("loss", "reward"))
    try:
        assert rep.bar.tasks[0].fields["shown"] == "loss -  reward -"
        rep.log({"step": 1, "loss": 2.0, "lr": 0.1, "reward": 0.25}, 1)
        assert rep.bar.tasks[0].fields["shown"] == "loss 2.0000  reward 0.2500"
    finally:
        rep.close()


def test_a_resume_whose_first_step_ends_inside_a_save_shows_the_true_rate():
    # The first step after a resume (its compilation) ends while a checkpoint step waits for the queued
    # steps: that wait is the step's compute, not the save's, so it stays out of the paused time.
    now = [0.0]
    t = Throughput(start=3, clock=lambda: now[0])
    now[0] = 30.0                 # step 4: the restore and the compilation
    t.ended(4, 100)
    now[0] = 35.0                 # its checkpoint's save, timed from before the step ended
    t.pause(35.0)
    assert t.pending == pytest.approx(5.0)
    now[0] += 0.5
    t.ended(5, 100)
    assert t.rates() == pytest.approx((2.0, 200.0))


def test_no_rate_is_shown_over_a_near_zero_window():
    now = [0.0]
    t = Throughput(start=0, clock=lambda: now[0])
    t.ended(1)
    t.ended(2)                    # the same clock reading: no window yet
    assert t.rates() == (None, None)
    now[0] = 1e-12
    t.ended(3)
    assert t.rates() == (None, None)
    now[0] = 1.0
    t.ended(4)
    assert t.rates() == pytest.approx((3.0, None))


class RatedReporter:
    """The loop's reporter reduced to the steady rate, on the fake device's clock."""

    def __init__(self, throughput: Throughput):
        self.throughput = throughput

    def ended(self, done, tokens=None):
        self.throughput.ended(done, tokens)

    def pause(self, seconds):
        self.throughput.pause(seconds)

    def log(self, row, done):
        pass


class FakeSaves:
    """The checkpoint policy's face the loop sees: a save every `every` steps and at the last."""

    def __init__(self, events: list, every: int, last: int):
        self.events, self.every, self.last = events, every, last

    def due(self, step: int) -> bool:
        return step % self.every == 0 or step == self.last

    def after_step(self, state) -> None:
        if self.due(state.step):
            self.events.append(("save", state.step))


def test_the_loop_counts_the_queued_steps_compute_at_a_save_in_the_rate(monkeypatch):
    # A resume from step 3 to 5 with a checkpoint every 2 steps: step 4 (30 s: its compilation) ends
    # while step 4's save waits for it; each save takes 5 s; step 5 computes for 1 s.
    device = FakeDevice(steps=5, log_every=1)
    cost = {("wait", 4): 30.0, ("wait", 5): 1.0, ("save", 4): 5.0, ("save", 5): 5.0}
    clock = lambda: sum(cost.get(e, 0.0) for e in device.events)   # noqa: E731
    monkeypatch.setattr(loop_mod, "time", SimpleNamespace(perf_counter=clock))
    throughput = Throughput(start=3, clock=clock)
    loop = loop_mod.Loop(device.parts(), RatedReporter(throughput), device.steps, FakeSaves(device.events, 2, 5))
    loop._steps(SimpleNamespace(step=3, records=0))
    assert ("save", 4) in device.events and ("save", 5) in device.events
    assert throughput.paused == pytest.approx(5.0)   # step 4's save; step 5's is after its window
    assert throughput.rates() == pytest.approx((1.0, 64.0))
