"""What running Betterleaks in a worker process costs, per passage, against running it in
lore's process (which crashed beside the local model: ``lore/safety/secret_detector.py``).

One process, every chunk of the shared corpora (chunked as sync does), three ways,
alternated in blocks so they see the same machine load:

- ``in process``: ``betterleaks.scan_string`` through its bindings, as lore did before;
- ``worker``: the same scan as a round trip to lore's worker process, one text a call
  (as a single redaction makes it) and 36 texts a call (as a cold search's batch of
  passages, titles, sections and uris makes it);
- ``redactor``: the whole ``SecretRedactor`` (lore's rules, then the worker), for scale.

``--paced N``: instead, what one query's scan costs as a server makes it: N distinct short
queries through the worker, one at a time, first back to back and then with ``--gap`` ms
between them (a server scans one query per search, its worker idle in between). Per scan:
this process's CPU (the client's half of the round trip), the worker's main thread (its
Python loop and the Go call it makes) and the worker's other threads (the Go runtime's),
from ``/proc/<pid>/task/*/schedstat``; and the same through a stand-in worker that answers
every scan with no finding without loading the library (the pipe and Python alone).

``--search N``: instead, the search tool over the example corpus (synced into a temporary
index with the bundled local model; the chain's kept verdicts not used, so that every
text of a search is cleaned at query time) with Betterleaks in process and in its worker,
alternated search by search, each search cold (cleaned-text cache emptied) then warm; p50
of each and the ratio. The library in process beside the local model is the crash the
worker exists for, so this mode needs ``GODEBUG=asyncpreemptoff=1`` from the start.

CPU per passage counts both sides: this process's ``time.process_time`` plus the
worker's own CPU (it reports it); wall time per passage too. Printed with the ratios to
``in process`` and the load average. Findings of the two Betterleaks ways are compared
(they must be equal).

    LORE_BENCH_CORPORA=../shared/corpora PYTHONPATH=src .venv/bin/python \\
        bench/secret_detector_cost.py [--passages 3000] [--blocks 10]
    GODEBUG=asyncpreemptoff=1 PYTHONPATH=src .venv/bin/python bench/secret_detector_cost.py --search 100
    PYTHONPATH=src .venv/bin/python bench/secret_detector_cost.py --paced 600 [--gap 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from safety_chain_cost import SHARED_CORPORA, corpus_texts, shared_roots

from lore.safety.secrets import _BATCH_SEPARATOR as SEPARATOR

#: Texts a cold search sends in one batch (8 passages with their titles, sections, uris…).
BATCH = 36


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--passages", type=int, default=3000, help="chunks measured (0: all)")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--search", type=int, default=0, help="searches per way and cache state")
    parser.add_argument("--paced", type=int, default=0, help="query scans per way (see above)")
    parser.add_argument("--gap", type=float, default=3.0, help="ms between paced scans")
    args = parser.parse_args()
    if args.search:
        return search(args.search)
    if args.paced:
        return paced(args.paced, args.gap / 1000)
    if not SHARED_CORPORA.is_dir():
        print(f"skipped: {SHARED_CORPORA} is absent")
        return 0

    import betterleaks

    from lore.safety.secret_detector import BetterleaksProcess, shared_process
    from lore.safety.secrets import SecretRedactor

    texts = corpus_texts(shared_roots())
    texts = texts[: args.passages] if args.passages else texts
    worker = BetterleaksProcess()
    redactor = SecretRedactor()

    def in_process(text: str) -> object:
        return sorted((f.rule_id, f.match.value or f.match.full) for f in betterleaks.scan_string(text))

    def through_worker(text: str) -> object:
        return sorted(worker.scan(text))

    def batched(texts: list[str]) -> object:
        return [worker.scan(SEPARATOR.join(texts[i : i + BATCH])) for i in range(0, len(texts), BATCH)]

    ways: dict[str, Callable[[list[str]], object]] = {
        "in process": lambda texts: [in_process(text) for text in texts],
        "worker": lambda texts: [through_worker(text) for text in texts],
        f"worker, {BATCH} a call": batched,
        "redactor": lambda texts: [redactor.redact(text) for text in texts],
    }
    for way in ways.values():
        way(["warm up"])
    shared = shared_process()
    cpu = {name: 0.0 for name in ways}
    wall = {name: 0.0 for name in ways}
    size = max(1, len(texts) // args.blocks)
    mismatched = 0
    for index, start in enumerate(range(0, len(texts), size)):
        block = texts[start : start + size]
        names = list(ways) if index % 2 == 0 else list(reversed(ways))
        for name in names:
            way = ways[name]
            workers = worker.cpu_seconds() + shared.cpu_seconds()
            began, used = time.perf_counter(), time.process_time()
            way(block)
            wall[name] += time.perf_counter() - began
            own = time.process_time() - used
            cpu[name] += own + worker.cpu_seconds() + shared.cpu_seconds() - workers
        mismatched += sum(in_process(text) != through_worker(text) for text in block)
    load = os.getloadavg()[0]
    print(f"{len(texts)} passages; load average {load:.2f}; findings that differ: {mismatched}")
    print(f"{'way':18} {'CPU µs/passage':>15} {'ratio':>6} {'wall µs/passage':>16} {'ratio':>6}")
    base_cpu, base_wall = cpu["in process"], wall["in process"]
    for name in ways:
        print(
            f"{name:18} {cpu[name] / len(texts) * 1e6:>15.1f} {cpu[name] / base_cpu:>6.2f} "
            f"{wall[name] / len(texts) * 1e6:>16.1f} {wall[name] / base_wall:>6.2f}"
        )
    lengths = [len(text) for text in texts]
    print(f"passage length: median {statistics.median(lengths):.0f} characters, max {max(lengths)}")
    worker.close()
    return 0


#: The stand-in worker of ``--paced``: the worker's protocol and loop, no library.
_STAND_IN = """
import os, sys, time
sys.path.insert(0, {folder!r})
from secret_worker import read_frame, write_frame
replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
while (frame := read_frame(sys.stdin.buffer)) is not None:
    op, body = frame
    if op == b"c":
        write_frame(replies, b"c", repr(time.process_time()).encode())
    else:
        body.decode("utf-8")
        write_frame(replies, b"s", b'{{"success": true, "data": []}}')
"""


def _threads_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of each thread of ``pid`` (schedstat: nanoseconds on a CPU)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        found[task.name] = int((task / "schedstat").read_text().split()[0]) / 1e9
    return found


def paced(count: int, gap: float) -> int:
    import tempfile

    import lore.safety.secret_detector as detector

    questions = [f"how do I restart the api gateway (request {n})" for n in range(2 * count)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="lore-detector-paced-") as temporary:
        stand_in = Path(temporary) / "stand_in.py"
        stand_in.write_text(_STAND_IN.format(folder=str(detector.WORKER.parent)), encoding="utf-8")
        for name, script in (("Betterleaks worker", detector.WORKER), ("stand-in, no library", stand_in)):
            worker = detector.BetterleaksProcess()
            detector.WORKER = script  # read when the process starts
            try:
                worker.scan("warm up the worker")
            finally:
                detector.WORKER = Path(detector.__file__).with_name("secret_worker.py")
            assert worker.pid is not None
            main = str(worker.pid)
            texts = iter(questions)
            for pause in (0.0, gap):
                before, own = _threads_cpu(worker.pid), time.process_time()
                for _ in range(count):
                    worker.scan(next(texts))
                    if pause:
                        time.sleep(pause)
                own = time.process_time() - own
                after = _threads_cpu(worker.pid)
                spent = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
                rows.append(
                    (
                        name,
                        pause,
                        own / count * 1e6,
                        spent.get(main, 0.0) / count * 1e6,
                        sum(v for tid, v in spent.items() if tid != main) / count * 1e6,
                    )
                )
            worker.close()
    if gap:
        # time.sleep's own cost is this process's too: measured alone, taken off the paced rows.
        began = time.process_time()
        for _ in range(count):
            time.sleep(gap)
        sleeping = (time.process_time() - began) / count * 1e6
        rows = [(n, p, own - sleeping if p else own, m, o) for n, p, own, m, o in rows]
    print(f"load average {os.getloadavg()[0]:.2f}; {count} scans per row, one short query each")
    header = ("worker", "gap ms", "client µs", "worker main µs", "worker other µs", "total µs")
    print(f"{header[0]:22} {header[1]:>6} {header[2]:>10} {header[3]:>15} {header[4]:>16} {header[5]:>9}")
    for name, pause, own, main_cpu, other in rows:
        total = own + main_cpu + other
        print(f"{name:22} {pause * 1000:>6.1f} {own:>10.1f} {main_cpu:>15.1f} {other:>16.1f} {total:>9.1f}")
    return 0


def search(searches: int) -> int:
    if "asyncpreemptoff=1" not in os.environ.get("GODEBUG", ""):
        print("--search loads the Go library beside the local model: run it with GODEBUG=asyncpreemptoff=1")
        return 2
    import asyncio
    import tempfile

    import betterleaks
    from safety_chain_cost import EXAMPLES, QUESTIONS

    import lore.safety.secrets as secrets
    from lore.access import LOCAL
    from lore.config import load_settings
    from lore.resolve import build_knowledge_search, tool_policy
    from lore.safety.secret_detector import betterleaks_findings
    from lore.sync import run_sync
    from lore.tool.cleaning import PassageCleaner

    def in_process(text: str) -> list[tuple[str, str]]:
        return [(f.rule_id, f.match.value or f.match.full) for f in betterleaks.scan_string(text)]

    ways = {"in process": in_process, "worker": betterleaks_findings}
    with tempfile.TemporaryDirectory(prefix="lore-detector-cost-") as temporary:
        work = Path(temporary)
        settings = load_settings(
            EXAMPLES / "lore.toml",
            db_path=str(work / "lore.db"),
            audit_path=str(work / "audit.jsonl"),
            vault={"enabled": False},
        )
        run_sync(settings)
        tool = build_knowledge_search(settings)
        assert tool is not None
        # Nothing kept: every text of a search is screened and redacted at query time (an
        # index not yet synced by this lore); with sync's kept verdicts a search scans none.
        tool._cleaner = PassageCleaner(tool_policy(settings))
        tool.warm_up()
        samples: dict[tuple[str, str], list[float]] = {(w, s): [] for w in ways for s in ("cold", "warm")}

        async def run() -> None:
            for index in range(len(QUESTIONS) + searches):  # the first round warms up
                order = list(ways) if index % 2 == 0 else list(reversed(ways))
                for way in order:
                    secrets.betterleaks_findings = ways[way]
                    tool.cleaner.forget()
                    for state in ("cold", "warm"):
                        began = time.perf_counter()
                        await tool.run(
                            {"query": QUESTIONS[index % len(QUESTIONS)], "top_k": 8}, principal=LOCAL
                        )
                        if index >= len(QUESTIONS):
                            samples[way, state].append((time.perf_counter() - began) * 1000)

        asyncio.run(run())
    print(f"load average {os.getloadavg()[0]:.2f}; {searches} searches per way and cache state, alternated")
    for state in ("cold", "warm"):
        inside, worker = (statistics.median(samples[way, state]) for way in ways)
        print(f"{state}: p50 in process {inside:.1f} ms, worker {worker:.1f} ms, ratio {worker / inside:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
