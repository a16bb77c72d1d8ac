"""Batched writes of the pgvector backend (``BulkWriting.upsert_many``, ``bulk.py``) and
sync through them: the guarantees of one write hold for every document of a batch, on a
real PostgreSQL server."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from optional_extras import require_extra

require_extra("psycopg", "pgvector")

from lore.backends.pgvector import PgVectorBackend
from lore.chunking import Chunker
from lore.errors import IndexingError
from lore.models import Chunk, Document, SearchMode, SourceItem, Visibility, sha256_hex
from lore.protocols import BulkWriting, Vectors
from lore.sync import sync_sources
from lore.testing import DEFAULT_SOURCE, make_document
from lore.testing.embedders import CountingEmbedder

from . import test_pgvector_bm25 as bm25_tests

#: The BM25 tests' fixtures (a counting embedder, a fresh index per test on the session's
#: server) and their recount of the statistics.
embedder = bm25_tests.embedder
pg = bm25_tests.pg
_statistics = bm25_tests._statistics


def _huge() -> str:
    """A label term too long for the GIN index's rows: the server refuses the document."""
    return random.Random(0).randbytes(4000).hex()  # incompressible


def _item(
    embedder: CountingEmbedder, uri: str, text: str, **labels: str
) -> tuple[Document, list[Chunk], Vectors]:
    document, chunks = make_document(uri, text, labels=labels or None)
    vectors = embedder.embed_documents([chunk.text for chunk in chunks])
    return document, chunks, vectors


async def _uris(pg: PgVectorBackend, query: str) -> list[str]:
    return [passage.uri for passage in (await pg.retrieve(query, mode=SearchMode.BM25)).passages]


async def test_a_refused_document_fails_alone_and_its_batch_is_written(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    assert isinstance(pg, BulkWriting)
    pg.check_embedder(embedder.model_id, embedder.dimension)
    items = [_item(embedder, f"b/{i}.md", f"alert{i} fired on node-{i % 3}") for i in range(12)]
    items.insert(5, _item(embedder, "bad.md", "refused disk", huge=_huge()))
    outcomes = pg.upsert_many(items)
    assert [i for i, error in enumerate(outcomes) if error is not None] == [5]
    assert isinstance(outcomes[5], IndexingError)
    assert set(pg.held(DEFAULT_SOURCE)) == {f"b/{i}.md" for i in range(12)}
    assert await _uris(pg, "alert7") == ["b/7.md"]
    assert await _uris(pg, "refused") == []
    kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
    assert kept == counted
    assert wrong == []


async def test_a_batch_replaces_old_versions_and_writes_a_uri_twice_in_order(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    pg.check_embedder(embedder.model_id, embedder.dimension)
    first = [_item(embedder, f"d/{i}.md", f"first version {i} zookeeper") for i in range(6)]
    assert pg.upsert_many(first) == [None] * 6
    outcomes = pg.upsert_many(
        [
            _item(embedder, "d/1.md", "second version kafka"),
            _item(embedder, "d/2.md", "second version kafka"),
            _item(embedder, "d/2.md", "third version etcd"),  # the later one wins
        ]
    )
    assert outcomes == [None, None, None]
    assert sorted(await _uris(pg, "zookeeper")) == ["d/0.md", "d/3.md", "d/4.md", "d/5.md"]
    assert await _uris(pg, "kafka") == ["d/1.md"]
    assert await _uris(pg, "etcd") == ["d/2.md"]
    kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
    assert kept == counted
    assert kept[0] == 6
    assert wrong == []


async def test_bad_vectors_fail_their_document_alone(pg: PgVectorBackend, embedder: CountingEmbedder) -> None:
    pg.check_embedder(embedder.model_id, embedder.dimension)
    good = _item(embedder, "good.md", "fine text")
    document, chunks, _ = _item(embedder, "short.md", "vectors missing")
    outcomes = pg.upsert_many([(document, chunks, embedder.embed_documents([])), good])
    assert isinstance(outcomes[0], IndexingError)
    assert outcomes[1] is None
    assert set(pg.held(DEFAULT_SOURCE)) == {"good.md"}


class _Listing:
    """A complete listing of in-memory documents."""

    source_type = "memory"
    incremental = False
    visibility = Visibility.ALL_VIEWERS

    def __init__(self, name: str, documents: list[Document]) -> None:
        self.name = name
        self.items = documents

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        for item in self.items:
            yield item

    def resume_token(self) -> str | None:
        return None


def _document(uri: str, text: str, **labels: str) -> Document:
    return Document(
        uri=uri,
        title=uri,
        text=text,
        revision=sha256_hex(text),
        updated_at=datetime(2026, 10, 1, tzinfo=UTC),
        labels=labels,
    )


async def test_sync_writes_through_batches_and_reports_the_refused_document(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    chunker = Chunker.for_embedder(embedder)
    documents = [_document(f"mem://n/{i}.md", f"# Note {i}\n\nrestart worker{i}") for i in range(40)]
    documents.insert(20, _document("mem://n/bad.md", "# Bad\n\nrefused", huge=_huge()))
    report = await sync_sources([_Listing("notes", documents)], pg, embedder, chunker)
    assert [failure.uri for failure in report.failures] == ["mem://n/bad.md"]
    assert report.failures[0].reason.startswith("writing failed: ")
    assert report.added == 40
    assert len(pg.held("notes")) == 40
    assert await _uris(pg, "worker33") == ["mem://n/33.md"]
    kept, counted, wrong = _statistics(pg_dsn, pg.index_name)
    assert kept == counted
    assert wrong == []
    # A second sync of the same listing writes nothing: idempotent.
    again = await sync_sources([_Listing("notes", documents)], pg, embedder, chunker)
    assert (again.added, again.updated) == (0, 0)


def _statistics_hold(pg_dsn: str, index: str) -> int:
    """The BM25 statistics equal their recount from the stored chunks; the chunk count."""
    kept, counted, wrong = _statistics(pg_dsn, index)
    assert kept == counted
    assert wrong == []
    return int(kept[0])


async def test_calls_handed_over_before_their_outcomes_are_read_are_written_in_order(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    """``submit_many``, as sync calls it: the next group is handed over before the last
    one's outcomes are read; the writes keep the calls' order, and a refused document
    still fails alone."""
    pg.check_embedder(embedder.model_id, embedder.dimension)
    with pg.write_lock():
        first = pg.submit_many([_item(embedder, f"o/{i}.md", f"version one {i} zookeeper") for i in range(5)])
        second = pg.submit_many(
            [
                _item(embedder, "o/1.md", "second version kafka"),
                _item(embedder, "o/bad.md", "refused disk", huge=_huge()),
                _item(embedder, "o/9.md", "new page etcd"),
            ]
        )
        assert first() == [None] * 5
        outcomes = second()
    assert outcomes[0] is None
    assert outcomes[2] is None
    assert isinstance(outcomes[1], IndexingError)
    assert sorted(await _uris(pg, "zookeeper")) == ["o/0.md", "o/2.md", "o/3.md", "o/4.md"]
    assert await _uris(pg, "kafka") == ["o/1.md"]
    assert await _uris(pg, "etcd") == ["o/9.md"]
    assert _statistics_hold(pg_dsn, pg.index_name) == 6


async def test_what_was_handed_over_under_the_lock_is_written_before_its_release(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    pg.check_embedder(embedder.model_id, embedder.dimension)
    with pg.write_lock():
        for number in range(3):  # outcomes never read
            group = [_item(embedder, f"w/{number}-{i}.md", f"page {number} {i} raft") for i in range(4)]
            pg.submit_many(group)
    assert len(pg.held(DEFAULT_SOURCE)) == 12
    assert await _uris(pg, "page 2 3 raft")
    assert _statistics_hold(pg_dsn, pg.index_name) == 12


async def test_sync_over_many_groups_records_each_group_once(
    pg: PgVectorBackend, pg_dsn: str, embedder: CountingEmbedder
) -> None:
    """Groups of 16 texts (batches of one): each group's outcomes are recorded after the
    next is handed over, the last at the source's end, and a refused document in a
    middle group is reported as it is without its neighbours."""
    chunker = Chunker.for_embedder(embedder)
    documents = [_document(f"mem://g/{i}.md", f"# Note {i}\n\nrestart worker{i}") for i in range(70)]
    documents.insert(37, _document("mem://g/bad.md", "# Bad\n\nrefused", huge=_huge()))
    report = await sync_sources([_Listing("notes", documents)], pg, embedder, chunker, batch_size=1)
    assert [failure.uri for failure in report.failures] == ["mem://g/bad.md"]
    assert (report.added, report.updated) == (70, 0)
    assert len(pg.held("notes")) == 70
    assert await _uris(pg, "worker69") == ["mem://g/69.md"]
    assert _statistics_hold(pg_dsn, pg.index_name) == 70
