"""A throwaway PostgreSQL server for the pgvector rows, started exactly as the tests start
theirs: by ``tests/backends/pg_cluster.py`` (bundled server binaries, run as the
``postgres`` user when we are root, 127.0.0.1 only, removed when stopped).

The helper is loaded from its file rather than imported as ``tests.backends...``, because
``tests`` is not a package and the benchmark must not depend on pytest's import hooks.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from lore.protocols import Embedder

if TYPE_CHECKING:
    from lore.backends.pgvector import PgVectorBackend

CLUSTER_HELPER = Path(__file__).resolve().parents[1] / "tests" / "backends" / "pg_cluster.py"


def _cluster_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lore_bench_pg_cluster", CLUSTER_HELPER)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {CLUSTER_HELPER}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


@contextmanager
def postgres() -> Iterator[tuple[str | None, str | None]]:
    """``(dsn, None)`` while a server runs, or ``(None, reason)`` when none could be had.
    ``LORE_TEST_PG_DSN`` names a server of your own instead, as for the tests."""
    external = os.environ.get("LORE_TEST_PG_DSN")
    if external:
        yield external, None
        return
    try:
        for module in ("psycopg", "psycopg_pool", "pgvector"):
            __import__(module)
    except ImportError as err:
        yield None, f"the pgvector extra is not installed ({err.name})"
        return
    if not CLUSTER_HELPER.is_file():
        yield None, f"{CLUSTER_HELPER} is missing"
        return
    helper = _cluster_module()
    try:
        cluster = helper.start_cluster()
    except helper.ClusterError as err:
        yield None, f"cannot start PostgreSQL: {str(err).strip().splitlines()[0]}"
        return
    try:
        yield cluster.dsn, None
    finally:
        cluster.stop()


def fresh_pgvector(dsn: str, embedder: Embedder, index_name: str) -> PgVectorBackend:
    """An empty index: tables a crashed earlier run left behind are dropped first (the
    backend creates its tables when it is built, so it is built again after the drop)."""
    from lore.backends.pgvector import PgVectorBackend

    stale = PgVectorBackend(dsn, embedder, index_name=index_name)
    try:
        stale.drop()
    finally:
        stale.close()
    return PgVectorBackend(dsn, embedder, index_name=index_name)


def index_bytes(dsn: str, index_name: str) -> int:
    """Size of one index's tables with their indexes and TOAST, as the server stores them."""
    import psycopg

    query = (
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname = current_schema() AND c.relname LIKE %s"
    )
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, (index_name.replace("_", r"\_") + r"\_%",)).fetchone()
    return int(row[0]) if row else 0


def server_cpu(dsn: str) -> Callable[[], float] | None:
    """A reading of the CPU seconds the server at ``dsn`` has used (its postmaster, the
    children it has reaped, the live ones: backends, parallel workers), or None when its
    processes cannot be read here (a remote server). The machine may run other clusters,
    so the server is found by its own ``postmaster.pid``."""
    import psutil
    import psycopg

    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        pid = int((Path(str(row[0])) / "postmaster.pid").read_text().split()[0]) if row else 0
        postmaster = psutil.Process(pid)
    except (OSError, ValueError, IndexError, psycopg.Error, psutil.Error):
        return None

    def reading() -> float:
        total = 0.0
        for process in (postmaster, *postmaster.children()):
            try:
                times = process.cpu_times()
            except psutil.Error:  # a child that ended meanwhile is in the reaped times
                continue
            total += times.user + times.system
            if process is postmaster:
                total += times.children_user + times.children_system
        return total

    return reading
