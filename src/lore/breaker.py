"""A circuit breaker: stop calling a failing dependency, and find out when it is back.

    closed ──(N consecutive failures)──► open ──(cool-down passed)──► half_open
       ▲                                   ▲                              │
       └────────────(probe succeeds)───────┼──────────────────────────────┤
                                           └───────(probe fails)──────────┘

While closed every call goes through; a call that fails, or that exceeds the latency
budget (the caller cuts it off there and reports a failure), counts towards opening. While
open no call goes through, so callers answer from elsewhere at once instead of waiting for
the dependency's own timeout. After the cool-down one call at a time is let through as a
probe: its success closes the breaker, its failure opens it for another cool-down.

Written here rather than taken from pybreaker or aiobreaker: neither counts a call that
exceeds a latency budget as a failure, and both wrap the call themselves (pybreaker's
asyncio support goes through tornado), where lore needs the admit / record steps apart to
answer from a fallback in between. It is a lock and four fields.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum

logger = logging.getLogger(__name__)


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


#: Called with the new state's name after every transition (``lore.metrics`` gauges it).
StateListener = Callable[[str], None]


class CircuitBreaker:
    """Thread-safe; ``clock`` is monotonic seconds (tests pass their own)."""

    def __init__(
        self,
        *,
        failures: int = 3,
        latency_budget_s: float = 2.0,
        cooldown_s: float = 30.0,
        on_state_change: StateListener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failures < 1 or latency_budget_s <= 0 or cooldown_s < 0:
            raise ValueError("failures must be >= 1, latency_budget_s > 0 and cooldown_s >= 0")
        self.failures = failures
        self.latency_budget_s = latency_budget_s
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._consecutive = 0
        self._opened_at = 0.0
        self._probing = False
        self._listeners: list[StateListener] = [on_state_change] if on_state_change else []

    def on_state_change(self, listener: StateListener) -> None:
        """Also call ``listener`` after every transition."""
        with self._lock:
            self._listeners.append(listener)

    @property
    def state(self) -> str:
        with self._lock:
            return self._state.value

    @property
    def consecutive_failures(self) -> int:
        with self._lock:
            return self._consecutive

    def admit(self) -> bool:
        """Whether this call may go to the dependency. True while closed; while open, False
        until the cool-down has passed, then True for exactly one probe at a time."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return True
            if self._probing:
                return False
            if self._state is BreakerState.OPEN and self._clock() - self._opened_at < self.cooldown_s:
                return False
            self._probing = True
            changed = self._move(BreakerState.HALF_OPEN)
        self._notify(changed)
        return True

    def record_success(self) -> None:
        with self._lock:
            self._consecutive = 0
            self._probing = False
            changed = self._move(BreakerState.CLOSED)
        self._notify(changed)

    def record_failure(self) -> None:
        with self._lock:
            self._consecutive += 1
            self._probing = False
            changed = None
            if self._state is BreakerState.HALF_OPEN or self._consecutive >= self.failures:
                # A failed probe restarts the cool-down, as a fresh opening does.
                self._opened_at = self._clock()
                changed = self._move(BreakerState.OPEN)
        self._notify(changed)

    def trip(self) -> None:
        """Open now, as ``failures`` consecutive failures would: the dependency is known to
        be down (``lore serve`` found it unreachable at start), so no call need wait for it
        before the cool-down's probe."""
        with self._lock:
            self._consecutive = max(self._consecutive, self.failures)
            self._probing = False
            self._opened_at = self._clock()
            changed = self._move(BreakerState.OPEN)
        self._notify(changed)

    def release(self) -> None:
        """An admitted call that says nothing about the dependency's health (a refused
        query, an embedder failure before the store was asked): a probe slot is freed,
        nothing else changes."""
        with self._lock:
            self._probing = False

    def _move(self, state: BreakerState) -> BreakerState | None:
        if state is self._state:
            return None
        self._state = state
        return state

    def _notify(self, changed: BreakerState | None) -> None:
        # Outside the lock: a listener may read the state (or be slow) without deadlocking.
        if changed is None:
            return
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(changed.value)
            except Exception:  # an observer's bug must not change what the breaker decides
                logger.exception("circuit breaker listener failed")
