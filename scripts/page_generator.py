"""The command line every page generator in scripts/ shares: print the page, `--write` it, or
`--check` that the committed page is what the generator makes (exit 1 naming the command that
regenerates it; tests/test_generated_files.py runs every `--check`)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def page_main(page: Path, render: Callable[[], str], script: str, description: str, argv=None) -> int:
    """Run a generator of `page` (its text from `render()`): stdout, `--write` or `--check`.

    Returns the exit status: 0, or 1 when `--check` finds `page` stale (or missing).
    """
    ap = argparse.ArgumentParser(description=description)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {page.parent.name}/{page.name}")
    mode.add_argument("--check", action="store_true",
                      help=f"exit 1 when {page.parent.name}/{page.name} differs from the output")
    a = ap.parse_args(argv)
    text = render()
    if a.write:
        page.write_text(text, encoding="utf-8")
        return 0
    if a.check:
        current = page.read_text(encoding="utf-8") if page.exists() else ""
        if current != text:
            print(f"{page} is stale: run python scripts/{script} --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0
