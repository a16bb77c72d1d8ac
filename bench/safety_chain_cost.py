"""CPU cost of the safety chain per passage: injection screening and secret redaction
of every chunk of the real corpora in ../shared/corpora, as the tool runs them on each
search result.

Two source trees side by side (before/after a change), alternated round by round in
fresh interpreters so both see the same machine load; CPU time (``time.process_time``)
per passage, median over the rounds, and the ratio.

    PYTHONPATH=src .venv/bin/python bench/safety_chain_cost.py --tree ../main/src --tree src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: The corpora: ../shared/corpora, or the directory in LORE_BENCH_CORPORA (a worktree
#: elsewhere than beside ../shared).
SHARED_CORPORA = Path(
    os.environ.get("LORE_BENCH_CORPORA") or Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
)
#: The script a round runs in (a wrapper may stand in for this file).
_SCRIPT = __file__


def _measure() -> dict[str, float]:
    from lore.chunking import Chunker
    from lore.models import Document, Visibility
    from lore.safety.injection import screen_injections
    from lore.safety.secrets import SecretRedactor
    from lore.sources.filesystem import FilesystemSource

    async def documents(root: Path) -> list[Document]:
        source = FilesystemSource(root.name, root, visibility=Visibility.ALL_VIEWERS, include=["**/*.md"])
        return [item async for item in source.documents() if isinstance(item, Document)]

    chunker = Chunker()
    texts = [
        chunk.text
        for root in sorted(path for path in SHARED_CORPORA.iterdir() if path.is_dir())
        for document in asyncio.run(documents(root))
        for chunk in chunker.chunk(document)
    ]
    redactor = SecretRedactor()
    screen_injections("warm up"), redactor.redact("warm up")
    started = time.process_time()
    for text in texts:
        screen_injections(text)
    screened = time.process_time()
    for text in texts:
        redactor.redact(text)
    done = time.process_time()
    return {
        "passages": len(texts),
        "screen_us": (screened - started) / len(texts) * 1e6,
        "redact_us": (done - screened) / len(texts) * 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="a src/ directory (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure()))
        return 0
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


if __name__ == "__main__":
    sys.exit(main())
