"""Checkpoint metadata as an input (issue 35, items 5 and 9): the meta item (step, records, identity,
seed, digests) is validated on restore like any input (ill-typed or negative values named) and
carries a CRC-32 of itself, so an edited `records` or `identity` is a corrupt checkpoint: it is
skipped, saying why in one line, and the newest checkpoint before it resumed, bit for bit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("orbax.checkpoint")

from helpers import run, variant  # noqa: E402
from sexpgpu_runtime.run.checkpoint_meta import META_DIGEST, meta_digest, meta_problem  # noqa: E402
from sexpgpu_runtime.weights.params import flatten  # noqa: E402

pytestmark = pytest.mark.slow   # (trains, or runs `sexpgpu run`)

TEXT = variant(":log (:every 50))", ":log (:every 1)\n     :checkpoint (:every 5 :keep 3))")
STEPS, LONGER = 15, 17


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A 15-step run with checkpoints at 5, 10 and 15, and the same run trained to 17 without a stop."""
    d = tmp_path_factory.mktemp("base")
    run(TEXT, d, STEPS)
    return d, run(TEXT, tmp_path_factory.mktemp("longer"), LONGER).trainable


def meta_file(step_dir: Path) -> Path:
    return step_dir / "meta" / "metadata"   # (orbax's JsonSave file; beside it, commit_success.txt)


def edit(base, tmp_path: Path, change, redigest: bool) -> Path:
    """A copy of the base run whose checkpoint 15 has its meta item changed by `change(meta)`; with
    `redigest` its digest is written again for the change (so only the validation can catch it)."""
    d = tmp_path / "run"
    shutil.copytree(base[0], d)
    f = meta_file(d / "checkpoints" / "15")
    meta = json.loads(f.read_text())
    change(meta)
    if redigest:
        meta[META_DIGEST] = meta_digest(meta)
    f.write_text(json.dumps(meta))
    return d


def resumes_from_10(d: Path, base, capfd) -> str:
    res = run(TEXT, d, LONGER, resume=True)
    err = capfd.readouterr().err
    assert res.start == 10
    fa, fb = flatten(res.trainable), flatten(base[1])
    assert fa.keys() == fb.keys() and all(np.array_equal(np.asarray(fa[k]), np.asarray(fb[k])) for k in fa)
    assert "Traceback" not in err
    assert "resuming from checkpoint step 10, the newest that verifies" in err
    assert (d / "checkpoints" / "15.corrupt").is_dir()
    return err


def test_the_meta_item_has_its_own_digest(base):
    meta = json.loads(meta_file(base[0] / "checkpoints" / "15").read_text())
    assert meta[META_DIGEST] == meta_digest(meta) and meta_problem(15, meta) is None


def _set(key, value):
    return lambda meta: meta.__setitem__(key, value)


def _flip_identity(meta):
    h = meta["identity"]
    meta["identity"] = h[:3] + ("0" if h[3] != "0" else "1") + h[4:]


@pytest.mark.parametrize("change", [_set("records", 88), _set("records", -4), _flip_identity],
                         ids=["records-88", "records-negative", "identity-one-digit"])
def test_an_edited_meta_item_is_corrupt_and_the_step_before_it_resumes(base, tmp_path, capfd, change):
    err = resumes_from_10(edit(base, tmp_path, change, redigest=False), base, capfd)
    assert ("checkpoint step 15 in" in err and "is corrupt: its meta item (the step, records, identity and seed) "
            "does not match the digest written with it; skipping it (moved to 15.corrupt)" in err), err


@pytest.mark.parametrize("key, value, shown", [("seed", None, "null"), ("seed", "0", '"0"'),
                                               ("records", "80", '"80"'), ("records", -4, "-4"),
                                               ("seed", True, "True"), ("step", 14, "14")])
def test_an_ill_typed_meta_value_is_named_and_the_step_before_it_resumes(base, tmp_path, capfd, key, value, shown):
    err = resumes_from_10(edit(base, tmp_path, _set(key, value), redigest=True), base, capfd)
    assert f"is corrupt: its meta item's `{key}` is {shown}, not " in err, err


def test_a_meta_item_without_its_digest_is_still_validated():
    good = {"format": "sexpgpu-checkpoint 1", "step": 5, "records": 40, "identity": "ab", "seed": 0, "digests": {}}
    assert meta_problem(5, good) is None          # (a checkpoint written before the digest existed)
    assert meta_problem(5, {**good, "records": None}) == ("its meta item's `records` is null, not a count of "
                                                          "records (0 or more)")
    assert "`seed` is 9223372036854775808" in meta_problem(5, {**good, "seed": 2**63})
    assert "`digests` are not a CRC-32 per array" in meta_problem(5, {**good, "digests": {"x": "1"}})
