"""Knowledge sources, built by ``type`` from a ``[[sources]]`` table.

Each source module exposes ``CONFIG_MODEL``, the pydantic model of its ``[[sources]]``
table (a ``SourceConfig`` subclass that forbids undeclared keys), and
``from_config(config, settings, visibility)``. A module is imported only when a table
names its type; tables are validated when settings load, so such a module imports its
optional dependencies inside functions, not at the top.
Visibility is parsed here, once, for every type; refusing an undeclared visibility is
sync's job, because ``lore sources`` must still be able to list such a source.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping

from pydantic import ValidationError

from lore.config import LoreSettings, SourceConfig, unknown_key_message
from lore.errors import ConfigError
from lore.models import Visibility
from lore.protocols import KnowledgeSource

#: Source type -> module exposing ``CONFIG_MODEL`` and ``from_config``.
SOURCE_TYPES: dict[str, str] = {
    "filesystem": "lore.sources.filesystem",
    "upload": "lore.sources.upload",
    "manual": "lore.sources.manual",
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


def _table_name(item: object, number: int) -> str:
    name = item.get("name") if isinstance(item, Mapping) else getattr(item, "name", None)
    return f'[[sources]] "{name}"' if isinstance(name, str) and name else f"[[sources]] #{number}"


def source_config_model(source_type: object, table: str) -> type[SourceConfig]:
    """The model a ``[[sources]]`` table of ``source_type`` is validated with."""
    if not isinstance(source_type, str) or source_type not in SOURCE_TYPES:
        close = difflib.get_close_matches(str(source_type), list(SOURCE_TYPES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        valid = ", ".join(sorted(SOURCE_TYPES))
        raise ConfigError(f"{table}: unknown type {source_type!r}{hint}; valid types: {valid}")
    model: type[SourceConfig] = importlib.import_module(SOURCE_TYPES[source_type]).CONFIG_MODEL
    return model


def typed_source_config(item: object, number: int = 1) -> SourceConfig:
    """``item`` (a table from lore.toml, or a ``SourceConfig``) validated by the model of
    its type. ``number`` is its position, to name a table without a name."""
    table = _table_name(item, number)
    if isinstance(item, SourceConfig):
        if type(item) is not SourceConfig:
            return item  # already validated by its type's model
        item = item.model_dump(exclude_unset=True)
    if not isinstance(item, Mapping):
        raise ConfigError(f"{table}: must be a table of keys, not {type(item).__name__}")
    model = source_config_model(item.get("type", "filesystem"), table)
    unknown = [str(key) for key in item if key not in model.model_fields]
    if unknown:
        raise ConfigError("; ".join(unknown_key_message(key, model.model_fields, table) for key in unknown))
    try:
        return model.model_validate(item)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'table'}: {error['msg']}"
            for error in err.errors()
        )
        raise ConfigError(f"{table}: {problems}") from err


def build_source(config: SourceConfig, settings: LoreSettings) -> KnowledgeSource:
    typed = typed_source_config(config)
    module = importlib.import_module(SOURCE_TYPES[typed.type])
    source: KnowledgeSource = module.from_config(typed, settings, parse_visibility(typed))
    return source
