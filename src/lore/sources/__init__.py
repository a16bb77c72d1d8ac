"""Knowledge sources, built by ``type`` from a ``[[sources]]`` table.

Each source module exposes ``from_config(config, settings, visibility)`` and is imported
only when chosen, so an optional dependency matters only to the sources that need it.
Visibility is parsed here, once, for every type; refusing an undeclared visibility is
sync's job, because ``lore sources`` must still be able to list such a source.
"""

from __future__ import annotations

import importlib

from lore.config import LoreSettings, SourceConfig
from lore.errors import ConfigError
from lore.models import Visibility
from lore.protocols import KnowledgeSource

#: Source type -> module exposing ``from_config``.
SOURCE_TYPES: dict[str, str] = {
    "filesystem": "lore.sources.filesystem",
}


def parse_visibility(config: SourceConfig) -> Visibility | None:
    if config.visibility is None:
        return None
    try:
        return Visibility(config.visibility.strip().lower())
    except ValueError as err:
        valid = ", ".join(repr(v.value) for v in Visibility)
        raise ConfigError(
            f"source {config.name!r}: unknown visibility {config.visibility!r}; valid values: {valid}"
        ) from err


def build_source(config: SourceConfig, settings: LoreSettings) -> KnowledgeSource:
    if config.type not in SOURCE_TYPES:
        valid = ", ".join(sorted(SOURCE_TYPES))
        raise ConfigError(f"source {config.name!r}: unknown type {config.type!r}; valid types: {valid}")
    module = importlib.import_module(SOURCE_TYPES[config.type])
    source: KnowledgeSource = module.from_config(config, settings, parse_visibility(config))
    return source
