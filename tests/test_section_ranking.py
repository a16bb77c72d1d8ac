"""Section-level ranking and scoring: the question's intent inside a document
(``lore.intent``), the sources' priorities (``lore.priority``) and the section metrics
``lore eval`` reports (``lore.eval.metrics``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lore.eval.metrics import Target, inside_section, rank_sections, section_metrics
from lore.intent import Role, by_intent, intent
from lore.models import SOURCE_LABEL, Passage
from lore.priority import depth, prioritised


def passage(uri: str, section: str, score: float, source: str = "runbooks") -> Passage:
    return Passage(
        text="text", uri=uri, title="T", section=section, revision="r",
        updated_at=datetime(2026, 1, 1, tzinfo=UTC), score=score, labels={SOURCE_LABEL: source},
        chunk_id=f"{uri}#{section}#{score}",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("question", "role"),
    [
        ("KafkaConsumerLagHigh is firing, how do I fix it?", Role.REMEDY),
        ("how do I mitigate replica lag", Role.REMEDY),
        ("KafkaConsumerLagHigh is firing, how do I bring the lag down?", Role.REMEDY),
        ("redis is evicting keys, what do I do to stop it?", Role.REMEDY),
        ("cert-manager did not renew it, how do I renew the certificate by hand?", Role.REMEDY),
        # any act a question asks how to do asks for its procedure ...
        ("/var/log/journal is eating the root disk, how do I shrink it safely?", Role.REMEDY),
        ("etcd raised NOSPACE alarm, how do I defragment and disarm it?", Role.REMEDY),
        ("how to reinitialise a patroni replica that is hours behind", Role.REMEDY),
        ("how can we roll back a bad release of payments-api", Role.REMEDY),
        # ... but an act of looking asks for the Diagnosis, and a light verb for nothing
        ("how do I tell whether the replica is still streaming?", Role.DIAGNOSIS),
        ("how to investigate slow fsync on the etcd disk", Role.DIAGNOSIS),
        ("how do I make sure the backup ran last night", None),
        ("how do I get access to the grafana dashboards", None),
        ("how it works: the ledger writes through pgbouncer", None),
        ("how do I check which upstream returns SERVFAIL?", Role.DIAGNOSIS),
        ("why did the node go NotReady?", Role.DIAGNOSIS),
        ("how do I see why a pod is in CrashLoopBackOff?", Role.DIAGNOSIS),
        # a question for causes asks for Causes (then Diagnosis)
        ("container is throttled even though node CPU is idle, what causes CFS throttling?", Role.CAUSE),
        ("what could cause etcd leader elections every few minutes", Role.CAUSE),
        ("what's causing the 502s on the ingress?", Role.CAUSE),
        ("what is the reason for OOMKilled pods", Role.CAUSE),
        ("possible causes of disk pressure on a node", Role.CAUSE),
        ("what was the root cause of the March outage", Role.CAUSE),
        # ... but an alert's description that gives its cause is a statement
        ("Pods are restarting because of OOMKilled in namespace payments.", Role.MEANING),
        ("The cause of the failure is unknown, check the logs of the pod.", Role.MEANING),
        ("who is affected when the gateway returns 5xx", Role.IMPACT),
        # an alert notification or a statement of a condition asks what it means
        ("[FIRING:1] KubeNodeNotReady node-3 unready for 15 minutes", Role.MEANING),
        ("[FIRING:1] DNSResolutionFailing resolver errors, investigate upstream", Role.MEANING),
        ("alertname=KubeNodeNotReady severity=warning", Role.MEANING),
        ("There are 3 unhealthy distributor(s) in cluster prod-eu-1.", Role.MEANING),
        ("nf_conntrack: table full, dropping packet", Role.MEANING),
        ("what does KafkaConsumerLagHigh mean", Role.MEANING),
        # ... but a question, or a topic of a few words, keeps the retriever's order
        ("what is the consumer lag threshold for payments?", None),
        ("is the node unready for more than 15 minutes", None),
        ("consumer lag high", None),
        ("kafka lag", None),
    ],
)
def test_intent_reads_only_unambiguous_phrasings(question: str, role: Role | None) -> None:
    assert intent(question) is role


def test_an_alert_text_puts_the_section_that_says_what_it_means_first() -> None:
    """The sections of one runbook share the alert's words; a notification's Meaning (or a
    playbook's Symptoms) goes first inside each document, documents keeping their ranks."""
    ranked = [
        passage("a.md", "A › Impact", 2.0),
        passage("a.md", "A › Diagnosis", 1.9),
        passage("b.md", "Symptoms", 1.8),
        passage("a.md", "A › Meaning", 1.5),
        passage("b.md", "Fixes", 1.4),
    ]
    ordered = by_intent(ranked, "There are 3 unhealthy ingester(s) in cluster prod-eu-1.")
    assert [(p.uri, p.section) for p in ordered] == [
        ("a.md", "A › Meaning"),
        ("a.md", "A › Impact"),
        ("b.md", "Symptoms"),
        ("a.md", "A › Diagnosis"),
        ("b.md", "Fixes"),
    ]
    assert [p.score for p in ordered] == [p.score for p in ranked]
    assert by_intent(ranked, "which ingester is unhealthy?") == ranked


def test_a_question_for_causes_puts_causes_then_checks_first() -> None:
    ranked = [
        passage("cpu.md", "CPU throttling › Checks", 2.1),
        passage("cpu.md", "CPU throttling › Symptoms", 2.0),
        passage("cpu.md", "CPU throttling › Common causes", 1.5),
        passage("pm.md", "Postmortem › Timeline", 1.3),
        passage("pm.md", "Postmortem › Root cause", 1.2),
        passage("node.md", "Node › Meaning", 1.1),
        passage("node.md", "Node › Diagnosis", 1.0),
    ]
    ordered = by_intent(ranked, "what causes CFS throttling?")
    assert [p.section for p in ordered if p.uri == "cpu.md"] == [
        "CPU throttling › Common causes",
        "CPU throttling › Checks",
        "CPU throttling › Symptoms",
    ]
    assert [p.section for p in ordered if p.uri == "pm.md"] == [
        "Postmortem › Root cause",
        "Postmortem › Timeline",
    ]
    # a document without a Causes section: its Diagnosis answers instead
    assert [p.section for p in ordered if p.uri == "node.md"] == ["Node › Diagnosis", "Node › Meaning"]
    assert [p.score for p in ordered] == [p.score for p in ranked]
    # "why" still asks for Diagnosis and Checks, a Causes heading among them
    assert [p.section for p in by_intent(ranked, "why is CPU throttled?") if p.uri == "cpu.md"] == [
        "CPU throttling › Checks",
        "CPU throttling › Common causes",
        "CPU throttling › Symptoms",
    ]


def test_by_intent_moves_the_asked_section_first_inside_its_document_only() -> None:
    ranked = [
        passage("a.md", "A › Meaning", 2.0),
        passage("b.md", "B › Meaning", 1.8),
        passage("a.md", "A › Impact", 1.5),
        passage("a.md", "A › Mitigation", 1.2),
        passage("b.md", "B › Mitigation", 1.0),
    ]
    ordered = by_intent(ranked, "how do I fix it?")
    assert [(p.uri, p.section) for p in ordered] == [
        ("a.md", "A › Mitigation"),
        ("b.md", "B › Mitigation"),
        ("a.md", "A › Meaning"),
        ("a.md", "A › Impact"),
        ("b.md", "B › Meaning"),
    ]
    assert [p.uri for p in ordered] == [p.uri for p in ranked]  # every document keeps its ranks
    assert [p.score for p in ordered] == [p.score for p in ranked]  # scores still fall
    assert by_intent(ranked, "consumer lag") == ranked


def test_priority_lets_the_team_page_rise_only_when_comparable() -> None:
    pack = passage("vault://lore/redis.md", "Symptoms", 2.0, source="vault")
    close = passage("file://runbooks/redis.md", "Meaning", 1.7)
    far = passage("file://runbooks/other.md", "Meaning", 1.2)
    assert next(p.uri for p in prioritised([pack, close], {"vault": 0.75})) == close.uri
    assert next(p.uri for p in prioritised([pack, far], {"vault": 0.75})) == pack.uri
    assert prioritised([far, pack], {}) == [far, pack]  # no weights: the retriever's order
    negative = passage("vault://lore/x.md", "S", -0.2, source="vault")
    assert prioritised([negative], {"vault": 0.5})[0].score < -0.2  # a yielding source never rises
    assert depth(5, {}) == 5
    assert depth(5, {"vault": 0.75}) > 5


def test_a_section_counts_inside_its_expected_heading_sub_sections_included() -> None:
    assert inside_section("Kafka lag › Diagnosis › Step 2", "Diagnosis")
    assert inside_section("Kafka lag › Diagnosis", "kafka lag › diagnosis")
    assert inside_section("Rotation (manual renewal)", "Rotation")
    assert not inside_section("Kafka lag › Meaning", "Diagnosis")
    assert not inside_section("Diagnosis › Meaning", "Meaning › Diagnosis")


def test_section_metrics_count_a_section_once_and_only_the_expected_one() -> None:
    ranking = rank_sections(
        [
            passage("a.md", "A › Meaning", 2.0),
            passage("a.md", "A › Meaning", 1.9),  # a second chunk of the same section
            passage("a.md", "A › Mitigation › Restart", 1.5),
        ]
    )
    assert ranking == [("a.md", "A › Meaning"), ("a.md", "A › Mitigation › Restart")]
    wanted = [Target(uri="a.md", section="Mitigation")]
    assert section_metrics(ranking, wanted) == {
        "section_hit@1": 0.0,
        "section_hit@5": 1.0,
        "section_mrr@10": 0.5,
    }
    with pytest.raises(ValueError, match="names a section"):
        section_metrics(ranking, [Target(uri="a.md")])
