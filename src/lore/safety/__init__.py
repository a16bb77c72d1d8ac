"""The safety chain every ``knowledge_search`` result passes through, in this order:

1. ``injection`` — neutralise instruction-like text planted in documents;
2. ``secrets`` — redact credentials (and, when enabled, e-mail addresses and phone numbers);
3. ``cap`` — per-passage and whole-result character caps;
4. ``audit`` — one append-only record per call.

``lore.tool.core.KnowledgeSearch.run`` applies it, so no entry point can skip it.

The names below are loaded from their modules on first use, not when the package is
imported: importing any one stage (``lore.safety.audit``, ``lore.safety.verdicts``) runs
this file first, and a search whose passages' chain results were kept at sync needs
neither the screening (Markdown parser, view screen) nor the redaction rules' regexes
until it meets a text that was not kept.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lore.safety.audit import AuditEntry, AuditHit, AuditLog, JsonlAuditLog, MemoryAuditLog
    from lore.safety.cap import CappedTexts, cap_passages, cap_text
    from lore.safety.injection import NEUTRALISED_MARKER, screen_injections
    from lore.safety.secrets import SecretRedactor, redact_secrets

#: Each exported name and the module that defines it.
_EXPORTS = {
    "NEUTRALISED_MARKER": "lore.safety.injection",
    "AuditEntry": "lore.safety.audit",
    "AuditHit": "lore.safety.audit",
    "AuditLog": "lore.safety.audit",
    "CappedTexts": "lore.safety.cap",
    "JsonlAuditLog": "lore.safety.audit",
    "MemoryAuditLog": "lore.safety.audit",
    "SecretRedactor": "lore.safety.secrets",
    "cap_passages": "lore.safety.cap",
    "cap_text": "lore.safety.cap",
    "redact_secrets": "lore.safety.secrets",
    "screen_injections": "lore.safety.injection",
}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
