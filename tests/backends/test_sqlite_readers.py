"""Searches side by side in one SQLite backend object (``lore.backends.sqlite.readers``):
concurrent read sections, one committed state per section, refreshes alone; and the
vector matrix's filter cache the concurrent searches share."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lore.access import Principal, Role, access_filter
from lore.backends.sqlite import SqliteBackend
from lore.backends.sqlite.readers import SharedExclusiveLock
from lore.backends.sqlite.vector_matrix import VectorMatrix
from lore.errors import LoreError
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder

#: A bound on waiting for another thread, so that a regression fails instead of hanging.
_BOUND = 60.0
_SRE = frozenset({"sre"})


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[SqliteBackend]:
    embedder = CountingEmbedder()
    opened = SqliteBackend(tmp_path / "lore.db", embedder)
    for number, topic in enumerate(("etcd quorum lost", "disk full on the node", "certificate expired")):
        add_document(
            opened, embedder, f"doc-{number}.md", f"# Runbook {number}\n\n{topic} runbook text", access=_SRE
        )
    opened.search("etcd", top_k=3)  # the read state is loaded: later sections are settled
    yield opened
    opened.close()


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _BOUND
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {_BOUND} s")
        time.sleep(0.01)


def test_a_search_runs_while_another_reads(backend: SqliteBackend) -> None:
    """The one guarded search connection made every search wait for the one before."""
    with ThreadPoolExecutor(1) as other, backend._guard:
        mine = backend._readers.conn
        found = other.submit(lambda: (backend.search("etcd quorum", top_k=3), backend._readers.conn))
        passages, theirs = found.result(timeout=_BOUND)
    assert passages[0].uri == "doc-0.md"
    assert theirs is not mine  # a connection of its own


def test_a_read_section_sees_one_committed_state(backend: SqliteBackend) -> None:
    before = backend._readers.chunk_count()
    with backend._guard:
        add_document(backend, CountingEmbedder(), "doc-new.md", "# New\n\nzookeeper session expired")
        assert backend._readers.chunk_count() == before  # the section's snapshot
    with backend._guard:
        assert backend._readers.chunk_count() == before + 1


def test_a_refresh_waits_for_the_searches_running_and_then_sees_the_change(backend: SqliteBackend) -> None:
    lock = backend._guard.exclusive
    with ThreadPoolExecutor(1) as other:
        with backend._guard:
            add_document(backend, CountingEmbedder(), "doc-new.md", "# New\n\nzookeeper session expired")
            # The index moved: that search must bring the shared read state up to date,
            # which it does alone, after this section.
            found = other.submit(backend.search, "zookeeper session", top_k=1)
            _until(lambda: lock.waiting == 1, "the search waiting to refresh")
            assert not found.done()
        assert found.result(timeout=_BOUND)[0].uri == "doc-new.md"
    with ThreadPoolExecutor(2) as both, backend._guard:  # settled again: side by side
        assert both.submit(backend.search, "zookeeper", top_k=1).result(timeout=_BOUND)


def test_a_waiting_exclusive_holder_goes_before_new_shared_ones() -> None:
    lock = SharedExclusiveLock()
    order: list[str] = []
    lock.acquire_shared()
    with ThreadPoolExecutor(2) as threads:

        def exclusive() -> None:
            with lock:
                order.append("exclusive")

        def shared() -> None:
            lock.acquire_shared()
            order.append("shared")
            lock.release_shared()

        first = threads.submit(exclusive)
        _until(lambda: lock.waiting == 1, "the exclusive holder waiting")
        second = threads.submit(shared)
        time.sleep(0.05)  # give the shared one a chance to cut in (it must not)
        assert order == []
        lock.release_shared()
        first.result(timeout=_BOUND)
        second.result(timeout=_BOUND)
    assert order == ["exclusive", "shared"]


def test_close_waits_for_a_read_section(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    add_document(backend, embedder, "doc.md", "# Doc\n\ntext")
    closed = threading.Event()
    with ThreadPoolExecutor(1) as other:
        with backend._guard:
            closing = other.submit(lambda: (backend.close(), closed.set()))
            _until(lambda: backend._guard.exclusive.waiting == 1, "close waiting")
            assert backend._readers.chunk_count() == 1  # the connection is still open
        closing.result(timeout=_BOUND)
    assert closed.is_set()


def test_the_rows_a_filter_allows_are_merged_once_until_the_rows_change(backend: SqliteBackend) -> None:
    """Merging an access's postings on every search cost more than the BM25 channel."""
    matrix = backend._search._refresh(need_vectors=True)
    assert isinstance(matrix, VectorMatrix)
    viewer = access_filter(Principal("viewer", Role.VIEWER, frozenset({"sre"})))
    first = matrix.allowed_rowids(frozenset(), viewer)
    assert first is not None
    assert len(first) == 3
    assert matrix._allowed(frozenset(), viewer) is matrix._allowed(frozenset(), viewer)
    add_document(backend, CountingEmbedder(), "doc-new.md", "# New\n\nzookeeper session expired", access=_SRE)
    assert backend._search._refresh(need_vectors=True) is matrix
    again = matrix.allowed_rowids(frozenset(), viewer)
    assert again is not None
    assert len(again) == 4  # the new row is allowed too
    found = backend.search("zookeeper session", top_k=1, mode="vector", access=viewer)
    assert found[0].uri == "doc-new.md"


def test_a_closed_index_is_not_searched(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    add_document(backend, embedder, "doc.md", "# Doc\n\ntext")
    backend.close()
    with pytest.raises(LoreError):
        backend.search("text", top_k=1)
