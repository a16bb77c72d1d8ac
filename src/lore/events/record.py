"""What the analytics record holds: one ``RetrievalEvent`` per tool call, the
``Feedback`` people and agents give on it, and the alert suggestion kept per
fingerprint. Plain dataclasses with a JSON form, the same document every store keeps.

The audit JSONL (``lore.safety.audit``) is the security record: who asked what, what was
redacted or refused. Events are the analytics record: what retrieval returned, how long
it took, what was missed (docs/observability.md).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lore.errors import QueryError


@dataclass(frozen=True, slots=True)
class EventHit:
    uri: str
    chunk_id: str
    rank: int
    score: float


@dataclass(frozen=True, slots=True)
class Correlation:
    """Keys the caller supplies so events can be joined with its own records."""

    conversation_id: str | None = None
    message_id: str | None = None
    #: Free-form labels (``{"ticket": "INC-42"}``).
    trace: dict[str, str] = field(default_factory=dict)
    #: The alert fingerprints of a ``runbook_for_alert`` call.
    fingerprints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RetrievalEvent:
    event_id: str
    #: ISO 8601, UTC.
    time: str
    tool: str
    principal: str | None
    tenant: str | None
    correlation: Correlation
    #: After the secret redactor, as the audit records it.
    query: str
    filters: dict[str, str]
    top_k: int | None
    engine: str
    #: The mode asked for; None is the backend's default.
    mode: str | None
    results: list[EventHit]
    latency_ms: float
    #: Time spent embedding the query; None when the retriever does not say (a managed
    #: engine embeds on its side), 0.0 when no embedding was needed (BM25).
    embedding_ms: float | None
    #: Time in the retriever besides embedding; None when it cannot be split.
    retrieval_ms: float | None
    degraded: bool
    degraded_reason: str | None
    empty: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["correlation"]["fingerprints"] = list(self.correlation.fingerprints)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetrievalEvent:
        correlation = dict(data.get("correlation") or {})
        correlation["fingerprints"] = tuple(correlation.get("fingerprints") or ())
        return cls(
            **{
                **data,
                "correlation": Correlation(**correlation),
                "results": [EventHit(**hit) for hit in data.get("results") or []],
            }
        )


@dataclass(frozen=True, slots=True)
class Feedback:
    """What someone said about one event's results."""

    feedback_id: str
    event_id: str
    time: str
    principal: str | None
    #: uris of the event's results that helped, and those that did not.
    helpful: list[str]
    not_helpful: list[str]
    #: The document that should have been found: a uri or a title.
    expected: list[str]
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Feedback:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class AlertSuggestion:
    """The latest ``runbook_for_alert`` answer for one alert fingerprint of one tenant."""

    fingerprint: str
    tenant: str | None
    time: str
    event_id: str | None
    #: The tool's structured result (``AlertResult.to_dict()``) as it was returned.
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Filters of ``lore events`` and ``GET /v1/events``."""

    since: datetime | None = None
    empty: bool | None = None
    degraded: bool | None = None
    uri: str | None = None
    #: None: every tenant (the local admin view).
    tenant: str | None = None
    all_tenants: bool = True
    limit: int = 50

    def conditions(self) -> dict[str, object]:
        """The filters in force, by name (``since``, ``empty``, ``degraded``, ``uri``,
        ``tenant``): each store maps a name to its own SQL."""
        given: dict[str, object] = {
            "since": self.since,
            "empty": self.empty,
            "degraded": self.degraded,
            "uri": self.uri,
        }
        found = {name: value for name, value in given.items() if value is not None}
        if not self.all_tenants:
            found["tenant"] = self.tenant  # None is the default tenant, a condition too
        return found


def new_id() -> str:
    return uuid.uuid4().hex


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


_SPAN = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``2h``, ``7d``, ``1d12h`` (ago) or an ISO 8601 time (UTC when it names no zone)."""
    value = text.strip()
    if value and _SPAN.sub("", value) == "":
        span = timedelta()
        for amount, unit in _SPAN.findall(value):
            span += timedelta(**{_UNITS[unit]: int(amount)})
        return (now or datetime.now(UTC)) - span
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise QueryError(
            f"--since must be a span such as 2h or 7d, or an ISO 8601 time, got {text!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
