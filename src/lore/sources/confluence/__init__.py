"""Confluence Cloud and Data Center spaces as a knowledge source (``type = "confluence"``).

``config`` is the ``[[sources]]`` table, ``client`` the HTTP client (retries, pagination),
``api`` the endpoints of each deployment, ``storage`` the storage-format to Markdown
conversion, ``source`` the listing, visibility checks and resume token.
"""

from lore.sources.confluence.config import ConfluenceSourceConfig
from lore.sources.confluence.source import ConfluenceSource, from_config

#: What ``lore.sources`` validates a confluence table with.
CONFIG_MODEL = ConfluenceSourceConfig

__all__ = ["CONFIG_MODEL", "ConfluenceSource", "ConfluenceSourceConfig", "from_config"]
