"""A primary index with a keyword fallback, behind a circuit breaker (``[fallback]``).

    retrieve ──► breaker admits? ──yes──► primary (cut off at the latency budget)
                      │                      │ ok: its answer, even an empty one
                      no                     │ unreachable / too slow: breaker failure
                      ▼                      ▼
                 fallback (BM25) ◄───────────┘   answer degraded, saying so

Degraded is not empty: an answer the fallback gave says so in ``Retrieval.degraded_reason``
("the primary index (pgvector) is unreachable; these answers come from the keyword
fallback, updated ...") and ``served_by``, and the tool passes both to the agent. A
primary that answers with nothing is believed: nothing is resurrected from the fallback
for it. A refused query (``QueryError``) is the caller's mistake, never a reason to ask
the fallback.

The fallback is the embedded SQLite index that ``lore sync`` keeps in step with the
primary (``lore.backends.mirror``); ``lore.resolve.retriever_with_fallback`` builds the
pair from ``[fallback]``, and everything here takes instances. It is searched by keywords
alone: during an outage it must answer at once, without waiting on a query embedding.
Both sides are opened on first use (``LazyRetriever``), so a primary that is down when
the process starts is retried rather than fatal, and a fallback file that was never
synced is never created by a search.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from lore.access import AccessFilter
from lore.breaker import CircuitBreaker, StateListener
from lore.errors import BackendUnavailableError, QueryError, RetrievalError
from lore.models import SearchMode
from lore.protocols import KnowledgeRetriever, Retrieval

logger = logging.getLogger(__name__)

#: ``Retrieval.served_by`` of an answer from the fallback: ``fallback:<engine>``.
FALLBACK_PREFIX = "fallback:"

ALL_MODES: tuple[SearchMode, ...] = (SearchMode.HYBRID, SearchMode.BM25, SearchMode.VECTOR)


#: What the agent is told about the primary, and the error behind it (None: none to show).
_Cause = tuple[str, str | None]
_UNREACHABLE: _Cause = ("is unreachable", None)


@runtime_checkable
class Closeable(Protocol):
    """What holds a connection or a file: every storing backend, and the retrievers here."""

    def close(self) -> None: ...


class LazyRetriever:
    """A retriever opened on first use, and opened again on the next call after opening
    failed (a server that was down at start-up). ``engine``, ``modes`` and ``degraded``
    are known before it is opened, from the configuration."""

    def __init__(
        self,
        opener: Callable[[], KnowledgeRetriever],
        *,
        engine: str,
        modes: tuple[SearchMode, ...] = ALL_MODES,
        degraded: bool = False,
    ) -> None:
        self._opener = opener
        self._engine = engine
        self.modes = modes
        self._degraded = degraded
        self._opened: KnowledgeRetriever | None = None
        self._lock = threading.Lock()

    @property
    def engine(self) -> str:
        return self._engine

    @property
    def degraded(self) -> bool:
        return self._opened.degraded if self._opened is not None else self._degraded

    @property
    def opened(self) -> KnowledgeRetriever | None:
        return self._opened

    def open(self) -> KnowledgeRetriever:
        """Blocking; raises what the opener raises (``BackendUnavailableError``, ...)."""
        with self._lock:
            if self._opened is None:
                self._opened = self._opener()
            return self._opened

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        retriever = self._opened if self._opened is not None else await asyncio.to_thread(self.open)
        return await retriever.retrieve(query, top_k=top_k, labels=labels, mode=mode, access=access)

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, None
        if isinstance(opened, Closeable):  # a retrieval-only vendor may hold nothing to close
            opened.close()


class FallbackRetriever:
    """A ``KnowledgeRetriever`` over a primary and a fallback.

    ``fallback_updated``: when the fallback was last synced (ISO 8601), for the agent-facing
    reason; None when unknown. ``fallback_mode``: how the fallback is searched (BM25, the
    keyword fallback, unless it cannot)."""

    def __init__(
        self,
        primary: KnowledgeRetriever,
        fallback: KnowledgeRetriever,
        breaker: CircuitBreaker,
        *,
        fallback_updated: Callable[[], str | None] | None = None,
        fallback_mode: SearchMode = SearchMode.BM25,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.breaker = breaker
        self.modes = primary.modes
        self._fallback_updated = fallback_updated
        self._fallback_mode = fallback_mode
        self._last_failure: _Cause | None = None

    @property
    def engine(self) -> str:
        return self.primary.engine

    @property
    def degraded(self) -> bool:
        return self.primary.degraded

    @property
    def served_by_fallback(self) -> str:
        return FALLBACK_PREFIX + self.fallback.engine

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        if not self.breaker.admit():
            return await self._from_fallback(query, top_k, labels, access, self._last_failure or _UNREACHABLE)
        budget = self.breaker.latency_budget_s
        cause: _Cause
        try:
            found = await asyncio.wait_for(
                self.primary.retrieve(query, top_k=top_k, labels=labels, mode=mode, access=access),
                timeout=budget,
            )
        except QueryError:
            self.breaker.record_success()  # the store answered: the question was wrong
            raise
        except TimeoutError:
            cause = (f"did not answer within its latency budget ({budget * 1000:.0f} ms)", None)
        except BackendUnavailableError as err:
            cause = (_UNREACHABLE[0], str(err))
        except RetrievalError as err:
            cause = ("failed", str(err))
        except BaseException:
            # Not about the store (an embedder failing a vector-only search, a cancelled
            # request): the probe slot is freed and the error is the caller's to see.
            self.breaker.release()
            raise
        else:
            self.breaker.record_success()
            served_by = found.served_by or self.primary.engine
            return Retrieval(found.passages, found.degraded_reason, served_by=served_by)
        self.breaker.record_failure()
        self._last_failure = cause
        logger.warning(
            "primary index %s %s (%s); answering from the fallback", self.engine, cause[0], cause[1] or "-"
        )
        return await self._from_fallback(query, top_k, labels, access, cause)

    async def _from_fallback(
        self,
        query: str,
        top_k: int,
        labels: Mapping[str, str] | None,
        access: AccessFilter | None,
        cause: _Cause,
    ) -> Retrieval:
        mode = self._fallback_mode if self._fallback_mode in self.fallback.modes else None
        try:
            found = await self.fallback.retrieve(query, top_k=top_k, labels=labels, mode=mode, access=access)
        except QueryError:
            raise
        except Exception as err:
            raise BackendUnavailableError(
                f"the primary index ({self.engine}) {cause[0]}" + (f" ({cause[1]})" if cause[1] else "")
                + f", and its fallback ({self.fallback.engine}) cannot answer either: {err}"
            ) from err
        reason = (
            f"the primary index ({self.engine}) {cause[0]}; these answers come from the keyword "
            f"fallback, updated {await asyncio.to_thread(self._updated)}"
        )
        if cause[1]:
            reason += f" (cause: {cause[1]})"
        if found.degraded_reason:
            reason += f"; {found.degraded_reason}"
        return Retrieval(found.passages, reason, served_by=self.served_by_fallback)

    def primary_unreachable(self, cause: str) -> None:
        """The primary is known to be down (it could not be opened at start): answer from
        the fallback at once, with ``cause`` as the reason, until the breaker's probe."""
        self._last_failure = (_UNREACHABLE[0], cause)
        self.breaker.trip()

    def _updated(self) -> str:
        raw = self._fallback_updated() if self._fallback_updated is not None else None
        if not raw:
            return "at an unknown time"
        try:
            return datetime.fromisoformat(raw).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            return raw

    def close(self) -> None:
        for side in (self.primary, self.fallback):
            if isinstance(side, Closeable):
                side.close()


def log_state(engine: str) -> StateListener:
    def log(state: str) -> None:
        level = logging.INFO if state == "closed" else logging.WARNING
        logger.log(level, "circuit breaker of the primary index (%s) is now %s", engine, state)

    return log
