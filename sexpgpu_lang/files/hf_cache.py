"""A checkpoint named by its Hugging Face model id, found in the local cache; the cache's snapshot layout.

A run file names a checkpoint (`:pretrained`'s path, `checkpoint-config`'s
path) by a path relative to the run file, an absolute path, or a model id
(docs/checkpoints.md "The Hugging Face cache"). The rule that tells them
apart (`model_id`): a string is a model id when it is `org/name` (exactly
one `/`, each part letters, digits, `-`, `_` and `.`, starting with a
letter or digit, no `--` or `..`, not ending in `.safetensors` or
`.json`, the files `:pretrained` takes) and no file or directory of that
name is beside the run file. A path that exists always wins, so a checkpoint
kept at `org/name` beside the run file still loads from there.

`locate(written, base)` gives the path to read: a model id is resolved in
the local cache through huggingface_hub's public cache functions
(`try_to_load_from_cache`, `constants.HF_HUB_CACHE`, which follow
`HF_HUB_CACHE` and `HF_HOME`): the snapshot directory `refs/main` names,
never a download (NotCached says in one line where it looked).
huggingface_hub is imported only there, when a model id is seen: `sexpgpu
lint` of a file without one does not load it.

`snapshot_repo(directory)` is the cache's folder of one model
(`.../models--org--name`) when `directory` lies in one of its snapshots
(`snapshots/<revision>/`), whose files are symbolic links into the
folder's `blobs/`: checkpoint_files.py lets a shard's real file be there,
inside that model's folder of the cache, and nowhere else. `link_problem(path)`
says why a file may not be read for what it links to: a link whose target is
missing (a deleted blob), or, for any file of a snapshot (weights,
config.json, generation_config.json, a tokenizer), a link resolving outside
that model's folder (bounded_read.open_regular asks it before every read).
Pure Python; never JAX.
"""
from __future__ import annotations

import os
import re

#: A model id as the Hub spells one: `org/name`.
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
#: The files whose presence in a snapshot makes it a checkpoint, in the order they are looked for.
_LOOKED_FOR = ("config.json", "model.safetensors.index.json", "model.safetensors")


class NotCached(Exception):
    """A model id that is not in the local Hugging Face cache; the message (one line) names where it looked."""


def model_id(written: str, base: str) -> bool:
    """Whether `written` (a checkpoint's path as the run file gives it) is a model id: `org/name` (the rule
    above) that is no existing path relative to `base`, the run file's directory."""
    if os.path.isabs(written) or not _MODEL_ID.fullmatch(written) or "--" in written or ".." in written \
            or written.endswith((".safetensors", ".json")):
        return False
    try:
        return not os.path.lexists(os.path.join(base, written))
    except (OSError, ValueError):
        return False


def cache_dir() -> tuple[str, str]:
    """(the hub cache directory huggingface_hub reads, the words saying where that came from)."""
    from huggingface_hub import constants
    if os.environ.get("HF_HUB_CACHE"):
        why = "`HF_HUB_CACHE`"
    elif os.environ.get("HF_HOME"):
        why = "`HF_HOME`/hub"
    else:
        why = "the default; set `HF_HUB_CACHE` or `HF_HOME` for another"
    return str(constants.HF_HUB_CACHE), why


def resolve(repo_id: str, path: str | None = None) -> str:
    """The snapshot directory of `repo_id` (`org/name`) that `refs/main` names in the local cache.
    NotCached, naming the cache directory (and `path`, where the id was also read as a path and
    nothing is there), when the cache has no checkpoint of that id. Never downloads."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:   # (a dependency: an environment without it says so in one line)
        raise NotCached(f"`{repo_id}` reads as a model id of the Hugging Face cache, and huggingface_hub is not "
                        "installed (`pip install huggingface_hub`)" + (f"; no such file or directory {path}"
                                                                       if path is not None else "")) from None
    where, why = cache_dir()
    for name in _LOOKED_FOR:
        try:
            got = try_to_load_from_cache(repo_id, name, cache_dir=where)
        except (ValueError, OSError):   # (an id the Hub would refuse: HFValidationError is a ValueError)
            got = None
        if isinstance(got, str):
            return os.path.dirname(got)
    said = f"no such file or directory {path}, and " if path is not None else ""
    missing = _missing_snapshot(where, repo_id)
    if missing is not None:
        raise NotCached(f"{said}the model id `{repo_id}` is in the local Hugging Face cache ({where}, {why}), but its "
                        f"`refs/main` names the snapshot {missing}, which is not there; download it again "
                        f"(`hf download {repo_id}`)" + (", or fix the path" if path is not None else ""))
    raise NotCached(f"{said}the model id `{repo_id}` is not in the local Hugging Face cache: looked for its "
                    f"`refs/main` snapshot in {where} ({why}); download it first (`hf download {repo_id}`)"
                    + (", or fix the path" if path is not None else ""))


def _missing_snapshot(where: str, repo_id: str) -> str | None:
    """The snapshot directory `refs/main` of `repo_id` names in the cache `where`, when that file names
    one that is not there (a snapshot deleted by hand); else None."""
    repo = os.path.join(where, "models--" + repo_id.replace("/", "--"))
    try:
        with open(os.path.join(repo, "refs", "main"), encoding="utf-8") as fh:
            revision = fh.read(256).strip()
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not revision or "/" in revision or revision in (".", ".."):
        return None
    snap = os.path.join(repo, "snapshots", revision)
    return None if os.path.isdir(snap) else snap


def repo_id_of(repo: str) -> str:
    """`org/name` of the cache's folder of one model (`.../models--org--name`)."""
    return os.path.basename(repo).removeprefix("models--").replace("--", "/", 1)


def link_problem(path: str) -> str | None:
    """Why the file at `path` may not be read for what it links to, in words starting "it ": a symbolic
    link whose target is missing (named; in a snapshot of the cache, a deleted blob: download the
    model again), or a file of a snapshot whose real file is outside that model's folder of the cache
    (another model's blobs included: it would read another checkpoint's weights). None otherwise."""
    try:
        if not os.path.lexists(path):
            return None
        repo = snapshot_repo(os.path.dirname(os.path.abspath(path)))
        real = os.path.realpath(path)
        if os.path.islink(path) and not os.path.exists(path) and _target_missing(path):
            again = f"; download the model again (`hf download {repo_id_of(repo)}`)" if repo is not None else \
                "; restore the file it links to, or fix the link"
            return f"it is a link to {real}, which is missing{again}"
        if repo is not None and os.path.commonpath([repo, real]) != repo:
            return (f"it resolves to {real}, outside the cache's folder of that model {repo}; a cached snapshot's "
                    f"file is a link into its model's `blobs/`: download the model again (`hf download "
                    f"{repo_id_of(repo)}`)")
    except (OSError, ValueError):
        return None
    return None


def _target_missing(link: str) -> bool:
    """Whether the link `link` leads to no file (not a loop of links, whose read says so itself)."""
    try:
        os.stat(link)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return False


def locate(written: str, base: str) -> str:
    """The path to read for a checkpoint written `written` in a run file in directory `base`: the snapshot
    directory of a cached model id, else the path (relative ones joined to `base`). NotCached."""
    if model_id(written, base):
        return resolve(written, os.path.join(base, written))
    return written if os.path.isabs(written) else os.path.join(base, written)


def snapshot_repo(directory: str) -> str | None:
    """The real path of the cache's folder of one model (`models--org--name`) when `directory` is inside one
    of its snapshots (`<folder>/snapshots/<revision>/...`), as written or once its links are resolved (a
    link beside the run file to a snapshot), else None."""
    try:
        paths = (os.path.abspath(directory), os.path.realpath(directory))
    except (OSError, ValueError):
        return None
    for path in paths:
        parts = path.split(os.sep)
        for i in range(len(parts) - 2, 0, -1):
            if parts[i] == "snapshots" and parts[i - 1].startswith("models--"):
                try:
                    return os.path.realpath(os.sep.join(parts[:i]) or os.sep)
                except (OSError, ValueError):
                    return None
    return None


def as_written(file: str, written: str, base: str) -> str:
    """The file `file` of the checkpoint written `written` in a run file in `base`, as messages show it:
    relative to the run file where the checkpoint's path is, absolute for an absolute path or a model id."""
    if os.path.isabs(written) or model_id(written, base):
        return file
    return os.path.relpath(file, base)
