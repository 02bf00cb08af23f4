"""The compiled trip loop's look for a stop before every trip, in C: an XLA FFI handler on the CPU.

`trip_look.c` (beside this file) holds one word per slot (one slot per run's generator): whether a
stop was asked for, and the last committed step (the last whose update is queued). Inside the
compiled loop (generator_graphs.compiled_loop) the look before each trip is a call of that handler
(`jax.ffi.ffi_call`, no Python, no host callback), so the graph keeps JAX's fast dispatch path and a
look costs about 0.1 us instead of an `io_callback`'s 10-40 us and its slow dispatch (0.5 ms a call).
The host sets the stop bit when a signal arrives (`TripLook.stop`) and commits each step
(`TripLook.commit`) in one compare-and-swap: a step whose loop may have been cut short is never
committed. docs/runtime.md "The trip loop".

The library is built on first use with the C compiler (`$CC`, else `cc`, `gcc` or `clang`) against
JAX's FFI headers (`jax.ffi.include_dir()`), into `$SEXPGPU_FFI_CACHE` (else
`$XDG_CACHE_HOME/sexpgpu/ffi`, default `~/.cache/sexpgpu/ffi`), named by a hash of the source, the
header and jaxlib's version, so each machine builds it once (about 0.1 s). Where it cannot be built
or loaded (no compiler, a read-only cache, another platform than the CPU), `library()` is None and
the compiled loop asks the host through an `io_callback` instead (generator_graphs.TripWatch).
"""
from __future__ import annotations

import ctypes
import hashlib
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import jax
import jax.numpy as jnp

SOURCE = Path(__file__).with_name("trip_look.c")
#: The FFI target's name, registered for the CPU platform.
TARGET = "sexpgpu_trip_look"
#: How many slots the library holds (trip_look.c's TRIP_LOOK_SLOTS); slots are reused round-robin.
SLOTS = 1024

_lock = threading.Lock()
_state: dict = {}   # "lib": the loaded library or None, once tried; "why": why not
_slots = itertools.count()


def _cache_dir() -> Path:
    env = os.environ.get("SEXPGPU_FFI_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sexpgpu" / "ffi"


def _build() -> Path:
    """The built library's path (built now if this machine has not yet). Raises OSError or
    subprocess.CalledProcessError where it cannot be built."""
    include = Path(jax.ffi.include_dir())
    header = include / "xla" / "ffi" / "api" / "c_api.h"
    digest = hashlib.sha256(SOURCE.read_bytes() + header.read_bytes() + jax.lib.__version__.encode())
    out = _cache_dir() / f"trip_look-{digest.hexdigest()[:16]}.so"
    if out.exists():
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise OSError("no C compiler (cc, gcc or clang) on PATH")
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-std=c11", f"-I{include}", str(SOURCE), "-o", tmp],
                       check=True, capture_output=True, timeout=120)
        os.replace(tmp, out)   # whole or absent: another process may be building the same file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def library():
    """The handler library (a ctypes.CDLL), built, loaded and registered with XLA for the CPU on the
    first call; None where the backend is not the CPU or it cannot be built (`why_not` says why)."""
    with _lock:
        if "lib" not in _state:
            _state["lib"], _state["why"] = None, None
            if jax.default_backend() != "cpu":
                _state["why"] = f"the look in C runs on the CPU only (backend {jax.default_backend()})"
                return None
            try:
                lib = ctypes.CDLL(str(_build()))
                lib.trip_look_commit.restype = ctypes.c_int32
                lib.trip_look_commit.argtypes = (ctypes.c_int32, ctypes.c_int64)
                lib.trip_look_stop_at.argtypes = (ctypes.c_int32, ctypes.c_int64)
                for f in (lib.trip_look_reset, lib.trip_look_stop):
                    f.argtypes = (ctypes.c_int32,)
                jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.trip_look), platform="cpu")
                _state["lib"] = lib
            except (OSError, subprocess.SubprocessError, AttributeError) as e:
                _state["why"] = f"the look in C could not be built ({e})"
        return _state["lib"]


def why_not() -> str | None:
    """Why `library()` is None (after it was called), else None."""
    return _state.get("why")


class TripLook:
    """One run's slot in the handler's table: the look traced into the compiled loop (`look`), and the
    host's side (`stop`, `commit`). Raises nothing; make one only where `library()` is not None."""

    def __init__(self):
        self.lib = library()
        self.slot = next(_slots) % SLOTS
        self.lib.trip_look_reset(self.slot)

    def look(self, step, trip, trips: int):
        """Traced: whether trip `trip` (i64 scalar) of step `step` (i64 scalar, 0-based) runs, a bool
        scalar: False once a stop was asked for and `step` is not committed; True for a trip >= `trips`
        (the look after the last trip, which counts for nothing). The trip is an operand so no two
        looks are one graph value (nothing hoists a look out of the loop or merges two)."""
        call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((), jnp.bool_))
        return call(jnp.int32(self.slot), step.astype(jnp.int64), trip.astype(jnp.int64), jnp.int64(trips))

    def stop(self) -> None:
        """A stop signal arrived: every look of a step not yet committed answers no from now on."""
        self.lib.trip_look_stop(self.slot)

    def stop_at(self, look: int) -> None:
        """Ask for a stop at the `look`-th look from now (1: the next), as a signal arriving just before
        that trip would (tests)."""
        self.lib.trip_look_stop_at(self.slot, look)

    def commit(self, step: int) -> bool:
        """Commit step `step` (0-based: its update is about to be queued) unless a stop was asked for
        first: True committed, False stopped (the step's loop may have been cut short)."""
        return self.lib.trip_look_commit(self.slot, step) == 0
