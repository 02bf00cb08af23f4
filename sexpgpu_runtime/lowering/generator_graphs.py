"""The generator's graphs: `generate.init`, `generate.step` and `generate.finish`, each jitted once per
run, and the trip loop that runs `generate.step` `:trips` times.

The trip loop is one of two (`TRIP_LOOPS`, docs/runtime.md "The trip loop", `default_trip_loop`):
`compiled` runs every trip of a group in one call, a `lax.while_loop` whose body is the trip graph
and which, before every trip, looks for a stop: in C on one CPU device (trip_look.py, no Python), else
by asking the host (an ordered `io_callback`, `TripWatch`); `host` calls the jitted trip graph once
per trip from a Python loop, the trip an i64 device array, so it never retraces. Both donate the
state on every backend and make the same bits. A stacked group
runs each phase's unstacked body once per copy (stacking.py `over_copies`), the batch and the state
stacked and the rest shared. With traced `categorical` temperatures (draw_check.py) the trip graph also
carries the record of the first bad one.
"""
from __future__ import annotations

import collections
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import io_callback

from sexpgpu_lang import ir

from .context import Tracer, check_result, unpack_ctx
from .draw_check import no_draw, note_draws, temperatures, traced_temperatures
from .lowering import run_phase
from ..weights.params import merge
from .stacking import over_copies
from .trip_look import TripLook, library as c_look_library

#: How many trips late the trip loop reads `:until`'s flag (`GeneratorGraphs.trips`): trip t's flag is
#: read before trip t + UNTIL_LAG is dispatched, while trips t+1 ... t+UNTIL_LAG-1 are queued.
UNTIL_LAG = 3

#: The trip loops (`RunOptions.trip_loop`): one compiled `lax.while_loop` per group, or a host loop of jitted trips.
TRIP_LOOPS = ("compiled", "host")


def default_trip_loop(one_device: bool) -> str:
    """The trip loop of a run that names none: `compiled` where its look before every trip is the
    handler in C (one CPU device, and the handler builds: trip_look.py), `host` elsewhere (a look
    from an `io_callback` makes every call of the loop slow: docs/runtime.md "The trip loop")."""
    return "compiled" if one_device and c_look_library() is not None else "host"


class TripWatch:
    """The host's side of the compiled trip loop's look before every trip.

    Each compiled loop calls `first` once before its first trip and `next` after each trip (ordered
    `io_callback`s without operands: an operand would cost a transfer per trip), in the order the
    loops were queued; `queued(look)` is called by the host as it queues a loop, with the function
    that decides, before each trip, whether that loop goes on (`look(trip) -> bool`; None: always).
    So the watch knows which loop and which trip each call is about without being told. An
    exception raised by `look` stops that loop and is kept in `error` for the host to raise."""

    def __init__(self, trips: int):
        self.trips = trips
        self.looks: collections.deque = collections.deque()   # one per queued loop, in queue order
        self.look = None
        self.trip = 0
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def take_error(self) -> BaseException | None:
        """The exception a `look` raised, if any, forgotten once taken (the host raises it)."""
        error, self.error = self.error, None
        return error

    def queued(self, look) -> None:
        """The host queued one more compiled loop, whose trips `look` decides on (None: never stops)."""
        self.looks.append(look)

    def first(self):
        """Before trip 0 of the next queued loop: whether it runs (a bool, numpy)."""
        with self.lock:
            self.look, self.trip = self.looks.popleft(), 0
            return self._ask()

    def next(self):
        """After a trip of the current loop: whether the next trip runs (True after the last trip)."""
        with self.lock:
            self.trip += 1
            return self._ask() if self.trip < self.trips else np.True_

    def _ask(self):
        if self.look is None:
            return np.True_
        try:
            return np.bool_(self.look(self.trip))
        except BaseException as e:   # raised on the host at its next look (run.signals.StopLooks.poll)
            if self.error is None:
                self.error = e
            return np.False_


def compiled_loop(step, trips: int, until: bool, sites: bool, watch: TripWatch, look: TripLook | None = None):
    """`step` (the trip graph, as jitted for the host loop) run `trips` times in one `lax.while_loop`:
    (trainable, frozen, state, rows[, draw]) -> (state, trips run[, draw]). Before every trip the
    loop looks for a stop: with `look` (trip_look.py), the handler in C called in the loop's
    condition with the step (`rows[0, 0]`) and the trip; else an ordered `io_callback` before trip 0
    and after each trip asks `watch` whether the next trip runs. The loop ends at `trips`, at a no,
    or (`until`) once the flag `step` returns beside the state holds, read on the device after every
    trip. `sites`: `step` takes and returns the traced temperatures' record."""
    yes = jax.ShapeDtypeStruct((), jnp.bool_)

    def loop(trainable, frozen, state, rows, *draw):
        # The step (0-based, context_row's first column): a look answers no only for a step not yet
        # committed. An evaluation pass's generator (`:pass`, the last column, > 0) runs after its step's
        # update, past abandoning (Trainer.run_pass): -1, which every look lets run.
        at = jnp.where(rows[0, 5] > 0, -1, rows[0, 0])

        def cond(c):
            t, _, _, done, go = c
            go = look.look(at, t, trips) if look is not None else go
            return (t < trips) & go & ~done

        def body(c):
            t, st, dr, done, _ = c
            out = step(trainable, frozen, st, t, rows, *dr)
            if sites:
                out, dr = out[0], (out[1],)
            if until:
                out, done = out
            go = jnp.bool_(True) if look is not None else io_callback(watch.next, yes, ordered=True)
            return t + 1, out, dr, done, go

        go = jnp.bool_(True) if look is not None else io_callback(watch.first, yes, ordered=True)
        start = (jnp.zeros((), jnp.int64), state, draw, jnp.zeros((), jnp.bool_), go)
        t, st, dr, _, _ = lax.while_loop(cond, body, start)
        return (st, t) + tuple(dr)
    loop.__name__ = "generate_trips"
    return loop


def jitted_loops(step, gen: ir.GenerateIR, sites: bool, watch: TripWatch, c_look: TripLook | None) -> dict:
    """`step` (the trip graph) as one `lax.while_loop` over `gen`'s trips (`compiled_loop`), jitted,
    the state donated: {"c": looking in C (where `c_look`), "watch": asking `watch` from a callback}."""
    loops = {"watch": compiled_loop(step, gen.trips, gen.until is not None, sites, watch)}
    if c_look is not None:
        loops["c"] = compiled_loop(step, gen.trips, gen.until is not None, sites, watch, c_look)
    return {k: jax.jit(f, donate_argnums=(2,)) for k, f in loops.items()}


class GeneratorGraphs:
    """The jitted generator phases of one run (`gen_init`, `gen_step`, `gen_finish` for a group of
    `layout.stack` copies; the `_1` graphs for one batch), built once; `generate` runs them."""

    def __init__(self, program: ir.Program, layout, tracer: Tracer, dp=None, trip_loop: str = "host"):
        self.p = program
        self.trip_loop = trip_loop   # one of TRIP_LOOPS
        self.watch = TripWatch(program.generate.trips)
        # The compiled loop's look in C (trip_look.py) on one CPU device; else (or with a hook) `watch`'s.
        self.c_look = TripLook() if trip_loop == "compiled" and dp is None and c_look_library() is not None else None
        self.dp = dp   # a sharding.DataParallel, or None on one device
        self.tracer = tracer
        gen = program.generate
        S = layout.stack
        counted = tracer.counted
        # The traced temperatures the trips check (draw_check.py): none, and the graphs are as without it.
        self.draw_sites = traced_temperatures(gen)
        self.draw = None   # the record of the first bad one after the last `trips` (None: nothing checked)
        self.trips_run = 0
        init, step, finish = self._phases(gen)
        checked = self._draw_checked if self.draw_sites else (lambda f: f)
        # The state is donated on every backend (the CPU's included): each trip's state replaces the last.
        donated = (2,)
        # generate.init also returns the group's batch and context rows: on one device they arrive as
        # numpy, and this call's copies on the device are what the group's later calls read.
        # On one device its outputs are committed to it, as the state and the later trips' outputs are:
        # otherwise a pass-through of the batch (an uncommitted input) comes back uncommitted, and the
        # host loop's second trip, its state committed, would compile the trip graph again.
        placed = {} if dp is not None else {"out_shardings": jax.sharding.SingleDeviceSharding(jax.devices()[0])}
        self.gen_init_1 = jax.jit(counted("generate.init", self._start(init)), **placed)
        self.gen_step_1 = jax.jit(counted("generate.step", checked(step)), donate_argnums=donated)
        self.gen_finish_1 = jax.jit(counted("generate.finish", finish))
        if S > 1:
            # each phase once per copy, the batch and the state stacked, the rest shared (stacking.py).
            self.gen_init = jax.jit(counted("generate.init stacked", self._start(over_copies(init, S, (2,)))),
                                    **placed)
            stacked_step = over_copies(step, S, (2,))
            if gen.until is not None:   # the group's trips end once every copy's `:until` holds
                stacked_step = self._all_done(stacked_step)
            self.gen_step = jax.jit(counted("generate.step stacked", checked(stacked_step)), donate_argnums=donated)
            self.gen_finish = jax.jit(counted("generate.finish stacked", over_copies(finish, S, (2,))))
            self.gen_trips = self._looped(counted("generate.step stacked", checked(stacked_step)))
        else:
            self.gen_init, self.gen_step, self.gen_finish = self.gen_init_1, self.gen_step_1, self.gen_finish_1
        # The compiled trip loops: the trip graph (traced once, under its own name) as a while loop's body.
        self.gen_trips_1 = self._looped(counted("generate.step", checked(step)))
        if S == 1:
            self.gen_trips = self.gen_trips_1
        self._trips = None

    @property
    def trip_values(self):
        """The trips as i64 device arrays, made once, at the first trip loop (a Python int would retrace)."""
        if self._trips is None:
            self._trips = [jnp.asarray(t, dtype=jnp.int64) for t in range(self.p.generate.trips)]
        return self._trips

    def _records(self, state):
        """The generator's state stays split along the mesh's `data` axis, one slice of records per device."""
        if self.dp is None:
            return state
        return self.dp.constrain_records(state, self.p.loaders[self.p.run.loader].batch)

    def _all_done(self, stacked_step):
        """A stacked trip whose `:until` flag is whether every copy's holds (the temperatures, with
        `draw_sites`, passed on)."""
        def all_done(out):
            st, done = out
            return st, jnp.all(done)

        def step(*args):
            out = stacked_step(*args)
            return (all_done(out[0]), out[1]) if self.draw_sites else all_done(out)
        return step

    def _looped(self, step):
        """`step` (the trip graph) as the compiled loops (`jitted_loops`)."""
        return jitted_loops(step, self.p.generate, bool(self.draw_sites), self.watch, self.c_look)

    def _draw_checked(self, step):
        """The trip graph of a generator with traced temperatures (`draw_sites`): `step`'s output and
        the run's record of the first bad one (`draw_check.no_draw`, one more argument), updated."""
        def checked(trainable, frozen, state, trip, rows, draw):
            out, temps = step(trainable, frozen, state, trip, rows)
            return out, note_draws(draw, temps, rows[0, 0], trip)
        return checked

    def _phases(self, gen: ir.GenerateIR):
        """The traced functions of `generate.init`, `generate.step` (with `:until`, the flag too) and
        `generate.finish`, before jitting."""
        sites = self.draw_sites
        fx = self.tracer.fx

        def init(trainable, frozen, batch, rows):
            out = run_phase(gen.init, [batch, unpack_ctx(rows)], merge(trainable, frozen), fx(True))
            out = {k: out[k] for k in gen.state.keys}
            check_result("generate.init", out, gen.state)
            return self._records(out)

        def step(trainable, frozen, state, trip, rows):
            """The new state (and, with `sites`, the trip's temperatures: `draw_check.temperatures`)."""
            effects = fx(True)
            out = run_phase(gen.step, [state, trip, unpack_ctx(rows)], merge(trainable, frozen), effects)
            out = {k: out[k] for k in gen.state.keys}
            check_result("generate.step", out, gen.state)
            return (self._records(out), temperatures(effects, sites)) if sites else self._records(out)

        def step_until(trainable, frozen, state, trip, rows):
            """`:step`, then `:until` on the new state: (state, bool scalar), one graph per trip."""
            out = step(trainable, frozen, state, trip, rows)
            out, temps = out if sites else (out, None)
            done = run_phase(gen.until, [out, unpack_ctx(rows)], merge(trainable, frozen), fx(True))
            flagged = (out, jnp.asarray(done, jnp.bool_))
            return (flagged, temps) if sites else flagged

        def finish(trainable, frozen, state, rows):
            if gen.finish is None:
                return state
            out = run_phase(gen.finish, [state, unpack_ctx(rows)], merge(trainable, frozen), fx(True))
            check_result("generate.finish", out, gen.finish_out)
            return self._records(out)

        return init, (step_until if gen.until is not None else step), finish

    @staticmethod
    def _start(init):
        def start(trainable, frozen, batch, rows):
            return batch, rows, init(trainable, frozen, batch, rows)
        return start

    def generate(self, trainable, frozen, batch, rows, stacked: bool, on_trip=None, draw=None):
        """Run the generator on one group (or one batch): `generate.init`, the trips, `generate.finish`.

        `batch` holds the loader's fields ([S B ...] when stacked) and `rows` the context rows, [S 6]
        i64 (`make_ctx`'s values per copy; `unpack_ctx`), as numpy on one device: `generate.init`'s call
        puts both on the device and returns the device copies, which every later call of the group
        reads (one transfer per group); on a mesh they come already placed. Returns (batch, rows,
        made), device arrays; nothing here waits for the device. `draw`: see `trips`."""
        init, finish = (self.gen_init, self.gen_finish) if stacked else (self.gen_init_1, self.gen_finish_1)
        batch, rows, state = init(trainable, frozen, batch, rows)
        state = self.trips(trainable, frozen, state, rows, stacked, on_trip, draw)
        return batch, rows, finish(trainable, frozen, state, rows)

    def trips(self, trainable, frozen, state, rows, stacked: bool, on_trip=None, draw=None):
        """The trip loop. Compiled (`trip_loop`): one call of the group's compiled loop (`_compiled_trips`),
        `on_trip(t) -> bool` asked on the host before every trip. Host (the default): for each
        trip t, `on_trip(t)` (the trainer's stop check, raising to stop) and one call of the
        jitted `generate.step` (stacked or not) with the trip as an i64 device array, the state staying on
        the device. Returns the state after the last trip (the generator's state keys, device arrays).
        Nothing here waits for the device: each call is queued (asynchronous dispatch).

        With `:until`, each trip's call also returns whether `:until` holds after it; the loop reads
        trip t's flag only before trip t + UNTIL_LAG, so it waits for a trip that finished while
        later ones are queued, never for the one just dispatched, and stops dispatching once a flag
        holds. The trips run after the flag held (at most UNTIL_LAG - 1) see a state whose finished
        rows the file freezes, so the result is the bits of all `:trips` (docs/language.md).
        `self.trips_run` is how many trips the last call ran.

        With traced temperatures to check (`draw_sites`), each trip also takes and returns the
        record of the first bad one (`draw_check.no_draw`): `draw`, a fresh one when None; `self.draw`
        is the record after the last trip, still on the device (read with `draw_check.bad_draw`)."""
        if self.draw_sites and draw is None:
            draw = no_draw(self.dp)
        if self.trip_loop == "compiled":
            return self._compiled_trips(trainable, frozen, state, rows, stacked, on_trip, draw)
        step = self.gen_step if stacked else self.gen_step_1
        until = self.p.generate.until is not None
        flags: collections.deque = collections.deque()
        self.trips_run = 0
        for t, trip in enumerate(self.trip_values):
            if until and len(flags) >= UNTIL_LAG and bool(flags.popleft()):
                break
            if on_trip is not None:
                on_trip(t)
            if self.draw_sites:
                state, draw = step(trainable, frozen, state, trip, rows, draw)
            else:
                state = step(trainable, frozen, state, trip, rows)
            if until:
                state, done = state
                flags.append(done)
            self.trips_run = t + 1
        self.draw = draw if self.draw_sites else None
        return state

    def _compiled_trips(self, trainable, frozen, state, rows, stacked: bool, look, draw):
        """`trips` as one call of the compiled loop (`_looped`). `look` None with `c_look`: the loop
        looks in C (trip_look.py); else `look(trip) -> bool` (None: always yes), called on the host
        before every trip (`TripWatch`), ends the loop with a False. `self.trips_run` is then a device
        scalar."""
        loops = self.gen_trips if stacked else self.gen_trips_1
        if look is None and "c" in loops:
            loop = loops["c"]
        else:
            loop = loops["watch"]
            self.watch.queued(look)
        out = loop(trainable, frozen, state, rows, *((draw,) if self.draw_sites else ()))
        state, self.trips_run = out[0], out[1]
        self.draw = out[2] if self.draw_sites else None
        return state
