"""The models of ``[[sources]]`` tables of ``type = "upload"`` and ``type = "manual"``."""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict

from lore.source_tables.shared import SourceConfig, SourcePaths


class StoredSourceConfig(SourceConfig):
    """``[[sources]]`` of type upload or manual: where the files live, else the data dir."""

    model_config = ConfigDict(extra="forbid")

    path: Path | None = None

    def folder(self, settings: SourcePaths, kind: str) -> Path:
        if self.path is not None:
            return settings.resolve_path(self.path)
        return settings.resolved_data_dir() / kind / self.name

    def location(self, settings: SourcePaths) -> str | None:
        return str(self.folder(settings, self.type))


class UploadSourceConfig(StoredSourceConfig):
    """``[[sources]]`` of ``type = "upload"``: ``path`` defaults to ``<data dir>/upload/<name>``."""


class ManualSourceConfig(StoredSourceConfig):
    """``[[sources]]`` of ``type = "manual"``: ``path`` defaults to ``<data dir>/manual/<name>``."""
