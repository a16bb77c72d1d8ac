"""The SQLite backend's full-text index in shards (``fulltext_shards.py``, above
``fulltext_shard_threshold``): the whole conformance suite with sharding forced on, the
merged ranking against one index's, the switch both ways, incremental writes landing in
the right shard, another process's switch, and a switch killed half-way."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend, from_settings
from lore.backends.sqlite.fulltext import PAUSE_ENV, FullTextIndex
from lore.backends.sqlite.fulltext_shards import ShardedFullText, wanted_shards
from lore.config import load_settings
from lore.embedders.hashing import HashingEmbedder
from lore.errors import ConfigError
from lore.models import SearchMode
from lore.testing import add_document
from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder

REPO_SRC = Path(__file__).resolve().parents[2] / "src"
NEVER = 10**9


class TestSqliteShardedConformance(BackendConformance):
    """Three shards from the first chunk on: every write crosses or keeps the threshold."""

    @pytest.fixture
    def store(self, tmp_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
        backend = SqliteBackend(tmp_path / "lore.db", embedder, fulltext_shard_threshold=1, fulltext_shards=3)
        yield backend
        backend.close()


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


_WORDS = [f"w{n}" for n in range(60)] + ["etcd", "leader", "kafka", "consumer", "lag", "disk", "pressure"]


def _corpus(backend: SqliteBackend, embedder: CountingEmbedder, documents: int) -> None:
    """Zipf-distributed words, as the bench's, each text twice in a row: rowids 2k+1 and
    2k+2 go to different shards, so both shards hold the same texts and score alike."""
    draw = random.Random(15)
    weights = [1 / (rank + 1) for rank in range(len(_WORDS))]
    with backend.write_lock():
        for number in range(documents):
            words = " ".join(draw.choices(_WORDS, weights, k=draw.randint(8, 40)))
            for copy in ("a", "b"):
                add_document(backend, embedder, f"doc-{number}{copy}.md", words, title=f"runbook {number}")


def _bm25(backend: SqliteBackend, query: str, top_k: int = 10) -> list[str]:
    return [p.uri for p in backend.search(query, top_k=top_k, mode=SearchMode.BM25)]


def _layouts(db: Path) -> list[str]:
    return sorted(path.name for path in db.parent.iterdir() if path.name.startswith("lore.db.tantivy"))


def test_the_merged_ranking_is_the_single_index_ranking(tmp_path: Path, embedder: CountingEmbedder) -> None:
    """Where the shards' statistics are alike, the merged ranking is one index's: the same
    chunks in the same order (each shard scores with the set's idf; only the average
    field length is its own), and the coverage weights exactly the single index's.
    Without that symmetry a near-tie may swap: docs/benchmarks.md measures how often at
    1M chunks (top 10 in the same order for 95.5% of the queries)."""
    single = SqliteBackend(tmp_path / "one" / "lore.db", embedder)
    two = tmp_path / "two" / "lore.db"
    sharded = SqliteBackend(two, embedder, fulltext_shard_threshold=1, fulltext_shards=2)
    with single, sharded:
        _corpus(single, embedder, 200)
        _corpus(sharded, embedder, 200)
        assert isinstance(sharded._layout.current, ShardedFullText)
        assert isinstance(single._layout.current, FullTextIndex)
        for query in ["etcd leader", "kafka consumer lag", "disk pressure w3", "w1 w2 w5 lag", "runbook 17"]:
            one, two = _bm25(single, query), _bm25(sharded, query)
            assert two == one, query
            assert sharded._layout.current.query_weights(query) == single._layout.current.query_weights(query)


def test_the_layout_follows_the_chunk_count_both_ways(tmp_path: Path, embedder: CountingEmbedder) -> None:
    db = tmp_path / "lore.db"
    with SqliteBackend(db, embedder, fulltext_shard_threshold=10, fulltext_shards=2) as backend:
        for number in range(9):
            add_document(backend, embedder, f"doc-{number}.md", f"etcd note {number}")
        assert _layouts(db) == ["lore.db.tantivy"]
        add_document(backend, embedder, "doc-9.md", "etcd note 9")  # the 10th chunk
        assert _layouts(db) == ["lore.db.tantivy-2"]
        assert backend.fulltext_state() == "ready (10 chunks in 2 shards)"
        backend.delete_by_uri("doc-9.md")
        backend.delete_by_uri("doc-8.md")  # 8 chunks: kept sharded (at least 0.8 of 10)
        assert _layouts(db) == ["lore.db.tantivy-2"]
        backend.delete_by_uri("doc-7.md")
        assert _layouts(db) == ["lore.db.tantivy"]
        assert sorted(_bm25(backend, "etcd")) == sorted(f"doc-{n}.md" for n in range(7))
    # A changed shard count rebuilds on open; the old layout goes.
    with SqliteBackend(db, embedder, fulltext_shard_threshold=5, fulltext_shards=3) as backend:
        assert _layouts(db) == ["lore.db.tantivy-3"]
        assert len(_bm25(backend, "etcd")) == 7
        assert backend.rebuild_fulltext() == 7  # `lore reindex` keeps the layout
        assert _layouts(db) == ["lore.db.tantivy-3"]
        assert len(_bm25(backend, "etcd")) == 7


def test_the_margin_below_the_threshold_keeps_only_the_count_asked_for() -> None:
    assert wanted_shards(900, 2, 1_000, 2) == 2  # kept sharded at 0.9 of the threshold
    assert wanted_shards(900, 2, 1_000, 1) == 1  # sharding turned off: followed at once
    assert wanted_shards(900, 2, 1_000, 3) == 1  # another count: one index below it
    assert wanted_shards(1_000, 2, 1_000, 3) == 3
    assert wanted_shards(700, 2, 1_000, 2) == 1


def test_an_incremental_sync_updates_the_right_shard(tmp_path: Path, embedder: CountingEmbedder) -> None:
    db = tmp_path / "lore.db"
    with SqliteBackend(db, embedder, fulltext_shard_threshold=1, fulltext_shards=2) as backend:
        for number in range(6):
            add_document(backend, embedder, f"doc-{number}.md", f"kafka lag {number}")
        fulltext = backend._layout.current
        assert isinstance(fulltext, ShardedFullText)
        old = {rowid for rowid, _ in fulltext.search("kafka", frozenset(), 100)}
        add_document(backend, embedder, "doc-2.md", "disk pressure now", revision="rev-2")
        hits = dict(fulltext.search("disk pressure", frozenset(), 100))
        assert len(hits) == 1
        (rowid,) = hits
        assert rowid not in old  # a new row, in the shard its rowid names, and only there
        parts = fulltext._parts
        assert [bool(part.search("disk", frozenset(), 10)) for part in parts] == [
            n == rowid % 2 for n in range(2)
        ]
        now = {r for r, _ in fulltext.search("kafka", frozenset(), 100)} | {rowid}
        assert len(now) == 6  # doc-2's old row is gone from its shard
        assert [part.document_count() for part in parts] == [sum(r % 2 == n for r in now) for n in range(2)]
        assert len(fulltext.search("kafka", frozenset(), 100)) == 5
        assert fulltext.held_terms([rowid], ["disk", "kafka"]) == {rowid: frozenset({"disk"})}


def test_a_reader_follows_another_writers_switch(tmp_path: Path, embedder: CountingEmbedder) -> None:
    """A server's backend object (no write lock) while a sync crosses the threshold in
    another object, as in another process: the server moves to the shards."""
    db = tmp_path / "lore.db"
    add = SqliteBackend(db, embedder, fulltext_shard_threshold=3, fulltext_shards=2)
    with add, SqliteBackend(db, embedder, fulltext_shard_threshold=3, fulltext_shards=2) as reader:
        add_document(add, embedder, "doc-0.md", "etcd leader lost")
        assert _bm25(reader, "etcd") == ["doc-0.md"]
        for number in range(1, 4):
            add_document(add, embedder, f"doc-{number}.md", f"etcd leader {number}")
        assert _layouts(db) == ["lore.db.tantivy-2"]
        assert len(_bm25(reader, "etcd")) == 4
        assert isinstance(reader._layout.current, ShardedFullText)
        add_document(add, embedder, "doc-4.md", "etcd leader 4")  # each shard reloads
        add_document(add, embedder, "doc-5.md", "etcd leader 5")
        add.delete_by_uri("doc-0.md")
        assert sorted(_bm25(reader, "etcd")) == [f"doc-{n}.md" for n in range(1, 6)]


def test_a_switch_killed_half_way_leaves_the_old_layout_answering(tmp_path: Path) -> None:
    """A writer killed (-9) while rebuilding into shards, before their commit: the single
    index is still complete and current; the next writer switches again."""
    db = tmp_path / "lore.db"
    embedder = HashingEmbedder()
    with SqliteBackend(db, embedder) as backend, backend.write_lock():
        for number in range(40):
            add_document(backend, embedder, f"doc-{number}.md", f"kafka consumer lag runbook number {number}")
    script = (
        "from pathlib import Path; from lore.backends.sqlite import SqliteBackend; "
        "from lore.embedders.hashing import HashingEmbedder; "
        f"SqliteBackend(Path({str(db)!r}), HashingEmbedder(), fulltext_shard_threshold=10, fulltext_shards=2)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(REPO_SRC), PAUSE_ENV: "120", "PATH": "/usr/bin:/bin"},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert "rebuild paused" in line, line + (child.stderr.read() if child.stderr else "")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not ShardedFullText.usable(tmp_path / "lore.db.tantivy-2", 2)
    with SqliteBackend(db, embedder, fulltext_shard_threshold=NEVER, fulltext_shards=2) as reopened:
        assert isinstance(reopened._layout.current, FullTextIndex)
        assert len(_bm25(reopened, "kafka consumer lag", 50)) == 40
        assert reopened.fulltext_state() == "ready (40 chunks)"
    with SqliteBackend(db, embedder, fulltext_shard_threshold=10, fulltext_shards=2) as reopened:
        assert _layouts(db) == ["lore.db.tantivy-2"]
        assert len(_bm25(reopened, "kafka consumer lag", 50)) == 40
        assert reopened.fulltext_state() == "ready (40 chunks in 2 shards)"


def test_the_settings_reach_the_backend(tmp_path: Path, embedder: CountingEmbedder) -> None:
    config = tmp_path / "lore.toml"
    config.write_text('db_path = "lore.db"\nfulltext_shard_threshold = 2\nfulltext_shards = 3\n')
    with from_settings(load_settings(config), embedder) as backend:
        for number in range(2):
            add_document(backend, embedder, f"doc-{number}.md", f"etcd note {number}")
        assert _layouts(tmp_path / "lore.db") == ["lore.db.tantivy-3"]
    config.write_text('db_path = "lore.db"\nfulltext_shards = 0\n')
    with pytest.raises(ConfigError, match="fulltext_shards"):
        load_settings(config)
