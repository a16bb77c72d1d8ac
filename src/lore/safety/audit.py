"""Audit: one record per ``knowledge_search`` call, whatever the entry point, and one per
feedback (``knowledge_feedback``): feedback becomes golden sets, a security-relevant write.

The default log is append-only JSONL, one line per call:

    {"time": "2025-01-31T03:12:09.120000+00:00", "principal": "oncall-agent",
     "tool": "knowledge_search", "query": "etcd quorum lost", "filters": {"service": "etcd"},
     "top_k": 8, "mode": null, "engine": "sqlite",
     "results": [{"rank": 1, "uri": "runbooks/etcd.md", "chunk_id": "...", "score": 0.032}],
     "latency_ms": 41.7, "safety": {"instruction_override": 1}, "truncated": false,
     "error": null}

The query and error are redacted by the caller before they get here. A log that cannot be
written raises ``AuditError``, whose message names the file and the OS error only, never
the entry, so a failure cannot leak what was searched for.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from lore.errors import AuditError

try:  # POSIX only; elsewhere the in-process lock is all there is.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class AuditHit:
    rank: int
    uri: str
    chunk_id: str
    score: float


@dataclass(frozen=True)
class AuditFeedback:
    """What a feedback call said (``expected`` and ``note`` redacted by the caller)."""

    event_id: str
    feedback_id: str | None = None
    helpful: list[str] = field(default_factory=list)
    not_helpful: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    note: str | None = None


@dataclass(frozen=True)
class AuditEntry:
    #: UTC, ISO 8601.
    time: str
    principal: str | None
    tool: str
    query: str
    filters: dict[str, str]
    top_k: int | None
    mode: str | None
    engine: str | None
    results: list[AuditHit] = field(default_factory=list)
    latency_ms: float = 0.0
    safety: dict[str, int] = field(default_factory=dict)
    truncated: bool = False
    error: str | None = None
    #: Only on ``knowledge_feedback`` entries; a search's line has no such key.
    feedback: AuditFeedback | None = None

    def to_json(self) -> str:
        record = asdict(self)
        if self.feedback is None:
            del record["feedback"]
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


class AuditLog(Protocol):
    def record(self, entry: AuditEntry) -> None:
        """Store one entry durably enough to survive the process; raise ``AuditError``."""
        ...


class JsonlAuditLog:
    """Append-only JSONL. Safe for threads (a lock) and for processes sharing the file
    (``flock`` around each single ``write`` of a whole line to an ``O_APPEND`` fd)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def record(self, entry: AuditEntry) -> None:
        self.record_many([entry])

    def record_many(self, entries: Sequence[AuditEntry]) -> None:
        """Every entry in one ``write`` (``lore.safety.audit_writer`` groups a server's)."""
        line = "".join(entry.to_json() + "\n" for entry in entries).encode("utf-8")
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # 0o600: the log holds what people searched for.
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    if fcntl is not None:
                        fcntl.flock(fd, fcntl.LOCK_EX)
                    written = os.write(fd, line)
                    if written != len(line):
                        raise OSError(f"short write ({written} of {len(line)} bytes)")
                finally:
                    os.close(fd)  # closing also releases the flock
            except OSError as err:
                raise AuditError(_refusal(self.path, err)) from err


#: How every refusal for want of an audit record begins, so a server can tell it from a
#: refusal of the arguments (503, not 422).
REFUSAL_PREFIX = "audit log "

#: What a user changes to put the audit log elsewhere.
SETTING_HINT = "audit_path in lore.toml or LORE_AUDIT_PATH"


def _refusal(path: Path, err: OSError) -> str:
    """Why the call is refused and what to change: the cause (read-only file system, full
    disk, permissions), the file, and the setting; never the entry."""
    reason = err.strerror or str(err)
    if err.errno == errno.ENOSPC:
        cause = f"the disk holding {path.parent} is full"
    elif err.errno == errno.EROFS:
        cause = f"{path.parent} is on a read-only file system"
    else:
        cause = f"{path} is not writable"
    return (
        f"{REFUSAL_PREFIX}{path} could not be written: {reason}; every search is audited, so this one is "
        f"refused. {cause}: free space or fix it there, or point {SETTING_HINT} at a writable file"
    )


class MemoryAuditLog:
    """Keeps entries in a list: for tests and for embedding lore in a process that ships
    its own audit trail."""

    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []
        self._lock = threading.Lock()

    def record(self, entry: AuditEntry) -> None:
        with self._lock:
            self.entries.append(entry)
