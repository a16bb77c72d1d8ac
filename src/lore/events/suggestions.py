"""The webhook receiver's memory: the latest ``runbook_for_alert`` answer per alert
fingerprint (``POST /v1/alerts`` stores it, ``GET /v1/alerts/{fingerprint}`` returns it).

A stored answer is what its poster could read. Whoever asks for it later may see less, so
each passage is checked again against the index as it is now and the caller's access:
passages of documents the caller may not read, or that are gone, are left out."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from lore.access import Principal, readable
from lore.events.record import AlertSuggestion, now_iso
from lore.protocols import DocumentReader, EventStore


def alert_fingerprint(labels: Mapping[str, str], given: str | None = None) -> str:
    """Alertmanager's ``fingerprint`` when the alert has one; otherwise a stable one of
    its sorted labels (16 hex digits, like Alertmanager's)."""
    if given:
        return given
    canonical = json.dumps(sorted(labels.items()), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def store_suggestions(
    store: EventStore, result: dict[str, Any], tenant: str | None, event_id: str | None
) -> list[str]:
    """Keep ``result`` (``AlertResult.to_dict()``) under each of its alerts' fingerprints;
    the fingerprints. Raises ``LoreError`` when the store cannot write."""
    time = now_iso()
    fingerprints = [str(a["fingerprint"]) for a in result.get("alerts") or [] if a.get("fingerprint")]
    for fingerprint in dict.fromkeys(fingerprints):
        store.record_alert_suggestion(AlertSuggestion(fingerprint, tenant, time, event_id, result))
    return fingerprints


def visible_suggestion(
    suggestion: AlertSuggestion, reader: DocumentReader | None, principal: Principal
) -> dict[str, Any]:
    """The stored result with only the passages ``principal`` may read now (the access
    rule of search, ``lore.access.readable``); the ranks, groups and counts follow."""
    result = dict(suggestion.result)
    allowed: dict[str, bool] = {}

    def may_read(uri: str) -> bool:
        if uri not in allowed:
            found = reader.read_document(uri) if reader is not None else None
            allowed[uri] = found is not None and readable(principal, found[0].access, found[0].tenant)
        return allowed[uri]

    kept = [p for p in result.get("passages") or [] if may_read(str(p.get("uri", "")))]
    ranks = {int(p["rank"]): new for new, p in enumerate(kept, start=1)}
    result["passages"] = [{**p, "rank": ranks[int(p["rank"])]} for p in kept]
    result["groups"] = [
        {**g, "ranks": [ranks[r] for r in g.get("ranks") or [] if r in ranks]}
        for g in result.get("groups") or []
        if any(r in ranks for r in g.get("ranks") or [])
    ]
    if isinstance(result.get("metadata"), dict):
        result["metadata"] = {**result["metadata"], "result_count": len(kept)}
    return {
        "fingerprint": suggestion.fingerprint,
        "time": suggestion.time,
        "event_id": suggestion.event_id,
        **result,
    }
