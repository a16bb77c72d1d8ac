"""How the service writes its index: the sources it syncs and the sync pipeline over the
primary index (and the ``[fallback]`` one), without the rest of the service.

``lore serve`` uses it in its own process for uploads, edits and deletes, and in a child
process of the lowest priority for whole syncs (``lore.web.sync_process``), which opens
the index and the embedder itself and has nothing else of the service to build.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.models import CHUNKING_STATE_KEY, RunRecord, RunTrigger, SyncReport
from lore.protocols import Embedder, KnowledgeSource, StoringBackend
from lore.resolve import mirrored_index, settings_chunker, verdict_keeper
from lore.schedule_history import RunRecorder
from lore.sources import build_source
from lore.sync import check_sources, ingest_signature, sync_sources
from lore.sync_pipeline import SyncProgress
from lore.web.managed import ManagedSources

logger = logging.getLogger(__name__)


class IndexWriter:
    def __init__(
        self,
        settings: LoreSettings,
        embedder: Embedder,
        backend: Callable[[], StoringBackend],
        fallback: StoringBackend | None = None,
    ) -> None:
        """``backend`` returns the primary index when a write needs it (the service's
        raises while it is unreachable); ``fallback`` is written beside it."""
        self.settings = settings
        self.embedder = embedder
        self._backend = backend
        self.fallback = fallback
        self.sources = ManagedSources(settings)
        self.chunker = settings_chunker(settings, embedder)
        #: The safety chain over what is written, its results kept for searches.
        self.keeper = verdict_keeper(settings)
        #: The record of the last run ``sync`` finished, however it ended.
        self.last_run: RunRecord | None = None

    def built_sources(self) -> list[KnowledgeSource]:
        """Every source that builds; one that does not (its host now resolves to this
        machine, say) is logged and left out, never failing the others (the listing says
        why: ``GET /v1/sources``)."""
        built: list[KnowledgeSource] = []
        for config, origin in self.sources.all():
            try:
                built.append(build_source(config, self.settings))
            except ConfigError as err:
                if origin == "lore.toml":
                    raise  # the operator's file: lore serve refuses it at start, as lore sync
                logger.warning("source %r left out: %s", config.name, err)
        return built

    def sources_to_sync(self, only: str | None) -> list[KnowledgeSource]:
        """Every source, or ``only``. A change of chunking settings re-chunks every source
        in one run: one source alone would record the new settings for all of them."""
        sources = self.built_sources()
        if only is not None and self.chunking_current():
            sources = [source for source in sources if source.name == only]
        return sources

    def chunking_current(self) -> bool:
        stored = self._backend().get_state(CHUNKING_STATE_KEY)
        return stored is None or stored == ingest_signature(self.chunker)

    def sync(self, sources: list[KnowledgeSource], progress: SyncProgress | None = None) -> SyncReport:
        """``sources`` through the sync pipeline, on the calling thread (its own event loop)."""
        check_sources(sources)
        backend = self._backend()
        target = mirrored_index(backend, self.fallback)
        # Recorded like every other sync, so `lore sync --history`, the schedule and
        # /metrics (the last successful sync per source) see the service's runs too.
        recorder = RunRecorder(RunTrigger.SERVICE)
        try:
            self.keeper.prune()
            asyncio.run(
                sync_sources(
                    sources,  # sync itself skips what may not be indexed (lore.sources.scope)
                    target,
                    self.embedder,
                    self.chunker,
                    progress=progress,
                    batch_size=self.settings.embedding_batch_size,
                    max_prune_fraction=self.settings.max_prune_fraction,
                    report=recorder.report,
                    keep=self.keeper,
                )
            )
            self.keeper.complete(backend)
        except BaseException as err:
            self.last_run = recorder.finish(backend, err)
            raise
        self.last_run = recorder.finish(backend)
        return recorder.report
