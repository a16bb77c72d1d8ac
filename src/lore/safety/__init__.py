"""The safety chain every ``knowledge_search`` result passes through, in this order:

1. ``injection`` — neutralise instruction-like text planted in documents;
2. ``secrets`` — redact credentials (and, when enabled, e-mail addresses and phone numbers);
3. ``cap`` — per-passage and whole-result character caps;
4. ``audit`` — one append-only record per call.

``lore.tool.core.KnowledgeSearch.run`` applies it, so no entry point can skip it.
"""

from lore.safety.audit import AuditEntry, AuditHit, AuditLog, JsonlAuditLog, MemoryAuditLog
from lore.safety.cap import CappedTexts, cap_passages, cap_text
from lore.safety.injection import NEUTRALISED_MARKER, screen_injections
from lore.safety.secrets import SecretRedactor, redact_secrets

__all__ = [
    "NEUTRALISED_MARKER",
    "AuditEntry",
    "AuditHit",
    "AuditLog",
    "CappedTexts",
    "JsonlAuditLog",
    "MemoryAuditLog",
    "SecretRedactor",
    "cap_passages",
    "cap_text",
    "redact_secrets",
    "screen_injections",
]
