"""Process-local plumbing of the Qdrant backend: one qdrant-client per local storage
folder, and the ``flock`` file behind ``write_lock``."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from lore.backends.file_lock import FileLock
from lore.errors import IndexingError, IndexLockedError, MissingExtraError

try:
    from qdrant_client import QdrantClient
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("qdrant", err.name or "qdrant-client") from err


@dataclass
class _SharedClient:
    client: QdrantClient
    #: QdrantLocal is plain Python without locking: calls are serialised.
    guard: threading.RLock
    users: int = 0


_LOCAL_CLIENTS: dict[Path, _SharedClient] = {}
_LOCAL_CLIENTS_GUARD = threading.Lock()


def open_local(path: Path) -> _SharedClient:
    """Local mode locks its folder against every other client, even in this process, so
    backends on the same folder (a sync index and a search retriever) share one."""
    key = path.resolve()
    with _LOCAL_CLIENTS_GUARD:
        shared = _LOCAL_CLIENTS.get(key)
        if shared is None:
            try:
                key.mkdir(parents=True, exist_ok=True)
                client = QdrantClient(path=str(key))
            except RuntimeError as err:  # "already accessed by another instance"
                raise IndexLockedError(
                    f"another process has the Qdrant storage {key} open; local mode allows one "
                    "process at a time (use a Qdrant server for concurrent access)"
                ) from err
            except OSError as err:
                raise IndexingError(f"cannot open the Qdrant storage {key}: {err}") from err
            shared = _SharedClient(client, threading.RLock())
            _LOCAL_CLIENTS[key] = shared
        shared.users += 1
        return shared


def release_local(path: Path) -> None:
    key = path.resolve()
    with _LOCAL_CLIENTS_GUARD:
        shared = _LOCAL_CLIENTS.get(key)
        if shared is None:
            return
        shared.users -= 1
        if shared.users <= 0:
            del _LOCAL_CLIENTS[key]
            shared.client.close()


__all__ = ["FileLock", "open_local", "release_local"]
