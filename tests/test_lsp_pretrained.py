"""The language server reads the safetensors headers and the index of a `:pretrained` checkpoint on its
machine (issue 17, item 4), as `sexpgpu lint --read-files` does: a real client (pytest-lsp) edits a run
file whose teacher loads a sharded Hugging Face directory through a mapping, and gets E-MODEL-003 and
W-MODEL-001 at the `:pretrained` form as the checkpoint changes on disk; a path not on the machine and a
document that is not a file get nothing. The headers are read once until their file changes."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities
from safetensors.numpy import save_file

from lsp_client import Doc, client_fixture, published
from sexpgpu_lang import analyze
from sexpgpu_lang.files import checkpoint_files

client = client_fixture(client_capabilities("neovim@v0.7.0"))

RUN = """;; a frozen teacher read from a Hugging Face directory, through a mapping
(def vocab 16)
(def seq 8)
(def dim 64)

(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 4
  :fields (:row [seq] :i32 :stride [1] :i32))

(defmodel teacher
  :frozen true
  :pretrained (:path "PATH" :names (:embed "model.embed.weight" :out (transpose "lm_head.weight")))
  :params (:embed (normal [vocab dim] :std 0.1)
           :out (normal [dim vocab] :std 0.1))
  :apply (lambda (self row) (matmul (take (getf self :embed) row) (getf self :out))))

(defmodel pair
  :params (:student (normal [vocab vocab] :std 0.1) :teacher teacher)
  :apply (lambda (self row) (take (getf self :student) row)))

(model pair)

(objective (lambda (batch ctx)
  (let* ((row (field batch :row)))
    (mean (cross-entropy (model row) (argmax (teacher row)))))))

(run :loader train :steps 1 :seed 0)
"""


def write_hf(directory: Path, tensors: dict[str, tuple[int, ...]]) -> None:
    """A checkpoint of two shards and its index: each tensor f32 zeros of its shape, the shards in turn."""
    directory.mkdir(parents=True, exist_ok=True)
    time.sleep(0.02)   # a rewrite gets other file times than the write before it had
    shards = [{}, {}]
    for k, (name, shape) in enumerate(tensors.items()):
        shards[k % 2][name] = np.zeros(shape, np.float32)
    weight_map = {}
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-00002.safetensors"
        save_file(shard, str(directory / fname))
        weight_map.update({n: fname for n in shard})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


GOOD = {"model.embed.weight": (16, 64), "lm_head.weight": (16, 64)}


@pytest.mark.asyncio(loop_scope="module")
async def test_the_server_reports_a_local_checkpoint_that_does_not_fit_and_follows_it_on_disk(
        client: LanguageClient, tmp_path):
    write_hf(tmp_path / "hf", GOOD)
    doc = Doc(client, (tmp_path / "run.sx").as_uri(), RUN.replace("PATH", "hf"))
    assert (await published(client, doc.uri, 1)).diagnostics == ()
    # the head written [in out] as it is, not [out in]: wrong after the mapping's transpose, and an extra tensor
    write_hf(tmp_path / "hf", {"model.embed.weight": (16, 64), "lm_head.weight": (64, 16), "lm_head.bias": (16,)})
    v2 = doc.change(";; a frozen", ";;  a frozen")   # any edit: the file is checked again
    got = (await published(client, doc.uri, v2)).diagnostics
    assert [d.code for d in got] == ["E-MODEL-003"]
    assert got[0].message == ("`hf`: tensor `lm_head.weight` is [64 16] f32, parameter `out` [64 16] f32 of `teacher` "
                              "needs [16 64] f32 from it")
    assert got[0].range.start == doc.at('(:path "hf"')
    # fixed on disk, with the extra tensor left: the warning names it
    write_hf(tmp_path / "hf", {**GOOD, "lm_head.bias": (16,)})
    v3 = doc.change(";;  a frozen", ";; a frozen")
    got = (await published(client, doc.uri, v3)).diagnostics
    assert [(d.code, d.severity) for d in got] == [("W-MODEL-001", types.DiagnosticSeverity.Warning)]
    assert "`lm_head.bias`" in got[0].message
    # a shard gone: the index names it
    (tmp_path / "hf" / "model-00002-of-00002.safetensors").unlink()
    v4 = doc.change(";; a frozen", ";;  a frozen")
    got = (await published(client, doc.uri, v4)).diagnostics
    assert [d.code for d in got] == ["E-MODEL-003"]
    assert got[0].message == ("cannot use `hf`: `hf/model.safetensors.index.json` places tensor `lm_head.weight` in "
                              "`model-00002-of-00002.safetensors`, which is not there")
    doc.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_checkpoint_not_on_this_machine_and_a_document_not_in_a_file_are_not_reported(
        client: LanguageClient, tmp_path):
    write_hf(tmp_path / "hf", {"model.embed.weight": (3, 3)})   # would not fit, were it read
    elsewhere = Doc(client, (tmp_path / "run.sx").as_uri(), RUN.replace("PATH", "/data/cluster/gpt2"))
    assert (await published(client, elsewhere.uri, 1)).diagnostics == ()
    untitled = Doc(client, "untitled:Untitled-1", RUN.replace("PATH", str(tmp_path / "hf")))
    assert (await published(client, untitled.uri, 1)).diagnostics == ()
    # the same texts, read as `lint --read-files` reads them, are refused
    assert [d.code for d in analyze(RUN.replace("PATH", str(tmp_path / "hf")), str(tmp_path / "x.sx"),
                                    read_files=True).diagnostics] == ["E-MODEL-003"]
    assert [d.code for d in analyze(RUN.replace("PATH", "/data/cluster/gpt2"), str(tmp_path / "x.sx"),
                                    read_files=True).diagnostics] == ["E-MODEL-003"]
    elsewhere.close()
    untitled.close()


def test_each_header_and_index_is_read_once_until_its_file_changes(tmp_path, monkeypatch):
    write_hf(tmp_path / "hf", GOOD)
    reads = []
    real = checkpoint_files.read_header
    monkeypatch.setattr(checkpoint_files, "read_header", lambda p: reads.append(Path(p).name) or real(p))
    text, path = RUN.replace("PATH", "hf"), str(tmp_path / "run.sx")
    for _ in range(3):
        assert analyze(text, path, read_files="local").diagnostics == []
    assert sorted(reads) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    write_hf(tmp_path / "hf", {"model.embed.weight": (16, 64), "lm_head.weight": (64, 16)})   # same sizes
    assert [d.code for d in analyze(text, path, read_files="local").diagnostics] == ["E-MODEL-003"]
    assert len(reads) == 4


def test_a_pipe_named_as_the_checkpoint_is_refused_without_waiting_for_a_writer(tmp_path):
    import os
    os.mkfifo(tmp_path / "pipe.safetensors")
    text = RUN.replace('(:path "PATH" :names (:embed "model.embed.weight" :out (transpose "lm_head.weight")))',
                       '"pipe.safetensors"')
    for read_files in ("local", True):
        got = analyze(text, str(tmp_path / "run.sx"), read_files=read_files).diagnostics
        assert [(d.code, d.message) for d in got] == [
            ("E-MODEL-003", "cannot use `pipe.safetensors`: it is neither a file nor a directory")]


MAPPING = ':names (:embed "model.embed.weight" :out (transpose "lm_head.weight"))'


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("written,at,labels", [
    (":names :", ":names :", [":gpt2", ":llama", ":llama-tied", ":qwen2", ":qwen2-tied", ":qwen3",
                                ":qwen3-tied", ":olmo2"]),
    (':names ()', ':names (', [":embed", ":out"]),
    (':names (:embed "model.embed.weight" :)', '"model.embed.weight" :', [":out"]),
    (':names (:embed )', ':names (:embed ', ['"lm_head.weight"', '"model.embed.weight"']),
    (':names (:embed "model.embed.weight" :out (transpose ))', '(transpose ',
     ['"lm_head.weight"', '"model.embed.weight"']),
])
async def test_completion_in_pretrained_names(client: LanguageClient, tmp_path, written, at, labels):
    """After `:names`, the standard library's mappings; in a mapping being written, the
    parameters not mapped yet as keys and the checkpoint's tensor names as sources (issue 33)."""
    write_hf(tmp_path / "hf", GOOD)
    doc = Doc(client, (tmp_path / "run.sx").as_uri(), RUN.replace("PATH", "hf").replace(MAPPING, written))
    await published(client, doc.uri, 1)
    got = await client.text_document_completion_async(types.CompletionParams(
        text_document=doc.id, position=doc.at(at, len(at))))
    assert [i.label for i in got.items] == labels
    if labels[0].startswith('"'):
        assert got.items[0].detail == "[16 64] f32"
    doc.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_hover_shows_the_checkpoint_behind_a_pretrained_model(client: LanguageClient, tmp_path):
    """Hover on a parameter: the tensor it is read from, its file shape and dtype and the cast
    on load; on the path, the files it resolved to; on a mapping's key and source, what each
    maps (issue 33)."""
    (tmp_path / "hf").mkdir()
    save_file({n: np.zeros(s, np.float16) for n, s in GOOD.items()}, str(tmp_path / "hf" / "model.safetensors"))
    text = RUN.replace("PATH", "hf").replace(":names (", ":file-dtype :f16 :names (")
    doc = Doc(client, (tmp_path / "run.sx").as_uri(), text)
    assert (await published(client, doc.uri, 1)).diagnostics == ()

    async def hover(needle: str, delta: int) -> str:
        got = await client.text_document_hover_async(types.HoverParams(text_document=doc.id,
                                                                       position=doc.at(needle, delta)))
        return got.contents.value

    assert "from checkpoint `hf`: `model.embed.weight` [16 64] f16 → f32" in await hover(":params (:embed", 10)
    assert "from checkpoint `hf`: `lm_head.weight` [16 64] f16 → f32" in await hover("(getf self :out)", 12)
    assert await hover('"hf"', 1) == "checkpoint `hf`: 2 tensors in 1 file: `hf/model.safetensors`"
    assert await hover(":names (:embed", 9) == \
        "parameter `embed` of `teacher`, read from `model.embed.weight` [16 64] f16 → f32"
    assert await hover('"lm_head.weight"', 2) == "tensor `lm_head.weight` [16 64] f16 in `hf/model.safetensors` into `out`"
    doc.close()
