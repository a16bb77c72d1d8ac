"""Where ``LoreSettings`` takes its values from: the config file, then ``LORE_*``
environment variables, then keyword arguments, each overriding the one before, merged
table by table.

That is what a pydantic-settings ``BaseSettings`` with an init, an environment and a TOML
source does, and this module does it the same way (tests/test_config_sources.py holds the
two side by side) without importing pydantic-settings unless a variable names a setting:
the import alone (every source it ships, python-dotenv, importlib.metadata and resources,
the models it builds) costs about a tenth of a cold ``lore search``, and a command run
from a shell with a lore.toml sets no such variable. When one does, the variables are
read by pydantic-settings' own ``EnvSettingsSource`` (nested ``__`` keys, JSON for lists
and tables, names in any case): that part is not written twice.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic_settings import BaseSettings

#: ``LORE_TOP_K``; ``LORE_SAFETY__MAX_RESULT_CHARS`` for a key of a nested table.
ENV_PREFIX = "LORE_"
NESTED_DELIMITER = "__"


def merged_values(model: type[BaseModel], toml_file: Path | None, init: Mapping[str, Any]) -> dict[str, Any]:
    """The values to validate ``model`` with: the file's, updated by the environment's,
    updated by ``init``'s. Top-level names match fields in any case, as pydantic-settings
    matches them (``case_sensitive`` False); nested tables are the model's to check."""
    values: dict[str, Any] = {}
    if toml_file is not None:
        with toml_file.expanduser().open("rb") as handle:
            values = _by_field_name(model, tomllib.load(handle))
    if names_a_setting(model, os.environ):
        values = deep_update(values, _environment_values(model))
    return deep_update(values, _by_field_name(model, init))


def names_a_setting(model: type[BaseModel], environ: Mapping[str, str]) -> bool:
    """Whether any variable is one pydantic-settings would read for ``model``: the prefix
    and a field name (any case), alone or before ``__`` and a nested key."""
    fields = {ENV_PREFIX.lower() + name for name in model.model_fields}
    return any(name.lower().partition(NESTED_DELIMITER)[0] in fields for name in environ)


def deep_update(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``update``'s keys, tables merged key by key (pydantic's ``deep_update``)."""
    merged = dict(base)
    for key, value in update.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = deep_update(current, value)
        else:
            merged[key] = value
    return merged


def _by_field_name(model: type[BaseModel], table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` with each key that names a field in another case renamed to the field (the
    first such key in the table's order wins; the rest are dropped), the others kept for
    the model to refuse, as pydantic-settings' ``InitSettingsSource`` does."""
    if all(key in model.model_fields for key in table):
        return dict(table)
    renamed: dict[str, Any] = {}
    spare = dict(table)
    for name in model.model_fields:
        matches = [key for key in table if key.lower() == name]
        if matches:
            renamed[name] = table[matches[0]]
            for key in matches:
                spare.pop(key)
    return renamed | spare


def _environment_values(model: type[BaseModel]) -> dict[str, Any]:
    from pydantic_settings import EnvSettingsSource

    values: dict[str, Any] = EnvSettingsSource(_environment_model(model))()
    return values


@cache
def _environment_model(model: type[BaseModel]) -> type[BaseSettings]:
    """A ``BaseSettings`` with ``model``'s fields, for ``EnvSettingsSource`` to read the
    variables of (never validated: ``model`` validates the merged values)."""
    from pydantic import create_model
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class EnvironmentBase(BaseSettings):
        model_config = SettingsConfigDict(
            env_prefix=ENV_PREFIX, env_nested_delimiter=NESTED_DELIMITER, extra="forbid"
        )

    fields: dict[str, Any] = {name: (field.annotation, field) for name, field in model.model_fields.items()}
    name = f"{model.__name__}Environment"
    environment: type[BaseSettings] = create_model(name, __base__=EnvironmentBase, **fields)
    return environment
