"""The pgvector backend's analysis (``analysis.field_terms``: ``re`` tokens, each analysed
once by tantivy) gives exactly the terms of the SQLite index's (``fulltext.field_terms``,
tantivy over whole texts): the two backends must rank alike, and an index is not rebuilt
for a speed-up."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optional_extras import require_extra

require_extra("psycopg", "pgvector")

from lore.backends.pgvector import analysis  # noqa: E402
from lore.backends.sqlite import fulltext  # noqa: E402


def _assert_same(title: str, section: str, text: str, uri: str = "") -> None:
    # The same terms, as many times each: the postings count terms and keep no positions.
    fast = analysis.field_terms(title, section, text, uri)
    whole = fulltext.field_terms(title, section, text, uri)
    assert {name: Counter(terms) for name, terms in fast.items()} == {
        name: Counter(terms) for name, terms in whole.items()
    }


def test_the_identifier_pattern_is_the_sqlite_index_s() -> None:
    assert analysis.IDENT_PATTERN == fulltext.IDENT_PATTERN


def _pages(root: Path) -> list[str]:
    return [page.read_text(encoding="utf-8", errors="replace") for page in sorted(root.rglob("*.md"))]


def _assert_same_pages(pages: list[str], root: Path) -> None:
    ascii_pages = 0
    for number, page in enumerate(pages):
        title, _, body = page.partition("\n")
        uri = f"file://{root.name}/{number}/2024-05-01-{title[:30].strip()}.md"
        # Whole pages, and each paragraph as a chunk would be.
        _assert_same(title, "Steps to check", page, uri)
        for paragraph in body.split("\n\n")[:20]:
            _assert_same(title, paragraph[:60], paragraph, uri)
        ascii_pages += page.isascii()
    assert ascii_pages, "no ASCII page: the fast path was never taken"


def test_the_terms_of_the_examples_are_the_sqlite_index_s(repo_root: Path) -> None:
    root = repo_root / "examples" / "runbooks"
    _assert_same_pages(_pages(root), root)


def test_the_terms_of_the_shared_corpora_are_the_sqlite_index_s(shared_root: Path) -> None:
    root = shared_root / "corpora"
    pages = _pages(root)
    if not pages:
        pytest.skip(f"no Markdown pages under {root}")
    _assert_same_pages(pages, root)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "KubeAPIDown on kube-apiserver.service: ERR_1234 at 10.0.0.1:6443",
        "quay.io/coreos/kube-apiserver:v1.29 etcdNoLeader node_exporter",
        "The THE the a an and In INTO into of is Was",
        "x" * 39 + " " + "y" * 40 + " " + "z" * 99 + "." + "w" * 120,
        "a.b. -a- _x_ __ a..b a--b a-.b 1.2.3 p99 k8s IPv4 mRNA",
        "running runs ran runner's connection's it's don't",
        "tabs\tand\nnew\r\nlines\x00nul \x7f del ~!#%^&*()+=[]{}|\\;<>,?",
        "é non-ASCII falls back: Ελλάδα ΟΔΟΣ naïve",
    ],
)
def test_edge_texts(text: str) -> None:
    _assert_same(text[:20], text[::-1], text, "file://docs/" + text[:10].replace(" ", "-") + ".md")


_ALPHABET = st.sampled_from([*"aZbYzAQqIiSs09_.-:/@ \n\t(),'\"{}$|", "the", "and", "Running", "é"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_ALPHABET, max_size=60).map("".join), st.lists(_ALPHABET, max_size=10).map("".join))
def test_any_text(text: str, title: str) -> None:
    _assert_same(title, title[::-1], text, f"file://a/{title}.md")


def test_a_full_cache_starts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "CACHE_TOKENS", 4)
    for number in range(20):
        _assert_same("t", "s", f"word{number} other{number} KubeX{number}Down")
    assert len(analysis._STEMMED) <= 4 + 16
