"""Reliability trials: faults that trials of the tool provoke, each repeated and printed as k/N passed.

    .venv/bin/python benchmarks/reliability.py                 # every trial, a few of each (~5-10 min on 2 cores)
    .venv/bin/python benchmarks/reliability.py --trials 20     # 20 of each
    .venv/bin/python benchmarks/reliability.py --only lexer,ranges --budget 120

Trials (each bounded by timeouts; `--budget` seconds in all, after which the
remaining trials are skipped and the counts say how many ran):

- `lexer`: lint time of a 105 KB run file with 0 and with 1,000 NUL characters
  (passes when the second is under 10x the first);
- `nulrun`: the front end's time per bad character on a run of 1,000 and of
  16,000 NULs in examples/gpt2.sx (passes when the second is under 3x the
  first: linear in the run's length);
- `ranges`: the fixture with one integer past what its setting holds (a
  seed of 2^63, `:microbatches` of 2^64, `:trips` of 2^31 - 1 ...): passes
  when `lint` gives an error for it (`run` cannot take it);
- `signals`: `sexpgpu run` gets SIGINT or SIGTERM at a random moment of its
  first seconds or its training (half the time a second one 2 ms later);
  passes when it exits 130, 143 or 0 within 120 s without a traceback, and
  `--resume` then exits 0;
- `kill`: SIGKILL at a random moment while checkpoints are written every
  step; passes when `--resume` exits 0;
- `corrupt`: 4 bytes overwritten (or the file cut to a third) in every data
  file of the newest checkpoint; passes when `--resume` exits 0 from an older
  checkpoint, saying so, without a traceback;
- `special`: a FIFO, /dev/zero or a directory (at random) given as a
  `text-tokens` tokenizer, a `tokens` file, or a `jsonl` or `parquet` prompt
  file (at random), to `lint --read-files` and `run` (at random); passes when
  it exits 1 or 2 within 60 s with a line saying what the path is, and no
  traceback (it hung for good, or grew to 3 GB);
- `meta`: the newest checkpoint's meta item edited (`records` +8 or negative,
  one hex digit of `identity`, `seed` null or text, `records` text, at
  random; an ill-typed one half the time with its digest written again for
  the edit, so only the validation can catch it); passes when `--resume` exits 0 from the
  checkpoint before it, saying so, without a traceback;
- `hostile`: the next of the hostile files (a 60 MB string literal, a 64 MB
  vector, 1e6 `def`s, 50,000 chained `def`s, 32e6 lines, comments or NULs, a
  40,000-element vector given to `sum`, a config.json with a 1e6-character
  `model_type` or of 15.9 MB of empty objects, a 200 MB tokenizer.json, a
  glob over `/`) under `lint`, `lint --read-files` and `explain`; passes
  when each stays under 1 GiB resident and 10 s of CPU (the command's, from
  GNU time: the machine is shared), without a traceback, and a file past a
  limit is a line naming it (`--trials 12` runs each once);
- `server`: the language server at 20 edits/s for 10 s on a run file near
  the token cap (the fixture and 78,000 `def`s: each check takes seconds),
  a hover or a completion after each edit and a document-symbols request
  cancelled at once every tenth; passes when every hover and completion is
  answered within 1 s, every cancellation within 1 s, no version's
  diagnostics arrive after a newer one's and the last version's arrive;
- `concurrency`: two `sexpgpu run` of one file into one run dir started at
  once, or a second run, a `--resume` or an `--overwrite` while the first
  trains (at random); passes when one trains and the other exits 1 naming
  the holder's pid (or, started at once and reaching the dir after the
  first had finished, refused as an earlier run's), and metrics.jsonl holds
  each step once.
"""
from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-generate.sx"
SEXPGPU = [sys.executable, "-m", "sexpgpu_cli.main"]


def run_file(directory: Path, every: int = 2) -> Path:
    """The tiny-generate fixture, logging every step and checkpointing every `every`."""
    f = directory / "tiny.sx"
    f.write_text(FIXTURE.read_text().replace(
        ":log (:every 50))", f":log (:every 1)\n     :checkpoint (:every {every} :keep 2))"))
    return f


def sexpgpu(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(SEXPGPU + list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def trial_lexer(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    text = FIXTURE.read_text()
    text = (text * (105_000 // len(text) + 1))[:105_000]
    chars = list(text)
    for i in rng.sample(range(len(chars)), 1000):
        chars[i] = "\x00"
    times = []
    for name, body in (("clean", text), ("nuls", "".join(chars))):
        f = tmp / f"{name}.sx"
        f.write_text(body)
        t0 = time.perf_counter()
        sexpgpu("lint", str(f), timeout=600)
        times.append(time.perf_counter() - t0)
    return times[1] < 10 * times[0], f"clean {times[0]:.2f} s, 1000 NULs {times[1]:.2f} s"


def trial_nulrun(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    """Time per NUL of `analyze` on gpt2.sx with a run of 1,000 and of 16,000 NULs, each less
    the clean file's time, all measured here, in one process (the best of three each)."""
    sys.path.insert(0, str(ROOT))
    from sexpgpu_lang import analyze
    text = (ROOT / "examples" / "gpt2.sx").read_text()
    at = rng.randrange(len(text))

    def best(body: str) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            analyze(body, "gpt2.sx")
            times.append(time.perf_counter() - t0)
        return min(times)

    clean = best(text)
    per = {k: max(best(text[:at] + "\x00" * k + text[at:]) - clean, 0.0) / k for k in (1000, 16000)}
    return per[16000] < 3 * per[1000], (f"clean {clean * 1e3:.1f} ms; per NUL {per[1000] * 1e6:.1f} us at 1,000, "
                                        f"{per[16000] * 1e6:.1f} us at 16,000 (x{per[16000] / max(per[1000], 1e-12):.2f})")


RANGE_EDITS = [("(def seq 8)", "(def seq 18446744073709551616)"), ("(def dim 64)", "(def dim -1)"),
               (":seed 0", ":seed 9223372036854775808"), (":microbatches 2", ":microbatches 18446744073709551616"),
               (":trips 6", ":trips 2147483647")]


def trial_ranges(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    old, new = rng.choice(RANGE_EDITS)
    f = tmp / "range.sx"
    f.write_text(FIXTURE.read_text().replace(old, new))
    r = sexpgpu("lint", str(f))
    return r.returncode == 1 and "error[" in r.stdout, new


def _resume(f: Path, d: Path, steps: int) -> subprocess.CompletedProcess:
    return sexpgpu("run", str(f), "--resume", "--run-dir", str(d), "--steps", str(steps), "--no-progress")


def trial_signals(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    f, d = run_file(tmp), tmp / "out"
    sig = rng.choice((signal.SIGINT, signal.SIGTERM))
    twice = rng.random() < 0.5
    delay = rng.uniform(0.0, 12.0)
    p = subprocess.Popen(SEXPGPU + ["run", str(f), "--steps", "100000", "--run-dir", str(d), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    time.sleep(delay)
    p.send_signal(sig)
    if twice:
        time.sleep(0.002)
        p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        return False, f"{sig.name}{' x2' if twice else ''} at {delay:.1f} s: still running after 120 s"
    what = f"{sig.name}{' x2' if twice else ''} at {delay:.1f} s: exit {p.returncode}"
    if p.returncode not in (0, 130, 143) or "Traceback" in err:
        return False, what + " " + err.strip().splitlines()[-1:][0] if err.strip() else what
    if not (d / "checkpoints").exists() or not any(x.name.isdigit() for x in (d / "checkpoints").iterdir()):
        return True, what + " (nothing to resume)"
    r = _resume(f, d, 6)
    return r.returncode == 0 and "Traceback" not in r.stderr, what + f", resume exit {r.returncode}"


def trial_kill(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    f, d = run_file(tmp, every=1), tmp / "out"
    p = subprocess.Popen(SEXPGPU + ["run", str(f), "--steps", "100000", "--run-dir", str(d), "--no-progress"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for line in p.stderr:
        if line.startswith("step 2/"):
            break
    time.sleep(rng.uniform(0.0, 3.0))
    p.kill()
    p.wait(timeout=60)
    r = _resume(f, d, 4)
    return r.returncode == 0, f"resume exit {r.returncode}" + ("" if r.returncode == 0 else ": " + r.stderr.strip()[-200:])


def trial_corrupt(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    f, d = run_file(tmp), tmp / "out"
    r = sexpgpu("run", str(f), "--steps", "6", "--run-dir", str(d), "--no-progress")
    if r.returncode != 0:
        return False, "the first run failed: " + r.stderr.strip()[-200:]
    newest = d / "checkpoints" / "6"
    files = [p for p in newest.rglob("*") if p.is_file() and p.parent.name == "d"]
    cut = rng.random() < 0.3
    for p in files:
        data = bytearray(p.read_bytes())
        if cut:
            data = data[: len(data) // 3]
        else:
            at = rng.randrange(max(1, len(data) - 4))
            data[at:at + 4] = bytes(rng.randrange(256) for _ in range(4))
        p.write_bytes(bytes(data))
    r = _resume(f, d, 8)
    said = "newest that verifies" in r.stderr
    ok = r.returncode == 0 and said and "Traceback" not in r.stderr and "Task exception" not in r.stderr
    return ok, f"{'cut' if cut else '4 bytes'} in {len(files)} files: exit {r.returncode}, fallback said: {said}"


PROMPT_RUN = """(loader train
  :source SOURCE
  :batch 2
  :fields (:x [8] :i32))
(defmodel m :params (:w (normal [16 16] :std 0.1)) :apply (lambda (self x) (take (getf self :w) x)))
(model m)
(objective (lambda (batch ctx) (mean (cross-entropy (model (field batch :x)) (field batch :x)))))
(run :loader train :steps 1 :seed 0)
"""
SPECIAL_SOURCES = {"tokenizer": '(text-tokens "*.txt" :tokenizer "PATH" :seq 8 :vocab 16)',
                   "tokens": '(tokens "PATH" :dtype :uint16 :seq 8 :vocab 16)',
                   "jsonl": '(jsonl "PATH")', "parquet": '(parquet "PATH")'}
SPECIAL_WORDS = {"fifo": "named pipe (FIFO)", "zero": "character device", "dir": "directory"}


def trial_special(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    import os
    kind, where, how = rng.choice(list(SPECIAL_WORDS)), rng.choice(list(SPECIAL_SOURCES)), rng.choice(("lint", "run"))
    (tmp / "a.txt").write_text("some text to tokenize " * 20)
    path = {"fifo": str(tmp / "pipe"), "zero": "/dev/zero", "dir": str(tmp / "adir")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        os.mkdir(path)
    f = tmp / "special.sx"
    f.write_text(PROMPT_RUN.replace("SOURCE", SPECIAL_SOURCES[where].replace("PATH", path)))
    args = ["lint", "--read-files", str(f)] if how == "lint" else ["run", str(f), "--run-dir", str(tmp / "out"),
                                                                    "--no-progress"]
    what = f"{how}: {where} is a {kind}"
    try:
        r = sexpgpu(*args, timeout=60)
    except subprocess.TimeoutExpired:
        return False, what + ": still running after 60 s"
    out = r.stdout + r.stderr
    ok = r.returncode in (1, 2) and SPECIAL_WORDS[kind] in out and "Traceback" not in out
    return ok, what + f": exit {r.returncode}" + ("" if ok else ": " + out.strip()[-300:])


def _hostile_cases() -> dict:
    """Each hostile file: (what to write into `tmp`, returning the run file; the words the output must
    hold: the limit's line, or None for a file within every limit that is checked in full)."""
    base = FIXTURE.read_text()
    prompt = PROMPT_RUN

    def run_file(body: str):
        def write(tmp: Path) -> Path:
            f = tmp / "hostile.sx"
            with open(f, "w") as fh:
                fh.write(base)
                fh.write(body() if callable(body) else body)
            return f
        return write

    def with_config(config: str):
        def write(tmp: Path) -> Path:
            (tmp / "ck").mkdir()
            (tmp / "ck" / "config.json").write_text(config)
            f = tmp / "hostile.sx"
            f.write_text(base + '\n(def h (checkpoint-config "ck" :width))\n')
            return f
        return write

    def with_tokenizer(size: int):
        def write(tmp: Path) -> Path:
            (tmp / "a.txt").write_text("some text to tokenize " * 20)
            n = size // 24
            with open(tmp / "tok.json", "w") as fh:
                fh.write('{"model": {"type": "BPE", "vocab": {')
                fh.write(",".join(f'"t{i:09d}": {i}' for i in range(n)))
                fh.write('}, "merges": []}, "added_tokens": []}')
            f = tmp / "hostile.sx"
            f.write_text(prompt.replace("SOURCE", '(text-tokens "*.txt" :tokenizer "tok.json" :seq 8 :vocab 16)'))
            return f
        return write

    def glob_root(tmp: Path) -> Path:
        f = tmp / "hostile.sx"
        (tmp / "tok.json").write_text('{"model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}')
        f.write_text(prompt.replace("SOURCE", '(text-tokens "/**/*" :tokenizer "tok.json" :seq 8 :vocab 16)'))
        return f

    vec = " ".join(str(i % 10) for i in range(40_000))
    return {
        "literal 60 MB": (run_file(lambda: '(def s "' + "a" * 60_000_000 + '")\n'), None),
        "vector 64 MB": (run_file(lambda: "(def v [" + "1 " * 32_000_000 + "])\n"), "TOKEN_LIMIT"),
        "1e6 flat defs": (run_file(lambda: "".join(f"(def f{i} {i})\n" for i in range(1_000_000))), "TOKEN_LIMIT"),
        "50,000 chained defs": (run_file(lambda: "(def d0 1)\n" + "".join(f"(def d{i} (+ d{i - 1} 1))\n"
                                                                        for i in range(1, 50_000))), None),
        "32e6 lines": (run_file(lambda: "\n(" * 32_000_000), "TOKEN_LIMIT"),
        "32e6 comments": (run_file(lambda: ";\n" * 32_000_000), "TOKEN_LIMIT"),
        "32e6 NULs": (run_file(lambda: "\x00 " * 32_000_000), "TOKEN_LIMIT"),
        "40,000-element vector to sum": (run_file(f"(def a (sum [{vec}]))\n"), "39,984 more] shape"),
        "1e6-character model_type": (with_config('{"model_type": "' + "q" * 1_000_000 + '"}'), "…"),
        "15.9 MB config.json": (with_config('{"model_type": "gpt2", "x": [' + ",".join(["{}"] * 5_300_000) + "]}"),
                                "JSON_MEMORY_BUDGET"),
        "200 MB tokenizer.json": (with_tokenizer(200_000_000), "JSON_MEMORY_BUDGET"),
        "glob over /": (glob_root, "GLOB_WALK_LIMIT"),
    }


HOSTILE_COMMANDS = (("lint",), ("lint", "--read-files"), ("explain",))
READ_CASES = ("1e6-character model_type", "15.9 MB config.json", "200 MB tokenizer.json", "glob over /")
_hostile_next = [0]


def trial_hostile(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    """The next hostile file (in turn) under each of `lint`, `lint --read-files` and `explain`: passes
    when each stays under 1 GiB resident and 10 s of CPU, without a traceback, saying the limit's
    words (for a file past a limit) in a line. CPU time and peak RSS are the child's (GNU time)."""
    cases = _hostile_cases()
    name = list(cases)[_hostile_next[0] % len(cases)]
    _hostile_next[0] += 1
    write, words = cases[name]
    f = write(tmp)
    notes, ok = [], True
    for command in HOSTILE_COMMANDS:
        # Through GNU time, a small process: a child forked from this one (which wrote the file) would
        # report this one's resident memory as its own peak (Linux keeps the forked copy's at exec).
        p = subprocess.run(["/usr/bin/time", "-o", str(tmp / "usage"), "-f", "%U %S %M", *SEXPGPU, *command, str(f)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp)
        out = p.stdout.decode("utf-8", "replace")
        user, system, kib = (tmp / "usage").read_text().split()[-3:]
        cpu, rss = float(user) + float(system), int(kib) / 1024
        # a file the run file names is read by `lint --read-files`; the others need not say its words
        said = words is None or words in out or (name in READ_CASES and command != ("lint", "--read-files"))
        good = rss < 1024 and cpu < 10 and "Traceback" not in out and said and max(map(len, out.splitlines() or [""])) < 5_000
        ok = ok and good
        notes.append(f"{' '.join(command)}: {cpu:.1f} s CPU, {rss:.0f} MiB" + ("" if good else " FAIL: " + out.strip()[-200:]))
    return ok, f"{name}: " + "; ".join(notes)


SERVER_DEFS = 78_000   # with the fixture, just under TOKEN_LIMIT (400,000 tokens): a check of seconds


async def _server_session(rng: random.Random, seconds: float, rate: float) -> dict:
    """The language server (`python -m lsp`, as editors start it) on a run file near the token cap,
    edited `rate` times a second for `seconds` while its checks run; after each edit a hover or a
    completion (alternately) in the unchanged part, and every tenth edit a document-symbols request
    cancelled at once. Returns each answer's latency (s), each cancellation's, the versions whose
    diagnostics were published (in order), and the seconds from the last edit to its diagnostics."""
    import asyncio

    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    base = FIXTURE.read_text()
    text = base + "".join(f"(def pad{i} {i})\n" for i in range(SERVER_DEFS))
    client = LanguageClient("reliability", "1")
    published: list[tuple[float, int]] = []

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_publish(params: types.PublishDiagnosticsParams):
        published.append((time.perf_counter(), params.version))

    await client.start_io(sys.executable, "-m", "lsp", cwd=str(ROOT))
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities()))
    client.initialized(types.InitializedParams())
    uri = "file:///reliability/near-the-cap.sx"
    doc = types.TextDocumentIdentifier(uri=uri)
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="sexpgpu", version=1, text=text)))
    lines = base.split("\n")
    dim = next(i for i, line in enumerate(lines) if line.startswith("(def dim"))
    stride = next(i for i, line in enumerate(lines) if "(getf state :stride)" in line)
    stride_at = types.Position(line=stride, character=lines[stride].index("(getf state :stride)") + 13)
    last = base.count("\n") + SERVER_DEFS - 1    # the line of the last def: `(def padN N)`
    answers: list[float] = []
    cancels: list[float] = []
    pending = []

    def timed(sent: float, into: list):
        def done(fut):
            into.append(time.perf_counter() - sent)
            if not fut.cancelled():
                fut.exception()   # (a cancelled request's error is its answer)
        return done

    version = 1
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        version += 1
        digit = str(rng.randrange(10))
        col = len(f"(def pad{SERVER_DEFS - 1} ")
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(line=last, character=col),
                                  end=types.Position(line=last, character=col + 1)), text=digit)]))
        sent = time.perf_counter()
        if version % 2:
            fut = client.text_document_hover_async(types.HoverParams(
                text_document=doc, position=types.Position(line=dim, character=5)))
        else:
            fut = client.text_document_completion_async(types.CompletionParams(text_document=doc, position=stride_at))
        fut = asyncio.ensure_future(fut)
        fut.add_done_callback(timed(sent, answers))
        pending.append(fut)
        if version % 10 == 0:
            msg_id = f"symbols-{version}"
            sym = asyncio.ensure_future(client.protocol.send_request_async(
                types.TEXT_DOCUMENT_DOCUMENT_SYMBOL, types.DocumentSymbolParams(text_document=doc), msg_id=msg_id))
            await asyncio.sleep(0)
            client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
            sym.add_done_callback(timed(time.perf_counter(), cancels))
            pending.append(sym)
        await asyncio.sleep(1 / rate)
    last_edit = time.perf_counter()
    sent_requests = sum(1 for _ in range(2, version + 1))
    sent_cancels = version // 10
    await asyncio.wait(pending, timeout=60)
    deadline = time.perf_counter() + 60
    while not any(v == version for _, v in published) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    final = next((t - last_edit for t, v in published if v == version), None)
    try:   # the server's peak resident memory (Linux /proc), in MiB
        status = Path(f"/proc/{client._server.pid}/status").read_text()
        peak = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024
    except (OSError, StopIteration, AttributeError):
        peak = None
    try:   # (a server that answers nothing any more is stopped)
        await asyncio.wait_for(client.shutdown_async(None), 30)
        client.exit(None)
    except asyncio.TimeoutError:
        client._server.kill()
    await client.stop()
    return {"answers": answers, "sent": sent_requests, "cancels": cancels, "sent_cancels": sent_cancels,
            "versions": [v for _, v in published], "last": version, "final_s": final, "peak_mib": peak}


def trial_server(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    """The server at 20 edits/s for 10 s on a run file near the token cap: passes when every hover
    and completion is answered within 1 s, every cancelled request within 1 s of its cancellation,
    no version's diagnostics arrive after a newer one's, and the last version's arrive."""
    import asyncio
    import os
    load = os.getloadavg()[0]
    got = asyncio.run(_server_session(rng, seconds=10, rate=20))
    within = sum(1 for a in got["answers"] if a < 1.0)
    cancelled = sum(1 for a in got["cancels"] if a < 1.0)
    ordered = got["versions"] == sorted(got["versions"])
    ok = (within == got["sent"] and cancelled == got["sent_cancels"] and ordered
          and got["final_s"] is not None and got["versions"][-1] == got["last"])
    answers = sorted(got["answers"]) or [float("nan")]
    return ok, (f"hover/completion {within}/{got['sent']} within 1 s (p50 {answers[len(answers) // 2]:.2f} s, "
                f"max {answers[-1]:.2f} s), cancellations {cancelled}/{got['sent_cancels']} within 1 s, "
                f"diagnostics of versions {got['versions']} (in order: {ordered}), the last "
                f"{got['final_s'] if got['final_s'] is None else round(got['final_s'], 1)} s after the last edit; "
                f"peak {got['peak_mib'] or 0:.0f} MiB resident; load average {load:.1f}")


def _rows(d: Path) -> list[int]:
    import json
    try:
        return [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]
    except (OSError, ValueError, KeyError):
        return []


def trial_concurrency(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    f, d, steps = run_file(tmp), tmp / "out", 150   # (long enough that the second reaches the dir while it trains)
    base = SEXPGPU + ["run", str(f), "--steps", str(steps), "--run-dir", str(d), "--no-progress"]
    how = rng.choice(("at once", "second run", "resume", "overwrite"))
    first = subprocess.Popen(base, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        if how == "at once":
            other = subprocess.Popen(base, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        else:
            for line in first.stderr:
                if line.startswith("step 3/"):
                    break
            extra = {"second run": [], "resume": ["--resume"], "overwrite": ["--overwrite"]}[how]
            other = subprocess.Popen(base + extra, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        errs = {p.pid: p.communicate(timeout=300)[1] for p in (other, first)}
    finally:
        first.kill()
        if "other" in locals():
            other.kill()
    codes = sorted((p.returncode, p.pid) for p in (first, other))
    what = f"{how}: exits {[c for c, _ in codes]}"
    if [c for c, _ in codes] != [0, 1]:
        return False, what
    (_, winner), (_, loser) = codes
    err = errs[loser]
    refused = (f"is in use by another run: pid {winner} on host" in err
               or (how == "at once" and "already holds checkpoints of this run" in err))
    exact = _rows(d) == list(range(1, steps + 1))
    ok = refused and exact and "Traceback" not in err + errs[winner]
    return ok, what + ("" if ok else f", refused {refused}, rows exact {exact}: " + err.strip()[-200:])


def _edit_meta(rng: random.Random, meta: dict) -> str:
    edit = rng.choice(("records+8", "records-4", "identity", "seed-null", "seed-text", "records-text"))
    if edit == "records+8":
        meta["records"] += 8
    elif edit == "records-4":
        meta["records"] = -4
    elif edit == "identity":
        h = meta["identity"]
        meta["identity"] = h[:5] + ("0" if h[5] != "0" else "1") + h[6:]
    elif edit == "seed-null":
        meta["seed"] = None
    elif edit == "seed-text":
        meta["seed"] = str(meta["seed"])
    else:
        meta["records"] = str(meta["records"])
    return edit


def trial_meta(rng: random.Random, tmp: Path) -> tuple[bool, str]:
    import json
    sys.path.insert(0, str(ROOT))
    f, d = run_file(tmp), tmp / "out"
    r = sexpgpu("run", str(f), "--steps", "6", "--run-dir", str(d), "--no-progress")
    if r.returncode != 0:
        return False, "the first run failed: " + r.stderr.strip()[-200:]
    path = d / "checkpoints" / "6" / "meta" / "metadata"
    meta = json.loads(path.read_text())
    edit = _edit_meta(rng, meta)
    # (an edit that leaves a valid meta item, written with its digest again, is a forgery no
    # check can tell from a real checkpoint: only the ill-typed ones get their digest again)
    redigest = edit not in ("records+8", "identity") and rng.random() < 0.5
    if redigest:
        import zlib
        rest = {k: v for k, v in meta.items() if k != "meta_digest"}
        meta["meta_digest"] = zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())
    path.write_text(json.dumps(meta))
    r = _resume(f, d, 8)
    said = "resuming from checkpoint step 4, the newest that verifies" in r.stderr
    ok = r.returncode == 0 and said and "Traceback" not in r.stderr
    return ok, f"{edit}{' (digest written again)' if redigest else ''}: exit {r.returncode}, fallback said: {said}" + (
        "" if ok else ": " + r.stderr.strip()[-300:])


TRIALS = {"lexer": trial_lexer, "nulrun": trial_nulrun, "ranges": trial_ranges, "signals": trial_signals, "kill": trial_kill,
          "corrupt": trial_corrupt, "special": trial_special, "meta": trial_meta, "concurrency": trial_concurrency,
          "hostile": trial_hostile, "server": trial_server}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3, help="trials of each kind (lexer: 1)")
    ap.add_argument("--only", default=",".join(TRIALS), help="comma-separated kinds")
    ap.add_argument("--budget", type=float, default=900, help="seconds in all")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every trial")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    t_end = time.monotonic() + a.budget
    for kind in a.only.split(","):
        n = 1 if kind in ("lexer", "nulrun") else a.trials
        passed = ran = 0
        notes = []
        for _ in range(n):
            if time.monotonic() > t_end:
                break
            tmp = Path(tempfile.mkdtemp(prefix=f"sexpgpu-{kind}-"))
            try:
                ok, note = TRIALS[kind](rng, tmp)
            except subprocess.TimeoutExpired as e:
                ok, note = False, f"timed out: {e}"
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            ran += 1
            passed += ok
            if a.verbose or not ok:
                notes.append(("ok   " if ok else "FAIL ") + note)
        print(f"{kind:8s} {passed}/{ran}" + (f" (of {n}; budget spent)" if ran < n else ""), flush=True)
        for line in notes:
            print("   " + line)


if __name__ == "__main__":
    main()
