"""Run queries through a retriever in several modes and score the rankings.

Every mode sees the same queries; query vectors are computed once, in one batch, and
shared by all modes through ``QueryVectorCache`` (an embedder wrapper handed to the
backend), so adding a mode costs retrieval time, not embedding time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lore.embedders.forwarding import ForwardingEmbedder
from lore.errors import ConfigError
from lore.eval.datasets import EvalQuery
from lore.eval.metrics import (
    RankedDocument,
    mean_metrics,
    mean_section_metrics,
    query_metrics,
    rank_documents,
    rank_sections,
    section_metrics,
    section_targets,
)
from lore.models import Passage, SearchMode
from lore.priority import Weights, prioritised
from lore.protocols import Embedder, KnowledgeRetriever, Reranker, Vectors, retrieve_passages

#: The pseudo-mode that reranks hybrid candidates with the configured reranker.
RERANK_MODE = "hybrid+rerank"
#: Documents per ranking: enough for Recall@100.
DEFAULT_DEPTH = 100
#: Hybrid chunks handed to the reranker per query (its ranking is only these).
DEFAULT_RERANK_CANDIDATES = 50
#: A ranking is grown by asking for more chunks until it holds ``depth`` documents;
#: this bounds the chunks asked for, relative to ``depth``.
_MAX_CHUNKS_PER_DOCUMENT = 8

#: The smallest relative gap between consecutive scores in a TREC run file (see
#: ``trec_run_lines``); float32 resolves about 1.2e-7.
_TREC_SCORE_STEP = 1e-6

#: Passage text kept per unanswerable question in detailed JSON.
_DETAIL_TEXT_CHARS = 300

QueryDone = Callable[[str, str], None]


class QueryVectorCache(ForwardingEmbedder):
    """An ``Embedder`` that answers ``embed_queries`` from vectors computed up front.

    Pass it to the backend instead of the real embedder: ``prime`` embeds every query
    in one batch, and each mode's retrieval then finds its vector here. Unknown texts
    are embedded (and kept) on demand.
    """

    def __init__(self, embedder: Embedder) -> None:
        super().__init__(embedder)
        self._vectors: dict[str, np.ndarray[Any, np.dtype[np.float32]]] = {}

    def prime(self, texts: Sequence[str]) -> None:
        """Embed every text not seen yet in ONE call: the embedder batches (and sorts by
        length) far better over the whole set than query by query."""
        missing = list(dict.fromkeys(text for text in texts if text not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self.inner.embed_queries(missing), strict=True))

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        self.prime(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self._vectors[text] for text in texts]).astype(np.float32, copy=False)


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A question with no answer in the corpus, and what the retriever offered anyway."""

    qid: str
    question: str
    top_uri: str | None
    top_score: float | None
    top_text: str


@dataclass(slots=True)
class ModeResult:
    mode: str
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]
    rankings: dict[str, list[RankedDocument]]
    unanswered: list[Unanswered]
    seconds: float


@dataclass(slots=True)
class EvalRun:
    """One ``lore eval``: a dataset through one retriever in several modes."""

    dataset: str
    engine: str
    embedder: str
    queries: int
    unanswerable: int
    results: list[ModeResult] = field(default_factory=list)

    def result(self, mode: str) -> ModeResult | None:
        return next((result for result in self.results if result.mode == mode), None)

    def to_json(self, *, detail: bool = False) -> dict[str, Any]:
        """Means per mode and the unanswerable questions' rank-1 answers; ``detail`` adds
        each query's metrics and the rank-1 passage text (for a human to judge)."""
        modes: dict[str, Any] = {}
        for result in self.results:
            unanswered: list[dict[str, Any]] = []
            for item in result.unanswered:
                entry: dict[str, Any] = {
                    "id": item.qid,
                    "question": item.question,
                    "top_uri": item.top_uri,
                    "top_score": item.top_score,
                }
                if detail:
                    entry["top_text"] = item.top_text[:_DETAIL_TEXT_CHARS]
                unanswered.append(entry)
            modes[result.mode] = {
                "metrics": _rounded(result.metrics),
                "seconds": round(result.seconds, 3),
                "unanswered": unanswered,
            }
            if detail:
                modes[result.mode]["per_query"] = {
                    qid: _rounded(values) for qid, values in result.per_query.items()
                }
        return {
            "dataset": self.dataset,
            "engine": self.engine,
            "embedder": self.embedder,
            "queries": self.queries,
            "unanswerable": self.unanswerable,
            "modes": modes,
        }


def _rounded(metrics: Mapping[str, float]) -> dict[str, float]:
    return {name: round(value, 6) for name, value in metrics.items()}


def parse_modes(spec: str, retriever: KnowledgeRetriever, reranker: Reranker | None) -> list[str]:
    """``"bm25,vector,hybrid"`` -> validated mode names; ``all`` is every mode offered
    (plus ``hybrid+rerank`` when a reranker is configured)."""
    offered = [mode.value for mode in retriever.modes]
    available = (
        [*offered, RERANK_MODE] if reranker is not None and SearchMode.HYBRID.value in offered else offered
    )
    wanted = [part.strip().lower() for part in spec.split(",") if part.strip()]
    if wanted == ["all"]:
        return available
    for mode in wanted:
        if mode == RERANK_MODE and reranker is None:
            raise ConfigError(f"mode {RERANK_MODE!r} needs a reranker (settings.reranker)")
        if mode not in available:
            raise ConfigError(
                f"mode {mode!r} is not offered by {retriever.engine}; choose from {', '.join(available)}"
            )
    if not wanted:
        raise ConfigError("no search mode given")
    return list(dict.fromkeys(wanted))


async def _ranking(
    retriever: KnowledgeRetriever, query: str, mode: SearchMode, depth: int, weights: Weights | None = None
) -> list[Passage]:
    """Enough chunks for ``depth`` distinct documents (or all the retriever has), arranged
    as the search tool arranges them (``lore.arrange``: the sources' priorities, a
    section's consecutive chunks as one passage, the question's intent, diversity)."""
    # Loaded by the first ranking, not with the module: ``lore --help`` imports this
    # module (``lore eval``'s progress display) and has no use for the arrangement.
    from lore.arrange import arranged

    top_k = depth * 2
    while True:
        found = await retrieve_passages(retriever, query, top_k=top_k, mode=mode)
        enough = len({passage.uri for passage in found}) >= depth
        if enough or len(found) < top_k or top_k >= depth * _MAX_CHUNKS_PER_DOCUMENT:
            return arranged(found, query, weights)
        top_k *= 2


async def retrieve_for_mode(
    retriever: KnowledgeRetriever,
    query: str,
    mode: str,
    *,
    depth: int = DEFAULT_DEPTH,
    reranker: Reranker | None = None,
    rerank_candidates: int = DEFAULT_RERANK_CANDIDATES,
    weights: Weights | None = None,
) -> list[Passage]:
    """The chunks one mode returns for ``query``, best first, enough for ``depth``
    documents (``hybrid+rerank``: the reranked hybrid candidates)."""
    if mode == RERANK_MODE:
        if reranker is None:
            raise ConfigError(f"mode {RERANK_MODE!r} needs a reranker")
        candidates = await retrieve_passages(
            retriever, query, top_k=rerank_candidates, mode=SearchMode.HYBRID
        )
        reranked = await reranker.rerank(query, candidates, top_k=len(candidates))
        from lore.arrange import diversified

        return diversified(prioritised(reranked, weights or {}))
    return await _ranking(retriever, query, SearchMode(mode), depth, weights)


async def evaluate(
    retriever: KnowledgeRetriever,
    queries: Sequence[EvalQuery],
    modes: Sequence[str],
    *,
    dataset: str,
    embedder: Embedder | None = None,
    depth: int = DEFAULT_DEPTH,
    reranker: Reranker | None = None,
    on_query: QueryDone | None = None,
    weights: Weights | None = None,
) -> EvalRun:
    """Rank every query in every mode. Answerable queries are scored; the others are
    listed with what came back at rank 1 (a hit there would be a wrong answer).
    Questions whose expected answer names a section are scored on sections too
    (``SECTION_METRICS``). ``weights``: the sources' priorities (``lore.priority``)."""
    answerable = [query for query in queries if query.answerable]
    run = EvalRun(
        dataset=dataset,
        engine=retriever.engine,
        embedder=embedder.model_id if embedder is not None else "",
        queries=len(answerable),
        unanswerable=len(queries) - len(answerable),
    )
    for mode in modes:
        started = time.perf_counter()
        per_query: dict[str, dict[str, float]] = {}
        rankings: dict[str, list[RankedDocument]] = {}
        unanswered: list[Unanswered] = []
        for query in queries:
            passages = await retrieve_for_mode(
                retriever, query.text, mode, depth=depth, reranker=reranker, weights=weights
            )
            ranking = rank_documents(passages)[:depth]
            rankings[query.qid] = ranking
            if query.answerable:
                per_query[query.qid] = query_metrics(ranking, query.targets)
                if section_targets(query.targets):
                    per_query[query.qid].update(section_metrics(rank_sections(passages), query.targets))
            else:
                top = passages[0] if passages else None
                unanswered.append(
                    Unanswered(
                        qid=query.qid,
                        question=query.text,
                        top_uri=top.uri if top else None,
                        top_score=top.score if top else None,
                        top_text=top.text if top else "",
                    )
                )
            if on_query is not None:
                on_query(mode, query.qid)
        run.results.append(
            ModeResult(
                mode=mode,
                metrics={**mean_metrics(per_query), **mean_section_metrics(per_query)},
                per_query=per_query,
                rankings=rankings,
                unanswered=unanswered,
                seconds=time.perf_counter() - started,
            )
        )
    return run


def trec_run_lines(
    rankings: Mapping[str, Sequence[RankedDocument]], tag: str, doc_id: Callable[[str], str]
) -> list[str]:
    """TREC run lines ``qid Q0 docid rank score tag``.

    trec_eval orders a query's documents by score (ties by docid), not by the rank
    column, and pytrec_eval compares scores in single precision. So a score not clearly
    below the one before it (RRF ties are common) is nudged one part per million below
    it; otherwise the file would evaluate to different numbers than lore's.
    """
    lines: list[str] = []
    for qid, ranking in rankings.items():
        previous: float | None = None
        for rank, document in enumerate(ranking, start=1):
            score = float(document.score)
            if previous is not None:
                step = _TREC_SCORE_STEP * abs(previous) if previous else _TREC_SCORE_STEP
                score = min(score, previous - step)
            previous = score
            lines.append(f"{qid} Q0 {doc_id(document.uri)} {rank} {score:.12g} {tag}")
    return lines
