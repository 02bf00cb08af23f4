"""`run`'s first signal handler: SIGINT and SIGTERM noted from the process's first moments.

Imports only the standard library (typer lazily, once it is loaded anyway), so the console
script installs it before typer, the front end, JAX or orbax are imported.
"""
from __future__ import annotations

import sys


class EarlySignals:
    """`run`'s SIGINT/SIGTERM handler from its first line, before the front end, JAX and orbax are
    imported (seconds under load): the first signal is noted (`received`), a second ends the
    process at once with 128 + its number (as sexpgpu_runtime.run.signals.exit_now does; that module
    cannot be imported this early, its package imports JAX). The training loop's `StopSignals`
    takes a noted signal as its own and hands its own back, so the one protocol spans the run."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.old: dict = {}   # the handlers `install` replaced, by signal number

    #: The one installed by the console script for `sexpgpu run` (`install_first`), if any.
    first: "EarlySignals | None" = None

    #: The console script's handler (`install_first`): it stays installed past `run` (`restore`
    #: keeps noting signals, `_late`) until the process ends (`end_process`).
    console: "EarlySignals | None" = None
    #: The signal that arrived after `run` had returned (said in one line), if any.
    late: int | None = None

    @classmethod
    def install_first(cls) -> None:
        """Install one before anything else is imported (`sexpgpu_cli.main()` for `run`), and register
        `end_process` as the last thing the process does (atexit runs the first registered last)."""
        import atexit
        cls.first = cls.console = cls.install()
        atexit.register(cls.end_process)

    @classmethod
    def take(cls) -> "EarlySignals":
        """The one `install_first` installed (once), else a new one installed now."""
        handler, cls.first = cls.first, None
        return handler if handler is not None else cls.install()

    @classmethod
    def install(cls) -> "EarlySignals":
        """Install one for SIGINT and SIGTERM (in the main thread; elsewhere it installs nothing)."""
        import signal
        import threading
        handler = cls()
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                handler.old[s] = signal.signal(s, handler)
        return handler

    def restore(self) -> None:
        """Put back the handlers `install` replaced (once `run` returns or raises). The console
        script's own instead goes on noting signals (`_late`) until the process ends: after the
        run's last line, Python's teardown (threads joined, atexit, then some 2 s freeing JAX's
        modules with the default handlers back) would otherwise be ended by a SIGTERM with
        status -15 and nothing said, where docs/checkpoints.md promises exit 0 and a line."""
        import signal
        if self is EarlySignals.console and self.old:
            for s in self.old:
                signal.signal(s, self._late)
            return
        for s, old in self.old.items():
            signal.signal(s, old)
        self.old.clear()

    #: The status the command exits with (`sexpgpu_cli.main()` sets it when `run` returns).
    status: int = 0

    def _late(self, signum, frame) -> None:
        """A signal after `run` returned: the run is complete (or had failed, and said so), so the
        process ends as it would have, saying so in one line; a second one ends it at once."""
        import os
        import signal
        name = signal.Signals(signum).name
        if EarlySignals.late is None:
            EarlySignals.late = signum
            os.write(2, f"sexpgpu: {name} arrived after the run had ended; it exits as it would have\n".encode())
            return
        os.write(2, f"sexpgpu: a second {name}: exiting now\n".encode())
        os._exit(128 + signum)

    @classmethod
    def end_process(cls) -> None:
        """The last atexit callback of `sexpgpu run`: every other one has run (orbax's and JAX's
        included), so the process ends here with its status, its output flushed, instead of in
        the interpreter's teardown of JAX's modules, where Python's signal handlers are gone
        (a stop signal there would end it by the signal, after a run that had finished)."""
        import os
        import sys
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(cls.status)

    def __call__(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
            return
        import os
        import signal
        os.write(2, f"sexpgpu: a second {signal.Signals(signum).name}: exiting now\n".encode())
        os._exit(128 + signum)

    def stop_if_received(self) -> None:
        """Exit 128 + the signal's number, saying so, if one arrived while the run was starting."""
        if self.received is not None:
            import signal
            name = signal.Signals(self.received).name
            print(f"sexpgpu: stopped by {name} while starting, before any step; nothing was trained or written",
                  file=sys.stderr)
            import typer
            raise typer.Exit(128 + self.received)
