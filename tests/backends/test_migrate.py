"""``lore migrate``: SQLite to PostgreSQL and to Qdrant (and between those) without
re-embedding, checked with a counting embedder and by comparing search results."""

from __future__ import annotations

import http.server
import threading
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from lore.backends.sqlite import SqliteBackend
from lore.cli.app import app
from lore.cli.migrate_cmd import Location, migrate_between, migrate_index
from lore.config import LoreSettings
from lore.errors import ConfigError, EmbedderMismatchError, LoreError
from lore.models import SearchMode
from lore.sync import CHUNKING_STATE_KEY, LAST_SYNC_KEY, resume_token_key
from lore.testing import DEFAULT_SOURCE, add_document
from lore.testing.embedders import CountingEmbedder
from optional_extras import require_extra

QUERIES = ["etcdNoLeader alert", "payments-consumer-group lag", "TLS certificate rotation", "disk pressure"]


def _fill(index: Any, embedder: CountingEmbedder) -> None:
    add_document(
        index,
        embedder,
        "runbooks/etcd.md",
        sections=[
            ("Meaning", "The etcdNoLeader alert fires when a member sees no leader."),
            ("Fix", "Check peers."),
        ],
        title="etcd",
        labels={"team": "platform", "tags": "etcd,kubernetes"},
    )
    add_document(index, embedder, "runbooks/kafka.md", "Lag on payments-consumer-group grows.", title="Kafka")
    add_document(
        index, embedder, "runbooks/tls.md", "TLS certificate rotation with the issuer.", source="other"
    )
    add_document(index, embedder, "runbooks/disk.md", "Disk pressure: clean the image cache.", revision="r9")
    index.set_state(LAST_SYNC_KEY, "2026-11-01T00:00:00+00:00")
    index.set_state(resume_token_key(DEFAULT_SOURCE), "token-42")
    index.set_state(CHUNKING_STATE_KEY, "v2 max=64 overlap=8 window=256 tokens=estimate")


@pytest.fixture
def sqlite_index(tmp_path: Path) -> tuple[Path, CountingEmbedder]:
    embedder = CountingEmbedder()
    path = tmp_path / "lore.db"
    backend = SqliteBackend(path, embedder)
    _fill(backend, embedder)
    backend.close()
    return path, embedder


async def _results(index: Any, mode: SearchMode) -> list[list[str]]:
    return [[p.chunk_id for p in (await index.retrieve(q, top_k=3, mode=mode)).passages] for q in QUERIES]


async def _check_copy(source: Any, target: Any, target_embedder: CountingEmbedder) -> None:
    assert target_embedder.documents_embedded == 0, "migration must not re-embed"
    for name in (DEFAULT_SOURCE, "other"):
        expected = {uri: (row.revision, row.title, row.chunk_count) for uri, row in source.held(name).items()}
        got = {uri: (row.revision, row.title, row.chunk_count) for uri, row in target.held(name).items()}
        assert got == expected
    assert target.get_state(resume_token_key(DEFAULT_SOURCE)) == "token-42"
    assert target.get_state(LAST_SYNC_KEY) == "2026-11-01T00:00:00+00:00"
    # The chunks were cut by the source's chunking, so the next sync must not re-chunk.
    assert target.get_state(CHUNKING_STATE_KEY) == source.get_state(CHUNKING_STATE_KEY)
    # Same vectors, so the vector channel ranks identically; the full-text engines differ
    # in scoring, so hybrid is compared on the best hit.
    assert await _results(target, SearchMode.VECTOR) == await _results(source, SearchMode.VECTOR)
    hybrid_source, hybrid_target = (
        await _results(source, SearchMode.HYBRID),
        await _results(target, SearchMode.HYBRID),
    )
    assert [r[:1] for r in hybrid_target] == [r[:1] for r in hybrid_source]
    passages = (await target.retrieve("etcdNoLeader", top_k=1, labels={"tags": "kubernetes"})).passages
    assert passages[0].section == "Meaning"
    assert passages[0].labels["team"] == "platform"


async def test_sqlite_to_qdrant(sqlite_index: tuple[Path, CountingEmbedder], tmp_path: Path) -> None:
    require_extra("qdrant_client", "qdrant")
    from lore.backends.qdrant import QdrantBackend

    path, embedder = sqlite_index
    source = SqliteBackend(path, embedder)
    target_embedder = CountingEmbedder()
    target = QdrantBackend(target_embedder, path=tmp_path / "qdrant")
    try:
        report = migrate_index(source, target)
        assert (report.documents, report.chunks, report.state_keys) == (4, 5, 3)
        assert report.embedder == (embedder.model_id, embedder.dimension)
        await _check_copy(source, target, target_embedder)
        again = migrate_index(source, target)  # idempotent: updates the copy in place
        assert again.documents == 4
        await _check_copy(source, target, target_embedder)
    finally:
        source.close()
        target.close()


async def test_sqlite_to_pgvector_to_qdrant(
    sqlite_index: tuple[Path, CountingEmbedder], tmp_path: Path, pg_dsn: str
) -> None:
    require_extra("psycopg", "pgvector")
    require_extra("qdrant_client", "qdrant")
    from lore.backends.pgvector import PgVectorBackend
    from lore.backends.qdrant import QdrantBackend

    path, embedder = sqlite_index
    name = f"m_{uuid.uuid4().hex[:12]}"
    source = SqliteBackend(path, embedder)
    pg_embedder, qdrant_embedder = CountingEmbedder(), CountingEmbedder()
    postgres = PgVectorBackend(pg_dsn, pg_embedder, index_name=name)
    qdrant = QdrantBackend(qdrant_embedder, path=tmp_path / "qdrant")
    try:
        migrate_index(source, postgres)
        await _check_copy(source, postgres, pg_embedder)
        migrate_index(postgres, qdrant)
        await _check_copy(source, qdrant, qdrant_embedder)
    finally:
        source.close()
        postgres.drop()
        postgres.close()
        qdrant.close()


def test_target_with_another_embedder_is_refused(
    sqlite_index: tuple[Path, CountingEmbedder], tmp_path: Path
) -> None:
    require_extra("qdrant_client", "qdrant")
    from lore.backends.qdrant import QdrantBackend

    path, _ = sqlite_index
    other = CountingEmbedder(dimension=32)
    target = QdrantBackend(other, path=tmp_path / "qdrant")
    target.check_embedder(other.model_id, other.dimension)
    target.close()
    with pytest.raises(EmbedderMismatchError):
        migrate_between(Location("sqlite", str(path)), Location("qdrant", str(tmp_path / "qdrant")), "lore")


def test_cli_migrate(
    sqlite_index: tuple[Path, CountingEmbedder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_extra("qdrant_client", "qdrant")
    import lore.cli.migrate_cmd  # noqa: F401  (registers the command)

    monkeypatch.chdir(tmp_path)
    path, _ = sqlite_index
    result = CliRunner().invoke(app, ["migrate", "--from", f"sqlite:{path}", "--to", "qdrant:copy"])
    assert result.exit_code == 0, result.output
    assert "copied 4 documents, 5 chunks" in result.output
    assert "nothing re-embedded" in result.output
    assert (tmp_path / "copy").is_dir()


@pytest.mark.parametrize("spec", ["lore.db", "mysql:x", "sqlite:", "pgvector"])
def test_bad_locations_are_config_errors(spec: str) -> None:
    with pytest.raises(ConfigError, match="sqlite:<file>"):
        Location.parse(spec)


def test_missing_sqlite_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no index at"):
        migrate_between(
            Location("sqlite", str(tmp_path / "nope.db")), Location("qdrant", str(tmp_path / "q")), "lore"
        )
    assert not (tmp_path / "nope.db").exists()


def test_dsn_is_not_printed() -> None:
    location = Location.parse("pgvector:postgresql://lore:not-a-password@127.0.0.1:5432/lore")
    assert "not-a-password" not in str(location)


class _HeaderRecorder(http.server.BaseHTTPRequestHandler):
    """Stands in for a Qdrant server: records the api-key header, refuses every request."""

    seen: ClassVar[list[str | None]] = []

    def _refuse(self) -> None:
        self.seen.append(self.headers.get("api-key"))
        body = b'{"status": {"error": "forbidden"}}'
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_migrate_sends_the_configured_qdrant_api_key(sqlite_index: tuple[Path, CountingEmbedder]) -> None:
    """``lore migrate --to qdrant:http://...`` uses ``qdrant_api_key`` like every other
    command (it used to build the client by hand, without it)."""
    pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HeaderRecorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    key = "test-" + "qdrant-" + "k" * 8
    _HeaderRecorder.seen.clear()
    try:
        path, _ = sqlite_index
        base = LoreSettings(qdrant_api_key=SecretStr(key))
        target = Location("qdrant", f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(LoreError):
            migrate_between(Location("sqlite", str(path)), target, "lore", base)
    finally:
        server.shutdown()
        server.server_close()
    assert _HeaderRecorder.seen, "the target server was never asked"
    assert set(_HeaderRecorder.seen) == {key}
