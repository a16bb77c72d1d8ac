"""The one migration runner (``lore.migrations``): named steps in order, one transaction
each, a store newer than the code refused; and the stores that use it still open what
lore wrote before its migrations had names."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.backends.sqlite.schema import ACCESS_VERSION, MIGRATIONS, SCHEMA_VERSION
from lore.errors import IndexingError
from lore.events.record import EventQuery
from lore.events.sqlite_store import SIDECAR_MIGRATIONS, SqliteEventStore
from lore.migrations import Migration, UserVersion, migrate, number_of, schema, user_version
from lore.models import SearchMode
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder

FIXTURE = Path(__file__).parent / "backends" / "sqlite_index_v5.sql"

TWO = schema(
    Migration("m001_first", ("CREATE TABLE first (x)",)),
    Migration("m002_second", ("CREATE TABLE second (x)", "INSERT INTO second VALUES (1)")),
)


def _too_new(version: int, latest: int) -> IndexingError:
    return IndexingError(f"version {version} is newer than {latest}")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- the runner ----------------------------------------------------------------------------


def test_migrations_apply_in_order_and_record_the_version(tmp_path: Path) -> None:
    with closing(_connect(tmp_path / "a.db")) as conn:
        assert migrate(TWO, UserVersion(conn, _too_new)) == 2
        assert user_version(conn) == 2
        assert _tables(conn) == {"first", "second"}
        assert migrate(TWO, UserVersion(conn, _too_new)) == 2  # nothing left: nothing run again


def test_a_store_newer_than_the_code_is_refused_before_anything_changes(tmp_path: Path) -> None:
    with closing(_connect(tmp_path / "a.db")) as conn:
        conn.execute("PRAGMA user_version = 3")
        with pytest.raises(IndexingError, match="version 3 is newer than 2"):
            migrate(TWO, UserVersion(conn, _too_new))
        assert _tables(conn) == set()
        assert user_version(conn) == 3


def test_the_store_at_the_codes_version_is_not_refused(tmp_path: Path) -> None:
    """The look-alike of the refusal: equal is current, not newer."""
    with closing(_connect(tmp_path / "a.db")) as conn:
        migrate(TWO, UserVersion(conn, _too_new))
        assert migrate(TWO, UserVersion(conn, _too_new)) == 2


def test_a_failing_migration_rolls_back_itself_only(tmp_path: Path) -> None:
    broken = schema(
        TWO[0],
        Migration("m002_broken", ("CREATE TABLE second (x)", "INSERT INTO nowhere VALUES (1)")),
    )
    with closing(_connect(tmp_path / "a.db")) as conn:
        with pytest.raises(sqlite3.OperationalError):
            migrate(broken, UserVersion(conn, _too_new))
        assert user_version(conn) == 1
        assert _tables(conn) == {"first"}
        assert not conn.in_transaction
        assert migrate(TWO, UserVersion(conn, _too_new)) == 2  # the fixed step applies later


class _StaleFirstRead(UserVersion):
    """Reads the version once before another opener applied everything, as a process
    racing another one does; later reads see the truth."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn, _too_new)
        self.reads = 0

    def version(self) -> int:
        self.reads += 1
        return 0 if self.reads == 1 else super().version()


def test_the_version_is_read_again_inside_the_transaction(tmp_path: Path) -> None:
    with closing(_connect(tmp_path / "a.db")) as first, closing(_connect(tmp_path / "a.db")) as second:
        migrate(TWO, UserVersion(first, _too_new))
        ledger = _StaleFirstRead(second)
        assert migrate(TWO, ledger) == 2  # CREATE TABLE first again would raise
        assert ledger.reads == 2
        assert second.execute("SELECT count(*) FROM second").fetchone()[0] == 1


@pytest.mark.parametrize("name", ["m2_second", "m003_second", "second", "m002_Second", "m002_"])
def test_a_migration_named_out_of_place_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="migration 2"):
        schema(TWO[0], Migration(name, ("SELECT 1",)))


def test_every_schema_is_named_in_place() -> None:
    assert [m.number for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert MIGRATIONS[-1].name == "m005_events"
    assert ACCESS_VERSION == number_of(MIGRATIONS, "m004_access") == 4
    assert [m.name for m in SIDECAR_MIGRATIONS] == ["m001_events"]
    assert SIDECAR_MIGRATIONS[0].steps == MIGRATIONS[-1].steps
    with pytest.raises(KeyError):
        number_of(MIGRATIONS, "m006_nothing")


# -- the stores that use it ------------------------------------------------------------------


def _index_before_named_migrations(tmp_path: Path) -> Path:
    db = tmp_path / "lore.db"
    with closing(_connect(db)) as conn:
        conn.executescript(FIXTURE.read_text())
        assert user_version(conn) == 5
    return db


async def test_an_index_written_before_named_migrations_opens_and_searches(tmp_path: Path) -> None:
    db = _index_before_named_migrations(tmp_path)
    embedder = CountingEmbedder()
    with SqliteBackend(db, embedder) as index:
        assert index.get_state("last_sync") == "2024-05-01T12:30:00+00:00"
        for mode in index.modes:
            found = await index.retrieve("etcd quorum snapshot", top_k=1, mode=mode)
            assert [p.uri for p in found.passages] == ["runbooks/etcd.md"]
        add_document(index, embedder, "runbooks/dns.md", "dns resolution fails on the node")
        found = await index.retrieve("dns resolution", top_k=1, mode=SearchMode.BM25)
        assert [p.uri for p in found.passages] == ["runbooks/dns.md"]
    with closing(_connect(db)) as conn:
        assert user_version(conn) == SCHEMA_VERSION == 5


async def test_an_index_two_migrations_behind_is_brought_up(tmp_path: Path) -> None:
    """Version 3 (before access and events): the two named steps after it run."""
    db = _index_before_named_migrations(tmp_path)
    with closing(_connect(db)) as conn:
        for table in ("retrieval_events", "retrieval_feedback", "alert_suggestions"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("ALTER TABLE documents DROP COLUMN access")
        conn.execute("ALTER TABLE documents DROP COLUMN tenant")
        conn.execute("PRAGMA user_version = 3")
    with SqliteBackend(db, CountingEmbedder()) as index:
        found = await index.retrieve("disk pressure", top_k=2, mode=SearchMode.BM25)
        assert "runbooks/disk.md" in [p.uri for p in found.passages]
    with closing(_connect(db)) as conn:
        assert user_version(conn) == 5
        assert {"retrieval_events", "alert_suggestions"} <= _tables(conn)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(documents)")}
        assert {"access", "tenant"} <= columns


def test_an_index_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    db = _index_before_named_migrations(tmp_path)
    with closing(_connect(db)) as conn:
        conn.execute("PRAGMA user_version = 6")
    with pytest.raises(IndexingError, match="schema version 6, but this lore knows only up to 5"):
        SqliteBackend(db, CountingEmbedder())


def test_an_events_sidecar_is_migrated_once_and_a_newer_one_refused(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "events.db", sidecar=True)
    assert store.events(EventQuery()) == []
    store.close()
    with closing(_connect(tmp_path / "events.db")) as conn:
        assert user_version(conn) == 1
    again = SqliteEventStore(tmp_path / "events.db", sidecar=True)
    assert again.events(EventQuery()) == []  # opened as it is
    again.close()
    with closing(_connect(tmp_path / "events.db")) as conn:
        conn.execute("PRAGMA user_version = 2")
    newer = SqliteEventStore(tmp_path / "events.db", sidecar=True)
    with pytest.raises(IndexingError, match=r"events file .* has schema version 2"):
        newer.events(EventQuery())
    newer.close()
