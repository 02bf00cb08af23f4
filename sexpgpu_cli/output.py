"""What the commands share: a failure said in one line with its exit status, a run file read and
checked (or why it cannot be read), diagnostics printed compiler-style.

Imports typer and, when a function needs it, the front end; never JAX.
"""
import sys
from pathlib import Path

import typer


def fail(message: str, code: int = 2, debug: bool = False) -> "typer.Exit":
    """Print one `sexpgpu: error: ...` line to stderr and return the Exit to raise
    (after the traceback of the exception being handled, with `debug`)."""
    if debug:
        import traceback
        traceback.print_exc()
    print(f"sexpgpu: error: {message}", file=sys.stderr)
    return typer.Exit(code)


def load(path: Path, read_files: bool = False, build_ir: bool = True):
    """Check one file (opening no other file unless `read_files`: the `:pretrained` headers;
    building the IR only with `build_ir`); an unreadable file is one line on stderr and exit 2."""
    from sexpgpu_lang import analyze_file
    try:
        return analyze_file(str(path), read_files, build_ir)
    except (OSError, UnicodeDecodeError) as e:
        raise cannot_read(path, e)


def cannot_read(path: Path, e: Exception) -> "typer.Exit":
    """`fail`'s one line for a run file that cannot be read (`e`, an OSError or UnicodeDecodeError)."""
    if isinstance(e, FileNotFoundError):
        return fail(f"cannot read {path}: no such file")
    if isinstance(e, IsADirectoryError):
        return fail(f"cannot read {path}: it is a directory")
    if isinstance(e, UnicodeDecodeError):
        return fail(f"cannot read {path}: not UTF-8 text ({e.reason} at byte {e.start})")
    return fail(f"cannot read {path}: {e.strerror or e}")


def print_text(results, file=None) -> tuple[int, int, int]:
    """Print diagnostics compiler-style (to `file`, default stdout); return (errors, warnings, notes:
    information and hints)."""
    from sexpgpu_lang import render
    n_err = n_warn = n_note = 0
    for res in results:
        for d in res.diagnostics:
            print(render.to_text(res.source, d), file=file)
            print(file=file)
            n_err += d.is_error
            n_warn += d.severity == 2
            n_note += d.severity > 2
    return n_err, n_warn, n_note
