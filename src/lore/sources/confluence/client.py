"""A thin asynchronous Confluence REST client on httpx: authentication, bounded retries,
and pagination that fails loudly.

Why not ``atlassian-python-api`` (measured on 5.0.5, docs/ingestion.md): it would save the
two pagination loops below (about 40 lines), but it is synchronous (requests), brings five
more dependencies, and its pager (``_get_paged``) ends silently when a response has no
``results``, which would turn a half-failed listing into tombstones. Retries are off by
default there and its ``Retry-After`` cap defaults to 30 minutes; here every bound is the
source's configuration.

Pagination follows ``_links.next`` in both APIs: v2 links are relative to the site (they
start with ``/wiki/api/v2``), v1 links to the API root (Cloud's ``/wiki``, Data Center's
context path). A next link to another host is refused, since it would carry the token.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx

from lore.embedders._http import _retry_after as retry_after
from lore.errors import ConfluenceHTTPError, SourceError
from lore.sources.confluence.config import ConfluenceSourceConfig

#: A JSON object as the API returns it; checked field by field where records are built.
Json = Mapping[str, Any]
_RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})


class ConfluenceClient:
    """GET requests against one site, with the source's auth, timeouts and retry bounds."""

    def __init__(self, config: ConfluenceSourceConfig, token: str) -> None:
        self.config = config
        parts = urlsplit(config.url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        root = parts.path.rstrip("/")
        if config.deployment == "cloud" and not root.endswith("/wiki"):
            root += "/wiki"
        #: Where v1 (``/rest/api``) and, on Cloud, v2 (``/api/v2``) paths start.
        self.root = self.origin + root
        auth: httpx.Auth | None = None
        headers = {"Accept": "application/json", "User-Agent": "lore-confluence-source"}
        if config.email:
            auth = httpx.BasicAuth(config.email, token)
        else:
            headers["Authorization"] = f"Bearer {token}"
        timeout = httpx.Timeout(config.read_timeout, connect=config.connect_timeout)
        # Redirects are not followed: one to another host would carry the token. The
        # environment's proxy and CA settings (HTTPS_PROXY, SSL_CERT_FILE) apply, as a
        # corporate site behind a proxy needs.
        self._http = httpx.AsyncClient(auth=auth, headers=headers, timeout=timeout, follow_redirects=False)
        self.requests = 0

    async def __aenter__(self) -> ConfluenceClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self._http.aclose()

    async def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Json:
        """``path`` relative to the API root, or an absolute URL on this site."""
        url = path if path.startswith(("http://", "https://")) else self.root + path
        what = f"GET {urlsplit(url).path}"
        for attempt in range(self.config.max_retries + 1):
            last = attempt == self.config.max_retries
            try:
                self.requests += 1
                response = await self._http.get(url, params=params)
            except httpx.TransportError as err:
                if last:
                    raise SourceError(f"{what}: {type(err).__name__}: {err}") from err
                await asyncio.sleep(self._backoff(attempt))
                continue
            if response.status_code in _RETRIED_STATUS and not last:
                await asyncio.sleep(self._delay(response, attempt, what))
                continue
            if response.status_code >= 400:
                hint = " (the site refused the credentials: check email and the token)" \
                    if response.status_code == 401 else ""
                raise ConfluenceHTTPError(
                    f"{what}: HTTP {response.status_code}{_after(attempt)}{hint}", response.status_code
                )
            try:
                body = response.json()
            except ValueError as err:
                raise SourceError(f"{what}: the response is not JSON") from err
            if not isinstance(body, dict):
                raise SourceError(f"{what}: the response is not a JSON object")
            return body
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _backoff(self, attempt: int) -> float:
        return float(min(self.config.backoff_seconds * 2**attempt, self.config.max_retry_after))

    def _delay(self, response: httpx.Response, attempt: int, what: str) -> float:
        """How long to wait before retrying: ``Retry-After`` on a 429 when the server says,
        else exponential back-off. A wait longer than ``max_retry_after`` fails now."""
        wait = retry_after(response) if response.status_code == 429 else None
        if wait is None:
            return self._backoff(attempt)
        if wait > self.config.max_retry_after:
            raise SourceError(
                f"{what}: rate limited (HTTP 429) with Retry-After {wait:.0f} s, over this source's "
                f"max_retry_after ({self.config.max_retry_after:.0f} s); nothing was pruned"
            )
        return wait

    async def results(
        self, path: str, params: Mapping[str, str | int], *, v2: bool
    ) -> AsyncIterator[list[Json]]:
        """Each response's ``results``, following ``_links.next`` to the end. Raises
        SourceError when a response has no ``results`` list: the listing is incomplete."""
        url: str = path
        query: Mapping[str, str | int] | None = params
        while True:
            body = await self.get(url, query)
            results = body.get("results")
            if not isinstance(results, list) or not all(isinstance(item, dict) for item in results):
                raise SourceError(f"GET {urlsplit(url).path}: the response has no list of results")
            yield results
            links = body.get("_links")
            following = links.get("next") if isinstance(links, dict) else None
            if not following:
                return
            url, query = self._next_url(str(following), v2=v2), None

    def _next_url(self, link: str, *, v2: bool) -> str:
        if link.startswith(("http://", "https://")):
            absolute = link
        elif v2:
            absolute = self.origin + link
        else:
            absolute = self.root + link
        if urlsplit(absolute).netloc != urlsplit(self.origin).netloc:
            raise SourceError(f"a next link points to another host ({urlsplit(absolute).netloc}); refused")
        return absolute


def _after(attempt: int) -> str:
    return f" after {attempt + 1} attempts" if attempt else ""


def parse_time(value: object) -> datetime | None:
    """An API timestamp (``2026-11-30T10:00:00.000Z``, ``...+01:00``) as an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
