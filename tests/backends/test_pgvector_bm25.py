"""pgvector's BM25 channel (``lore.backends.pgvector.bm25``) against a real server: the same
scores and order as the SQLite backend's tantivy channel on one corpus, term statistics
kept in step by every write, the bulk first load, and the migration of an index built with
the ``ts_rank`` layout (schema 3)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from optional_extras import require_extra

from .pg_layouts import to_schema_3, to_schema_5, to_schema_7

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
from lore.testing import DEFAULT_SOURCE, add_document
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
    # a pasted alert rule: its placeholders are not searched for on either backend
    "Replica lag on {{ $labels.instance }} is {{ $value | humanize }}s behind the primary",
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
    found = (await index.retrieve(query, top_k=20, mode=SearchMode.BM25)).passages
    return [(f"{p.uri}#{p.section}", p.score) for p in found]


def _assert_same(got: list[tuple[str, float]], expected: list[tuple[str, float]], query: str) -> None:
    assert [name for name, _ in got] == [name for name, _ in expected], query
    assert [score for _, score in got] == pytest.approx([score for _, score in expected], rel=1e-4), query


@pytest.mark.parametrize("boosted", [False, True], ids=["default", "boosted"])
async def test_scores_and_order_match_the_sqlite_channel(
    pg_dsn: str, tmp_path: Path, embedder: CountingEmbedder, boosted: bool
) -> None:
    from lore.backends.pgvector import bm25

    boosts: dict[str, Any] = (
        {"title_boost": 2.0, "identifier_boost": 3.0} if boosted else {}
    )
    # The path field (folder and file-name words) takes the title's boost on both.
    sqlite = SqliteBackend(tmp_path / "lore.db", embedder, **boosts)
    pg = PgVectorBackend(
        pg_dsn,
        embedder,
        index_name=f"t_{uuid.uuid4().hex[:16]}",
        boosts=bm25.Boosts(
            title=boosts.get("title_boost", 1.0),
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


def _each(template: str) -> str:
    from lore.backends.pgvector.bm25 import FIELDS

    return ", ".join(template.format(f=name) for name in FIELDS)


def _statistics(pg_dsn: str, index: str) -> tuple[tuple[int, ...], tuple[int, ...], list[tuple[int, ...]]]:
    """The maintained statistics, the same recomputed from the chunks and postings, and
    every term row whose frequencies differ from a recount."""
    with psycopg.connect(pg_dsn) as conn:
        kept = conn.execute(
            f"SELECT chunks, {_each('len_{f}')} FROM {index}_bm25_stats"
        ).fetchone()
        counted = conn.execute(
            f"SELECT count(*), {_each('coalesce(sum(len_{f}), 0)')} FROM {index}_chunks"
        ).fetchone()
        wrong = conn.execute(
            f"SELECT t.term, {_each('t.df_{f}')} FROM {index}_terms t"
            f" LEFT JOIN (SELECT term, {_each('count(*) FILTER (WHERE tf_{f} > 0) AS {f}')}"
            f" FROM {index}_postings GROUP BY term) p ON p.term = t.term"
            f" WHERE ({_each('t.df_{f}')}) IS DISTINCT FROM ({_each('coalesce(p.{f}, 0)')})"
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
    found = (await pg.retrieve("autoscaling group", mode=SearchMode.BM25)).passages
    assert [p.uri for p in found] == ["k8s/node.md"]
    assert (await pg.retrieve("payments", mode=SearchMode.BM25)).passages == []
    assert (await pg.retrieve("peer connectivity", mode=SearchMode.BM25)).passages == []


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
        found = (await pg.retrieve("disk pressure", mode=SearchMode.BM25, labels={"team": "b"})).passages
        assert [p.uri for p in found] == ["target.md"]
        sre, other = AccessFilter(None, frozenset({"sre"})), AccessFilter(None, frozenset({"dev"}))
        found = (
            await pg.retrieve("quota disk", mode=SearchMode.BM25, access=sre, labels={"team": "b"})
        ).passages
        assert [p.uri for p in found] == ["target.md"]
        assert (await pg.retrieve("quota", mode=SearchMode.BM25, access=other)).passages == []
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
        found = (await pg.retrieve("alert42", mode=SearchMode.HYBRID)).passages
        assert found[0].uri == "bulk/42.md"
    kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
    assert kept == counted
    assert kept[0] == 240
    assert wrong == []
    found = (await pg.retrieve("node-3 alert", mode=SearchMode.BM25, top_k=50)).passages
    assert {p.uri for p in found} >= {f"bulk/{i}.md" for i in range(3, 120, 7)}


async def _migrated(
    pg: PgVectorBackend,
    pg_dsn: str,
    embedder: CountingEmbedder,
    revert: Callable[[str, str], None],
    queries: list[str],
) -> PgVectorBackend:
    """Load the corpus, turn the index back into an older layout (``revert``), reopen it
    (which migrates it), and check that it ranks as the fresh index did, with exact
    statistics. The caller closes the reopened backend."""
    _load(pg, embedder)
    before = {query: await _ranking(pg, query) for query in queries}
    revert(pg_dsn, pg.index_name)
    reopened = PgVectorBackend(pg_dsn, embedder, index_name=pg.index_name)
    try:
        assert reopened.schema_version() == pg_schema.LATEST_VERSION
        for query in queries:
            _assert_same(await _ranking(reopened, query), before[query], query)
        kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
        assert kept == counted
        assert wrong == []
    except BaseException:
        reopened.close()
        raise
    return reopened


async def test_an_index_of_schema_3_gets_its_postings_from_the_stored_chunks(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    reopened = await _migrated(pg, pg_dsn, embedder, to_schema_3, QUERIES)
    try:
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


async def test_an_index_of_schema_5_gets_the_path_field(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    """Postings of schema 5 had no path field: the migration adds it and rebuilds them, so
    the ranking is the fresh index's (which matches SQLite's, with the path's boost)."""
    reopened = await _migrated(pg, pg_dsn, embedder, to_schema_5, [*QUERIES, "kafka", "k8s crash"])
    try:
        assert _statistics(pg_dsn, pg.index_name)[0][3] > 0  # the path field's total length
        assert _term_collations(pg_dsn, pg.index_name) == ["C", "C"]
    finally:
        reopened.close()


async def test_an_index_of_schema_7_gets_the_whole_chunk_field(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    """Schema 7 kept title, section, body, path and ident: migration 8 folds section and
    body into ``content``, keeps title and path for names only, and rebuilds the postings, so
    the ranking is the fresh index's (which matches SQLite's)."""
    reopened = await _migrated(pg, pg_dsn, embedder, to_schema_7, [*QUERIES, "kafka", "k8s crash"])
    try:
        with psycopg.connect(pg_dsn) as conn:
            columns = {
                row[0]
                for row in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                    " AND NOT attisdropped",
                    (f"{pg.index_name}_postings",),
                ).fetchall()
            }
        assert {"tf_content", "len_content"} <= columns
        assert not {"tf_section", "tf_body", "len_section", "len_body"} & columns
    finally:
        reopened.close()


async def test_path_words_rank_like_sqlite_with_the_default_boost(
    pg: PgVectorBackend, sqlite: SqliteBackend, embedder: CountingEmbedder
) -> None:
    """A folder or file-name word found nowhere else in the chunk: only the path field
    holds it as an English word (stemmed), so "crashes" finds k8s/crash.md on both."""
    _load(pg, embedder)
    _load(sqlite, embedder)
    for query in ("crashes", "kafka lag", "errors api"):
        expected = await _ranking(sqlite, query)
        assert expected, query
        _assert_same(await _ranking(pg, query), expected, query)
    assert (await _ranking(pg, "crashes"))[0][0].startswith("k8s/crash.md")


async def test_reindex_and_a_changed_analysis_rebuild_the_postings(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    from lore.backends.pgvector import postings

    _load(pg, embedder)
    before = {query: await _ranking(pg, query) for query in QUERIES}
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"DELETE FROM {pg.index_name}_postings WHERE term = 'etcdnoleader'")
    assert (await pg.retrieve("etcdNoLeader", mode=SearchMode.BM25)).passages != []  # still the word parts
    assert pg.supports_reindex
    assert pg.rebuild_fulltext() == 12
    for query in QUERIES:
        _assert_same(await _ranking(pg, query), before[query], query)
    # Postings made by other analyzers (another FULLTEXT_VERSION) are rebuilt on opening.
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"TRUNCATE {pg.index_name}_postings")
        conn.execute(
            f"UPDATE {pg.index_name}_state SET value = 'old' WHERE key = %s", (postings.ANALYSIS_KEY,)
        )
    reopened = PgVectorBackend(pg_dsn, embedder, index_name=pg.index_name)
    try:
        for query in QUERIES:
            _assert_same(await _ranking(reopened, query), before[query], query)
        assert _statistics(pg_dsn, pg.index_name)[2] == []
    finally:
        reopened.close()


_BOTH = {"impact", "chunk"}


def _postings_indexes(pg_dsn: str, index: str) -> set[str]:
    """Which of the postings' indexes exist (a first load drops both, builds both at its end)."""
    with psycopg.connect(pg_dsn) as conn:
        return {
            name
            for name in _BOTH
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{index}_postings_{name}",)).fetchone()
            == (True,)
        }


def _term_collations(pg_dsn: str, index: str) -> list[str | None]:
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT collation_name FROM information_schema.columns"
            " WHERE table_name = ANY(%s) AND column_name = 'term' ORDER BY table_name",
            ([f"{index}_postings", f"{index}_terms"],),
        ).fetchall()
    return [row[0] for row in rows]


def test_terms_compare_byte_wise(pg: PgVectorBackend, pg_dsn: str) -> None:
    """Migration 7: no locale's strcoll in the sorts and B-tree inserts of the postings."""
    assert _term_collations(pg_dsn, pg.index_name) == ["C", "C"]


async def test_a_bulk_load_is_fail_soft_and_exact(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    """A first load (the postings' indexes dropped, built at release): one document re-upserted
    and one deleted mid-load, and one the server refuses (a label term too long for its
    GIN index) failing alone, its neighbours written."""
    from lore.errors import IndexingError

    with pg.write_lock():
        pg.check_embedder(embedder.model_id, embedder.dimension)
        assert _postings_indexes(pg_dsn, pg.index_name) == set()
        for i in range(60):
            if i == 30:
                huge = random.Random(0).randbytes(4000).hex()  # incompressible
                with pytest.raises(IndexingError):
                    add_document(pg, embedder, "bad.md", "refused disk", labels={"huge": huge})
            add_document(pg, embedder, f"bulk/{i}.md", f"alert{i} fired on node-{i % 7}; restart worker {i}")
        add_document(pg, embedder, "bulk/5.md", "rewritten: zookeeper quorum")
        pg.delete_by_uri("bulk/6.md")
        # Searchable before the index is back, only slower.
        found = (await pg.retrieve("alert42", mode=SearchMode.BM25)).passages
        assert found[0].uri == "bulk/42.md"
    assert _postings_indexes(pg_dsn, pg.index_name) == _BOTH
    kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
    assert kept == counted
    assert kept[0] == 59
    assert wrong == []
    assert [p.uri for p in (await pg.retrieve("zookeeper", mode=SearchMode.BM25)).passages] == ["bulk/5.md"]
    assert (await pg.retrieve("alert5", mode=SearchMode.BM25)).passages == []
    assert (await pg.retrieve("alert6", mode=SearchMode.BM25)).passages == []
    assert (await pg.retrieve("refused", mode=SearchMode.BM25)).passages == []
    assert "bad.md" not in pg.held(DEFAULT_SOURCE)
    # A second load into a non-empty index keeps the postings' indexes.
    with pg.write_lock():
        assert _postings_indexes(pg_dsn, pg.index_name) == _BOTH
        add_document(pg, embedder, "late.md", "late arrival")
    assert _postings_indexes(pg_dsn, pg.index_name) == _BOTH


def test_a_first_load_killed_midway_gets_its_indexes_on_the_next_open(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    from lore.backends.pgvector import postings

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as a crashed first load leaves it
        postings.first_load(conn, pg._tables)
    assert _postings_indexes(pg_dsn, pg.index_name) == set()
    reopened = PgVectorBackend(pg_dsn, embedder, index_name=pg.index_name)
    reopened.close()
    assert _postings_indexes(pg_dsn, pg.index_name) == _BOTH
