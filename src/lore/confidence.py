"""How sure a search is that a passage answers its query: high / medium / low / none.

Every search returns ``top_k`` passages and fusion normalises the best to the same
maximum, so the fused score cannot tell an answerable question from one the corpus knows
nothing about. The verdict comes from the channels' raw evidence instead
(``lore.models.Evidence``):

- ``coverage``: the share of the query's idf weight whose terms the passage holds;
- ``cosine``: the vector channel's similarity of query and passage;
- ``agree``: both channels put the passage in their top ``AGREEMENT_RANK``.

A logistic model over the features a passage has gives the probability that it is
relevant; fixed cut-offs on that probability give the level. One model per set of known
features, all fitted on the calibration halves of the golden sets, answerable and
no-answer questions together (``eval/calibrate_confidence.py`` prints the constants
below; docs/quality.md, "Confidence"). A passage without evidence is ``unknown``, and
an unknown never makes an answer ``none``: an absent signal is not "nothing relevant".

A passage the query names (``lore.named``: an identifier of the query is its title, file
name, ``alerts:`` entry or heading, or appears whole in its text) is raised to a floor
(``NAMED_FLOOR``) and always clears the gate: a query of one identifier has almost no
wording for the models to weigh, and withholding its runbook is the worst answer.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lore.models import Passage
from lore.named import Named, named, query_names

#: Both channels ranking a passage this high or better counts as agreement.
AGREEMENT_RANK = 10


class Confidence(enum.StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    NONE = "none"
    #: The backend reports no evidence for this passage.
    UNKNOWN = "unknown"


#: Ranks of the levels; ``unknown`` ranks above ``none`` and below ``low``, and
#: ``clears`` lets it through every threshold.
_ORDER = {
    Confidence.NONE: 0,
    Confidence.UNKNOWN: 1,
    Confidence.LOW: 2,
    Confidence.MEDIUM: 3,
    Confidence.HIGH: 4,
}

#: Probability cut-offs: at least this for high, medium, low; below ``low`` is none.
#: ``low`` is half the best probability of the least confident answerable calibration
#: question (0.436), rounded down: withholding a real answer costs an agent more than
#: showing weak passages marked low, so the margin is on the answerable side.
#: (0.3, between the two groups, hid one held-out answer: docs/quality.md, "Confidence".)
CUTOFFS: Mapping[Confidence, float] = {
    Confidence.HIGH: 0.75,
    Confidence.MEDIUM: 0.5,
    Confidence.LOW: 0.2,
}


@dataclass(frozen=True, slots=True)
class Logistic:
    """``p = 1 / (1 + exp(-(bias + Σ weight·feature)))``."""

    bias: float
    weights: Mapping[str, float]

    def probability(self, features: Mapping[str, float]) -> float:
        z = self.bias + sum(weight * features[name] for name, weight in self.weights.items())
        return 1.0 / (1.0 + math.exp(-z))


#: Fitted by ``eval/calibrate_confidence.py`` (local MiniLM embedder, hybrid search, the
#: calibration halves). Agreement earns almost no weight: among the top 8 passages nearly
#: every one is in both channels' top 10, so it tells little that coverage and cosine do not.
MODELS: Mapping[frozenset[str], Logistic] = {
    frozenset({"coverage", "cosine", "agree"}): Logistic(
        bias=-6.534, weights={"coverage": 5.492, "cosine": 8.625, "agree": 0.03}
    ),
    frozenset({"coverage", "cosine"}): Logistic(bias=-6.532, weights={"coverage": 5.512, "cosine": 8.658}),
    frozenset({"coverage"}): Logistic(bias=-3.625, weights={"coverage": 8.982}),
    frozenset({"cosine"}): Logistic(bias=-6.659, weights={"cosine": 12.371}),
}


def features(passage: Passage) -> dict[str, float]:
    """The features a passage has evidence for (none when the backend reports none)."""
    evidence = passage.evidence
    if evidence is None:
        return {}
    found: dict[str, float] = {}
    if evidence.coverage is not None:
        found["coverage"] = evidence.coverage
    if evidence.cosine is not None:
        found["cosine"] = evidence.cosine
    ranks = passage.channel_ranks
    if found.keys() == {"coverage", "cosine"} and {"bm25", "vector"} <= ranks.keys():
        found["agree"] = float(max(ranks["bm25"], ranks["vector"]) <= AGREEMENT_RANK)
    return found


def probability(passage: Passage) -> float | None:
    """The fitted probability that the passage is relevant; None without evidence."""
    found = features(passage)
    model = MODELS.get(frozenset(found))
    return None if model is None else model.probability(found)


def level(p: float | None) -> Confidence:
    if p is None:
        return Confidence.UNKNOWN
    for confidence in (Confidence.HIGH, Confidence.MEDIUM, Confidence.LOW):
        if p >= CUTOFFS[confidence]:
            return confidence
    return Confidence.NONE


def passage_confidence(passage: Passage) -> Confidence:
    return level(probability(passage))


def best(levels: Iterable[Confidence]) -> Confidence:
    """The answer's confidence: its most confident passage's; ``none`` for no passage."""
    return max(levels, key=_ORDER.__getitem__, default=Confidence.NONE)


def answer_confidence(passages: Sequence[Passage]) -> Confidence:
    return best(passage_confidence(passage) for passage in passages)


def clears(confidence: Confidence, minimum: Confidence) -> bool:
    """Whether a verdict is at least ``minimum``; ``unknown`` always is (fail-open)."""
    return confidence is Confidence.UNKNOWN or _ORDER[confidence] >= _ORDER[minimum]


#: The least confidence a named passage (``lore.named``) is given: its name is the page's
#: or section's own name (medium), or appears whole in its text (low).
NAMED_FLOOR: Mapping[Named, Confidence] = {Named.NAME: Confidence.MEDIUM, Named.MENTION: Confidence.LOW}


def raised(confidence: Confidence, floor: Confidence | None) -> Confidence:
    """``confidence``, at least ``floor`` (an ``unknown`` becomes the floor)."""
    if floor is None:
        return confidence
    if confidence is Confidence.UNKNOWN:
        return floor
    return max(confidence, floor, key=_ORDER.__getitem__)


class QueryJudge:
    """The confidence of each passage of one query's answer, and whether the query names
    it (such a passage is never withheld, whatever ``min_confidence`` says)."""

    def __init__(self, query: str) -> None:
        self._names = query_names(query)
        self._named: dict[str, Named] = {}

    def strength(self, passage: Passage) -> Named:
        found = self._named.get(passage.chunk_id)
        if found is None:
            found = self._named[passage.chunk_id] = named(passage, self._names)
        return found

    def __call__(self, passage: Passage) -> Confidence:
        return raised(passage_confidence(passage), NAMED_FLOOR.get(self.strength(passage)))

    def anchored(self, passage: Passage) -> bool:
        return bool(self.strength(passage))
