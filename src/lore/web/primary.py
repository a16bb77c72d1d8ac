"""The primary index of ``lore serve``, which may be unreachable when the service starts.

With a ``[fallback]`` configured, a primary (PostgreSQL) that is down at start must not
stop the service: searches answer from the keyword fallback, saying so, exactly as in an
outage during service, and the primary is opened once it is back. ``PrimaryIndex`` holds
the backend once it is open, and the way to open it until then.

Two ways in, because two kinds of caller want different things of a down server:

- ``open()``: always tries (the search path's ``LazyRetriever``, behind the circuit
  breaker, which already paces its probes: one at a time, a cool-down between them);
- ``get()``: what every other use of the index (sync, history, document reads) calls; it
  tries at most every ``retry_s`` seconds and never waits for an attempt in progress,
  because opening a PostgreSQL pool that is down waits for its connect timeout (5 s)
  and ``GET /v1/sync`` must not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lore.errors import BackendUnavailableError
from lore.protocols import StoringBackend

logger = logging.getLogger(__name__)

#: Seconds between two attempts of ``get()`` to open a primary that was down.
RETRY_S = 10.0

Opened = Callable[[StoringBackend], None]


class PrimaryIndex:
    def __init__(
        self,
        engine: str,
        opener: Callable[[], StoringBackend],
        *,
        opened: StoringBackend | None = None,
        failure: BackendUnavailableError | None = None,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self._opener = opener
        self._backend = opened
        self._failure = failure
        self._retry_s = retry_s
        self._clock = clock
        self._failed_at = clock() if failure is not None else 0.0
        self._lock = threading.Lock()
        self._listeners: list[Opened] = []

    @property
    def opened(self) -> StoringBackend | None:
        return self._backend

    @property
    def failure(self) -> str | None:
        """Why the primary is not open (None: it is)."""
        return None if self._backend is not None or self._failure is None else str(self._unavailable())

    def when_open(self, listener: Opened) -> None:
        """Call ``listener`` with the backend once it is open (now, if it is)."""
        with self._lock:
            backend = self._backend
            if backend is None:
                self._listeners.append(listener)
        if backend is not None:
            listener(backend)

    def get(self) -> StoringBackend:
        """The backend, or ``BackendUnavailableError`` at once while it is down."""
        backend = self._backend
        if backend is not None:
            return backend
        if self._clock() - self._failed_at < self._retry_s or not self._lock.acquire(blocking=False):
            raise self._unavailable()
        try:
            return self._open_locked()
        finally:
            self._lock.release()

    def open(self) -> StoringBackend:
        """The backend, opening it now if it is not (blocking: a connect timeout)."""
        backend = self._backend
        if backend is not None:
            return backend
        with self._lock:
            return self._open_locked()

    def _open_locked(self) -> StoringBackend:
        if self._backend is not None:
            return self._backend
        try:
            backend = self._opener()
        except BackendUnavailableError as err:
            self._failure, self._failed_at = err, self._clock()
            raise
        self._backend, self._failure = backend, None
        listeners, self._listeners = self._listeners, []
        logger.warning("the primary index (%s) is reachable again and open", self.engine)
        for listener in listeners:
            listener(backend)
        return backend

    def _unavailable(self) -> BackendUnavailableError:
        cause = f": {self._failure}" if self._failure is not None else ""
        return BackendUnavailableError(f"the primary index ({self.engine}) is unreachable{cause}")

    def close(self) -> None:
        with self._lock:
            backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()
