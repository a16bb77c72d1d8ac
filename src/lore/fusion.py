"""Fusing the rankings of several retrieval channels (BM25, vectors, ...) into one.

Two ways, chosen by ``settings.fusion``. Reciprocal rank fusion (Cormack, Clarke &
Büttcher, SIGIR 2009) uses ranks only, so channels whose scores share no scale (BM25 is
unbounded, cosine lies in [-1, 1]) combine without calibration, and a document that
several channels agree on rises above one that a single channel loves.
``normalized_score_fusion`` (min-max per channel, weighted sum) keeps the score gaps
too: a runaway BM25 match on an exact identifier stays ahead of a crowd of near ties. It
is the default, because it ranked higher in nDCG@10 on every set measured, on every
backend (bench/history/quality.md, "Fusion").

Both return ``(id, fused_score, ranks)`` best first, where ``ranks`` maps each channel
that found the id to its 1-based rank there. Ties are broken by the best single rank,
then by first appearance (channels in the order given), so equal input gives equal
output. Ids are usually strings; any hashable id works (the SQLite backend fuses rowids).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

Id = TypeVar("Id", bound=Hashable)


def _weights(channels: Sequence[str], weights: Mapping[str, float] | None) -> dict[str, float]:
    chosen = {channel: 1.0 for channel in channels}
    if weights:
        unknown = set(weights) - set(channels)
        if unknown:
            raise ValueError(f"weights given for unknown channels: {sorted(unknown)}")
        for channel, weight in weights.items():
            if weight < 0:
                raise ValueError(f"weight of channel {channel!r} must not be negative, got {weight}")
            chosen[channel] = float(weight)
    return chosen


def _ranks(rankings: Mapping[str, Sequence[Id]]) -> tuple[dict[Id, dict[str, int]], dict[Id, int]]:
    """Per id: its 1-based rank in each channel (first occurrence wins), and the order
    in which ids were first met (channel by channel) for tie-breaking."""
    ranks: dict[Id, dict[str, int]] = {}
    first_seen: dict[Id, int] = {}
    for channel, ids in rankings.items():
        for position, item in enumerate(ids, start=1):
            per_channel = ranks.setdefault(item, {})
            per_channel.setdefault(channel, position)
            first_seen.setdefault(item, len(first_seen))
    return ranks, first_seen


def _ordered(
    scores: dict[Id, float], ranks: dict[Id, dict[str, int]], first_seen: dict[Id, int]
) -> list[tuple[Id, float, dict[str, int]]]:
    def key(item: Id) -> tuple[float, int, int]:
        return (-scores[item], min(ranks[item].values()), first_seen[item])

    return [(item, scores[item], ranks[item]) for item in sorted(scores, key=key)]


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[Id]],
    *,
    k: int = 60,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[Id, float, dict[str, int]]]:
    """``score(d) = Σ_channel weight / (k + rank_channel(d))``.

    ``rankings`` maps a channel name to its ids, best first. A larger ``k`` flattens the
    advantage of the very top ranks; 60 is the value from the paper.
    """
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    channel_weights = _weights(list(rankings), weights)
    ranks, first_seen = _ranks(rankings)
    scores = {
        item: sum(channel_weights[channel] / (k + rank) for channel, rank in per_channel.items())
        for item, per_channel in ranks.items()
    }
    return _ordered(scores, ranks, first_seen)


def normalized_score_fusion(
    scored: Mapping[str, Sequence[tuple[Id, float]]],
    *,
    weights: Mapping[str, float] | None = None,
    floors: Mapping[str, float] | None = None,
) -> list[tuple[Id, float, dict[str, int]]]:
    """Min-max normalise each channel's scores to [0, 1], then sum with ``weights``.

    ``scored`` maps a channel name to ``(id, score)`` pairs, best first. The lowest score
    a channel returned stands for everything below its cut. ``floors`` gives the score of
    everything else for a channel that returned *all* it matched (0 for BM25: a chunk
    without any query term), which is then normalised from that floor instead: otherwise
    a lexical channel that found only two chunks (a rare identifier) would rank the second
    as if it had not matched at all. A channel whose scores are all equal (and on its
    floor) contributes 1.0 for each of its ids (they are all its best).
    """

    def min_max(channel: str, values: Sequence[float]) -> Callable[[float], float]:
        high = max(values)
        low = min(values) if floors is None or channel not in floors else min(floors[channel], *values)
        return lambda score: (score - low) / (high - low) if high > low else 1.0

    return summed_fusion(scored, min_max, weights=weights)


#: Given a channel's name and its scores, the function that normalises each of them.
Normaliser = Callable[[str, Sequence[float]], Callable[[float], float]]


def summed_fusion(
    scored: Mapping[str, Sequence[tuple[Id, float]]],
    normaliser: Normaliser,
    *,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[Id, float, dict[str, int]]]:
    """Normalise each channel's scores with ``normaliser``, then sum them with ``weights``
    (an id's first occurrence in a channel counts). ``normalized_score_fusion`` is this
    with min-max; ``eval/tuning/sweep.py`` tries other normalisers."""
    channel_weights = _weights(list(scored), weights)
    ranks, first_seen = _ranks({channel: [item for item, _ in pairs] for channel, pairs in scored.items()})
    scores: dict[Id, float] = dict.fromkeys(ranks, 0.0)
    for channel, pairs in scored.items():
        if not pairs:
            continue
        scale = normaliser(channel, [score for _, score in pairs])
        seen: set[Id] = set()
        for item, score in pairs:
            if item not in seen:
                seen.add(item)
                scores[item] += channel_weights[channel] * scale(score)
    return _ordered(scores, ranks, first_seen)


def fuse_channels(
    channels: Mapping[str, Sequence[tuple[Id, float]]],
    *,
    fusion: str,
    depth: int,
    rrf_k: int = 60,
    lexical: str = "bm25",
    copied: bool = False,
) -> list[tuple[Id, float, dict[str, int]]]:
    """What every backend that fuses in Python does with its channels' ``(id, score)``
    lists, each asked for ``depth`` hits. One channel keeps its own scores. With
    ``fusion = "score"``, a ``lexical`` channel that returned fewer than ``depth`` hits
    has returned everything it matched, so every other id scores its floor of 0.

    ``copied``: the query was copied from the lexical channel's best chunk
    (``copied_from``), so the lexical ranking is the answer and the other channels weigh
    nothing; their ranks are still reported."""
    if len(channels) == 1:
        name, hits = next(iter(channels.items()))
        return [(item, score, {name: rank}) for rank, (item, score) in enumerate(hits, start=1)]
    weights = {name: float(name == lexical) for name in channels} if copied and lexical in channels else None
    if fusion == "score":
        exhausted = len(channels.get(lexical, ())) < depth
        return normalized_score_fusion(
            channels, weights=weights, floors={lexical: 0.0} if exhausted else None
        )
    ids = {name: [item for item, _ in hits] for name, hits in channels.items()}
    return reciprocal_rank_fusion(ids, k=rrf_k, weights=weights)


#: A run of this many consecutive words shared by a query and the lexical channel's best
#: chunk means the query was copied from that chunk (a pasted passage, log excerpt or
#: alert description quoting its runbook): the lexical channel is right by construction
#: there, and a vector channel's near-ties only pull other pages above it (docs/quality.md,
#: "A document's name by its shape, and copied queries"). Why 8: copy detection takes word
#: runs of 5-10 as what two independent writers do not share by chance (shingles); the
#: number was fixed before it was measured.
COPIED_RUN_WORDS = 8
_WORD = re.compile(r"\w+")
#: A Go-template placeholder (``{{ $labels.instance }}``) is not words the writer wrote:
#: it breaks a run.
_TEMPLATE = re.compile(r"\{\{.*?\}\}", re.DOTALL)


def word_runs(text: str, run: int = COPIED_RUN_WORDS) -> set[tuple[str, ...]]:
    """The runs of ``run`` consecutive words of ``text``, lowercased, not stemmed."""
    runs: set[tuple[str, ...]] = set()
    for piece in _TEMPLATE.split(text):
        words = [word.lower() for word in _WORD.findall(piece)]
        runs.update(tuple(words[i : i + run]) for i in range(len(words) - run + 1))
    return runs


def copied_from(query: str, text: Callable[[], str | None]) -> bool:
    """Whether ``query`` shares a run of ``COPIED_RUN_WORDS`` words with the chunk whose
    text ``text`` fetches (its title, section and body; called only for a query long
    enough to hold a run, so short questions cost nothing)."""
    query_runs = word_runs(query)
    if not query_runs:
        return False
    found = text()
    return found is not None and not query_runs.isdisjoint(word_runs(found))
