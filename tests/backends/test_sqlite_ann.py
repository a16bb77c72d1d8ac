"""The SQLite backend's approximate vector channel (``lore.db.ann/``, above
``ann_threshold``): the whole conformance suite with it forced on, the switch both ways,
exact re-scoring, incremental adds and deletes, crashes and torn files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lore.backends.sqlite import SqliteBackend, ann
from lore.backends.sqlite.ann import AnnChannel
from lore.backends.sqlite.vector_matrix import VectorMatrix
from lore.models import SearchMode
from lore.protocols import Vectors
from lore.testing import DEFAULT_SOURCE, add_document
from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder

DIMENSION = 64


@pytest.fixture
def filtered_through_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filters over-fetch from the graph even on a tiny index (not scored exactly)."""
    monkeypatch.setattr(ann, "_EXACT_ROWS", 0)


@pytest.mark.usefixtures("filtered_through_the_graph")
class TestSqliteAnnConformance(BackendConformance):
    """Every stored vector goes through the graph: ``ann_threshold = 1``."""

    @pytest.fixture
    def store(self, tmp_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
        backend = SqliteBackend(tmp_path / "lore.db", embedder, ann_threshold=1)
        yield backend
        backend.close()


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder(DIMENSION)


def _unit(seed: int) -> Vectors:
    vector = np.random.default_rng(seed).standard_normal((1, DIMENSION)).astype(np.float32)
    normalised: Vectors = vector / np.linalg.norm(vector)
    return normalised


def _add(backend: SqliteBackend, embedder: CountingEmbedder, number: int) -> None:
    add_document(backend, embedder, f"doc-{number}.md", f"note {number}", vectors=_unit(number))


def _nearest(backend: SqliteBackend, number: int, top_k: int = 1) -> list[str]:
    found = backend.search("q", top_k=top_k, mode=SearchMode.VECTOR, query_vector=_unit(number)[0])
    return [p.uri for p in found]


def _ann_dir(db: Path) -> Path:
    return db.with_name(db.name + ".ann")


def test_the_channel_follows_the_threshold_both_ways(tmp_path: Path, embedder: CountingEmbedder) -> None:
    db = tmp_path / "lore.db"
    with SqliteBackend(db, embedder, ann_threshold=30) as backend:
        for number in range(29):
            _add(backend, embedder, number)
        assert isinstance(backend._search._refresh(need_vectors=True), VectorMatrix)
        assert not (_ann_dir(db) / "state.json").exists()
        _add(backend, embedder, 29)  # the 30th vector: the write builds the graph
        assert (_ann_dir(db) / "state.json").exists()
        assert isinstance(backend._search._refresh(need_vectors=True), AnnChannel)
        assert dict(backend.status_lines())["vector index"].startswith("approximate")
        assert _nearest(backend, 7) == ["doc-7.md"]
        backend.delete_by_uri("doc-3.md")
        assert isinstance(backend._search._refresh(need_vectors=True), VectorMatrix)
        assert dict(backend.status_lines())["vector index"].startswith("exact scan (29 vectors")
        assert len(_nearest(backend, 3, top_k=29)) == 29
        assert "doc-3.md" not in _nearest(backend, 3, top_k=29)


def test_candidates_carry_their_exact_cosines(tmp_path: Path, embedder: CountingEmbedder) -> None:
    """The confidence signal reads these scores: the same as the exact scan's."""
    with SqliteBackend(tmp_path / "lore.db", embedder, ann_threshold=1) as backend:
        with backend.write_lock():
            for number in range(600):
                _add(backend, embedder, number)
        channel = backend._search._refresh(need_vectors=True)
        assert isinstance(channel, AnnChannel)
        exact = VectorMatrix(DIMENSION)
        exact.refresh(backend._readers)
        found = 0
        for number in range(1000, 1020):
            query = _unit(number)[0]
            approximate = channel.search(query, frozenset(), 10, backend._readers, None)
            cosines = dict(exact.search(query, frozenset(), 600))  # every row's exact cosine
            truth = {rowid for rowid, _ in exact.search(query, frozenset(), 10)}
            # Whatever the graph finds is scored exactly, in the exact scan's order...
            scores = [score for _, score in approximate]
            assert scores == pytest.approx([cosines[rowid] for rowid, _ in approximate], abs=1e-6)
            assert scores == sorted(scores, reverse=True)
            found += len(truth & {rowid for rowid, _ in approximate})
        # ...and it finds nearly all the true neighbours (an approximate graph may miss one).
        assert found / (20 * 10) >= 0.95


def test_a_node_the_graph_cannot_reach_is_still_found(tmp_path: Path, embedder: CountingEmbedder) -> None:
    """A multi-threaded build can leave a node unreachable (CI once lost one passage of a
    top 50 over 24 documents); fewer hits than readable vectors means an exact scan."""
    with SqliteBackend(tmp_path / "lore.db", embedder, ann_threshold=1) as backend:
        with backend.write_lock():
            for number in range(40):
                _add(backend, embedder, number)
        channel = backend._search._refresh(need_vectors=True)
        assert isinstance(channel, AnnChannel)
        stranded = int(channel._keys[5])
        # The mapped graph cannot change: a copy in memory without the node takes its place.
        saved = channel.files.load(channel._model_id, DIMENSION, mutable=True)
        assert saved is not None
        saved.index.remove(stranded)  # still a stored, readable vector; gone from the graph
        channel._index = saved.index
        every = channel.search(_unit(5)[0], frozenset(), 50, backend._readers, None)
        assert len(every) == 40
        assert every[0][0] == stranded
        assert len(_nearest(backend, 5, top_k=50)) == 40


def test_incremental_adds_and_deletes_reach_every_process(tmp_path: Path, embedder: CountingEmbedder) -> None:
    db = tmp_path / "lore.db"
    with SqliteBackend(db, embedder, ann_threshold=1) as backend:
        with backend.write_lock():
            for number in range(50):
                _add(backend, embedder, number)
        saved = (_ann_dir(db) / "state.json").read_text()
        with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reader:
            assert _nearest(reader, 10) == ["doc-10.md"]
            _add(backend, embedder, 50)  # after the save: the files do not hold it yet
            backend.delete_by_uri("doc-10.md")
            assert (_ann_dir(db) / "state.json").read_text() == saved
            assert _nearest(reader, 50) == ["doc-50.md"]
            assert "doc-10.md" not in _nearest(reader, 10, top_k=50)
    with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reopened:
        assert _nearest(reopened, 50) == ["doc-50.md"]
        assert "doc-10.md" not in _nearest(reopened, 10, top_k=50)


def test_many_deletes_leave_the_graph(tmp_path: Path, embedder: CountingEmbedder) -> None:
    with SqliteBackend(tmp_path / "lore.db", embedder, ann_threshold=1) as backend:
        for number in range(40):
            _add(backend, embedder, number)
        for number in range(20):
            backend.delete_by_uri(f"doc-{number}.md")
        channel = backend._search._refresh(need_vectors=True)
        assert isinstance(channel, AnnChannel)
        # Dead entries stay until a tenth of the graph is dead, then it is rebuilt.
        assert 20 <= len(channel) <= 22
        assert channel.stale == len(channel) - 20
        assert _nearest(backend, 25) == ["doc-25.md"]


def test_a_torn_graph_is_rebuilt_on_open(tmp_path: Path, embedder: CountingEmbedder) -> None:
    db = tmp_path / "lore.db"
    with SqliteBackend(db, embedder, ann_threshold=1) as backend, backend.write_lock():
        for number in range(30):
            _add(backend, embedder, number)
    graph = next(_ann_dir(db).glob("graph-*.usearch"))
    # Torn as a crash tears it: a new file cut short. Never cut the mapped file in place:
    # the first backend's memory map of it may outlive this block (until a garbage
    # collection frees it), and a map of a file cut short under it is a SIGBUS waiting
    # for whatever touches it (a usearch search of such a view is one, tried by hand).
    torn = graph.with_suffix(".torn")
    torn.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    os.replace(torn, graph)
    with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reopened:
        assert reopened._search.vectors.usable()
        assert isinstance(reopened._search._refresh(need_vectors=True), AnnChannel)
        assert _nearest(reopened, 12) == ["doc-12.md"]
    (_ann_dir(db) / "state.json").write_text("{not json")
    with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reopened:
        assert isinstance(reopened._search._refresh(need_vectors=True), AnnChannel)
        assert _nearest(reopened, 13) == ["doc-13.md"]


def test_reindex_rebuilds_the_graph(tmp_path: Path, embedder: CountingEmbedder) -> None:
    db = tmp_path / "lore.db"
    with SqliteBackend(db, embedder, ann_threshold=1) as backend:
        for number in range(12):
            _add(backend, embedder, number)
        before = (_ann_dir(db) / "state.json").read_text()
        assert backend.rebuild_fulltext() == 12
        assert (_ann_dir(db) / "state.json").read_text() != before
        assert _nearest(backend, 4) == ["doc-4.md"]


def test_a_writer_killed_mid_update_loses_nothing_committed(tmp_path: Path) -> None:
    """kill -9 while a sync adds and deletes (and saves the graph after every write):
    reopened, every committed document is found and no deleted one is."""
    db = tmp_path / "lore.db"
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from lore.backends.sqlite import SqliteBackend, channels
        from test_sqlite_ann import _add, DIMENSION
        from lore.testing.embedders import CountingEmbedder
        channels._SAVE_ROWS = 0
        embedder = CountingEmbedder(DIMENSION)
        backend = SqliteBackend(Path({str(db)!r}), embedder, ann_threshold=1)
        number = 0
        while True:
            _add(backend, embedder, number)
            if number >= 5:
                backend.delete_by_uri(f"doc-{{number - 5}}.md")
            print(number, flush=True)
            number += 1
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for _ in range(40):
        child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait()
    with SqliteBackend(db, CountingEmbedder(DIMENSION), ann_threshold=1) as reopened:
        held = set(reopened.held(DEFAULT_SOURCE))
        assert 5 <= len(held) <= 6
        found = set()
        for number in range(60):
            found |= set(_nearest(reopened, number, top_k=10))
        assert found == held
