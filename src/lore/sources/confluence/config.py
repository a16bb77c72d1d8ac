"""The ``[[sources]]`` table of ``type = "confluence"``: its model is in
``lore.source_tables.confluence``, beside every other type's, so loading settings imports no source."""

from lore.source_tables.confluence import SPACE_KEY_PATTERN, ConfluenceSourceConfig, is_loopback

__all__ = ["SPACE_KEY_PATTERN", "ConfluenceSourceConfig", "is_loopback"]
