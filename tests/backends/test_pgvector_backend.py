"""The PostgreSQL + pgvector backend against a real server (``conftest.pg_dsn``): the whole
conformance suite, then what only this backend has (identifier columns, schema versions,
several indexes in one database, advisory locks, an unreachable server)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from optional_extras import require_extra

from .pg_cluster import free_port, start_cluster
from .pg_layouts import to_schema_3

require_extra("psycopg", "pgvector")
require_extra("psycopg_pool", "pgvector")
require_extra("pgvector", "pgvector")

import psycopg
from psycopg.conninfo import make_conninfo

from lore.access import ALL_VIEWERS, AccessFilter
from lore.backends.pgvector import PgVectorBackend, from_settings
from lore.backends.pgvector import schema as pg_schema
from lore.config import load_settings
from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    EmbedderMismatchError,
    IndexLockedError,
)
from lore.models import SearchMode
from lore.resolve import resolve_retriever
from lore.sync import run_sync
from lore.testing import DEFAULT_SOURCE, add_document
from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder


def fresh_index_name() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture
def index_name() -> str:
    return fresh_index_name()


@pytest.fixture
def backend(pg_dsn: str, index_name: str, embedder: CountingEmbedder) -> Iterator[PgVectorBackend]:
    store = PgVectorBackend(pg_dsn, embedder, index_name=index_name)
    yield store
    store.drop()
    store.close()


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


class TestPgVectorConformance(BackendConformance):
    @pytest.fixture
    def store(self, pg_dsn: str, embedder: CountingEmbedder) -> Iterator[PgVectorBackend]:
        # Every test gets its own table set in the shared server: a fresh, empty index.
        store = PgVectorBackend(pg_dsn, embedder, index_name=fresh_index_name())
        yield store
        store.drop()
        store.close()


# -- identifiers --------------------------------------------------------------------------


async def test_postings_hold_identifiers_whole_and_split(
    backend: PgVectorBackend, pg_dsn: str, index_name: str, embedder: CountingEmbedder
) -> None:
    add_document(backend, embedder, "a.md", "Page on etcdNoLeader: ERR_1234 from kube-apiserver at 10.0.0.1")
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(f"SELECT term, tf_content, tf_ident FROM {index_name}_postings").fetchall()
    body = {term for term, tf_content, _ in rows if tf_content}
    whole = {term for term, _, tf_ident in rows if tf_ident}
    assert {"etcdnoleader", "err_1234", "kube-apiserver", "10.0.0.1"} <= whole
    assert {"etcd", "leader", "kube", "apiserv"} <= body
    # camelCase parts reach the English fields too: "etcd leader" finds etcdNoLeader.
    passages = (await backend.retrieve("etcd leader", mode=SearchMode.BM25)).passages
    assert [p.uri for p in passages] == ["a.md"]


async def test_exact_identifier_outranks_its_parts(
    backend: PgVectorBackend, embedder: CountingEmbedder
) -> None:
    add_document(backend, embedder, "parts.md", "err 1234 err 1234 err 1234 appear in the table of codes")
    add_document(backend, embedder, "exact.md", "Checkout fails with ERR_1234 when the vault times out")
    passages = (await backend.retrieve("ERR_1234", mode=SearchMode.BM25)).passages
    assert [p.uri for p in passages][:1] == ["exact.md"]


# -- schema, several indexes, locks -------------------------------------------------------


def test_migrations_are_recorded_once(backend: PgVectorBackend, pg_dsn: str, index_name: str) -> None:
    assert backend.schema_version() == pg_schema.LATEST_VERSION
    again = PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=index_name)
    again.close()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(f"SELECT version FROM {index_name}_schema_version ORDER BY version").fetchall()
    assert [row[0] for row in rows] == [migration.number for migration in pg_schema.MIGRATIONS]


async def test_an_index_from_before_access_opens_and_is_for_admins_until_resynced(
    backend: PgVectorBackend, pg_dsn: str, index_name: str, embedder: CountingEmbedder
) -> None:
    """Migration 3 on an index of schema 2 with data: its rows become the default tenant's,
    of unknown access (admins only), and a re-sync's upsert gives them their access."""
    add_document(backend, embedder, "a.md", "etcd quorum lost", access=ALL_VIEWERS)
    to_schema_3(pg_dsn, index_name)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"ALTER TABLE {index_name}_chunks DROP COLUMN access_terms")
        conn.execute(f"ALTER TABLE {index_name}_documents DROP COLUMN access, DROP COLUMN tenant")
        conn.execute(f"DELETE FROM {index_name}_schema_version WHERE version = 3")
    viewer, admin = AccessFilter(None, frozenset()), AccessFilter(None, None)
    reopened = PgVectorBackend(pg_dsn, embedder, index_name=index_name)
    try:
        assert reopened.schema_version() == pg_schema.LATEST_VERSION
        assert reopened.held(DEFAULT_SOURCE)["a.md"].access is None
        for mode in SearchMode:
            found = (await reopened.retrieve("etcd quorum", mode=mode, access=admin)).passages
            assert [p.uri for p in found] == ["a.md"]
            assert (await reopened.retrieve("etcd quorum", mode=mode, access=viewer)).passages == []
        add_document(reopened, embedder, "a.md", "etcd quorum lost", access=ALL_VIEWERS)
        for mode in SearchMode:
            found = (await reopened.retrieve("etcd quorum", mode=mode, access=viewer)).passages
            assert [p.uri for p in found] == ["a.md"]
    finally:
        reopened.close()


def test_newer_schema_is_refused(backend: PgVectorBackend, pg_dsn: str, index_name: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(
            f"INSERT INTO {index_name}_schema_version (version, description) VALUES (%s, 'future')",
            (pg_schema.LATEST_VERSION + 1,),
        )
    with pytest.raises(ConfigError, match="newer"):
        PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=index_name)


def test_embedder_fixes_the_vector_column_and_hnsw_follows_the_first_load(
    backend: PgVectorBackend, pg_dsn: str, index_name: str, embedder: CountingEmbedder
) -> None:
    def indexes() -> list[str]:
        with psycopg.connect(pg_dsn) as conn:
            found = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (f"{index_name}_chunks",)
            ).fetchall()
        return [row[0] for row in found if "USING hnsw" in row[0]]

    with backend.write_lock():
        backend.check_embedder(embedder.model_id, embedder.dimension)
        for i in range(20):
            add_document(backend, embedder, f"doc/{i}.md", f"node {i} disk pressure")
        # Rows first, the index over them once the load is done.
        assert indexes() == []
    assert backend.stored_embedder() == (embedder.model_id, embedder.dimension)
    assert len(indexes()) == 1
    assert "vector_cosine_ops" in indexes()[0]
    with psycopg.connect(pg_dsn) as conn:
        column = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'embedding'",
            (f"{index_name}_chunks",),
        ).fetchone()
    assert column == (f"vector({embedder.dimension})",)


async def test_two_indexes_share_a_database(pg_dsn: str, embedder: CountingEmbedder) -> None:
    first = PgVectorBackend(pg_dsn, embedder, index_name=fresh_index_name())
    second = PgVectorBackend(pg_dsn, embedder, index_name=fresh_index_name())
    try:
        add_document(first, embedder, "first.md", "walrus colony census")
        add_document(second, embedder, "second.md", "walrus feeding grounds")
        first.set_state("token", "one")
        second.set_state("token", "two")
        assert set(first.held(DEFAULT_SOURCE)) == {"first.md"}
        assert set(second.held(DEFAULT_SOURCE)) == {"second.md"}
        assert [p.uri for p in (await first.retrieve("walrus")).passages] == ["first.md"]
        assert [p.uri for p in (await second.retrieve("walrus")).passages] == ["second.md"]
        assert (first.get_state("token"), second.get_state("token")) == ("one", "two")
        first.drop()
        assert [p.uri for p in (await second.retrieve("walrus")).passages] == ["second.md"]
    finally:
        first.close()
        second.drop()
        second.close()


def test_write_lock_excludes_other_writers(pg_dsn: str, index_name: str, backend: PgVectorBackend) -> None:
    other = PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=index_name)
    neighbour = PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=fresh_index_name())
    try:
        with backend.write_lock():
            with backend.write_lock():  # re-entrant within one object
                pass
            with pytest.raises(IndexLockedError, match="another sync"), other.write_lock():
                pass
            with neighbour.write_lock():  # another index is not blocked
                pass
        with other.write_lock():  # released
            pass
    finally:
        other.close()
        neighbour.drop()
        neighbour.close()


# -- settings and failures ----------------------------------------------------------------


def test_from_settings_needs_a_dsn(embedder: CountingEmbedder) -> None:
    with pytest.raises(ConfigError, match="LORE_PG_DSN"):
        from_settings(load_settings(backend="pgvector"), embedder)


def test_unreachable_server_is_backend_unavailable(embedder: CountingEmbedder) -> None:
    dsn = f"postgresql://lore:not-a-password@127.0.0.1:{free_port()}/lore"
    with pytest.raises(BackendUnavailableError) as caught:
        PgVectorBackend(dsn, embedder, connect_timeout=2)
    assert "not-a-password" not in str(caught.value)
    assert "127.0.0.1" in str(caught.value)


async def test_server_going_away_is_an_error_not_an_empty_result(embedder: CountingEmbedder) -> None:
    cluster = start_cluster()
    try:
        store = PgVectorBackend(cluster.dsn, embedder, connect_timeout=1)
        add_document(store, embedder, "a.md", "walrus colony census")
        assert (await store.retrieve("walrus")).passages
    finally:
        cluster.stop()
    try:
        with pytest.raises(BackendUnavailableError):
            await store.retrieve("walrus", mode=SearchMode.BM25)
        with pytest.raises(BackendUnavailableError):
            store.held(DEFAULT_SOURCE)
    finally:
        store.close()


def test_sync_and_search_through_settings(
    tmp_path: Path, pg_dsn: str, index_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lore sync`` / ``lore search`` unchanged: only LORE_BACKEND and LORE_PG_DSN differ."""
    docs = tmp_path / "runbooks"
    docs.mkdir()
    (docs / "etcd.md").write_text("# etcd\n\n## No leader\n\nWhen etcdNoLeader fires, check the peers.\n")
    (docs / "kafka.md").write_text("# Kafka\n\nLag on payments-consumer-group: restart the consumer.\n")
    (tmp_path / "lore.toml").write_text(
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\nvisibility = "all-viewers"\n'
    )
    monkeypatch.setenv("LORE_BACKEND", "pgvector")
    monkeypatch.setenv("LORE_PG_DSN", pg_dsn)
    monkeypatch.setenv("LORE_INDEX_NAME", index_name)
    monkeypatch.setenv("LORE_EMBEDDER", "hashing")
    monkeypatch.setenv("LORE_VAULT__ENABLED", "false")  # only the two runbooks
    settings = load_settings(tmp_path / "lore.toml")
    try:
        report = run_sync(settings)
        assert (report.added, report.failures) == (2, [])
        again = run_sync(settings)
        assert (again.unchanged, again.chunks_embedded) == (2, 0)
        retriever = resolve_retriever(settings)
        assert retriever is not None
        try:
            passages = asyncio.run(retriever.retrieve("payments-consumer-group lag", top_k=1)).passages
            assert [p.uri for p in passages] == ["file://runbooks/kafka.md"]
        finally:
            retriever.close()  # type: ignore[attr-defined]
    finally:
        cleanup = PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=index_name)
        cleanup.drop()
        cleanup.close()


async def test_hnsw_paths_match_exact_search(
    pg_dsn: str, index_name: str, embedder: CountingEmbedder
) -> None:
    """With sequential scans disabled the planner must use the HNSW index, so the
    iterative scan (filtered) and its exact fallback (selective filter) are exercised."""
    dsn = make_conninfo(pg_dsn, options="-c enable_seqscan=off")
    store = PgVectorBackend(dsn, embedder, index_name=index_name)
    try:
        with store.write_lock():
            for i in range(200):
                add_document(
                    store, embedder, f"noise/{i}.md", f"node {i} disk pressure", labels={"team": "noise"}
                )
            for i in range(3):
                add_document(
                    store, embedder, f"target/{i}.md", f"quota review {i}", labels={"team": "target"}
                )
        with psycopg.connect(dsn) as conn:
            conn.execute("SET hnsw.iterative_scan = strict_order")
            plan = conn.execute(
                f"EXPLAIN SELECT id FROM {index_name}_chunks ORDER BY embedding <=> %s::vector LIMIT 5",
                (str([1.0] * embedder.dimension),),
            ).fetchall()
        assert any("_chunks_embedding" in row[0] for row in plan), plan
        # Filtered to 3 of 203 rows: every one must come back, best first.
        filtered = (await store.retrieve(
            "disk pressure", top_k=10, labels={"team": "target"}, mode=SearchMode.VECTOR
        )).passages
        assert sorted(p.uri for p in filtered) == [f"target/{i}.md" for i in range(3)]
        # Unfiltered: the same top 5 as an exact cosine ranking computed here.
        query = embedder.embed_queries(["node 7 disk pressure"])[0]
        passages = (await store.retrieve("node 7 disk pressure", top_k=5, mode=SearchMode.VECTOR)).passages
        assert passages[0].uri == "noise/7.md"
        expected = sorted(
            (float(embedder.embed_documents([p.text])[0] @ query) for p in passages), reverse=True
        )
        assert [round(p.score, 5) for p in passages] == [round(s, 5) for s in expected]
    finally:
        store.drop()
        store.close()


async def test_search_with_another_embedder_is_refused(
    backend: PgVectorBackend, pg_dsn: str, index_name: str, embedder: CountingEmbedder
) -> None:
    add_document(backend, embedder, "a.md", "walrus colony census")
    other = PgVectorBackend(pg_dsn, CountingEmbedder(dimension=32), index_name=index_name)
    try:
        with pytest.raises(EmbedderMismatchError, match="lore reembed"):
            await other.retrieve("walrus", mode=SearchMode.HYBRID)
        assert [p.uri for p in (await other.retrieve("walrus", mode=SearchMode.BM25)).passages] == ["a.md"]
    finally:
        other.close()


async def test_retriever_opened_before_the_first_sync_sees_it(
    backend: PgVectorBackend, pg_dsn: str, index_name: str, embedder: CountingEmbedder
) -> None:
    writer = PgVectorBackend(pg_dsn, embedder, index_name=index_name)
    try:
        add_document(writer, embedder, "a.md", "walrus colony census")
    finally:
        writer.close()
    passages = (await backend.retrieve("walrus colony", mode=SearchMode.VECTOR)).passages
    assert [p.uri for p in passages] == ["a.md"]


def test_a_traced_search_is_one_span_for_both_channels_and_one_for_the_embedding(
    backend: PgVectorBackend, embedder: CountingEmbedder
) -> None:
    """Both channels go to PostgreSQL in one pipelined round trip: one span names both
    (lore.tracing; recorded here by the OpenTelemetry SDK's in-memory exporter)."""
    require_extra("opentelemetry.sdk.trace", "otel")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lore.otel import install_provider

    add_document(backend, embedder, "a.md", "etcd lost its quorum after a disk filled up")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    uninstall = install_provider(provider)
    try:
        found = asyncio.run(backend.retrieve("etcd quorum", top_k=2))
    finally:
        uninstall()
    assert found.passages
    spans = {span.name: span for span in exporter.get_finished_spans()}
    channels = spans["lore.channel bm25+vector"]
    assert dict(channels.attributes or {})["lore.engine"] == "pgvector"
    assert any(name.startswith("embeddings ") for name in spans)
