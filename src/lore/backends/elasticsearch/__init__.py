"""The Elasticsearch / OpenSearch backend (``backend = "elasticsearch"`` or ``"opensearch"``).

The functions of ``lore.backends.BackendModule``; the backend is ``backend.py``, what
differs between the two products ``dialect.py``, what is stored ``layout.py``.
Settings are the ``[elasticsearch]`` table (``lore.config.ElasticsearchSettings``);
credentials may come from files and are never logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lore.backends import StoredVectorsEmbedder
from lore.backends.elasticsearch.backend import ElasticsearchBackend
from lore.backends.elasticsearch.dialect import Connection, dialect_for
from lore.config import ElasticsearchSettings, LoreSettings
from lore.errors import ConfigError
from lore.protocols import Embedder, EventStore


def _secret(settings: LoreSettings, value: str | None, file: Path | None, name: str) -> str | None:
    if value is not None and file is not None:
        raise ConfigError(f"[elasticsearch]: set {name} or {name}_file, not both")
    if file is None:
        return value
    path = settings.resolve_path(file.expanduser())
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except OSError as err:
        raise ConfigError(f"[elasticsearch] {name}_file: cannot read {path}: {err.strerror}") from err
    if not secret:
        raise ConfigError(f"[elasticsearch] {name}_file: {path} is empty")
    return secret


def connection_of(settings: LoreSettings) -> Connection:
    es: ElasticsearchSettings = settings.elasticsearch
    if not es.url:
        raise ConfigError(
            f"backend {settings.backend!r} needs the cluster's address: set url in [elasticsearch] "
            "(LORE_ELASTICSEARCH__URL), e.g. https://es.internal:9200"
        )
    hosts = tuple(part.strip() for part in es.url.split(",") if part.strip())
    for host in hosts:
        if not host.startswith(("http://", "https://")):
            raise ConfigError(f"[elasticsearch] url: {host!r} must start with http:// or https://")
    api_key = _secret(
        settings, es.api_key.get_secret_value() if es.api_key else None, es.api_key_file, "api_key"
    )
    password = _secret(
        settings, es.password.get_secret_value() if es.password else None, es.password_file, "password"
    )
    if api_key and es.username:
        raise ConfigError("[elasticsearch]: set api_key or username/password, not both")
    if password and not es.username:
        raise ConfigError("[elasticsearch]: a password needs a username")
    ca_file = str(settings.resolve_path(es.ca_file.expanduser())) if es.ca_file else None
    if ca_file and not Path(ca_file).is_file():
        raise ConfigError(f"[elasticsearch] ca_file: {ca_file} does not exist")
    return Connection(
        hosts=hosts,
        api_key=api_key,
        username=es.username,
        password=password,
        ca_file=ca_file,
        verify_certs=es.verify_certs,
        timeout=es.timeout,
    )


def from_settings(settings: LoreSettings, embedder: Embedder) -> ElasticsearchBackend:
    return ElasticsearchBackend(
        embedder,
        dialect_for(settings.backend),
        connection_of(settings),
        index_name=settings.index_name,
        rrf_k=settings.rrf_k,
        candidate_depth=settings.candidate_depth,
        fusion=settings.fusion,
        boosts={
            "title": settings.bm25_title_boost,
            "section": settings.bm25_section_boost,
            "identifier": settings.bm25_identifier_boost,
        },
        shards=settings.elasticsearch.number_of_shards,
        replicas=settings.elasticsearch.number_of_replicas,
    )


def missing_index(settings: LoreSettings) -> str | None:
    return None  # a server: whether the alias exists is found by opening it


def stored_embedder_of(settings: LoreSettings) -> tuple[str, int] | None:
    backend = from_settings(settings, StoredVectorsEmbedder("unknown", 1))
    try:
        return backend.stored_embedder()
    finally:
        backend.close()


def at_location(target: str, settings: LoreSettings) -> LoreSettings:
    """``elasticsearch:https://es.internal:9200`` or ``opensearch:...`` (the caller sets
    ``backend`` to the kind); credentials come from ``[elasticsearch]``."""
    es = settings.elasticsearch.model_copy(update={"url": target})
    backend = settings.backend if settings.backend in ("elasticsearch", "opensearch") else "elasticsearch"
    return settings.model_copy(update={"backend": backend, "elasticsearch": es})


def event_store_of(settings: LoreSettings) -> EventStore | None:
    return None  # no store of its own: lore.resolve gives its events a sidecar file


if TYPE_CHECKING:  # mypy checks this module against what commands call on every backend
    import lore.backends.elasticsearch as _this
    from lore.backends import BackendModule

    _module: BackendModule = _this

__all__ = [
    "ElasticsearchBackend",
    "at_location",
    "connection_of",
    "event_store_of",
    "from_settings",
    "missing_index",
    "stored_embedder_of",
]
