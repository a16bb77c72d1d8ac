"""lore's per-document metrics against pytrec_eval (trec_eval) on the same runs."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
import pytrec_eval

from lore.eval.metrics import METRICS, RankedDocument, Target, mean_metrics, query_metrics, rank_documents
from lore.models import Passage

#: lore metric -> the trec_eval measure that means the same on a run cut at 10 (or 100).
TREC_MEASURES = {
    "hit@1": "success_1",
    "hit@3": "success_3",
    "hit@5": "success_5",
    "hit@10": "success_10",
    "recall@10": "recall_10",
    "recall@100": "recall_100",
    "ndcg@10": "ndcg_cut_10",
}


def passage(uri: str, score: float, section: str = "") -> Passage:
    return Passage(
        text="t",
        uri=uri,
        title="",
        section=section,
        revision="r",
        updated_at=datetime(2024, 1, 1, tzinfo=UTC),
        score=score,
        labels={},
        chunk_id=f"{uri}#{score}",
    )


def trec_scores(
    qrels: dict[str, dict[str, int]], rankings: dict[str, list[str]]
) -> dict[str, dict[str, float]]:
    """pytrec_eval on rank-derived scores (strictly decreasing, so trec_eval keeps our order)."""
    measures = {"success.1,3,5,10", "recall.10,100", "ndcg_cut.10", "recip_rank"}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures)
    run = {qid: {doc: float(len(docs) - i) for i, doc in enumerate(docs)} for qid, docs in rankings.items()}
    full = evaluator.evaluate(run)
    # trec_eval's recip_rank has no cutoff: MRR@10 is recip_rank on the run cut at 10.
    cut = evaluator.evaluate({qid: dict(list(scores.items())[:10]) for qid, scores in run.items()})
    for qid in full:
        full[qid]["recip_rank_10"] = cut[qid]["recip_rank"]
    return full


def random_case(
    rng: random.Random, n_queries: int = 40
) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    docs = [f"d{i}" for i in range(300)]
    qrels: dict[str, dict[str, int]] = {}
    rankings: dict[str, list[str]] = {}
    for q in range(n_queries):
        judged = rng.sample(docs, rng.randint(1, 12))
        # Graded, with some judged-irrelevant (grade 0) documents as in TREC qrels.
        qrels[f"q{q}"] = {doc: rng.choice([0, 1, 1, 2, 3]) for doc in judged}
        if all(grade == 0 for grade in qrels[f"q{q}"].values()):
            qrels[f"q{q}"][judged[0]] = 1
        pool = list(dict.fromkeys(judged + rng.sample(docs, 150)))
        rng.shuffle(pool)
        rankings[f"q{q}"] = pool[: rng.randint(0, 130)]
    return qrels, rankings


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_match_pytrec_eval(seed: int) -> None:
    qrels, rankings = random_case(random.Random(seed))
    expected = trec_scores(qrels, rankings)
    for qid, docs in rankings.items():
        targets = [Target(uri=doc, grade=grade) for doc, grade in qrels[qid].items()]
        ranking = [RankedDocument(uri=doc, score=0.0) for doc in docs]
        ours = query_metrics(ranking, targets)
        theirs = expected.get(qid)
        if theirs is None:  # trec_eval drops queries with an empty run; all our metrics are 0
            assert not docs
            assert all(value == 0.0 for value in ours.values())
            continue
        for name, measure in TREC_MEASURES.items():
            assert ours[name] == pytest.approx(theirs[measure], abs=1e-6), (qid, name)
        assert ours["mrr@10"] == pytest.approx(theirs["recip_rank_10"], abs=1e-6), qid


def test_passages_are_deduplicated_by_document_in_rank_order() -> None:
    passages = [passage("a", 0.9, "Intro"), passage("b", 0.8), passage("a", 0.7, "Fix"), passage("c", 0.6)]
    ranking = rank_documents(passages)
    assert [doc.uri for doc in ranking] == ["a", "b", "c"]
    assert ranking[0].score == 0.9
    assert ranking[0].sections == ["Intro", "Fix"]
    # "a" appears twice but counts once: recall@10 is 1/2 with one of two documents found.
    metrics = query_metrics(ranking, [Target("a"), Target("z")])
    assert metrics["recall@10"] == 0.5
    assert metrics["hit@1"] == 1.0


def test_prefix_targets_and_sections() -> None:
    ranking = rank_documents(
        [passage("file://rb/x.md", 3, "Meaning"), passage("file://rb/kafka/lag.md", 2, "Diagnosis › Disk")]
    )
    assert query_metrics(ranking, [Target("file://rb/kafka/", prefix=True)])["mrr@10"] == 0.5
    # Each target is credited once, so one document cannot satisfy a prefix twice.
    prefix_twice = [Target("file://rb/", prefix=True), Target("file://rb/", prefix=True)]
    assert query_metrics(ranking, prefix_twice)["recall@10"] == 1.0
    assert query_metrics(ranking, [Target("file://rb/kafka/lag.md", section="diagnosis")])["hit@1"] == 0.0
    assert query_metrics(ranking, [Target("file://rb/kafka/lag.md", section="diagnosis")])["hit@3"] == 1.0
    assert query_metrics(ranking, [Target("file://rb/kafka/lag.md", section="Mitigation")])["hit@10"] == 0.0


def test_query_without_relevant_target_is_refused() -> None:
    with pytest.raises(ValueError, match="relevant"):
        query_metrics([RankedDocument("a", 1.0)], [Target("a", grade=0)])


def test_mean_is_macro_average() -> None:
    per_query = {"q1": dict.fromkeys(METRICS, 1.0), "q2": dict.fromkeys(METRICS, 0.0)}
    assert mean_metrics(per_query) == dict.fromkeys(METRICS, 0.5)
    assert mean_metrics({}) == dict.fromkeys(METRICS, 0.0)
