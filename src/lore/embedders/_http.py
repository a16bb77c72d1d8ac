"""What every remote embedder shares: batching, retries, error translation, normalising.

``JsonApi`` posts JSON to one provider: it retries 429, 5xx and connection failures with
exponential backoff and jitter (honouring ``Retry-After``), turns 401/403 into
``EmbedderAuthError`` naming the setting to fix, and every other failure into
``EmbeddingError`` naming the provider and the HTTP status. The key is never echoed.

``RemoteEmbedder`` is the ``Embedder`` half: it splits texts into batches of
``embedding_batch_size``, checks what comes back, and returns float32 L2-normalised rows.
A provider module only says how one batch is asked for and read.

The retry loop is written here rather than taken from tenacity: it is a dozen lines,
and honouring ``Retry-After`` would need a custom wait strategy there anyway.
"""

from __future__ import annotations

import abc
import email.utils
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx
import numpy as np

from lore.config import LoreSettings
from lore.errors import ConfigError, EmbedderAuthError, EmbeddingError
from lore.protocols import Vectors

#: The setting a user fixes when a provider refuses the credentials.
KEY_HINT = "embedding_api_key in lore.toml or LORE_EMBEDDING_API_KEY"
#: When a model's input window is unknown: small enough for every embedding model in use.
DEFAULT_MAX_INPUT_TOKENS = 512
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
_ERROR_EXCERPT_CHARS = 300


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries: ``attempts`` tries in all, waits doubling from ``base_delay``."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0
    #: A server asking for a longer pause than this gets this long, so a sync never
    #: hangs on one header.
    max_retry_after: float = 60.0

    def backoff(self, attempt: int) -> float:
        """Wait before retry number ``attempt`` (0-based): half fixed, half random, so
        parallel clients that failed together do not retry together."""
        ceiling = min(self.max_delay, self.base_delay * 2.0**attempt)
        return ceiling / 2 + random.uniform(0.0, ceiling / 2)


def api_key(settings: LoreSettings, *env_vars: str) -> str | None:
    """The configured key, else the provider's conventional variable (``OPENAI_API_KEY``)."""
    if settings.embedding_api_key is not None:
        return settings.embedding_api_key.get_secret_value() or None
    for name in env_vars:
        if os.environ.get(name):
            return os.environ[name]
    return None


def parse_base_url(base_url: str) -> httpx.URL:
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as err:
        raise ConfigError(f"invalid embedding_base_url {base_url!r}: {err}") from err
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"embedding_base_url must be an http(s) URL, got {base_url!r}")
    return url


def endpoint(base: httpx.URL, path: str) -> httpx.URL:
    """``base`` with ``path`` appended to its path. Its query is kept, because Azure
    OpenAI base URLs carry ``?api-version=...``."""
    return base.copy_with(path=base.path.rstrip("/") + "/" + path.lstrip("/"))


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms`` (OpenAI), or
    ``Retry-After`` as seconds or an HTTP date."""
    millis = response.headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _should_retry(status: int) -> bool:
    return status == 429 or status >= 500


#: Tries for a search query's embedding: one quick retry at most, within the deadline.
_QUERY_ATTEMPTS = 2


def _fits(deadline: float | None, wait: float) -> bool:
    """Whether waiting ``wait`` seconds still leaves time for another attempt."""
    return deadline is None or time.monotonic() + wait < deadline


class JsonApi:
    """POST JSON to one provider's API, with lore's retries and errors."""

    def __init__(
        self,
        provider: str,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        secret: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        query_timeout: float | None = None,
    ) -> None:
        self.provider = provider
        self.base_url = base_url
        self.base = parse_base_url(base_url)
        #: For messages: no userinfo or query, which may hold credentials.
        self.where = str(self.base.copy_with(userinfo=b"", query=None))
        self._headers = dict(headers or {})
        self._secret = secret
        self._retry = retry or RetryPolicy()
        self._timeout = timeout
        #: Seconds a query's request may take in all (``query_embedding_timeout``).
        self.query_timeout = query_timeout
        self._client: httpx.Client | None = None

    def post(self, path: str, body: Mapping[str, Any], *, query: bool = False) -> Any:
        """The decoded JSON answer of ``POST {base_url}/{path}``. For a search ``query``
        the whole call, retries included, ends by ``query_timeout``: a search must not
        wait minutes for a provider that is down, it answers from BM25 instead."""
        url = endpoint(self.base, path)
        attempts = max(1, self._retry.attempts)
        deadline = None
        if query and self.query_timeout is not None:
            deadline = time.monotonic() + self.query_timeout
            attempts = min(attempts, _QUERY_ATTEMPTS)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._http().post(url, json=body, timeout=self._attempt_timeout(deadline))
            except httpx.TransportError as err:
                if deadline is not None and isinstance(err, httpx.TimeoutException):
                    raise self._too_slow() from err
                wait = self._retry.backoff(attempt)
                if last or not _fits(deadline, wait):
                    tried = f"after {attempt + 1} attempts" if attempt else "in one attempt"
                    raise EmbeddingError(
                        f"{self.provider} embedding API at {self.where} could not be reached "
                        f"{tried}: {type(err).__name__}: {self._scrub(str(err))}"
                    ) from err
                time.sleep(wait)
                continue
            except httpx.HTTPError as err:  # redirects, undecodable bodies: retrying won't help
                raise EmbeddingError(
                    f"{self.provider} embedding API at {self.where} failed: "
                    f"{type(err).__name__}: {self._scrub(str(err))}"
                ) from err
            if response.is_success:
                return self._decode(response)
            if not _should_retry(response.status_code) or last:
                raise self._error(response, attempt + 1)
            asked = _retry_after(response)
            wait = self._retry.backoff(attempt) if asked is None else min(asked, self._retry.max_retry_after)
            if not _fits(deadline, wait):
                raise self._error(response, attempt + 1)
            time.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt_timeout(self, deadline: float | None) -> httpx.Timeout:
        if deadline is None:
            return self._timeout
        # Every phase (connect, write, each read) bounded by what is left of the deadline.
        return httpx.Timeout(max(0.001, deadline - time.monotonic()))

    def _too_slow(self) -> EmbeddingError:
        return EmbeddingError(
            f"{self.provider} embedding API at {self.where} did not embed the query within "
            f"{self.query_timeout:g} s (query_embedding_timeout)"
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _http(self) -> httpx.Client:
        # Made on first use so that building an embedder (``lore status``) costs nothing.
        if self._client is None:
            self._client = httpx.Client(headers=self._headers, timeout=self._timeout)
        return self._client

    def _decode(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as err:
            raise EmbeddingError(
                f"{self.provider} embedding API returned HTTP {response.status_code} "
                f"with a body that is not JSON"
            ) from err

    def _error(self, response: httpx.Response, attempts: int) -> EmbeddingError:
        status = response.status_code
        if status in (401, 403):
            # The body is left out: some providers quote part of the rejected key.
            missing = "no API key is configured; " if not self._secret else ""
            return EmbedderAuthError(
                f"{self.provider} refused the credentials (HTTP {status}): {missing}check {KEY_HINT}"
            )
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        detail = self._scrub(_error_message(response))
        return EmbeddingError(
            f"{self.provider} embedding API returned HTTP {status}{tried}" + (f": {detail}" if detail else "")
        )

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


def _error_message(response: httpx.Response) -> str:
    """The provider's own words: ``{"error": {"message": ..}}`` (OpenAI, Gemini),
    ``{"error": ".."}`` (Ollama), else the start of the body."""
    try:
        payload = response.json()
    except ValueError:
        return response.text[:_ERROR_EXCERPT_CHARS].strip()
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    text = error if isinstance(error, str) else str(payload)
    return text[:_ERROR_EXCERPT_CHARS].strip()


@contextmanager
def reading_response(provider: str) -> Iterator[None]:
    """Turns a response of an unexpected shape into an ``EmbeddingError``."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        raise EmbeddingError(
            f"{provider} embedding API answered in an unexpected shape ({type(err).__name__}: {err})"
        ) from err


def normalise(matrix: Vectors) -> Vectors:
    """Rows scaled to unit length; an all-zero row stays zero rather than NaN."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


class RemoteEmbedder(abc.ABC):
    """An ``Embedder`` whose vectors come from a remote model, one batch per request."""

    #: Prefix of ``model_id``, so that switching provider is seen by the index.
    provider: ClassVar[str]
    #: The most texts the provider accepts in one request.
    max_batch: ClassVar[int] = 2048
    degraded = False

    def __init__(
        self,
        model: str,
        *,
        batch_size: int,
        dimension: int | None = None,
        max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.model = model
        self.batch_size = min(batch_size, self.max_batch)
        self._dimension = dimension
        self._max_input_tokens = max_input_tokens

    @property
    def model_id(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def dimension(self) -> int:
        """Known from settings or the model table; otherwise found by one probe call."""
        if self._dimension is None:
            self._embed_checked(["dimension probe"], query=False)
        assert self._dimension is not None
        return self._dimension

    @property
    def max_input_tokens(self) -> int:
        return self._max_input_tokens

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts, query=False)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts, query=True)

    @abc.abstractmethod
    def _embed_batch(self, texts: list[str], *, query: bool) -> Sequence[Sequence[float]]:
        """One request: a vector per text, in the order of ``texts``."""

    def _embed(self, texts: Sequence[str], *, query: bool) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # Providers reject an empty string outright; a blank embeds as "nothing" instead.
        cleaned = [text if text.strip() else " " for text in texts]
        parts = [
            self._embed_checked(cleaned[start : start + self.batch_size], query=query)
            for start in range(0, len(cleaned), self.batch_size)
        ]
        return normalise(np.vstack(parts))

    def _embed_checked(self, texts: list[str], *, query: bool) -> Vectors:
        rows = self._embed_batch(texts, query=query)
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError) as err:
            raise EmbeddingError(f"{self.provider} returned vectors that are not numbers: {err}") from err
        if matrix.ndim != 2 or matrix.shape[0] != len(texts) or matrix.shape[1] == 0:
            raise EmbeddingError(
                f"{self.provider} returned {matrix.shape[0] if matrix.ndim else 0} vectors of shape "
                f"{matrix.shape[1:]} for {len(texts)} texts"
            )
        if self._dimension is None:
            self._dimension = int(matrix.shape[1])
        elif matrix.shape[1] != self._dimension:
            raise EmbeddingError(
                f"{self.provider} model {self.model!r} returned {matrix.shape[1]}-dimensional vectors, "
                f"expected {self._dimension} (check embedding_dimensions)"
            )
        if not np.isfinite(matrix).all():
            raise EmbeddingError(f"{self.provider} returned vectors containing NaN or infinity")
        return matrix
