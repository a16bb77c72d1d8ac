"""Hooks from the hot paths (the tool core, the sync run recorder) to whoever watches them.

``KnowledgeSearch.run_chain`` calls ``observe_search`` once per tool call and
``RunRecorder.finish`` calls ``observe_sync_run`` once per recorded sync run. With
nothing watching (``lore search``, ``lore sync``) a call costs one empty-list check, so
the CLI's cold start never imports prometheus_client: ``lore.metrics`` registers itself
here when it is imported, which only the servers exposing ``/metrics`` do.

A watcher that raises is logged and skipped: observing never fails a search or a sync.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from lore.models import RunRecord

logger = logging.getLogger(__name__)


class SearchObservation:
    """One tool call, as metrics see it: nothing from the query, no uri. A plain class,
    not a dataclass: this module is on ``lore search``'s cold-start path, and building a
    dataclass costs a millisecond at import."""

    __slots__ = ("degraded", "engine", "failed", "mode", "scores", "seconds", "tool")

    def __init__(
        self,
        tool: str,
        engine: str,
        mode: str | None,
        seconds: float,
        scores: tuple[float, ...],
        degraded: bool,
        failed: bool,
    ) -> None:
        self.tool = tool
        self.engine = engine
        #: The mode asked for; None: the retriever's default.
        self.mode = mode
        self.seconds = seconds
        #: Scores of the passages returned, in rank order.
        self.scores = scores
        self.degraded = degraded
        self.failed = failed

    @property
    def outcome(self) -> str:
        """``error`` (the call failed or was refused), ``degraded`` (answered, or found
        nothing, with a channel or backend missing), ``empty`` (a healthy search found
        nothing), else ``ok``. Degraded wins over empty: an empty answer during an outage
        is not evidence that nothing is written down."""
        if self.failed:
            return "error"
        if self.degraded:
            return "degraded"
        return "ok" if self.scores else "empty"


if TYPE_CHECKING:  # aliases for the checker only: subscripting Callable costs at import
    SearchWatcher = Callable[[SearchObservation], None]
    SyncWatcher = Callable[[RunRecord], None]

_search_watchers: list[SearchWatcher] = []
_sync_watchers: list[SyncWatcher] = []


def watch_searches(watcher: SearchWatcher) -> Callable[[], None]:
    """Call ``watcher`` after every tool call; returns the function that stops it."""
    _search_watchers.append(watcher)
    return lambda: _search_watchers.remove(watcher)


def watch_sync_runs(watcher: SyncWatcher) -> Callable[[], None]:
    """Call ``watcher`` with every sync run recorded in this process."""
    _sync_watchers.append(watcher)
    return lambda: _sync_watchers.remove(watcher)


def observe_search(
    tool: str,
    engine: str,
    mode: str | None,
    seconds: float,
    scores: Sequence[float],
    *,
    degraded: bool,
    failed: bool,
) -> None:
    if not _search_watchers:
        return
    observation = SearchObservation(tool, engine, mode, seconds, tuple(scores), degraded, failed)
    for watcher in tuple(_search_watchers):
        try:
            watcher(observation)
        except Exception:
            logger.exception("search watcher %r failed", watcher)


def observe_sync_run(record: RunRecord) -> None:
    for watcher in tuple(_sync_watchers):
        try:
            watcher(record)
        except Exception:
            logger.exception("sync watcher %r failed", watcher)
