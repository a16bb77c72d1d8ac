"""``lore.named``'s remembered per-passage work: a passage's names and identifiers are
remembered across searches, and a remembered result never answers for another passage."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from lore.models import SECTION_SEPARATOR, Passage
from lore.named import Named, QueryJudge, named, query_names


def passage(text: str, *, title: str = "Payments", section: str = "Mitigation", alerts: str = "") -> Passage:
    return Passage(
        text=text,
        uri="runbooks/payments.md",
        title=title,
        section=section,
        revision="r1",
        updated_at=datetime(2026, 1, 1, tzinfo=UTC),
        score=1.0,
        labels={"alerts": alerts} if alerts else {},
        chunk_id="runbooks/payments.md#0#abc",
    )


def test_a_remembered_text_answers_only_for_that_whole_text() -> None:
    # Same chunk id, title, length and first characters: the first holds the identifier only
    # inside a longer token, the second holds it whole. Each is judged on its own text,
    # whichever was remembered first and however often.
    longer = passage("payments fail with ERR_50021 after deploy")
    whole = replace(longer, text="payments fail with ERR_5002 1after deploy")
    assert len(longer.text) == len(whole.text)
    for _ in range(3):
        assert QueryJudge("ERR_5002").strength(longer) is Named.NONE
        assert QueryJudge("ERR_5002").strength(whole) is Named.MENTION
    assert named(whole, query_names("ERR_5002")) is Named.MENTION
    assert named(longer, query_names("ERR_5002")) is Named.NONE


def test_a_remembered_name_answers_only_for_the_passage_s_own_fields() -> None:
    # Each field that names a passage is part of what is remembered: a heading, an alerts:
    # entry or the title that names one passage never names another.
    plain = passage("text")
    by_heading = replace(plain, section=f"Overview{SECTION_SEPARATOR}PaymentsQueueStuck")
    by_alert = passage("text", alerts="PaymentsQueueStuck")
    by_title = replace(plain, title="PaymentsQueueStuck")
    for _ in range(2):
        assert QueryJudge("PaymentsQueueStuck").strength(plain) is Named.NONE
        for named_one in (by_heading, by_alert, by_title):
            assert QueryJudge("PaymentsQueueStuck").strength(named_one) is Named.NAME
        assert QueryJudge("PaymentsQueueStuck").strength(plain) is Named.NONE
    # The file name names it too, and another query's names name nothing here.
    assert QueryJudge("payments").strength(plain) is Named.NAME
    assert QueryJudge("PaymentsQueueStale").strength(by_heading) is Named.NONE


# -- a name spelled in a longer query's words ------------------------------------------------


def page(uri: str, title: str, *, section: str = "Meaning", alerts: str = "") -> Passage:
    return replace(
        passage("text", title=title, section=section, alerts=alerts), uri=uri, chunk_id=f"{uri}#0#abc"
    )


NOTIFICATION = (
    "No ready virt-controller was detected for the last 10 min. "
    "No ready virt-controller pods were found in the last 10 minutes."
)


def test_a_name_the_querys_words_spell_names_the_page_and_not_its_siblings() -> None:
    # An alert description says its alert's name in words: the page of that name is named,
    # by its file name, its title or an alerts: entry; sibling alerts' pages are not.
    judge = QueryJudge(NOTIFICATION)
    assert (
        judge.strength(page("file://kubevirt/NoReadyVirtController.md", "NoReadyVirtController"))
        is Named.NAME
    )
    assert judge.strength(page("file://kubevirt/no-ready.md", "No ready virt-controller")) is Named.NAME
    assert (
        judge.strength(page("file://kubevirt/ctl.md", "Controllers", alerts="NoReadyVirtController"))
        is Named.NAME
    )
    for sibling in ("LowReadyVirtControllersCount", "NoLeadingVirtController", "VirtControllerDown"):
        assert judge.strength(page(f"file://kubevirt/{sibling}.md", sibling)) is Named.NONE
    operator = "Prometheus operator not ready. Prometheus operator in openshift-monitoring isn't ready."
    assert QueryJudge(operator).strength(page("file://po/PrometheusOperatorNotReady.md", "x")) is Named.NAME
    rejected = page("file://po/PrometheusOperatorRejectedResources.md", "PrometheusOperatorRejectedResources")
    assert QueryJudge(operator).strength(rejected) is Named.NONE


def test_words_that_only_look_like_a_name_name_nothing() -> None:
    long = "redis is out of memory on the cache cluster since the deploy at noon, check the logs"
    # one word is a topic, not a name
    assert QueryJudge(long).strength(page("file://runbooks/redis.md", "Redis")) is Named.NONE
    # a heading is not a page's name: "check the logs" is a step many pages have
    assert QueryJudge(long).strength(
        page("file://runbooks/payments.md", "Payments", section="Check the logs")
    ) is (Named.NONE)
    # a short pair names nothing by chance alone
    todo = "what to do when the queue backs up and the consumers lag behind for an hour"
    assert QueryJudge(todo).strength(page("file://runbooks/todo.md", "To do")) is Named.NONE
    # the words must spell the whole name, not a part of it
    assert QueryJudge(long).strength(page("file://runbooks/cache-cluster-failover.md", "x")) is Named.NONE
    # and the same words as a longer name's start do not name it
    assert QueryJudge(NOTIFICATION).strength(page("file://kubevirt/NoReadyVirtControllerNodes.md", "x")) is (
        Named.NONE
    )
