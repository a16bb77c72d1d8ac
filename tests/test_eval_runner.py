"""The runner over a real SQLite index: modes side by side, one batch of query vectors,
document-level dedupe, unanswerable questions, reranking, TREC run lines."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.errors import ConfigError
from lore.eval.datasets import EvalQuery
from lore.eval.metrics import RankedDocument, Target
from lore.eval.runner import RERANK_MODE, QueryVectorCache, evaluate, parse_modes, trec_run_lines
from lore.models import Document, Passage
from lore.sync import sync_sources
from lore.testing.embedders import CountingEmbedder

TOPICS = {
    "etcd": "etcd member lost its leader; raft elections keep happening and writes fail",
    "kafka": "kafka consumer group lag grows; consumers stall while rebalancing partitions",
    "postgres": "postgres refuses connections: too many clients already, pgbouncer pool saturated",
    "dns": "coredns returns SERVFAIL and pods log getaddrinfo EAI_AGAIN for cluster names",
    "tls": "certificate expired; cert-manager renewal failed on the acme http-01 challenge",
}


class ListSource:
    """A tiny in-memory source (sync needs a ``KnowledgeSource``)."""

    source_type = "test"
    incremental = False
    visibility = "all-viewers"

    def __init__(self, documents: Sequence[Document]) -> None:
        self.name = "t"
        self._documents = documents

    async def documents(self, since: str | None = None) -> Iterator[Document]:  # type: ignore[misc]
        for document in self._documents:
            yield document

    def resume_token(self) -> None:
        return None


def document(name: str, text: str) -> Document:
    # Two sections, so a document is cut into several chunks and dedupe matters.
    body = f"# {name}\n\n## Meaning\n\n{text}\n\n## Mitigation\n\n" + " ".join([text] * 30)
    return Document(
        uri=f"file://t/{name}.md",
        title=name,
        text=body,
        revision="1",
        updated_at=datetime(2024, 1, 1, tzinfo=UTC),
    )


@pytest.fixture
async def index(tmp_path: Path) -> Iterator[tuple[SqliteBackend, QueryVectorCache, CountingEmbedder]]:
    from lore.models import Visibility

    ListSource.visibility = Visibility.ALL_VIEWERS  # type: ignore[assignment]
    embedder = CountingEmbedder()
    cache = QueryVectorCache(embedder)
    backend = SqliteBackend(tmp_path / "t.db", cache)
    documents = [document(name, text) for name, text in TOPICS.items()]
    chunker = Chunker(max_tokens=64, overlap_tokens=8)
    await sync_sources([ListSource(documents)], backend, cache, chunker)  # type: ignore[list-item]
    embedder.reset()
    yield backend, cache, embedder
    backend.close()


QUERIES = [
    EvalQuery("q-etcd", "etcd has no leader, elections", (Target("file://t/etcd.md"),)),
    EvalQuery("q-kafka", "consumer lag keeps growing", (Target("file://t/kafka.md"),)),
    EvalQuery("q-pg", "too many clients already", (Target("file://t/postgres.md"),)),
    EvalQuery("q-none", "unseal the vault", ()),
]


async def test_modes_side_by_side_share_one_batch_of_query_vectors(index: tuple) -> None:  # type: ignore[type-arg]
    backend, cache, embedder = index
    cache.prime([query.text for query in QUERIES])
    assert (embedder.query_calls, embedder.queries_embedded) == (1, len(QUERIES))

    run = await evaluate(
        backend, QUERIES, ["bm25", "vector", "hybrid"], dataset="t", embedder=cache, depth=10
    )

    assert embedder.query_calls == 1  # every mode found its vector in the cache
    assert [result.mode for result in run.results] == ["bm25", "vector", "hybrid"]
    assert (run.queries, run.unanswerable) == (3, 1)
    for result in run.results:
        assert result.metrics["hit@1"] == 1.0
        assert result.metrics["recall@10"] == 1.0
        # Rankings are per document: each uri once although documents have several chunks.
        for ranking in result.rankings.values():
            uris = [doc.uri for doc in ranking]
            assert len(uris) == len(set(uris))
        assert len(result.rankings["q-etcd"]) == len(TOPICS) or result.mode == "bm25"
        unanswered = result.unanswered[0]
        assert unanswered.qid == "q-none"
        # Vectors always return something; BM25 nothing when no word matches.
        assert (unanswered.top_uri is not None) == (result.mode != "bm25")
        assert "q-none" not in result.per_query


class ReverseReranker:
    """Puts the retriever's last candidate first: visible in the ranking, deterministic."""

    model_id = "reverse"

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def rerank(self, query: str, passages: Sequence[Passage], *, top_k: int) -> list[Passage]:
        self.calls.append(len(passages))
        return list(reversed(passages))[:top_k]


async def test_rerank_mode(index: tuple) -> None:  # type: ignore[type-arg]
    backend, _cache, _ = index
    reranker = ReverseReranker()
    assert parse_modes("hybrid,hybrid+rerank", backend, reranker) == ["hybrid", RERANK_MODE]
    run = await evaluate(backend, QUERIES[:1], ["hybrid", RERANK_MODE], dataset="t", reranker=reranker)
    hybrid, reranked = run.results
    assert reranker.calls
    assert reranked.rankings["q-etcd"][0].uri != hybrid.rankings["q-etcd"][0].uri
    assert reranked.metrics["hit@1"] == 0.0


async def test_parse_modes(index: tuple) -> None:  # type: ignore[type-arg]
    backend, _, _ = index
    assert sorted(parse_modes("all", backend, None)) == ["bm25", "hybrid", "vector"]
    assert parse_modes(" BM25 , hybrid,bm25", backend, None) == ["bm25", "hybrid"]
    with pytest.raises(ConfigError, match="needs a reranker"):
        parse_modes("hybrid+rerank", backend, None)
    with pytest.raises(ConfigError, match="'splade' is not offered"):
        parse_modes("splade", backend, None)


def test_trec_run_lines_keep_the_order_when_scores_tie() -> None:
    ranking = [
        RankedDocument("beir://a", 0.5),
        RankedDocument("beir://b", 0.5),
        RankedDocument("beir://c", 0.25),
    ]
    lines = trec_run_lines({"7": ranking}, "lore-hybrid", lambda uri: uri.removeprefix("beir://"))
    fields = [line.split() for line in lines]
    assert [(f[0], f[1], f[2], f[3], f[5]) for f in fields] == [
        ("7", "Q0", "a", "1", "lore-hybrid"),
        ("7", "Q0", "b", "2", "lore-hybrid"),
        ("7", "Q0", "c", "3", "lore-hybrid"),
    ]
    scores = [float(f[4]) for f in fields]
    assert scores[0] == 0.5
    assert scores[0] > scores[1] > scores[2]  # strictly, so trec_eval keeps lore's order
