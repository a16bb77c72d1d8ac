"""Query-time tuning sweeps over one existing SQLite index (nothing is re-embedded).

    .venv/bin/python eval/tuning/sweep.py --index build/tuning/scifact.db \
        --beir ../shared/benchmarks/scifact --split train
    .venv/bin/python eval/tuning/sweep.py --index build/tuning/shared-alerts.db \
        --golden build/eval/shared-alerts.jsonl

The index is opened with the local embedder and read only. The query vectors are
computed once; each channel (BM25 per field-boost setting, vectors once) is searched
once per query to ``--pool`` chunks, and every fusion setting is then computed from
those cached channel rankings with ``lore.fusion`` -- the same functions, on the same
chunk ids, as ``fuse_channels`` in the backends (plus channel weights). Metrics are
``lore.eval.metrics`` (per document, 100 documents per ranking). A fused list keeps
``max(candidate_depth, 200)`` chunks per channel, because ``lore eval`` asks for 200
chunks (``top_k``) and the backend searches ``max(candidate_depth, top_k)`` per channel.

``--present-only`` scores only queries whose relevant documents are all in the index
(for a partly built index). Prints one table per experiment.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lore.backends.sqlite import SqliteBackend
from lore.config import load_settings
from lore.eval.datasets import BeirPaths, EvalQuery, load_beir_queries, load_golden_set
from lore.eval.metrics import RankedDocument, mean_metrics, query_metrics
from lore.eval.runner import QueryVectorCache
from lore.fusion import Id, normalized_score_fusion, reciprocal_rank_fusion, summed_fusion
from lore.resolve import resolve_embedder

#: Chunks ``lore eval`` asks for per query (twice the 100 documents it ranks).
EVAL_TOP_K = 200
DOCUMENTS = 100
SHOWN = ("hit@1", "hit@5", "mrr@10", "ndcg@10", "recall@100")

Hit = tuple[int, float]  # (chunk rowid, score)


@dataclass(frozen=True, slots=True)
class Boosts:
    title: float
    #: The grid's recorded rows (docs/quality.md) had a section field; since full-text
    #: version 5 the section is part of ``content`` and this weight no longer reaches the backend.
    section: float
    identifier: float
    #: None: the title's boost, as the backend does.
    path: float | None = None

    def label(self) -> str:
        path = "" if self.path is None else f" path={self.path:g}"
        return f"title={self.title:g} section={self.section:g} ident={self.identifier:g}{path}"


class Channels:
    """Per query: the BM25 (for each boost setting) and vector rankings, as rowids."""

    def __init__(self, index: Path, queries: Sequence[EvalQuery], pool: int) -> None:
        self.index = index
        self.queries = queries
        self.pool = pool
        self.cache = QueryVectorCache(resolve_embedder(load_settings()))
        self.cache.prime([query.text for query in queries])
        self._bm25: dict[Boosts, dict[str, list[Hit]]] = {}
        conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
        rows = conn.execute("SELECT id, chunk_id, uri, section FROM chunks").fetchall()
        conn.close()
        self.rowids = {chunk_id: rowid for rowid, chunk_id, _, _ in rows}
        self.where = {rowid: (uri, section) for rowid, _, uri, section in rows}
        self.vector = self._search("vector", Boosts(1.0, 1.0, 1.0))

    def _search(self, mode: str, boosts: Boosts) -> dict[str, list[Hit]]:
        backend = SqliteBackend(
            self.index, self.cache, title_boost=boosts.title,
            identifier_boost=boosts.identifier, path_boost=boosts.path, candidate_depth=self.pool,
        )
        try:
            found: dict[str, list[Hit]] = {}
            for query in self.queries:
                passages = backend.search(query.text, top_k=self.pool, mode=mode)
                found[query.qid] = [(self.rowids[p.chunk_id], p.score) for p in passages]
            return found
        finally:
            backend.close()

    def bm25(self, boosts: Boosts) -> dict[str, list[Hit]]:
        if boosts not in self._bm25:
            self._bm25[boosts] = self._search("bm25", boosts)
        return self._bm25[boosts]

    def score(self, ranked: Callable[[EvalQuery], Sequence[int]]) -> dict[str, float]:
        per_query: dict[str, dict[str, float]] = {}
        for query in self.queries:
            documents: dict[str, RankedDocument] = {}
            for rowid in ranked(query):
                uri, section = self.where[rowid]
                document = documents.get(uri)
                if document is None:
                    if len(documents) == DOCUMENTS:
                        break
                    documents[uri] = RankedDocument(uri=uri, score=0.0, sections=[section])
                elif section not in document.sections:
                    document.sections.append(section)
            per_query[query.qid] = query_metrics(list(documents.values()), query.targets)
        return mean_metrics(per_query)


def distribution_score_fusion(
    scored: Mapping[str, Sequence[tuple[Id, float]]],
    *,
    weights: Mapping[str, float] | None = None,
    spread: float = 3.0,
) -> list[tuple[Id, float, dict[str, int]]]:
    """An experiment, not adopted (docs/quality.md). Normalise each channel by its own
    score distribution, then sum with ``weights``: ``(score - (mean - spread·sd)) /
    (2·spread·sd)``, clipped to [0, 1] (Qdrant's DBSF with ``spread`` 3). A channel whose
    best hit stands far above its crowd (BM25 on an exact phrase) keeps that lead, while a
    channel of near ties (cosines of related pages) adds about as much to each of them."""

    def by_distribution(_: str, values: Sequence[float]) -> Callable[[float], float]:
        mean = sum(values) / len(values)
        sd = (sum((value - mean) ** 2 for value in values) / len(values)) ** 0.5
        low = mean - spread * sd
        return lambda score: 1.0 if sd == 0 else min(1.0, max(0.0, (score - low) / (2 * spread * sd)))

    return summed_fusion(scored, by_distribution, weights=weights)


def fused(
    channels: Channels, boosts: Boosts, *, fusion: str = "rrf", k: int = 60, depth: int = 100,
    bm25_weight: float = 1.0, vector_weight: float = 1.0, per_document: bool = False,
    weighting: Callable[[str], dict[str, float]] | None = None,
) -> Callable[[EvalQuery], list[int]]:
    keep = max(depth, EVAL_TOP_K)
    static = {"bm25": bm25_weight, "vector": vector_weight}
    bm25 = channels.bm25(boosts)

    def best_per_document(hits: list[Hit], canonical: dict[str, int]) -> list[Hit]:
        seen: set[str] = set()
        kept = []
        for rowid, score in hits:
            uri = channels.where[rowid][0]
            if uri not in seen:
                seen.add(uri)
                kept.append((canonical.setdefault(uri, rowid), score))
        return kept

    def ranked(query: EvalQuery) -> list[int]:
        weights = static if weighting is None else weighting(query.text)
        lists = {"bm25": bm25[query.qid][:keep], "vector": channels.vector[query.qid][:keep]}
        if per_document:
            # Each channel ranks documents (by their best chunk), so a document is fused once
            # with its document rank in each channel, whichever of its chunks each one found.
            canonical: dict[str, int] = {}  # one id per document, whichever chunk each channel found
            lists = {channel: best_per_document(hits, canonical) for channel, hits in lists.items()}
        if fusion.startswith("dbsf"):  # "dbsf" or "dbsf:<spread>"
            spread = float(fusion.partition(":")[2] or 3.0)
            result = distribution_score_fusion(lists, weights=weights, spread=spread)
        elif fusion == "score":  # as fuse_channels does: a BM25 list shorter than asked for has a floor of 0
            exhausted = {"bm25": 0.0} if len(bm25[query.qid]) < keep else None
            result = normalized_score_fusion(lists, weights=weights, floors=exhausted)
        else:
            result = reciprocal_rank_fusion({c: [r for r, _ in hits] for c, hits in lists.items()},
                                            k=k, weights=weights)
        return [rowid for rowid, _, _ in result]

    return ranked


def _share(text: str) -> float:
    """The identifier share of a query, as ``lore.backends.lexical.identifier_share``."""
    from lore.backends import lexical

    return lexical.identifier_share(text)


WEIGHTINGS: dict[str, Callable[[str], dict[str, float]]] = {
    "bm25 1+s, vector 1": lambda q: {"bm25": 1.0 + _share(q), "vector": 1.0},
    "bm25 1, vector 1-s": lambda q: {"bm25": 1.0, "vector": 1.0 - _share(q)},
    "bm25 1+s, vector 1-s": lambda q: {"bm25": 1.0 + _share(q), "vector": 1.0 - _share(q)},
    "bm25 1+2s, vector 1": lambda q: {"bm25": 1.0 + 2 * _share(q), "vector": 1.0},
}


def _words(text: str) -> int:
    """The query's words, template placeholders left out."""
    from lore.backends import lexical

    return len(lexical.query_words(lexical.without_templates(text)))


#: Long queries lean lexical: a long query gives BM25 many terms to agree on, while its
#: embedding averages them into one vector (and is cut at the model's window).
def _by_length(per: int, cap: float | None = None) -> Callable[[str], dict[str, float]]:
    def weights(query: str) -> dict[str, float]:
        lean = max(1.0, _words(query) / per)
        return {"bm25": lean if cap is None else min(cap, lean), "vector": 1.0}

    return weights


LENGTH_WEIGHTINGS: dict[str, Callable[[str], dict[str, float]]] = {
    **{f"bm25 max(1, words/{n})": _by_length(n) for n in (15, 20, 30)},
    **{f"bm25 min(2, max(1, words/{n}))": _by_length(n, 2.0) for n in (15, 20)},
}


def single(hits: dict[str, list[Hit]]) -> Callable[[EvalQuery], list[int]]:
    return lambda query: [rowid for rowid, _ in hits[query.qid]]


def weighted_rows(
    channels: Channels, boosts: Boosts, rules: dict[str, Callable[[str], dict[str, float]]]
) -> list[tuple[str, dict[str, float]]]:
    """Both channels, equal-weight score fusion, and score fusion with each rule's weights."""
    return [
        ("bm25", channels.score(single(channels.bm25(boosts)))),
        ("vector", channels.score(single(channels.vector))),
        ("hybrid score, equal weights (default)", channels.score(fused(channels, boosts, fusion="score"))),
        *[
            (label, channels.score(fused(channels, boosts, fusion="score", weighting=rule)))
            for label, rule in rules.items()
        ],
    ]


def table(title: str, rows: list[tuple[str, dict[str, float]]]) -> None:
    print(f"\n### {title}\n")
    print("| setting | " + " | ".join(SHOWN) + " |")
    print("|---|" + "---:|" * len(SHOWN))
    for label, metrics in rows:
        print(f"| {label} | " + " | ".join(f"{metrics[m]:.4f}" for m in SHOWN) + " |")
    sys.stdout.flush()


def query_parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments every tuning script takes: the index, and the queries to score."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--beir", type=Path)
    parser.add_argument("--split", default="train")
    parser.add_argument("--golden", type=Path)
    return parser


def parsed_queries(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[EvalQuery]:
    """The BEIR split's queries, or the golden set's answerable ones."""
    if args.beir is not None:
        return load_beir_queries(BeirPaths.from_directory(args.beir, args.split))
    if args.golden is not None:
        return [q for q in load_golden_set(args.golden) if q.answerable]
    parser.error("give --beir or --golden")


def main() -> None:
    parser = query_parser(__doc__)
    parser.add_argument("--present-only", action="store_true")
    parser.add_argument("--pool", type=int, default=800, help="chunks fetched per channel and query")
    parser.add_argument("--quick", action="store_true", help="only the default and main alternatives")
    parser.add_argument("--final", action="store_true", help="only the defaults before and after tuning")
    parser.add_argument("--documents", action="store_true", help="chunk-level against document-level fusion")
    parser.add_argument("--weighting", action="store_true", help="query-dependent channel weights")
    parser.add_argument("--normalisation", action="store_true", help="min-max against distribution-based")
    parser.add_argument("--length", action="store_true", help="channel weights by query length")
    args = parser.parse_args()
    queries = parsed_queries(parser, args)
    if args.present_only:
        conn = sqlite3.connect(f"file:{args.index}?mode=ro", uri=True)
        held = {uri for (uri,) in conn.execute("SELECT uri FROM documents")}
        conn.close()
        queries = [q for q in queries if all(t.prefix or t.uri in held for t in q.targets)]
    print(f"{len(queries)} queries, index {args.index}, pool {args.pool}")

    channels = Channels(args.index, queries, args.pool)
    default = Boosts(2.0, 1.5, 1.0)
    if args.weighting:
        even = Boosts(1.0, 1.0, 1.0)
        table("query-dependent channel weights (score fusion, boosts 1/1/1)", [
            *weighted_rows(channels, even, WEIGHTINGS),
            ("hybrid score per document",
             channels.score(fused(channels, even, fusion="score", per_document=True))),
        ])
        no_path = Boosts(1.0, 1.0, 1.0, 1e-6)
        table("the path field off (boost 1e-6) against on (the title's boost)", [
            ("bm25, path off", channels.score(single(channels.bm25(no_path)))),
            ("hybrid score, path off", channels.score(fused(channels, no_path, fusion="score"))),
            ("bm25, path on", channels.score(single(channels.bm25(even)))),
            ("hybrid score, path on", channels.score(fused(channels, even, fusion="score"))),
        ])
        return
    if args.normalisation:
        even = Boosts(1.0, 1.0, 1.0)
        table("how each channel's scores are normalised before they are summed (boosts 1/1/1)", [
            ("bm25", channels.score(single(channels.bm25(even)))),
            ("vector", channels.score(single(channels.vector))),
            *[
                (f"{fusion}{' per document' if per_document else ''}",
                 channels.score(fused(channels, even, fusion=fusion, per_document=per_document)))
                for fusion in ("score", "dbsf", "dbsf:2", "dbsf:4", "rrf")
                for per_document in (False, True)
            ],
        ])
        return
    if args.length:
        even = Boosts(1.0, 1.0, 1.0)
        table("channel weights by query length (score fusion, boosts 1/1/1)",
              weighted_rows(channels, even, LENGTH_WEIGHTINGS))
        return
    if args.documents:
        even = Boosts(1.0, 1.0, 1.0)
        table("fusing chunk ranks or document ranks (boosts 1/1/1)", [
            (f"{fusion} k={k}{' per document' if per_document else ''}",
             channels.score(fused(channels, even, fusion=fusion, k=k, per_document=per_document)))
            for fusion, k in (("rrf", 60), ("rrf", 20), ("score", 60))
            for per_document in (False, True)
        ])
        return
    if args.final:
        even = Boosts(1.0, 1.0, 1.0)
        table("before and after tuning", [
            ("bm25 title=2 section=1.5 ident=1 (old)", channels.score(single(channels.bm25(default)))),
            ("bm25 title=1 section=1 ident=1 (new)", channels.score(single(channels.bm25(even)))),
            ("vector", channels.score(single(channels.vector))),
            ("hybrid rrf k=60, old boosts (old default)", channels.score(fused(channels, default))),
            ("hybrid rrf k=60, new boosts", channels.score(fused(channels, even))),
            ("hybrid score, old boosts", channels.score(fused(channels, default, fusion="score"))),
            ("hybrid score, new boosts", channels.score(fused(channels, even, fusion="score"))),
            ("hybrid score bm25=0.75, new boosts",
             channels.score(fused(channels, even, fusion="score", bm25_weight=0.75))),
        ])
        return
    table("channels and the current default (RRF k=60, depth 100, title 2 / section 1.5 / ident 1)", [
        ("bm25", channels.score(single(channels.bm25(default)))),
        ("vector", channels.score(single(channels.vector))),
        ("hybrid rrf", channels.score(fused(channels, default))),
        ("hybrid score", channels.score(fused(channels, default, fusion="score"))),
    ])

    boost_grid = [Boosts(t, s, i) for t, s, i in [
        (1.0, 1.0, 1.0), (2.0, 1.5, 1.0), (3.0, 1.5, 1.0), (1.5, 1.0, 1.0), (2.0, 1.5, 0.5),
        (2.0, 1.5, 2.0), (2.0, 1.5, 1e-6), (1.0, 1.0, 1e-6), (1.0, 1.0, 0.5), (0.5, 1.0, 0.5),
    ]]
    if args.quick:
        boost_grid = boost_grid[:3] + boost_grid[6:7]
    table("BM25 field boosts (bm25 alone, and hybrid RRF k=60)", [
        row
        for boosts in boost_grid
        for row in (
            (f"bm25 {boosts.label()}", channels.score(single(channels.bm25(boosts)))),
            (f"hybrid {boosts.label()}", channels.score(fused(channels, boosts))),
        )
    ])

    table("RRF k and candidate depth (default boosts)", [
        (f"rrf k={k} depth={depth}", channels.score(fused(channels, default, k=k, depth=depth)))
        for k in (10, 20, 40, 60, 100)
        for depth in ((100, 400) if not args.quick else (100,))
    ])

    table("channel weights in RRF (k=60) and in score fusion", [
        (f"{fusion} bm25={wb:g} vector={wv:g}",
         channels.score(fused(channels, default, fusion=fusion, bm25_weight=wb, vector_weight=wv)))
        for fusion in ("rrf", "score")
        for wb, wv in ((1, 1), (0.5, 1), (0.75, 1), (1, 0.75), (1, 0.5), (1, 1.5), (1, 2))
    ])


if __name__ == "__main__":
    main()
