"""What a checkpoint records of itself, and how a resume verifies it: a CRC-32 of each array
(`digests`, `first_difference`), the meta item checked as an input (`meta_problem`, with its own
CRC-32, `meta_digest`), and who made it (`Identity`: the run file's forms and seed; `Provenance`:
that, the run file and the `:pretrained` files' SHA-256, and the checks a resume makes against
them). checkpoint.py writes and reads these beside the arrays (docs/checkpoints.md).
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np

from ..errors import CheckpointError


def digests(tree) -> dict[str, int] | None:
    """A CRC-32 of each array's bytes in `tree`, by its tree path (`jax.tree_util.keystr`); None
    where some array is not wholly on this process (a multi-process run: not digested)."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return None
        a = np.ascontiguousarray(np.asarray(leaf))
        out[jax.tree_util.keystr(path)] = zlib.crc32(a.reshape(-1).view(np.uint8)) if a.size else 0
    return out


def first_difference(saved: dict, tree) -> str | None:
    """The first array of `tree` whose digest differs from `saved` (or is absent from `tree`), described; None when all agree."""
    got = digests(tree)
    if got is None:
        return None
    for key, crc in saved.items():
        if key not in got:
            return f"array {key} is missing"
        if got[key] != crc:
            return f"array {key} does not match the digest written with it"
    return None


#: The key of the meta item's own CRC-32 (`meta_digest`), beside the arrays' `digests`.
META_DIGEST = "meta_digest"


def meta_digest(meta: dict) -> int:
    """A CRC-32 of the meta item without its own digest: its JSON with sorted keys and no spaces,
    which orbax's JSON round trip gives back exactly (only text, integers, lists and dicts)."""
    import json
    rest = {k: v for k, v in meta.items() if k != META_DIGEST}
    return zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def meta_problem(step: int, meta: dict) -> str | None:
    """What is wrong with checkpoint `step`'s meta item, in words, or None. It is an input like any
    other: `step` and `records` counts (integers of 0 or more, `step` the directory's), `seed` an
    integer from 0 to 2**63 - 1, `identity` text, `digests` integers by array; and when it has a
    `meta_digest` (every checkpoint written since it existed), the CRC-32 of the rest must be it,
    so an edited `records` or `identity` is a corrupt checkpoint, not another run's or a silent
    change of the loader's position."""
    if META_DIGEST in meta and meta[META_DIGEST] != meta_digest(meta):
        return "its meta item (the step, records, identity and seed) does not match the digest written with it"
    def shown(v) -> str:
        import json
        return "null" if v is None else json.dumps(v)[:40] if isinstance(v, str) else repr(v)[:40]
    if not _count(meta.get("step")) or meta["step"] != step:
        return f"its meta item's `step` is {shown(meta.get('step'))}, not {step}, the step it is saved as"
    if not _count(meta.get("records")):
        return f"its meta item's `records` is {shown(meta.get('records'))}, not a count of records (0 or more)"
    seed = meta.get("seed")
    if not _count(seed) or seed > 2**63 - 1:
        return f"its meta item's `seed` is {shown(seed)}, not a seed (an integer from 0 to 2**63 - 1)"
    if not isinstance(meta.get("identity"), str):
        return f"its meta item's `identity` is {shown(meta.get('identity'))}, not the hash of a file's forms"
    sums = meta.get("digests")
    if sums is not None and not (isinstance(sums, dict) and all(isinstance(v, int) and not isinstance(v, bool)
                                                                for v in sums.values())):
        return "its meta item's `digests` are not a CRC-32 per array"
    return None


@dataclass(frozen=True)
class Identity:
    """What a checkpoint must match to be resumed: the hash of the run file's forms, and the seed."""

    forms: str
    seed: int
    # (the hash of the forms apart from the `run` form's `:steps`, the file's `:steps`): not compared,
    # only for the message when a checkpoint's file differs from this one in `:steps` alone
    apart_from_steps: tuple[str, int] | None = field(default=None, compare=False)

    def show(self) -> str:
        return f"forms {self.forms}, seed {self.seed}"


class Provenance:
    """Who made a run's checkpoints, as each one's JSON item records it, and the checks a resume makes
    against it: the run's `identity` (its forms and seed), the run file `file`, and `pretrained`, each
    `:pretrained` file's SHA-256 (weights.pretrained.content_hashes). `where` is the checkpoint dir
    the messages name."""

    def __init__(self, identity: Identity, file: str, where: Path, pretrained: dict[str, str] | None = None):
        self.identity, self.file, self.where = identity, file, where
        self.pretrained: dict[str, str] = dict(pretrained or {})

    def record(self) -> dict:
        """The JSON item's fields that say who made a checkpoint."""
        meta = {"identity": self.identity.forms, "seed": int(self.identity.seed), "file": str(self.file)}
        if self.identity.apart_from_steps is not None:
            meta["forms_apart_from_steps"], meta["file_steps"] = self.identity.apart_from_steps
        if self.pretrained:
            meta["pretrained"] = self.pretrained
            meta["pretrained_relative"] = {path: self._relative(path) for path in self.pretrained}
        return meta

    @staticmethod
    def identity_of(meta: dict) -> Identity:
        """The identity a checkpoint's JSON item records."""
        return Identity(str(meta.get("identity")), int(meta.get("seed", -1)))

    def is_ours(self, meta: dict) -> bool:
        """Whether a checkpoint was made by this run file's forms and seed."""
        return self.identity_of(meta) == self.identity

    def check(self, step: int, meta: dict) -> None:
        """Refuse a checkpoint that another run file (or seed) wrote, naming both identities."""
        if not self.is_ours(meta):
            made_by = f" by {meta['file']}" if meta.get("file") else ""
            ours = self.identity.apart_from_steps
            if ours is not None and meta.get("forms_apart_from_steps") == ours[0] \
                    and self.identity_of(meta).seed == self.identity.seed and meta.get("file_steps") != ours[1]:
                then = meta.get("file_steps")
                raise CheckpointError(f"checkpoint step {step} in {self.where} was made{made_by} with `:steps "
                                      f"{then}`; this file differs from it in `:steps` alone ({ours[1]} now), which "
                                      f"makes it another run; to train that run longer, keep `:steps {then}` in the "
                                      f"file and resume with `--steps {ours[1]}`, or give another --run-dir to start "
                                      "this file afresh")
            raise CheckpointError(f"checkpoint step {step} in {self.where} was made{made_by} with "
                                  f"{self.identity_of(meta).show()}; this file has {self.identity.show()}, so it "
                                  "cannot resume it (give another --run-dir to start this file afresh)")
        self.check_pretrained(step, meta)

    def _relative(self, path: str) -> str:
        """`path` relative to the run file's folder (`..` where it lies outside)."""
        return os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(str(self.file))))

    def check_pretrained(self, step: int, meta: dict) -> None:
        """Refuse a checkpoint made with other `:pretrained` bytes than this run reads. A file is the
        same when it has the same SHA-256 at the same path, or at the same path relative to the run
        file (a project moved or mounted elsewhere with its run dir: `pretrained_relative`)."""
        now_relative = {self._relative(path): (path, digest) for path, digest in self.pretrained.items()}
        for path, digest in (meta.get("pretrained") or {}).items():
            now_path, now = path, self.pretrained.get(path)
            relative = (meta.get("pretrained_relative") or {}).get(path)
            if now != digest and relative in now_relative:
                now_path, now = now_relative[relative]
            if now == digest:
                continue
            where = "" if now_path == path else f" (read now as {now_path})"
            change = (f"has changed since{where} (SHA-256 {digest[:16]} then, {now[:16]} now)" if now
                      else "is not read now")
            raise CheckpointError(f"checkpoint step {step} in {self.where} was made with the pretrained file "
                                  f"{path}, which {change}, so it cannot resume it (put the file back, or give "
                                  "another --run-dir to start afresh)")
