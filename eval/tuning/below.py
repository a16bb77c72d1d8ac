"""Every question where hybrid ranks the gold below its better single channel.

    LORE_VAULT__ENABLED=true .venv/bin/python eval/tuning/below.py --config eval/shared-alert-runbooks.toml \
        build/eval/alert-sections-design.jsonl [--depth 100] [--show 3]

Each question is ranked as ``lore eval golden`` ranks it (``lore.eval.runner``: enough
chunks for ``--depth`` documents, arranged as the search tool arranges them) in bm25,
vector and hybrid. Per question: the rank of the first relevant document and, where the
question names a section, of the first relevant section, in each mode. Printed: every
question whose hybrid rank (document or section) is worse than the better channel's,
with the first ``--show`` documents / sections each mode put first and the channel
ranks of hybrid's first passages (``--wins``: also where hybrid is right at rank 1 and
bm25 is not); then a count of questions where hybrid is above, at,
and below the better channel at rank 1 (what "hybrid never below its better channel"
asks of Hit@1).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from lore.config import load_settings
from lore.eval.datasets import EvalQuery, load_golden_set
from lore.eval.metrics import inside_section, rank_documents, rank_sections, section_targets
from lore.eval.runner import QueryVectorCache, retrieve_for_mode
from lore.models import Passage
from lore.protocols import KnowledgeRetriever
from lore.resolve import open_backend, resolve_embedder, source_weights

MODES = ("bm25", "vector", "hybrid")
MISSING = 10**6


def first_document(passages: list[Passage], query: EvalQuery) -> int:
    for rank, document in enumerate(rank_documents(passages), start=1):
        if any(t.matches(document) and t.grade >= 1 for t in query.targets):
            return rank
    return MISSING


def first_section(passages: list[Passage], query: EvalQuery) -> int:
    wanted = section_targets(query.targets)
    if not wanted:
        return 0
    for rank, (uri, section) in enumerate(rank_sections(passages), start=1):
        if any(
            (uri.startswith(t.uri) if t.prefix else uri == t.uri) and inside_section(section, t.section or "")
            for t in wanted
        ):
            return rank
    return MISSING


def shown(rank: int) -> str:
    return "-" if rank == MISSING else str(rank)


async def run(args: argparse.Namespace) -> None:
    settings = load_settings(args.config)
    cache = QueryVectorCache(resolve_embedder(settings))
    backend = open_backend(settings, cache)
    assert isinstance(backend, KnowledgeRetriever)
    weights = source_weights(settings)
    for path in args.golden:
        queries = [q for q in load_golden_set(path) if q.answerable]
        cache.prime([q.text for q in queries])
        tally = {"doc": [0, 0, 0], "section": [0, 0, 0]}
        against = {(level, channel): [0, 0] for level in ("doc", "section") for channel in ("bm25", "vector")}
        print(f"## {path.name} ({len(queries)} questions)")
        for query in queries:
            found = {
                mode: await retrieve_for_mode(backend, query.text, mode, depth=args.depth, weights=weights)
                for mode in MODES
            }
            doc = {mode: first_document(found[mode], query) for mode in MODES}
            sec = {mode: first_section(found[mode], query) for mode in MODES}
            flagged = []
            for level, ranks in (("doc", doc), ("section", sec)):
                if not ranks["hybrid"]:
                    continue
                better = min(ranks["bm25"], ranks["vector"])
                at_one = (ranks["hybrid"] == 1) - (better == 1)
                tally[level][0 if at_one > 0 else 1 if at_one == 0 else 2] += 1
                for channel in ("bm25", "vector"):
                    if (ranks["hybrid"] == 1) != (ranks[channel] == 1):
                        against[level, channel][0 if ranks["hybrid"] == 1 else 1] += 1
                if ranks["hybrid"] > better:
                    flagged.append(level)
                elif args.wins and ranks["hybrid"] == 1 and ranks["bm25"] != 1:
                    flagged.append(f"{level} won over bm25")
            if not flagged:
                continue
            print(
                f"{query.qid} [{','.join(flagged)}] doc b/v/h {'/'.join(shown(doc[m]) for m in MODES)}"
                f"  section {'/'.join(shown(sec[m]) for m in MODES)}\n    {query.text[:160]!r}"
            )
            for mode in MODES:
                heads = rank_sections(found[mode])[: args.show]
                print(f"    {mode:6} " + " | ".join(f"{u.rsplit('/', 1)[-1]}#{s[:30]}" for u, s in heads))
            for passage in found["hybrid"][: args.show]:
                print(
                    f"      h {passage.score:.3f} {dict(passage.channel_ranks)} "
                    f"{passage.uri.rsplit('/', 1)[-1]}#{passage.section[:30]}"
                )
        for level, (above, at, below) in tally.items():
            print(f"  {level} rank 1: hybrid above its better channel {above}, same {at}, below {below}")
        for (level, channel), (won, lost) in against.items():
            print(f"  {level} rank 1 against {channel}: hybrid alone right {won}, {channel} alone {lost}")
    backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("golden", nargs="+", type=Path)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--show", type=int, default=3)
    parser.add_argument("--wins", action="store_true", help="also where hybrid alone beats bm25 at rank 1")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
