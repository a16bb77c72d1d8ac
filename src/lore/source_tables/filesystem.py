"""The model of a ``[[sources]]`` table of ``type = "filesystem"``."""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field

from lore.source_tables.media import DEFAULT_INCLUDE
from lore.source_tables.shared import SourceConfig, SourcePaths


class FilesystemSourceConfig(SourceConfig):
    """A ``[[sources]]`` table of ``type = "filesystem"``; any other key is refused."""

    model_config = ConfigDict(extra="forbid")

    #: Optional here so that ``lore sources`` can list the table; sync refuses it.
    path: Path | None = None
    include: list[str] = Field(default_factory=lambda: list(DEFAULT_INCLUDE))
    exclude: list[str] = Field(default_factory=lambda: [".git/**", "**/node_modules/**"])
    max_file_bytes: int = Field(default=2_000_000, gt=0)

    def location(self, settings: SourcePaths) -> str | None:
        return str(settings.resolve_path(self.path)) if self.path is not None else None
