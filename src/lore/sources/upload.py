"""Uploaded files as a knowledge source (``type = "upload"``).

``lore serve`` accepts md, txt, pdf and docx files (``POST /v1/documents``). Each upload
is kept twice: the original bytes, content-addressed under ``<data dir>/originals/``
(``<sha256>``), so a document can be re-extracted when extraction improves; and its
extracted Markdown as one document of this source (``stored.py``), with uri
``upload://<source>/<slug of the file name>``. Uploading a file of the same name again
replaces that document.

The type is decided by the bytes, not the name alone, by the sniffing every file source
uses (``lore.extract``): a ``.pdf`` must look like a PDF, a ``.docx`` must be a zip holding
``word/document.xml``, and ``.md``/``.txt`` must be UTF-8 text without NUL bytes.
Extraction is ``lore.extract.extract``, as for files in every other source: PDF and DOCX
become Markdown with their headings, Markdown and text stay as they are.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from lore.config import LoreSettings
from lore.errors import UploadRefused
from lore.models import Visibility
from lore.source_tables.stored import UploadSourceConfig as UploadSourceConfig
from lore.sources.stored import StoredDocument, StoredSource, slugify, write_atomic
from lore.text_blocks import markdown_title

#: Suffix -> the kind of upload it is; its content must show it (``lore.extract``).
ACCEPTED = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".pdf": "pdf", ".docx": "docx"}


def sniff(data: bytes, filename: str) -> str:
    """The kind of an upload (``markdown``, ``text``, ``pdf``, ``docx``): its name must be
    one lore takes (else 415), and its content must be what the name says, checked by the
    extraction layer's own sniffing (``lore.extract.check_content``), as for every file."""
    from lore.errors import ExtractionError
    from lore.extract import check_content

    suffix = PurePosixPath(filename).suffix.lower()
    kind = ACCEPTED.get(suffix)
    if kind is None:
        accepted = ", ".join(sorted(ACCEPTED))
        raise UploadRefused(
            f"{filename}: {suffix or 'no extension'} is not accepted ({accepted})", unsupported=True
        )
    try:
        check_content(data, filename)
    except ExtractionError as err:
        raise UploadRefused(f"{filename}: {err.reason}") from err
    return kind


@dataclass(frozen=True)
class Extraction:
    markdown: str
    title: str | None
    media_type: str


def extract(data: bytes, filename: str) -> Extraction:
    """The Markdown of an upload, through the extraction layer every file source uses
    (``lore.extract``); ``UploadRefused`` when it cannot be had."""
    from lore.errors import ExtractionError
    from lore.extract import extract as extract_file

    sniff(data, filename)
    try:
        found = extract_file(data, filename)
    except ExtractionError as err:
        raise UploadRefused(f"{filename}: {err.reason}") from err
    title = found.title
    if title is None and found.media_type == "text/markdown":
        title = markdown_title(found.markdown)
    return Extraction(found.markdown, title, found.media_type)


CONFIG_MODEL = UploadSourceConfig


class UploadSource(StoredSource):
    source_type = "upload"
    scheme = "upload"

    def __init__(
        self,
        name: str,
        folder: Path,
        originals: Path,
        *,
        visibility: Visibility | None,
        labels: dict[str, str] | None = None,
    ) -> None:
        super().__init__(name, folder, visibility=visibility, labels=labels)
        self.originals = Path(originals)

    def original_path(self, digest: str) -> Path:
        return self.originals / digest

    def add(self, data: bytes, filename: str) -> StoredDocument:
        """Extract, keep the original, and store the document (replacing one of the same
        file name). Raises ``UploadRefused`` without writing anything."""
        return self.store(data, filename, extract(data, filename))

    def store(self, data: bytes, filename: str, extraction: Extraction) -> StoredDocument:
        """``add`` with the extraction done already (``lore serve`` does it in a child
        process under a budget: ``lore.web.extraction``)."""
        digest = hashlib.sha256(data).hexdigest()
        original = self.original_path(digest)
        if not original.exists():
            # Content-addressed: the same bytes are the same file, so it is written once.
            write_atomic(original, data, mode=0o600)
        name = PurePosixPath(filename).name
        title = extraction.title or PurePosixPath(name).stem
        meta = {"filename": name, "original": digest, "media_type": extraction.media_type}
        return self.write(slugify(name), title, extraction.markdown, meta)


def from_config(
    config: UploadSourceConfig, settings: LoreSettings, visibility: Visibility | None
) -> UploadSource:
    return UploadSource(
        config.name,
        config.folder(settings, "upload"),
        settings.resolved_data_dir() / "originals",
        visibility=visibility,
        labels=config.labels,
    )
