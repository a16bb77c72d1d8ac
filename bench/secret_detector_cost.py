"""What running Betterleaks in a worker process costs, per passage, against running it in
lore's process (which crashed beside the local model: ``lore/safety/secret_detector.py``).

One process, every chunk of the shared corpora (chunked as sync does), three ways,
alternated in blocks so they see the same machine load:

- ``in process``: ``betterleaks.scan_string`` through its bindings, as lore did before;
- ``worker``: the same scan as a round trip to lore's worker process;
- ``redactor``: the whole ``SecretRedactor`` (lore's rules, then the worker), for scale.

CPU per passage counts both sides: this process's ``time.process_time`` plus the
worker's own CPU (it reports it); wall time per passage too. Printed with the ratios to
``in process`` and the load average. Findings of the two Betterleaks ways are compared
(they must be equal).

    LORE_BENCH_CORPORA=../shared/corpora PYTHONPATH=src .venv/bin/python \\
        bench/secret_detector_cost.py [--passages 3000] [--blocks 10]
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--passages", type=int, default=3000, help="chunks measured (0: all)")
    parser.add_argument("--blocks", type=int, default=10)
    args = parser.parse_args()
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

    ways: dict[str, Callable[[str], object]] = {
        "in process": in_process,
        "worker": through_worker,
        "redactor": redactor.redact,
    }
    for way in ways.values():
        way("warm up")
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
            for text in block:
                way(text)
            wall[name] += time.perf_counter() - began
            own = time.process_time() - used
            cpu[name] += own + worker.cpu_seconds() + shared.cpu_seconds() - workers
        mismatched += sum(in_process(text) != through_worker(text) for text in block)
    load = os.getloadavg()[0]
    print(f"{len(texts)} passages; load average {load:.2f}; findings that differ: {mismatched}")
    print(f"{'way':12} {'CPU µs/passage':>15} {'ratio':>6} {'wall µs/passage':>16} {'ratio':>6}")
    base_cpu, base_wall = cpu["in process"], wall["in process"]
    for name in ways:
        print(
            f"{name:12} {cpu[name] / len(texts) * 1e6:>15.1f} {cpu[name] / base_cpu:>6.2f} "
            f"{wall[name] / len(texts) * 1e6:>16.1f} {wall[name] / base_wall:>6.2f}"
        )
    lengths = [len(text) for text in texts]
    print(f"passage length: median {statistics.median(lengths):.0f} characters, max {max(lengths)}")
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
