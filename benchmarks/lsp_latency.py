"""Benchmark: edit-to-diagnostics latency of the language server on a generated 2,000-line run file.

Starts `python -m lsp` (the server `sexpgpu lsp` runs) as an editor would,
over stdio, and opens a run file generated from the tiny-generate fixture:
the student model applies a stack of residual layers, each layer a
`defmodel` of its own with a comment block, so the file is as long as
asked (2,000 lines by default) and checks clean. Then, one at a time, it
sends an incremental `didChange` that toggles an unbound name in the last
layer in and out, and times each edit until the server publishes the
diagnostics for that version (which must be right: one E-NAME-001, or
none). Prints the file's size, the front end's own time for the file
(cold, and with the cache of the version before, as the server checks an
edit), the latency's p50, p99 and max in milliseconds, and the server
process's CPU time per edit (user + system, from /proc; it does not count
the waits for a core on a loaded machine, so it varies less than the wall
times).

    .venv/bin/python benchmarks/lsp_latency.py [--lines 2000] [--edits 60]

Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LAYER = """\
;; layer {k}: a residual block, h + relu(h w{k} + b{k}).
;; It keeps the hidden size, so the stack can be as deep as we like.
(defmodel layer{k}
  :params (:w (normal [dim dim] :std 0.02)
           :b (zeros [dim]))
  :apply (lambda (self h)
           (let* ((a (matmul h (getf self :w)))
                  (z (+ a (getf self :b)))
                  (r (relu z)))
             (+ h r))))

"""


def generate(lines: int) -> str:
    """The tiny-generate fixture with a stack of layers, about `lines` lines long; it checks clean."""
    base = (ROOT / "tests" / "fixtures" / "tiny-generate.sx").read_text()
    fixed = base.count("\n") + 4
    per_layer = LAYER.count("\n") + 2
    n = max(1, (lines - fixed) // per_layer)
    layers = "".join(LAYER.format(k=k) for k in range(1, n + 1))
    subs = "\n".join(f"           :l{k} layer{k}" for k in range(1, n + 1))
    calls = "\n".join(f"                  (h{k} (layer{k} h{k - 1}))" for k in range(1, n + 1))
    text = base.replace(
        "           :out (normal [dim vocab] :std 0.1))",
        "           :out (normal [dim vocab] :std 0.1)\n" + subs + ")")
    text = text.replace(
        "                  (h (relu (matmul (+ here start next) (getf self :hidden)))))",
        "                  (h0 (relu (matmul (+ here start next) (getf self :hidden))))\n" + calls + ")")
    text = text.replace("             (matmul h (getf self :out)))))", f"             (matmul h{n} (getf self :out)))))")
    return text.replace("(defmodel student", layers + "(defmodel student", 1)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux /proc), or None where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    import os
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(text: str, edits: int) -> list[float]:
    """Milliseconds from each `didChange` to the diagnostics of its version."""
    return (await measure_with_cpu(text, edits))[0]


async def measure_with_cpu(text: str, edits: int, first: bool = False) -> tuple[list[float], float | None]:
    """Milliseconds from each `didChange` to the diagnostics of its version, and the
    server's CPU milliseconds per edit (None where it cannot be read). The edits are in
    the last layer, or with `first` in the first (which moves every form after it)."""
    client = LanguageClient("lsp-latency", "1")
    arrived: dict[int, tuple[float, list]] = {}
    got = asyncio.Event()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_publish(params: types.PublishDiagnosticsParams):
        arrived[params.version] = (time.perf_counter(), [d.code for d in params.diagnostics])
        got.set()

    await client.start_io(sys.executable, "-m", "lsp", cwd=str(ROOT))
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities()))
    client.initialized(types.InitializedParams())
    uri = "file:///bench/big.sx"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="sexpgpu", version=1, text=text)))
    await wait_for(arrived, got, 1)
    assert arrived[1][1] == [], f"the generated file should check clean, got {arrived[1][1]}"

    lines = text.split("\n")
    line = (min if first else max)(i for i, s in enumerate(lines) if "(r (relu z))" in s)
    col = lines[line].index("(relu z)") + len("(relu ")
    latencies = []
    pid = client._server.pid if client._server is not None else None
    cpu0 = cpu_seconds(pid) if pid else None
    for i in range(edits):
        version = i + 2
        broken = i % 2 == 0
        rng = types.Range(start=types.Position(line=line, character=col),
                          end=types.Position(line=line, character=col + (1 if broken else 2)))
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=rng, text="zz" if broken else "z")]))
        await wait_for(arrived, got, version)
        done, codes = arrived[version]
        assert codes == (["E-NAME-001"] if broken else []), (version, codes)
        latencies.append((done - sent) * 1000)
    cpu1 = cpu_seconds(pid) if pid else None
    cpu_ms = (cpu1 - cpu0) * 1000 / edits if cpu0 is not None and cpu1 is not None and edits else None

    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return latencies, cpu_ms


async def wait_for(arrived: dict, got: asyncio.Event, version: int, timeout: float = 120) -> None:
    deadline = time.perf_counter() + timeout
    while version not in arrived:
        got.clear()
        await asyncio.wait_for(got.wait(), max(0.01, deadline - time.perf_counter()))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2000, help="length of the generated run file")
    parser.add_argument("--edits", type=int, default=60, help="edits to time")
    parser.add_argument("--save", type=Path, help="also write the generated run file here")
    parser.add_argument("--first", action="store_true",
                        help="edit the first layer instead of the last: every form after it moves")
    args = parser.parse_args()

    text = generate(args.lines)
    if args.save:
        args.save.write_text(text)
    from sexpgpu_lang import analyze
    t0 = time.perf_counter()
    analyze(text, "big.sx")
    check_ms = (time.perf_counter() - t0) * 1000
    edit_ms = front_end_edit_ms(text)

    latencies, cpu_ms = asyncio.run(measure_with_cpu(text, args.edits, args.first))
    print(f"run file: {text.count(chr(10))} lines, {len(text)} characters; front end alone {check_ms:.0f} ms cold, "
          f"{edit_ms:.0f} ms CPU for an edit with the server's cache (median)")
    print(f"edit to diagnostics over {len(latencies)} edits: p50 {percentile(latencies, 50):.0f} ms, "
          f"p99 {percentile(latencies, 99):.0f} ms, max {max(latencies):.0f} ms, "
          f"mean {statistics.fmean(latencies):.0f} ms"
          + (f"; server CPU {cpu_ms:.1f} ms per edit" if cpu_ms is not None else ""))


def front_end_edit_ms(text: str, rounds: int = 10) -> float:
    """Median CPU milliseconds of the server's check of an edited version, in this process:
    parse and check with the document's `CheckCache`, no IR (lsp/documents.py)."""
    from sexpgpu_lang import SourceText
    from sexpgpu_lang.check import CheckCache, check
    from sexpgpu_lang.syntax import parse
    broken = text[:text.rindex("(r (relu z))")] + "(r (relu zz))" + text[text.rindex("(r (relu z))") + 12:]
    cache = CheckCache()
    times = []
    for i in range(rounds + 1):
        t0 = time.process_time()
        check(parse(SourceText(broken if i % 2 else text, "big.sx")), cache=cache, build_ir=False)
        times.append((time.process_time() - t0) * 1000)
    return statistics.median(times[1:])


if __name__ == "__main__":
    main()
