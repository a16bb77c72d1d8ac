"""The files a file-reading source (filesystem, git) takes by default: the text formats
and the ones ``lore.extract`` converts to Markdown."""

from __future__ import annotations

from lore.extract import MEDIA_TYPES as CONVERTED_MEDIA_TYPES
from lore.extract import TEXT_MEDIA_TYPES

#: Text formats, then the ones lore.extract converts to Markdown (.pdf, .docx, .html, .htm).
MEDIA_TYPES: dict[str, str] = {**TEXT_MEDIA_TYPES, **CONVERTED_MEDIA_TYPES}
DEFAULT_INCLUDE = tuple(f"**/*{suffix}" for suffix in MEDIA_TYPES)
DEFAULT_EXCLUDE = (".git/", "**/node_modules/")
