"""One cluster connection: every request of the backend passes through ``Cluster.call``,
which turns the client's errors into lore's, naming what was attempted, plus the few
request patterns the backend repeats (paging through hits, bulk writes, refresh on read).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from lore.backends.elasticsearch.dialect import Connection, Dialect
from lore.errors import BackendUnavailableError, ConfigError, IndexingError, LoreError

#: Hits per page when reading many documents (ledger, export, re-embedding).
PAGE = 1_000


class Cluster:
    """The client of one dialect, with lore's error translation around every call."""

    def __init__(self, dialect: Dialect, connection: Connection) -> None:
        self.dialect = dialect
        self.where = f"{dialect.product} at {', '.join(connection.hosts)}"
        # The client first: without the extra it raises MissingExtraError, naming it.
        self._client = dialect.client(connection)
        self._errors = dialect.errors()
        #: Indexes written since their last refresh: refreshed before this object reads
        #: them, so a search sees what this process wrote (others see it within a second).
        self._dirty: set[str] = set()
        self._dirty_guard = threading.Lock()
        self.version = (0, 0)

    def close(self) -> None:
        self._client.close()

    def call(
        self,
        failure: type[LoreError],
        action: str,
        request: Callable[[Any], Any],
        *,
        missing: bool = False,
    ) -> dict[str, Any] | None:
        """Run ``request(client)``; its answer as a dict. ``missing=True``: a 404 is None
        instead of an error (an index or document that does not exist yet)."""
        try:
            answer = request(self._client)
        except LoreError:
            raise
        except self._errors.unreachable as err:
            raise BackendUnavailableError(f"{self.where} is unreachable ({action}): {err}") from err
        except self._errors.api as err:
            status = getattr(err, "status_code", None)
            if missing and status == 404:
                return None
            if status in (401, 403):
                raise ConfigError(
                    f"{self.where} refused the credentials ({action}): HTTP {status}; check the "
                    "[elasticsearch] api_key or username/password settings"
                ) from err
            if type(err).__name__ == "UnsupportedProductError":
                raise ConfigError(
                    f"{self.where} is not Elasticsearch (no X-Elastic-Product header); "
                    "for OpenSearch set backend = 'opensearch'"
                ) from err
            raise failure(f"{self.where} refused to {action}: {err}") from err
        except self._errors.other as err:
            raise failure(f"{self.where}: cannot {action}: {err}") from err
        body = getattr(answer, "body", answer)  # elasticsearch wraps answers; opensearch-py does not
        if isinstance(body, bool):  # HEAD requests
            return {"exists": body}
        return dict(body) if isinstance(body, Mapping) else {}

    def info(self) -> dict[str, Any]:
        found = self.call(BackendUnavailableError, "read the cluster version", lambda c: c.info()) or {}
        number = str(found.get("version", {}).get("number", "0.0"))
        parts = [int(p) if p.isdigit() else 0 for p in number.split(".")[:2]]
        self.version = (parts[0], parts[1] if len(parts) > 1 else 0)
        return found

    # -- freshness ----------------------------------------------------------------------

    def wrote(self, *indexes: str) -> None:
        with self._dirty_guard:
            self._dirty.update(indexes)

    def fresh(self, failure: type[LoreError], *indexes: str) -> None:
        """Refresh those of ``indexes`` this object wrote since their last refresh."""
        with self._dirty_guard:
            stale = [name for name in indexes if name in self._dirty]
            self._dirty.difference_update(stale)
        if stale:
            joined = ",".join(stale)
            self.call(failure, f"refresh {joined}", lambda c: c.indices.refresh(index=joined), missing=True)

    # -- requests the backend repeats ---------------------------------------------------

    def exists(self, failure: type[LoreError], index: str) -> bool:
        found = self.call(failure, f"look up index {index}", lambda c: c.indices.exists(index=index))
        return bool(found and found.get("exists"))

    def create_index(self, index: str, body: Mapping[str, Any]) -> None:
        """Create ``index``; one that another writer has just created is fine."""
        try:
            self.call(
                IndexingError, f"create index {index}", lambda c: c.indices.create(index=index, body=body)
            )
        except IndexingError as err:
            if "resource_already_exists_exception" not in str(err):
                raise

    def search(self, failure: type[LoreError], index: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        found = self.call(failure, f"search {index}", lambda c: c.search(index=index, body=body))
        return list((found or {}).get("hits", {}).get("hits", []))

    def scan(
        self,
        failure: type[LoreError],
        index: str,
        query: Mapping[str, Any],
        sort: Sequence[str],
        source: Any,
    ) -> Iterator[dict[str, Any]]:
        """Every hit of ``query`` in ``sort`` order, page by page with ``search_after``: no
        scroll context to leak, and a page is one plain search. ``sort`` names keyword
        fields whose values together are unique per document (sorting on ``_id`` is
        refused by default since Elasticsearch 8)."""
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "query": query,
                "size": PAGE,
                "sort": [{name: "asc"} for name in sort],
                "_source": source,
                "track_total_hits": False,
            }
            if after is not None:
                body["search_after"] = after
            hits = self.search(failure, index, body)
            yield from hits
            if len(hits) < PAGE:
                return
            after = hits[-1]["sort"]

    def bulk(self, action: str, operations: list[dict[str, Any]], touched: Iterable[str]) -> None:
        """One ``_bulk`` request writing to the ``touched`` indexes; any failed item fails
        it (a delete of a missing document is not a failure)."""
        if not operations:
            return
        found = self.call(IndexingError, action, lambda c: c.bulk(body=operations)) or {}
        if found.get("errors"):
            for item in found.get("items", []):
                ((kind, result),) = item.items()
                if result.get("status", 200) >= 300 and not (
                    kind == "delete" and result.get("status") == 404
                ):
                    reason = result.get("error", {})
                    detail = reason.get("reason", reason) if isinstance(reason, Mapping) else reason
                    raise IndexingError(
                        f"{self.where} refused to {action}: {kind} {result.get('_id')}: {detail}"
                    )
        self.wrote(*touched)
