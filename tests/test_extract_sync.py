"""``lore sync`` (a real subprocess) over a folder mixing good and bad PDF, DOCX and HTML
files: the bad ones fail alone with their reasons, and ``lore search`` finds the PDF's and
the DOCX's text under the section of their headings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _documents import (
    Bullets,
    Heading,
    Para,
    docx_bytes,
    encrypted_pdf_bytes,
    pdf_bytes,
    scanned_pdf_bytes,
)

LORE = Path(sys.executable).parent / "lore"

PDF_BLOCKS = [
    Heading(1, "Etcd advisory"),
    Para("Background on the etcd cluster used by the control plane."),
    Heading(2, "Defragmentation"),
    Para("Run etcdctl defrag on one member at a time when the database size alarm fires."),
]
DOCX_BLOCKS = [
    Heading(1, "Kafka broker runbook"),
    Para("Brokers of the payments cluster."),
    Heading(2, "Under-replicated partitions"),
    Bullets(("check kafka-topics --describe --under-replicated-partitions", "restart the lagging follower")),
]


def lore(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("LORE_CONFIG", None)
    return subprocess.run([str(LORE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_sync_mixed_files_then_search_finds_pdf_and_docx_sections(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "etcd-advisory.pdf").write_bytes(pdf_bytes(PDF_BLOCKS, outline=False))
    (docs / "kafka.docx").write_bytes(docx_bytes(DOCX_BLOCKS))
    (docs / "dns.html").write_bytes(b"<html><head><title>DNS</title></head><body><h1>DNS</h1>"
                                    b"<h2>CoreDNS</h2><p>Restart coredns pods.</p></body></html>")
    (docs / "notes.md").write_text("# Notes\n\nNothing here.\n")
    (docs / "locked.pdf").write_bytes(encrypted_pdf_bytes(pdf_bytes(PDF_BLOCKS), "open-" + "sesame"))
    (docs / "scan.pdf").write_bytes(scanned_pdf_bytes(1))
    (docs / "renamed.pdf").write_bytes(b"<html><body>not a pdf</body></html>")
    (docs / "truncated.docx").write_bytes(docx_bytes(DOCX_BLOCKS)[:500])
    (tmp_path / "lore.toml").write_text(
        'db_path = "lore.db"\nembedder = "hashing"\n\n[[sources]]\nname = "handbook"\n'
        'type = "filesystem"\npath = "docs"\nvisibility = "all-viewers"\n'
        # The built-in playbook pack has a page named "Under-replicated partitions", a fair
        # answer to the DOCX query below: this test is about what extraction keeps.
        '\n[vault]\nenabled = false\n'
    )

    synced = lore("sync", cwd=tmp_path)

    assert synced.returncode == 1, synced.stdout + synced.stderr  # failures, reported, not fatal
    assert "Traceback" not in synced.stderr
    report = synced.stdout + synced.stderr
    assert "4 failed" in report, report
    for name, why in [("locked.pdf", "encrypted PDF"), ("scan.pdf", "scanned PDF: no text layer"),
                      ("renamed.pdf", "not a PDF"), ("truncated.docx", "broken DOCX")]:
        assert f"file://handbook/{name}: {why}" in report, report

    def hits(query: str) -> list[dict[str, object]]:
        found = lore("search", query, "--json", "--mode", "bm25", cwd=tmp_path)
        assert found.returncode == 0, found.stderr
        passages: list[dict[str, object]] = json.loads(found.stdout)["passages"]
        return passages

    pdf = hits("etcdctl defrag database size alarm")[0]
    assert pdf["uri"] == "file://handbook/etcd-advisory.pdf"
    assert pdf["title"] == "Etcd advisory"
    assert pdf["section"] == "Defragmentation"
    docx = hits("under-replicated partitions lagging follower")[0]
    assert docx["uri"] == "file://handbook/kafka.docx"
    assert docx["title"] == "Kafka broker runbook"
    assert docx["section"] == "Under-replicated partitions"
    html = hits("restart coredns pods")[0]
    assert (html["uri"], html["section"]) == ("file://handbook/dns.html", "CoreDNS")

    again = lore("sync", cwd=tmp_path)  # unchanged files: nothing re-extracted into new chunks
    assert again.returncode == 1
    assert "4 failed" in again.stdout + again.stderr


async def test_filesystem_documents_keep_the_original_media_type(tmp_path: Path) -> None:
    import hashlib

    from lore.extract import EXTRACTION_VERSION
    from lore.models import Document, SourceFailure, Visibility
    from lore.sources.filesystem import FilesystemSource

    pdf = pdf_bytes(PDF_BLOCKS)
    (tmp_path / "advisory.pdf").write_bytes(pdf)
    (tmp_path / "scan.pdf").write_bytes(scanned_pdf_bytes(1))
    source = FilesystemSource("docs", tmp_path, visibility=Visibility.ALL_VIEWERS)

    items = {item.uri: item async for item in source.documents()}

    advisory = items["file://docs/advisory.pdf"]
    assert isinstance(advisory, Document)
    assert advisory.media_type == "application/pdf"
    assert advisory.title == "Etcd advisory"
    assert advisory.text.startswith("# Etcd advisory\n\nBackground on the etcd cluster")
    assert advisory.revision == f"{hashlib.sha256(pdf).hexdigest()}+extract-{EXTRACTION_VERSION}"
    scan = items["file://docs/scan.pdf"]
    assert isinstance(scan, SourceFailure)
    assert scan.reason.startswith("scanned PDF: no text layer")
