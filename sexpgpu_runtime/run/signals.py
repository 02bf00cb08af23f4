"""Stop signals: SIGINT and SIGTERM are noted when they arrive and acted on where the loop looks.

A handler only records the signal; the training loop calls `StopSignals.check`
before every trip of the generator and between the phases of a step
(docs/dev/design.md#the-step), and `check` raises `Stopped`. So a stop never lands in
the middle of a checkpoint write or an optimizer update: the step in flight is
abandoned whole and the last completed state is what gets saved.

A second signal while the first is being handled (the final checkpoint is
being written, say) ends the process at once (`exit_now`: one line on
stderr, then `os._exit(128 + signum)`, 130 or 143), without unwinding: no
traceback, no wait on orbax's threads. That is safe because a checkpoint is
complete or absent (orbax renames it into place whole; a write cut short is
removed when the directory is next opened), and metrics.jsonl rows are
written whole.

The CLI installs a handler of its own before it imports anything slow (an
object with a `received` attribute, see sexpgpu_cli.main.EarlySignals);
`StopSignals` takes a signal that handler noted as its own first, and hands
its own back to it on exit, so a signal in the start-up or after the last
step is acted on too, and a later one is always a second.

`StopLooks` is the looking side: the looks a step makes for a stop (before each group, every
trip and the update), with the compiled trip loop's answers (generator_graphs.TripWatch).

Imports nothing from JAX or sexpgpu_lang.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

from ..errors import Stopped

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_now(signum: int) -> None:
    """End the process at once for a second stop signal: one line on stderr, then exit status
    128 + signum without unwinding (no traceback, no wait on other threads)."""
    name = signal.Signals(signum).name
    try:
        os.write(2, (f"sexpgpu: a second {name}: exiting now; the checkpoints already complete are kept "
                     "(one being written is discarded)\n").encode())
    finally:
        os._exit(128 + signum)


class StopSignals:
    """A context manager that notes SIGINT and SIGTERM while a run trains, and restores the old handlers after.

    Outside the main thread (where Python cannot install handlers) it installs
    nothing, and `check` never raises.
    """

    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS):
        self.signals = signals
        self.received: int | None = None
        self._old: dict[int, object] = {}
        self._listeners: list = []

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self._old[s] = old = signal.signal(s, self._note)
                pending = getattr(old, "received", None)   # noted by the CLI's start-up handler
                if pending is not None and self.received is None:
                    self.received = pending
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
            if self.received is not None and getattr(old, "received", 0) is None:
                old(self.received, None)   # noted by it as its first: a later signal is a second one
        self._old.clear()

    def listen(self, listener) -> None:
        """Call `listener()` when the first stop signal is noted (at once if it already was): the
        compiled trip loop's stop bit in C (lowering/trip_look.py), which no Python look reads."""
        self._listeners.append(listener)
        if self.received is not None:
            listener()

    def _note(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
            for listener in self._listeners:
                listener()
            return
        exit_now(signum)

    def check(self) -> None:
        """Raise `Stopped` if a stop signal has arrived since the run began."""
        if self.received is not None:
            raise Stopped(self.received)


class StopLooks:
    """The looks one run's steps make for a stop: `stop` (a StopSignals, or None: never stops),
    `on_trip(step, trip)` called just before each trip's look (or None; tests send signals from it),
    `watch` the compiled trip loops' generator_graphs.TripWatch (or None without a generator), and
    whether the trip loop is the compiled one (`compiled`). `committed` is the last step (0-based)
    whose update is queued: past abandoning (`commit`)."""

    def __init__(self, stop: StopSignals | None, on_trip, watch, compiled: bool, c_look=None):
        """`c_look`: the compiled loop's stop bit in C (lowering/trip_look.py), or None."""
        self.stop, self.on_trip, self.watch, self.compiled, self.c_look = stop, on_trip, watch, compiled, c_look
        self.committed = -1

    def poll(self) -> None:
        """Raise `Stopped` if a stop signal has arrived (a phase boundary: nothing half-done is kept), or
        what `on_trip` raised inside a compiled trip loop (generator_graphs.TripWatch)."""
        error = self.watch.take_error() if self.watch is not None else None
        if error is not None:
            raise error
        if self.stop is not None:
            self.stop.check()

    def commit(self, step: int) -> None:
        """The last look before step `step`'s update is queued, under the compiled loops' lock: a loop of
        this step that saw a stop (`trip_hook`) has it raised here; one that did not runs every trip."""
        with self.watch.lock if self.watch is not None else contextlib.nullcontext():
            self.poll()
            if self.c_look is not None and not self.c_look.commit(step):   # (a signal came)
                raise Stopped(self.stop.received)
            self.committed = step

    def trip_hook(self, step: int):
        """Before every trip of step `step`: `on_trip(step, trip)`, then the look for a stop: the host loop
        raises `Stopped`; the compiled loop's (from its callback) answers no once a signal came and the
        step is not committed (`commit` then raises it), so a loop cut short is never trained on. None:
        the compiled loop looks in C (no `on_trip`)."""
        def before_trip(trip: int):
            if self.on_trip is not None:
                self.on_trip(step, trip)
            self.poll()

        def look(trip: int) -> bool:
            if self.on_trip is not None:
                self.on_trip(step, trip)
            return not (self.stop is not None and self.stop.received is not None and self.committed < step)
        return before_trip if not self.compiled else (None if self.on_trip is None and self.c_look is not None else look)
