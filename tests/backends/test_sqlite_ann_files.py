"""The files of the approximate vector channel as a fresh process meets them: the graph
memory-mapped, the filters read from their file instead of SQLite, rows saved after the
graph held beside it, a newer version mapped when a writer saves one, a filters file
missing (an older lore) or damaged, and a read-only mount."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lore.backends.sqlite import SqliteBackend, ann, channels
from lore.backends.sqlite.ann import AnnChannel
from lore.backends.sqlite.store import ChunkStore
from lore.backends.sqlite.vector_matrix import VectorMatrix
from lore.models import SearchMode
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder

from . import test_sqlite_ann as graph_suite
from .test_sqlite_ann import (
    DIMENSION,
    _ann_dir,
    _nearest,
    _unit,
    filtered_through_the_graph,  # noqa: F401 (the graph suite's fixture)
)


@pytest.fixture
def save_every_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer saves a new version of the files whenever a row is past them."""
    monkeypatch.setattr(channels, "_SAVE_ROWS", 0)
    monkeypatch.setattr(channels, "_SAVE_FRACTION", 0.0)


@pytest.mark.usefixtures("save_every_write")
class TestSqliteAnnSavedConformance(graph_suite.TestSqliteAnnConformance):
    """The whole suite with every search on a freshly saved version: its filters come
    from their file, not from SQLite."""


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder(DIMENSION)


def _labelled(backend: SqliteBackend, embedder: CountingEmbedder, number: int) -> None:
    team = "sre" if number % 2 else "db"
    add_document(
        backend, embedder, f"doc-{number}.md", f"note {number}", vectors=_unit(number), labels={"team": team}
    )


def _channel(backend: SqliteBackend) -> AnnChannel:
    channel = backend._search._refresh(need_vectors=True)
    assert isinstance(channel, AnnChannel)
    return channel


def _built(db: Path, embedder: CountingEmbedder, count: int) -> None:
    with SqliteBackend(db, embedder, ann_threshold=1) as backend, backend.write_lock():
        for number in range(count):
            _labelled(backend, embedder, number)


def test_a_fresh_process_maps_the_graph_and_reads_only_rows_after_it(
    tmp_path: Path, embedder: CountingEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 1M chunks the first search of a process took 34 s: it loaded the graph, added
    the rows saved after it to the graph, and read every rowid and posting from SQLite."""
    db = tmp_path / "lore.db"
    _built(db, embedder, 60)
    with SqliteBackend(db, embedder, ann_threshold=1) as writer:
        _labelled(writer, embedder, 60)  # past the files: not saved for one row
    asked: list[int] = []
    read = ChunkStore.access_postings

    def recorded(store: ChunkStore, after: int) -> dict[str, np.typing.NDArray[np.int64]]:
        asked.append(after)
        return read(store, after)

    monkeypatch.setattr(ChunkStore, "access_postings", recorded)
    with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reader:
        assert _nearest(reader, 60) == ["doc-60.md"]
        channel = _channel(reader)
        assert channel.filters_saved
        assert asked
        assert min(asked) >= 60
        assert (len(channel._keys), channel.unsaved) == (60, 1)
        with pytest.raises(RuntimeError, match="immutable"):  # mapped, not copied
            channel._index.add(np.array([10_000], dtype=np.uint64), _unit(1))
        found = reader.search(
            "q", top_k=40, mode=SearchMode.VECTOR, query_vector=_unit(3)[0], labels={"team": "sre"}
        )
        assert {p.uri for p in found} == {f"doc-{n}.md" for n in range(1, 61, 2)}


def test_a_reader_maps_the_version_a_writer_saves(
    tmp_path: Path, embedder: CountingEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "lore.db"
    _built(db, embedder, 30)
    with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reader:
        assert _nearest(reader, 4) == ["doc-4.md"]
        first = _channel(reader).graph
        monkeypatch.setattr(channels, "_SAVE_ROWS", 0)
        with SqliteBackend(db, embedder, ann_threshold=1) as writer:
            for number in range(30, 35):  # a new version per write: the first one is deleted
                _labelled(writer, embedder, number)
            writer.delete_by_uri("doc-4.md")
        assert not (_ann_dir(db) / first).exists()
        assert _nearest(reader, 33) == ["doc-33.md"]
        channel = _channel(reader)
        assert channel.graph != first
        assert channel.unsaved == 0
        assert "doc-4.md" not in _nearest(reader, 4, top_k=40)
        assert len(_nearest(reader, 4, top_k=40)) == 34


def test_a_missing_or_damaged_filters_file_is_read_from_sqlite_and_saved_again(
    tmp_path: Path, embedder: CountingEmbedder
) -> None:
    """Files written by an older lore have no filters file; one that does not hold
    together is not trusted either. Neither is a torn graph: the graph is kept."""
    db = tmp_path / "lore.db"
    _built(db, embedder, 40)
    for damage in ("remove", "garble"):
        graph = _current_graph(db)
        filters = _ann_dir(db) / graph.replace("graph-", "filters-").replace(".usearch", ".npz")
        if damage == "remove":
            filters.unlink()
        else:
            filters.write_bytes(filters.read_bytes()[:100])
        with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reader:
            channel = _channel(reader)
            assert not channel.filters_saved
            assert channel.graph == graph
            found = reader.search(
                "q", top_k=40, mode=SearchMode.VECTOR, query_vector=_unit(2)[0], labels={"team": "db"}
            )
            assert {p.uri for p in found} == {f"doc-{n}.md" for n in range(0, 40, 2)}
        with SqliteBackend(db, embedder, ann_threshold=1) as writer, writer.write_lock():
            pass  # a writer saves the filters with a new version
        assert _current_graph(db) != graph
        with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reader:
            assert _channel(reader).filters_saved


def _current_graph(db: Path) -> str:
    graph: str = json.loads((_ann_dir(db) / "state.json").read_text())["graph"]
    return graph


def test_saved_filters_hold_what_sqlite_holds(tmp_path: Path, embedder: CountingEmbedder) -> None:
    db = tmp_path / "lore.db"
    _built(db, embedder, 30)
    with SqliteBackend(db, embedder, ann_threshold=1) as backend:
        for number in range(10):
            backend.delete_by_uri(f"doc-{number}.md")
        read = VectorMatrix(DIMENSION, keep_vectors=False)
        read.refresh(backend._readers)
        alive = read.rowids[read.rowids > 0]
        restored = VectorMatrix.from_arrays(DIMENSION, read.to_arrays(alive[5:]))
        assert restored.rowids.tolist() == alive[5:].tolist()
        for term in ("team=sre", "team=db"):
            wanted = set(read.allowed_rowids(frozenset({term}), None).tolist()) & set(alive[5:].tolist())
            assert set(restored.allowed_rowids(frozenset({term}), None).tolist()) == wanted
    broken = read.to_arrays()
    broken["labels_positions"] = broken["labels_positions"] + 1_000
    with pytest.raises(ValueError, match="outside the rows"):
        VectorMatrix.from_arrays(DIMENSION, broken)


def test_many_deletes_are_dropped_without_reading_vectors_again(
    tmp_path: Path, embedder: CountingEmbedder
) -> None:
    """Past a tenth of dead rows the exact matrix used to read every vector again."""
    with SqliteBackend(tmp_path / "lore.db", embedder) as backend:
        for number in range(40):
            _labelled(backend, embedder, number)
        matrix = backend._search._refresh(need_vectors=True)
        assert isinstance(matrix, VectorMatrix)
        for number in range(0, 40, 3):
            backend.delete_by_uri(f"doc-{number}.md")
        statements: list[str] = []
        backend._readers.conn.set_trace_callback(statements.append)
        try:
            assert backend._search._refresh(need_vectors=True) is matrix
        finally:
            backend._readers.conn.set_trace_callback(None)
        assert not [
            sql for sql in statements if "vector FROM chunk_vectors" in sql and "chunk > 40" not in sql
        ]
        assert (len(matrix), matrix.dead) == (26, 0)
        fresh = VectorMatrix(DIMENSION)
        fresh.refresh(backend._readers)
        assert matrix.rowids.tolist() == fresh.rowids.tolist()
        assert np.array_equal(matrix.matrix, fresh.matrix)
        for term in ("team=sre", "team=db"):
            held = matrix.allowed_rowids(frozenset({term}), None)
            assert held is not None
            assert held.tolist() == fresh.allowed_rowids(frozenset({term}), None).tolist()


def test_a_graph_on_a_read_only_mount_is_mapped(
    read_only_view: tuple[Path, Path],
    embedder: CountingEmbedder,
) -> None:
    built, served = read_only_view
    _built(built / "lore.db", embedder, 30)
    with SqliteBackend(served / "lore.db", CountingEmbedder(DIMENSION), ann_threshold=1) as reader:
        assert reader.read_only is not None
        assert _channel(reader).filters_saved
        assert _nearest(reader, 17) == ["doc-17.md"]
    shutil.rmtree(built / "lore.db.ann")  # missing on the mount: scanned exactly, not built
    with SqliteBackend(served / "lore.db", CountingEmbedder(DIMENSION), ann_threshold=1) as reader:
        assert isinstance(reader._search._refresh(need_vectors=True), VectorMatrix)
        assert _nearest(reader, 17) == ["doc-17.md"]


def test_the_graph_is_searched_wider_than_it_was_built(tmp_path: Path, embedder: CountingEmbedder) -> None:
    """At 1M chunks an expansion of 128 (the build's) left recall@10 at 0.9505, right at the
    target; 256 gave 0.995 (bench/perf_million.py --phase ef)."""
    db = tmp_path / "lore.db"
    _built(db, embedder, 30)
    with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reader:
        assert _nearest(reader, 7) == ["doc-7.md"]
        channel = _channel(reader)
        assert ann.EXPANSION_SEARCH > ann.EXPANSION_ADD
        assert channel._index.expansion_search >= ann.EXPANSION_SEARCH
