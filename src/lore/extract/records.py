"""What the extraction layer returns and raises (kept apart so every format module can
import them without importing the package's public face)."""

from __future__ import annotations

from dataclasses import dataclass

from lore.errors import DocumentError


@dataclass(frozen=True)
class Extracted:
    """A file's text as Markdown, the title it declares (metadata, ``<title>``, first
    heading) or None, and the media type of the original file."""

    markdown: str
    title: str | None
    media_type: str


class ExtractionError(DocumentError):
    """One file could not be turned into text; ``reason`` is one line for a human
    ("encrypted PDF (a password is needed to open it)"). It costs that file only."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
