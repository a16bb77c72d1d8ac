"""pgvector's BM25 channel (``lore.backends.pgvector.bm25``) against a real server: the same
scores and order as the SQLite backend's tantivy channel on one corpus, term statistics
kept in step by every write, the bulk first load, and the migration of an index built with
the ``ts_rank`` layout (schema 3)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from optional_extras import require_extra

from .pg_layouts import to_schema_3

require_extra("psycopg", "pgvector")
require_extra("psycopg_pool", "pgvector")
require_extra("pgvector", "pgvector")

import psycopg

from lore.access import AccessFilter
from lore.backends.pgvector import PgVectorBackend
from lore.backends.pgvector import schema as pg_schema
from lore.backends.sqlite import SqliteBackend
from lore.models import SearchMode
from lore.protocols import KnowledgeIndex
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder

#: Short fields: tantivy stores lengths up to 40 exactly (longer ones lossily), so the two
#: backends' scores agree to float precision here.
CORPUS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "k8s/node.md",
        "KubeNodeNotReady",
        [
            ("Meaning", "A node has not been ready for 15 minutes; kubelet stopped posting status."),
            ("Mitigation", "Cordon the node, drain it, restart the kubelet service."),
        ],
    ),
    (
        "k8s/crash.md",
        "Pod in CrashLoopBackOff",
        [
            ("Diagnosis", "kubectl describe pod shows CrashLoopBackOff and the last exit code."),
            ("Mitigation", "Roll back the deployment when the crash began after a release."),
        ],
    ),
    (
        "etcd/leader.md",
        "etcdNoLeader",
        [
            ("Meaning", "The etcd cluster has no leader: members lost quorum."),
            ("Diagnosis", "Check peer connectivity on port 2380 and the disk latency of each member."),
        ],
    ),
    (
        "kafka/lag.md",
        "Consumer lag on payments-consumer-group",
        [
            ("Impact", "Payments are delayed while payments-consumer-group lags behind."),
            ("Mitigation", "Scale the consumer deployment; check the broker for slow partitions."),
        ],
    ),
    (
        "pg/replica.md",
        "PostgreSQL replica lag",
        [
            ("Diagnosis", "Replication lag grows when the replica disk is slow or the WAL volume spikes."),
            ("Mitigation", "Check the network between primary and replica; restart replication."),
        ],
    ),
    (
        "api/errors.md",
        "Gateway errors",
        [
            ("Meaning", "Checkout fails with ERR_1234 when the vault at 10.0.0.1 times out."),
            ("Diagnosis", "kube-apiserver logs show timeouts; the node is not ready either."),
        ],
    ),
]

QUERIES = [
    # identifiers, whole and split
    "KubeNodeNotReady",
    "node not ready",
    "etcdNoLeader",
    "etcd no leader",
    "payments-consumer-group",
    "ERR_1234",
    "kube-apiserver timeouts",
    "10.0.0.1",
    "CrashLoopBackOff",
    # prose
    "replica lag after slow disk",
    "how do I restart the kubelet on a node",
    "roll back a release deployment",
    "consumer is lagging behind on payments",
]


def _load(index: KnowledgeIndex, embedder: CountingEmbedder) -> None:
    for uri, title, sections in CORPUS:
        add_document(index, embedder, uri, title=title, sections=sections)


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def pg(pg_dsn: str, embedder: CountingEmbedder) -> Iterator[PgVectorBackend]:
    store = PgVectorBackend(pg_dsn, embedder, index_name=f"t_{uuid.uuid4().hex[:16]}")
    yield store
    store.drop()
    store.close()


@pytest.fixture
def sqlite(tmp_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
    store = SqliteBackend(tmp_path / "lore.db", embedder)
    yield store
    store.close()


async def _ranking(index: PgVectorBackend | SqliteBackend, query: str) -> list[tuple[str, float]]:
    found = await index.retrieve(query, top_k=20, mode=SearchMode.BM25)
    return [(f"{p.uri}#{p.section}", p.score) for p in found]


def _assert_same(got: list[tuple[str, float]], expected: list[tuple[str, float]], query: str) -> None:
    assert [name for name, _ in got] == [name for name, _ in expected], query
    assert [score for _, score in got] == pytest.approx([score for _, score in expected], rel=1e-4), query


@pytest.mark.parametrize("boosted", [False, True], ids=["default", "boosted"])
async def test_scores_and_order_match_the_sqlite_channel(
    pg_dsn: str, tmp_path: Path, embedder: CountingEmbedder, boosted: bool
) -> None:
    from lore.backends.pgvector import bm25

    boosts = {"title_boost": 2.0, "section_boost": 1.5, "identifier_boost": 3.0} if boosted else {}
    # path_boost 0: SQLite's path field (folder and file-name words) has no pgvector
    # column yet; the path's identifiers reach both backends' ident field alike.
    sqlite = SqliteBackend(tmp_path / "lore.db", embedder, path_boost=0.0, **boosts)
    pg = PgVectorBackend(
        pg_dsn,
        embedder,
        index_name=f"t_{uuid.uuid4().hex[:16]}",
        boosts=bm25.Boosts(
            title=boosts.get("title_boost", 1.0),
            section=boosts.get("section_boost", 1.0),
            identifier=boosts.get("identifier_boost", 1.0),
        ),
    )
    try:
        _load(sqlite, embedder)
        _load(pg, embedder)
        for query in QUERIES:
            expected = await _ranking(sqlite, query)
            assert expected, query
            _assert_same(await _ranking(pg, query), expected, query)
    finally:
        sqlite.close()
        pg.drop()
        pg.close()


def _statistics(pg_dsn: str, index: str) -> tuple[tuple[int, ...], tuple[int, ...], list[tuple[int, ...]]]:
    """The maintained statistics, the same recomputed from the chunks and postings, and
    every term row whose frequencies differ from a recount."""
    with psycopg.connect(pg_dsn) as conn:
        kept = conn.execute(
            f"SELECT chunks, len_title, len_section, len_body, len_ident FROM {index}_bm25_stats"
        ).fetchone()
        counted = conn.execute(
            "SELECT count(*), coalesce(sum(len_title), 0), coalesce(sum(len_section), 0),"
            f" coalesce(sum(len_body), 0), coalesce(sum(len_ident), 0) FROM {index}_chunks"
        ).fetchone()
        wrong = conn.execute(
            f"SELECT t.term, t.df_title, t.df_section, t.df_body, t.df_ident FROM {index}_terms t"
            " LEFT JOIN (SELECT term, count(*) FILTER (WHERE tf_title > 0) AS a,"
            " count(*) FILTER (WHERE tf_section > 0) AS b, count(*) FILTER (WHERE tf_body > 0) AS c,"
            f" count(*) FILTER (WHERE tf_ident > 0) AS d FROM {index}_postings GROUP BY term) p"
            " ON p.term = t.term"
            " WHERE (t.df_title, t.df_section, t.df_body, t.df_ident)"
            " IS DISTINCT FROM (coalesce(p.a, 0), coalesce(p.b, 0), coalesce(p.c, 0), coalesce(p.d, 0))"
        ).fetchall()
    assert kept is not None
    assert counted is not None
    return tuple(kept), tuple(counted), [tuple(row) for row in wrong]


async def test_statistics_follow_every_write(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    _load(pg, embedder)
    # A changed version (one chunk kept, one new), a shrunk one, a deletion.
    add_document(
        pg,
        embedder,
        "k8s/node.md",
        title="KubeNodeNotReady",
        revision="rev-2",
        sections=[
            ("Meaning", "A node has not been ready for 15 minutes; kubelet stopped posting status."),
            ("Mitigation", "Replace the node from the autoscaling group."),
        ],
    )
    add_document(pg, embedder, "etcd/leader.md", "etcd quorum lost", title="etcdNoLeader", revision="rev-2")
    pg.delete_by_uri("kafka/lag.md")
    kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
    assert kept == counted
    assert kept[0] == 9
    assert wrong == []
    found = await pg.retrieve("autoscaling group", mode=SearchMode.BM25)
    assert [p.uri for p in found] == ["k8s/node.md"]
    assert await pg.retrieve("payments", mode=SearchMode.BM25) == []
    assert await pg.retrieve("peer connectivity", mode=SearchMode.BM25) == []


async def test_filters_apply_inside_each_term_scan(pg_dsn: str, embedder: CountingEmbedder) -> None:
    """With one posting read per term, an unfiltered scan would read only the noise: the
    label and access filters must sit inside the scan for the target to be found."""
    pg = PgVectorBackend(pg_dsn, embedder, index_name=f"t_{uuid.uuid4().hex[:16]}", bm25_candidates=1)
    try:
        for i in range(30):
            add_document(pg, embedder, f"noise/{i}.md", "disk pressure disk pressure", labels={"team": "a"})
        add_document(
            pg,
            embedder,
            "target.md",
            "disk pressure on the quota volume",
            labels={"team": "b"},
            access=frozenset({"sre"}),
        )
        found = await pg.retrieve("disk pressure", mode=SearchMode.BM25, labels={"team": "b"})
        assert [p.uri for p in found] == ["target.md"]
        sre, other = AccessFilter(None, frozenset({"sre"})), AccessFilter(None, frozenset({"dev"}))
        found = await pg.retrieve("quota disk", mode=SearchMode.BM25, access=sre, labels={"team": "b"})
        assert [p.uri for p in found] == ["target.md"]
        assert await pg.retrieve("quota", mode=SearchMode.BM25, access=other) == []
    finally:
        pg.drop()
        pg.close()


async def test_first_load_under_the_write_lock(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    """The bulk path: many documents in one lock, searchable as they land (the HNSW index
    follows at release), statistics exact at the end."""
    with pg.write_lock():
        pg.check_embedder(embedder.model_id, embedder.dimension)
        for i in range(120):
            add_document(
                pg,
                embedder,
                f"bulk/{i}.md",
                sections=[
                    ("Meaning", f"alert{i} fired on node-{i % 7}"),
                    ("Mitigation", f"restart worker {i}"),
                ],
            )
        found = await pg.retrieve("alert42", mode=SearchMode.HYBRID)
        assert found[0].uri == "bulk/42.md"
    kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
    assert kept == counted
    assert kept[0] == 240
    assert wrong == []
    found = await pg.retrieve("node-3 alert", mode=SearchMode.BM25, top_k=50)
    assert {p.uri for p in found} >= {f"bulk/{i}.md" for i in range(3, 120, 7)}


async def test_an_index_of_schema_3_gets_its_postings_from_the_stored_chunks(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    _load(pg, embedder)
    before = {query: await _ranking(pg, query) for query in QUERIES}
    to_schema_3(pg_dsn, pg.index_name)
    reopened = PgVectorBackend(pg_dsn, embedder, index_name=pg.index_name)
    try:
        assert reopened.schema_version() == pg_schema.LATEST_VERSION
        for query in QUERIES:
            _assert_same(await _ranking(reopened, query), before[query], query)
        kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
        assert kept == counted
        assert wrong == []
        with psycopg.connect(pg_dsn) as conn:
            columns = {
                row[0]
                for row in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0",
                    (f"{pg.index_name}_chunks",),
                ).fetchall()
            }
        assert not {"tsv", "idents"} & columns
        # Writes after the migration keep the statistics in step.
        add_document(reopened, embedder, "new.md", "etcdNoLeader again", title="etcd")
        assert _statistics(pg_dsn, pg.index_name)[2] == []
    finally:
        reopened.close()


async def test_reindex_and_a_changed_analysis_rebuild_the_postings(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    from lore.backends.pgvector import bm25

    _load(pg, embedder)
    before = {query: await _ranking(pg, query) for query in QUERIES}
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"DELETE FROM {pg.index_name}_postings WHERE term = 'etcdnoleader'")
    assert await pg.retrieve("etcdNoLeader", mode=SearchMode.BM25) != []  # still the word parts
    assert pg.supports_reindex
    assert pg.rebuild_fulltext() == 12
    for query in QUERIES:
        _assert_same(await _ranking(pg, query), before[query], query)
    # Postings made by other analyzers (another FULLTEXT_VERSION) are rebuilt on opening.
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"TRUNCATE {pg.index_name}_postings")
        conn.execute(f"UPDATE {pg.index_name}_state SET value = 'old' WHERE key = %s", (bm25.ANALYSIS_KEY,))
    reopened = PgVectorBackend(pg_dsn, embedder, index_name=pg.index_name)
    try:
        for query in QUERIES:
            _assert_same(await _ranking(reopened, query), before[query], query)
        assert _statistics(pg_dsn, pg.index_name)[2] == []
    finally:
        reopened.close()
