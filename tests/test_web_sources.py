"""The upload and manual sources on their own: lore.toml tables, lore sync, type sniffing."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from lore.config import load_settings
from lore.errors import ConfigError, UploadRefused
from lore.sources import build_source
from lore.sources.manual import ManualSource
from lore.sources.upload import UploadSource, extract, sniff
from lore.sync import run_sync


def config_with_stored_sources(root: Path) -> Path:
    config = root / "lore.toml"
    config.write_text(
        'db_path = "lore.db"\naudit_path = "audit.jsonl"\nembedder = "hashing"\n\n'
        "[vault]\nenabled = false\n\n"
        '[[sources]]\nname = "vendor-docs"\ntype = "upload"\nvisibility = "all-viewers"\n\n'
        '[[sources]]\nname = "team-notes"\ntype = "manual"\nvisibility = "all-viewers"\npath = "notes"\n',
        encoding="utf-8",
    )
    return config


def test_stored_sources_in_lore_toml_sync_like_any_other(tmp_path: Path) -> None:
    settings = load_settings(config_with_stored_sources(tmp_path))
    uploads, notes = (build_source(config, settings) for config in settings.sources)
    assert isinstance(uploads, UploadSource)
    assert isinstance(notes, ManualSource)
    assert uploads.folder == tmp_path / "lore.db.data" / "upload" / "vendor-docs"
    assert notes.folder == tmp_path / "notes"
    uploads.add(b"# Vendor\n\nThe kiwiswitch resets the router.\n", "router.md")
    first = notes.create("On call", "Ring the bell.\n")
    second = notes.create("On call", "Ring it twice.\n")
    assert (first.uri, second.uri) == ("note://team-notes/on-call", "note://team-notes/on-call-2")

    report = run_sync(settings)
    assert (report.added, report.failures) == (3, [])
    assert run_sync(settings).unchanged == 3  # revisions are content hashes

    notes.remove(second.slug)
    report = run_sync(settings)
    assert report.deleted == 1


def test_an_unknown_key_in_a_stored_source_table_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "lore.toml"
    config.write_text('[[sources]]\nname = "u"\ntype = "upload"\nvisibility = "all-viewers"\npaths = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown key 'paths'.*did you mean 'path'"):
        load_settings(config)


def _docx() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    return buffer.getvalue()


def _zip_without_word() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "hi")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("data", "filename", "kind"),
    [
        (b"# Title\n", "a.md", "markdown"),
        (b"# Title\n", "A.MARKDOWN", "markdown"),
        ("caf\u00e9\n".encode(), "a.txt", "text"),
        (b"%PDF-1.7\n...", "a.pdf", "pdf"),
        (_docx(), "a.docx", "docx"),
    ],
)
def test_sniff_accepts_by_content(data: bytes, filename: str, kind: str) -> None:
    assert sniff(data, filename) == kind


@pytest.mark.parametrize(
    ("data", "filename", "reason", "unsupported"),
    [
        (b"hello", "a.pdf", "not a PDF", False),
        (_zip_without_word(), "a.docx", "not a DOCX", False),
        (b"\xff\xfe\x00a", "a.txt", "NUL", False),
        (b"\xc3\x28", "a.txt", "not valid UTF-8", False),
        (b"MZ", "a.exe", "not accepted", True),
        (b"x", "README", "no extension", True),
    ],
)
def test_an_upload_whose_content_contradicts_its_name_is_refused(
    data: bytes, filename: str, reason: str, unsupported: bool
) -> None:
    with pytest.raises(UploadRefused, match=reason) as refused:
        extract(data, filename)
    assert refused.value.unsupported is unsupported


def test_a_path_in_the_file_name_stays_inside_the_source(tmp_path: Path) -> None:
    source = UploadSource("up", tmp_path / "docs", tmp_path / "originals", visibility=None)
    stored = source.add(b"# Escape\n", "../../etc/passwd.md")
    assert stored.uri == "upload://up/passwd.md"
    assert sorted(path.name for path in (tmp_path / "docs").iterdir()) == ["passwd.md.md"]
