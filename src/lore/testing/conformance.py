"""The conformance suite every storing backend passes (pytest mixin classes).

A backend's test module subclasses ``BackendConformance`` and provides ONE fixture,
``store``: a fresh, empty object implementing both ``KnowledgeIndex`` and
``KnowledgeRetriever``, built with the ``embedder`` fixture this suite provides (a
``CountingEmbedder``), and closed after the test::

    class TestSqliteConformance(BackendConformance):
        @pytest.fixture
        def store(self, tmp_path, embedder):
            backend = SqliteBackend(tmp_path / "lore.db", embedder)
            yield backend
            backend.close()

The parts (``IndexConformance``, ``RetrievalConformance``; ``FilterConformance`` and
``QueryTextConformance`` in ``query_conformance.py``; ``AccessConformance`` in
``access_conformance.py``: who may read what, inside every channel) can be subclassed
separately; ``suite.py`` holds what they share. Modes a backend does not declare
in ``modes`` are skipped, except that asking for one must raise ``UnsupportedModeError``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from lore.errors import EmbedderMismatchError, EmbeddingError, IndexingError, QueryError, UnsupportedModeError
from lore.models import SOURCE_LABEL, SOURCE_TYPE_LABEL, IndexedDocument, SearchMode, embed_key
from lore.protocols import EvidenceReporting, KnowledgeIndex, KnowledgeRetriever
from lore.testing import DEFAULT_SOURCE, Store, add_document, embed_chunks, make_document
from lore.testing.access_conformance import AccessConformance
from lore.testing.cases import CORPUS, HOSTILE_QUERIES, IDENTIFIER_DISTRACTORS, IDENTIFIERS
from lore.testing.embedders import CountingEmbedder
from lore.testing.query_conformance import CopiedQueryConformance, FilterConformance, QueryTextConformance
from lore.testing.suite import (
    ALL_MODES,
    CHANNELS,
    ProviderDownEmbedder,
    Suite,
    add_corpus,
    add_unlocked,
    check_sorted_and_unique,
    orthogonal_to,
    require_mode,
    unit,
    uris,
)

__all__ = [
    "CORPUS",
    "HOSTILE_QUERIES",
    "IDENTIFIERS",
    "IDENTIFIER_DISTRACTORS",
    "AccessConformance",
    "BackendConformance",
    "FilterConformance",
    "IndexConformance",
    "ProviderDownEmbedder",
    "QueryTextConformance",
    "RetrievalConformance",
]


class IndexConformance(Suite):
    """The write side: upsert, replace, delete, ledger, vector cache, embedder check, state."""

    def test_implements_both_seams(self, store: Store) -> None:
        assert isinstance(store, KnowledgeIndex)
        assert isinstance(store, KnowledgeRetriever)
        assert store.modes, "a retriever declares at least one mode"
        assert isinstance(store.engine, str)
        assert store.engine

    def test_empty_index(self, store: Store) -> None:
        assert dict(store.held(DEFAULT_SOURCE)) == {}
        assert dict(store.cached_vectors(["no-such-key"])) == {}
        assert store.get_state("no-such-key") is None

    def test_upsert_records_ledger(self, store: Store, embedder: CountingEmbedder) -> None:
        updated = datetime(2023, 11, 2, 8, 15, tzinfo=UTC)
        document, chunks = add_document(
            store,
            embedder,
            "runbooks/etcd.md",
            sections=[("Meaning", "etcd lost quorum."), ("Mitigation", "Restore from snapshot.")],
            title="etcd quorum",
            revision="abc123",
            updated_at=updated,
        )
        held = store.held(DEFAULT_SOURCE)
        assert set(held) == {"runbooks/etcd.md"}
        row = held["runbooks/etcd.md"]
        assert isinstance(row, IndexedDocument)
        assert (row.uri, row.revision, row.title, row.chunk_count) == (
            document.uri,
            "abc123",
            "etcd quorum",
            len(chunks),
        )
        assert row.updated_at == updated
        assert row.indexed_at.tzinfo is not None

    def test_ledger_is_per_source(self, store: Store, embedder: CountingEmbedder) -> None:
        add_document(store, embedder, "a.md", "alpha text", source="one")
        add_document(store, embedder, "b.md", "beta text", source="two")
        assert set(store.held("one")) == {"a.md"}
        assert set(store.held("two")) == {"b.md"}
        assert dict(store.held("three")) == {}

    def test_document_without_chunks_is_held(self, store: Store, embedder: CountingEmbedder) -> None:
        add_document(store, embedder, "empty.md", "")
        assert store.held(DEFAULT_SOURCE)["empty.md"].chunk_count == 0

    async def test_reupsert_is_idempotent(self, store: Store, embedder: CountingEmbedder) -> None:
        sections = [("One", "walrus migration step one"), ("Two", "walrus migration step two")]
        for _ in range(3):
            add_document(store, embedder, "walrus.md", sections=sections, title="Walrus")
        assert store.held(DEFAULT_SOURCE)["walrus.md"].chunk_count == 2
        passages = (await store.retrieve("walrus migration", top_k=10)).passages
        assert sorted(p.section for p in passages) == ["One", "Two"]

    async def test_upsert_replaces_previous_version(self, store: Store, embedder: CountingEmbedder) -> None:
        old = [("A", "zebra crossing one"), ("B", "zebra crossing two"), ("C", "zebra crossing three")]
        add_document(store, embedder, "animals.md", sections=old, revision="v1")
        add_document(store, embedder, "animals.md", "giraffe neck", revision="v2")
        assert store.held(DEFAULT_SOURCE)["animals.md"].revision == "v2"
        assert store.held(DEFAULT_SOURCE)["animals.md"].chunk_count == 1
        for mode in store.modes:
            passages = (await store.retrieve("zebra crossing giraffe", top_k=10, mode=mode)).passages
            assert [(p.revision, p.text) for p in passages] == [("v2", "giraffe neck")]

    async def test_delete_by_uri(self, store: Store, embedder: CountingEmbedder) -> None:
        add_corpus(store, embedder)
        store.delete_by_uri("runbooks/dns.md")
        store.delete_by_uri("runbooks/never-indexed.md")
        assert "runbooks/dns.md" not in store.held(DEFAULT_SOURCE)
        assert len(store.held(DEFAULT_SOURCE)) == len(CORPUS) - 1
        for mode in store.modes:
            passages = (
                await store.retrieve("DNS resolution resolver forwarders", top_k=10, mode=mode)
            ).passages
            assert "runbooks/dns.md" not in uris(passages)

    def test_cached_vectors_round_trip(self, store: Store, embedder: CountingEmbedder) -> None:
        document, chunks = make_document("v.md", sections=[("x", "first text"), ("y", "second text")])
        vectors = embed_chunks(embedder, chunks)
        store.check_embedder(embedder.model_id, embedder.dimension)
        store.upsert(document, chunks, vectors)
        keys = [embed_key(chunk) for chunk in chunks]
        cached = store.cached_vectors([*keys, "missing-key"])
        assert set(cached) == set(keys)
        for key, expected in zip(keys, vectors, strict=True):
            got = np.asarray(cached[key])
            assert got.shape == (embedder.dimension,)
            np.testing.assert_allclose(got, expected, atol=1e-5)
        assert dict(store.cached_vectors([])) == {}

    def test_upsert_rejects_mismatched_vectors(self, store: Store, embedder: CountingEmbedder) -> None:
        document, chunks = make_document("m.md", sections=[("a", "one"), ("b", "two")])
        store.check_embedder(embedder.model_id, embedder.dimension)
        with pytest.raises(IndexingError):
            store.upsert(document, chunks, embed_chunks(embedder, chunks[:1]))
        # The right count, the wrong dimension (``query_embedding.checked_vectors``).
        vectors = np.asarray(embed_chunks(embedder, chunks), dtype=np.float32)
        with pytest.raises(IndexingError, match=r"m\.md"):
            store.upsert(document, chunks, np.hstack([vectors, vectors]))
        assert "m.md" not in store.held(DEFAULT_SOURCE)

    def test_check_embedder(self, store: Store, embedder: CountingEmbedder) -> None:
        store.check_embedder(embedder.model_id, embedder.dimension)
        store.check_embedder(embedder.model_id, embedder.dimension)
        with pytest.raises(EmbedderMismatchError, match="lore reembed"):
            store.check_embedder("another-model", embedder.dimension)
        with pytest.raises(EmbedderMismatchError, match="lore reembed"):
            store.check_embedder(embedder.model_id, embedder.dimension * 2)

    def test_state(self, store: Store) -> None:
        assert store.get_state("resume:docs") is None
        store.set_state("resume:docs", "token-1")
        store.set_state("resume:docs", "token-2")
        store.set_state("other", "ünïcode ✓")
        assert store.get_state("resume:docs") == "token-2"
        assert store.get_state("other") == "ünïcode ✓"

    async def test_write_lock_wraps_writes(self, store: Store, embedder: CountingEmbedder) -> None:
        with store.write_lock():
            add_unlocked(store, embedder, dict(CORPUS))
            store.delete_by_uri("runbooks/tls.md")
        assert len(store.held(DEFAULT_SOURCE)) == len(CORPUS) - 1
        passages = (await store.retrieve("Redis memory eviction", top_k=3)).passages
        assert passages
        assert passages[0].uri == "runbooks/redis.md"


class RetrievalConformance(Suite):
    """The read side: modes, provenance, fusion, identifiers, unicode, top_k."""

    @pytest.mark.parametrize("mode", [None, *ALL_MODES])
    async def test_empty_index_returns_nothing(self, store: Store, mode: SearchMode | None) -> None:
        if mode is not None:
            require_mode(store, mode)
        assert (await store.retrieve("anything at all", top_k=5, mode=mode)).passages == []

    @pytest.mark.parametrize("mode", ALL_MODES)
    async def test_each_mode_finds_the_document(
        self, store: Store, embedder: CountingEmbedder, mode: SearchMode
    ) -> None:
        require_mode(store, mode)
        add_corpus(store, embedder)
        passages = (await store.retrieve("TLS certificate rotation issuer", top_k=3, mode=mode)).passages
        assert passages[0].uri == "runbooks/tls.md"
        check_sorted_and_unique(passages)
        for passage in passages:
            assert set(passage.channel_ranks) <= CHANNELS
            assert all(rank >= 1 for rank in passage.channel_ranks.values())
        if mode is not SearchMode.HYBRID:
            assert set(passages[0].channel_ranks) <= {mode.value}

    async def test_default_mode_is_the_first_declared(self, store: Store, embedder: CountingEmbedder) -> None:
        add_corpus(store, embedder)
        default = (await store.retrieve("Kafka broker partitions", top_k=5)).passages
        explicit = (await store.retrieve("Kafka broker partitions", top_k=5, mode=store.modes[0])).passages
        assert [p.chunk_id for p in default] == [p.chunk_id for p in explicit]

    async def test_failed_query_embedding_degrades_hybrid_to_bm25(
        self, store: Store, embedder: CountingEmbedder
    ) -> None:
        """Hybrid search answers from BM25 alone, and says why, when the query cannot be
        embedded; vector search, which has nothing to fall back on, fails."""
        require_mode(store, SearchMode.HYBRID)
        require_mode(store, SearchMode.BM25)
        assert isinstance(embedder, ProviderDownEmbedder)
        add_corpus(store, embedder)
        query = "TLS certificate rotation issuer"
        healthy = await store.retrieve(query, top_k=3, mode=SearchMode.HYBRID)
        assert healthy.degraded_reason is None
        embedder.queries_fail = True
        found = await store.retrieve(query, top_k=3, mode=SearchMode.HYBRID)
        assert found.degraded_reason is not None
        assert "HTTP 503" in found.degraded_reason
        bm25 = (await store.retrieve(query, top_k=3, mode=SearchMode.BM25)).passages
        assert [p.chunk_id for p in found.passages] == [p.chunk_id for p in bm25]
        assert found.passages[0].uri == "runbooks/tls.md"
        if SearchMode.VECTOR in store.modes:
            with pytest.raises(EmbeddingError):
                await store.retrieve(query, top_k=3, mode=SearchMode.VECTOR)

    @pytest.mark.parametrize("mode", ALL_MODES)
    async def test_declared_evidence_measures_the_query(
        self, store: Store, embedder: CountingEmbedder, mode: SearchMode
    ) -> None:
        """``EvidenceReporting``: every passage carries evidence; a query copied from a
        document covers all of itself there, a query of words no document holds covers
        nothing; a cosine (from a semantic embedder) is a cosine."""
        if not (isinstance(store, EvidenceReporting) and store.reports_evidence):
            pytest.skip(f"{type(store).__name__} does not declare reports_evidence")
        require_mode(store, mode)
        add_corpus(store, embedder)
        copied = dict(CORPUS)["runbooks/tls.md"]
        passages = (await store.retrieve(copied, top_k=3, mode=mode)).passages
        top = passages[0]
        assert top.uri == "runbooks/tls.md"
        assert all(passage.evidence is not None for passage in passages)
        assert top.evidence is not None
        assert top.evidence.coverage == pytest.approx(1.0)
        vectors = mode is not SearchMode.BM25 and not embedder.degraded
        for passage in passages:
            assert passage.evidence is not None
            cosine = passage.evidence.cosine
            assert (cosine is not None) is vectors
            assert cosine is None or -1.0 - 1e-6 <= cosine <= 1.0 + 1e-6
        if mode is not SearchMode.BM25:
            unknown = (await store.retrieve("zyxqv wvutq plmokn", top_k=3, mode=mode)).passages
            assert unknown, "a vector channel always answers"
            assert all(p.evidence is not None and p.evidence.coverage == 0.0 for p in unknown)

    async def test_undeclared_mode_is_refused(self, store: Store, embedder: CountingEmbedder) -> None:
        missing = [mode for mode in ALL_MODES if mode not in store.modes]
        if not missing:
            pytest.skip("every mode is offered")
        add_corpus(store, embedder)
        with pytest.raises(UnsupportedModeError):
            await store.retrieve("disk", mode=missing[0])

    async def test_bm25_does_not_embed_the_query(self, store: Store, embedder: CountingEmbedder) -> None:
        require_mode(store, SearchMode.BM25)
        add_corpus(store, embedder)
        embedder.reset()
        await store.retrieve("disk pressure", mode=SearchMode.BM25)
        assert embedder.query_calls == 0

    @pytest.mark.parametrize("mode", [None, *ALL_MODES])
    async def test_provenance_round_trip(
        self, store: Store, embedder: CountingEmbedder, mode: SearchMode | None
    ) -> None:
        if mode is not None:
            require_mode(store, mode)
        updated = datetime(2022, 2, 3, 4, 5, 6, tzinfo=UTC)
        _, chunks = add_document(
            store,
            embedder,
            "postmortems/2022-02-outage.md",
            sections=[("Timeline › Detection", "Pager fired for checkout latency at 04:05 UTC.")],
            title="Checkout outage",
            revision="9f8e7d",
            updated_at=updated,
            labels={"team": "payments", "tags": "postmortem,checkout"},
            source="postmortems",
            source_type="git",
        )
        passages = (await store.retrieve("checkout latency pager", top_k=1, mode=mode)).passages
        assert len(passages) == 1
        got, chunk = passages[0], chunks[0]
        assert got.text == chunk.text
        assert got.uri == "postmortems/2022-02-outage.md"
        assert got.title == "Checkout outage"
        assert got.section == "Timeline › Detection"
        assert got.revision == "9f8e7d"
        assert got.updated_at == updated
        assert got.updated_at.tzinfo is not None
        assert got.chunk_id == chunk.id
        assert isinstance(got.score, float)
        assert dict(got.labels) == {
            SOURCE_LABEL: "postmortems",
            SOURCE_TYPE_LABEL: "git",
            "team": "payments",
            "tags": "postmortem,checkout",
        }
        assert set(got.channel_ranks) <= CHANNELS

    async def test_hybrid_prefers_agreement(self, store: Store, embedder: CountingEmbedder) -> None:
        """A document both channels rank high beats one found lexically only and one
        found semantically only."""
        require_mode(store, SearchMode.HYBRID)
        query = "quorum lost"
        q = embedder.embed_queries([query])[0]
        both = "etcd quorum lost after a node failure"
        lexical = "quorum lost in the zookeeper ensemble"
        semantic = "members unreachable and the cluster cannot elect"
        near_q = unit(0.9 * q + 0.436 * orthogonal_to(q, seed=1))
        with store.write_lock():
            add_document(store, embedder, "both.md", both, vectors=q[np.newaxis, :])
            add_document(
                store, embedder, "lexical.md", lexical, vectors=orthogonal_to(q, seed=2)[np.newaxis, :]
            )
            add_document(store, embedder, "semantic.md", semantic, vectors=near_q[np.newaxis, :])
            for i, (uri, text) in enumerate(CORPUS):
                add_document(store, embedder, uri, text, vectors=orthogonal_to(q, seed=10 + i)[np.newaxis, :])
        passages = (await store.retrieve(query, top_k=5, mode=SearchMode.HYBRID)).passages
        # Which single-channel find comes second depends on the fusion (RRF ties them).
        assert uris(passages)[0] == "both.md"
        assert set(uris(passages)[1:3]) == {"lexical.md", "semantic.md"}
        if passages[0].channel_ranks:
            assert set(passages[0].channel_ranks) == CHANNELS

    @pytest.mark.parametrize("identifier", list(IDENTIFIERS))
    async def test_exact_identifier_matches_whole(
        self, store: Store, embedder: CountingEmbedder, identifier: str
    ) -> None:
        with store.write_lock():
            add_unlocked(store, embedder, dict(CORPUS))
            for i, (name, text) in enumerate(IDENTIFIERS.items()):
                add_document(store, embedder, f"ids/{i}.md", text, title=f"note {i}", labels={"id": name})
            for i, text in enumerate(IDENTIFIER_DISTRACTORS):
                add_document(store, embedder, f"distractors/{i}.md", text, title=f"note {i}")
        modes = [mode for mode in (SearchMode.BM25, None) if mode is None or mode in store.modes]
        for mode in modes:
            passages = (await store.retrieve(identifier, top_k=3, mode=mode)).passages
            assert passages, f"{identifier!r} found nothing in mode {mode}"
            assert passages[0].labels.get("id") == identifier, (mode, uris(passages))

    async def test_unicode_text(self, store: Store, embedder: CountingEmbedder) -> None:
        docs = {
            "cjk.md": "数据库 连接池 耗尽 时 重启 服务",
            "accents.md": "Procédure de redémarrage du cache après une panne électrique",
            "emoji.md": "🔥 Incident war room checklist 🚒 page the commander",
            "cyrillic.md": "перезапуск сервера после сбоя питания",
        }
        add_corpus(store, embedder, docs)
        queries = {
            "连接池 耗尽": "cjk.md",
            "redémarrage du cache": "accents.md",
            "🔥 war room": "emoji.md",
            "перезапуск сервера": "cyrillic.md",
        }
        modes = [mode for mode in (SearchMode.BM25, None) if mode is None or mode in store.modes]
        for query, expected in queries.items():
            for mode in modes:
                passages = (await store.retrieve(query, top_k=3, mode=mode)).passages
                assert passages, (query, mode)
                assert passages[0].uri == expected, (query, mode, uris(passages))
                assert passages[0].text == docs[expected]

    @pytest.mark.parametrize("mode", [None, *ALL_MODES])
    async def test_top_k_bounds(
        self, store: Store, embedder: CountingEmbedder, mode: SearchMode | None
    ) -> None:
        if mode is not None:
            require_mode(store, mode)
        with store.write_lock():
            add_unlocked(
                store, embedder, {f"alpha/{i}.md": f"alpha service check number {i}" for i in range(5)}
            )
        for top_k in (1, 3):
            passages = (await store.retrieve("alpha service check", top_k=top_k, mode=mode)).passages
            assert len(passages) == top_k
            check_sorted_and_unique(passages)
        passages = (
            await store.retrieve(
                "alpha service check", top_k=50, labels={"source": DEFAULT_SOURCE}, mode=mode
            )
        ).passages
        assert len(passages) == 5
        check_sorted_and_unique(passages)
        for bad in (0, -1):
            with pytest.raises(QueryError):
                await store.retrieve("alpha", top_k=bad, mode=mode)

    def test_degraded_follows_the_embedder(self, store: Store) -> None:
        assert store.degraded is False


class BackendConformance(
    IndexConformance,
    RetrievalConformance,
    FilterConformance,
    QueryTextConformance,
    CopiedQueryConformance,
    AccessConformance,
):
    """Everything: what a storing backend's test module subclasses."""
