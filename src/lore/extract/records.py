"""What the extraction layer returns and raises (kept apart so every format module can
import them without importing the package's public face)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Extracted:
    """A file's text as Markdown, the title it declares (metadata, ``<title>``, first
    heading) or None, and the media type of the original file."""

    markdown: str
    title: str | None
    media_type: str
