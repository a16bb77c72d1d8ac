"""``lore reindex``: rebuild the embedded backend's full-text index (and, at or above
``ann_threshold`` chunks, its approximate vector index) from SQLite.

The tantivy directory beside the database is derived data; rebuilding it loses nothing
and needs no embedding. lore already repairs it on open after a crash, so this is for
a directory that was deleted, copied without the database, or damaged on disk.
"""

from __future__ import annotations

from lore.cli.app import app, console, settings
from lore.errors import ConfigError
from lore.resolve import missing_index, open_backend


@app.command()
def reindex() -> None:
    """Rebuild the SQLite backend's full-text (BM25) and approximate vector indexes.

    Both are rebuilt from the database; the vector index only above ann_threshold chunks."""
    current = settings()
    missing = missing_index(current)
    if missing is not None:
        raise ConfigError(missing)
    backend = open_backend(current)
    if backend is None:  # pragma: no cover - "none" is reported as missing above
        raise ConfigError("backend is 'none': there is no index")
    try:
        # Declared by the backend: only the SQLite one keeps derived full-text data.
        with console.status("rebuilding the derived indexes"):
            count = backend.rebuild_fulltext()
    finally:
        backend.close()
    console.print(f"rebuilt the full-text index of the {current.backend} index: {count} chunks")
