"""The correlation keys a caller may pass with any tool call (``conversation_id``,
``message_id``, free-form ``trace`` labels): optional arguments of the tools' input
schemas, recorded with the retrieval event so it can be joined with the caller's own
records. Values are redacted of secrets like the query: they are caller text too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lore.events.record import Correlation
from lore.safety.secrets import redact_secrets

_KEY: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 200}

#: Merged into each tool's ``properties``.
CORRELATION_PROPERTIES: dict[str, Any] = {
    "conversation_id": {
        **_KEY,
        "description": "Optional: your conversation or session id, recorded with the retrieval event.",
    },
    "message_id": {
        **_KEY,
        "description": "Optional: the id of the message this call answers, recorded with the event.",
    },
    "trace": {
        "type": "object",
        "maxProperties": 20,
        "additionalProperties": {"type": "string", "maxLength": 200},
        "description": 'Optional free-form labels recorded with the event, e.g. {"ticket": "INC-42"}.',
    },
}


def correlation_of(arguments: Mapping[str, Any], fingerprints: tuple[str, ...] = ()) -> Correlation:
    """The keys of validated ``arguments``."""

    def clean(value: object) -> str | None:
        return redact_secrets(value) if isinstance(value, str) else None

    trace = arguments.get("trace") or {}
    return Correlation(
        conversation_id=clean(arguments.get("conversation_id")),
        message_id=clean(arguments.get("message_id")),
        trace={str(key): redact_secrets(str(value)) for key, value in trace.items()},
        fingerprints=fingerprints,
    )
