"""Benchmark: `sexpgpu lint` of a small file, a fresh process, against `python -c "import typer"`.

`sexpgpu` is a typer application, so importing typer is the floor of every
command's start-up; the target is `sexpgpu lint` of the tiny-generate
fixture (73 lines) in at most 1.5x the time of that import.

Each round runs the processes one after the other, the order alternating
between rounds, so that a change of load hits every side alike: `import
typer`, `sexpgpu lint`, and the same lint with typer's own conversion of the
option values (through pydantic: sexpgpu_cli/options.py's reason to be). Per side it
prints the median wall time over the rounds and the median CPU time (user +
system, from `wait4`: it does not count the waits for a core on a loaded
machine, so it varies less), and the ratios: of the medians, and the median
of the rounds' own ratios. The load average (2-core machine) is printed
beside them. Both sides read bytecode from a cache (`PYTHONPYCACHEPREFIX`, a
temporary folder filled by an untimed first run), as an installed package
does, even where the environment sets `PYTHONDONTWRITEBYTECODE`.

`--importtime` also prints where `sexpgpu lint`'s start-up goes: each
module's own import time (`python -X importtime`, wall time: the least over
the rounds, the figure least disturbed by other processes), the largest
first, and the share of each top-level package.

`--tree DIR` adds a side: the same lint with the `sexpgpu_cli` and
`sexpgpu_lang` of another tree (before a change: `mkdir DIR && git archive
COMMIT sexpgpu_cli sexpgpu_lang | tar -x -C DIR`), so that before and after
are measured in the same rounds.

    .venv/bin/python benchmarks/cli_startup.py [--rounds 31] [--importtime] [--tree DIR]

Not a test: the numbers depend on the machine (BENCHMARKS.md records them).
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"
SEXPGPU = Path(sys.executable).with_name("sexpgpu")
#: The children's environment (`main` sets the bytecode cache).
ENV = dict(os.environ)
TARGET = 1.5
#: `sexpgpu lint` with typer's own conversion of every option value (pydantic's), for the comparison.
PYDANTIC = ("import sexpgpu_cli.options as o; o._FAST.clear(); import sexpgpu_cli; sexpgpu_cli.main()")


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds of one run of `cmd` (which must exit 0), and its standard error."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env or ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err}")
    return wall, usage.ru_utime + usage.ru_stime, err


def self_times(stderr: str) -> dict[str, int]:
    """Each module's own import time in microseconds, from `-X importtime`'s lines."""
    out = {}
    for line in stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            own, _, name = line[len("import time:"):].split("|")
            out[name.strip()] = int(own)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--importtime", action="store_true", help="also where lint's start-up goes, by module")
    ap.add_argument("--tree", type=Path, help="also lint with the sexpgpu_cli and sexpgpu_lang of this checkout")
    args = ap.parse_args()
    cache = tempfile.TemporaryDirectory(prefix="sexpgpu-pyc-")
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = cache.name
    sides = {"typer": [sys.executable, "-c", "import typer"], "lint": [str(SEXPGPU), "lint", str(FIXTURE)],
             "pydantic": [sys.executable, "-c", PYDANTIC, "lint", str(FIXTURE)]}
    if args.tree is not None:
        tree = str(args.tree.resolve())
        sides["tree"] = [sys.executable, "-c", f"import sys; sys.path.insert(0, {tree!r}); import sexpgpu_cli; "
                         f"assert sexpgpu_cli.__file__.startswith({tree!r}); sexpgpu_cli.main()", "lint", str(FIXTURE)]
    for cmd in sides.values():
        timed(cmd)   # the bytecode cache filled, the page cache warm
    runs = {name: [] for name in sides}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            runs[name].append(timed(sides[name])[:2])
    load1 = os.getloadavg()[0]
    med = statistics.median
    print(f"{args.rounds} rounds, interleaved; load average (2 cores) {load0:.1f} -> {load1:.1f}; medians")
    for name, cmd in sides.items():
        shown = {"pydantic": "sexpgpu lint, typer's conversion", "tree": f"sexpgpu lint of {args.tree}"}.get(name) or \
            " ".join(Path(c).name if c.startswith("/") else c for c in cmd)
        print(f"  {shown:40s}"
              f" wall {med(w for w, _ in runs[name]) * 1e3:6.1f} ms   cpu {med(c for _, c in runs[name]) * 1e3:6.1f} ms")
    for k, what in ((0, "wall"), (1, "cpu ")):
        lint, ref = [x[k] for x in runs["lint"]], [x[k] for x in runs["typer"]]
        ratio = med(lint) / med(ref)
        paired = med(a / b for a, b in zip(lint, ref))
        print(f"  lint / import typer, {what}: {ratio:.2f}x (paired {paired:.2f}x); target <= {TARGET}x: "
              f"{'met' if ratio <= TARGET else 'NOT met'}")
    if args.tree is not None:
        print(f"  lint of {args.tree} / import typer, cpu: {med(c for _, c in runs['tree']) / med(ref):.2f}x")
    slow = med(c for _, c in runs["pydantic"]) - med(c for _, c in runs["lint"])
    print(f"  typer's own conversion (pydantic) would add {slow * 1e3:.0f} ms of cpu to lint")
    if args.importtime:
        env = dict(ENV, PYTHONPROFILEIMPORTTIME="1")
        own = collections.defaultdict(list)
        for _ in range(args.rounds):
            for name, us in self_times(timed(sides["lint"], env)[2]).items():
                own[name].append(us)
        times = {name: min(v) for name, v in own.items()}
        by_package = collections.Counter()
        for name, us in times.items():
            by_package[name.split(".")[0]] += us
        print(f"sexpgpu lint's imports: {sum(times.values()) / 1e3:.1f} ms (own times, least of {args.rounds}), by package:")
        for name, us in by_package.most_common(8):
            print(f"  {name:40s} {us / 1e3:6.1f} ms")
        print("the largest modules:")
        for name, us in sorted(times.items(), key=lambda kv: -kv[1])[:15]:
            print(f"  {name:40s} {us / 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
