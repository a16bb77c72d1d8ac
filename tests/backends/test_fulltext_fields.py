"""The BM25 channel's fields (full-text version 5): a chunk's whole text is one field, and
a title or file name counts again, in a short field of its own, only where it is a name.

The rule and its measurements: bench/history/quality.md, "A document's name by its shape". pgvector
keeps the same fields (tests/backends/test_pgvector_bm25.py compares the two backends)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lore.backends.lexical import path_is_name, path_text, title_is_name
from lore.backends.sqlite.fulltext import FullTextIndex, FullTextRow, field_texts, ident_weights, query_terms
from lore.backends.sqlite.fulltext_terms import PLAIN_EXACT_FORM


@pytest.mark.parametrize(
    "title",
    ["KubeNodeNotReady", "Disk full on the primary", "Steps to check", "PgBouncer connections saturated"],
)
def test_a_label_of_a_few_words_is_a_name(title: str) -> None:
    assert title_is_name(title)


@pytest.mark.parametrize(
    "title",
    [
        "",
        # A paper's claim and a postmortem's headline: sentences, not labels.
        "Interleukin-6 signalling drives the expansion of regulatory T cells in the gut.",
        "Postmortem: settlement delayed by a consumer rebalance storm (2026-07-22)",
        "Why did the primary run out of disk?",
        "A survival guide for SREs to working with Redis at GitLab",
    ],
)
def test_a_sentence_or_a_long_title_is_not_a_name(title: str) -> None:
    assert not title_is_name(title)


def test_a_path_is_a_name_when_its_file_name_is() -> None:
    assert path_is_name(path_text("file://gitlab/docs/pgbouncer/pgbouncer-connections.md"))
    assert path_is_name(path_text("file://openshift/alerts/KubeNodeNotReady.md"))
    assert not path_is_name(path_text("file://adr/why-we-moved-billing-off-mysql-to-postgres-in-2023.md"))
    assert not path_is_name("")


def test_the_whole_chunk_is_one_field_and_names_have_their_own() -> None:
    fields = field_texts("KubeNodeNotReady", "Diagnosis", "Check the kubelet.", "file://ops/kube-node.md")
    parts = fields["content"].split("\n")[:4]
    assert parts == ["KubeNodeNotReady", "Diagnosis", "Check the kubelet.", "ops kube-node"]
    assert "Kube Node Not Ready" in fields["content"]  # CamelCase words, as before
    assert fields["title"].startswith("KubeNodeNotReady")
    assert fields["path"].startswith("ops kube-node")
    sentence = "Interleukin-6 signalling drives the expansion of regulatory T cells in the gut."
    assert field_texts(sentence, "", "Abstract text.", "beir://4983")["title"] == ""


def _scores(tmp_path: Path, rows: list[FullTextRow], query: str) -> dict[int, float]:
    index = FullTextIndex(tmp_path / "ft", title_boost=1.0, identifier_boost=1.0)
    try:
        index.recreate()
        index.replace_all(rows)
        return dict(index.search(query, frozenset(), 10))
    finally:
        index.close()


def _row(rowid: int, title: str, text: str) -> FullTextRow:
    return FullTextRow(rowid=rowid, title=title, section="", text=text, label_terms=frozenset())


FILLER = [_row(10 + n, "Unrelated", f"a page about backups and restores number {n}") for n in range(6)]


def test_a_sentence_title_counts_its_words_once(tmp_path: Path) -> None:
    """A title that is a sentence scores as if it were the body's first line: its words
    are not counted a second time in a short field of their own."""
    sentence = "Regulatory T cells expand when interleukin signalling rises in the gut."
    as_title = _row(1, sentence, "We measured the cells in mice.")
    in_body = _row(2, "", f"{sentence}\nWe measured the cells in mice.")
    scores = _scores(tmp_path, [as_title, in_body, *FILLER], "interleukin signalling regulatory cells")
    assert scores[1] == pytest.approx(scores[2], rel=1e-6)


def test_a_name_counts_again_in_its_own_field(tmp_path: Path) -> None:
    """A page named for what it is about (a runbook named for its alert) outranks a page
    that only mentions the same words in passing."""
    named = _row(1, "Consumer lag", "Scale the group, then check the partitions.")
    mentions = _row(2, "", "Consumer lag\nScale the group, then check the partitions.")
    scores = _scores(tmp_path, [named, mentions, *FILLER], "consumer lag")
    assert scores[1] > scores[2]


def test_an_identifier_counts_whole_and_a_plain_words_exact_form_less() -> None:
    query = "Restart kube-apiserver after ERR_5002 on etcdNoLeader partitions with k8s"
    weights = ident_weights(query, query_terms(query)[1])
    assert weights == {
        "restart": PLAIN_EXACT_FORM,
        "kube-apiserver": 1.0,
        "after": PLAIN_EXACT_FORM,
        "err_5002": 1.0,
        "etcdnoleader": 1.0,
        "partitions": PLAIN_EXACT_FORM,
        "k8s": 1.0,
    }
    assert 0 < PLAIN_EXACT_FORM < 1


def test_a_plain_words_exact_form_still_tells_its_stems_matches_apart(tmp_path: Path) -> None:
    """"partition" and "partitions" share a stem; the page with the word as asked ranks
    first (the reason the exact form is searched at all)."""
    exact = _row(1, "", "Skip the poison message on the stuck partition.")
    inflected = _row(2, "", "Skip the poison message on the stuck partitions.")
    scores = _scores(tmp_path, [exact, inflected, *FILLER], "stuck partition")
    assert scores[1] > scores[2]


def test_a_plain_words_exact_form_counts_half_of_its_stem(tmp_path: Path) -> None:
    """A plain word held once scores its stem in ``content`` and its exact form in
    ``ident``; the two fields hold the same text, so at an identifier's full weight the
    exact form would score about as much as the stem (the word counted twice). Doubling
    the identifier boost isolates the exact form's share: about half the stem's."""
    rows = [_row(1, "", "Drain the node before the upgrade."), *FILLER]
    word_score = _scores(tmp_path / "w", rows, "node")[1]
    boosted = FullTextIndex(tmp_path / "b", title_boost=1.0, identifier_boost=2.0)
    try:
        boosted.recreate()
        boosted.replace_all(rows)
        word_boosted = dict(boosted.search("node", frozenset(), 10))[1]
    finally:
        boosted.close()
    exact_share = word_boosted - word_score
    stem_share = word_score - exact_share
    assert exact_share > 0
    assert exact_share / stem_share == pytest.approx(PLAIN_EXACT_FORM, rel=0.05)


def test_a_pasted_rules_placeholders_are_not_searched_for() -> None:
    rule = (
        "Disk device {{ $labels.device }} not accessible on host {{ $labels.host\n }}: "
        "{{ $value | humanizePercentage }} of {{ $externalLabels.cluster }} reads failed."
    )
    words, identifiers = query_terms(rule)
    assert "labels.device" not in identifiers
    assert not {"label", "humanizepercentag", "valu", "cluster"} & set(words)
    assert {"disk", "devic", "access", "host", "read"} <= set(words)
    # Other templates are what a page may be about: Helm's values stay searchable.
    assert "values.replicacount" in query_terms("what sets {{ .Values.replicaCount }}")[1]


def test_a_pasted_rule_finds_its_runbook_not_the_page_naming_its_labels(tmp_path: Path) -> None:
    runbook = _row(1, "Disk unavailable", "A disk device is not accessible on the host. Replace the disk.")
    taxonomy = _row(2, "Label taxonomy", "labels.device and labels.host name the device and the host.")
    rule = "Disk not accessible. Disk device {{ $labels.device }} not accessible on host {{ $labels.host }}."
    scores = _scores(tmp_path, [runbook, taxonomy, *FILLER], rule)
    assert scores[1] > scores.get(2, 0.0)
