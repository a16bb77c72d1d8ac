"""lore.arrange: a retriever's chunks into the passages an answer shows.

Consecutive chunks of one section become one passage (the chunker's overlap kept once, at
the best chunk's rank), and one document cannot take every slot when another answers too;
a document's first passage never moves, so document rankings are what retrieval gave.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from lore.arrange import arranged, candidates, diversified, merged, named_first, ordinal
from lore.models import SOURCE_LABEL, Passage, make_chunk_id, unique_uris
from lore.text_blocks import joined

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def passage(uri: str, number: int, score: float, text: str = "", section: str = "Mitigation") -> Passage:
    text = text or f"{uri} chunk {number} text."
    return Passage(
        text=text,
        uri=uri,
        title=uri,
        section=section,
        revision="r1",
        updated_at=WHEN,
        score=score,
        labels={},
        chunk_id=make_chunk_id(uri, number, text),
    )


def test_ordinal_comes_from_the_chunk_id_and_none_for_other_shapes() -> None:
    assert ordinal(passage("file://a.md", 4, 1.0)) == 4
    assert ordinal(replace(passage("file://a.md", 4, 1.0), chunk_id="doc-17")) is None


def test_joined_keeps_the_chunkers_overlap_once() -> None:
    first = "Scale the consumers. Then check the lag again after five minutes."
    second = "Then check the lag again after five minutes. If it still grows, page the owner."
    assert joined([first, second]) == (
        "Scale the consumers. Then check the lag again after five minutes. If it still grows, page the owner."
    )
    assert joined(["No overlap here.", "Another paragraph."]) == "No overlap here.\n\nAnother paragraph."


def test_consecutive_chunks_of_one_section_become_one_passage_at_the_best_rank() -> None:
    ranked = [
        passage("file://a.md", 3, 0.9, "Step two. Step three."),
        passage("file://b.md", 0, 0.8),
        passage("file://a.md", 2, 0.7, "Step one. Step two."),
        passage("file://a.md", 4, 0.6, "Step three. Step four."),
    ]
    shown = merged(ranked)
    assert [p.uri for p in shown] == ["file://a.md", "file://b.md"]
    assert shown[0].text == "Step one. Step two. Step three. Step four."
    assert (shown[0].score, shown[0].chunk_id) == (0.9, ranked[0].chunk_id)


def test_chunks_of_other_sections_or_with_a_gap_are_not_merged() -> None:
    ranked = [
        passage("file://a.md", 1, 0.9, section="Meaning"),
        passage("file://a.md", 2, 0.8, section="Mitigation"),
        passage("file://a.md", 5, 0.7, section="Mitigation"),
    ]
    assert merged(ranked) == ranked


def test_a_merged_passage_stays_within_max_chars() -> None:
    ranked = [passage("file://a.md", n, 1.0 - n / 10, text=f"{n}" * 60 + ".") for n in range(4)]
    shown = merged(ranked, max_chars=130)
    assert [p.text[:60] for p in shown] == ["0" * 60, "2" * 60]
    assert all(len(p.text) <= 130 for p in shown)


def test_one_document_yields_slots_to_another_that_answers_too() -> None:
    ranked = [passage("file://long.md", n, 1.0 - n / 100, section=f"S{n}") for n in range(6)]
    ranked.append(passage("file://other.md", 0, 0.8))
    shown = diversified(ranked, per_document=3)
    assert [p.uri for p in shown[:4]] == ["file://long.md"] * 3 + ["file://other.md"]
    assert sorted(p.chunk_id for p in shown) == sorted(p.chunk_id for p in ranked)
    assert [p.score for p in shown] == [p.score for p in ranked]  # each place keeps its score


def test_a_document_alone_near_the_top_keeps_its_sections_places() -> None:
    ranked = [passage("file://long.md", n, 1.0 - n / 100, section=f"S{n}") for n in range(6)]
    ranked.append(passage("file://far.md", 0, 0.2))  # below half the best: does not answer
    assert diversified(ranked, per_document=3) == ranked


def test_arranged_asks_for_more_candidates_than_it_shows() -> None:
    assert [candidates(8), candidates(30)] == [18, 60]


@settings(deadline=None)  # a loaded machine is no reason to fail
@given(
    st.lists(
        st.tuples(st.sampled_from("abcd"), st.integers(0, 6), st.sampled_from(["M", "D"])),
        min_size=1,
        max_size=25,
    )
)
def test_documents_keep_their_ranks_and_no_chunk_is_lost(items: list[tuple[str, int, str]]) -> None:
    ranked = [
        passage(f"file://{doc}.md", number, 10.0 - i / 10, text=f"{doc}{number} words {i}.", section=section)
        for i, (doc, number, section) in enumerate(dict.fromkeys(items))
    ]
    shown = arranged(ranked, "how do I fix it?", max_chars=None)
    assert unique_uris(shown) == unique_uris(ranked)
    for kept in ranked:  # every chunk's text is in the answer
        assert any(kept.text in p.text for p in shown if p.uri == kept.uri)


def named(uri: str, score: float, *, title: str = "", source: str = "runbooks", alerts: str = "") -> Passage:
    labels = {SOURCE_LABEL: source, **({"alerts": alerts} if alerts else {})}
    return replace(passage(uri, 0, score, section="Meaning"), title=title or uri, labels=labels)


def test_a_document_the_query_names_is_not_overruled_by_near_ties() -> None:
    """``[FIRING:1] PrometheusOperatorNotReady``: the page titled with the alert's name goes
    before a sibling that only shares its wording; each place keeps its score."""
    ranked = [
        named("file://RejectedResources.md", 1.4, title="PrometheusOperatorRejectedResources"),
        named("file://ReconcileErrors.md", 1.3, title="PrometheusOperatorReconcileErrors"),
        named("file://NotReady.md", 1.2, title="PrometheusOperatorNotReady"),
    ]
    shown = named_first(ranked, "[FIRING:1] PrometheusOperatorNotReady operator not ready", {})
    assert [p.uri for p in shown] == [
        "file://NotReady.md",
        "file://RejectedResources.md",
        "file://ReconcileErrors.md",
    ]
    assert [p.score for p in shown] == [1.4, 1.3, 1.2]
    # the look-alike: a page that only mentions the name in its text is not lifted
    mentioned = [
        ranked[0],
        replace(ranked[2], title="Operator readiness", text="PrometheusOperatorNotReady fires"),
    ]
    assert named_first(mentioned, "PrometheusOperatorNotReady", {}) == mentioned


def test_the_packs_named_page_does_not_overrule_a_team_page_above_it() -> None:
    """The pack names every alert of its topic in ``alerts:``; the team's page that only
    mentions the alert keeps its place before it, and the named pack page still goes before
    the pack's other pages."""
    weights = {"vault": 0.75}
    ranked = [
        named("file://runbooks/node-not-ready.md", 2.0, title="Node not ready"),
        named("vault://lore/disk.md", 1.9, source="vault"),
        named("vault://lore/node-not-ready.md", 1.8, source="vault", alerts="KubeNodeNotReady"),
        named("file://runbooks/other.md", 1.0),
    ]
    shown = named_first(ranked, "[FIRING:1] KubeNodeNotReady node-3 unready", weights)
    assert [p.uri for p in shown] == [
        "file://runbooks/node-not-ready.md",
        "vault://lore/node-not-ready.md",
        "vault://lore/disk.md",
        "file://runbooks/other.md",
    ]
