"""CPU cost of the safety chain per passage, and what it does to a search's p50.

Two modes.

``--tree A --tree B``: two source trees side by side (before/after a change), alternated
round by round in fresh interpreters so both see the same machine load; injection
screening and secret redaction of every chunk of the real corpora in ../shared/corpora,
CPU time (``time.process_time``, plus the secret detector's worker's) per passage, median
over the rounds, and the ratio.

    PYTHONPATH=src .venv/bin/python bench/safety_chain_cost.py --tree ../main/src --tree src

``--search``: one process, two chains: this tree's and the one of ``--base`` (a commit;
default 9685ec9, the chain before the canonical view), whose ``lore/safety`` package is
read from git and loaded beside this one under another name. Both run the same search
tool over the example corpus (synced into a temporary index with the bundled local
model, as ``lore sync`` does): per passage, the CPU of screening and redaction of every
chunk (the example corpus and, when present, the shared corpora), the chains alternated
in blocks; per search, the wall-clock latency of ``KnowledgeSearch.run`` (query embedded
by the local model, hybrid retrieval, the chain, the audit record) for rotating on-call
questions, the chains alternated query by query, each search run cold (the process's
cleaned-text cache emptied first, as in a one-shot ``lore search`` or a server's first
sight of a chunk: this tree reads the verdicts ``lore sync`` kept, ``lore.safety.verdicts``,
as sync left them; the base chain, which kept none, cleans every passage, title and uri)
and then warm (the same search again: everything cached, as a server's repeated chunks
are), p50 of each and their ratios. A third chain, this tree's with nothing kept (an
index synced by an older lore), shows what a search costs when it screens every text itself.

    PYTHONPATH=src .venv/bin/python bench/safety_chain_cost.py --search [--base 9685ec9] [--searches 200]

``--keep``: what sync pays to keep the chain's results (``lore.safety.verdicts``): every
document of the corpora chunked as sync does, and the chain run over each chunk's fields and
the merged passages a search can make of them, into a fresh ``chain.db``; CPU per chunk.

    PYTHONPATH=src .venv/bin/python bench/safety_chain_cost.py --keep
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

#: The corpora: ../shared/corpora, or the directory in LORE_BENCH_CORPORA (a worktree
#: elsewhere than beside ../shared).
SHARED_CORPORA = Path(
    os.environ.get("LORE_BENCH_CORPORA") or Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
)
REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"
#: The script a round runs in (a wrapper may stand in for this file).
_SCRIPT = __file__
#: The chain before the canonical view (issue 32's baseline).
BASE_COMMIT = "9685ec9"
#: The name the base chain's ``lore.safety`` package is loaded under.
BASE_PACKAGE = "_base_safety_chain"
#: This tree's chain without the verdicts sync kept (``lore.safety.verdicts``).
UNKEPT = "nothing kept"

QUESTIONS = (
    "etcd has no leader",
    "pod stuck in CrashLoopBackOff",
    "kube-apiserver latency is high",
    "node NotReady",
    "etcd database space exceeded",
    "payments-consumer-group lag",
    "certificate expiry rotation",
    "how do I restart the api gateway",
    "postgres replica lag",
    "disk full on a database host",
    "rollback a bad deploy",
    "TLS handshake errors at the edge",
    "kafka consumer rebalancing",
    "out of memory kills",
    "DNS resolution failures",
    "rotate the database password",
)


def corpus_texts(roots: list[Path]) -> list[str]:
    """Every chunk's text of the Markdown under ``roots``, chunked as sync does."""
    from lore.chunking import Chunker
    from lore.models import Document, Visibility
    from lore.sources.filesystem import FilesystemSource

    async def documents(root: Path) -> list[Document]:
        source = FilesystemSource(root.name, root, visibility=Visibility.ALL_VIEWERS, include=["**/*.md"])
        return [item async for item in source.documents() if isinstance(item, Document)]

    chunker = Chunker()
    return [
        chunk.text
        for root in roots
        for document in asyncio.run(documents(root))
        for chunk in chunker.chunk(document)
    ]


def shared_roots() -> list[Path]:
    return (
        sorted(path for path in SHARED_CORPORA.iterdir() if path.is_dir()) if SHARED_CORPORA.is_dir() else []
    )


# --- mode 1: source trees in fresh interpreters ---------------------------------------------


def cpu_seconds() -> float:
    """This process's CPU time and that of the secret detector's worker process, where the
    tree has one (its Go library runs there, not here)."""
    try:
        from lore.safety.secret_detector import shared_process
    except ImportError:
        return time.process_time()
    return time.process_time() + shared_process().cpu_seconds()


def _measure() -> dict[str, float]:
    from lore.safety.injection import screen_injections
    from lore.safety.secrets import SecretRedactor

    texts = corpus_texts(shared_roots())
    redactor = SecretRedactor()
    screen_injections("warm up"), redactor.redact("warm up")
    started = cpu_seconds()
    for text in texts:
        screen_injections(text)
    screened = cpu_seconds()
    for text in texts:
        redactor.redact(text)
    done = cpu_seconds()
    return {
        "passages": len(texts),
        "screen_us": (screened - started) / len(texts) * 1e6,
        "redact_us": (done - screened) / len(texts) * 1e6,
    }


def trees(args: argparse.Namespace) -> int:
    if not SHARED_CORPORA.is_dir():
        print(f"skipped: {SHARED_CORPORA} is absent")
        return 0
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in args.tree}
    for _round in range(args.rounds):
        for tree in args.tree:
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
            out = subprocess.run(
                [sys.executable, _SCRIPT, "--tree", tree, "--child"],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            runs[tree].append(json.loads(out))
    print(f"load average {os.getloadavg()[0]:.2f}; CPU µs per passage, median of {args.rounds} rounds")
    print(f"{'tree':40} {'passages':>8} {'screen':>8} {'redact':>8} {'total':>8} {'ratio':>6}")
    base = None
    for tree, results in runs.items():
        screen = statistics.median(r["screen_us"] for r in results)
        redact = statistics.median(r["redact_us"] for r in results)
        base = base if base is not None else screen + redact
        print(
            f"{tree:40} {int(results[0]['passages']):>8} {screen:>8.1f} {redact:>8.1f} "
            f"{screen + redact:>8.1f} {(screen + redact) / base:>6.2f}"
        )
    return 0


# --- mode 2: two chains in one process, and the search p50 ---------------------------------


def load_base_chain(commit: str, into: Path) -> ModuleType:
    """The ``lore.safety`` package of ``commit``, importable as ``BASE_PACKAGE``."""
    listing = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-tree", "--name-only", commit, "src/lore/safety/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    package = into / BASE_PACKAGE
    package.mkdir(parents=True)
    for path in listing:
        source = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "show", f"{commit}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (package / Path(path).name).write_text(source.replace("lore.safety", BASE_PACKAGE), encoding="utf-8")
    sys.path.insert(0, str(into))
    return importlib.import_module(BASE_PACKAGE)


Clean = Callable[[str], object]


def chains(base: ModuleType) -> dict[str, tuple[Clean, Clean]]:
    from lore.safety.injection import screen_injections
    from lore.safety.secrets import SecretRedactor

    old_screen = importlib.import_module(f"{BASE_PACKAGE}.injection").screen_injections
    old_redactor = importlib.import_module(f"{BASE_PACKAGE}.secrets").SecretRedactor()
    redactor = SecretRedactor()
    return {
        "base": (old_screen, old_redactor.redact),
        "this tree": (screen_injections, redactor.redact),
    }


def per_passage(
    texts: list[str], chain: dict[str, tuple[Clean, Clean]], blocks: int
) -> dict[str, list[float]]:
    """CPU µs per passage (screen, redact) of each chain, the chains alternated in blocks."""
    for screen, redact in chain.values():
        screen("warm up"), redact("warm up")
    cpu: dict[str, list[float]] = {name: [0.0, 0.0] for name in chain}
    size = max(1, len(texts) // blocks)
    for index, start in enumerate(range(0, len(texts), size)):
        block = texts[start : start + size]
        names = list(chain) if index % 2 == 0 else list(reversed(chain))
        for name in names:
            screen, redact = chain[name]
            began = cpu_seconds()
            for text in block:
                screen(text)
            screened = cpu_seconds()
            for text in block:
                redact(text)
            done = cpu_seconds()
            cpu[name][0] += screened - began
            cpu[name][1] += done - screened
    return {name: [value / len(texts) * 1e6 for value in values] for name, values in cpu.items()}


def base_cleaner(settings: Any, base: ModuleType) -> Any:
    """A ``PassageCleaner`` whose screening and redaction are the base chain's."""
    from lore.safety.secrets import redaction_markers
    from lore.tool.cleaning import PassageCleaner

    screen = importlib.import_module(f"{BASE_PACKAGE}.injection").screen_injections
    redactor_type = importlib.import_module(f"{BASE_PACKAGE}.secrets").SecretRedactor

    class BaseCleaner(PassageCleaner):
        def __init__(self) -> None:
            super().__init__(settings)
            safety = settings.safety
            self.redactor = redactor_type(
                emails=safety.redact_emails, phone_numbers=safety.redact_phone_numbers
            )

        def clean_uncached(self, text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
            screened, found = screen(text, allowed_link_hosts=self._allowed_link_hosts)
            redacted, secret = self.redactor.redact(screened)
            findings: Counter[str] = found + secret
            findings.update(redaction_markers(screened))
            return redacted, tuple(findings.items())

        def clean_uncached_many(self, texts: Sequence[str]) -> list[tuple[str, tuple[tuple[str, int], ...]]]:
            return [self.clean_uncached(text) for text in texts]

    return BaseCleaner()


def search_latency(
    base: ModuleType, work: Path, searches: int
) -> tuple[dict[tuple[str, str], list[float]], int, int]:
    """Milliseconds per search of each chain, cold (the cleaned-text cache emptied first:
    every passage, title and uri cleaned) and warm (the same search again: all cached),
    keyed by (chain, "cold"/"warm"); the documents synced; the passages a search showed."""
    from lore.access import LOCAL
    from lore.config import load_settings
    from lore.resolve import build_knowledge_search
    from lore.sync import run_sync

    settings = load_settings(
        EXAMPLES / "lore.toml",
        db_path=str(work / "lore.db"),
        audit_path=str(work / "audit.jsonl"),
        vault={"enabled": False},
    )
    report = run_sync(settings)
    tool = build_knowledge_search(settings)
    assert tool is not None
    from lore.resolve import tool_policy
    from lore.safety.verdicts import SIDECAR_NAME, VerdictStore
    from lore.tool.cleaning import PassageCleaner

    class AsSynced(VerdictStore):
        """The verdicts as sync kept them: what a search computes is not written back,
        so every cold search sees the file a fresh process sees after ``lore sync``."""

        def put_many(self, fingerprint: str, verdicts: Any) -> None:
            return None

    tool.cleaner._verdicts = AsSynced(settings.resolved_data_dir() / SIDECAR_NAME)

    cleaners = {
        "this tree": tool.cleaner,
        "base": base_cleaner(settings, base),
        # This tree's chain with nothing kept: every text screened at query time (an
        # index synced by an older lore, before its next sync keeps this chain's results).
        UNKEPT: PassageCleaner(tool_policy(settings)),
    }
    for cleaner in cleaners.values():
        cleaner.warm_up()
    tool.warm_up()
    samples: dict[tuple[str, str], list[float]] = {
        (name, state): [] for name in cleaners for state in ("cold", "warm")
    }
    shown: list[int] = []

    async def run(index: int) -> None:
        names = list(cleaners) if index % 2 == 0 else list(reversed(cleaners))
        question = {"query": QUESTIONS[index % len(QUESTIONS)], "top_k": 8}
        for name in names:
            cleaner = cleaners[name]
            tool._cleaner = cleaner  # the bench swaps the chain under one tool
            cleaner.forget()
            for state in ("cold", "warm"):
                began = time.perf_counter()
                result = await tool.run(question, principal=LOCAL)
                samples[name, state].append((time.perf_counter() - began) * 1000)
                if result.error is not None:
                    raise SystemExit(f"search failed: {result.error}")
            shown.append(len(result.passages))

    async def all_searches() -> None:
        for index in range(len(QUESTIONS)):  # warm-up: the model, the index, both chains
            await run(index)
        for chain in samples.values():
            chain.clear()
        for index in range(searches):
            await run(index)

    asyncio.run(all_searches())
    return samples, report.seen, int(statistics.median(shown))


def search(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="lore-chain-cost-") as temporary:
        work = Path(temporary)
        base = load_base_chain(args.base, work / "chain")
        texts = corpus_texts([EXAMPLES / "runbooks", *shared_roots()])
        cpu = per_passage(texts, chains(base), args.blocks)
        latency, documents, passages = search_latency(base, work, args.searches)
    print(f"load average {os.getloadavg()[0]:.2f}; base chain: commit {args.base}")
    print(
        f"CPU µs per passage over {len(texts)} chunks "
        f"(example corpus and shared corpora, {args.blocks} blocks)"
    )
    print(f"{'chain':12} {'screen':>8} {'redact':>8} {'total':>8} {'ratio':>6}")
    base_total = sum(cpu["base"])
    for name in ("base", "this tree"):
        screen_us, redact_us = cpu[name]
        total = screen_us + redact_us
        print(f"{name:12} {screen_us:>8.1f} {redact_us:>8.1f} {total:>8.1f} {total / base_total:>6.2f}")
    print(
        f"\nsearch latency, ms: {args.searches} searches per chain and cache state of the example corpus "
        f"({documents} documents), local model, hybrid, top_k 8 ({passages} passages)"
    )
    print(f"{'chain':12} {'cache':>6} {'p50':>8} {'p95':>8} {'mean':>8}")
    for state in ("cold", "warm"):
        for name in ("base", "this tree", UNKEPT):
            ordered = sorted(latency[name, state])
            p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
            print(
                f"{name:12} {state:>6} {statistics.median(ordered):>8.2f} {p95:>8.2f} "
                f"{statistics.fmean(ordered):>8.2f}"
            )
    for state in ("cold", "warm"):
        ratio = statistics.median(latency["this tree", state]) / statistics.median(latency["base", state])
        print(f"p50 ratio this tree / base, {state} cache: {ratio:.3f}")
    unkept = statistics.median(latency[UNKEPT, "cold"]) / statistics.median(latency["base", "cold"])
    print(f"p50 ratio this tree with nothing kept / base, cold cache: {unkept:.3f}")
    return 0


# --- mode 3: what sync pays to keep the chain's results -------------------------------------


def keep(args: argparse.Namespace) -> int:
    from lore.chunking import Chunker
    from lore.config import LoreSettings
    from lore.models import Document, Visibility
    from lore.resolve import tool_policy
    from lore.safety.verdicts import VerdictStore
    from lore.sources.filesystem import FilesystemSource
    from lore.tool.cleaning import PassageCleaner, chunk_fields, merged_texts

    async def documents(root: Path) -> list[Document]:
        source = FilesystemSource(root.name, root, visibility=Visibility.ALL_VIEWERS, include=["**/*.md"])
        return [item async for item in source.documents() if isinstance(item, Document)]

    chunker = Chunker()
    roots = [EXAMPLES / "runbooks", *shared_roots()]
    per_document = [chunker.chunk(document) for root in roots for document in asyncio.run(documents(root))]
    policy = tool_policy(LoreSettings())
    chunks = sum(len(document) for document in per_document)
    merged = sum(len(merged_texts(document, policy.safety.max_passage_chars)) for document in per_document)
    fields = sum(len({f for chunk in document for f in chunk_fields(chunk)}) for document in per_document)
    with tempfile.TemporaryDirectory(prefix="lore-chain-keep-") as temporary:
        cleaner = PassageCleaner(policy, VerdictStore(Path(temporary) / "chain.db"))
        cleaner.warm_up()
        began = cpu_seconds()
        kept = sum(cleaner.keep_chunks(document) for document in per_document)
        cpu = cpu_seconds() - began
        cleaner.close()
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(
        f"{len(per_document)} documents, {chunks} chunks: {kept} texts kept (of {fields} fields, distinct "
        f"within each document, and {merged} merged passages); CPU {cpu:.1f} s, "
        f"{cpu / chunks * 1e6:.0f} µs per chunk"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", help="a src/ directory (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--search", action="store_true", help="two chains in one process, and the search p50")
    parser.add_argument("--base", default=BASE_COMMIT, help="the commit whose chain is the baseline")
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=20, help="blocks the chains alternate over")
    parser.add_argument("--keep", action="store_true", help="what sync pays to keep the chain's results")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure()))
        return 0
    if args.search:
        return search(args)
    if args.keep:
        return keep(args)
    if not args.tree:
        parser.error("give --tree twice (or more), or --search")
    return trees(args)


if __name__ == "__main__":
    sys.exit(main())
