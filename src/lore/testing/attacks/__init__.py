"""Planted attacks for testing the safety chain through any entry point.

Each ``PlantedCase`` is a piece of text an attacker (or a careless author) could put in a
runbook, the finding kind the chain must report for it, and the ``payloads``: strings
that must never reach an agent unneutralised. Fake secrets are assembled at run time
from obviously fake parts, so no real-looking token is ever stored in the repository.

    paths = write_attack_corpus(tmp_path / "runbooks")   # one Markdown file per case
    ... sync the directory, search through MCP / ADK / HTTP / CLI ...
    assert_safe(result)          # a ToolResult, its to_dict(), or rendered text

Every case document contains a unique word (``case.query``) so a search can find it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import regex

from lore.testing.attacks.case import EVIL_HOST, PlantedCase
from lore.testing.attacks.classes import CLASS_LOOK_ALIKES, class_cases
from lore.testing.attacks.evasions import evasion_cases
from lore.testing.attacks.injections import classic_injection_cases
from lore.testing.attacks.secrets import secret_cases, vendor_and_prose_secret_cases

__all__ = [
    "BENIGN_TEXTS",
    "CLASS_LOOK_ALIKES",
    "EVIL_HOST",
    "PlantedCase",
    "all_cases",
    "as_read",
    "assert_safe",
    "class_cases",
    "evasion_cases",
    "injection_cases",
    "secret_cases",
    "unsafe_payloads",
    "vendor_and_prose_secret_cases",
    "write_attack_corpus",
]


def injection_cases() -> list[PlantedCase]:
    """Every planted injection: the classic classes, the evasive spellings, then the
    classes the canonical view and structural neutralisation handle."""
    return [*classic_injection_cases(), *evasion_cases(), *class_cases()]


#: Ordinary runbook prose that must pass the chain unchanged (false-alarm checks).
BENIGN_TEXTS: tuple[str, ...] = (
    "Ignore the warning if the pod restarts once; it is expected during a rollout.",
    "Disregard the above error if the node is draining.",
    "Check the system: it should report three healthy members.",
    "You are now connected to the bastion host.",
    "## Instructions\n\n1. Open the dashboard.\n2. Compare the lag graphs.",
    "See [the etcd runbook](../etcd/quorum.md) and [ADR 12](adr/0012-queues.md#decision).",
    "Look for `Back-off restarting failed container` in `kubectl describe pod`.",
    "Set `password=<your-password>` in `~/.pgpass`, never in the repo.",
    "The fix landed in commit 3f2a9c1b4d5e6f708192a3b4c5d6e7f809a1b2c3.",
    "Request 550e8400-e29b-41d4-a716-446655440000 timed out after 30s.",
    "secretName: payments-api-db-credentials",
    "If the consumer group `orders-v2` lags, override the retention only after approval.",
    *(text for texts in CLASS_LOOK_ALIKES.values() for text in texts),
)


def all_cases() -> list[PlantedCase]:
    return [*injection_cases(), *secret_cases()]


def write_attack_corpus(directory: Path, cases: Sequence[PlantedCase] | None = None) -> list[Path]:
    """One small Markdown runbook per case (plus ``benign.md``) in ``directory``.

    Each case sits in the middle of ordinary prose, under a heading, so it goes through
    chunking like real content."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for case in cases if cases is not None else all_cases():
        path = directory / f"planted-{case.name.replace('_', '-')}.md"
        path.write_text(
            # The query word in the title and section as well, so a planted title or
            # section still ranks its document as high as every other case's.
            f"# {case.title + ' ' + case.query if case.title else 'Runbook ' + case.query}\n\n"
            f"## {case.section + ' ' + case.query if case.section else 'Procedure'}\n\n"
            f"This runbook covers the {case.query} recovery for the payments service.\n\n"
            f"{case.text}\n\n"
            f"Afterwards confirm the {case.query} service reports healthy.\n",
            encoding="utf-8",
        )
        paths.append(path)
    benign = directory / "benign.md"
    benign.write_text(
        "# Benign runbook plantedbenign\n\n## Procedure\n\n" + "\n\n".join(BENIGN_TEXTS) + "\n",
        encoding="utf-8",
    )
    paths.append(benign)
    return paths


def _strings(content: Any) -> Iterable[str]:
    """Every string in a result: its rendered text, or each leaf of its structure (so a
    payload is not hidden from the check by JSON escaping)."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, Mapping):
        for key, value in content.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(content, list | tuple):
        for item in content:
            yield from _strings(item)
    elif hasattr(content, "to_dict") and hasattr(content, "render_text"):
        yield content.render_text()
        yield from _strings(content.to_dict())
    elif content is not None and not isinstance(content, int | float | bool):
        yield str(content)


_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")


def as_read(text: str) -> str:
    """``text`` as a model reads it: NFKC, default-ignorable code points gone, case
    folded. Written apart from the screening's own normaliser, so a gap in that one
    cannot hide a leak from this check."""
    return _IGNORABLE.sub("", unicodedata.normalize("NFKC", _IGNORABLE.sub("", text))).casefold()


def unsafe_payloads(content: Any, cases: Sequence[PlantedCase] | None = None) -> list[str]:
    """``case.name: payload`` for every planted payload found in ``content``, as written
    or as read (a fullwidth or zero-width-split payload still counts)."""
    raw = [text.lower() for text in _strings(content)]
    read = [as_read(text) for text in raw]
    found = []
    for case in cases if cases is not None else all_cases():
        for payload in case.payloads:
            seen = as_read(payload)
            if any(payload.lower() in text for text in raw) or (seen and any(seen in text for text in read)):
                found.append(f"{case.name}: {payload!r}")
    return found


def assert_safe(content: Any, cases: Sequence[PlantedCase] | None = None) -> None:
    """Fail when any planted payload survives in ``content``: a string, a mapping (e.g.
    ``ToolResult.to_dict()`` or a JSON response), or a ``ToolResult``."""
    found = unsafe_payloads(content, cases)
    if found:
        raise AssertionError("planted payloads reached the agent unneutralised:\n  " + "\n  ".join(found))
