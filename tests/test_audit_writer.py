"""The servers' audit log (``lore.safety.audit_writer``): records from concurrent callers
are appended in groups by one thread, each caller returns only once its own record is in
the file, and a record that cannot be written fails its caller (fail-closed)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from lore.errors import AuditError
from lore.safety.audit import AuditEntry, JsonlAuditLog
from lore.safety.audit_writer import QueuedAuditLog, record_entry


def _entry(number: int) -> AuditEntry:
    when = "2026-12-01T00:00:00+00:00"
    return AuditEntry(when, "p", "knowledge_search", f"q{number}", {}, 5, None, "sqlite")


class HeldLog(JsonlAuditLog):
    """Its first append waits for ``release``, so that the next records queue behind it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.release = threading.Event()
        self.entered = threading.Event()
        self.groups: list[int] = []

    def record_many(self, entries: Sequence[AuditEntry]) -> None:
        self.groups.append(len(entries))
        if len(self.groups) == 1:
            self.entered.set()
            assert self.release.wait(60)
        super().record_many(entries)


async def test_records_that_queue_are_appended_together_and_each_caller_waits_for_its_own(
    tmp_path: Path,
) -> None:
    inner = HeldLog(tmp_path / "audit.jsonl")
    log = QueuedAuditLog(inner)
    first = asyncio.ensure_future(log.record_async(_entry(0)))
    assert await asyncio.to_thread(inner.entered.wait, 60)
    rest = [asyncio.ensure_future(log.record_async(_entry(n))) for n in range(1, 11)]
    await asyncio.sleep(0)
    assert not any(task.done() for task in [first, *rest]), "no answer before its record is written"
    inner.release.set()
    await asyncio.gather(first, *rest)
    lines = [json.loads(line)["query"] for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert sorted(lines) == sorted(f"q{n}" for n in range(11))
    assert inner.groups == [1, 10]
    log.close()


async def test_an_unwritable_log_fails_every_caller_of_the_group(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").mkdir()  # a directory where the file should be
    log = QueuedAuditLog(JsonlAuditLog(tmp_path / "audit.jsonl"))
    results = await asyncio.gather(*(record_entry(log, _entry(n)) for n in range(5)), return_exceptions=True)
    assert all(isinstance(result, AuditError) for result in results)
    assert all(str(result).startswith("audit log ") for result in results)
    log.close()


def test_a_full_queue_is_refused_at_once(tmp_path: Path) -> None:
    inner = HeldLog(tmp_path / "audit.jsonl")
    log = QueuedAuditLog(inner, max_queued=2)
    held = log.submit(_entry(0))
    assert inner.entered.wait(60)
    queued = [log.submit(_entry(1)), log.submit(_entry(2))]
    with pytest.raises(AuditError, match="records behind"):
        log.submit(_entry(3))
    inner.release.set()
    for future in (held, *queued):
        future.result(60)
    log.close()
    assert len((tmp_path / "audit.jsonl").read_text().splitlines()) == 3
