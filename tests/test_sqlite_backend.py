"""The SQLite backend: the whole conformance suite, plus what only SQLite has (the
full-text journal and its crash recovery, reindex, the write lock, WAL reads during a
write, the embedder record, migrations)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend, from_settings
from lore.backends.sqlite.schema import SCHEMA_VERSION
from lore.config import load_settings
from lore.embedders.hashing import HashingEmbedder
from lore.errors import (
    EmbedderMismatchError,
    IndexingError,
    IndexLockedError,
    QueryError,
    UnsupportedModeError,
)
from lore.models import Chunk, Document, SearchMode
from lore.protocols import Vectors
from lore.testing import add_document, embed_chunks, make_document
from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder


class TestSqliteConformance(BackendConformance):
    @pytest.fixture
    def store(self, tmp_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
        backend = SqliteBackend(tmp_path / "lore.db", embedder)
        yield backend
        backend.close()


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "index" / "lore.db"


@pytest.fixture
def backend(db_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
    opened = SqliteBackend(db_path, embedder)
    yield opened
    opened.close()


def _raw(db_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(db_path, isolation_level=None)


def _journal_size(db_path: Path) -> int:
    with _raw(db_path) as conn:
        size: int = conn.execute("SELECT COUNT(*) FROM fulltext_journal").fetchone()[0]
    return size


def _run_child(db_path: Path, body: str) -> subprocess.Popen[str]:
    """Another process working on the same index (a sync in another terminal)."""
    script = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        from lore.backends.sqlite import SqliteBackend
        from lore.testing import add_document
        from lore.testing.embedders import CountingEmbedder
        embedder = CountingEmbedder()
        backend = SqliteBackend(Path({str(db_path)!r}), embedder)
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


# -- schema and embedder record ---------------------------------------------------------


def test_schema_version_is_recorded(backend: SqliteBackend, db_path: Path) -> None:
    with _raw(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newer_schema_is_refused(db_path: Path, embedder: CountingEmbedder) -> None:
    SqliteBackend(db_path, embedder).close()
    with _raw(db_path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(IndexingError, match="upgrade lore"):
        SqliteBackend(db_path, embedder)


def test_not_a_database_is_a_clear_error(db_path: Path, embedder: CountingEmbedder) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_text("this is a text file, not an index\n" * 100)
    with pytest.raises(IndexingError, match=str(db_path)):
        SqliteBackend(db_path, embedder)


@pytest.mark.parametrize("other", [CountingEmbedder(32), HashingEmbedder(64)], ids=["dimension", "model"])
async def test_reopen_with_another_embedder(
    db_path: Path, embedder: CountingEmbedder, other: HashingEmbedder
) -> None:
    with SqliteBackend(db_path, embedder) as first:
        add_document(first, embedder, "a.md", "etcd quorum lost")
    with pytest.raises(EmbedderMismatchError, match="lore reembed") as raised:
        SqliteBackend(db_path, other)
    assert embedder.model_id in str(raised.value)
    assert other.model_id in str(raised.value)
    with SqliteBackend(db_path, CountingEmbedder()) as again:
        assert again.stored_embedder() == (embedder.model_id, embedder.dimension)
        assert [p.uri for p in (await again.retrieve("etcd quorum")).passages] == ["a.md"]


# -- the write lock ---------------------------------------------------------------------


def test_second_writer_in_process_is_refused(backend: SqliteBackend, db_path: Path) -> None:
    with SqliteBackend(db_path, CountingEmbedder()) as other, backend.write_lock():
        with pytest.raises(IndexLockedError, match="another lore process is writing"):
            other.write_lock().__enter__()
        with pytest.raises(IndexLockedError):
            add_document(other, CountingEmbedder(), "b.md", "text")
    with SqliteBackend(db_path, CountingEmbedder()) as other, other.write_lock():
        add_document(other, CountingEmbedder(), "b.md", "text")


def test_second_writer_process_is_refused(backend: SqliteBackend, db_path: Path) -> None:
    child = _run_child(
        db_path,
        """
        with backend.write_lock():
            print("locked", flush=True)
            sys.stdin.readline()
        """,
    )
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(IndexLockedError, match=str(db_path)):
            backend.upsert(*_document_and_vectors("a.md", "text"))
        child.stdin.write("done\n")
        child.stdin.flush()
        assert child.wait() == 0
    finally:
        child.kill()
        child.wait()
    backend.upsert(*_document_and_vectors("a.md", "text"))


def _document_and_vectors(uri: str, text: str) -> tuple[Document, list[Chunk], Vectors]:
    document, chunks = make_document(uri, text)
    return document, chunks, embed_chunks(CountingEmbedder(), chunks)


# -- WAL: searches while a sync writes ---------------------------------------------------


async def test_search_runs_while_another_connection_writes(
    backend: SqliteBackend, embedder: CountingEmbedder, db_path: Path
) -> None:
    add_document(backend, embedder, "a.md", "kafka consumer lag runbook")
    writer = _raw(db_path)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("DELETE FROM chunks")
        for mode in backend.modes:
            passages = (await backend.retrieve("kafka consumer lag", mode=mode)).passages
            assert [p.uri for p in passages] == ["a.md"]
    finally:
        writer.execute("ROLLBACK")
        writer.close()


async def test_other_instances_see_committed_writes(
    backend: SqliteBackend, embedder: CountingEmbedder, db_path: Path
) -> None:
    add_document(backend, embedder, "a.md", "redis eviction storm")
    with SqliteBackend(db_path, CountingEmbedder()) as reader:
        assert [
            p.uri for p in (await reader.retrieve("redis eviction", mode=SearchMode.VECTOR)).passages
        ] == ["a.md"]
        add_document(backend, embedder, "b.md", "redis eviction storm again")
        for mode in reader.modes:
            assert {p.uri for p in (await reader.retrieve("redis eviction storm", mode=mode)).passages} == {
                "a.md",
                "b.md",
            }


async def test_fulltext_is_batched_inside_a_write_lock(
    backend: SqliteBackend, embedder: CountingEmbedder, db_path: Path
) -> None:
    """Inside a sync the BM25 index is updated in batches: another process sees new
    chunks by vector at once and by BM25 when the lock is released; the syncing
    process itself sees them at once."""
    with SqliteBackend(db_path, CountingEmbedder()) as reader:
        with backend.write_lock():
            add_document(backend, embedder, "a.md", "postgres replication slot bloat")
            assert _journal_size(db_path) > 0
            assert (await reader.retrieve("replication slot", mode=SearchMode.BM25)).passages == []
            assert [
                p.uri for p in (await reader.retrieve("replication slot", mode=SearchMode.VECTOR)).passages
            ] == ["a.md"]
            assert [
                p.uri for p in (await backend.retrieve("replication slot", mode=SearchMode.BM25)).passages
            ] == ["a.md"]
        assert _journal_size(db_path) == 0
        assert [
            p.uri for p in (await reader.retrieve("replication slot", mode=SearchMode.BM25)).passages
        ] == ["a.md"]


# -- crash consistency -------------------------------------------------------------------


async def test_crash_before_fulltext_commit_is_replayed_on_open(
    db_path: Path, embedder: CountingEmbedder
) -> None:
    child = _run_child(
        db_path,
        """
        with backend.write_lock():
            add_document(backend, embedder, "a.md", "certificate expired on the ingress")
            add_document(backend, embedder, "b.md", "dns forwarder timeout")
            print("written", flush=True)
            os._exit(9)  # a crash: no flush, no unlock, no close
        """,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "written"
    assert child.wait() == 9
    assert _journal_size(db_path) > 0
    with SqliteBackend(db_path, embedder) as reopened:
        assert _journal_size(db_path) == 0
        passages = (await reopened.retrieve("certificate expired ingress", mode=SearchMode.BM25)).passages
        assert [p.uri for p in passages] == ["a.md"]


async def test_journal_replay_is_idempotent(db_path: Path, embedder: CountingEmbedder) -> None:
    """A crash after tantivy committed but before the journal was cleared replays
    operations tantivy already has; no chunk may then appear twice."""
    with SqliteBackend(db_path, embedder) as first:
        add_document(
            first, embedder, "a.md", sections=[("x", "vault seal status"), ("y", "vault unseal keys")]
        )
    with _raw(db_path) as conn:
        conn.execute("INSERT INTO fulltext_journal (op, chunk) SELECT 'add', id FROM chunks")
    with SqliteBackend(db_path, embedder) as reopened:
        passages = (await reopened.retrieve("vault seal unseal", top_k=10, mode=SearchMode.BM25)).passages
        assert sorted(p.section for p in passages) == ["x", "y"]


async def test_hits_missing_from_sqlite_are_dropped(
    backend: SqliteBackend, embedder: CountingEmbedder, db_path: Path
) -> None:
    add_document(backend, embedder, "keep.md", "disk latency on the database volume")
    add_document(backend, embedder, "gone.md", "disk latency on the cache volume")
    await backend.retrieve("disk latency", mode=SearchMode.VECTOR)  # caches the matrix
    with _raw(db_path) as conn:  # removed behind tantivy's and the cache's back
        conn.execute("DELETE FROM chunks WHERE uri = 'gone.md'")
    for mode in backend.modes:
        assert [p.uri for p in (await backend.retrieve("disk latency volume", mode=mode)).passages] == [
            "keep.md"
        ]


# -- reindex -----------------------------------------------------------------------------


async def test_missing_fulltext_directory_is_rebuilt_on_open(
    db_path: Path, embedder: CountingEmbedder
) -> None:
    with SqliteBackend(db_path, embedder) as first:
        add_document(first, embedder, "a.md", "ingress controller 502 errors")
    shutil.rmtree(db_path.with_name("lore.db.tantivy"))
    with SqliteBackend(db_path, embedder) as reopened:
        assert [p.uri for p in (await reopened.retrieve("ingress 502", mode=SearchMode.BM25)).passages] == [
            "a.md"
        ]


@pytest.mark.parametrize(
    ("name", "content"),
    [("lore-fulltext.json", '{"version": 0}'), ("meta.json", "not json")],
    ids=["layout", "damaged"],
)
async def test_outdated_or_damaged_fulltext_is_rebuilt(
    db_path: Path, embedder: CountingEmbedder, name: str, content: str
) -> None:
    with SqliteBackend(db_path, embedder) as first:
        add_document(first, embedder, "a.md", "ingress controller 502 errors")
    (db_path.with_name("lore.db.tantivy") / name).write_text(content)
    with SqliteBackend(db_path, embedder) as reopened:
        assert [p.uri for p in (await reopened.retrieve("ingress 502", mode=SearchMode.BM25)).passages] == [
            "a.md"
        ]


async def test_rebuild_fulltext(backend: SqliteBackend, embedder: CountingEmbedder) -> None:
    with backend.write_lock():
        add_document(
            backend, embedder, "a.md", sections=[("1", "helm rollback steps"), ("2", "helm history")]
        )
        add_document(backend, embedder, "b.md", "terraform state lock")
    assert backend.rebuild_fulltext() == 3
    assert backend.rebuild_fulltext() == 3
    passages = (await backend.retrieve("helm rollback history", top_k=10, mode=SearchMode.BM25)).passages
    assert sorted(p.section for p in passages) == ["1", "2"]


def test_reindex_command(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import lore.cli.index_cmd  # noqa: F401  (registers the command)
    from lore.cli.app import app

    config = tmp_path / "lore.toml"
    config.write_text('backend = "sqlite"\ndb_path = "data/lore.db"\nembedder = "hashing"\n')
    embedder = HashingEmbedder()
    with from_settings(load_settings(config), embedder) as backend:
        add_document(backend, embedder, "a.md", "rotate the signing key")
    shutil.rmtree(tmp_path / "data" / "lore.db.tantivy")  # lost; the next open would also rebuild it
    result = CliRunner().invoke(app, ["--config", str(config), "reindex"])
    assert result.exit_code == 0, result.output
    assert "1 chunks" in result.output
    with from_settings(load_settings(config), embedder) as backend:
        assert backend.path == (tmp_path / "data" / "lore.db")


# -- search details --------------------------------------------------------------------


async def test_given_query_vector_skips_embedding(backend: SqliteBackend, embedder: CountingEmbedder) -> None:
    add_document(backend, embedder, "a.md", "node not ready kubelet")
    vector = embedder.embed_queries(["kubelet not ready"])[0]
    embedder.reset()
    passages = backend.search("kubelet not ready", mode=SearchMode.HYBRID, query_vector=vector)
    assert [p.uri for p in passages] == ["a.md"]
    assert embedder.query_calls == 0
    with pytest.raises(QueryError, match="shape"):
        backend.search("kubelet", mode=SearchMode.VECTOR, query_vector=vector[:10])


def test_mode_names_and_bad_arguments(backend: SqliteBackend, embedder: CountingEmbedder) -> None:
    add_document(backend, embedder, "a.md", "node not ready kubelet")
    assert [p.uri for p in backend.search("kubelet", mode="bm25")] == ["a.md"]
    with pytest.raises(UnsupportedModeError, match="hybrid, bm25, vector"):
        backend.search("kubelet", mode="fuzzy")
    with pytest.raises(QueryError, match="label"):
        backend.search("kubelet", labels={"team": ""})
    with pytest.raises(QueryError, match="top_k"):
        backend.search("kubelet", top_k=10_000)
    with pytest.raises(QueryError, match="characters"):
        backend.search("x" * 60_000)


async def test_score_fusion(db_path: Path, embedder: CountingEmbedder) -> None:
    with SqliteBackend(db_path, embedder, fusion="score") as scored:
        with scored.write_lock():
            add_document(scored, embedder, "a.md", "memory leak in the payments worker")
            add_document(scored, embedder, "b.md", "disk full on the build agent")
        passages = (await scored.retrieve("payments worker memory leak")).passages
        assert passages[0].uri == "a.md"
        assert set(passages[0].channel_ranks) == {"bm25", "vector"}


def test_export_round_trip(backend: SqliteBackend, embedder: CountingEmbedder) -> None:
    _, chunks = add_document(backend, embedder, "a.md", sections=[("s1", "one"), ("s2", "two")], title="T")
    exported = list(backend.export())
    assert len(exported) == 1
    document, got_chunks, vectors = exported[0]
    assert (document.uri, document.title) == ("a.md", "T")
    assert got_chunks == chunks
    assert vectors.shape == (2, embedder.dimension)


def test_reopening_without_changes_leaves_the_file_alone(db_path: Path, embedder: CountingEmbedder) -> None:
    with SqliteBackend(db_path, embedder) as first:
        add_document(first, embedder, "a.md", "some text")
    before = db_path.read_bytes()
    with SqliteBackend(db_path, embedder) as again, again.write_lock():
        again.check_embedder(embedder.model_id, embedder.dimension)
        assert set(again.held("test-source")) == {"a.md"}
        assert again.cached_vectors(["nothing"]) == {}
    assert db_path.read_bytes() == before


def test_fulltext_holds_exactly_the_stored_chunks(
    backend: SqliteBackend, embedder: CountingEmbedder, db_path: Path
) -> None:
    """Replaced and deleted chunks leave tantivy too (query-time filtering would hide
    stale entries, but they would pile up and crowd out candidates)."""
    import tantivy

    for revision in ("r1", "r2", "r3"):
        add_document(
            backend, embedder, "a.md", sections=[("1", f"one {revision}"), ("2", "two")], revision=revision
        )
    add_document(backend, embedder, "b.md", "bee")
    backend.delete_by_uri("b.md")
    index = tantivy.Index.open(str(db_path.with_name("lore.db.tantivy")))
    index.reload()
    assert index.searcher().num_docs == 2


async def test_vector_cache_follows_appends_and_deletes(
    backend: SqliteBackend, embedder: CountingEmbedder, db_path: Path
) -> None:
    """Another process's cache appends new rows (with their label postings), never
    returns deleted rows, and reloads once deletions pile up."""

    def add(uris: set[str], round_: str) -> None:
        with backend.write_lock():
            for uri in sorted(uris):
                add_document(backend, embedder, uri, f"queue backlog {uri}", labels={"round": round_})

    async def found(labels: dict[str, str] | None = None) -> set[str]:
        passages = (
            await reader.retrieve("queue backlog", top_k=50, labels=labels, mode=SearchMode.VECTOR)
        ).passages
        return {p.uri for p in passages}

    first, second, third = ({f"r{n}/{i}.md" for i in range(6)} for n in range(3))
    with SqliteBackend(db_path, CountingEmbedder()) as reader:
        add(first, "1")
        assert await found() == first
        add(second, "2")  # appended to the cached matrix
        assert await found() == first | second
        assert await found({"round": "2", "source": "test-source"}) == second
        backend.delete_by_uri("r0/0.md")  # one dead row: kept, but never returned
        assert await found() == (first | second) - {"r0/0.md"}
        add(third, "3")
        for uri in first | second:
            backend.delete_by_uri(uri)  # most rows dead: reloaded
        assert await found() == third
        assert await found({"round": "3"}) == third
        assert await found({"round": "1"}) == set()


def test_reindex_without_an_index_is_a_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "lore.toml"
    config.write_text('backend = "sqlite"\ndb_path = "missing.db"\nembedder = "hashing"\n')
    result = subprocess.run(
        [sys.executable, "-c", "from lore.cli import main; main()", "--config", str(config), "reindex"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "run `lore sync` first" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "missing.db").exists()
