"""Prometheus metrics of lore itself, served at ``/metrics`` by ``lore serve`` and
``lore mcp --http`` (docs/observability.md, "Metrics").

Two kinds of series:

- recorded as things happen in this process: every tool call (``lore.observe``, from
  ``KnowledgeSearch.run_chain``, so ``knowledge_search`` and ``runbook_for_alert`` on
  every entry point) and every sync run this process records;
- read from the index when scraped (``IndexCollector``): documents, chunks and stale
  documents per source in one aggregate query, and the sync history, so the last
  successful sync and time to forget survive a restart and include syncs run by another
  process (``lore sync --watch``). Cached for ``INDEX_TTL_S``, so a burst of scrapes is
  one read.

Labels are low-cardinality by construction: tool, engine, mode, outcome, source name and
backend name, never query text, a uri or a principal.

Importing this module registers its watchers (``lore.observe``); only the servers do,
so ``lore search`` never pays for prometheus_client.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol, cast, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lore.errors import LoreError
from lore.models import RunRecord
from lore.observe import SearchObservation, watch_searches, watch_sync_runs
from lore.protocols import KnowledgeIndex, RunHistory, SourceStatistics
from lore.schedule_history import forget_base

logger = logging.getLogger(__name__)

#: lore's own registry: prometheus_client's global one also collects the process and
#: GC metrics of whatever embeds lore, which are not lore's to publish.
REGISTRY = CollectorRegistry(auto_describe=False)

METRICS_PATH = "/metrics"
#: Seconds a scrape reuses the last read of the index.
INDEX_TTL_S = 5.0
#: Runs of one source read back to find its last successful sync.
HISTORY_DEPTH = 50
#: ``lore_sync_runs_total`` of a run that stopped before any source started.
NO_SOURCE = "*"

BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}  # lore.breaker.BreakerState

_TOOL_LABELS = ("tool", "engine", "mode")

RETRIEVALS = Counter(
    "lore_retrievals",
    "Tool calls by outcome: ok, empty (a healthy search found nothing), degraded "
    "(a channel or the backend was missing), error (failed or refused).",
    (*_TOOL_LABELS, "outcome"),
    registry=REGISTRY,
)


def _per_call(name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
    return Histogram(name, documentation, _TOOL_LABELS, buckets=buckets, registry=REGISTRY)


RETRIEVAL_SECONDS = _per_call(
    "lore_retrieval_seconds",
    "Time from a tool call to its screened result (retrieval, rerank, safety chain).",
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
#: Normalised fusion adds two channels' [0, 1] scores; RRF's lie near 0.03.
TOP_SCORE = _per_call(
    "lore_top_score",
    "Score of the first passage of each answer that had one (the engine's own scale).",
    (0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0),
)
SYNC_RUNS = Counter(
    "lore_sync_runs",
    "Sync runs recorded by this process, per source and outcome (ok, partial, failed, skipped).",
    ("source", "outcome"),
    registry=REGISTRY,
)


def _record_search(observation: SearchObservation) -> None:
    labels = (observation.tool, observation.engine, observation.mode or "default")
    RETRIEVALS.labels(*labels, observation.outcome).inc()
    RETRIEVAL_SECONDS.labels(*labels).observe(observation.seconds)
    if observation.scores:
        TOP_SCORE.labels(*labels).observe(observation.scores[0])


def _record_sync_run(record: RunRecord) -> None:
    if not record.sources:
        SYNC_RUNS.labels(NO_SOURCE, record.status.value).inc()
    for part in record.sources:
        SYNC_RUNS.labels(part.source, part.status.value).inc()


watch_searches(_record_search)
watch_sync_runs(_record_sync_run)


# -- parts built by others, wired at merge: events dropped, circuit breakers ------------

_dropped_counters: list[Callable[[], int]] = []
_breakers: dict[str, int] = {}


class DroppingEvents(Protocol):
    """What publishes ``lore_events_dropped_total`` (``lore.events.EventRecorder``)."""

    @property
    def dropped(self) -> int: ...


def watch_events_dropped(count: Callable[[], int]) -> None:
    """``count()``, read at each scrape, is how many retrieval events were dropped so far
    (a full queue); ``lore_events_dropped_total`` is the sum over every ``count``."""
    _dropped_counters.append(count)


def watch_breaker(retriever: object, backend: str) -> None:
    """Publish the state of ``retriever``'s circuit breaker as ``lore_breaker_state``, when
    it is a ``[fallback]`` retriever (``lore.backends.fallback``); others have none."""
    from lore.backends.fallback import FallbackRetriever

    if isinstance(retriever, FallbackRetriever):
        set_breaker_state(backend, retriever.breaker.state)
        retriever.breaker.on_state_change(lambda state: set_breaker_state(backend, state))


def set_breaker_state(backend: str, state: str) -> None:
    """The circuit breaker in front of ``backend`` is now ``closed``, ``half_open`` or
    ``open`` (``lore_breaker_state`` 0, 1, 2)."""
    if state not in BREAKER_STATES:
        raise LoreError(f"unknown breaker state {state!r} (one of {', '.join(BREAKER_STATES)})")
    _breakers[backend] = BREAKER_STATES[state]


class _ProcessCollector:
    def collect(self) -> Iterator[Metric]:
        dropped = 0
        for count in tuple(_dropped_counters):
            try:
                dropped += count()
            except Exception:
                logger.exception("events-dropped counter %r failed", count)
        yield CounterMetricFamily(
            "lore_events_dropped", "Retrieval events dropped because their queue was full.", value=dropped
        )
        breaker = GaugeMetricFamily(
            "lore_breaker_state",
            "Circuit breaker per backend: 0 closed, 1 half-open, 2 open.",
            labels=["backend"],
        )
        for backend, value in sorted(_breakers.items()):
            breaker.add_metric([backend], value)
        yield breaker


REGISTRY.register(_ProcessCollector())


# -- read from the index at scrape time --------------------------------------------------


@runtime_checkable
class _StateReader(Protocol):
    def get_state(self, key: str) -> str | None: ...


def stale_before(now: datetime, stale_after_days: int) -> datetime:
    """The newest ``updated_at`` that is stale at ``now``: the tool flags a passage when
    its whole days of age exceed ``stale_after_days`` (``lore.tool.core``), that is from
    ``stale_after_days + 1`` days on."""
    return now - timedelta(days=stale_after_days + 1)


@dataclass(frozen=True)
class IndexScope:
    """What one index's gauges need from the configuration, as values
    (``lore.resolve.index_scope`` reads them): the backend's name for the breaker's
    series, the age past which a document counts stale, and the configured sources (a
    source with no document yet still gets its series)."""

    engine: str
    stale_after_days: int
    sources: tuple[str, ...]


@dataclass
class IndexSnapshot:
    up: bool = True
    documents: dict[str, int] = field(default_factory=dict)
    chunks: dict[str, int] = field(default_factory=dict)
    stale: dict[str, int] = field(default_factory=dict)
    last_success: dict[str, float] = field(default_factory=dict)
    failures_since_success: dict[str, int] = field(default_factory=dict)
    time_to_forget: dict[str, float] = field(default_factory=dict)


class IndexCollector:
    """Gauges of one index, read when scraped (at most every ``ttl`` seconds)."""

    def __init__(
        self,
        index: object,
        scope: IndexScope,
        *,
        ttl: float = INDEX_TTL_S,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._index = index
        self._scope = scope
        self._ttl = ttl
        self._now = now
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._snapshot = IndexSnapshot()

    def snapshot(self) -> IndexSnapshot:
        with self._lock:
            if time.monotonic() - self._read_at >= self._ttl:
                try:
                    self._snapshot = self._read()
                except LoreError as err:
                    logger.warning("metrics: cannot read the index: %s", err)
                    self._snapshot = IndexSnapshot(up=False)
                self._read_at = time.monotonic()
            return self._snapshot

    def _read(self) -> IndexSnapshot:
        now = self._now()
        snapshot = IndexSnapshot()
        index = self._index
        if isinstance(index, SourceStatistics):
            cutoff = stale_before(now, self._scope.stale_after_days)
            for row in index.source_statistics(cutoff):
                snapshot.documents[row.source] = row.documents
                snapshot.chunks[row.source] = row.chunks
                snapshot.stale[row.source] = row.stale
        names = sorted(set(self._scope.sources) | set(snapshot.documents))
        for name in names:
            if isinstance(index, RunHistory):
                self._read_history(index, name, snapshot)
            if isinstance(index, _StateReader):
                base = forget_base(cast("KnowledgeIndex", index), name)  # it reads get_state only
                if base is not None:
                    snapshot.time_to_forget[name] = max(0.0, (now - base).total_seconds())
        return snapshot

    @staticmethod
    def _read_history(history: RunHistory, name: str, snapshot: IndexSnapshot) -> None:
        """A run succeeded for a source when its listing ran to the end (status ok or
        partial): the index then reflects the source, but for documents reported failed."""
        failures = 0
        for run in history.runs(HISTORY_DEPTH, source=name):
            part = next((part for part in run.sources if part.source == name), None)
            if part is None:
                continue
            if part.complete:
                snapshot.last_success[name] = part.finished_at.timestamp()
                break
            failures += 1
        snapshot.failures_since_success[name] = failures

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot()
        yield GaugeMetricFamily(
            "lore_index_up", "1 when the last scrape could read the index, else 0.", value=float(snapshot.up)
        )
        yield from _per_source(
            ("lore_documents", "Documents indexed per source.", snapshot.documents),
            ("lore_chunks", "Chunks indexed per source.", snapshot.chunks),
            (
                "lore_stale_documents",
                "Documents per source older than stale_after_days (the tool's stale flag).",
                snapshot.stale,
            ),
            (
                "lore_sync_last_success_timestamp_seconds",
                "When the source's last sync whose listing completed (ok or partial) finished.",
                snapshot.last_success,
            ),
            (
                "lore_sync_failures_since_success",
                "Recorded runs of the source that failed since its last successful one "
                f"(of its last {HISTORY_DEPTH}).",
                snapshot.failures_since_success,
            ),
            (
                "lore_sync_time_to_forget_seconds",
                "Age of the source's last complete sync listing: how long a document deleted "
                "upstream may still be retrievable now.",
                snapshot.time_to_forget,
            ),
        )


def _per_source(*families: tuple[str, str, dict[str, int] | dict[str, float]]) -> Iterable[Metric]:
    for name, documentation, values in families:
        family = GaugeMetricFamily(name, documentation, labels=["source"])
        for source, value in sorted(values.items()):
            family.add_metric([source], float(value))
        yield family


_index_collector: IndexCollector | None = None
_expose_lock = threading.Lock()


def expose(index: object, scope: IndexScope) -> IndexCollector:
    """Publish ``index``'s gauges in ``REGISTRY`` (replacing any index published before:
    one process serves one index)."""
    global _index_collector
    collector = IndexCollector(index, scope)
    with _expose_lock:
        if _index_collector is not None:
            REGISTRY.unregister(_index_collector)
        REGISTRY.register(collector)
        _index_collector = collector
    return collector


async def metrics_endpoint(request: Request) -> Response:
    """``GET /metrics`` (Starlette): rendered on a worker thread, since a scrape past the
    cache reads the index."""
    body, content_type = await asyncio.to_thread(render, request.headers.get("accept"))
    return Response(body, media_type=content_type)


def metrics_route(
    index: object,
    scope: IndexScope,
    *,
    events: DroppingEvents | None = None,
    retriever: object | None = None,
) -> Route:
    """``GET /metrics`` for ``lore mcp --http`` (loopback only, no authentication, like
    the MCP endpoint beside it), publishing ``index``'s gauges, the events ``events``
    dropped and the breaker of ``retriever`` (when it has a ``[fallback]``)."""
    expose(index, scope)
    if events is not None:
        watch_events_dropped(lambda: events.dropped)
    if retriever is not None:
        watch_breaker(retriever, scope.engine)
    return Route(METRICS_PATH, metrics_endpoint, methods=["GET"])


def render(accept: str | None) -> tuple[bytes, str]:
    """The exposition body and its content type: OpenMetrics when the scraper asks for it,
    else the Prometheus text format."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(REGISTRY), content_type
