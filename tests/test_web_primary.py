"""``PrimaryIndex``: what ``lore serve`` holds of a primary that may be down at start, on a
clock the test moves (the real outage is tests/backends/test_fallback.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.errors import BackendUnavailableError
from lore.protocols import StoringBackend
from lore.testing.embedders import CountingEmbedder
from lore.web.primary import PrimaryIndex


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_get_retries_only_after_the_interval_and_open_always_tries(tmp_path: Path) -> None:
    clock, attempts, opened = Clock(), [0], list[StoringBackend]()
    up = [False]

    def opener() -> StoringBackend:
        attempts[0] += 1
        if not up[0]:
            raise BackendUnavailableError("PostgreSQL at 127.0.0.1:1 is unreachable")
        return SqliteBackend(tmp_path / "lore.db", CountingEmbedder())

    primary = PrimaryIndex(
        "pgvector", opener, failure=BackendUnavailableError("refused"), retry_s=10.0, clock=clock
    )
    primary.when_open(opened.append)
    with pytest.raises(BackendUnavailableError, match=r"the primary index \(pgvector\) is unreachable"):
        primary.get()
    assert attempts[0] == 0  # within the interval: answered at once, nothing attempted
    assert primary.failure == "the primary index (pgvector) is unreachable: refused"
    clock.now += 10
    with pytest.raises(BackendUnavailableError):
        primary.get()
    assert attempts[0] == 1
    with pytest.raises(BackendUnavailableError):
        primary.open()  # the breaker's probe: always an attempt
    assert attempts[0] == 2
    up[0] = True
    backend = primary.open()
    assert primary.failure is None
    assert (primary.get(), opened) == (backend, [backend])
    assert attempts[0] == 3
    primary.close()
