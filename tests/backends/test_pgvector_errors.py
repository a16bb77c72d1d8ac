"""psycopg's errors become lore's in one place (``lore.backends.pgvector.errors.translated``):
each site names its class, what it was doing and which of the rules it wants (a server that
cannot serve, a lock waited for too long, a missing privilege), and no other module turns a
``psycopg.Error`` into a ``LoreError`` its own way.

Errors a test server cannot be made to produce on demand (a connection lost, a shutdown,
an out-of-memory) are built directly, as psycopg builds them: the class of the SQLSTATE."""

from __future__ import annotations

import ast
import re
import uuid
from pathlib import Path

import pytest

from optional_extras import require_extra
from translator_guard import translations

require_extra("psycopg", "pgvector")
require_extra("psycopg_pool", "pgvector")
require_extra("pgvector", "pgvector")

import psycopg

from lore.backends.pgvector.errors import DENIED_ADVICE, translated
from lore.backends.pgvector.events import PgEventStore
from lore.backends.pgvector.replicas import PgReplicas
from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    IndexingError,
    IndexLockedError,
    LoreError,
    RetrievalError,
)
from lore.events.record import EventQuery

SRC = Path(__file__).resolve().parents[2] / "src"
#: The one module allowed to raise a ``LoreError`` for a psycopg error it caught.
TRANSLATOR = SRC / "lore" / "backends" / "pgvector" / "errors.py"

WHERE = "PostgreSQL at 127.0.0.1:5432/lore"


def _error(sqlstate: str, message: str) -> psycopg.Error:
    """The error psycopg raises for ``sqlstate``: its class is looked up by the code."""
    return psycopg.errors.lookup(sqlstate)(message)


# -- the rules -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sqlstate",
    [
        "08006",  # connection_failure
        "08003",  # connection_does_not_exist
        "53200",  # out_of_memory
        "53300",  # too_many_connections
        "57P01",  # admin_shutdown
        "57014",  # query_canceled (statement_timeout)
        "58030",  # io_error
    ],
)
def test_a_server_that_cannot_serve_is_unavailable_where_asked(sqlstate: str) -> None:
    with (
        pytest.raises(BackendUnavailableError) as raised,
        translated(RetrievalError, WHERE, unavailable=f"{WHERE} failed"),
    ):
        raise _error(sqlstate, "the server said no\n")
    assert str(raised.value) == f"{WHERE} failed: the server said no"
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)


def test_a_lost_connection_has_no_sqlstate_and_is_unavailable() -> None:
    """libpq's own failures (refused, reset, closed) carry no SQLSTATE."""
    with (
        pytest.raises(BackendUnavailableError, match=r"^PostgreSQL at .* failed: server closed"),
        translated(IndexingError, WHERE, unavailable=f"{WHERE} failed"),
    ):
        raise psycopg.OperationalError("server closed the connection\n")


@pytest.mark.parametrize(
    ("sqlstate", "failure"),
    [
        ("42P01", IndexingError),  # undefined_table, a syntax-class error
        ("42601", RetrievalError),  # syntax_error
        ("54000", IndexingError),  # program_limit_exceeded: one row too large, an OperationalError
        ("23505", IndexingError),  # unique_violation
        ("40P01", RetrievalError),  # deadlock_detected, an OperationalError outside 08/53/57/58
    ],
)
def test_a_statements_own_failure_is_the_callers_class(sqlstate: str, failure: type[LoreError]) -> None:
    with pytest.raises(failure) as raised, translated(failure, WHERE, unavailable=f"{WHERE} failed"):
        raise _error(sqlstate, "the statement failed")
    assert type(raised.value) is failure
    assert str(raised.value) == f"{WHERE}: the statement failed"


def test_without_unavailable_everything_is_the_callers_class() -> None:
    """The event store's rule: an unreachable server is an ``IndexingError`` too, which the
    recorder counts as a dropped event."""
    for err in (_error("08006", "gone"), psycopg.OperationalError("refused"), _error("42P01", "no table")):
        with pytest.raises(IndexingError) as raised, translated(IndexingError, "cannot record"):
            raise err
        assert type(raised.value) is IndexingError


def test_a_lock_not_available_is_index_locked_only_where_asked() -> None:
    lock = _error("55P03", "canceling statement due to lock timeout")
    failed = "the index's database failed"
    with (
        pytest.raises(IndexLockedError, match=r"^another replica is writing$"),
        translated(BackendUnavailableError, failed, locked="another replica is writing"),
    ):
        raise lock
    with (
        pytest.raises(BackendUnavailableError, match=r"^the index's database failed: canceling"),
        translated(BackendUnavailableError, failed),
    ):
        raise lock
    with pytest.raises(IndexingError, match=r"^x: cancel"), translated(IndexingError, "x", unavailable="-"):
        raise lock


def test_a_missing_privilege_is_a_config_error_with_advice_only_where_asked() -> None:
    denied = _error("42501", 'permission denied to create extension "vector"')
    with (
        pytest.raises(ConfigError) as raised,
        translated(IndexingError, "prepare", denied=f"{WHERE}: cannot create lore's tables"),
    ):
        raise denied
    assert str(raised.value) == (
        f'{WHERE}: cannot create lore\'s tables (permission denied to create extension "vector"); '
        f"{DENIED_ADVICE}"
    )
    with pytest.raises(IndexingError), translated(IndexingError, "prepare"):
        raise denied


def test_other_errors_pass_through_untouched() -> None:
    with pytest.raises(IndexLockedError, match=r"^another sync$"), translated(RetrievalError, WHERE):
        raise IndexLockedError("another sync")
    with pytest.raises(KeyError), translated(RetrievalError, WHERE, unavailable="down"):
        raise KeyError("a bug")


# -- no second translator --------------------------------------------------------------------


def _driver_names(tree: ast.Module) -> set[str]:
    """Names a module binds to psycopg or psycopg_pool (``import psycopg``, ``from
    psycopg_pool import PoolTimeout``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("psycopg")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("psycopg"):
            names |= {a.asname or a.name for a in node.names}
    return names


def _translations(tree: ast.Module) -> list[int]:
    """Lines where an ``except`` clause naming psycopg (any name imported from it, so
    ``PoolTimeout`` too) raises a new error."""
    driver = _driver_names(tree)
    return translations(
        tree, lambda caught: bool({n.id for n in ast.walk(caught) if isinstance(n, ast.Name)} & driver)
    )


def test_a_second_translator_is_found_and_raising_on_is_not_one() -> None:
    second = (
        "import psycopg\nfrom psycopg_pool import PoolTimeout\n"
        "try:\n    pass\nexcept (psycopg.errors.LockNotAvailable, OSError) as err:\n"
        "    raise IndexLockedError(f'locked: {err}') from err\n"
        "except PoolTimeout as err:\n    raise BackendUnavailableError('gone') from err\n"
    )
    assert _translations(ast.parse(second)) == [6, 8]
    raised_on = (
        "import psycopg\nfrom psycopg_pool import PoolTimeout\n"
        "try:\n    pass\nexcept psycopg.Error as err:\n    conn.close()\n"
        "    if not broken:\n        raise\n    raise err\n"
        "except PoolTimeout:\n    pool.close()\n    raise\n"
        "except (BackendUnavailableError, psycopg.Error):\n    return False\n"
        "except OSError as err:\n    raise IndexingError('not the driver') from err\n"
    )
    assert _translations(ast.parse(raised_on)) == []


def test_only_the_translator_turns_a_psycopg_error_into_a_lore_error() -> None:
    modules = [path for path in sorted((SRC / "lore").rglob("*.py")) if path != TRANSLATOR]
    assert any("psycopg" in path.read_text(encoding="utf-8") for path in modules)
    found = [
        f"{path.relative_to(SRC)}:{line}"
        for path in modules
        for line in _translations(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


# -- each site's class and message, against the real server ----------------------------------


def test_a_malformed_dsn_is_a_config_error() -> None:
    from lore.backends.pgvector.backend import _where

    with pytest.raises(ConfigError, match=r"^pg_dsn is not a valid PostgreSQL connection string: "):
        _where("host=127.0.0.1 port")


def test_an_unreachable_server_is_unavailable_for_the_replicas_and_a_drop_for_events(pg_dsn: str) -> None:
    from .pg_cluster import free_port

    nowhere = f"host=127.0.0.1 port={free_port()} dbname=lore user=lore connect_timeout=2"
    with pytest.raises(BackendUnavailableError, match=r"^the index's database is unreachable: \S"):
        PgReplicas(nowhere, "lore").session("some-key")
    events = PgEventStore(nowhere, "lore", connect_timeout=1)
    with pytest.raises(IndexingError, match=r"^cannot read retrieval events in PostgreSQL index 'lore': \S"):
        events.events(EventQuery())


def test_a_statement_failing_in_the_replicas_is_unavailable_and_the_next_reconnects(pg_dsn: str) -> None:
    replicas = PgReplicas(pg_dsn, f"e{uuid.uuid4().hex[:8]}")
    try:
        with (
            pytest.raises(BackendUnavailableError, match=r"^the index's database failed: .*no_such_table"),
            replicas._conn() as conn,
        ):
            conn.execute("SELECT * FROM no_such_table")
        assert replicas._local.conn is None
    finally:
        replicas.close()


def test_the_write_turn_waited_for_too_long_is_index_locked(pg_dsn: str) -> None:
    index = f"e{uuid.uuid4().hex[:8]}"
    first, second = PgReplicas(pg_dsn, index), PgReplicas(pg_dsn, index)
    try:
        with first.write_turn(5):
            locked = r"^another replica is writing the index; it did not finish within 0 s$"
            with pytest.raises(IndexLockedError, match=locked) as raised, second.write_turn(0.3):
                pass
            assert isinstance(raised.value.__cause__, psycopg.errors.LockNotAvailable)
    finally:
        first.close()
        second.close()


def test_the_event_store_keeps_its_message_and_reconnects_after_a_broken_connection(pg_dsn: str) -> None:
    index = f"e{uuid.uuid4().hex[:8]}"
    events = PgEventStore(pg_dsn, index)
    assert events.events(EventQuery()) == []
    with psycopg.connect(pg_dsn, autocommit=True) as admin, events._connection("probe") as conn:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    dropped = rf"^cannot read retrieval events in PostgreSQL index {re.escape(repr(index))}: \S"
    with pytest.raises(IndexingError, match=dropped):
        events.events(EventQuery())
    assert events.events(EventQuery()) == []  # reconnected
