"""lore.extract on generated PDF, DOCX and HTML files: headings, lists, tables, code, titles."""

from __future__ import annotations

import io
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _documents import Bullets, Code, Heading, Numbered, Para, Table, docx_bytes, headings, pdf_bytes, runbook

from lore.chunking import Chunker
from lore.extract import MEDIA_TYPES, SUPPORTED_SUFFIXES, extract, sniff
from lore.models import Document

HEADING = re.compile(r"^(#{1,6}) (.+)$", re.MULTILINE)


def found_headings(markdown: str) -> list[tuple[int, str]]:
    return [(len(hashes), text) for hashes, text in HEADING.findall(markdown)]


@pytest.mark.parametrize(
    ("outline", "scaled"), [(True, False), (False, False), (False, True)],
    ids=["bookmarks", "font-sizes", "scaled-1pt-words"],
)
def test_pdf_headings_lists_and_code(outline: bool, scaled: bool) -> None:
    blocks = runbook(3)
    result = extract(pdf_bytes(blocks, outline=outline, scaled=scaled), "latency.pdf")

    assert result.media_type == "application/pdf"
    assert found_headings(result.markdown) == headings(blocks)
    assert "- look for CrashLoopBackOff" in result.markdown
    assert "2. restart the deployment" in result.markdown
    assert "```\nkubectl -n payments-1 rollout restart deploy/api\nkubectl -n payments rollout status" in (
        result.markdown
    )
    assert result.title == "Payments API latency runbook"  # no metadata title: the first h1


def test_pdf_bold_lines_at_body_size_are_the_lowest_heading_level() -> None:
    blocks = [Heading(1, "Disk full"), Para("Free space on the volume."), Heading(2, "Checks"),
              Para("Run the usual commands."), Heading(4, "Inodes"), Para("Run df -i on the node."),
              Para("Keep the rest of the paragraph as prose, even when it wraps onto a second line of "
                   "the page because it is long enough to wrap.")]
    assert found_headings(extract(pdf_bytes(blocks, outline=False), "d.pdf").markdown) == [
        (1, "Disk full"), (2, "Checks"), (3, "Inodes")
    ]


def test_pdf_outline_wins_over_font_sizes() -> None:
    # The bookmarks say level 1 for a heading set in the level-3 size: the author's outline counts.
    blocks = [Heading(1, "Overview"), Para("Latency."), Heading(2, "Checks"), Para("Dashboards."),
              Heading(3, "Escalation", outline_level=1), Para("Call the database team.")]
    by_sizes = found_headings(extract(pdf_bytes(blocks, outline=False), "a.pdf").markdown)
    by_outline = found_headings(extract(pdf_bytes(blocks, outline=True), "a.pdf").markdown)

    assert by_sizes == [(1, "Overview"), (2, "Checks"), (3, "Escalation")]
    assert by_outline == [(1, "Overview"), (2, "Checks"), (1, "Escalation")]


def test_pdf_running_headers_and_page_numbers_are_left_out() -> None:
    blocks = runbook(4)
    markdown = extract(pdf_bytes(blocks, running_header="ACME Payments - internal"), "r.pdf").markdown

    assert "ACME" not in markdown
    assert "Page 3" not in markdown
    assert found_headings(markdown) == headings(blocks)


def test_pdf_code_keeps_its_indentation() -> None:
    blocks = [Heading(1, "Deployment"), Para("The manifest:"),
              Code(("spec:", "  replicas: 3", "  template:", "    metadata: {}"))]
    markdown = extract(pdf_bytes(blocks), "k.pdf").markdown
    assert "```\nspec:\n  replicas: 3\n  template:\n    metadata: {}\n```" in markdown


def test_pdf_metadata_title() -> None:
    result = extract(pdf_bytes(runbook(1), title="Vendor advisory 2024-17"), "advisory.pdf")
    assert result.title == "Vendor advisory 2024-17"


def test_docx_headings_lists_tables_code_and_title() -> None:
    blocks = [Heading(1, "Kafka consumer lag"), Para("When lag grows, check the consumer group."),
              *(Heading(level, f"Level {level} heading") for level in range(2, 7)),
              Bullets(("check the offsets", "check the rebalances")), Numbered(("pause", "resume")),
              Code(("kafka-consumer-groups --describe --group payments",)),
              Table((("broker", "lag"), ("b-1", "1200")))]
    for word_lists in (False, True):
        result = extract(docx_bytes(blocks, title="Consumer lag", word_lists=word_lists), "lag.docx")

        assert result.media_type == MEDIA_TYPES[".docx"]
        assert result.title == "Consumer lag"
        assert found_headings(result.markdown) == headings(blocks)
        assert "- check the offsets\n- check the rebalances" in result.markdown
        assert "1. pause\n2. resume" in result.markdown
        assert "```\nkafka-consumer-groups --describe --group payments\n```" in result.markdown
        assert "| broker | lag |\n| --- | --- |\n| b-1 | 1200 |" in result.markdown


def test_docx_text_set_in_a_monospaced_font_is_code() -> None:
    import docx

    document = docx.Document(io.BytesIO(docx_bytes([Heading(1, "Restarts")])))
    for command in ("kubectl -n payments rollout restart deploy/api", "kubectl get pods -w"):
        document.add_paragraph().add_run(command).font.name = "Consolas"
    prose = document.add_paragraph("Then run ")
    prose.add_run("kubectl get events").font.name = "Courier New"
    prose.add_run(" and read the last lines.")
    out = io.BytesIO()
    document.save(out)

    markdown = extract(out.getvalue(), "r.docx").markdown
    # Consecutive code paragraphs are one block, as the lines of one listing.
    assert "```\nkubectl -n payments rollout restart deploy/api\nkubectl get pods -w\n```" in markdown
    assert "Then run `kubectl get events` and read the last lines." in markdown


def test_docx_images_become_their_alt_text_never_base64() -> None:
    import docx
    from PIL import Image

    picture = io.BytesIO()
    Image.new("RGB", (64, 64), color=(200, 30, 30)).save(picture, format="PNG")
    document = docx.Document(io.BytesIO(docx_bytes([Heading(1, "Dashboards")])))
    document.add_picture(picture)
    out = io.BytesIO()
    document.save(out)

    markdown = extract(out.getvalue(), "d.docx").markdown
    assert markdown.startswith("# Dashboards")
    assert "base64" not in markdown
    assert "data:" not in markdown


def test_pdf_page_numbers_are_dropped() -> None:
    blocks = [Heading(1, "Disk full"), Para("Free space on /var."), Para("7"), Para("Page 2 of 9")]
    markdown = extract(pdf_bytes(blocks), "p.pdf").markdown
    assert markdown == "# Disk full\n\nFree space on /var.\n"


def test_docx_without_a_title_property_takes_the_first_h1() -> None:
    assert extract(docx_bytes(runbook(1)), "a.docx").title == "Payments API latency runbook"


PAGE = b"""<!DOCTYPE html>
<html><head><title>DNS failures</title><style>body { color: red }</style>
<script>var secret = "do-not-index";</script></head>
<body><nav><a href="/">Home</a> | <a href="/runbooks">Runbooks</a></nav>
<h1>Resolving DNS failures</h1><p>Check <code>resolv.conf</code> first.</p>
<h2>Checks</h2><ul><li>dig @10.0.0.10 api.internal</li><li>look at CoreDNS logs</li></ul>
<pre><code>kubectl -n kube-system logs deploy/coredns</code></pre>
<table><tr><th>code</th><th>meaning</th></tr><tr><td>SERVFAIL</td><td>upstream down</td></tr></table>
<img src="data:image/png;base64,AAAA" alt="CoreDNS dashboard"><noscript>enable js</noscript>
</body></html>"""


def test_html_keeps_structure_and_drops_scripts_styles_and_navigation() -> None:
    result = extract(PAGE, "dns.html")

    assert result.title == "DNS failures"
    assert result.media_type == "text/html"
    assert found_headings(result.markdown) == [(1, "Resolving DNS failures"), (2, "Checks")]
    assert "- dig @10.0.0.10 api.internal" in result.markdown
    assert "```\nkubectl -n kube-system logs deploy/coredns\n```" in result.markdown
    assert "| SERVFAIL | upstream down |" in result.markdown
    assert "CoreDNS dashboard" in result.markdown
    for gone in ("do-not-index", "color: red", "Home", "base64", "enable js"):
        assert gone not in result.markdown


def test_html_title_falls_back_to_the_first_h1_and_htm_is_html() -> None:
    result = extract(b"<html><body><h1>Redis failover</h1><p>Promote the replica.</p></body></html>", "r.htm")
    assert result.title == "Redis failover"
    assert result.markdown.startswith("# Redis failover")


def test_html_in_a_legacy_charset_is_decoded_by_its_meta_charset() -> None:
    page = ('<html><head><meta charset="windows-1252"><title>Caf\u00e9 menu</title></head>'
            "<body><h1>Caf\u00e9 \u2013 r\u00e9sum\u00e9</h1></body></html>").encode("cp1252")
    result = extract(page, "legacy.html")
    assert result.title == "Caf\u00e9 menu"
    assert result.markdown.startswith("# Caf\u00e9 \u2013 r\u00e9sum\u00e9")


def test_text_files_pass_through_and_unknown_names_are_read_by_content() -> None:
    assert extract(b"# Notes\n\nplain", "notes.md").markdown == "# Notes\n\nplain"
    assert extract(b"# Notes", "notes.md").media_type == "text/markdown"
    assert extract(PAGE, "upload").media_type == "text/html"  # no extension: sniffed
    assert extract(pdf_bytes(runbook(1)), "upload").media_type == "application/pdf"
    assert extract(b"just words", "upload").media_type == "text/plain"
    assert {".pdf", ".docx", ".html", ".htm", ".md"} <= SUPPORTED_SUFFIXES


def test_sniff_by_content() -> None:
    assert sniff(pdf_bytes(runbook(1)), "x.txt") == "application/pdf"
    assert sniff(docx_bytes(runbook(1)), "x") == MEDIA_TYPES[".docx"]
    assert sniff(PAGE, "x") == "text/html"
    assert sniff("héllo".encode(), "x") == "text/plain"
    assert sniff(b"\x89PNG\r\n\x1a\n\x00\x00", "x.png") is None


def test_extracted_markdown_chunks_by_its_headings() -> None:
    result = extract(pdf_bytes(runbook(2), outline=False), "latency.pdf")
    document = Document(uri="file://t/latency.pdf", title=result.title or "", text=result.markdown,
                        revision="r", updated_at=datetime(2026, 1, 1, tzinfo=UTC),
                        media_type=result.media_type)
    sections = {chunk.section for chunk in Chunker(max_tokens=120, overlap_tokens=0).chunk(document)}
    assert "Diagnosis step 1 › Check the pods of shard 1" in sections
