"""`sexpgpu lint`: run files (a directory: every *.sx below it) checked by the front end
(`sexpgpu_lang.lint`), the diagnostics printed as text, JSON or SARIF.

Imports the front end and its renderers only; never JAX, the runtime or pydantic (a test keeps
lint's imports so: tests/test_cli_startup.py).
"""
import sys
from pathlib import Path
from typing import List

from .output import cannot_read, fail, print_text


def run_files(paths: List[Path]) -> List[tuple[Path, bool]]:
    """The files `lint` checks, each with whether a DIR named it: each FILE as given, and every
    *.sx below each DIR (recursively, sorted). A directory holding no *.sx is one line and exit 2."""
    out: List[tuple[Path, bool]] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.sx") if p.is_file())
            if not found:
                raise fail(f"no run files (*.sx) under {path}")
            out += [(p, True) for p in found]
        else:
            out.append((path, False))
    return out


def lint_one(path: Path, found: bool, read_files: bool):
    """`lint`'s check of one file (sexpgpu_lang.lint); a file it cannot read is one line and exit 2."""
    from sexpgpu_lang.lint import lint_file
    try:
        return lint_file(str(path), found, read_files)
    except (OSError, UnicodeDecodeError) as e:
        raise cannot_read(path, e)


def lint_files(files: List[Path], format: str, output: Path | None, read_files: bool, version: str,
               exits_after: bool) -> int:
    """Check `files` and write their report (`format`: text, json or sarif) to `output` or standard
    output; the exit status: 1 when a file has an error, else 0. `exits_after`: the process ends
    after the command (what was built is then frozen, below)."""
    import gc
    # No cyclic garbage collection while importing the front end and checking: lint keeps every
    # result until it prints them and makes little garbage, so collections would only walk the
    # modules and trees again and again (40% of the CPU time of a 10,000-line file; peak memory is
    # the same). As the `sexpgpu` command, what exists is then frozen (`gc.freeze`): the process
    # is about to exit, and no collection, the one at exit included, walks it again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        from sexpgpu_lang import render
        results = [lint_one(f, found, read_files) for f, found in run_files(files)]
    finally:
        if collecting:
            if exits_after:
                gc.freeze()
            gc.enable()
    if format == "text":
        if output:
            try:
                with output.open("w", encoding="utf-8") as fh:
                    n_err, n_warn, n_note = print_text(results, fh)
            except OSError as e:
                raise fail(f"cannot write {output}: {e.strerror or e}")
        else:
            n_err, n_warn, n_note = print_text(results)
        print(f"{len(results)} file{'s' if len(results) != 1 else ''} checked: {render.summary(n_err, n_warn, n_note)}",
              file=sys.stderr)
    else:
        pairs = [(r.source, r.diagnostics) for r in results]
        text = render.to_json(pairs) if format == "json" else render.to_sarif(pairs, version)
        if output:
            try:
                output.write_text(text + "\n")
            except OSError as e:
                raise fail(f"cannot write {output}: {e.strerror or e}")
        else:
            print(text)
    return 1 if any(r.has_errors for r in results) else 0

