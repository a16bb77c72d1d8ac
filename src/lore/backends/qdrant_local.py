"""Process-local plumbing of the Qdrant backend: one qdrant-client per local storage
folder, and the ``flock`` file behind ``write_lock``."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

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


class FileLock:
    """An exclusive, non-blocking ``flock`` on a file, re-entrant within this object. A
    second object (in this process or another) gets ``IndexLockedError``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None
        self._depth = 0
        self._guard = threading.RLock()

    @contextmanager
    def held(self, busy_message: str) -> Iterator[None]:
        with self._guard:
            if self._depth == 0:
                self._fd = self._acquire(busy_message)
            self._depth += 1
        try:
            yield
        finally:
            with self._guard:
                self._depth -= 1
                if self._depth == 0:
                    self.close()

    def _acquire(self, busy_message: str) -> int:
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise IndexingError(f"cannot open the lock file {self._path}: {err}") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            raise IndexLockedError(
                f"{busy_message} (it holds {self._path}); wait for it to finish and try again"
            ) from err
        return fd

    def close(self) -> None:
        """Release the lock (closing the descriptor drops the ``flock``)."""
        with self._guard:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._depth = 0
