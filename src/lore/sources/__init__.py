"""Knowledge sources, built by ``type`` from a ``[[sources]]`` table.

Each source module exposes ``CONFIG_MODEL``, the pydantic model of its ``[[sources]]``
table (a ``SourceConfig`` subclass that forbids undeclared keys), and
``from_config(config, settings, visibility)``. A module is imported only when a table
names its type; tables are validated when settings load, so such a module imports its
optional dependencies inside functions, not at the top.
Visibility, access and tenant are parsed here, once, for every type (``parse_scope``);
refusing an undeclared visibility is sync's job, because ``lore sources`` must still be
able to list such a source.

The built-in playbook pack (``lore.sources.vault``) is not a ``[[sources]]`` type: it is
configured by ``[vault]`` and joins the user's sources in ``source_configs``, under a
name no user source may take, so that no user source's sync can prune or rewrite it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping

from pydantic import ValidationError

from lore import __version__
from lore.config import LoreSettings, SourceConfig, field_problem, unknown_key_message
from lore.errors import ConfigError
from lore.models import Visibility
from lore.protocols import KnowledgeSource
from lore.sources.scope import ScopedSource, SourceScope

#: Source type -> module exposing ``CONFIG_MODEL`` and ``from_config``.
SOURCE_TYPES: dict[str, str] = {
    "filesystem": "lore.sources.filesystem",
    "git": "lore.sources.git",
    "confluence": "lore.sources.confluence",
    "upload": "lore.sources.upload",
    "manual": "lore.sources.manual",
}

#: The built-in pack's source name and type (``lore.sources.vault`` has the same values;
#: repeated here so that loading settings does not import the filesystem source).
VAULT_NAME = "vault"
VAULT_TYPE = "vault"
#: Uris only the pack's documents may have.
VAULT_URI_SCHEME = "vault://"


class VaultSourceConfig(SourceConfig):
    """The built-in playbook pack as ``lore sources`` and sync see it; never written in
    lore.toml (``[vault]`` switches it off)."""

    name: str = VAULT_NAME
    type: str = VAULT_TYPE
    visibility: str | None = Visibility.ALL_VIEWERS.value

    def location(self, settings: LoreSettings) -> str | None:
        return f"vault://lore/ (lore {__version__})"


def source_configs(settings: LoreSettings) -> list[SourceConfig]:
    """Every source a sync of ``settings`` covers: the ``[[sources]]`` tables, then the
    built-in playbook pack unless ``[vault] enabled = false``."""
    configs: list[SourceConfig] = list(settings.sources)
    if settings.vault.enabled:
        configs.append(VaultSourceConfig(every=settings.vault.every))
    return configs


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


def parse_scope(config: SourceConfig) -> tuple[Visibility | None, SourceScope]:
    """The visibility a source is built with and its access scope: an ``access`` list
    implies ``restricted``, and contradicts ``all-viewers``."""
    visibility = parse_visibility(config)
    groups = getattr(config, "access", None)
    tenant = getattr(config, "tenant", None)
    access = frozenset(str(group) for group in groups) if isinstance(groups, list) else None
    if access is not None and visibility == Visibility.ALL_VIEWERS:
        raise ConfigError(
            f"source {config.name!r}: access names who may read it, but visibility is "
            f'"{Visibility.ALL_VIEWERS}" (every viewer); keep one of the two'
        )
    if access is not None:
        visibility = Visibility.RESTRICTED
    return visibility, SourceScope(access, tenant if isinstance(tenant, str) else None)


def build_source(config: SourceConfig, settings: LoreSettings) -> KnowledgeSource:
    if isinstance(config, VaultSourceConfig):
        from lore.sources.vault import vault_source  # imports the filesystem source

        return vault_source()
    typed = typed_source_config(config)
    module = importlib.import_module(SOURCE_TYPES[typed.type])
    visibility, scope = parse_scope(typed)
    source: KnowledgeSource = module.from_config(typed, settings, visibility)
    if scope != SourceScope():
        return ScopedSource(source, scope)
    return source
