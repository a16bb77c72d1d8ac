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
