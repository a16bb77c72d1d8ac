"""Rank fusion: the arithmetic, tie-breaking, weights and the min-max alternative."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lore.fusion import normalized_score_fusion, reciprocal_rank_fusion


def test_rrf_scores_and_ranks() -> None:
    fused = reciprocal_rank_fusion({"bm25": ["a", "b", "c"], "vector": ["b", "d"]}, k=60)
    assert [item for item, _, _ in fused] == ["b", "a", "d", "c"]
    scores = {item: score for item, score, _ in fused}
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["a"] == pytest.approx(1 / 61)
    ranks = {item: r for item, _, r in fused}
    assert ranks == {"a": {"bm25": 1}, "b": {"bm25": 2, "vector": 1}, "c": {"bm25": 3}, "d": {"vector": 2}}


def test_agreement_beats_a_single_channel_top_hit() -> None:
    fused = reciprocal_rank_fusion({"bm25": ["lexical", "both"], "vector": ["semantic", "both"]})
    assert fused[0][0] == "both"


def test_ties_are_broken_by_best_rank_then_first_appearance() -> None:
    # "a" and "x" both score 1/61 (rank 1 in one channel); "a" was seen first.
    fused = reciprocal_rank_fusion({"bm25": ["a"], "vector": ["x"]})
    assert [item for item, _, _ in fused] == ["a", "x"]
    # p/r and q/s tie exactly; within each pair the channel given first wins.
    fused = reciprocal_rank_fusion({"one": ["p", "q"], "two": ["r", "s"]})
    assert [item for item, _, _ in fused] == ["p", "r", "q", "s"]


def test_duplicates_within_a_channel_count_once_at_their_best_rank() -> None:
    fused = reciprocal_rank_fusion({"bm25": ["a", "b", "a"]})
    assert fused == [("a", pytest.approx(1 / 61), {"bm25": 1}), ("b", pytest.approx(1 / 62), {"bm25": 2})]


def test_weights_and_k() -> None:
    fused = reciprocal_rank_fusion({"bm25": ["a"], "vector": ["b"]}, weights={"vector": 2.0}, k=1)
    assert fused[0] == ("b", pytest.approx(1.0), {"vector": 1})
    assert fused[1] == ("a", pytest.approx(0.5), {"bm25": 1})
    with pytest.raises(ValueError, match="unknown channels"):
        reciprocal_rank_fusion({"bm25": ["a"]}, weights={"dense": 1.0})
    with pytest.raises(ValueError, match="negative"):
        reciprocal_rank_fusion({"bm25": ["a"]}, weights={"bm25": -1.0})
    with pytest.raises(ValueError, match="positive"):
        reciprocal_rank_fusion({"bm25": ["a"]}, k=0)


def test_empty_input() -> None:
    assert reciprocal_rank_fusion({}) == []
    assert reciprocal_rank_fusion({"bm25": [], "vector": []}) == []
    assert normalized_score_fusion({"bm25": []}) == []


def test_ids_need_only_be_hashable() -> None:
    fused = reciprocal_rank_fusion({"bm25": [3, 1], "vector": [1]})
    assert [item for item, _, _ in fused] == [1, 3]


def test_normalized_score_fusion() -> None:
    fused = normalized_score_fusion(
        {"bm25": [("a", 12.0), ("b", 6.0), ("c", 2.0)], "vector": [("c", 0.9), ("a", 0.5), ("d", 0.1)]}
    )
    scores = {item: score for item, score, _ in fused}
    assert scores == pytest.approx({"a": 1.0 + 0.5, "b": 0.4, "c": 0.0 + 1.0, "d": 0.0})
    assert [item for item, _, _ in fused] == ["a", "c", "b", "d"]
    assert fused[0][2] == {"bm25": 1, "vector": 2}


def test_normalized_score_fusion_flat_channel_and_weights() -> None:
    fused = normalized_score_fusion(
        {"bm25": [("a", 3.0), ("b", 3.0)], "vector": [("b", 0.2)]}, weights={"bm25": 0.5}
    )
    assert {item: score for item, score, _ in fused} == pytest.approx({"a": 0.5, "b": 1.5})


channel = st.lists(st.sampled_from("abcdefghij"), max_size=10, unique=True)


@given(st.dictionaries(st.sampled_from(["bm25", "vector", "sparse"]), channel, max_size=3))
def test_rrf_properties(rankings: dict[str, list[str]]) -> None:
    fused = reciprocal_rank_fusion(rankings)
    items = [item for item, _, _ in fused]
    assert sorted(items) == sorted({item for ids in rankings.values() for item in ids})
    scores = [score for _, score, _ in fused]
    assert scores == sorted(scores, reverse=True)
    for item, _, ranks in fused:
        for name, rank in ranks.items():
            assert rankings[name][rank - 1] == item
    assert reciprocal_rank_fusion(rankings) == fused  # deterministic


def test_a_floor_keeps_the_last_of_few_lexical_matches_above_no_match() -> None:
    scored = {"bm25": [("rare", 8.0), ("also", 6.0)], "vector": [("near", 0.9), ("rare", 0.5), ("also", 0.1)]}
    plain = {item: score for item, score, _ in normalized_score_fusion(scored)}
    floored = {item: score for item, score, _ in normalized_score_fusion(scored, floors={"bm25": 0.0})}
    assert plain["also"] == 0.0  # min-max: the second of two matches counts as no match
    assert floored["also"] == 6.0 / 8.0  # from the floor: it matched three quarters as well
    assert floored["rare"] == plain["rare"] == 1.0 + 0.5
    # A floor above the lowest score seen never raises it.
    assert normalized_score_fusion({"bm25": [("a", 2.0), ("b", -1.0)]}, floors={"bm25": 0.0})[1][1] == 0.0


def test_word_runs_are_lowercased_and_a_template_breaks_them() -> None:
    from lore.fusion import word_runs

    assert word_runs("One two three", run=2) == {("one", "two"), ("two", "three")}
    assert word_runs("a b {{ $labels.instance }} c d", run=3) == set()
    assert word_runs("too short", run=8) == set()


def test_copied_from_needs_a_run_of_eight_words_and_skips_short_queries() -> None:
    from lore.fusion import copied_from

    chunk = "Drain the node before you restart the kubelet so that its pods reschedule."
    assert copied_from("drain the node before you restart the kubelet so that", lambda: chunk)
    assert not copied_from("drain the node and then restart the kubelet on it", lambda: chunk)

    def never() -> str:
        raise AssertionError("a query of fewer than eight words needs no chunk text")

    assert not copied_from("restart the kubelet", never)
    assert not copied_from("one two three four five six seven eight", lambda: None)


@pytest.mark.parametrize("fusion", ["score", "rrf"])
def test_a_copied_query_takes_the_lexical_ranking_and_keeps_every_rank(fusion: str) -> None:
    from lore.fusion import fuse_channels

    channels = {"bm25": [("a", 9.0), ("b", 8.9), ("x", 1.0)], "vector": [("b", 0.9), ("c", 0.8), ("a", 0.1)]}
    fused = fuse_channels(channels, fusion=fusion, depth=3)
    assert fused[0][0] == "b"  # both channels agree on b
    copied = fuse_channels(channels, fusion=fusion, depth=3, copied=True)
    assert [item for item, _, _ in copied][:2] == ["a", "b"]  # the lexical order
    assert copied[1][2] == {"bm25": 2, "vector": 1}
