"""``lore eval from-feedback``: a golden set grown from feedback, and what each miss was.

Each feedback that names documents (``expected``, or results marked ``helpful``) on a
``knowledge_search`` event becomes a question of the golden set: the event's query (as
recorded, secrets redacted) and the documents named, in the format ``lore eval golden``
reads (``lore.eval.datasets``). So a team's own misses become the regression suite that
``--check-baseline`` defends.

The report says, for each document named as expected, which kind of miss it was:

- ``knowledge gap``: the document is not in the index (a title that names no indexed
  document, or a uri the index does not hold): no ranking can find it; write or index it.
- ``ranking gap``: it is indexed but was not among the event's results (ranked below k).
- ``in results``: it was among the results, at the rank given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lore.eval.datasets import GoldenEntry, write_golden_set
from lore.events.record import RetrievalEvent
from lore.protocols import EventStore

KNOWLEDGE_GAP = "knowledge gap"
RANKING_GAP = "ranking gap"
IN_RESULTS = "in results"

@dataclass(frozen=True)
class Miss:
    event_id: str
    query: str
    #: What the feedback named (a uri or a title).
    named: str
    #: The indexed uri it resolved to; None when it names nothing indexed.
    uri: str | None
    kind: str
    #: The rank it had among the event's results (``in results`` only).
    rank: int | None = None


@dataclass
class FeedbackGolden:
    entries: list[GoldenEntry] = field(default_factory=list)
    misses: list[Miss] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for miss in self.misses if miss.kind == kind)


def _resolve(named: str, indexed: dict[str, str]) -> list[str]:
    """The indexed uris ``named`` means: itself, or the documents with that title."""
    if named in indexed:
        return [named]
    wanted = named.casefold().strip()
    return sorted(uri for uri, title in indexed.items() if title.casefold().strip() == wanted)


def _looks_like_uri(named: str) -> bool:
    return "://" in named or "/" in named


def from_feedback(store: EventStore, indexed: Iterable[tuple[str, str]]) -> FeedbackGolden:
    """The golden entries and the misses; ``indexed``: ``(uri, title)`` of every document."""
    documents = dict(indexed)
    out = FeedbackGolden()
    by_question: dict[str, GoldenEntry] = {}
    events: dict[str, RetrievalEvent | None] = {}
    for feedback in store.feedback():
        if feedback.event_id not in events:
            events[feedback.event_id] = store.event(feedback.event_id)
        event = events[feedback.event_id]
        if event is None or event.tool != "knowledge_search" or not event.query:
            continue
        ranks = {hit.uri: hit.rank for hit in sorted(event.results, key=lambda h: h.rank, reverse=True)}
        targets: list[str] = []
        for named in feedback.expected:
            uris = _resolve(named, documents)
            if not uris:
                out.misses.append(Miss(event.event_id, event.query, named, None, KNOWLEDGE_GAP))
                if _looks_like_uri(named):
                    targets.append(named)  # scored once the document is indexed
                continue
            for uri in uris:
                rank = ranks.get(uri)
                kind = IN_RESULTS if rank is not None else RANKING_GAP
                out.misses.append(Miss(event.event_id, event.query, named, uri, kind, rank))
                targets.append(uri)
        targets.extend(feedback.helpful)
        if not targets:
            continue
        entry = by_question.get(event.query)
        if entry is None:
            entry = GoldenEntry(id=f"feedback-{event.event_id[:12]}", question=event.query, expected=[])
            by_question[event.query] = entry
            out.entries.append(entry)
        entry.expected.extend(uri for uri in dict.fromkeys(targets) if uri not in entry.expected)
    return out


def write_feedback_golden(path: Path, golden: FeedbackGolden) -> None:
    write_golden_set(path, golden.entries)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def report_lines(golden: FeedbackGolden) -> list[str]:
    lines = [
        f"{_count(len(golden.entries), 'question')}; {_count(golden.count(KNOWLEDGE_GAP), 'knowledge gap')}, "
        f"{_count(golden.count(RANKING_GAP), 'ranking gap')}, {golden.count(IN_RESULTS)} found in results"
    ]
    for miss in golden.misses:
        where = f" at rank {miss.rank}" if miss.rank is not None else ""
        target = miss.uri if miss.uri is not None and miss.uri != miss.named else None
        named = f"{miss.named!r}" + (f" ({target})" if target else "")
        lines.append(f"{miss.kind}{where}: {named} for {miss.query!r} (event {miss.event_id})")
    return lines
