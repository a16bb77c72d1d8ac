"""The composition root: the one place that turns settings into parts.

    settings ─► resolve_embedder ──────► Embedder
             ─► open_backend ──────────► StoringBackend (one store: index and retriever)
             ─► resolve_retriever ─────► KnowledgeRetriever; with [fallback], FallbackRetriever
             ─► writable_index ────────► KnowledgeIndex; with [fallback], MirroredIndex
                                          (mirrored_index, for indexes already open)
             ─► settings_chunker ──────► Chunker
             ─► event_store_for, recorder_for, configured_event_store ─► EventStore, EventRecorder
             ─► resolve_reranker ──────► Reranker (or None)
             ─► audit_log, server_audit_log ─► AuditLog
             ─► tool_policy, source_weights ─► ToolPolicy (what the tool's settings decide)
             ─► knowledge_search, build_knowledge_search ─► KnowledgeSearch (the safety chain)
             ─► index_scope ───────────► IndexScope (what /metrics needs of the settings)
             ─► private_files ─────────► the umask and modes of what lore writes
             ─► open_replicas ─────────► Replicas (what lore serve replicas share), or None
    OTEL_* ─► install_tracing ────────► spans of every search over OTLP (lore.otel), or none

The CLI, ``lore serve`` and its sync child, ``lore mcp``, ``lore eval`` and the adapters
ask it for their parts; the parts themselves (``FallbackRetriever``, ``MirroredIndex``,
``KnowledgeSearch``, the backends' classes) take instances. Backend and embedder names
appear here and inside each backend's own package, nowhere else
(tests/test_import_graph.py holds the layers this sits in, and which modules may read
the settings: this one, the settings' own modules, the entry points and jobs that load
them, and the factories this module calls by name).

Backends and embedders are imported lazily, so a missing optional extra only matters when
that part is chosen. Each backend module offers the functions of
``lore.backends.BackendModule`` (``from_settings``, ``missing_index``, ...); each embedder
module exposes ``from_settings(settings)``. The other parts are imported inside the
functions that build them too: a cold ``lore search`` pays only for what it uses.
"""

from __future__ import annotations

import enum
import importlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, cast

from lore.backends import BackendModule, StoredVectorsEmbedder
from lore.config import LoreSettings
from lore.errors import BackendUnavailableError, ConfigError, LoreError
from lore.protocols import (
    Embedder,
    EventStore,
    EventStoring,
    KnowledgeIndex,
    KnowledgeRetriever,
    Replicas,
    Reranker,
    StoringBackend,
)

if TYPE_CHECKING:
    from lore.backends.fallback import FallbackRetriever
    from lore.breaker import StateListener
    from lore.chunking import Chunker
    from lore.events.recorder import EventRecorder
    from lore.events.sqlite_store import SqliteEventStore
    from lore.metrics import IndexScope
    from lore.safety.audit import AuditLog, JsonlAuditLog
    from lore.safety.audit_writer import QueuedAuditLog
    from lore.safety.verdicts import VerdictStore
    from lore.tool.cleaning import VerdictKeeper
    from lore.tool.core import KnowledgeSearch
    from lore.tool.policy import ToolPolicy

#: The embedded backend: a file beside the configuration, no server.
DEFAULT_BACKEND = "sqlite"
#: Backend name -> module. A backend that stores data implements both seams.
BACKENDS: dict[str, str] = {
    "sqlite": "lore.backends.sqlite",
    "pgvector": "lore.backends.pgvector",
    "qdrant": "lore.backends.qdrant",
    # One module for both: the differences are a dialect inside it.
    "elasticsearch": "lore.backends.elasticsearch",
    "opensearch": "lore.backends.elasticsearch",
}
#: Backend name -> module of a managed vendor that ingests through its own connectors:
#: the retrieval seam only (``from_settings(settings)`` gives a ``KnowledgeRetriever``),
#: so sync skips it and migrate, reembed and reindex refuse it.
RETRIEVAL_ONLY: dict[str, str] = {
    "discovery_engine": "lore.backends.discovery_engine",
}
#: Backends that search text by themselves, so ``embedder = "none"`` (keyword search
#: only) makes sense for them; every other one needs a vector for each chunk.
EMBEDDERLESS_BACKENDS = frozenset({"elasticsearch", "opensearch", *RETRIEVAL_ONLY})
#: ``LORE_BACKEND=none``: no corpus, so integrations attach no search tool.
NO_BACKEND = "none"
#: Backends without an event store of their own: their retrieval events go to a sidecar
#: SQLite file in the data directory (``lore.events.sqlite_store.SIDECAR_NAME``).
SIDECAR_EVENT_BACKENDS = frozenset({"qdrant", "elasticsearch", "opensearch", *RETRIEVAL_ONLY})

EMBEDDERS: dict[str, str] = {
    "local": "lore.embedders.local",
    "hashing": "lore.embedders.hashing",
    "openai": "lore.embedders.openai",
    "gemini": "lore.embedders.gemini",
    "ollama": "lore.embedders.ollama",
    "litellm": "lore.embedders.litellm",
    "none": "lore.embedders.none",
}


def _module(kind: str, name: str, registry: dict[str, str], extra: list[str]) -> ModuleType:
    if name not in registry:
        valid = ", ".join([*registry, *extra])
        raise ConfigError(f"unknown {kind} {name!r}; valid names: {valid}")
    return importlib.import_module(registry[name])


def resolve_embedder(settings: LoreSettings) -> Embedder:
    if settings.backend in RETRIEVAL_ONLY:
        # A managed vendor embeds queries itself: no model is loaded (or installed) for it.
        return cast(Embedder, importlib.import_module(EMBEDDERS["none"]).from_settings(settings))
    if settings.embedder == "none" and settings.backend not in EMBEDDERLESS_BACKENDS:
        allowed = ", ".join(sorted(EMBEDDERLESS_BACKENDS))
        raise ConfigError(
            f"embedder 'none' (keyword search only) needs a backend that searches text by itself "
            f"({allowed}); backend {settings.backend!r} stores a vector for every chunk"
        )
    module = _module("embedder", settings.embedder, EMBEDDERS, [])
    embedder: Embedder = module.from_settings(settings)
    return embedder


def backend_module(name: str) -> BackendModule:
    """The module of backend ``name`` (``ConfigError`` for an unknown name or ``none``)."""
    if name in RETRIEVAL_ONLY:
        raise ConfigError(retrieval_only_refusal(name))
    # Each module is checked against BackendModule where it is defined (a typed
    # assignment at its end), so the cast only names what the import cannot know.
    return cast(BackendModule, _module("backend", name, BACKENDS, [NO_BACKEND, *RETRIEVAL_ONLY]))


def retrieval_only_refusal(name: str) -> str:
    return (
        f"backend {name!r} is retrieval-only: the vendor ingests through its own connectors, so "
        "lore writes nothing there (sync, migrate, reembed and reindex do not apply to it)"
    )


def open_backend(settings: LoreSettings, embedder: Embedder | None = None) -> StoringBackend | None:
    """The configured store; ``None`` for ``backend = "none"``. The embedder is built
    from settings only when none is passed in."""
    if settings.backend == NO_BACKEND:
        return None
    module = backend_module(settings.backend)
    return module.from_settings(settings, embedder if embedder is not None else resolve_embedder(settings))


#: Backends whose database can hold what ``lore serve`` replicas share (``Replicas``).
REPLICA_BACKENDS = frozenset({"pgvector"})


def open_replicas(settings: LoreSettings) -> Replicas | None:
    """Sessions, the write turn, the scheduler's lease and the sync queue in the index's
    own database, for any number of ``lore serve`` processes over it; None for a backend
    without one (the SQLite default: one process keeps them in memory)."""
    if settings.backend not in REPLICA_BACKENDS or settings.pg_dsn is None:
        return None
    from lore.backends.pgvector.replicas import open_replicas as open_pg_replicas

    return open_pg_replicas(settings.pg_dsn.get_secret_value(), settings.index_name)


#: Backends whose location (``lore migrate --from/--to``) may carry a password: shown by
#: their name alone.
SECRET_LOCATIONS = frozenset({"pgvector"})


def shown_location(backend: str, target: str) -> str:
    """``backend:target`` as a command may print it (a DSN's password never is)."""
    return f"{backend}:<dsn>" if backend in SECRET_LOCATIONS else f"{backend}:{target}"


def is_retrieval_only(settings: LoreSettings) -> bool:
    return settings.backend in RETRIEVAL_ONLY


def missing_index(settings: LoreSettings) -> str | None:
    """Why the configured index certainly does not exist yet (so a read-only command must
    not open, and thereby create, it), or None."""
    if settings.backend == NO_BACKEND:
        return "backend is 'none': there is no index"
    if settings.backend in RETRIEVAL_ONLY:
        return None  # the vendor's index: whether it exists is found by searching it
    return backend_module(settings.backend).missing_index(settings)


def open_for_inspection(settings: LoreSettings) -> tuple[StoringBackend | None, str | None]:
    """The configured index opened to be looked at (``lore status``, ``lore sources``),
    and what is wrong with the configured embedder for it, if anything.

    It is opened with a stand-in for the embedder it was built with, so a mismatch with
    the configured one is reported rather than refused: that is exactly when someone runs
    ``lore status``. None when no index exists yet."""
    if missing_index(settings) is not None or settings.backend in RETRIEVAL_ONLY:
        return None, None
    module = backend_module(settings.backend)
    stored = module.stored_embedder_of(settings)
    if stored is None:
        return module.from_settings(settings, resolve_embedder(settings)), None
    configured = resolve_embedder(settings)
    problem = None
    if configured.model_id != stored[0] or configured.dimension != stored[1]:
        problem = (
            f"the index was built with {stored[0]!r} ({stored[1]} dimensions) but the configured embedder is "
            f"{configured.model_id!r} ({configured.dimension} dimensions): searches and syncs refuse it; "
            "configure the original embedder, or run `lore reembed`"
        )
    return module.from_settings(settings, StoredVectorsEmbedder(*stored)), problem


def resolve_index(settings: LoreSettings, embedder: Embedder | None = None) -> KnowledgeIndex | None:
    return open_backend(settings, embedder)


def primary_retriever(settings: LoreSettings, embedder: Embedder | None = None) -> KnowledgeRetriever | None:
    """The configured backend's retriever, without any ``[fallback]``."""
    if settings.backend in RETRIEVAL_ONLY:
        # A managed vendor embeds queries itself: no embedder is built for it.
        module = importlib.import_module(RETRIEVAL_ONLY[settings.backend])
        retriever: KnowledgeRetriever = module.from_settings(settings)
        return retriever
    return open_backend(settings, embedder)


def resolve_retriever(settings: LoreSettings, embedder: Embedder | None = None) -> KnowledgeRetriever | None:
    """The configured retriever; with ``[fallback]``, a ``FallbackRetriever`` that opens
    the backend on first use and answers from the fallback index while it cannot."""
    if settings.fallback is not None and settings.backend != NO_BACKEND:
        return retriever_with_fallback(settings, embedder or resolve_embedder(settings))
    return primary_retriever(settings, embedder)


# -- [fallback]: the keyword index beside the primary ------------------------------------


def fallback_settings(settings: LoreSettings) -> LoreSettings:
    """Settings that open the ``[fallback]`` index as the backend (its path relative to
    lore.toml, like ``db_path``); everything else (fusion, boosts, embedder) as configured."""
    if settings.fallback is None:
        raise ConfigError("no [fallback] table is configured")
    return settings.model_copy(
        update={"backend": settings.fallback.backend, "db_path": settings.fallback.db_path, "fallback": None}
    )


def open_fallback_index(settings: LoreSettings, embedder: Embedder) -> StoringBackend | None:
    """The ``[fallback]`` index opened to be written (created when missing), or None when
    none is configured."""
    if settings.fallback is None:
        return None
    return open_backend(fallback_settings(settings), embedder)


def _fallback_reader(settings: LoreSettings, embedder: Embedder) -> KnowledgeRetriever:
    where = fallback_settings(settings)
    module = backend_module(where.backend)
    missing = module.missing_index(where)
    if missing is not None:
        # Never created by a search: an empty fallback would answer "nothing found".
        raise BackendUnavailableError(f"the fallback index was never synced ({missing})")
    return module.from_settings(where, embedder)


def _primary_reader(settings: LoreSettings, embedder: Embedder) -> KnowledgeRetriever:
    retriever = primary_retriever(settings, embedder)
    if retriever is None:
        raise ConfigError('backend "none" has no index to fall back from')
    return retriever


def retriever_with_fallback(
    settings: LoreSettings,
    embedder: Embedder,
    *,
    primary: KnowledgeRetriever | None = None,
    open_primary: Callable[[], KnowledgeRetriever] | None = None,
    fallback: KnowledgeRetriever | None = None,
    on_state_change: StateListener | None = None,
) -> FallbackRetriever:
    """The configured backend and the ``[fallback]`` index behind a circuit breaker
    configured by ``[fallback]``. ``primary`` when it is already open, else opened on first
    use (by ``open_primary`` when given); ``fallback`` likewise (never created by a
    search). ``on_state_change`` is also told every breaker transition (metrics)."""
    from lore.backends.fallback import FallbackRetriever, LazyRetriever, log_state
    from lore.breaker import CircuitBreaker

    config = settings.fallback
    if config is None:
        raise ConfigError("no [fallback] table is configured")
    breaker = CircuitBreaker(
        failures=config.failures,
        latency_budget_s=config.latency_budget_ms / 1000.0,
        cooldown_s=config.cooldown_s,
        on_state_change=log_state(settings.backend),
    )
    if on_state_change is not None:
        breaker.on_state_change(on_state_change)
    if primary is None:
        opener = open_primary or (lambda: _primary_reader(settings, embedder))
        primary = LazyRetriever(opener, engine=settings.backend, degraded=embedder.degraded)
    lazy = None
    if fallback is None:
        fallback = lazy = LazyRetriever(
            lambda: _fallback_reader(settings, embedder), engine=config.backend, degraded=embedder.degraded
        )
    held = fallback

    def updated() -> str | None:
        from lore.models import LAST_SYNC_KEY

        opened = lazy.opened if lazy is not None else held
        return opened.get_state(LAST_SYNC_KEY) if isinstance(opened, KnowledgeIndex) else None

    return FallbackRetriever(primary, fallback, breaker, fallback_updated=updated)


# -- the write side ------------------------------------------------------------------------


def writable_index(settings: LoreSettings, embedder: Embedder) -> KnowledgeIndex:
    """The configured index; with ``[fallback]``, a ``MirroredIndex`` that writes the
    fallback index too (the primary alone, reported, when the fallback cannot be opened)."""
    from lore.backends.mirror import MirroredIndex

    index = resolve_index(settings, embedder)
    if index is None:
        raise ConfigError(f"backend {settings.backend!r} cannot be written to, so there is nothing to sync")
    if settings.fallback is None:
        return index
    try:
        fallback = open_fallback_index(settings, embedder)
    except LoreError as err:
        return MirroredIndex(index, None, fallback_problem=f"cannot open it ({err}); it was not updated")
    return MirroredIndex(index, fallback)


def mirrored_index(primary: KnowledgeIndex, fallback: KnowledgeIndex | None) -> KnowledgeIndex:
    """What a write goes to: ``primary``, and the ``[fallback]`` index beside it when one
    is open (``lore serve``'s writer holds both)."""
    from lore.backends.mirror import MirroredIndex

    return primary if fallback is None else MirroredIndex(primary, fallback)


def settings_chunker(settings: LoreSettings, embedder: Embedder) -> Chunker:
    """The chunker every write uses: sync, the service's uploads, ``lore eval``'s index."""
    from lore.chunking import Chunker

    return Chunker.for_embedder(
        embedder, max_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap
    )


def scratch_index(settings: LoreSettings, db_path: Path, embedder: Embedder) -> StoringBackend:
    """An embedded index in ``db_path`` whatever the configured backend (``lore eval
    beir``'s benchmark corpus must never land in a shared server index); the other
    settings (fusion, boosts, chunking) as configured."""
    local = settings.model_copy(update={"backend": DEFAULT_BACKEND, "db_path": db_path.resolve()})
    return backend_module(DEFAULT_BACKEND).from_settings(local, embedder)


# -- retrieval events ----------------------------------------------------------------------


def _sidecar_store(settings: LoreSettings) -> SqliteEventStore:
    from lore.events.sqlite_store import SIDECAR_NAME, SqliteEventStore

    return SqliteEventStore(settings.resolved_data_dir() / SIDECAR_NAME, sidecar=True)


def event_store_for(settings: LoreSettings, retriever: KnowledgeRetriever) -> EventStore | None:
    """Where a tool's events go: the open backend's own store (SQLite: the index file;
    pgvector: tables in its database), the sidecar file of a backend without one, or
    nowhere when ``[events] enabled = false`` (or for a retriever lore does not know)."""
    if not settings.events.enabled:
        return None
    if isinstance(retriever, EventStoring):
        return retriever.event_store()
    if settings.backend in SIDECAR_EVENT_BACKENDS:
        return _sidecar_store(settings)
    return None


def recorder_for(settings: LoreSettings, retriever: KnowledgeRetriever) -> EventRecorder:
    from lore.events.recorder import EventRecorder

    events = settings.events
    return EventRecorder(
        event_store_for(settings, retriever), capacity=events.queue_size, retention_days=events.retention_days
    )


def configured_event_store(settings: LoreSettings) -> EventStore:
    """The store of ``settings`` for the commands that read or prune it, opened without
    an embedder or a backend (``lore events``, ``lore feedback``, ``lore eval
    from-feedback``)."""
    if settings.backend in SIDECAR_EVENT_BACKENDS:
        return _sidecar_store(settings)
    if settings.backend in BACKENDS:
        found: EventStore | None = backend_module(settings.backend).event_store_of(settings)
        if found is not None:
            return found
    raise ConfigError(f"the {settings.backend} backend keeps no retrieval events")


# -- the tool and its safety chain ---------------------------------------------------------

COHERE_BASE_URL = "https://api.cohere.com"
_RERANKING_OFF = ("", "none", "off")


def resolve_reranker(settings: LoreSettings) -> Reranker | None:
    """The configured reranker, or None when reranking is off (``lore.rerankers``)."""
    from lore.rerankers import RERANKERS

    name = (settings.reranker or "").strip().lower()
    if name in _RERANKING_OFF:
        return None
    if name in ("http", "cohere"):
        from lore.rerankers.http import HttpReranker

        url = settings.reranker_url or (COHERE_BASE_URL if name == "cohere" else None)
        if not url:
            raise ConfigError("reranker 'http' needs reranker_url (LORE_RERANKER_URL)")
        if not settings.reranker_model:
            raise ConfigError(f"reranker {name!r} needs reranker_model (LORE_RERANKER_MODEL)")
        key = settings.reranker_api_key.get_secret_value() if settings.reranker_api_key else None
        return HttpReranker(url, settings.reranker_model, key)
    if name == "cross-encoder":
        from lore.rerankers.cross_encoder import CrossEncoderReranker

        if not settings.reranker_model:
            raise ConfigError("reranker 'cross-encoder' needs reranker_model: the model's local directory")
        path = settings.resolve_path(Path(settings.reranker_model))
        if not path.is_dir():
            raise ConfigError(
                f"cross-encoder model directory not found: {path} (models are never downloaded)"
            )
        return CrossEncoderReranker(path)
    raise ConfigError(f"unknown reranker {settings.reranker!r}; valid names: {', '.join(RERANKERS)}, none")


def audit_log(settings: LoreSettings) -> JsonlAuditLog:
    """The configured audit file (``audit_path``, relative to lore.toml)."""
    from lore.safety.audit import JsonlAuditLog

    return JsonlAuditLog(settings.resolve_path(settings.audit_path))


def server_audit_log(settings: LoreSettings) -> QueuedAuditLog:
    """The configured audit file behind a writer thread (``lore.safety.audit_writer``), for
    a server's concurrent searches."""
    from lore.safety.audit_writer import QueuedAuditLog

    return QueuedAuditLog(audit_log(settings))


def source_weights(settings: LoreSettings) -> dict[str, float]:
    """The configured priorities that are not 1 (an empty mapping changes nothing;
    ``lore.priority``)."""
    from lore.sources import VAULT_NAME

    weights = {source.name: source.weight for source in settings.sources if source.weight != 1.0}
    if settings.vault.enabled and settings.vault.weight != 1.0:
        weights[VAULT_NAME] = settings.vault.weight
    return weights


def tool_policy(settings: LoreSettings) -> ToolPolicy:
    """What the settings decide for the tools (``KnowledgeSearch``, ``runbook_for_alert``)."""
    from lore.confidence import Confidence
    from lore.tool.policy import ToolPolicy

    return ToolPolicy(
        top_k=settings.top_k,
        min_confidence=Confidence(settings.min_confidence),
        stale_after_days=settings.stale_after_days,
        safety=settings.safety,
        source_weights=source_weights(settings),
        alerts=settings.alerts,
        source_types={source.name: source.type for source in settings.sources},
        index_name=settings.index_name,
        skill_sources=tuple(settings.sources),
        vault_skills=settings.vault.skills,
    )


class _Configured(enum.Enum):
    TOKEN = "configured"


#: ``knowledge_search(reranker=...)`` default: the reranker the settings configure.
CONFIGURED = _Configured.TOKEN


def knowledge_search(
    settings: LoreSettings,
    retriever: KnowledgeRetriever,
    *,
    reranker: Reranker | _Configured | None = CONFIGURED,
    audit: AuditLog | None = None,
    events: EventRecorder | None = None,
) -> KnowledgeSearch:
    """The tool over ``retriever``, with the reranker, audit log and event recorder the
    settings configure unless given (``reranker``: one already built, None for none, by
    default the configured one; ``ConfigError`` when its settings are incomplete)."""
    from lore.tool.core import KnowledgeSearch

    chosen = resolve_reranker(settings) if reranker is CONFIGURED else reranker
    assert not isinstance(chosen, _Configured)
    return KnowledgeSearch(
        retriever,
        policy=tool_policy(settings),
        reranker=chosen,
        audit=audit if audit is not None else audit_log(settings),
        events=events if events is not None else recorder_for(settings, retriever),
        verdicts=chain_verdicts(settings, create=False),
    )


def chain_verdicts(settings: LoreSettings, *, create: bool = True) -> VerdictStore:
    """Where the safety chain's results are kept (``lore.safety.verdicts``): a file in
    the data directory, whatever the backend; ``create`` False for a search's (it reads
    and writes back only a file a sync made)."""
    from lore.safety.verdicts import SIDECAR_NAME, VerdictStore

    return VerdictStore(settings.resolved_data_dir() / SIDECAR_NAME, create=create)


def verdict_keeper(settings: LoreSettings) -> VerdictKeeper:
    """What a sync hands the chunks it writes: the chain under the tools' settings, whose
    results it keeps for searches to read."""
    from lore.tool.cleaning import PassageCleaner, VerdictKeeper

    return VerdictKeeper(PassageCleaner(tool_policy(settings), chain_verdicts(settings)))


def build_knowledge_search(
    settings: LoreSettings | None = None, embedder: Embedder | None = None, *, audit: AuditLog | None = None
) -> KnowledgeSearch | None:
    """The configured tool, or None when ``backend = "none"`` (integrations then attach
    no search tool). Configuration problems raise ``ConfigError``. The embedder is built
    from settings unless one is passed in."""
    from lore.config import load_settings

    settings = settings if settings is not None else load_settings()
    if settings.backend == NO_BACKEND:
        return None
    # Before the retriever, so a bad reranker setting leaves no store open behind it.
    reranker = resolve_reranker(settings)
    retriever = resolve_retriever(settings, embedder)
    if retriever is None:
        return None
    return knowledge_search(settings, retriever, reranker=reranker, audit=audit)


# -- what the commands that write and serve need -------------------------------------------


def index_scope(settings: LoreSettings) -> IndexScope:
    """What ``/metrics`` needs of the settings for the index's gauges (``lore.metrics``)."""
    from lore.metrics import IndexScope
    from lore.sources import source_configs

    names = tuple(config.name for config in source_configs(settings))
    return IndexScope(engine=settings.backend, stale_after_days=settings.stale_after_days, sources=names)


@contextmanager
def private_files(settings: LoreSettings) -> Iterator[None]:
    """What the commands that write data run under (``lore.private_files``): the data
    folder and the index file (with what the SQLite backend keeps beside it) made private."""
    from lore.private_files import private_files as private

    with private(settings.resolved_data_dir(), settings.resolve_path(settings.db_path)):
        yield


# -- traces ---------------------------------------------------------------------------------

#: The standard variables that name where traces go (OTLP), the first set wins.
OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def tracing_wanted(environ: Mapping[str, str] | None = None) -> str | None:
    """The OTLP endpoint traces go to, or None when tracing is off: no endpoint variable,
    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    return next((env[name] for name in OTLP_ENDPOINT_VARIABLES if env.get(name, "").strip()), None)


def install_tracing(environ: Mapping[str, str] | None = None) -> bool:
    """Spans of every search to the OTLP endpoint the ``OTEL_*`` variables name
    (``lore.otel``), when they name one; whether tracing is on. Without the ``otel``
    extra the server runs untraced and says so once in its log: traces are an aid, not
    a reason to refuse to serve."""
    endpoint = tracing_wanted(environ)
    if endpoint is None:
        return False
    try:
        from lore.otel import install_otlp
    except ModuleNotFoundError as err:
        if (err.name or "").partition(".")[0] != "opentelemetry":
            raise
        logging.getLogger(__name__).warning(
            "traces are off: %s is set but OpenTelemetry is not installed (pip install 'lore-sre[otel]')",
            next(name for name in OTLP_ENDPOINT_VARIABLES if (environ or os.environ).get(name, "").strip()),
        )
        return False
    install_otlp()
    return True
