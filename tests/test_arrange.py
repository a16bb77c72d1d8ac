"""lore.arrange: a retriever's chunks into the passages an answer shows.

Consecutive chunks of one section become one passage (the chunker's overlap kept once, at
the best chunk's rank), and one document cannot take every slot when another answers too;
a document's first passage never moves, so document rankings are what retrieval gave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from lore.arrange import arranged, candidates, diversified, merged, named_first, ordinal
from lore.models import SOURCE_LABEL, Chunk, Passage, chunk_to_passage, make_chunk_id, unique_uris
from lore.text_blocks import joined
from lore.tool.cleaning import merged_texts

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


def test_a_pack_page_the_query_names_by_its_own_name_passes_a_team_page_holding_no_name() -> None:
    """``pod stuck in ImagePullBackOff``: the pack's ``image-pull-backoff.md`` is named by
    its file name and title; the team's CrashLoopBackOff page above it holds none of the
    query's names, so the two do not answer comparably and the named page goes first."""
    weights = {"vault": 0.75}
    crashloop = named("file://runbooks/pod-crashloopbackoff.md", 2.0, title="Pod in CrashLoopBackOff")
    pack = named(
        "vault://lore/image-pull-backoff.md", 1.8, title="ImagePullBackOff and ErrImagePull", source="vault"
    )
    shown = named_first([crashloop, pack], "pod stuck in ImagePullBackOff: manifest unknown", weights)
    assert [p.uri for p in shown] == [pack.uri, crashloop.uri]
    assert [p.score for p in shown] == [2.0, 1.8]
    # the look-alikes: a team page that mentions the name keeps its place ...
    mentioning = replace(crashloop, text="Also check for ImagePullBackOff in the events.")
    assert named_first([mentioning, pack], "pod stuck in ImagePullBackOff", weights) == [mentioning, pack]
    # ... and a pack page named only by its alerts: list never passes a team page
    listed = named("vault://lore/pods.md", 1.8, title="Pods", source="vault", alerts="KubePodCrashLooping")
    other = named("file://runbooks/restarts.md", 2.0, title="Restarts")
    assert named_first([other, listed], "[FIRING:1] KubePodCrashLooping", weights) == [other, listed]
    # ... nor does a short topic query that is the pack page's title word for word
    topic = named("vault://lore/disk-full.md", 1.8, title="Disk full", source="vault")
    team = named("file://runbooks/node-disk-pressure.md", 2.0, title="Node disk pressure")
    assert named_first([team, topic], "disk full", weights) == [team, topic]


# -- what sync keeps is what a search can show ----------------------------------------------

WORDS = [f"word{n:03d}" for n in range(400)]


def chunks_of(layout: Sequence[tuple[int, str, int]]) -> list[Chunk]:
    """A document's chunks as the chunker cuts them: ``(ordinal, section, words)``, each
    chunk repeating the last four words of the one before (the overlap ``joined`` drops)."""
    made, at = [], 0
    for number, section, size in layout:
        text = " ".join(WORDS[max(0, at - 4) : at + size])
        at += size
        made.append(
            Chunk(
                id=make_chunk_id("file://etcd.md", number, text),
                uri="file://etcd.md",
                ordinal=number,
                text=text,
                section=section,
                content_hash="",
                title="etcd",
                revision="r1",
                updated_at=WHEN,
            )
        )
    return made


def showable(chunks: Sequence[Chunk], max_chars: int) -> set[str]:
    """Every text a search can show of ``chunks``: ``lore.arrange.merged`` over each subset
    a retriever could return, ranked in an order unrelated to the document's."""
    ranked = [chunk_to_passage(chunk, 1.0) for chunk in chunks[::2] + chunks[1::2]]
    found = set()
    for size in range(1, len(ranked) + 1):
        for subset in combinations(ranked, size):
            found.update(p.text for p in merged(subset, max_chars=max_chars))
    return found


def kept_by_sync(chunks: Sequence[Chunk], max_chars: int) -> set[str]:
    """The texts sync keeps verdicts for: each chunk's, and ``merged_texts``."""
    return {chunk.text for chunk in chunks} | set(merged_texts(chunks, max_chars))


def test_sync_keeps_exactly_the_merged_texts_a_search_can_show() -> None:
    """A document with several sections, a heading that comes back after a gap in the
    ordinals (``Notes``), a run longer than ``max_chars`` (``Mitigation``) and a chunk
    longer than it alone: the verdicts sync keeps (``merged_texts``) are each merged text
    a search can show, no more, no fewer."""
    max_chars = 160
    chunks = chunks_of(
        [
            (0, "Meaning", 6),
            (1, "Meaning", 6),
            (2, "Mitigation", 8),
            (3, "Mitigation", 8),
            (4, "Mitigation", 8),
            (5, "Mitigation", 8),
            (6, "Notes", 5),
            (7, "Escalation", 5),
            (8, "Notes", 5),
            (9, "Notes", 5),
            (10, "Appendix", 25),  # alone longer than max_chars
            (11, "Appendix", 3),
        ]
    )
    shown = showable(chunks, max_chars)
    assert kept_by_sync(chunks, max_chars) == shown
    kept = merged_texts(chunks, max_chars)
    assert len(kept) == len(set(kept))
    assert not set(kept) & {chunk.text for chunk in chunks}
    whole = joined([chunk.text for chunk in chunks if chunk.section == "Mitigation"])
    assert len(whole) > max_chars
    assert whole not in shown  # that run is shown in pieces
    assert all(len(text) <= max_chars for text in kept)  # a chunk alone may be longer
    assert not any(chunks[6].text in text and chunks[8].text in text for text in shown)  # the gap


@settings(deadline=None, max_examples=40)  # a loaded machine is no reason to fail
@given(
    st.lists(
        st.tuples(st.sampled_from(["A", "B"]), st.integers(1, 12), st.booleans()), min_size=1, max_size=7
    ),
    st.integers(40, 200),
)
def test_any_document_keeps_what_a_search_can_show(cuts: list[tuple[str, int, bool]], max_chars: int) -> None:
    numbers, layout = 0, []
    for section, size, gap in cuts:
        numbers += 1 + gap  # a gap: an ordinal of another section left out of the answer
        layout.append((numbers, section, size))
    chunks = chunks_of(layout)
    assert kept_by_sync(chunks, max_chars) == showable(chunks, max_chars)


def test_a_page_the_querys_words_spell_goes_before_a_sibling_the_retriever_put_first() -> None:
    """ "No ready virt-controller was detected ...": the retriever put the sibling alert's
    page (VirtControllerDown, the same component) first; the page whose name the words
    spell goes first. A pack page so named still does not pass a team page (its name is
    not an identifier of the query)."""
    query = (
        "No ready virt-controller was detected for the last 10 min. No ready virt-controller pods were found."
    )
    sibling = named("file://kubevirt/VirtControllerDown.md", 2.0, title="VirtControllerDown")
    spelled = named("file://kubevirt/NoReadyVirtController.md", 1.7, title="NoReadyVirtController")
    assert [p.uri for p in named_first([sibling, spelled], query)] == [spelled.uri, sibling.uri]
    weights = {"vault": 0.75}
    pack = named(
        "vault://lore/no-ready-virt-controller.md", 1.7, title="No ready virt-controller", source="vault"
    )
    assert named_first([sibling, pack], query, weights) == [sibling, pack]
