"""``lore reembed`` on every storing backend: SQLite, PostgreSQL + pgvector (the real server
of ``conftest.pg_dsn``) and Qdrant in local mode. The same scenarios run on each: a switch
with a dimension change, an interrupted run that resumes without re-embedding what it
staged, searches and the write lock while staging, and a sync between two runs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lore.config import load_settings
from lore.embedders.hashing import HashingEmbedder
from lore.errors import EmbedderMismatchError, EmbeddingError, IndexingError, IndexLockedError
from lore.models import SearchMode, embed_key, embedding_text
from lore.protocols import Embedder, Reembeddable, Vectors
from lore.reembed import open_for_reembed, reembed_index
from lore.testing import add_document, make_document
from lore.testing.embedders import CountingEmbedder
from optional_extras import require_extra

#: uri -> (title, text). Two documents share title and text, so one embedding text (and
#: one staged vector) serves two chunks.
CORPUS = {
    "runbooks/etcd.md": ("etcd", "The etcdNoLeader alert fires when a member sees no leader."),
    "runbooks/kafka.md": ("Kafka", "Lag on payments-consumer-group grows when a partition is stuck."),
    "runbooks/tls.md": ("TLS", "Rotate the TLS certificate with the cluster issuer before it expires."),
    "runbooks/disk.md": ("Disk", "Disk pressure on a node: clean the image cache and old logs."),
    "runbooks/dns.md": ("DNS", "CoreDNS SERVFAIL storms: check the upstream resolvers."),
    "runbooks/redis.md": ("Redis", "Redis evictions: check INFO memory and the maxmemory policy."),
    "runbooks/vpn.md": ("VPN", "Restart the VPN concentrator from the console."),
    "runbooks/vpn-copy.md": ("VPN", "Restart the VPN concentrator from the console."),
}
TEXTS = len(CORPUS) - 1
NTP = "Chrony clock skew: check the NTP servers."
QUERIES = {
    "etcdNoLeader member leader": "runbooks/etcd.md",
    "payments-consumer-group lag partition": "runbooks/kafka.md",
    "CoreDNS SERVFAIL upstream resolvers": "runbooks/dns.md",
}

OLD_DIMENSION = 64


@dataclass
class Site:
    """Where one backend keeps an index; ``open`` gives a fresh backend object on it."""

    name: str
    open: Callable[[Embedder], Any]
    #: The same index as settings (``load_settings`` overrides).
    settings: dict[str, Any]


def _sqlite(tmp_path: Path) -> Iterator[Site]:
    from lore.backends.sqlite import SqliteBackend

    path = tmp_path / "lore.db"
    yield Site("sqlite", lambda embedder: SqliteBackend(path, embedder), {"db_path": path})


def _pgvector(request: pytest.FixtureRequest) -> Iterator[Site]:
    require_extra("psycopg", "pgvector")
    from lore.backends.pgvector import PgVectorBackend

    dsn: str = request.getfixturevalue("pg_dsn")
    index_name = f"r_{uuid.uuid4().hex[:12]}"
    yield Site(
        "pgvector",
        lambda embedder: PgVectorBackend(dsn, embedder, index_name=index_name),
        {"backend": "pgvector", "pg_dsn": dsn, "index_name": index_name},
    )
    cleanup = PgVectorBackend(dsn, CountingEmbedder(), index_name=index_name)
    cleanup.drop()
    cleanup.close()


def _qdrant(tmp_path: Path) -> Iterator[Site]:
    require_extra("qdrant_client", "qdrant")
    from lore.backends.qdrant import QdrantBackend

    path = tmp_path / "qdrant"
    yield Site(
        "qdrant",
        lambda embedder: QdrantBackend(embedder, path=path),
        {"backend": "qdrant", "qdrant_path": path},
    )


@pytest.fixture(params=["sqlite", "pgvector", "qdrant"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    if request.param == "sqlite":
        yield from _sqlite(tmp_path)
    elif request.param == "pgvector":
        yield from _pgvector(request)
    else:
        yield from _qdrant(tmp_path)


@pytest.fixture
def old() -> CountingEmbedder:
    return CountingEmbedder(OLD_DIMENSION)


@pytest.fixture
def index(site: Site, old: CountingEmbedder) -> Iterator[Any]:
    """An index built with ``old``; the object the re-embedding runs on."""
    backend = site.open(old)
    with backend.write_lock():
        for uri, (title, text) in CORPUS.items():
            add_document(backend, old, uri, text, title=title)
    old.reset()
    yield backend
    backend.close()


class FailingEmbedder(CountingEmbedder):
    """Fails on its ``fail_on``-th batch, like a provider that goes away mid-run."""

    def __init__(self, dimension: int, fail_on: int) -> None:
        super().__init__(dimension)
        self.fail_on = fail_on

    def embed_documents(self, texts: Any) -> Vectors:
        if self.document_calls + 1 == self.fail_on:
            self.document_calls += 1
            raise EmbeddingError("the provider went away")
        return super().embed_documents(texts)


def _search(backend: Any, query: str, mode: SearchMode = SearchMode.VECTOR) -> list[str]:
    return [passage.uri for passage in asyncio.run(backend.retrieve(query, top_k=3, mode=mode)).passages]


def _assert_finds_everything(backend: Any, mode: SearchMode = SearchMode.VECTOR) -> None:
    for query, uri in QUERIES.items():
        assert _search(backend, query, mode)[0] == uri, query


# -- the switch ---------------------------------------------------------------------------


def test_switch_changes_model_and_dimension(site: Site, index: Any, old: CountingEmbedder) -> None:
    assert isinstance(index, Reembeddable)
    new = HashingEmbedder(384)

    result = reembed_index(index, new, batch_size=3)

    assert result.old == (old.model_id, OLD_DIMENSION)
    assert result.new == ("hashing-384", 384)
    assert (result.chunks, result.texts, result.embedded) == (len(CORPUS), TEXTS, TEXTS)
    assert index.stored_embedder() == ("hashing-384", 384)
    _assert_finds_everything(index)  # the same object now searches with the new embedder

    reopened = site.open(HashingEmbedder(384))
    try:
        _assert_finds_everything(reopened)
        _assert_finds_everything(reopened, SearchMode.HYBRID)
        _, chunks = make_document("runbooks/etcd.md", CORPUS["runbooks/etcd.md"][1], title="etcd")
        cached = reopened.cached_vectors([embed_key(chunks[0])])
        assert cached[embed_key(chunks[0])].shape == (384,)
        # A sync after the switch writes vectors of the new dimension beside the re-embedded ones.
        add_document(reopened, new, "runbooks/ntp.md", NTP, title="NTP")
        assert _search(reopened, "chrony clock skew NTP")[0] == "runbooks/ntp.md"
    finally:
        reopened.close()
    assert old.documents_embedded == 0


def test_old_embedder_is_refused_after_the_switch(site: Site, index: Any) -> None:
    reembed_index(index, CountingEmbedder(32))

    if site.name == "sqlite":  # it checks the embedder on opening
        with pytest.raises(EmbedderMismatchError, match="lore reembed"):
            site.open(CountingEmbedder(OLD_DIMENSION))
        return
    stale = site.open(CountingEmbedder(OLD_DIMENSION))
    try:
        with pytest.raises(EmbedderMismatchError, match="lore reembed"):
            stale.check_embedder(f"test-counting-{OLD_DIMENSION}", OLD_DIMENSION)
        with pytest.raises(EmbedderMismatchError, match="lore reembed"):
            _search(stale, "etcdNoLeader")
    finally:
        stale.close()


def test_switch_refuses_while_incomplete(site: Site, index: Any) -> None:
    new = CountingEmbedder(32)
    with index.write_lock():
        index.begin_reembed(new.model_id, new.dimension)
        pending = index.unstaged_chunks(3)
        index.stage_vectors(list(pending), new.embed_documents([embedding_text(c) for c in pending.values()]))
        with pytest.raises(IndexingError, match="no vector for"):
            index.switch_embedder(new)

    assert index.stored_embedder() == (f"test-counting-{OLD_DIMENSION}", OLD_DIMENSION)
    assert index.reembed_status(new.model_id, new.dimension).staged == len(pending)
    _assert_finds_everything(index, SearchMode.BM25)


# -- while staging ------------------------------------------------------------------------


class _WhileStaging:
    """A progress listener that, after the first batch, searches and tries to sync through
    another backend object, as a server and a cron job would."""

    def __init__(self, other: Any) -> None:
        self.other = other
        self.results: dict[str, list[str]] = {}
        self.lock_error: Exception | None = None

    def started(self, texts: int, staged: int) -> None:
        pass

    def advanced(self, count: int) -> None:
        if self.results:
            return
        for query in QUERIES:
            self.results[query] = _search(self.other, query, SearchMode.HYBRID)
        try:
            with self.other.write_lock():
                pass
        except IndexLockedError as err:
            self.lock_error = err


def test_searches_work_and_syncs_wait_while_staging(site: Site, index: Any) -> None:
    reader = site.open(CountingEmbedder(OLD_DIMENSION))
    try:
        listener = _WhileStaging(reader)
        reembed_index(index, CountingEmbedder(32), batch_size=2, progress=listener)
    finally:
        reader.close()

    assert {query: uris[0] for query, uris in listener.results.items()} == QUERIES
    assert listener.lock_error is not None, "a sync could have interleaved with the re-embedding"


# -- interruption and resumption ----------------------------------------------------------


def test_interrupted_run_resumes_without_re_embedding(site: Site, index: Any) -> None:
    failing = FailingEmbedder(32, fail_on=3)
    with pytest.raises(EmbeddingError, match="went away"):
        reembed_index(index, failing, batch_size=2)

    # Nothing switched: the old embedder still serves every channel.
    assert index.stored_embedder() == (f"test-counting-{OLD_DIMENSION}", OLD_DIMENSION)
    reader = site.open(CountingEmbedder(OLD_DIMENSION))
    try:
        _assert_finds_everything(reader, SearchMode.VECTOR)
        _assert_finds_everything(reader, SearchMode.HYBRID)
    finally:
        reader.close()
    staged = index.reembed_status(failing.model_id, 32).staged
    assert staged == failing.documents_embedded > 0

    resumed = CountingEmbedder(32)
    result = reembed_index(index, resumed, batch_size=2)

    assert resumed.documents_embedded == TEXTS - staged
    assert (result.texts, result.embedded) == (TEXTS, TEXTS - staged)
    _assert_finds_everything(index)


def test_sync_between_runs_is_picked_up(site: Site, index: Any, old: CountingEmbedder) -> None:
    with pytest.raises(EmbeddingError):
        reembed_index(index, FailingEmbedder(32, fail_on=2), batch_size=3)
    with index.write_lock():  # a sync with the old embedder, between the two runs
        add_document(index, old, "runbooks/etcd.md", "etcdNoLeader: restart the etcd member.", title="etcd")
        add_document(index, old, "runbooks/ntp.md", NTP, title="NTP")
        index.delete_by_uri("runbooks/redis.md")

    resumed = CountingEmbedder(32)
    reembed_index(index, resumed, batch_size=3)

    assert _search(index, "restart the etcd member etcdNoLeader")[0] == "runbooks/etcd.md"
    assert _search(index, "chrony clock skew NTP")[0] == "runbooks/ntp.md"
    assert "runbooks/redis.md" not in _search(index, "Redis evictions maxmemory")


def test_staging_for_another_embedder_is_discarded(index: Any) -> None:
    abandoned = FailingEmbedder(48, fail_on=2)
    with pytest.raises(EmbeddingError):
        reembed_index(index, abandoned, batch_size=2)
    assert index.reembed_status(abandoned.model_id, 48).staged > 0

    chosen = CountingEmbedder(32)
    assert index.reembed_status(chosen.model_id, 32).staged == 0
    reembed_index(index, chosen, batch_size=2)

    assert chosen.documents_embedded == TEXTS
    assert index.stored_embedder() == (chosen.model_id, 32)
    _assert_finds_everything(index)


# -- through the settings, as the command does ----------------------------------------------


def test_open_the_configured_index_for_reembedding(
    site: Site, index: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no lore.toml but the test's own settings
    configured = open_for_reembed(load_settings(None, **site.settings))
    assert configured is not None
    try:
        assert configured.stored_embedder() == (f"test-counting-{OLD_DIMENSION}", OLD_DIMENSION)
        result = reembed_index(configured, HashingEmbedder(128), batch_size=4)
    finally:
        configured.close()

    assert result.embedded == TEXTS
    reopened = site.open(HashingEmbedder(128))
    try:
        _assert_finds_everything(reopened)
    finally:
        reopened.close()
