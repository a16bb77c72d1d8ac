"""The ``[[sources]]`` tables of lore.toml: the keys every source type shares
(``SourceConfig``, in ``shared``), each type's model in a module of its own, which refuses
keys it does not declare, and the validation of a table by its ``type``
(``typed_source_config``).

Below the settings (``lore.config`` validates ``LoreSettings.sources`` with it) and below
the sources (``lore.sources`` builds each type's source from its validated table), so
that loading settings imports no source and no source module sits above the settings
that name it. A type's model is imported when a table of that type is first validated
(``source_config_model``), so loading settings builds the models of the types it names
and no other: every command pays for its own sources, not for every type lore knows. A
table says where it reads from given the settings' paths (``SourcePaths``, which
``LoreSettings`` provides).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from pydantic import ValidationError

from lore.errors import ConfigError
from lore.source_tables.shared import TENANT_PATTERN as TENANT_PATTERN
from lore.source_tables.shared import SourceConfig as SourceConfig
from lore.source_tables.shared import SourcePaths as SourcePaths
from lore.source_tables.shared import bad_group_name as bad_group_name
from lore.source_tables.shared import cadence as cadence
from lore.source_tables.shared import check_access_groups as check_access_groups
from lore.source_tables.shared import field_problem as field_problem
from lore.source_tables.shared import unknown_key_message as unknown_key_message

# -- validation by type --------------------------------------------------------------------

#: The built-in pack's source name and type: no ``[[sources]]`` table may take them.
VAULT_NAME = "vault"
VAULT_TYPE = "vault"

#: The ``[[sources]]`` types, each validated by the model of its module beside this one.
SOURCE_TYPES = ("confluence", "filesystem", "git", "manual", "upload")


def _model_of(source_type: str) -> type[SourceConfig]:
    """The model of a known type, imported (and so built by pydantic) on first use."""
    if source_type == "filesystem":
        from lore.source_tables.filesystem import FilesystemSourceConfig

        return FilesystemSourceConfig
    if source_type == "git":
        from lore.source_tables.git import GitSourceConfig

        return GitSourceConfig
    if source_type == "confluence":
        from lore.source_tables.confluence import ConfluenceSourceConfig

        return ConfluenceSourceConfig
    from lore.source_tables.stored import ManualSourceConfig, UploadSourceConfig

    return UploadSourceConfig if source_type == "upload" else ManualSourceConfig


def _table_name(item: object, number: int) -> str:
    name = item.get("name") if isinstance(item, Mapping) else getattr(item, "name", None)
    return f'[[sources]] "{name}"' if isinstance(name, str) and name else f"[[sources]] #{number}"


def source_config_model(source_type: object, table: str) -> type[SourceConfig]:
    """The model a ``[[sources]]`` table of ``source_type`` is validated with."""
    if source_type == VAULT_TYPE:
        raise ConfigError(
            f"{table}: type 'vault' is lore's built-in playbook pack, not a [[sources]] type; "
            "it is indexed unless [vault] enabled = false"
        )
    if not isinstance(source_type, str) or source_type not in SOURCE_TYPES:
        close = difflib.get_close_matches(str(source_type), list(SOURCE_TYPES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        valid = ", ".join(sorted(SOURCE_TYPES))
        raise ConfigError(f"{table}: unknown type {source_type!r}{hint}; valid types: {valid}")
    return _model_of(source_type)


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
    if item.get("name") == VAULT_NAME:
        raise ConfigError(
            f"{table}: the source name {VAULT_NAME!r} is reserved for lore's built-in playbook pack; "
            "give this source another name"
        )
    model = source_config_model(item.get("type", "filesystem"), table)
    unknown = [str(key) for key in item if key not in model.model_fields]
    if unknown:
        raise ConfigError("; ".join(unknown_key_message(key, model.model_fields, table) for key in unknown))
    try:
        return model.model_validate(item)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'table'}: {field_problem(error)}"
            for error in err.errors()
        )
        raise ConfigError(f"{table}: {problems}") from err
