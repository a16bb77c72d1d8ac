"""Discovery Engine (Vertex AI Search): ``backend = "discovery_engine"``, the retrieval seam only.

The vendor ingests through its own connectors (Cloud Storage, BigQuery, websites, ...),
so lore writes nothing there: ``lore sync`` skips it and ``lore migrate``, ``reembed`` and
``reindex`` refuse it (``lore.resolve.RETRIEVAL_ONLY``). Searches call the documented
REST method ``servingConfigs.search`` (v1)::

    POST {api_base}/v1/projects/{project}/locations/{location}/collections/{collection}/
         {engines/{engine} | dataStores/{data_store}}/servingConfigs/{serving_config}:search
    {"query": ..., "pageSize": top_k, "filter": "team: ANY(\\"payments\\") AND ...",
     "contentSearchSpec": {"snippetSpec": {"returnSnippet": true},
                           "extractiveContentSpec": {"maxExtractiveSegmentCount": n}}}

and answer through the same ``KnowledgeSearch`` core and safety chain as every backend.
This is lore's own tool calling the API, never the ADK's built-in grounding tool
(``tests/test_no_vertex_search.py`` keeps it that way): the built-in one would skip the
safety chain.

Each result becomes a ``Passage``: uri from the document's ``derivedStructData.link``
(else ``structData.uri``/``link``, else the document id), title, the extractive segments
(else the snippets, HTML stripped) as text, revision and ``updated_at`` from
``structData`` where present. A field the document lacks is named in ``Passage.missing``
and shown as unknown: never invented. The API returns no relevance score by default, so
``score`` is ``1 / rank`` (the vendor's order kept).

Authentication is Application Default Credentials through ``google-auth``
(``google.auth.default()``); the token goes in the ``Authorization`` header of an httpx
request. The snippet HTML stripping is written here (a regex and ``html.unescape``): a
parser would be a dependency for ``<b>`` tags.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

import httpx

from lore.access import AccessFilter
from lore.backends import lexical
from lore.config import DiscoveryEngineSettings, LoreSettings
from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    MissingExtraError,
    QueryError,
    RetrievalError,
    UnsupportedModeError,
)
from lore.models import SOURCE_TYPE_LABEL, UNKNOWN_UPDATED_AT, Passage, SearchMode, utc
from lore.protocols import Retrieval

ENGINE = "discovery_engine"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
#: The search method's own limit on ``pageSize``.
MAX_PAGE_SIZE = 100
_FILTER_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_TAG = re.compile(r"<[^>]{0,200}>")


class Credentials(Protocol):
    """What lore needs of a ``google.auth.credentials.Credentials``: refresh when needed
    and put the token into the request headers."""

    def before_request(self, request: Any, method: str, url: str, headers: dict[str, str]) -> None: ...


def filter_expression(labels: Mapping[str, str] | None) -> str | None:
    """Labels as a Discovery Engine filter: ``key: ANY("value")`` joined by ``AND``. The
    keys must be filterable fields of the data store's schema."""
    if not labels:
        return None
    parts = []
    for key, value in sorted(labels.items()):
        if not _FILTER_KEY.fullmatch(key):
            raise QueryError(
                f"label {key!r} cannot be a Discovery Engine filter field (letters, digits, _ and .)"
            )
        quoted = value.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'{key}: ANY("{quoted}")')
    return " AND ".join(parts)


def _plain(snippet: str) -> str:
    return html.unescape(_TAG.sub("", snippet)).strip()


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return None


def _first(*values: object) -> str:
    for value in values:
        if isinstance(value, str) and value:
            return value
    return ""


def passage_from_result(result: Mapping[str, Any], rank: int) -> Passage:
    document: Mapping[str, Any] = result.get("document", {})
    derived: Mapping[str, Any] = document.get("derivedStructData", {}) or {}
    struct: Mapping[str, Any] = document.get("structData", {}) or {}
    segments = derived.get("extractive_segments") or derived.get("extractiveSegments") or []
    texts = [str(segment.get("content", "")).strip() for segment in segments if segment.get("content")]
    if not texts:
        snippets = derived.get("snippets") or []
        texts = [_plain(str(item.get("snippet", ""))) for item in snippets if item.get("snippet")]
        texts = [text for text in texts if text and "No snippet is available" not in text]
    missing: set[str] = set()
    revision = _first(struct.get("revision"), struct.get("version"))
    if not revision:
        missing.add("revision")
    updated = _parse_time(struct.get("updated_at")) or _parse_time(struct.get("updateTime"))
    if updated is None:
        missing.add("updated_at")
    identifier = _first(document.get("id"), result.get("id"), document.get("name"))
    raw_labels = struct.get("labels")
    labels = {str(k): str(v) for k, v in raw_labels.items()} if isinstance(raw_labels, Mapping) else {}
    labels.setdefault(SOURCE_TYPE_LABEL, ENGINE)
    return Passage(
        text="\n\n".join(texts),
        uri=_first(derived.get("link"), struct.get("uri"), struct.get("link"), identifier),
        title=_first(derived.get("title"), struct.get("title")),
        section=_first(struct.get("section")),
        revision=revision,
        updated_at=updated or UNKNOWN_UPDATED_AT,
        score=1.0 / rank,
        labels=labels,
        chunk_id=_first(document.get("name"), identifier) or f"result-{rank}",
        missing=frozenset(missing),
    )


class DiscoveryEngineRetriever:
    """A ``KnowledgeRetriever`` over one serving config. The engine ranks (its own
    hybrid of keywords and semantics), so lore offers that one mode."""

    modes: tuple[SearchMode, ...] = (SearchMode.HYBRID,)
    engine = ENGINE
    degraded = False

    def __init__(
        self,
        serving_config: str,
        credentials: Credentials,
        *,
        api_base: str,
        extractive_segments: int = 1,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.serving_config = serving_config
        self._url = f"{api_base.rstrip('/')}/v1/{serving_config}:search"
        self._credentials = credentials
        self._segments = extractive_segments
        self._client = httpx.Client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._client.close()

    def request_body(self, query: str, top_k: int, labels: Mapping[str, str] | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"snippetSpec": {"returnSnippet": True}}
        if self._segments:
            spec["extractiveContentSpec"] = {"maxExtractiveSegmentCount": self._segments}
        body: dict[str, Any] = {"query": query, "pageSize": top_k, "contentSearchSpec": spec}
        expression = filter_expression(labels)
        if expression:
            body["filter"] = expression
        return body

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        if access is not None and (access.groups is not None or access.tenant is not None):
            # Fail-closed: the vendor reports no per-document readers or tenant to lore, so
            # every result is of unknown access, which only the default tenant's admins see.
            raise RetrievalError(
                "Discovery Engine reports no per-document access to lore: only admins of the "
                "default tenant may search it through the service"
            )
        if mode is not None and mode != SearchMode.HYBRID:
            raise UnsupportedModeError(
                f"search mode {mode!r}: Discovery Engine ranks by its own hybrid of keywords and "
                "meaning; lore offers only 'hybrid' on it"
            )
        lexical.check_search(ENGINE, self.modes, query, top_k, labels, SearchMode.HYBRID)
        if top_k > MAX_PAGE_SIZE:
            raise QueryError(f"top_k must be at most {MAX_PAGE_SIZE} on Discovery Engine, got {top_k}")
        body = self.request_body(lexical.clean_text(query), top_k, labels)
        answer = await asyncio.to_thread(self._post, body)
        results = answer.get("results") or []
        return Retrieval([passage_from_result(result, rank) for rank, result in enumerate(results, start=1)])

    def _post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        try:
            from google.auth.exceptions import GoogleAuthError
            from google.auth.transport.requests import Request
        except ImportError as err:
            raise MissingExtraError("discovery-engine", err.name or "google-auth") from err
        try:
            self._credentials.before_request(Request(), "POST", self._url, headers)
        except GoogleAuthError as err:
            raise RetrievalError(f"Discovery Engine: cannot get an access token: {err}") from err
        try:
            response = self._client.post(self._url, json=body, headers=headers)
        except httpx.TransportError as err:
            raise BackendUnavailableError(f"Discovery Engine at {self._url} is unreachable: {err}") from err
        if response.status_code >= 400:
            raise self._refusal(response)
        try:
            answer = response.json()
        except ValueError as err:
            raise RetrievalError(
                f"Discovery Engine answered {self._url} with something that is not JSON"
            ) from err
        if not isinstance(answer, dict):
            raise RetrievalError("Discovery Engine answered with JSON that is not an object")
        return answer

    def _refusal(self, response: httpx.Response) -> RetrievalError:
        try:
            error = response.json().get("error", {})
            message = str(error.get("message", ""))[:300]
        except (ValueError, AttributeError):
            message = ""
        detail = f": {message}" if message else ""
        what = f"Discovery Engine refused the search (HTTP {response.status_code}{detail})"
        if response.status_code in (401, 403):
            return RetrievalError(f"{what}; check the Application Default Credentials and their roles")
        if response.status_code == 404:
            return RetrievalError(
                f"{what}; check the [discovery_engine] project, location and engine or data_store"
            )
        if response.status_code == 429 or response.status_code >= 500:
            return BackendUnavailableError(what)
        return RetrievalError(what)


def serving_config_path(settings: DiscoveryEngineSettings, project: str) -> str:
    if (settings.engine is None) == (settings.data_store is None):
        raise ConfigError("[discovery_engine]: set exactly one of engine (a search app) or data_store")
    parent = f"projects/{project}/locations/{settings.location}/collections/{settings.collection}"
    owner = f"engines/{settings.engine}" if settings.engine else f"dataStores/{settings.data_store}"
    return f"{parent}/{owner}/servingConfigs/{settings.serving_config}"


def default_credentials() -> tuple[Credentials, str | None]:
    """Application Default Credentials and the project they name, if any."""
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError as err:
        raise MissingExtraError("discovery-engine", err.name or "google-auth") from err
    try:
        credentials, project = google.auth.default(scopes=[SCOPE])
    except DefaultCredentialsError as err:
        raise ConfigError(
            "backend 'discovery_engine' needs Application Default Credentials: run "
            "`gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS, "
            f"or run where a service account is attached ({err})"
        ) from err
    return credentials, project


def from_settings(settings: LoreSettings, credentials: Credentials | None = None) -> DiscoveryEngineRetriever:
    de = settings.discovery_engine
    found_project: str | None = None
    if credentials is None:
        credentials, found_project = default_credentials()
    project = de.project or found_project
    if not project:
        raise ConfigError("[discovery_engine]: set project (LORE_DISCOVERY_ENGINE__PROJECT)")
    api_base = de.api_base or (
        "https://discoveryengine.googleapis.com"
        if de.location == "global"
        else f"https://{de.location}-discoveryengine.googleapis.com"
    )
    return DiscoveryEngineRetriever(
        serving_config_path(de, project),
        credentials,
        api_base=api_base,
        extractive_segments=de.extractive_segments,
        timeout=de.timeout,
    )
