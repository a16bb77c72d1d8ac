"""``lore.confidence`` (the calibrated verdict), the golden-set markers it is calibrated
with (``answerable: false``, ``split``) and the verdict report of ``lore eval verdict``."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lore.alerts.lookup import AlertHit
from lore.confidence import (
    AGREEMENT_RANK,
    CUTOFFS,
    MODELS,
    Confidence,
    Logistic,
    answer_confidence,
    best,
    clears,
    features,
    level,
    passage_confidence,
    probability,
)
from lore.errors import DatasetError
from lore.eval.datasets import SPLITS, load_golden_set, split_of
from lore.eval.verdict import Judged, report
from lore.models import Evidence, Passage


def passage(coverage: float | None = None, cosine: float | None = None, **ranks: int) -> Passage:
    evidence = None if coverage is None and cosine is None else Evidence(coverage=coverage, cosine=cosine)
    return Passage(
        text="t", uri="runbooks/x.md", title="x", section="", revision="r",
        updated_at=datetime(2026, 1, 1, tzinfo=UTC), score=1.0, labels={}, chunk_id="x#0",
        channel_ranks=ranks, evidence=evidence,
    )  # fmt: skip


def test_every_feature_set_a_passage_can_have_has_a_model() -> None:
    assert set(MODELS) == {
        frozenset({"coverage", "cosine", "agree"}),
        frozenset({"coverage", "cosine"}),
        frozenset({"coverage"}),
        frozenset({"cosine"}),
    }
    # More evidence never lowers the probability: every fitted weight is positive.
    assert all(weight >= 0 for model in MODELS.values() for weight in model.weights.values())


def test_features_follow_the_evidence_reported() -> None:
    assert features(passage()) == {}
    assert features(passage(coverage=0.5)) == {"coverage": 0.5}
    both = passage(coverage=0.5, cosine=0.4, bm25=1, vector=AGREEMENT_RANK)
    assert features(both) == {"coverage": 0.5, "cosine": 0.4, "agree": 1.0}
    apart = passage(coverage=0.5, cosine=0.4, bm25=1, vector=AGREEMENT_RANK + 1)
    assert features(apart)["agree"] == 0.0
    # One channel alone cannot agree with anything: the two-feature model answers.
    assert features(passage(coverage=0.5, cosine=0.4, vector=1)) == {"coverage": 0.5, "cosine": 0.4}


def test_levels_follow_the_cutoffs() -> None:
    assert level(None) is Confidence.UNKNOWN
    assert level(CUTOFFS[Confidence.HIGH]) is Confidence.HIGH
    assert level(CUTOFFS[Confidence.MEDIUM]) is Confidence.MEDIUM
    assert level(CUTOFFS[Confidence.LOW]) is Confidence.LOW
    assert level(CUTOFFS[Confidence.LOW] - 1e-9) is Confidence.NONE
    assert Logistic(bias=0.0, weights={}).probability({}) == 0.5


def test_raw_evidence_not_the_fused_score_decides() -> None:
    """Every search's best passage has the same fused score; the verdicts differ."""
    copied = replace(passage(coverage=1.0, cosine=0.8, bm25=1, vector=1), score=2.0)
    unrelated = replace(passage(coverage=0.0, cosine=0.1, bm25=1, vector=1), score=2.0)
    assert passage_confidence(copied) is Confidence.HIGH
    assert passage_confidence(unrelated) is Confidence.NONE
    lexical_only = passage(coverage=1.0)
    assert passage_confidence(lexical_only) is Confidence.HIGH
    assert passage_confidence(passage(coverage=0.0)) is Confidence.NONE
    assert probability(passage()) is None


def test_an_answer_is_as_confident_as_its_best_passage_and_unknown_is_not_none() -> None:
    assert answer_confidence([]) is Confidence.NONE
    assert best([Confidence.NONE, Confidence.LOW, Confidence.MEDIUM]) is Confidence.MEDIUM
    # An absent signal is not "nothing relevant": unknown outranks none and clears any bar.
    assert best([Confidence.NONE, Confidence.UNKNOWN]) is Confidence.UNKNOWN
    assert clears(Confidence.UNKNOWN, Confidence.HIGH)
    assert not clears(Confidence.NONE, Confidence.LOW)
    assert clears(Confidence.NONE, Confidence.NONE)
    assert not clears(Confidence.LOW, Confidence.MEDIUM)


def test_alert_text_hits_reuse_the_text_verdict() -> None:
    strong = AlertHit(passage=passage(coverage=1.0, cosine=0.8, bm25=1, vector=1), text_rank=1)
    strong.evidence.add("text")
    weak = AlertHit(passage=passage(coverage=0.0, cosine=0.1, bm25=1, vector=1), text_rank=1)
    weak.evidence.add("text")
    assert strong.confidence == passage_confidence(strong.passage).value == "high"
    assert weak.confidence == "none"
    weak.evidence.add("labels")
    assert weak.confidence == "medium"  # labels and a top text rank, as before
    weak.evidence.add("name")
    assert weak.confidence == "high"  # the alert names the runbook
    unknown = AlertHit(passage=passage(), text_rank=1)
    assert unknown.confidence == "low"  # no evidence reported: as before


GOLDEN = """
questions:
  - id: answerable
    question: etcd has no leader
    expected: file://runbooks/etcd.md
  - id: cannot
    question: mongodb has no primary
    answerable: false
    split: calibration
  - id: legacy
    question: rotate the HSM key
    expected: []
"""


def test_answerable_false_and_split_are_read(tmp_path: Path) -> None:
    path = tmp_path / "golden.yaml"
    path.write_text(GOLDEN, encoding="utf-8")
    queries = {query.qid: query for query in load_golden_set(path)}
    assert queries["answerable"].answerable
    assert not queries["cannot"].answerable
    assert not queries["legacy"].answerable
    assert queries["cannot"].split == "calibration"
    assert queries["answerable"].split == split_of("answerable") in SPLITS
    # The hash split halves a set roughly evenly and never moves a question.
    halves = [split_of(f"q{n}") for n in range(200)]
    assert 70 < halves.count("calibration") < 130
    assert halves == [split_of(f"q{n}") for n in range(200)]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("answerable: false\n    expected: file://x.md", "answerable: false, yet expected names answers"),
        ("answerable: true", "answerable: true needs expected answers"),
        ("answerable: false\n    split: later", "split"),
    ],
)
def test_contradictory_markers_are_refused(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "golden.yaml"
    path.write_text(f"questions:\n  - question: q\n    {entry}\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        load_golden_set(path)


def test_verdict_report_counts_precision_recall_and_hits() -> None:
    judged = [
        Judged("a1", True, Confidence.HIGH, hit=True),
        Judged("a2", True, Confidence.NONE, hit=True),  # an answer the verdict hides
        Judged("a3", True, Confidence.UNKNOWN, hit=False),
        Judged("n1", False, Confidence.NONE, hit=None),
        Judged("n2", False, Confidence.NONE, hit=None),
        Judged("n3", False, Confidence.LOW, hit=None),
    ]
    result = report(judged, Confidence.LOW)
    assert (result.answerable, result.unanswerable) == (3, 3)
    assert result.precision == pytest.approx(2 / 3)
    assert result.recall == pytest.approx(2 / 3)
    assert result.hit_off == pytest.approx(2 / 3)
    assert result.hit_on == pytest.approx(1 / 3)
    assert result.to_json()["levels"]["unanswerable"] == {"none": 2, "low": 1}
    stricter = report(judged, Confidence.MEDIUM)
    assert stricter.recall == 1.0
    assert report([], Confidence.LOW).precision == 1.0
