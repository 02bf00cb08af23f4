"""A checkpoint in the local Hugging Face cache (sexpgpu_lang/files/hf_cache.py): a snapshot directory whose shards
are symbolic links into the model's `blobs/`, read by its path and by its model id (`refs/main`), offline;
the confinement of shards to that model's folder of the cache; a model id the cache lacks in one line."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sexpgpu_lang import analyze
from sexpgpu_lang.files.hf_cache import model_id

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def make_cache(root: Path, repo_id: str, source: Path) -> Path:
    """`root` laid out as huggingface_hub's cache holding `source`'s files as `repo_id` at `refs/main`:
    each file a blob named by its hash, the snapshot's files relative links into `../../blobs/`.
    The snapshot directory."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    snap = repo / "snapshots" / REVISION
    snap.mkdir(parents=True)
    for f in sorted(source.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copy(f, repo / "blobs" / digest)
        os.symlink(os.path.join("..", "..", "blobs", digest), snap / f.name)
    return snap


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache holding the Llama 3 fixture as `tiny-org/llama3`, set as huggingface_hub's, and the run
    file's folder (apart from the cache)."""
    from huggingface_hub import constants
    root = tmp_path / "hub"
    snap = make_cache(root, "tiny-org/llama3", FIXTURES / "llama3")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    work = tmp_path / "work"
    work.mkdir()
    return root, snap, work


def llama3_reading(where: str) -> str:
    """The Llama 3 fixture's run file with every `checkpoint-config` and `:pretrained` reading `where`."""
    return (FIXTURES / "llama3.sx").read_text().replace('"llama3"', json.dumps(where))


def errors(res):
    return [(d.code, d.message) for d in res.diagnostics if d.is_error]


def test_the_rule_that_tells_a_model_id_from_a_path(tmp_path):
    assert model_id("Qwen/Qwen2.5-0.5B", str(tmp_path))
    (tmp_path / "Qwen" / "Qwen2.5-0.5B").mkdir(parents=True)
    assert not model_id("Qwen/Qwen2.5-0.5B", str(tmp_path))   # a path that exists wins
    for path in ("gpt2", "./org/name", "org/name/sub", "/abs/name", "org/../name", "org--x/name", "-org/name", "data/teacher.safetensors", "ck/model.safetensors.index.json"):
        assert not model_id(path, str(tmp_path)), path


@pytest.mark.parametrize("by", ["model id", "snapshot path"])
def test_a_cached_checkpoint_checks_clean_by_model_id_and_by_snapshot_path(cache, by):
    root, snap, work = cache
    text = llama3_reading("tiny-org/llama3" if by == "model id" else str(snap))
    for read_files in (True, "local", False):
        res = analyze(text, str(work / "run.sx"), read_files=read_files)
        assert errors(res) == [], (read_files, errors(res))
    res = analyze(text, str(work / "run.sx"), read_files=True)
    ck, = res.facts.checkpoints.values()
    assert ck.path == str(snap) and ck.header, ck   # the snapshot's shards were read through the links
    assert res.program.pretrained[0].path == str(snap)


def test_the_editor_s_hover_names_the_snapshot_a_model_id_resolved_to(cache):
    from sexpgpu_lang import ide
    root, snap, work = cache
    text = llama3_reading("tiny-org/llama3")
    res = analyze(text, str(work / "run.sx"), read_files="local")
    at = text.index(':path "tiny-org/llama3"') + len(':path "t')
    shown = ide.hover(ide.Index(res), at).markdown
    assert f"checkpoint `tiny-org/llama3` (the Hugging Face cache's snapshot {snap}): " in shown, shown
    assert "`model-00001-of-00003.safetensors`" in shown, shown


@pytest.mark.parametrize("by", ["model id", "snapshot path"])
def test_a_cached_checkpoint_loads_the_same_weights_as_its_directory(cache, by):
    """The runtime's load (`sexpgpu run`'s `initial_params`) by model id and by snapshot path: the
    fixture's weights, bit for bit."""
    from sexpgpu_lang import analyze_file
    from sexpgpu_runtime.weights.pretrained import initial_params
    root, snap, work = cache
    (work / "run.sx").write_text(llama3_reading("tiny-org/llama3" if by == "model id" else str(snap)))
    shutil.copy(FIXTURES / "llama3.sx", work / "direct.sx")
    shutil.copytree(FIXTURES / "llama3", work / "llama3")
    got = {}
    for name in ("run.sx", "direct.sx"):
        res = analyze_file(str(work / name), read_files=True)
        assert errors(res) == []
        trainable, frozen = initial_params(res.program, 0)
        got[name] = {**trainable, **frozen}
    flat = [{}, {}]
    for i, tree in enumerate(got.values()):
        def walk(t, path=()):
            for k, v in t.items():
                if isinstance(v, dict):
                    walk(v, path + (k,))
                else:
                    flat[i][path + (k,)] = np.asarray(v)
        walk(tree)
    assert flat[0].keys() == flat[1].keys() and flat[0]
    assert all(np.array_equal(flat[0][k], flat[1][k]) for k in flat[0])


def test_a_link_beside_the_run_file_to_a_snapshot_loads(cache):
    """`ln -s ~/.cache/huggingface/hub/models--org--name/snapshots/REV teacher`: the shards' links resolve
    into the model's blobs, inside its folder of the cache."""
    root, snap, work = cache
    os.symlink(snap, work / "teacher")
    res = analyze(llama3_reading("teacher"), str(work / "run.sx"), read_files=True)
    assert errors(res) == []


def test_a_model_id_not_in_the_cache_is_one_line_naming_where_it_looked(cache):
    root, snap, work = cache
    text = llama3_reading("tiny-org/absent")
    got = errors(analyze(text, str(work / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-CONFIG-001"], got   # one cause, once (not once per `checkpoint-config`)
    assert "the model id `tiny-org/absent` is not in the local Hugging Face cache" in got[0][1]
    assert str(root) in got[0][1] and "`HF_HUB_CACHE`" in got[0][1] and "\n" not in got[0][1]
    # the sizes read from a directory beside the run file: `:pretrained` alone says it
    shutil.copytree(FIXTURES / "llama3", work / "llama3")
    stated = (FIXTURES / "llama3.sx").read_text()
    stated = stated.replace(':path "llama3"', ':path "tiny-org/absent"')
    got = errors(analyze(stated, str(work / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-MODEL-003"] and "is not in the local Hugging Face cache" in got[0][1], got
    assert errors(analyze(stated, str(work / "run.sx"), read_files="local")) == []   # the editor's machine may lack it


def test_a_shard_linked_outside_the_model_s_folder_of_the_cache_is_refused(cache, tmp_path):
    root, snap, work = cache
    shard = next(p for p in snap.iterdir() if p.name.startswith("model-0000"))
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copy(shard.resolve(), outside)
    shard.unlink()
    os.symlink(outside, shard)
    got = errors(analyze(llama3_reading(str(snap)), str(work / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-MODEL-003"], got
    assert f"which resolves to {outside}, outside the cache's folder of that model" in got[0][1], got[0][1]
    # another model's blobs, inside the cache root but not this model's folder: refused too
    other = make_cache(root, "tiny-org/other", FIXTURES / "llama3")
    shard.unlink()
    os.symlink(next(p for p in other.iterdir() if p.name == shard.name).resolve(), shard)
    got = errors(analyze(llama3_reading(str(snap)), str(work / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-MODEL-003"] and "outside the cache's folder of that model" in got[0][1], got


def test_lint_reads_the_cache_hf_hub_cache_or_hf_home_names(cache):
    """`sexpgpu lint --read-files` in a fresh process: the cache from `HF_HUB_CACHE` (or `HF_HOME`), offline."""
    root, snap, work = cache
    (work / "run.sx").write_text(llama3_reading("tiny-org/llama3"))
    env = {**os.environ, "HF_HUB_CACHE": str(root), "HF_HUB_OFFLINE": "1"}
    exe = Path(sys.executable).parent / "sexpgpu"
    ok = subprocess.run([str(exe), "lint", "--read-files", str(work / "run.sx")], env=env, capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    env["HF_HUB_CACHE"] = str(work / "empty")
    bad = subprocess.run([str(exe), "lint", "--read-files", str(work / "run.sx")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0 and "E-CONFIG-001" in bad.stdout and str(work / "empty") in bad.stdout, bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
    home = work / "hf-home"   # `HF_HOME` alone: its hub/ is the cache
    shutil.copytree(root, home / "hub", symlinks=True)
    env = {k: v for k, v in env.items() if k != "HF_HUB_CACHE"}
    env["HF_HOME"] = str(home)
    ok = subprocess.run([str(exe), "lint", "--read-files", str(work / "run.sx")], env=env, capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def one_form_reading(where: str) -> str:
    """The Llama 3 fixture in the one form (`(defmodel teacher :pretrained ckpt)`), `ckpt` bound to `where`."""
    from test_one_form import one_form_text
    return one_form_text("llama3").replace(f'(def ckpt "{FIXTURES / "llama3"}")', f"(def ckpt {json.dumps(where)})", 1)


def test_the_one_form_reads_a_model_id(cache):
    """`(defmodel teacher :pretrained "org/name")`: made from the cached config.json, its weights the cache's."""
    from sexpgpu_runtime.weights.pretrained import initial_params
    root, snap, work = cache
    text = one_form_reading("tiny-org/llama3")
    assert '(def ckpt "tiny-org/llama3")' in text
    for read_files in (True, "local", False):
        assert errors(analyze(text, str(work / "run.sx"), read_files=read_files)) == [], read_files
    res = analyze(text, str(work / "run.sx"), read_files=True)
    assert res.program.pretrained[0].path == str(snap)
    _, frozen = initial_params(res.program, 0)
    assert frozen


def test_a_one_form_model_id_not_in_the_cache_is_one_error(cache):
    """The id read by the `checkpoint-config` defs and by the one form: one cause, one E-CONFIG-001."""
    root, snap, work = cache
    got = errors(analyze(one_form_reading("tiny-org/absent"), str(work / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-CONFIG-001"] and "is not in the local Hugging Face cache" in got[0][1], got


@pytest.mark.slow
def test_sexpgpu_run_trains_a_student_made_from_a_cached_model_id(cache):
    """`sexpgpu run` in a fresh process, offline, the cache from `HF_HUB_CACHE`: a trainable one-form model
    from `tiny-org/llama3`, two steps, exported in the Hugging Face layout with the cached config's settings."""
    root, snap, work = cache
    from test_one_form import one_form_text
    text = one_form_text("llama3", "").replace(f'(def ckpt "{FIXTURES / "llama3"}")', '(def ckpt "tiny-org/llama3")')
    (work / "run.sx").write_text(text)
    env = {**os.environ, "HF_HUB_CACHE": str(root), "HF_HUB_OFFLINE": "1"}
    exe = Path(sys.executable).parent / "sexpgpu"
    r = subprocess.run([str(exe), "run", str(work / "run.sx"), "--steps", "2", "--run-dir", str(work / "runs"),
                        "--export", str(work / "out"), "--export-names", "llama"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in (work / "runs" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "loss" in row][-1] == 2
    exported = json.loads((work / "out" / "config.json").read_text())
    assert exported["rope_parameters"]["rope_theta"] == 500000.0 or exported.get("rope_theta") == 500000.0


def single_file_cache(root: Path, repo_id: str, tmp: Path) -> Path:
    """A cache holding the Llama 3 fixture as `repo_id` with its shards merged into one `model.safetensors`
    (no index): the snapshot directory."""
    from safetensors.numpy import load_file, save_file
    src = tmp / f"single-{repo_id.replace('/', '-')}"
    src.mkdir()
    merged = {}
    for f in sorted((FIXTURES / "llama3").glob("model-*.safetensors")):
        merged.update(load_file(str(f)))
    save_file(merged, str(src / "model.safetensors"))
    for name in ("config.json", "generation_config.json"):
        shutil.copy(FIXTURES / "llama3" / name, src / name)
    return make_cache(root, repo_id, src)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_lone_snapshot_file_linked_outside_the_model_s_folder_is_refused(cache, tmp_path, name):
    """docs/checkpoints.md "Snapshots and their blobs": a lone `model.safetensors` (no index) and the
    config.json of a snapshot are confined to the model's folder of the cache as shards are: a link to
    another model's blobs, or out of the cache, is refused naming the file it resolves to."""
    root, _, work = cache
    snap = single_file_cache(root, "tiny-org/single", tmp_path)
    text = one_form_reading("tiny-org/single")
    assert errors(analyze(text, str(work / "run.sx"), read_files=True)) == []   # as it is: clean
    other = single_file_cache(root, "tiny-org/other", tmp_path)
    for target in ((other / name).resolve(), tmp_path / f"elsewhere-{name}"):
        shutil.copy((snap / name).resolve(), tmp_path / f"elsewhere-{name}")
        (snap / name).unlink()
        os.symlink(target, snap / name)
        got = errors(analyze(text, str(work / "run.sx"), read_files=True))
        code = "E-MODEL-003" if name == "model.safetensors" else "E-CONFIG-001"
        assert [c for c, _ in got] == [code], got
        assert f"resolves to {target}, outside the cache's folder of that model" in got[0][1], got
        assert "hf download tiny-org/single" in got[0][1]


def test_a_deleted_blob_is_named_as_a_link_whose_target_is_missing(cache, tmp_path):
    """A snapshot's link to a blob that was deleted: the message names the link's missing target and says to
    download the model again (not "a directory holding neither ...")."""
    root, _, work = cache
    snap = single_file_cache(root, "tiny-org/single", tmp_path)
    blob = (snap / "model.safetensors").resolve()
    blob.unlink()
    got = errors(analyze(one_form_reading("tiny-org/single"), str(work / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-MODEL-003"], got
    assert f"is a link to {blob}, which is missing; download the model again (`hf download tiny-org/single`)" \
        in got[0][1], got
    assert "neither" not in got[0][1]
    # a shard the index names, its blob deleted: the same words
    _, snap3, _ = cache
    shard = next(p for p in snap3.iterdir() if p.name.startswith("model-0000"))
    gone = shard.resolve()
    gone.unlink()
    got = errors(analyze(one_form_reading("tiny-org/llama3"), str(work / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-MODEL-003"], got
    assert f"`{shard.name}`, which is a link to {gone}, which is missing" in got[0][1], got


def test_refs_main_naming_a_snapshot_that_is_not_there_names_it(cache):
    root, snap, work = cache
    shutil.rmtree(snap)
    got = errors(analyze(one_form_reading("tiny-org/llama3"), str(work / "run.sx"), read_files=True))
    assert [c for c, _ in got] == ["E-CONFIG-001"], got
    assert f"its `refs/main` names the snapshot {snap}, which is not there" in got[0][1], got
    assert "is not in the local Hugging Face cache" not in got[0][1]
