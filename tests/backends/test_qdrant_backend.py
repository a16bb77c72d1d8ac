"""The Qdrant backend in qdrant-client's local on-disk mode: the whole conformance suite,
then the layout, sharing a folder, several indexes, locks and settings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from optional_extras import require_extra

require_extra("qdrant_client", "qdrant")

from qdrant_client import models

from lore.access import ALL_VIEWERS, AccessFilter
from lore.backends.qdrant import LAYOUT_VERSION, QdrantBackend, from_settings
from lore.config import load_settings
from lore.errors import BackendUnavailableError, ConfigError, EmbedderMismatchError, IndexLockedError
from lore.models import SearchMode
from lore.resolve import resolve_retriever
from lore.sync import run_sync
from lore.testing import DEFAULT_SOURCE, add_document
from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder

from .pg_cluster import free_port


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def backend(tmp_path: Path, embedder: CountingEmbedder) -> Iterator[QdrantBackend]:
    store = QdrantBackend(embedder, path=tmp_path / "qdrant")
    yield store
    store.close()


class TestQdrantConformance(BackendConformance):
    @pytest.fixture
    def store(self, tmp_path: Path, embedder: CountingEmbedder) -> Iterator[QdrantBackend]:
        store = QdrantBackend(embedder, path=tmp_path / "qdrant")
        yield store
        store.close()


async def test_channel_ranks_come_from_both_channels(
    backend: QdrantBackend, embedder: CountingEmbedder
) -> None:
    add_document(backend, embedder, "etcd.md", "etcdNoLeader fires when a member sees no leader")
    add_document(backend, embedder, "kafka.md", "payments-consumer-group lag grows when a partition is stuck")
    passages = (await backend.retrieve("etcdNoLeader", top_k=2)).passages
    assert passages[0].uri == "etcd.md"
    assert set(passages[0].channel_ranks) == {"bm25", "vector"}
    bm25_only = (await backend.retrieve("etcdNoLeader", top_k=2, mode=SearchMode.BM25)).passages
    assert [p.uri for p in bm25_only] == ["etcd.md"]
    assert bm25_only[0].channel_ranks == {"bm25": 1}


async def test_points_from_before_access_are_the_default_tenants_for_admins(
    backend: QdrantBackend, embedder: CountingEmbedder
) -> None:
    """Points written before access was stored carry no ``access_terms``: the default
    tenant's admins see them, viewers and other tenants do not, until a re-sync."""
    add_document(backend, embedder, "a.md", "etcd quorum lost", access=ALL_VIEWERS)
    backend._client.delete_payload("lore", ["access_terms"], models.Filter(must=[]), wait=True)
    admin, viewer = AccessFilter(None, None), AccessFilter(None, frozenset({"sre"}))
    for mode in SearchMode:
        assert [p.uri for p in (await backend.retrieve("etcd quorum", mode=mode, access=admin)).passages] == [
            "a.md"
        ]
        assert (await backend.retrieve("etcd quorum", mode=mode, access=viewer)).passages == []
        assert (
            await backend.retrieve("etcd quorum", mode=mode, access=AccessFilter("acme", None))
        ).passages == []
    add_document(backend, embedder, "a.md", "etcd quorum lost", access=ALL_VIEWERS)
    for mode in SearchMode:
        assert [
            p.uri for p in (await backend.retrieve("etcd quorum", mode=mode, access=viewer)).passages
        ] == ["a.md"]


def test_layout_is_recorded(backend: QdrantBackend, embedder: CountingEmbedder) -> None:
    backend.check_embedder(embedder.model_id, embedder.dimension)
    assert backend.stored_embedder() == (embedder.model_id, embedder.dimension)
    client = backend._client
    assert client.collection_exists("lore")
    assert client.collection_exists("lore_meta")
    info = client.get_collection("lore")
    vectors = info.config.params.vectors
    assert isinstance(vectors, dict)
    assert vectors["dense"].size == embedder.dimension
    sparse = info.config.params.sparse_vectors
    assert sparse is not None
    assert sparse["lexical"].modifier is not None
    assert sparse["lexical"].modifier.value == "idf"
    assert LAYOUT_VERSION == 1


async def test_two_indexes_share_a_folder(tmp_path: Path, embedder: CountingEmbedder) -> None:
    first = QdrantBackend(embedder, path=tmp_path / "q", index_name="first")
    second = QdrantBackend(embedder, path=tmp_path / "q", index_name="second")
    try:
        add_document(first, embedder, "first.md", "walrus colony census")
        add_document(second, embedder, "second.md", "walrus feeding grounds")
        assert set(first.held(DEFAULT_SOURCE)) == {"first.md"}
        assert [p.uri for p in (await second.retrieve("walrus")).passages] == ["second.md"]
        first.drop()
        assert [p.uri for p in (await second.retrieve("walrus")).passages] == ["second.md"]
    finally:
        first.close()
        second.close()


async def test_reopening_keeps_everything(tmp_path: Path, embedder: CountingEmbedder) -> None:
    store = QdrantBackend(embedder, path=tmp_path / "q")
    add_document(store, embedder, "a.md", "walrus colony census", revision="r7")
    store.set_state("token", "t-1")
    store.close()
    again = QdrantBackend(embedder, path=tmp_path / "q")
    try:
        assert again.held(DEFAULT_SOURCE)["a.md"].revision == "r7"
        assert again.get_state("token") == "t-1"
        assert [p.uri for p in (await again.retrieve("walrus")).passages] == ["a.md"]
    finally:
        again.close()


def test_write_lock_excludes_a_second_writer(tmp_path: Path, embedder: CountingEmbedder) -> None:
    first = QdrantBackend(embedder, path=tmp_path / "q")
    second = QdrantBackend(embedder, path=tmp_path / "q")  # same folder, same process: shared client
    try:
        with first.write_lock():
            with first.write_lock():
                pass
            with pytest.raises(IndexLockedError), second.write_lock():
                pass
        with second.write_lock():
            pass
    finally:
        first.close()
        second.close()


def test_settings_need_exactly_one_location(tmp_path: Path, embedder: CountingEmbedder) -> None:
    with pytest.raises(ConfigError, match="LORE_QDRANT_URL"):
        from_settings(load_settings(backend="qdrant"), embedder)
    with pytest.raises(ConfigError, match="not both"):
        from_settings(
            load_settings(backend="qdrant", qdrant_url="http://127.0.0.1:1", qdrant_path=tmp_path), embedder
        )


def test_unreachable_server_is_backend_unavailable(embedder: CountingEmbedder) -> None:
    with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1"):
        QdrantBackend(embedder, url=f"http://127.0.0.1:{free_port()}", timeout=2)


def test_sync_and_search_through_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lore sync`` / ``lore search`` unchanged: only LORE_BACKEND and LORE_QDRANT_PATH differ."""
    docs = tmp_path / "runbooks"
    docs.mkdir()
    (docs / "etcd.md").write_text("# etcd\n\n## No leader\n\nWhen etcdNoLeader fires, check the peers.\n")
    (docs / "kafka.md").write_text("# Kafka\n\nLag on payments-consumer-group: restart the consumer.\n")
    (tmp_path / "lore.toml").write_text(
        'qdrant_path = "index"\n'
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\nvisibility = "all-viewers"\n'
    )
    monkeypatch.setenv("LORE_BACKEND", "qdrant")
    monkeypatch.setenv("LORE_EMBEDDER", "hashing")
    monkeypatch.setenv("LORE_VAULT__ENABLED", "false")  # only the two runbooks
    settings = load_settings(tmp_path / "lore.toml")
    report = run_sync(settings)
    assert (report.added, report.failures) == (2, [])
    again = run_sync(settings)
    assert (again.unchanged, again.chunks_embedded) == (2, 0)
    assert (tmp_path / "index").is_dir()
    retriever = resolve_retriever(settings)
    assert retriever is not None
    try:
        passages = asyncio.run(retriever.retrieve("payments-consumer-group lag", top_k=1)).passages
        assert [p.uri for p in passages] == ["file://runbooks/kafka.md"]
    finally:
        retriever.close()  # type: ignore[attr-defined]


async def test_search_with_another_embedder_is_refused(tmp_path: Path, embedder: CountingEmbedder) -> None:
    store = QdrantBackend(embedder, path=tmp_path / "q")
    add_document(store, embedder, "a.md", "walrus colony census")
    other = QdrantBackend(CountingEmbedder(dimension=32), path=tmp_path / "q")
    try:
        with pytest.raises(EmbedderMismatchError, match="lore reembed"):
            await other.retrieve("walrus", mode=SearchMode.VECTOR)
        assert [p.uri for p in (await other.retrieve("walrus", mode=SearchMode.BM25)).passages] == ["a.md"]
    finally:
        other.close()
        store.close()


def test_search_without_a_local_index_does_not_create_one(tmp_path: Path) -> None:
    """``lore search`` / ``lore status`` on a qdrant_path that was never synced: a clear
    error (status: nothing synced), and no empty folder left behind to answer "no matches"."""
    from typer.testing import CliRunner

    import lore.cli.search_cmd
    import lore.cli.sync_cmd  # noqa: F401  (register the commands)
    from lore.cli.app import app

    config = tmp_path / "lore.toml"
    config.write_text('backend = "qdrant"\nqdrant_path = "index"\nembedder = "hashing"\n')
    searched = CliRunner().invoke(app, ["--config", str(config), "search", "etcd"])
    assert searched.exit_code != 0
    assert isinstance(searched.exception, ConfigError)
    assert "run `lore sync` first" in str(searched.exception)
    status = CliRunner().invoke(app, ["--config", str(config), "status"])
    assert status.exit_code == 0, status.output
    assert "never" in status.output
    assert not (tmp_path / "index").exists()


async def test_bm25_matches_the_file_name_and_inner_names(
    backend: QdrantBackend, embedder: CountingEmbedder
) -> None:
    add_document(backend, embedder, "monitoring/prometheus-is-down.md", "Log in and check the service.",
                 title="Steps to check")  # fmt: skip
    add_document(backend, embedder, "control-plane/restart.md",
                 "Restart kube-apiserver.service on each master.")  # fmt: skip
    add_document(backend, embedder, "notes.md", "Water the office plants on Fridays.")
    found = (await backend.retrieve("Prometheus is down", top_k=2, mode=SearchMode.BM25)).passages
    assert found[0].uri == "monitoring/prometheus-is-down.md"
    found = (await backend.retrieve("kube-apiserver", top_k=2, mode=SearchMode.BM25)).passages
    assert found[0].uri == "control-plane/restart.md"
