"""The pack as a separate candidate list: its ceiling, measured on existing indexes.

    .venv/bin/python eval/tuning/packsplit.py --config eval/shared-alerts.toml \
        --team TEAM.db --pack PACK.db --single BOTH.db eval/golden/alerts-gitlab.yaml ...

``TEAM.db`` holds the team's sources alone, ``PACK.db`` the playbook pack alone (the
same chunks and vectors as in ``BOTH.db``, one index holding both, as lore builds it
today); ``--prepare`` makes them from ``BOTH.db``. Each golden set runs through
``lore.eval.runner.evaluate`` (the arrangement, the pack's weight 0.75) over these
retrievers:

- ``single``: ``BOTH.db``, today's figures; ``team``: ``TEAM.db`` (pack off);
- ``single-no-pack``: ``BOTH.db``'s ranking with the pack's passages taken out (does the
  pack move the team's own order? then this differs from ``team``);
- ``split-score``: each index searched on its own (its own BM25 statistics, each
  channel min-max normalised over its own candidates, its own fusion), the two rankings
  merged by fused score (the pack's times its weight, by the arrangement);
- ``split-channels``: each index searched per channel on its own (own BM25 statistics),
  each channel's two lists merged by raw score and cut to the candidate depth, then one
  min-max fusion over the merged channels as one index does it: the statistics kept
  apart, the normalisation shared;
- ``split-calibrated``: as ``split-channels``, each index's BM25 scores first divided by
  the sum of the idf the query's terms have in that index (SQLite only), so that the two
  lexical lists share a scale whatever the collections' sizes;
- ``single-channels``: ``BOTH.db``'s hybrid fusion redone here from its two channels (it
  must equal ``single``: the check of the emulation); with ``--pack-lexical X``,
  ``single-bm25xX``: the same with the pack's BM25 scores times X before fusion (does the
  split act as a smaller lexical weight for the pack?); ``single-channels-no-pack``: the
  pack's chunks taken out of both channels' lists before that fusion (the statistics
  still the joint index's: against ``team``, what BM25's statistics alone move).

In a single-channel mode the split variants merge the two raw rankings by score
(``split-calibrated`` its calibrated BM25 scores). Per question, ``--diff`` prints where a
variant's rank of the gold page differs from ``--base``'s (``single`` or ``team``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from lore.access import AccessFilter
from lore.config import LoreSettings, load_settings
from lore.eval.datasets import load_golden_set
from lore.eval.runner import EvalRun, QueryVectorCache, evaluate
from lore.fusion import copied_from, fuse_channels
from lore.models import Passage, SearchMode
from lore.protocols import KnowledgeRetriever, Retrieval, StoringBackend
from lore.resolve import open_backend, resolve_embedder
from lore.sources import VAULT_NAME

DEPTH = 100  # settings.candidate_depth
PACK_CHUNKS = 343  # the pack's chunks in these indexes
METRICS = ("hit@1", "hit@5", "mrr@10")


class Split:
    """Retrievers' rankings as one (an experiment: no access, no labels passed on). With one
    retriever and ``how="channels"``: that index's hybrid fusion redone from its channels
    (a check of this emulation, and with ``pack_lexical`` the pack's BM25 scores scaled)."""

    modes: tuple[SearchMode, ...] = (SearchMode.HYBRID, SearchMode.BM25, SearchMode.VECTOR)
    engine = "split"
    degraded = False

    def __init__(
        self,
        parts: Sequence[KnowledgeRetriever],
        how: str,
        pack_lexical: float = 1.0,
        *,
        drop: bool = False,
        calibrated: bool = False,
    ) -> None:
        self.parts, self.how, self.pack_lexical, self.drop = parts, how, pack_lexical, drop
        self.calibrated = calibrated

    async def _both(self, query: str, top_k: int, mode: SearchMode) -> list[Passage]:
        found: list[Passage] = []
        # Taking the pack out, ask for as many more as it has chunks: the lists keep their depth.
        wanted = min(top_k + PACK_CHUNKS, 1000) if self.drop else top_k
        for part in self.parts:
            passages = (await part.retrieve(query, top_k=wanted, mode=mode)).passages
            if self.calibrated and mode is SearchMode.BM25:
                # Each index's BM25 over the idf the query's terms have in that index (the
                # most a chunk matching each term once could reach, bar tf and length):
                # a scale of its own, whatever the collection's size.
                reach = sum(part._search._layout.current.query_weights(query).values()) or 1.0  # type: ignore[attr-defined]
                passages = [replace(p, score=p.score / reach) for p in passages]
            found.extend(passages)
        if mode is SearchMode.BM25 and self.pack_lexical != 1.0:
            found = [
                replace(p, score=p.score * self.pack_lexical) if p.uri.startswith("vault:") else p
                for p in found
            ]
        if self.drop:
            found = [p for p in found if not p.uri.startswith("vault:")]
        return sorted(found, key=lambda passage: -passage.score)

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        mode = mode or SearchMode.HYBRID
        if mode is not SearchMode.HYBRID or self.how == "score":
            return Retrieval((await self._both(query, top_k, mode))[:top_k])
        depth = max(DEPTH, top_k)
        channels: dict[str, list[tuple[str, float]]] = {}
        found: dict[str, Passage] = {}
        for channel in (SearchMode.BM25, SearchMode.VECTOR):
            merged = (await self._both(query, depth, channel))[:depth]
            channels[channel.value] = [(passage.chunk_id, passage.score) for passage in merged]
            for passage in merged:
                found.setdefault(passage.chunk_id, passage)
        lexical = channels[SearchMode.BM25.value]
        copied = copied_from(
            query,
            lambda: (
                f"{found[lexical[0][0]].title}\n{found[lexical[0][0]].section}\n{found[lexical[0][0]].text}"
                if lexical
                else None
            ),
        )
        fused = fuse_channels(channels, fusion="score", depth=depth, copied=copied)
        return Retrieval(
            [replace(found[item], score=score, channel_ranks=ranks) for item, score, ranks in fused[:top_k]]
        )


class WithoutPack:
    """A diagnosis: the single index's ranking with the pack's passages taken out, to see
    whether the pack's chunks move the team's own order (then it differs from ``team``)."""

    modes = Split.modes
    engine = "without-pack"
    degraded = False

    def __init__(self, inner: KnowledgeRetriever) -> None:
        self.inner = inner

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        found = await self.inner.retrieve(query, top_k=min(top_k * 2, 1000), mode=mode)
        return Retrieval([p for p in found.passages if not p.uri.startswith("vault:")][:top_k])


def prepare(settings: LoreSettings, single: Path, team: Path, pack: Path) -> None:
    """``team`` and ``pack`` as copies of ``single`` (nothing re-embedded): the pack's
    documents deleted from the one, every other source's from the other, through the
    backend, then the full-text index rebuilt (deleted documents would otherwise still
    count in BM25's statistics)."""
    for target, keep_pack in ((team, False), (pack, True)):
        for suffix in ("", ".tantivy", ".data"):
            source, copy = Path(f"{single}{suffix}"), Path(f"{target}{suffix}")
            copy.parent.mkdir(parents=True, exist_ok=True)
            if copy.exists():
                raise SystemExit(f"{copy} exists: not overwritten")
            if source.is_dir():
                shutil.copytree(source, copy)
            elif source.exists():
                shutil.copy2(source, copy)
        backend = open_backend(settings.model_copy(update={"db_path": target}))
        assert backend is not None
        try:
            names = [VAULT_NAME] if not keep_pack else [s.name for s in settings.sources]
            with backend.write_lock():
                for name in names:
                    for uri in list(backend.held(name)):
                        backend.delete_by_uri(uri)
            backend.rebuild_fulltext()
        finally:
            backend.close()


async def run_all(
    retrievers: Mapping[str, KnowledgeRetriever],
    sets: Sequence[Path],
    modes: list[str],
    cache: QueryVectorCache,
    weight: float,
) -> dict[tuple[str, str], EvalRun]:
    runs: dict[tuple[str, str], EvalRun] = {}
    for golden in sets:
        questions = load_golden_set(golden)
        cache.prime([question.text for question in questions])
        for name, retriever in retrievers.items():
            runs[golden.name, name] = await evaluate(
                retriever,
                questions,
                modes,
                dataset=golden.name,
                embedder=cache,
                weights={"vault": weight},
            )
    return runs


def _rank(metrics: Mapping[str, float]) -> str:
    """The first relevant document's rank, from MRR@10 ('>10' past it)."""
    return str(round(1 / metrics["mrr@10"])) if metrics["mrr@10"] else ">10"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sets", nargs="+", type=Path)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--team", type=Path, required=True)
    parser.add_argument("--pack", type=Path, required=True)
    parser.add_argument("--single", type=Path, required=True)
    parser.add_argument("--mode", default="hybrid,bm25,vector")
    parser.add_argument("--weight", type=float, default=0.75)
    parser.add_argument("--prepare", action="store_true", help="make --team and --pack from --single first")
    parser.add_argument("--diff", action="store_true")
    parser.add_argument(
        "--pack-lexical",
        type=float,
        default=1.0,
        help="also: the single index with the pack's BM25 scores times this",
    )
    parser.add_argument("--base", default="single", help="the ranking --diff compares with")
    args = parser.parse_args()
    settings = load_settings(args.config)
    if args.prepare:
        prepare(settings, args.single, args.team, args.pack)
    cache = QueryVectorCache(resolve_embedder(settings))
    opened: dict[str, StoringBackend] = {}
    for name, path in (("single", args.single), ("team", args.team), ("pack", args.pack)):
        backend = open_backend(settings.model_copy(update={"db_path": path}), cache)
        assert backend is not None
        opened[name] = backend
    single, team, pack = opened["single"], opened["team"], opened["pack"]
    retrievers: dict[str, KnowledgeRetriever] = {
        "single": single,
        "team": team,
        "single-no-pack": WithoutPack(single),
        "split-score": Split([team, pack], "score"),
        "split-channels": Split([team, pack], "channels"),
        "split-calibrated": Split([team, pack], "channels", calibrated=True),
        "single-channels": Split([single], "channels"),
        # The pack's chunks out of each channel's list before fusion, the statistics kept:
        # against ``team``, what the pack's BM25 statistics alone move.
        "single-channels-no-pack": Split([single], "channels", drop=True),
    }
    if args.pack_lexical != 1.0:
        retrievers[f"single-bm25x{args.pack_lexical}"] = Split([single], "channels", args.pack_lexical)
    modes = args.mode.split(",")
    runs = asyncio.run(run_all(retrievers, args.sets, modes, cache, args.weight))
    print(f"pack weight {args.weight}; Hit@1 / Hit@5 / MRR@10")
    for golden in args.sets:
        for mode in modes:
            print(f"\n{golden.name} [{mode}]")
            for name in retrievers:
                result = runs[golden.name, name].result(mode)
                assert result is not None
                print(f"  {name:15s} " + " / ".join(f"{result.metrics[m]:.3f}" for m in METRICS))
            if not args.diff:
                continue
            base = runs[golden.name, args.base].result(mode)
            assert base is not None
            for name in retrievers:
                if name in (args.base, "team"):
                    continue
                other = runs[golden.name, name].result(mode)
                assert other is not None
                for qid, values in other.per_query.items():
                    was, now = _rank(base.per_query[qid]), _rank(values)
                    if was != now:
                        top = other.rankings[qid][0].uri if other.rankings[qid] else None
                        old = base.rankings[qid][0].uri if base.rankings[qid] else None
                        print(f"    {name:15s} {qid}: gold at {was} -> {now}  (first: {old} -> {top})")
    for backend in opened.values():
        backend.close()


if __name__ == "__main__":
    main()
