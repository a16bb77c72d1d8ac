"""What analysing a chunk for the pgvector backend's postings costs: ``analysis.field_terms``
(one pass over a chunk's runs of token characters, each distinct run analysed once and
remembered) against ``fulltext.field_terms`` (tantivy over each field's whole text, the
SQLite index's own analysis and the reference the first must equal), side by side in
one process, alternated round by round so both see the same load.

    .venv/bin/python bench/pgvector_analysis.py [--chunks 20000] [--rounds 5]

Chunks: the synthetic ones of ``bench/run.py`` (``_synthetic.py``), and the paragraphs of
the Markdown pages under ../shared/corpora when that folder is there (skipped with a line
saying so when not). Each round analyses every chunk once with each analysis; the first
round of the fast path fills its memory as a long sync would, so its median is of the
rounds after. The table gives the median µs a chunk and the ratio to tantivy's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpora import SHARED_CORPORA
from _synthetic import generate

from lore.backends.pgvector import analysis
from lore.backends.sqlite import fulltext

Chunk = tuple[str, str, str, str]
Analyse = Callable[[str, str, str, str], dict[str, list[str]]]


def synthetic(count: int) -> list[Chunk]:
    corpus = generate(count, queries=1)
    per_document = -(-count // len(corpus.titles))
    return [
        (corpus.titles[i // per_document], "Diagnosis", text, f"file://runbooks/doc-{i // per_document}.md")
        for i, text in enumerate(corpus.texts)
    ]


def shared(root: Path) -> list[Chunk]:
    chunks: list[Chunk] = []
    for page in sorted(root.rglob("*.md")):
        text = page.read_text(encoding="utf-8", errors="replace")
        title, _, body = text.partition("\n")
        uri = f"file://{page.relative_to(root).as_posix()}"
        chunks.extend((title.strip("# "), "", part, uri) for part in body.split("\n\n") if part.strip())
    return chunks


def rounds(chunks: Sequence[Chunk], analyses: dict[str, Analyse], count: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in analyses}
    for _ in range(count):
        for name, analyse in analyses.items():
            started = time.perf_counter()
            for title, section, text, uri in chunks:
                analyse(title, section, text, uri)
            times[name].append((time.perf_counter() - started) / len(chunks) * 1e6)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000, help="synthetic chunks (default 20000)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sets = {"synthetic": synthetic(args.chunks)}
    if SHARED_CORPORA.is_dir():
        sets["shared corpora"] = shared(SHARED_CORPORA)
    else:
        print(f"shared corpora: skipped, {SHARED_CORPORA} is absent")
    analyses: dict[str, Analyse] = {
        "tantivy, whole fields": fulltext.field_terms,
        "runs, remembered": analysis.field_terms,
    }
    print("| chunks | analysis | median µs a chunk | ratio to tantivy |")
    print("|---|---|---:|---:|")
    for label, chunks in sets.items():
        times = rounds(chunks, analyses, args.rounds + 1)
        reference = statistics.median(times["tantivy, whole fields"][1:])
        for name, samples in times.items():
            median = statistics.median(samples[1:])
            print(f"| {label} ({len(chunks):,}) | {name} | {median:.1f} | {median / reference:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
