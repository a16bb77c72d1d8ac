"""``lexical.camel_words`` and ``sub_identifiers`` find the runs of token characters they
analyse with a scan and grow each run from what it holds, and keep each token's analysis;
the words must be exactly those of the whole-run regexes they replaced (FULLTEXT_VERSION
4's index was built with those, and an index is not rebuilt for a speed-up)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lore.backends import lexical

# The regexes of FULLTEXT_VERSION 4 as first released: a whole run of token characters
# holding a compound joiner, or a CamelCase joint.
_RUN_WITH_COMPOUND = re.compile(r"(?<![\w.\-:/@])[\w\-]*[./:@][\w.\-:/@]*")
_RUN_WITH_JOINT = re.compile(r"(?<![\w.\-:/@])[\w.\-:/@]*?(?:[a-z][A-Z]|[A-Z][A-Z][a-z])[\w.\-:/@]*")


def _old_runs(pattern: re.Pattern[str], text: str) -> list[str]:
    return [match.group() for match in pattern.finditer(text)]


def _old_camel_words(text: str) -> list[str]:
    words: list[str] = []
    for run in _RUN_WITH_JOINT.finditer(text):
        for match in lexical._TOKEN.finditer(run.group()):
            for piece in lexical._JOINERS.split(match.group()):
                split = lexical._camel_words(piece) if piece else []
                if len(split) > 1:
                    words.extend(split)
    return words


def _old_sub_identifiers(text: str) -> list[str]:
    found: dict[str, None] = {}
    runs = (run.group() for run in _RUN_WITH_COMPOUND.finditer(text))
    tokens = (match.group() for run in runs for match in lexical._TOKEN.finditer(run))
    for token in tokens:
        if not lexical._COMPOUND.search(token) or not lexical.is_identifier(token):
            continue
        whole = token.lower()
        for piece in lexical._OUTER_JOINERS.split(whole):
            candidates = [piece, *piece.split(".")] if "." in piece else [piece]
            for candidate in candidates:
                if candidate != whole and lexical.is_identifier(candidate):
                    found.setdefault(candidate, None)
    return list(found)


def _assert_same(text: str) -> None:
    assert lexical._runs_with_joint(text) == _old_runs(_RUN_WITH_JOINT, text)
    assert lexical._runs_with_joiner(text) == _old_runs(_RUN_WITH_COMPOUND, text)
    assert lexical.camel_words(text) == _old_camel_words(text)
    assert lexical.sub_identifiers(text) == _old_sub_identifiers(text)


def _texts(root: Path) -> list[str]:
    return [page.read_text(encoding="utf-8", errors="replace") for page in sorted(root.rglob("*.md"))]


def test_the_runs_are_those_of_the_whole_run_regexes_on_the_examples(repo_root: Path) -> None:
    texts = _texts(repo_root / "examples" / "runbooks")
    assert len(texts) > 20
    for text in texts:
        _assert_same(text)
        for line in text.splitlines():  # a run at the very start or end of a text
            _assert_same(line)


def test_the_runs_are_those_of_the_whole_run_regexes_on_the_shared_corpora(shared_root: Path) -> None:
    texts = _texts(shared_root / "corpora")
    assert len(texts) > 100
    for text in texts:
        _assert_same(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "KubeNodeNotReady",
        "quay.io/coreos/kube-apiserver:v1.29",
        "(etcdNoLeader)",
        "a.b",
        ".KubeAPIDown.",
        "mRNA IPv4 iPhone",
        "é.Élan/ÉtéÀ sch-Ω.x",
        "x@y:z/w.v-u_t",
        "--aB-- ..cD.. @@eF@@",
    ],
)
def test_the_runs_at_the_edges_of_a_text(text: str) -> None:
    _assert_same(text)


_ALPHABET = st.sampled_from(list("aZbYzAQq09_.-:/@ \n\t(),'\"éÉ{}$|"))


@settings(max_examples=400)
@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_the_runs_of_any_text(text: str) -> None:
    _assert_same(text)
