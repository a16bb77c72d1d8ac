"""Source priority: a team's own pages before the built-in playbook pack when both answer.

The pack (``lore.vault``) holds generic playbooks on the topics every team writes about
(a full disk, consumer lag, a node NotReady). Ranked on relevance alone, a generic page
often edges out the team's own runbook for the same alert, with its own dashboards,
names and escalation. Each source therefore carries a prior, ``weight`` (``[[sources]]
weight``, ``[vault] weight``, 0.75 by default for the pack, 1 for everything else): a
passage's fused score is multiplied by its source's weight before the answer is cut to
``top_k``. A multiplicative prior is scale-free, so it means the same on every backend
and search mode (BM25's unbounded scores, cosines, fused sums): a team page within 25 %
of the pack's best comes first, and where the team has nothing close the pack still
answers (docs/quality.md, "Source priority").

A re-scoring of the retriever's ranking rather than a term inside each backend's fusion:
one rule for every backend, applied by the consumers of a ranking (the search tool, the
alert lookup, ``lore eval``), each of which asks for a few more candidates than it shows
so a team page just below the cut can rise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from lore.models import SOURCE_LABEL, Passage

#: Source name -> weight, for the sources whose weight is not 1.
Weights = Mapping[str, float]

#: Extra candidates asked of a retriever when priorities apply: the answer's size again,
#: at least this many.
MIN_EXTRA_CANDIDATES = 10


def weight_of(passage: Passage, weights: Weights) -> float:
    return weights.get(passage.labels.get(SOURCE_LABEL, ""), 1.0) if weights else 1.0


def weighted(score: float, weight: float) -> float:
    # A negative score (a cosine below 0) would rise when multiplied by a weight below 1.
    return score * weight if score >= 0 else score / weight


def depth(top_k: int, weights: Weights) -> int:
    """Candidates to ask for to show ``top_k`` after prioritising."""
    return top_k if not weights else top_k + max(top_k, MIN_EXTRA_CANDIDATES)


def prioritised(passages: Sequence[Passage], weights: Weights) -> list[Passage]:
    """``passages`` with each score multiplied by its source's weight, re-sorted (stably:
    equal scores keep the retriever's order); unchanged when no passage is weighted."""
    if not weights:
        return list(passages)
    weighed = [(passage, weight_of(passage, weights)) for passage in passages]
    if all(weight == 1.0 for _, weight in weighed):
        return list(passages)  # nothing to re-weigh: the retriever's order, as it gave it
    rescored = [
        replace(passage, score=weighted(passage.score, weight)) if weight != 1.0 else passage
        for passage, weight in weighed
    ]
    return sorted(rescored, key=lambda passage: -passage.score)
