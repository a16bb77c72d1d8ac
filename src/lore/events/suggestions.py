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


#: Most bytes (as JSON) one stored suggestion keeps; its lowest-ranked passages go first.
#: The answer's own output cap already bounds it; this holds whatever the cap is set to.
MAX_SUGGESTION_BYTES = 256 * 1024


def store_suggestions(
    store: EventStore,
    result: dict[str, Any],
    tenant: str | None,
    event_id: str | None,
    stored_by: str | None = None,
) -> list[str]:
    """Keep, under each alert's fingerprint of ``result`` (``AlertResult.to_dict()``), that
    alert's own part of the answer (``answer_for``); the fingerprints. One request of N
    alerts stores N parts of one answer, never N copies of it. Raises ``LoreError`` when
    the store cannot write."""
    time = now_iso()
    alerts = [a for a in result.get("alerts") or [] if a.get("fingerprint")]
    fingerprints = [str(a["fingerprint"]) for a in alerts]
    single = len(result.get("alerts") or []) == 1
    for alert in {str(a["fingerprint"]): a for a in alerts}.values():
        part = bounded(answer_for(result, alert, single=single), MAX_SUGGESTION_BYTES)
        if stored_by is not None:
            # The latest poster of a fingerprint's alert wins (any viewer of the tenant may
            # post one): the reader sees whose answer it is.
            part = {**part, "stored_by": stored_by}
        fingerprint = str(alert["fingerprint"])
        store.record_alert_suggestion(AlertSuggestion(fingerprint, tenant, time, event_id, part))
    return fingerprints


def answer_for(result: dict[str, Any], alert: Mapping[str, Any], *, single: bool) -> dict[str, Any]:
    """The part of a notification's answer that is about ``alert``: the passages and
    runbook groups that name it (``Alert.key``: its name, with the fingerprint the sender
    gave), ranked anew. An answer to one alert is all its own."""
    if single:
        return {**result, "alerts": [dict(alert)]}
    name = str(alert.get("alertname") or "alert")
    keys = {name, f"{name} ({alert.get('fingerprint')})"}
    kept = [
        {**p, "alerts": [a for a in p["alerts"] if a in keys]}
        for p in result.get("passages") or []
        if keys & set(p.get("alerts") or ())
    ]
    part = _reranked({**result, "alerts": [dict(alert)]}, kept)
    # Each group (and passage) names only this alert: a list of all N per part was N² bytes.
    part["groups"] = [
        {**g, **{key: [a for a in g.get(key) or [] if a in keys] for key in ("alerts", "resolved")}}
        for g in part["groups"]
    ]
    metadata = part.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("query"), str):
        # The query describes every alert ("name: words | ..."); the part keeps its own.
        own = [seg for seg in metadata["query"].split(" | ") if seg.startswith(f"{name}:") or seg == name]
        part["metadata"] = {**metadata, "query": " | ".join(own) or metadata["query"][:200]}
    return part


def _reranked(result: dict[str, Any], kept: list[dict[str, Any]]) -> dict[str, Any]:
    """``result`` with only the passages ``kept``, ranked 1.., the groups and count following."""
    ranks = {int(p["rank"]): new for new, p in enumerate(kept, start=1)}
    result = dict(result)
    result["passages"] = [{**p, "rank": ranks[int(p["rank"])]} for p in kept]
    result["groups"] = [
        {**g, "ranks": [ranks[r] for r in g.get("ranks") or [] if r in ranks]}
        for g in result.get("groups") or []
        if any(r in ranks for r in g.get("ranks") or [])
    ]
    if isinstance(result.get("metadata"), dict):
        result["metadata"] = {**result["metadata"], "result_count": len(kept)}
    return result


def bounded(result: dict[str, Any], limit: int) -> dict[str, Any]:
    """``result`` without its lowest-ranked passages until its JSON fits in ``limit`` bytes."""
    passages = list(result.get("passages") or [])
    while passages and len(json.dumps({**result, "passages": passages}).encode("utf-8")) > limit:
        passages.pop()
    if len(passages) == len(result.get("passages") or []):
        return result
    return _reranked(result, passages)


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
    result = _reranked(result, kept)
    return {
        "fingerprint": suggestion.fingerprint,
        "time": suggestion.time,
        "event_id": suggestion.event_id,
        **result,
    }
