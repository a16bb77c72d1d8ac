"""``lore reindex``: rebuild the embedded backend's full-text index from SQLite.

The tantivy directory beside the database is derived data; rebuilding it loses nothing
and needs no embedding. lore already repairs it on open after a crash, so this is for
a directory that was deleted, copied without the database, or damaged on disk.
"""

from __future__ import annotations

from lore.backends.sqlite import SqliteBackend
from lore.cli.app import app, console, settings
from lore.errors import ConfigError
from lore.resolve import open_backend


@app.command()
def reindex() -> None:
    """Rebuild the full-text (BM25) index of the SQLite backend from its database."""
    current = settings()
    if current.backend != "sqlite":
        raise ConfigError(
            f"`lore reindex` rebuilds the SQLite backend's full-text index; backend {current.backend!r} "
            "keeps no derived full-text data"
        )
    db_path = current.resolve_path(current.db_path)
    if not db_path.is_file():
        raise ConfigError(f"there is no index at {db_path}: run `lore sync` first")
    backend = open_backend(current)
    if not isinstance(backend, SqliteBackend):
        raise ConfigError(f"backend {current.backend!r} did not open as the SQLite backend")
    try:
        with console.status("rebuilding the full-text index"):
            count = backend.rebuild_fulltext()
    finally:
        backend.close()
    console.print(f"rebuilt the full-text index of {db_path}: {count} chunks")
