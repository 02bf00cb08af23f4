"""What the server keeps of the files its documents read: dropped per document, bounded in bytes.

End to end over stdio: a server whose parsed-config space (`hf_config.READ`, a `sexpgpu_lang.kept`
space) may hold `BUDGET` bytes, asked with `sexpgpu/memoryUsage` (what is kept, with the documents
that read each file). In-process: `sexpgpu_lang.kept` itself.
"""
from __future__ import annotations

import itertools
import json
import sys

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from helpers import fixture_text
from lsp.diagnostics import MEMORY_USAGE
from lsp_client import Doc, client_fixture, published
from sexpgpu_lang import kept
from sexpgpu_lang.files.bounded_read import json_memory

#: The parsed-config space's bound in bytes in the server under test (each config below is 1/3 to 1/2 of it).
BUDGET = 1_000_000
SERVER = [sys.executable, "-c", f"from sexpgpu_lang.files import hf_config; hf_config.READ.max_bytes = {BUDGET}; "
          "from lsp.server import main; main()"]

client = client_fixture(client_capabilities("neovim@v0.7.0"), SERVER)
_names = (f"m{i}" for i in itertools.count())


def checkpoint(tmp_path, pad: int = 1_000) -> tuple[str, str]:
    """A checkpoint directory holding only a config.json (of about json_memory bytes parsed); (its name, the config's path)."""
    name = next(_names)
    (tmp_path / name).mkdir()
    raw = json.dumps({"model_type": "gpt2", "n_embd": 32, "pad": list(range(pad))})
    (tmp_path / name / "config.json").write_text(raw)
    return name, str(tmp_path / name / "config.json")


async def open_reading(client: LanguageClient, tmp_path, *names: str) -> Doc:
    """A run file in `tmp_path` reading the config.json of each checkpoint named; its diagnostics published."""
    text = fixture_text() + "".join(f'(def h{i} (checkpoint-config "{n}" :width))\n' for i, n in enumerate(names))
    path = tmp_path / f"run-{'-'.join(names)}.sx"
    doc = Doc(client, path.as_uri(), text)
    await published(client, doc.uri, 1)
    return doc


async def usage(client: LanguageClient) -> dict:
    """The server's `sexpgpu/memoryUsage` answer as plain dicts and lists (pygls's client gives namedtuples)."""
    def plain(v):
        if hasattr(v, "_asdict"):
            return {k: plain(x) for k, x in v._asdict().items()}
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return [plain(x) for x in v] if isinstance(v, (list, tuple)) else v
    return plain(await client.protocol.send_request_async(MEMORY_USAGE, {}))


def readers(report: dict, path: str) -> list[str] | None:
    """The documents that read the kept config at `path`, or None when it is not kept."""
    found = [f["readers"] for f in report["files"] if f["space"] == "config.json" and f["key"] == path]
    return found[0] if found else None


@pytest.mark.asyncio(loop_scope="module")
async def test_closing_a_document_drops_what_only_it_read(client: LanguageClient, tmp_path):
    a_name, a_config = checkpoint(tmp_path)
    b_name, b_config = checkpoint(tmp_path)
    shared_name, shared_config = checkpoint(tmp_path)
    a = await open_reading(client, tmp_path, a_name, shared_name)
    b = await open_reading(client, tmp_path, b_name, shared_name)
    before = await usage(client)
    assert readers(before, a_config) == [a.uri] and readers(before, b_config) == [b.uri]
    assert readers(before, shared_config) == sorted([a.uri, b.uri])
    a.close()
    after = await usage(client)
    assert readers(after, a_config) is None, "the closed document's config is still kept"
    assert readers(after, b_config) == [b.uri] and readers(after, shared_config) == [b.uri]
    assert after["documents"] == [b.uri]
    # An edit that stops naming a file lets it go too, once the check of that edit ends.
    version = b.change(f'(def h1 (checkpoint-config "{shared_name}" :width))\n', "")
    await published(client, b.uri, version)
    assert readers(await usage(client), shared_config) is None
    assert readers(await usage(client), b_config) == [b.uri]
    b.close()
    assert (await usage(client))["files"] == []


@pytest.mark.asyncio(loop_scope="module")
async def test_the_kept_configs_are_bounded_in_bytes_the_oldest_out_first(client: LanguageClient, tmp_path):
    configs = [checkpoint(tmp_path, pad=5_300) for _ in range(3)]
    size = json_memory((tmp_path / configs[0][0] / "config.json").read_text())
    assert BUDGET / 3 < size < BUDGET / 2, size     # two fit, three do not
    docs = [await open_reading(client, tmp_path, name) for name, _ in configs]
    report = await usage(client)
    [space] = [s for s in report["spaces"] if s["name"] == "config.json"]
    assert space["max_bytes"] == BUDGET and space["bytes"] <= BUDGET and space["entries"] == 2
    assert readers(report, configs[0][1]) is None, "the least recently used config was not dropped"
    assert readers(report, configs[1][1]) == [docs[1].uri] and readers(report, configs[2][1]) == [docs[2].uri]
    assert report["bytes"] <= report["limit"]
    for doc in docs:
        doc.close()


# --------------------------------------------------------------------------- in process

@pytest.fixture
def space():
    s = kept.Space("test space", max_entries=100, max_bytes=1_000)
    yield s
    s.clear()


def test_a_space_drops_its_least_recently_used_entries_past_its_bytes(space):
    space.keep("a", 1, 400)
    space.keep("b", 2, 400)
    assert space.lookup("a") == 1            # now "b" is the least recently used
    space.keep("c", 3, 400)
    assert space.lookup("b") is kept.MISSING and space.lookup("a") == 1 and space.lookup("c") == 3
    assert space.nbytes == 800
    space.keep("huge", 4, 1_001)             # larger than the space: not kept, nothing dropped
    assert space.lookup("huge") is kept.MISSING and len(space) == 2


def test_all_spaces_together_are_bounded_by_memory_limit(space, monkeypatch):
    other = kept.Space("other test space", max_entries=100, max_bytes=1_000)
    kept.forget()                            # (nothing older in any space: the oldest entry is ours)
    try:
        monkeypatch.setattr(kept, "MEMORY_LIMIT", 1_000)
        space.keep("old", 1, 600)
        other.keep("new", 2, 600)            # together past the limit: the older entry goes
        assert space.lookup("old") is kept.MISSING and other.lookup("new") == 2
        assert kept.usage()["bytes"] <= kept.MEMORY_LIMIT
    finally:
        other.clear()


def test_entries_are_dropped_with_the_last_document_that_read_them(space):
    with kept.reading("doc-a"):
        space.keep("only-a", 1, 10)
        space.keep("both", 2, 10)
    with kept.reading("doc-b"):
        assert space.lookup("both") == 2
        space.keep("only-b", 3, 10)
    space.keep("no-reader", 4, 10)           # (as `sexpgpu lint` keeps it: only the bounds drop it)
    assert kept.forget_reader("doc-a") == 1
    assert space.lookup("only-a") is kept.MISSING and space.lookup("both") == 2
    with kept.reading("doc-b"):              # doc-b's next check reads only "only-b"
        space.lookup("only-b")
    assert space.lookup("both") is kept.MISSING and space.lookup("only-b") == 3
    kept.forget_reader("doc-b")
    assert space.lookup("only-b") is kept.MISSING and space.lookup("no-reader") == 4


def test_a_check_stopped_by_an_exception_settles_nothing(space):
    with kept.reading("doc"):
        space.keep("x", 1, 10)
    with pytest.raises(RuntimeError):
        with kept.reading("doc"):
            raise RuntimeError("cancelled before it read x")
    assert space.lookup("x") == 1


def test_memo_keeps_results_not_exceptions(space):
    calls = []

    @kept.memo(space, nbytes=lambda v: 10)
    def f(x, fail=False):
        calls.append(x)
        if fail:
            raise ValueError(x)
        return x * 2

    assert f(2) == 4 and f(2) == 4 and calls == [2]
    for _ in range(2):
        with pytest.raises(ValueError):
            f(3, fail=True)
    assert calls == [2, 3, 3]
    f.cache_clear()
    assert f(2) == 4 and calls == [2, 3, 3, 2]


def test_the_estimate_is_near_what_python_allocates():
    import tracemalloc
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        value = {f"layer.{i}.weight": ((i, 64, 4), "f32") for i in range(50_000)}
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.7 * allocated < kept.estimate(value) < 1.3 * allocated
