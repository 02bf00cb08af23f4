"""Reading ahead of the device: the training batches made on a background thread, through a bounded queue.

The training loop takes its batches in a fixed order: the batch at records
`start`, `start + B`, `start + 2B` ... up to the run's last step. `Prefetch`
makes them in that order on one daemon thread, at most `DEPTH` ahead, so the
loader's work (positional reads from a token file, a widening copy) overlaps
the device's step instead of preceding it. The batches are the ones the
loop would have read itself, bit for bit (the position is the whole loader
state), so prefetching changes no result. Asked for a position other than
the next one (a resume, a test), it starts over from there.

`stats()` is what the run summary reports: seconds the thread spent making
batches (the loader's own cost) and seconds the loop waited for one (what
the device may have waited).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

#: Batches made ahead of the loop at most (each waits in memory on the host).
DEPTH = 4


@dataclass(frozen=True)
class ReadStats:
    """What reading the training batches cost a run: `batches` taken, `read_s` seconds the thread
    spent making them (the loader's own cost), `wait_s` seconds the loop waited for one."""

    batches: int = 0
    read_s: float = 0.0
    wait_s: float = 0.0


class Prefetch:
    """Batches `read(position)` for positions `start, start + step, ...` below `end`, made ahead on a thread.

    `take(position)` returns `read(position)`; an exception `read` raised on the thread is
    raised here, in the loop, at the batch it belongs to.
    """

    def __init__(self, read, step: int, end: int, depth: int = DEPTH):
        self.read, self.step, self.end, self.depth = read, step, end, depth
        self.read_s = 0.0
        self.wait_s = 0.0
        self.batches = 0
        self._next = None
        self._thread = None
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=depth)

    def _start(self, position: int) -> None:
        self.close()
        self._stop = threading.Event()
        self._queue = queue.Queue(maxsize=self.depth)
        self._next = position
        self._thread = threading.Thread(target=self._run, args=(position, self._stop, self._queue),
                                        name="sexpgpu-prefetch", daemon=True)
        self._thread.start()

    def _run(self, position: int, stop: threading.Event, out: queue.Queue) -> None:
        while position < self.end and not stop.is_set():
            t0 = time.perf_counter()
            try:
                item = (position, self.read(position), None)
            except BaseException as e:   # handed to the loop, which raises it at this batch
                item = (position, None, e)
            self.read_s += time.perf_counter() - t0
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item[2] is not None:
                return
            position += self.step

    def take(self, position: int):
        """The batch at `position` (made ahead when it is the next one; read here past `end`)."""
        if position >= self.end:
            return self.read(position)
        if position != self._next:
            self._start(position)
        t0 = time.perf_counter()
        got, batch, error = self._queue.get()
        self.wait_s += time.perf_counter() - t0
        self.batches += 1
        self._next = position + self.step
        if error is not None:
            self._next = None
            raise error
        assert got == position
        return batch

    def close(self) -> None:
        """Stop the thread (it ends within 0.1 s; it is a daemon, so it never holds up an exit)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=1.0)
            self._thread = None

    def stats(self) -> ReadStats:
        """The batches taken so far, the seconds making them and the seconds waiting for them."""
        return ReadStats(self.batches, self.read_s, self.wait_s)
