"""Fusion levers of issue 14 §2 measured on one existing SQLite index (nothing re-embedded).

    .venv/bin/python eval/tuning/levers.py --index F --beir ../shared/benchmarks/scifact --split train
    .venv/bin/python eval/tuning/levers.py --index F --golden eval/golden/alerts-gitlab.yaml

Built on ``sweep.py``'s cached channels (BM25 boosts 1/1/1, 200 chunks per channel, as
``lore eval`` searches) and its metrics. Three classes, each against the default (min-max
score fusion per chunk), results in docs/quality.md ("Calibrated scores, vector
feedback, document aggregation"):

- **calibrated scores**: each channel mapped by a rule that does not stretch the query's
  own candidates over [0, 1]: BM25 divided by its best score (a floor of 0) or by a
  multiple of the query's idf sum; cosine against a fixed floor.
- **vector pseudo-relevance feedback** (Rocchio): ``q' = normalise(q + beta * mean of the
  top-k fused chunks' vectors)``, one more exact vector search, fused with the same BM25
  list; optionally only the chunks both channels rank in their top 10.
- **document aggregation**: a document scores its best fused chunk plus ``w`` times its
  second best.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from sweep import EVAL_TOP_K, Boosts, Channels, Hit, fused, parsed_queries, query_parser, single, table

from lore.backends.sqlite import SqliteBackend
from lore.eval.datasets import EvalQuery
from lore.fusion import normalized_score_fusion, summed_fusion

EVEN = Boosts(1.0, 1.0, 1.0)
Ranked = Callable[[EvalQuery], list[int]]


class Extra:
    """What the levers need beyond the channels: every chunk's vector, each query's idf sum."""

    def __init__(self, channels: Channels) -> None:
        conn = sqlite3.connect(f"file:{channels.index}?mode=ro", uri=True)
        rows = conn.execute("SELECT chunk, vector FROM chunk_vectors ORDER BY chunk").fetchall()
        conn.close()
        self.rowids = np.array([rowid for rowid, _ in rows], dtype=np.int64)
        self.matrix = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
        self.row_of = {int(rowid): i for i, rowid in enumerate(self.rowids)}
        backend = SqliteBackend(channels.index, channels.cache)
        try:
            fulltext = backend._fulltext  # an experiment: the backend's own idf
            self.idf_sum = {q.qid: sum(fulltext.query_weights(q.text).values()) for q in channels.queries}
        finally:
            backend.close()
        self.query_vector = {
            q.qid: channels.cache.embed_queries([q.text])[0] for q in channels.queries
        }

    def vector_search(self, vector: np.ndarray, depth: int) -> list[Hit]:
        return self.top(self.matrix @ (vector / np.linalg.norm(vector)), depth)

    def top(self, scores: np.ndarray, depth: int) -> list[Hit]:
        top = np.argpartition(-scores, depth)[:depth] if depth < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(self.rowids[i]), float(scores[i])) for i in top]


def default_lists(channels: Channels, query: EvalQuery) -> dict[str, list[Hit]]:
    return {"bm25": channels.bm25(EVEN)[query.qid][:EVAL_TOP_K],
            "vector": channels.vector[query.qid][:EVAL_TOP_K]}


def default_fused(channels: Channels, query: EvalQuery, lists: dict[str, list[Hit]] | None = None
                  ) -> list[tuple[int, float, dict[str, int]]]:
    lists = lists or default_lists(channels, query)
    floors = {"bm25": 0.0} if len(lists["bm25"]) < EVAL_TOP_K else None
    return normalized_score_fusion(lists, floors=floors)


# -- calibrated scores -------------------------------------------------------------------

def calibrated(channels: Channels, extra: Extra, *, bm25: str, vector: str) -> Ranked:
    """``bm25``: "minmax", "max" (score / best), "idf:<c>" (score / (c * idf sum), capped
    at 1); ``vector``: "minmax", "floor:<f>" ((cos - f) / (best - f)), "fixed:<f>"
    ((cos - f) / (1 - f)), both clipped to [0, 1]."""

    def ranked(query: EvalQuery) -> list[int]:
        lists = default_lists(channels, query)
        exhausted = len(lists["bm25"]) < EVAL_TOP_K

        def normaliser(channel: str, values: Sequence[float]) -> Callable[[float], float]:
            rule = bm25 if channel == "bm25" else vector
            kind, _, arg = rule.partition(":")
            high = max(values)
            if kind == "minmax":
                low = 0.0 if channel == "bm25" and exhausted else min(values)
                low = min(low, *values)
            elif kind == "max":
                low = 0.0
            elif kind == "idf":
                scale = float(arg) * extra.idf_sum[query.qid]
                return lambda s: min(1.0, s / scale) if scale > 0 else 1.0
            elif kind == "floor":
                low = min(float(arg), *values)
            elif kind == "fixed":
                f = float(arg)
                return lambda s: min(1.0, max(0.0, (s - f) / (1.0 - f)))
            else:
                raise ValueError(rule)
            return lambda s: max(0.0, (s - low) / (high - low)) if high > low else 1.0

        return [rowid for rowid, _, _ in summed_fusion(lists, normaliser)]

    return ranked


# -- vector pseudo-relevance feedback ----------------------------------------------------

def feedback(channels: Channels, extra: Extra, *, k: int, beta: float, agreed: bool = False,
             fuse_again: bool = True, own: bool = False) -> Ranked:
    """``own``: the vector channel's own top k instead of the fused ones (dense PRF)."""
    def ranked(query: EvalQuery) -> list[int]:
        first = (default_fused(channels, query) if not own else
                 [(r, s, {}) for r, s in channels.vector[query.qid]])
        chosen = [rowid for rowid, _, ranks in first
                  if not agreed or (ranks.get("bm25", 999) <= 10 and ranks.get("vector", 999) <= 10)][:k]
        vector = extra.query_vector[query.qid]
        if chosen:
            rows = extra.matrix[[extra.row_of[r] for r in chosen if r in extra.row_of]]
            vector = vector + beta * rows.mean(axis=0)
        hits = extra.vector_search(vector, EVAL_TOP_K)
        if not fuse_again:
            return [rowid for rowid, _ in hits]
        lists = {"bm25": channels.bm25(EVEN)[query.qid][:EVAL_TOP_K], "vector": hits}
        return [rowid for rowid, _, _ in default_fused(channels, query, lists)]

    return ranked


# -- the document's mean vector beside the chunk's ----------------------------------------

def document_vectors(channels: Channels, extra: Extra, *, gamma: float) -> Ranked:
    """Each chunk's cosine plus ``gamma`` times its document's (the normalised mean of
    its chunks' vectors), then fused as usual: a chunk of a document that is about the
    query as a whole rises, even where the chunk itself is the document's tail."""
    uris = [channels.where[int(r)][0] for r in extra.rowids]
    members: dict[str, list[int]] = {}
    for i, uri in enumerate(uris):
        members.setdefault(uri, []).append(i)
    means = {uri: extra.matrix[rows].mean(axis=0) for uri, rows in members.items()}
    doc_matrix = np.stack([means[uri] / np.linalg.norm(means[uri]) for uri in uris])

    def ranked(query: EvalQuery) -> list[int]:
        q = extra.query_vector[query.qid]
        q = q / np.linalg.norm(q)
        scores = (extra.matrix @ q + gamma * (doc_matrix @ q)) / (1.0 + gamma)
        hits = extra.top(scores, EVAL_TOP_K)
        lists = {"bm25": channels.bm25(EVEN)[query.qid][:EVAL_TOP_K], "vector": hits}
        return [rowid for rowid, _, _ in default_fused(channels, query, lists)]

    return ranked


# -- document aggregation ----------------------------------------------------------------

def aggregated(channels: Channels, *, second: float) -> Ranked:
    def ranked(query: EvalQuery) -> list[int]:
        by_uri: dict[str, list[tuple[int, float]]] = {}
        for rowid, score, _ in default_fused(channels, query):
            by_uri.setdefault(channels.where[rowid][0], []).append((rowid, score))
        def score(chunks: list[tuple[int, float]]) -> float:
            return chunks[0][1] + (second * chunks[1][1] if len(chunks) > 1 else 0.0)
        order = sorted(by_uri.values(), key=score, reverse=True)
        return [rowid for chunks in order for rowid, _ in chunks]

    return ranked


def main() -> None:
    parser = query_parser(__doc__)
    parser.add_argument(
        "--only", choices=("calibrated", "feedback", "aggregate", "docvector"), action="append"
    )
    args = parser.parse_args()
    queries = parsed_queries(parser, args)
    print(f"{len(queries)} queries, index {args.index}")
    channels = Channels(args.index, queries, EVAL_TOP_K)
    extra = Extra(channels)
    only = set(args.only or ("calibrated", "feedback", "aggregate"))
    base = [
        ("bm25", channels.score(single(channels.bm25(EVEN)))),
        ("vector", channels.score(single(channels.vector))),
        ("hybrid min-max per chunk (default)", channels.score(fused(channels, EVEN, fusion="score"))),
    ]
    rows = list(base)
    if "calibrated" in only:
        for bm25, vector in (
            ("max", "minmax"), ("minmax", "floor:0"), ("minmax", "floor:0.3"), ("max", "floor:0.3"),
            ("minmax", "fixed:0.2"), ("idf:1", "fixed:0.2"), ("idf:2", "fixed:0.2"), ("idf:1", "minmax"),
            ("idf:2", "minmax"), ("max", "fixed:0.2"),
        ):
            rows.append((f"calibrated bm25 {bm25}, vector {vector}",
                         channels.score(calibrated(channels, extra, bm25=bm25, vector=vector))))
    if "feedback" in only:
        for k, beta, agreed in ((3, 0.5, False), (5, 0.5, False), (10, 0.5, False), (5, 1.0, False),
                                (3, 1.0, False), (5, 0.5, True), (10, 1.0, True)):
            label = f"vector feedback k={k} beta={beta:g}{' agreed top-10 only' if agreed else ''}"
            rows.append((label, channels.score(feedback(channels, extra, k=k, beta=beta, agreed=agreed))))
        rows.append(("vector feedback k=5 beta=0.5, vector channel alone",
                     channels.score(feedback(channels, extra, k=5, beta=0.5, fuse_again=False))))
    if "aggregate" in only:
        for second in (0.1, 0.2, 0.3, 0.5):
            rows.append((f"document = best chunk + {second:g} x second",
                         channels.score(aggregated(channels, second=second))))
    if "docvector" in only:
        for gamma in (0.25, 0.5, 1.0):
            rows.append((f"chunk cosine + {gamma:g} x document cosine",
                         channels.score(document_vectors(channels, extra, gamma=gamma))))
        for k, beta in ((3, 0.5), (5, 0.5)):
            rows.append((f"vector feedback from the vector channel's own top {k}, beta={beta:g}",
                         channels.score(feedback(channels, extra, k=k, beta=beta, own=True))))
    table("fusion levers (boosts 1/1/1, 200 chunks per channel)", rows)


if __name__ == "__main__":
    main()
