"""What the shape of the BM25 channel's query costs (issue 14 §2's exact-form weight, issue
15 §1's BM25 CPU): one tantivy search, top 100, for the same terms in four shapes,
alternated query by query in one process so each sees the same load and caches.

    .venv/bin/python bench/bm25_clauses.py --scale 100000 [--work DIR] [--queries 200]

- ``flat, bare``: every clause a bare term query, every ``ident`` clause at weight 1 (the
  channel before plain words' exact forms were weighted down);
- ``flat, weighted``: the same disjunction with a plain word's ``ident`` clause boosted by
  ``PLAIN_EXACT_FORM`` (the backend's shape, ``FullTextIndex._scoring_query``);
- ``nested``: the identifiers' and English clauses in one disjunction, the plain words'
  exact forms in a second one boosted as a whole;
- ``flat, every clause boosted``: a boost wrapper on every clause (by 1.0001).

The index is the synthetic corpus of ``bench/_synthetic.py`` (built once into ``--work``,
kept for the next run); CPU time (all threads) per search, medians and ratios to the
first shape. Nothing is written outside ``--work``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tantivy

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _synthetic
from _console import bench_console
from rich.table import Table

from lore.backends.fulltext_analysis import ENGLISH_FIELDS, PLAIN_EXACT_FORM
from lore.backends.sqlite.fulltext import FullTextIndex, FullTextRow, ident_weights, query_terms

DEPTH = 100
Shape = Callable[[FullTextIndex, str], tantivy.Query]


def _any(clauses: list[tantivy.Query]) -> tantivy.Query:
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, clause) for clause in clauses])


Clauses = list[tantivy.Query]


def _clauses(index: FullTextIndex, query: str) -> tuple[Clauses, Clauses, Clauses]:
    """The English clauses, the identifiers' ``ident`` clauses, the plain words' ones."""
    words, identifiers = query_terms(query)
    weights = ident_weights(query, identifiers)
    english = [index._term(field, word) for word in words for field in ENGLISH_FIELDS]
    whole = [index._term("ident", term) for term, weight in weights.items() if weight == 1.0]
    plain = [index._term("ident", term) for term, weight in weights.items() if weight != 1.0]
    return english, whole, plain


def flat_bare(index: FullTextIndex, query: str) -> tantivy.Query:
    english, whole, plain = _clauses(index, query)
    return _any(english + whole + plain)


def flat_weighted(index: FullTextIndex, query: str) -> tantivy.Query:
    english, whole, plain = _clauses(index, query)
    return _any(english + whole + [tantivy.Query.boost_query(c, PLAIN_EXACT_FORM) for c in plain])


def nested(index: FullTextIndex, query: str) -> tantivy.Query:
    english, whole, plain = _clauses(index, query)
    if not plain:
        return _any(english + whole)
    return _any([_any(english + whole), tantivy.Query.boost_query(_any(plain), PLAIN_EXACT_FORM)])


def every_clause_boosted(index: FullTextIndex, query: str) -> tantivy.Query:
    english, whole, plain = _clauses(index, query)
    return _any([tantivy.Query.boost_query(c, 1.0001) for c in english + whole + plain])


SHAPES: dict[str, Shape] = {
    "flat, bare": flat_bare,
    "flat, weighted (the backend's)": flat_weighted,
    "nested": nested,
    "flat, every clause boosted": every_clause_boosted,
}


def build(directory: Path, corpus: _synthetic.Corpus) -> FullTextIndex:
    index = FullTextIndex(directory, title_boost=1.0, identifier_boost=1.0)
    if not index.ready or index.document_count() != len(corpus):
        index.recreate()
        index.replace_all(
            FullTextRow(
                rowid=number,
                title=corpus.titles[number // _synthetic.CHUNKS_PER_DOCUMENT],
                section=_synthetic.SECTIONS[number % len(_synthetic.SECTIONS)],
                text=text,
                label_terms=frozenset(),
                uri=f"synthetic://bench/{number // _synthetic.CHUNKS_PER_DOCUMENT:06d}",
            )
            for number, text in enumerate(corpus.texts)
        )
    return index


def measure(index: FullTextIndex, queries: list[str], passes: int) -> dict[str, list[float]]:
    """CPU ms of each search in the last pass, shape by shape, the order turned each query."""
    searcher = index._require().searcher()
    cpu: dict[str, list[float]] = {name: [] for name in SHAPES}
    for number in range(passes):
        for turn, query in enumerate(queries):
            order = list(SHAPES.items())
            for name, shape in order if turn % 2 == 0 else order[::-1]:
                built = shape(index, query)
                used = time.process_time()
                searcher.search(built, DEPTH, count=False)
                if number == passes - 1:
                    cpu[name].append((time.process_time() - used) * 1000)
    return cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=int, default=100_000, help="synthetic chunks")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passes", type=int, default=3, help="alternated passes; only the last counts")
    parser.add_argument(
        "--work", type=Path, help="where the index is built and kept (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    corpus = _synthetic.generate(args.scale, queries=args.queries)
    with tempfile.TemporaryDirectory(prefix="lore-bm25-clauses-") as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        index = build(work / f"fulltext-{args.scale}", corpus)
        try:
            cpu = measure(index, corpus.queries, args.passes)
        finally:
            index.close()
    base = statistics.median(cpu["flat, bare"])
    table = Table(title=f"BM25 query shapes, {args.scale:,} synthetic chunks, top {DEPTH}, CPU per search")
    for column in ("shape", "CPU p50 ms", "CPU p95 ms", "p50 ratio to flat, bare"):
        table.add_column(column, justify="left" if column == "shape" else "right")
    for name, samples in cpu.items():
        ordered = sorted(samples)
        p50 = statistics.median(ordered)
        p95 = ordered[round(0.95 * (len(ordered) - 1))]
        table.add_row(name, f"{p50:.2f}", f"{p95:.2f}", f"{p50 / base:.2f}")
    console = bench_console()
    console.print(table)
    console.print(
        f"{len(corpus.queries)} queries, {args.passes} passes alternated (the last counted); load average "
        f"{load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
