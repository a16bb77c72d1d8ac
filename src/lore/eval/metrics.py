"""Retrieval metrics, per document: Hit@k, MRR@10, Recall@k, nDCG@10.

A retriever returns chunks; an on-call engineer opens documents. So every metric is
computed on the ranked list of *documents*: passages are deduplicated by uri in rank
order (the document's rank is that of its best chunk) and a document counts once.

Relevance comes from *targets*: an exact uri, or a uri prefix (``file://runbooks/kafka/``),
optionally narrowed to a section, with a grade (graded qrels, e.g. BEIR). Each target is
credited at most once, at the first ranked document that matches it; with exact-uri
targets this is exactly trec_eval's definition (checked against pytrec_eval in the
tests): nDCG uses linear gains (the grade) and a log2(rank + 1) discount, the ideal
ranking being the targets sorted by grade.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lore.models import SECTION_SEPARATOR, Passage

#: Every metric the harness reports, in display order.
METRICS: tuple[str, ...] = (
    "hit@1",
    "hit@3",
    "hit@5",
    "hit@10",
    "mrr@10",
    "recall@10",
    "recall@100",
    "ndcg@10",
)

#: Section-level metrics, for questions whose expected answer names a section: the
#: ranking is of sections (passages deduplicated by document and section path, so two
#: chunks of one section count once), and a section is relevant when it lies inside an
#: expected one (its heading path holds the expected heading path, sub-sections included).
SECTION_METRICS: tuple[str, ...] = ("section_hit@1", "section_hit@5", "section_mrr@10")

#: Grades at or above this count as relevant for Hit, MRR and Recall (trec_eval's
#: ``relevance_level``); nDCG uses the grade itself as the gain.
RELEVANT_GRADE = 1


@dataclass(frozen=True, slots=True)
class Target:
    """One expected answer.

    ``uri`` is exact unless ``prefix`` is set; ``section`` (when given) must start one
    of the document's retrieved sections, compared case-insensitively.
    """

    uri: str
    grade: int = 1
    prefix: bool = False
    section: str | None = None

    def matches(self, document: RankedDocument) -> bool:
        uri_ok = document.uri.startswith(self.uri) if self.prefix else document.uri == self.uri
        if not uri_ok:
            return False
        if not self.section:
            return True
        wanted = self.section.casefold()
        return any(section.casefold().startswith(wanted) for section in document.sections)


@dataclass(slots=True)
class RankedDocument:
    """A document in a ranking: its best chunk's score and every section retrieved."""

    uri: str
    score: float
    sections: list[str] = field(default_factory=list)


def rank_documents(passages: Iterable[Passage]) -> list[RankedDocument]:
    """Deduplicate passages by uri, keeping rank order (first occurrence wins)."""
    documents: dict[str, RankedDocument] = {}
    for passage in passages:
        document = documents.get(passage.uri)
        if document is None:
            documents[passage.uri] = RankedDocument(passage.uri, passage.score, [passage.section])
        elif passage.section not in document.sections:
            document.sections.append(passage.section)
    return list(documents.values())


def credited_grades(ranking: Sequence[RankedDocument], targets: Sequence[Target]) -> list[int]:
    """The gain at each rank: the grade of the first not-yet-credited target the
    document matches, else 0."""
    open_targets = list(targets)
    gains: list[int] = []
    for document in ranking:
        gain = 0
        for i, target in enumerate(open_targets):
            if target.matches(document):
                gain = target.grade
                del open_targets[i]
                break
        gains.append(gain)
    return gains


def _dcg(gains: Iterable[int]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1) if gain > 0)


def query_metrics(ranking: Sequence[RankedDocument], targets: Sequence[Target]) -> dict[str, float]:
    """All of ``METRICS`` for one query. ``targets`` must hold at least one relevant
    target: questions without an answer are reported apart, never scored as misses."""
    relevant_total = sum(1 for target in targets if target.grade >= RELEVANT_GRADE)
    if relevant_total == 0:
        raise ValueError("query_metrics needs at least one relevant target")
    gains = credited_grades(ranking, targets)
    hits = [gain >= RELEVANT_GRADE for gain in gains]
    first_hit = next((rank for rank, hit in enumerate(hits, start=1) if hit), None)

    def hit_at(k: int) -> float:
        return 1.0 if first_hit is not None and first_hit <= k else 0.0

    def recall_at(k: int) -> float:
        return sum(hits[:k]) / relevant_total

    ideal = _dcg(sorted((t.grade for t in targets if t.grade > 0), reverse=True)[:10])
    return {
        "hit@1": hit_at(1),
        "hit@3": hit_at(3),
        "hit@5": hit_at(5),
        "hit@10": hit_at(10),
        "mrr@10": 1.0 / first_hit if first_hit is not None and first_hit <= 10 else 0.0,
        "recall@10": recall_at(10),
        "recall@100": recall_at(100),
        "ndcg@10": _dcg(gains[:10]) / ideal if ideal > 0 else 0.0,
    }


def mean_metrics(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Macro average over queries (every query weighs the same)."""
    if not per_query:
        return dict.fromkeys(METRICS, 0.0)
    n = len(per_query)
    return {name: sum(values[name] for values in per_query.values()) / n for name in METRICS}


def _heading_path(section: str) -> list[str]:
    return [part.strip().casefold() for part in section.split(SECTION_SEPARATOR.strip()) if part.strip()]


def inside_section(section: str, wanted: str) -> bool:
    """Whether a retrieved section path lies inside the expected section: the expected
    heading path (``Diagnosis``, or ``Kafka consumer lag › Diagnosis``) appears as
    consecutive headings of the retrieved one, so ``… › Diagnosis › Step 2`` is inside
    ``Diagnosis``. The last expected heading may be a prefix of the retrieved one
    (``Diagnosis`` holds ``Diagnosis and checks``), as document-level targets allow."""
    have, want = _heading_path(section), _heading_path(wanted)
    if not want:
        return True
    for start in range(len(have) - len(want) + 1):
        window = have[start : start + len(want)]
        if window[:-1] == want[:-1] and window[-1].startswith(want[-1]):
            return True
    return False


def rank_sections(passages: Iterable[Passage]) -> list[tuple[str, str]]:
    """``(uri, section)`` in rank order, each once (a section's rank is its best chunk's)."""
    return list(dict.fromkeys((passage.uri, passage.section) for passage in passages))


def section_targets(targets: Sequence[Target]) -> list[Target]:
    return [target for target in targets if target.section and target.grade >= RELEVANT_GRADE]


def section_metrics(sections: Sequence[tuple[str, str]], targets: Sequence[Target]) -> dict[str, float]:
    """``SECTION_METRICS`` for one query whose targets name sections (``section_targets``)."""
    wanted = section_targets(targets)
    if not wanted:
        raise ValueError("section_metrics needs a target that names a section")

    def relevant(uri: str, section: str) -> bool:
        return any(
            (uri.startswith(t.uri) if t.prefix else uri == t.uri) and inside_section(section, t.section or "")
            for t in wanted
        )

    first = next((rank for rank, item in enumerate(sections, start=1) if relevant(*item)), None)
    return {
        "section_hit@1": 1.0 if first == 1 else 0.0,
        "section_hit@5": 1.0 if first is not None and first <= 5 else 0.0,
        "section_mrr@10": 1.0 / first if first is not None and first <= 10 else 0.0,
    }


def mean_section_metrics(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The mean of ``SECTION_METRICS`` over the queries that have them (none: empty)."""
    scored = [values for values in per_query.values() if SECTION_METRICS[0] in values]
    if not scored:
        return {}
    return {name: sum(values[name] for values in scored) / len(scored) for name in SECTION_METRICS}
