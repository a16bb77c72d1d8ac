"""The ``flock`` file behind the ``write_lock`` of backends whose store has no lock of its
own (Qdrant, Elasticsearch/OpenSearch): it guards the syncs of one host."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lore.errors import IndexingError, IndexLockedError


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
