"""Padding in embedding batches: how many tokens a model computes for each real one, by
how texts are sorted before batching and how many batches sync gathers per group.

    .venv/bin/python bench/batch_padding.py [--beir ../shared/benchmarks/scifact] [--batch 32]

A model pads every text of a batch to the longest one's tokens, so the work is the sum
over batches of (longest text's tokens x texts in the batch). This computes that sum for
the chunk texts sync would embed (the local embedder's chunker, its tokenizer's counts
plus the two special tokens, cut at the window), without running the model: counts, not
timings, the same on any machine. Sort keys: characters (what sentence-transformers sorts
by inside one ``encode`` call) and tokens (what sync sorts each group by).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from lore.chunking import SPECIAL_TOKENS, Chunker
from lore.config import LoreSettings
from lore.embedders.local import from_settings
from lore.eval.datasets import iter_beir_documents
from lore.models import embedding_text
from lore.sync_pipeline import BATCHES_PER_GROUP

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks" / "scifact"


def padded_tokens(tokens: Sequence[int], key: Callable[[int], int], group: int, batch: int) -> int:
    """Tokens computed when texts (in sync's order) are taken ``group`` at a time, each
    group sorted by ``key`` (an index -> sort key) and cut into batches."""
    total = 0
    for start in range(0, len(tokens), group):
        order = sorted(range(start, min(start + group, len(tokens))), key=key)
        for first in range(0, len(order), batch):
            rows = order[first : first + batch]
            total += max(tokens[i] for i in rows) * len(rows)
    return total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beir", type=Path, default=SCIFACT, help="a BEIR dataset directory")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    corpus = args.beir / "corpus.jsonl"
    if not corpus.is_file():
        print(f"skipped: {corpus} is absent", file=sys.stderr)
        return 0
    embedder = from_settings(LoreSettings(embedder="local"))
    chunker = Chunker.for_embedder(embedder)
    window = embedder.max_input_tokens
    texts = [
        embedding_text(chunk) for document in iter_beir_documents(corpus) for chunk in chunker.chunk(document)
    ]
    tokens = [min(embedder.count_tokens(text) + SPECIAL_TOKENS, window) for text in texts]
    real = sum(tokens)
    print(f"{args.beir.name}: {len(texts)} chunk texts, {real} tokens, batches of {args.batch}")
    print(f"{'texts per group':>16} {'by characters':>14} {'by tokens':>10}")
    groups = sorted({args.batch * n for n in (4, 16, 64)} | {args.batch * BATCHES_PER_GROUP, len(texts)})
    for group in groups:
        by_chars = padded_tokens(tokens, lambda i: len(texts[i]), group, args.batch) / real
        by_tokens = padded_tokens(tokens, lambda i: tokens[i], group, args.batch) / real
        label = f"{group}" + (" (sync)" if group == args.batch * BATCHES_PER_GROUP else "")
        label += " (all)" if group == len(texts) else ""
        print(f"{label:>16} {by_chars:>13.3f}x {by_tokens:>9.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
