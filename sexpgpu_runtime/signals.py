"""Stop signals: SIGINT and SIGTERM are noted when they arrive and acted on where the loop looks.

A handler only records the signal; the training loop calls `StopSignals.check`
before every trip of the generator and between the phases of a step
(DESIGN.md section 5), and `check` raises `Stopped`. So a stop never lands in
the middle of a checkpoint write or an optimizer update: the step in flight is
abandoned whole and the last completed state is what gets saved.

A second signal while the first is being handled (the final checkpoint is
being written, say) is not ignored: the default action runs (SIGINT raises
KeyboardInterrupt, SIGTERM ends the process), which is safe because a
checkpoint is complete or absent.

Imports nothing from JAX or sexpgpu_lang.
"""
from __future__ import annotations

import os
import signal
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(Exception):
    """Raised by `StopSignals.check` once a stop signal has arrived."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        """The signal's name, `SIGINT` or `SIGTERM`."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process a signal ended: 128 + the signal number (130, 143)."""
        return 128 + self.signum


class StopSignals:
    """A context manager that notes SIGINT and SIGTERM while a run trains, and restores the old handlers after.

    Outside the main thread (where Python cannot install handlers) it installs
    nothing, and `check` never raises.
    """

    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS):
        self.signals = signals
        self.received: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self._old[s] = signal.signal(s, self._note)
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old.clear()

    def _note(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
            return
        # A second signal: give it its default meaning now.
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def check(self) -> None:
        """Raise `Stopped` if a stop signal has arrived since the run began."""
        if self.received is not None:
            raise Stopped(self.received)
