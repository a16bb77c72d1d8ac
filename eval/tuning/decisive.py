"""Confidence-weighted fusion per query (issue 14 §2), measured on one existing SQLite index.

    .venv/bin/python eval/tuning/decisive.py --index F --beir ../shared/benchmarks/scifact --split train
    .venv/bin/python eval/tuning/decisive.py --index F --golden eval/golden/alerts-gitlab.yaml

Min-max fusion gives both channels the same weight on every query. Here each channel is
weighted, per query, by how decisively it ranks *this* query, read from its own raw
scores over the pool it returned (200 chunks, as ``lore eval`` searches): a BM25 channel
whose best chunk stands far above the rest (a query copied from its page) should count
for more than a vector channel of near-tied cosines, and the reverse when BM25's
candidates are a crowd of partial matches. Decisiveness ``d`` of a channel:

- ``z``: the best score's z-score over the pool, ``(s1 - mean) / sd``;
- ``gap``: the best score's lead over the second, as a share of the pool's range,
  ``(s1 - s2) / (s1 - s_min)``;
- ``lead:k``: the same for the k-th score, ``(s1 - s_k) / (s1 - s_min)`` (a query with
  several relevant chunks has no single winner, but still a head above the crowd).

The weights are bounded and smooth, never a switch: ``w_bm25 = 2 d_b^p / (d_b^p + d_v^p)``,
``w_vector = 2 - w_bm25`` (both in [0, 2], equal when the channels are equally decisive;
``p`` sets how far they may lean), then min-max fusion as the backends do. Each table row
also gives the mean BM25 weight, so a rule that only shifts every query one way (a global
channel weight, measured before: docs/quality.md "Channel weights") shows as such.
Results in docs/quality.md ("Confidence-weighted fusion and the BM25 channel's fields").
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from levers import EVEN, default_lists
from sweep import EVAL_TOP_K, Channels, Hit, parsed_queries, query_parser, single, table

from lore.eval.datasets import EvalQuery
from lore.fusion import normalized_score_fusion

Decisiveness = Callable[[Sequence[float]], float]
#: Below this, a channel is taken as not decisive at all (equal scores, one hit).
_TINY = 1e-9


def z_score(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    sd = statistics.pstdev(values)
    return (values[0] - statistics.fmean(values)) / sd if sd > _TINY else 0.0


def lead(k: int) -> Decisiveness:
    def share(values: Sequence[float]) -> float:
        if len(values) < k:
            return 0.0
        spread = values[0] - min(values)
        return (values[0] - values[k - 1]) / spread if spread > _TINY else 0.0

    return share


RULES: dict[str, Decisiveness] = {"z": z_score, "gap": lead(2), "lead:5": lead(5), "lead:10": lead(10)}


def bm25_weight(bm25: float, vector: float, power: float) -> float:
    """``2 b^p / (b^p + v^p)``: 1 when both are equally decisive (or neither is)."""
    high, low = float(max(bm25, _TINY) ** power), float(max(vector, _TINY) ** power)
    return 2.0 * high / (high + low)


class Weighted:
    """A ranking function (for ``Channels.score``) that records the BM25 weight it chose."""

    def __init__(self, channels: Channels, rule: Decisiveness, power: float, centred: bool = False) -> None:
        self.channels, self.rule, self.power = channels, rule, power
        self.weights: list[float] = []
        # A diagnostic, not a deployable rule: each channel's decisiveness over its median
        # on this query set, so that only the per-query lean is left, not a global one.
        self.scale = {"bm25": 1.0, "vector": 1.0}
        if centred:
            for name, hits in (("bm25", channels.bm25(EVEN)), ("vector", channels.vector)):
                values = [rule([s for _, s in hits[q.qid][:EVAL_TOP_K]]) for q in channels.queries]
                self.scale[name] = max(statistics.median(values), _TINY)

    def __call__(self, query: EvalQuery) -> list[int]:
        lists = default_lists(self.channels, query)
        decisive = {
            name: self.rule([score for _, score in hits]) / self.scale[name] for name, hits in lists.items()
        }
        wb = bm25_weight(decisive["bm25"], decisive["vector"], self.power)
        self.weights.append(wb)
        floors = {"bm25": 0.0} if len(lists["bm25"]) < EVAL_TOP_K else None
        fused = normalized_score_fusion(lists, weights={"bm25": wb, "vector": 2.0 - wb}, floors=floors)
        return [rowid for rowid, _, _ in fused]


def described(hits: dict[str, list[Hit]], rule: Decisiveness, qids: Sequence[str]) -> str:
    values = sorted(rule([s for _, s in hits[q][:EVAL_TOP_K]]) for q in qids)
    n = len(values)
    return f"median {values[n // 2]:.3f}, quartiles {values[n // 4]:.3f}–{values[3 * n // 4]:.3f}"


def main() -> None:
    parser = query_parser(__doc__)
    parser.add_argument("--power", type=float, action="append", help="exponents p (default 0.5, 1)")
    parser.add_argument("--centred", action="store_true", help="also each rule over its median (diagnostic)")
    args = parser.parse_args()
    queries = parsed_queries(parser, args)
    print(f"{len(queries)} queries, index {args.index}")
    channels = Channels(args.index, queries, EVAL_TOP_K)
    qids = [q.qid for q in queries]
    for name, rule in RULES.items():
        print(f"{name}: bm25 {described(channels.bm25(EVEN), rule, qids)}; "
              f"vector {described(channels.vector, rule, qids)}")
    rows = [
        ("bm25", channels.score(single(channels.bm25(EVEN)))),
        ("vector", channels.score(single(channels.vector))),
    ]
    default = Weighted(channels, RULES["z"], 0.0)  # p = 0: equal weights, the default
    rows.append(("hybrid min-max, equal weights (default)", channels.score(default)))
    for power in args.power or (0.5, 1.0):
        for name, rule in RULES.items():
            weighted = Weighted(channels, rule, power)
            metrics = channels.score(weighted)
            mean = statistics.fmean(weighted.weights)
            rows.append((f"weights by {name}, p={power:g} (mean bm25 weight {mean:.2f})", metrics))
            if args.centred:
                weighted = Weighted(channels, rule, power, centred=True)
                metrics = channels.score(weighted)
                mean = statistics.fmean(weighted.weights)
                rows.append((f"weights by {name}, p={power:g}, centred (mean {mean:.2f})", metrics))
    table("confidence-weighted fusion per query (boosts 1/1/1, 200 chunks per channel)", rows)


if __name__ == "__main__":
    main()
