"""Before and after ``lore.arrange`` on the same retrievals of one configured index.

    LORE_VAULT__ENABLED=true .venv/bin/python eval/tuning/arrange.py --config eval/shared-alerts.toml \
        build/eval/alert-sections.jsonl eval/golden/alerts-openshift.yaml \
        [--no-answer eval/golden/no-answer-shared.yaml] [--grid]

Each question is retrieved ONCE per mode (200 chunks, as ``lore eval`` asks first; with
``--documents 100``, grown as ``lore eval golden`` grows it, so its figures are that
command's; the tool's 18 candidates for the verdict), and every arrangement is then
computed from those same passages, so the rows differ by the arrangement alone:

- ``before``: the sources' priorities and the question's intent only (lore before
  ``lore.arrange``: no merging, no diversity);
- ``merge``: plus consecutive chunks of one section as one passage;
- ``after``: plus diversity by document (``PER_DOCUMENT``, ``ANSWERS_TOO``), lore's default
  (with the page the query names first and the section the question asks for: ``lore.arrange``);
- ``after, phrasing only``: ``after`` without the two rules for alert text: a section is
  put first by a question's phrasing alone (no Meaning for a notification or an alert's
  description) and no page is lifted because the query names it (``--ablate``);
- ``per=N floor=F``: diversity with other parameters (``--grid``);
- ``after, vault weight W``: lore's default with the pack at another ``[vault] weight``
  (``--vault-weights 1,0.5``; the pack must be in the index);
- ``after, slots AxG[xL]``: lore's default, then at most A pack documents above each of
  the team's first G documents the evidence supports (verdict at least L, ``low`` unless
  given; ``--slots 1x1,0x99xhigh``; ``slotted`` below, a variant measured and not adopted);
- ``after, the pack's passages taken out``: lore's default without the pack's passages
  (``--ceiling``): the best a rule that only moves the pack's documents can reach.

Per set and mode: Hit@1 / Hit@5 / MRR@10 / nDCG@10 on documents and, where questions name
a section, Hit@1 / Hit@5 / MRR@10 on sections; what the first 8 passages (the tool's
``top_k``) hold: the share of the expected documents among them (what diversity is for),
distinct sections, documents, and the most passages one document takes. With
``--no-answer`` sets, the "none" verdict as ``knowledge_search`` gives it (hybrid, top 8,
pack on when the settings enable it): precision, recall, answerable questions called none.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from lore.arrange import ANSWERS_TOO, PER_DOCUMENT, arranged, candidates, diversified, merged, named_first
from lore.confidence import Confidence, best, clears
from lore.config import load_settings
from lore.eval.datasets import EvalQuery, load_golden_set
from lore.eval.metrics import (
    mean_metrics,
    mean_section_metrics,
    query_metrics,
    rank_documents,
    rank_sections,
    section_metrics,
    section_targets,
)
from lore.eval.runner import QueryVectorCache
from lore.intent import Role, by_intent, phrasing
from lore.models import Passage, SearchMode
from lore.named import QueryJudge
from lore.priority import Weights, prioritised, weight_of
from lore.protocols import KnowledgeRetriever, retrieve_passages
from lore.resolve import open_backend, resolve_embedder, source_weights
from lore.sources import VAULT_NAME

TOP_K = 8
CHUNKS = 200
Arrangement = Callable[[Sequence[Passage], str, Weights], list[Passage]]


def before(found: Sequence[Passage], query: str, weights: Weights) -> list[Passage]:
    return by_intent(prioritised(found, weights), query)


def merge_only(found: Sequence[Passage], query: str, weights: Weights) -> list[Passage]:
    return by_intent(named_first(merged(prioritised(found, weights)), query, weights), query)


def diverse(per: int, floor: float) -> Arrangement:
    def arrange(found: Sequence[Passage], query: str, weights: Weights) -> list[Passage]:
        return diversified(merge_only(found, query, weights), per_document=per, answers_too=floor)

    return arrange


def lore_default(found: Sequence[Passage], query: str, weights: Weights) -> list[Passage]:
    return arranged(found, query, weights)


def phrasing_only(found: Sequence[Passage], query: str, weights: Weights) -> list[Passage]:
    """lore's arrangement without the rules for alert text (module docstring)."""
    role = phrasing(query)
    ranked = merged(prioritised(found, weights))
    if role is not None and role is not Role.MEANING:
        ranked = by_intent(ranked, query, role)
    return diversified(ranked)


def with_vault(weight: float) -> Arrangement:
    """lore's arrangement with the pack at another priority (``[vault] weight``)."""

    def arrange(found: Sequence[Passage], query: str, weights: Weights) -> list[Passage]:
        return diverse(PER_DOCUMENT, ANSWERS_TOO)(found, query, {**weights, VAULT_NAME: weight})

    return arrange


def slotted(
    passages: Sequence[Passage],
    query: str,
    weights: Weights,
    *,
    ahead: int,
    guarded: int = 1,
    minimum: Confidence = Confidence.LOW,
) -> list[Passage]:
    """A slot guarantee for the team's pages (``--slots``; measured, not adopted: the
    results log, "a slot for the team's page"): each of the first ``guarded`` documents of
    sources that do not yield (weight 1 or more) which the query's evidence supports (named
    by the query, or a verdict at least ``minimum``: what the "none" verdict would keep)
    gets at most ``ahead`` documents of yielding sources (weight below 1) above it; its
    first passage moves to just before the next yielding document's first passage. Each
    place keeps its score. Unchanged without weights below 1."""
    if all(weight >= 1.0 for weight in weights.values()):
        return list(passages)
    judge = QueryJudge(query)
    order = list(passages)
    seen: set[str] = set()
    promoted = index = 0
    while index < len(order) and promoted < guarded:
        passage = order[index]
        index += 1
        if passage.uri in seen:
            continue
        seen.add(passage.uri)
        if weight_of(passage, weights) < 1.0 or not (
            judge.anchored(passage) or clears(judge(passage), minimum)
        ):
            continue
        promoted += 1
        firsts: set[str] = set()
        yielding = []  # where each yielding document above it has its first passage
        for place, above in enumerate(order[: index - 1]):
            if above.uri not in firsts:
                firsts.add(above.uri)
                if weight_of(above, weights) < 1.0:
                    yielding.append(place)
        if len(yielding) > ahead:
            order.insert(yielding[ahead], order.pop(index - 1))
    return [
        passage if passage.score == place.score else replace(passage, score=place.score)
        for passage, place in zip(order, passages, strict=True)
    ]


def with_slots(ahead: int, guarded: int, minimum: Confidence) -> Arrangement:
    """lore's arrangement, then ``slotted``."""

    def arrange(found: Sequence[Passage], query: str, weights: Weights) -> list[Passage]:
        return slotted(
            arranged(found, query, weights), query, weights, ahead=ahead, guarded=guarded, minimum=minimum
        )

    return arrange


def without_yielding(found: Sequence[Passage], query: str, weights: Weights) -> list[Passage]:
    """lore's arrangement with the yielding sources' passages (the pack's) taken out
    afterwards (``--ceiling``): for a question the team answers, the best any rule that only
    moves the pack's documents can do, since their fused scores stay what they were with
    the pack among the candidates."""
    return [passage for passage in arranged(found, query, weights) if weight_of(passage, weights) >= 1.0]


def arrangements(
    grid: bool,
    vault_weights: Sequence[float] = (),
    ablate: bool = False,
    slots: Sequence[str] = (),
    ceiling: bool = False,
) -> dict[str, Arrangement]:
    if ablate:
        return {"after, phrasing only": phrasing_only, "after": lore_default}
    chosen: dict[str, Arrangement] = {
        "before": before,
        "merge": merge_only,
        "after": lore_default,
    }
    for weight in vault_weights:
        chosen[f"after, vault weight {weight:g}"] = with_vault(weight)
    for spec in slots:  # ahead x guarded [x minimum], e.g. 1x1, 2x3xmedium
        ahead, guarded, *rest = spec.split("x")
        minimum = Confidence(rest[0]) if rest else Confidence.LOW
        chosen[f"after, slots {spec}"] = with_slots(int(ahead), int(guarded), minimum)
    if ceiling:
        chosen["after, the pack's passages taken out"] = without_yielding
    if grid:
        for per in (2, 3, 4):
            for floor in (0.0, 0.5, 0.7):
                chosen[f"per={per} floor={floor:g}"] = diverse(per, floor)
    return chosen


def scores(questions: Sequence[EvalQuery], ranked: dict[str, list[Passage]]) -> dict[str, float]:
    per_query: dict[str, dict[str, float]] = {}
    shape: Counter[str] = Counter()
    for question in questions:
        passages = ranked[question.qid]
        per_query[question.qid] = query_metrics(rank_documents(passages)[:100], question.targets)
        if section_targets(question.targets):
            per_query[question.qid].update(section_metrics(rank_sections(passages), question.targets))
        shown = passages[:TOP_K]
        shape["recall"] += query_metrics(rank_documents(shown), question.targets)["recall@10"]
        shape["sections"] += len({(p.uri, p.section) for p in shown})
        shape["documents"] += len({p.uri for p in shown})
        shape["most"] += max(Counter(p.uri for p in shown).values(), default=0)
    n = max(len(questions), 1)
    return {
        **mean_metrics(per_query),
        **mean_section_metrics(per_query),
        **{key: value / n for key, value in shape.items()},
    }


async def run(args: argparse.Namespace) -> None:
    settings = load_settings(args.config)
    weights = source_weights(settings)
    cache = QueryVectorCache(resolve_embedder(settings))
    backend = open_backend(settings, cache)
    assert isinstance(backend, KnowledgeRetriever)
    sets = {path.name: [q for q in load_golden_set(path) if q.answerable] for path in args.golden}
    refusals = [q for path in args.no_answer for q in load_golden_set(path) if not q.answerable]
    cache.prime([q.text for qs in sets.values() for q in qs] + [q.text for q in refusals])
    chosen = arrangements(
        args.grid,
        [float(w) for w in args.vault_weights.split(",") if w],
        args.ablate,
        [spec for spec in args.slots.split(",") if spec],
        args.ceiling,
    )
    modes = [SearchMode(mode) for mode in args.modes.split(",")]
    print(f"index {settings.db_path}; weights {dict(weights)}")
    for name, questions in sets.items():
        found: dict[SearchMode, dict[str, list[Passage]]] = {}
        for mode in modes:
            found[mode] = {q.qid: await _retrieved(backend, q.text, mode, args.documents) for q in questions}
        sectioned = any(section_targets(q.targets) for q in questions)
        print(f"\n## {name} ({len(questions)} questions)")
        head = "| arrangement | mode | doc Hit@1 | doc Hit@5 | doc MRR@10 | doc nDCG@10 |"
        head += " sec Hit@1 | sec Hit@5 | sec MRR@10 |" if sectioned else ""
        print(head + " top-8 recall / sections / documents / most of one |")
        for label, arrange in chosen.items():
            for mode in modes:
                ranked = {
                    qid: arrange(passages, _text(questions, qid), weights)
                    for qid, passages in found[mode].items()
                }
                got = scores(questions, ranked)
                shown = ["hit@1", "hit@5", "mrr@10", "ndcg@10"]
                shown += ["section_hit@1", "section_hit@5", "section_mrr@10"] if sectioned else []
                cells = [f"{got[name]:.3f}" for name in shown]
                shape = f"{got['recall']:.3f} / " + " / ".join(
                    f"{got[name]:.2f}" for name in ("sections", "documents", "most")
                )
                print(f"| {label} | {mode.value} | {' | '.join(cells)} | {shape} |")
    if refusals:
        print("\n## the none verdict (hybrid, top 8)")
        print("| arrangement | answerable set | answerable called none | none precision | none recall |")
        answers = {
            q.qid: list(
                await retrieve_passages(backend, q.text, top_k=candidates(TOP_K), mode=SearchMode.HYBRID)
            )
            for q in [*refusals, *(q for qs in sets.values() for q in qs)]
        }
        for label, arrange in chosen.items():
            refused = sum(_none(arrange(answers[q.qid], q.text, weights), q.text) for q in refusals)
            for name, questions in sets.items():
                wrongly = sum(_none(arrange(answers[q.qid], q.text, weights), q.text) for q in questions)
                called = refused + wrongly
                precision = refused / called if called else 1.0
                print(
                    f"| {label} | {name} ({len(questions)} + {len(refusals)}) | {wrongly} | "
                    f"{precision:.3f} | {refused / len(refusals):.3f} |"
                )
    backend.close()


async def _retrieved(
    backend: KnowledgeRetriever, query: str, mode: SearchMode, documents: int | None
) -> list[Passage]:
    """``CHUNKS`` chunks; with ``documents``, as ``lore eval golden`` retrieves them
    (``lore.eval.runner``: 2 chunks per document asked, doubled until the chunks hold
    ``documents`` documents, at most 8 per document), so the figures are ``lore eval``'s."""
    if documents is None:
        return list(await retrieve_passages(backend, query, top_k=CHUNKS, mode=mode))
    top_k = documents * 2
    while True:
        found = list(await retrieve_passages(backend, query, top_k=top_k, mode=mode))
        if len({p.uri for p in found}) >= documents or len(found) < top_k or top_k >= documents * 8:
            return found
        top_k *= 2


def _text(questions: Sequence[EvalQuery], qid: str) -> str:
    return next(q.text for q in questions if q.qid == qid)


def _none(passages: Sequence[Passage], query: str) -> bool:
    """The tool's verdict (``KnowledgeSearch.run_chain``): no passage clears ``low`` and
    none is named by the query."""
    shown = passages[:TOP_K]
    judge = QueryJudge(query)
    if any(judge.anchored(p) for p in shown):
        return False
    return not shown or not clears(best(judge(p) for p in shown), Confidence.LOW)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("golden", nargs="+", type=Path, help="golden sets (answerable questions)")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--modes", default="bm25,vector,hybrid")
    parser.add_argument("--no-answer", type=Path, action="append", default=[], help="no-answer sets")
    parser.add_argument("--grid", action="store_true", help="diversity parameters beside the default")
    parser.add_argument("--vault-weights", default="", help="pack priorities to try, e.g. 1,0.5")
    parser.add_argument(
        "--slots",
        default="",
        help="pack slot rules to try: AHEADxGUARDED[xMINIMUM], e.g. 1x1,2x3xmedium (lore.arrange.slotted)",
    )
    parser.add_argument(
        "--documents",
        type=int,
        help="retrieve as `lore eval golden --depth N` does (100 there) instead of 200 chunks",
    )
    parser.add_argument(
        "--ceiling", action="store_true", help="also lore's arrangement with the pack's passages taken out"
    )
    parser.add_argument(
        "--ablate", action="store_true", help="only lore's default and its phrasing-only variant (see above)"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
