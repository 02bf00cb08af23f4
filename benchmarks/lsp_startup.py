"""Benchmark: the language server's cold start, from the editor starting it to the first diagnostics.

Each round starts, one after the other (the order rotating), three processes
as an editor starts `sexpgpu lsp` (`python -m lsp`, the same server):

* `python -c pass`: Python's own start-up, the reference;
* `python -c "import lsprotocol.types"`: the floor pygls sets (pygls imports
  lsprotocol's types, a module of a thousand classes, before it can read a
  message);
* the server: `initialize` sent at once, then `initialized` and `didOpen` of
  the tiny-generate fixture as soon as `initialize` is answered (as Neovim
  and eglot do), timed to the answer of `initialize` and to the first
  `publishDiagnostics` (which must be the file's: no diagnostics).

The processes run with a bytecode cache (`PYTHONPYCACHEPREFIX`, a temporary
folder filled by a first, untimed start), as an installed package has one,
even where the environment sets `PYTHONDONTWRITEBYTECODE` (which makes every
start compile the project's modules again: some 0.3 s of CPU; `--no-cache`
measures that case).

Prints, per process, the median wall time over the rounds and the median
CPU time (user + system of the process and its children, from `wait4`: it
does not count the waits for a core on a loaded machine, so it varies less),
and the server's figures as a ratio against Python's start-up measured in
the same rounds. The load average is printed beside them.

    .venv/bin/python benchmarks/lsp_startup.py [--rounds 7] [--no-cache]

Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"
#: The children's environment (`main` sets the bytecode cache).
ENV = dict(os.environ)


def _cpu(pid: int) -> float:
    _, _, usage = os.wait4(pid, 0)
    return usage.ru_utime + usage.ru_stime


def python_alone(code: str) -> tuple[float, float]:
    """Wall and CPU seconds of `python -c code`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], env=ENV)
    cpu = _cpu(proc.pid)
    return time.perf_counter() - t0, cpu


def _send(proc, msg: dict) -> None:
    body = json.dumps(msg).encode()
    proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    proc.stdin.flush()


def _read(proc) -> dict:
    length = None
    while (line := proc.stdout.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if length is None:
        raise RuntimeError("the server closed its output")
    return json.loads(proc.stdout.read(length))


def server() -> tuple[float, float, float]:
    """Seconds from starting the server to its answer of `initialize` and to the first
    diagnostics of the opened file, and the process's CPU seconds (to its exit)."""
    text = FIXTURE.read_text()
    uri = FIXTURE.as_uri()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "lsp"], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    while "id" not in (msg := _read(proc)) or msg.get("id") != 1:
        pass
    initialized = time.perf_counter() - t0
    _send(proc, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
    _send(proc, {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
        "textDocument": {"uri": uri, "languageId": "sexpgpu", "version": 1, "text": text}}})
    while (msg := _read(proc)).get("method") != "textDocument/publishDiagnostics":
        pass
    first = time.perf_counter() - t0
    assert msg["params"]["uri"] == uri and msg["params"]["diagnostics"] == [], msg
    _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None})
    while _read(proc).get("id") != 2:
        pass
    _send(proc, {"jsonrpc": "2.0", "method": "exit", "params": None})
    proc.stdin.close()
    return initialized, first, _cpu(proc.pid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-cache", action="store_true", help="no bytecode cache for the project's modules")
    args = ap.parse_args()
    cache = tempfile.TemporaryDirectory(prefix="sexpgpu-pyc-")
    if not args.no_cache:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        ENV["PYTHONPYCACHEPREFIX"] = cache.name
    runs = {"python": [], "lsprotocol": [], "server": []}
    load0 = os.getloadavg()[0]
    python_alone("pass")   # the page cache warm for every side alike
    server()               # and the bytecode cache filled
    for r in range(args.rounds):
        sides = ["python", "lsprotocol", "server"]
        for side in sides[r % 3:] + sides[:r % 3]:
            if side == "python":
                runs[side].append(python_alone("pass"))
            elif side == "lsprotocol":
                runs[side].append(python_alone("import lsprotocol.types"))
            else:
                runs[side].append(server())
    med = statistics.median
    py_wall, py_cpu = med(w for w, _ in runs["python"]), med(c for _, c in runs["python"])
    lp_wall, lp_cpu = med(w for w, _ in runs["lsprotocol"]), med(c for _, c in runs["lsprotocol"])
    init, first = med(i for i, _, _ in runs["server"]), med(f for _, f, _ in runs["server"])
    cpu = med(c for _, _, c in runs["server"])
    print(f"{args.rounds} rounds, load average {load0:.1f} → {os.getloadavg()[0]:.1f}; medians; "
          + ("no bytecode cache" if args.no_cache else "with a bytecode cache"))
    print(f"python -c pass                 wall {py_wall * 1e3:7.0f} ms  cpu {py_cpu * 1e3:6.0f} ms")
    print(f"python -c 'import lsprotocol'  wall {lp_wall * 1e3:7.0f} ms  cpu {lp_cpu * 1e3:6.0f} ms")
    print(f"server: initialize answered    wall {init * 1e3:7.0f} ms")
    print(f"server: first diagnostics      wall {first * 1e3:7.0f} ms  cpu {cpu * 1e3:6.0f} ms (to its exit)")
    print(f"first diagnostics / python start-up: wall {first / py_wall:.1f}x, cpu {cpu / py_cpu:.1f}x; "
          f"beyond lsprotocol's import: {(first - lp_wall) * 1e3:.0f} ms wall, {(cpu - lp_cpu) * 1e3:.0f} ms cpu")


if __name__ == "__main__":
    main()
