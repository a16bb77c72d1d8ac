"""How good the "no matching knowledge" verdict is (``lore eval verdict``).

Each question runs once, as the agent tool runs it (hybrid search, ``top_k`` passages);
the answer's confidence (``lore.confidence``) is what the tool would show. Two figures:

- the ``none`` verdict's precision (of the answers it called ``none``, how many were
  questions the corpus cannot answer) and recall (of those questions, how many it called
  ``none``);
- Hit@5 on the answerable questions with the verdict off (every answer shown) and on (an
  answer below ``min_confidence`` shows no passage, so it cannot hit): it must not drop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lore.arrange import arranged, candidates
from lore.confidence import Confidence, best, clears, passage_confidence, probability
from lore.eval.datasets import EvalQuery
from lore.eval.metrics import rank_documents
from lore.models import Passage, SearchMode
from lore.named import QueryJudge
from lore.priority import Weights
from lore.protocols import KnowledgeRetriever, retrieve_passages

HYBRID = SearchMode.HYBRID

#: Hit@k's k for the answerable questions.
HIT_K = 5


@dataclass(frozen=True, slots=True)
class Judged:
    """One question's answer as the tool would give it, with its confidence."""

    qid: str
    answerable: bool
    confidence: Confidence
    #: The answerable question's Hit@5 over the passages shown with the verdict off.
    hit: bool | None
    passages: tuple[Passage, ...] = ()
    #: The question names one of the passages (``lore.named``): the tool never withholds it.
    named: bool = False


def hit_at(passages: Sequence[Passage], query: EvalQuery, k: int = HIT_K) -> bool:
    ranking = rank_documents(passages)[:k]
    return any(target.matches(ranked) for ranked in ranking for target in query.targets)


async def judge(
    retriever: KnowledgeRetriever,
    queries: Sequence[EvalQuery],
    *,
    top_k: int,
    on_query: Callable[[str], None] | None = None,
    weights: Weights | None = None,
) -> list[Judged]:
    """Each question's answer as ``knowledge_search`` gives it: hybrid, arranged
    (``lore.arrange``, with the sources' priorities ``weights``), the tool's verdict."""
    judged: list[Judged] = []
    for query in queries:
        found = await retrieve_passages(retriever, query.text, top_k=candidates(top_k), mode=HYBRID)
        passages = arranged(found, query.text, weights)[:top_k]
        # The verdict the tool gives (``KnowledgeSearch.run_chain``): the models' levels,
        # raised for a passage the question names, which is never withheld.
        verdict = QueryJudge(query.text)
        judged.append(
            Judged(
                qid=query.qid,
                answerable=query.answerable,
                confidence=best(verdict(passage) for passage in passages),
                hit=hit_at(passages, query) if query.answerable else None,
                passages=tuple(passages),
                named=any(verdict.anchored(passage) for passage in passages),
            )
        )
        if on_query is not None:
            on_query(query.qid)
    return judged


@dataclass(slots=True)
class VerdictReport:
    minimum: Confidence
    answerable: int = 0
    unanswerable: int = 0
    #: Answers called ``none`` (below ``minimum``): of no-answer questions, of answerable ones.
    true_none: int = 0
    false_none: int = 0
    hits_off: int = 0
    hits_on: int = 0
    levels: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def precision(self) -> float:
        called = self.true_none + self.false_none
        return self.true_none / called if called else 1.0

    @property
    def recall(self) -> float:
        return self.true_none / self.unanswerable if self.unanswerable else 0.0

    @property
    def hit_off(self) -> float:
        return self.hits_off / self.answerable if self.answerable else 0.0

    @property
    def hit_on(self) -> float:
        return self.hits_on / self.answerable if self.answerable else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "min_confidence": self.minimum.value,
            "answerable": self.answerable,
            "unanswerable": self.unanswerable,
            "none_precision": round(self.precision, 4),
            "none_recall": round(self.recall, 4),
            "none_called_on_answerable": self.false_none,
            f"hit@{HIT_K}_verdict_off": round(self.hit_off, 4),
            f"hit@{HIT_K}_verdict_on": round(self.hit_on, 4),
            "levels": self.levels,
        }


def report(judged: Sequence[Judged], minimum: Confidence = Confidence.LOW) -> VerdictReport:
    """The verdict's figures when answers below ``minimum`` say "no matching knowledge"."""
    result = VerdictReport(minimum=minimum)
    for item in judged:
        shown = item.named or clears(item.confidence, minimum)
        kind = "answerable" if item.answerable else "unanswerable"
        counts = result.levels.setdefault(kind, {})
        counts[item.confidence.value] = counts.get(item.confidence.value, 0) + 1
        if item.answerable:
            result.answerable += 1
            result.false_none += not shown
            result.hits_off += bool(item.hit)
            result.hits_on += bool(item.hit) and shown
        else:
            result.unanswerable += 1
            result.true_none += not shown
    return result


def passage_rows(judged: Sequence[Judged], queries: Sequence[EvalQuery]) -> list[dict[str, Any]]:
    """Each shown passage with its evidence, probability and relevance (calibration input)."""
    by_id = {query.qid: query for query in queries}
    rows: list[dict[str, Any]] = []
    for item in judged:
        query = by_id[item.qid]
        for rank, passage in enumerate(item.passages, start=1):
            evidence = passage.evidence
            rows.append(
                {
                    "qid": item.qid,
                    "rank": rank,
                    "relevant": hit_at([passage], query, 1),
                    "coverage": evidence.coverage if evidence else None,
                    "cosine": evidence.cosine if evidence else None,
                    "ranks": dict(passage.channel_ranks),
                    "probability": probability(passage),
                    "confidence": passage_confidence(passage).value,
                }
            )
    return rows
