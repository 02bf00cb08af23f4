"""An export directory's files, written so that it is finished or says so, and no file of the user's is removed.

An export into a directory (`--export DIR --export-names ...`, and any
export made of several files) is a list of files, each a name in the
directory and a function writing it. `write_export` writes them with a
manifest, `sexpgpu-export.json`, that lists them:

1. the manifest is written first, `"complete": false`, naming the files
   this export writes and those of the earlier export it replaces;
2. each file is written under a temporary name (`.NAME.tmp`) and renamed
   into place;
3. the earlier export's files that this one does not write are removed:
   only those its manifest lists (an export written before manifests
   existed: its index and the shards the index names, or its
   `model.safetensors`), never another file;
4. the manifest is written again, `"complete": true`.

So an export cut anywhere (a SIGKILL, a full disk) leaves a manifest that
says it is not complete (`is_complete`), which a `--resume` writes again
(run/resume.py `export_written`); the `.tmp` files a cut export left are
removed by the next export of the directory, and the files of the cut
export are replaced by it as an earlier export's are. The other files of
the directory are left as they are and named in one line (`Written.left_line`).
Errors are RunErrors naming the file.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import RunError
from ..paths import publish

#: The manifest's name in an export directory.
MANIFEST = "sexpgpu-export.json"
#: An export's weights in the Hugging Face layout (sexpgpu_lang/files/checkpoint_files.py's names).
_SINGLE, _INDEX = "model.safetensors", "model.safetensors.index.json"
#: How many of the files an export left are named in its line (the rest are counted).
_NAMED = 8


@dataclass
class Written:
    """What `write_export` did: the files it wrote (paths, in order), and the directory's other
    files, which it left (names, sorted)."""
    directory: Path
    files: list[Path]
    left: list[str] = field(default_factory=list)

    def left_line(self) -> str | None:
        """One line naming the files of the directory this export did not write and left there, or None."""
        if not self.left:
            return None
        shown = ", ".join(self.left[:_NAMED]) + (f" and {len(self.left) - _NAMED} more" if len(self.left) > _NAMED else "")
        files = "file" if len(self.left) == 1 else "files"
        return (f"sexpgpu: the export left {len(self.left)} {files} in {self.directory} that it did not write: {shown} "
                "(an export replaces only the files an earlier export wrote)")


def _manifest(directory: Path) -> dict | None:
    """The directory's manifest as written, or None when there is none or it cannot be read."""
    try:
        got = json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(got, dict) or not isinstance(got.get("files"), list) \
            or not all(isinstance(n, str) and _plain(n) for n in got["files"] + got.get("replaces", [])):
        return None
    return got


def _plain(name: str) -> bool:
    """Whether `name` is a plain file name of the directory (no separator, not `.` or `..`): a manifest
    naming another path is not ours to follow."""
    return bool(name) and name not in (".", "..") and "/" not in name and os.sep not in name


def earlier_files(directory: Path) -> set[str]:
    """The names of the files the earlier export in `directory` wrote: those its manifest lists
    (a cut export's too, and those it was replacing), or, without a manifest, its index and the
    shards the index names, or its `model.safetensors`. Empty when it holds no export."""
    directory = Path(directory)
    got = _manifest(directory)
    if got is not None:
        return set(got["files"]) | set(got.get("replaces", []))
    try:
        index = json.loads((directory / _INDEX).read_text(encoding="utf-8"))
        shards = {n for n in index["weight_map"].values() if isinstance(n, str) and _plain(n)}
        return {_INDEX} | shards
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return {_SINGLE} if (directory / _SINGLE).is_file() else set()


def holds_export(directory: Path) -> bool:
    """Whether `directory` holds an export, complete or cut (a manifest of sexpgpu's, or the weights
    of one written without a manifest): one a new export may replace, file by file."""
    directory = Path(directory)
    return _manifest(directory) is not None or any((directory / n).is_file() for n in (_SINGLE, _INDEX))


def is_complete(directory: Path) -> int | None:
    """When `directory` holds a complete export (its manifest says so and every file it lists is there):
    the manifest's modification time (ns, the export's end); None otherwise (none, or a cut one)."""
    got = _manifest(directory)
    if got is None or got.get("complete") is not True:
        return None
    if not all((Path(directory) / n).is_file() for n in got["files"]):
        return None
    try:
        return (Path(directory) / MANIFEST).stat().st_mtime_ns
    except OSError:
        return None


def _write_manifest(directory: Path, files: list[str], replaces: list[str], complete: bool, run: str | None) -> None:
    body = {"format": 1, "complete": complete, "files": files, "replaces": replaces, "run": run}
    tmp = directory / f".{MANIFEST}.tmp"
    try:
        tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        publish(tmp, directory / MANIFEST)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise RunError(f"cannot write {directory / MANIFEST}: {e.strerror or e}")


def write_export(directory: Path, writers: list[tuple[str, Callable[[Path], None]]],
                 run: str | None = None) -> Written:
    """Write an export of the files `writers` names into `directory` (made if missing, its parent must
    exist): each (name, write), `write(tmp)` writing the file's bytes to the temporary path it is given,
    which is then renamed to `directory/name`. `run` (the run dir, for the manifest) says whose export it is.

    The steps and what a cut leaves are the module's. A writer's OSError (or any error of a file
    format library) becomes a RunError naming the file; the manifest then still says not complete.
    """
    directory = Path(directory)
    names = [n for n, _ in writers]
    if len(set(names)) != len(names) or not all(_plain(n) and n != MANIFEST for n in names):
        raise ValueError(f"an export's files must be distinct plain names other than {MANIFEST}: {names}")
    try:
        directory.mkdir(parents=False, exist_ok=True)
    except OSError as e:
        raise RunError(f"cannot write {directory}: {e.strerror or e}")
    earlier = earlier_files(directory)
    replaces = sorted(earlier - set(names) - {MANIFEST})
    for name in sorted(set(names) | earlier | {MANIFEST}):   # a cut export's temporary files
        (directory / f".{name}.tmp").unlink(missing_ok=True)
    _write_manifest(directory, names, replaces, False, run)
    written = []
    for name, write in writers:
        tmp = directory / f".{name}.tmp"
        try:
            write(tmp)
            publish(tmp, directory / name)
        except RunError:
            tmp.unlink(missing_ok=True)
            raise
        except Exception as e:  # safetensors raises its own error types besides OSError
            tmp.unlink(missing_ok=True)
            raise RunError(f"cannot write {directory / name}: "
                           f"{e.strerror if isinstance(e, OSError) and e.strerror else e}")
        written.append(directory / name)
    for name in replaces:
        try:
            (directory / name).unlink(missing_ok=True)
        except OSError as e:
            raise RunError(f"cannot remove {directory / name} (the earlier export's): {e.strerror or e}")
    _write_manifest(directory, names, [], True, run)
    left = sorted(n for n in os.listdir(directory) if n not in set(names) | {MANIFEST})
    return Written(directory, written, left)
