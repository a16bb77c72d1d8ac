"""Notes written in lore itself as a knowledge source (``type = "manual"``).

``lore serve`` creates and edits them (``PUT /v1/documents/{uri}``, ``POST /v1/notes``):
one Markdown file per note under ``<data dir>/manual/<source>/`` (``stored.py``), uri
``note://<source>/<slug of the title>``.
"""

from __future__ import annotations

from lore.config import LoreSettings
from lore.models import Visibility
from lore.source_tables.stored import ManualSourceConfig as ManualSourceConfig
from lore.sources.stored import StoredDocument, StoredSource, slugify

CONFIG_MODEL = ManualSourceConfig


class ManualSource(StoredSource):
    source_type = "manual"
    scheme = "note"

    def create(self, title: str, markdown: str) -> StoredDocument:
        """A new note; its slug comes from the title, numbered when taken."""
        return self.write(self.free_slug(slugify(title, "note")), title, markdown)


def from_config(
    config: ManualSourceConfig, settings: LoreSettings, visibility: Visibility | None
) -> ManualSource:
    return ManualSource(
        config.name, config.folder(settings, "manual"), visibility=visibility, labels=config.labels
    )
