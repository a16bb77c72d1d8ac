"""Feedback on a retrieval event: which results helped, which did not, and the document
that should have been found. One implementation behind ``lore feedback``, the MCP tool
``knowledge_feedback`` and ``POST /v1/feedback``.

Who may give it: whoever could see the event's results, that is the principal who made
the call (the results were filtered by their access), or an admin of its tenant (who may
read every event of the tenant anyway). The local user (CLI, stdio MCP) is the admin of
their own index. Anyone else is told the event does not exist, so event ids of other
people cannot be probed.

Every call is audited, stored or refused, through the tool's audit log: feedback becomes
golden sets, so who said what about which event is a security-relevant write. The record
is written before the feedback is stored; when it cannot be written nothing is stored."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fastjsonschema

from lore.access import Principal, principal_name, same_tenant
from lore.errors import ConfigError, LoreError, QueryError
from lore.events.record import Feedback, RetrievalEvent, new_id, now_iso
from lore.safety.audit import AuditEntry, AuditFeedback, AuditLog
from lore.safety.secrets import redact_secrets

if TYPE_CHECKING:
    from lore.events.recorder import EventRecorder
    from lore.protocols import EventStore
    from lore.tool.core import KnowledgeSearch

FEEDBACK_TOOL_NAME = "knowledge_feedback"

FEEDBACK_TOOL_DESCRIPTION = (
    "Say how a knowledge_search (or runbook_for_alert) answer served you, so the team can "
    "fix what retrieval missed. Pass the event_id from that result's metadata; list the "
    "result uris that helped and those that did not, and in 'expected' the document that "
    "should have been found (its uri or title) when the answer missed it."
)

_URIS: dict[str, Any] = {"type": "array", "maxItems": 50, "items": {"type": "string", "minLength": 1}}

FEEDBACK_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event_id": {
            "type": "string",
            "pattern": "^[0-9a-f]{32}$",
            "description": "metadata.event_id of the result this feedback is about.",
        },
        "helpful": {**_URIS, "description": "uris of results that helped."},
        "not_helpful": {**_URIS, "description": "uris of results that did not help."},
        "expected": {
            **_URIS,
            "items": {"type": "string", "minLength": 1, "maxLength": 500},
            "description": "The document that should have been found: its uri or its title.",
        },
        "note": {"type": "string", "maxLength": 2000, "description": "Anything else, in words."},
    },
    "required": ["event_id"],
    "anyOf": [{"required": [key]} for key in ("helpful", "not_helpful", "expected", "note")],
    "additionalProperties": False,
}

_VALIDATE = fastjsonschema.compile(FEEDBACK_INPUT_SCHEMA)


def _validated(arguments: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(arguments, Mapping):
        raise QueryError("arguments must be an object with an 'event_id'")
    try:
        _VALIDATE(dict(arguments))
    except fastjsonschema.JsonSchemaValueException as err:
        where = ".".join(str(part) for part in (err.path or [])[1:]) or "arguments"
        if err.rule == "anyOf" and where == "arguments":
            raise QueryError("invalid feedback: give helpful, not_helpful, expected or a note") from None
        if err.rule == "additionalProperties":
            allowed = ", ".join(FEEDBACK_INPUT_SCHEMA["properties"])
            raise QueryError(f"invalid feedback: unknown argument (allowed: {allowed})") from None
        if where == "event_id":
            message = "invalid feedback: event_id must be the 32 hex digits of metadata.event_id"
            raise QueryError(message) from None
        raise QueryError(f"invalid feedback: {where}: {err.message.removeprefix('data.')}") from None
    return dict(arguments)


def may_see(event: RetrievalEvent, principal: Principal) -> bool:
    """The event's own caller, or an admin of its tenant; the local user sees all of
    their own index. A caller that is no ``Principal`` is refused (``AccessDeniedError``)."""
    if not same_tenant(principal, event.tenant):
        return False
    return principal.is_admin or event.principal == principal.name


def submit_feedback(
    recorder: EventRecorder,
    arguments: Mapping[str, Any],
    principal: Principal,
    *,
    audit: AuditLog,
) -> Feedback:
    """Validate, audit and store feedback; ``QueryError`` for bad input or an unknown event
    (audited too), ``AuditError`` when the record cannot be written (nothing stored)."""
    try:
        store, feedback = _feedback(recorder, arguments, principal)
    except LoreError as err:
        audit.record(_audit_entry(principal, arguments, None, redact_secrets(str(err))))
        raise
    audit.record(_audit_entry(principal, arguments, feedback, None))
    store.record_feedback(feedback)
    return feedback


def _audit_entry(
    principal: Principal,
    arguments: Mapping[str, Any],
    feedback: Feedback | None,
    error: str | None,
) -> AuditEntry:
    if feedback is not None:
        said = AuditFeedback(
            event_id=feedback.event_id, feedback_id=feedback.feedback_id, helpful=feedback.helpful,
            not_helpful=feedback.not_helpful, expected=feedback.expected, note=feedback.note,
        )
    else:  # refused: only the event it named, which may be anything a caller typed
        event_id = arguments.get("event_id") if isinstance(arguments, Mapping) else None
        said = AuditFeedback(event_id=redact_secrets(str(event_id))[:64] if event_id is not None else "")
    return AuditEntry(
        time=feedback.time if feedback is not None else now_iso(),
        principal=principal_name(principal),
        tool=FEEDBACK_TOOL_NAME,
        query="",
        filters={},
        top_k=None,
        mode=None,
        engine=None,
        error=error,
        feedback=said,
    )


def _feedback(
    recorder: EventRecorder, arguments: Mapping[str, Any], principal: Principal
) -> tuple[EventStore, Feedback]:
    given = _validated(arguments)
    store = recorder.store
    if store is None:
        raise ConfigError("retrieval events are off here ([events] enabled = false): feedback has no event")
    recorder.flush()  # the event of a call that has just returned may still be queued
    event_id = given["event_id"]
    event = store.event(event_id)
    if event is None or not may_see(event, principal):
        raise QueryError(f"no retrieval event {event_id} (or not one of yours)")
    results = {hit.uri for hit in event.results}
    helpful, not_helpful = list(given.get("helpful") or []), list(given.get("not_helpful") or [])
    if strays := [uri for uri in (*helpful, *not_helpful) if uri not in results]:
        raise QueryError(
            f"invalid feedback: {', '.join(map(repr, strays))} not among the results of event {event_id}; "
            "name a missing document in 'expected'"
        )
    note = given.get("note")
    return store, Feedback(
        feedback_id=new_id(),
        event_id=event_id,
        time=now_iso(),
        principal=principal_name(principal),
        helpful=helpful,
        not_helpful=not_helpful,
        expected=[redact_secrets(item) for item in given.get("expected") or []],
        note=redact_secrets(note) if note else None,
    )


@dataclass(frozen=True)
class FeedbackResult:
    feedback: Feedback | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"feedback": self.feedback.to_json() if self.feedback else None, "error": self.error}

    def render_text(self) -> str:
        if self.feedback is None:
            return f"{FEEDBACK_TOOL_NAME} error: {self.error}"
        return f"feedback {self.feedback.feedback_id} recorded for event {self.feedback.event_id}"


class FeedbackTool:
    """The MCP tool: the same shape as ``KnowledgeSearch`` for the transports."""

    name: str = FEEDBACK_TOOL_NAME
    description: str = FEEDBACK_TOOL_DESCRIPTION
    #: It writes (``tools/list`` says readOnlyHint false).
    read_only: bool = False

    def __init__(self, search: KnowledgeSearch) -> None:
        self._recorder = search.events
        self._audit = search.audit
        self.input_schema: dict[str, Any] = copy.deepcopy(FEEDBACK_INPUT_SCHEMA)

    async def run(
        self, arguments: Mapping[str, Any], *, principal: Principal
    ) -> FeedbackResult:
        try:
            feedback = await asyncio.to_thread(
                submit_feedback, self._recorder, arguments, principal, audit=self._audit
            )
        except LoreError as err:
            return FeedbackResult(None, redact_secrets(str(err)))
        return FeedbackResult(feedback, None)
