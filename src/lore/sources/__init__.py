"""Knowledge sources, built by ``type`` from a ``[[sources]]`` table.

Each source module exposes ``from_config(config, settings, visibility)``; the pydantic
model of its ``[[sources]]`` table (a ``SourceConfig`` subclass that forbids undeclared
keys) is in ``lore.source_tables``, which validates tables when settings load. A source
module is imported only when a source of its type is built.
Visibility, access and tenant are parsed here, once, for every type (``parse_scope``);
refusing an undeclared visibility is sync's job, because ``lore sources`` must still be
able to list such a source.

The built-in playbook pack (``lore.sources.vault``) is not a ``[[sources]]`` type: it is
configured by ``[vault]`` and joins the user's sources in ``source_configs``, under a
name no user source may take, so that no user source's sync can prune or rewrite it.
"""

from __future__ import annotations

import importlib

from lore import __version__
from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.models import Visibility
from lore.protocols import KnowledgeSource
from lore.source_tables import VAULT_NAME as VAULT_NAME
from lore.source_tables import VAULT_TYPE as VAULT_TYPE
from lore.source_tables import SourceConfig, SourcePaths
from lore.source_tables import source_config_model as source_config_model
from lore.source_tables import typed_source_config as typed_source_config
from lore.sources.scope import ScopedSource, SourceScope

#: Source type -> module exposing ``from_config`` (its table's model is in
#: ``lore.source_tables``).
SOURCE_TYPES: dict[str, str] = {
    "filesystem": "lore.sources.filesystem",
    "git": "lore.sources.git",
    "confluence": "lore.sources.confluence",
    "upload": "lore.sources.upload",
    "manual": "lore.sources.manual",
}

#: Uris only the pack's documents may have.
VAULT_URI_SCHEME = "vault://"


class VaultSourceConfig(SourceConfig):
    """The built-in playbook pack as ``lore sources`` and sync see it; never written in
    lore.toml (``[vault]`` switches it off)."""

    name: str = VAULT_NAME
    type: str = VAULT_TYPE
    visibility: str | None = Visibility.ALL_VIEWERS.value

    def location(self, settings: SourcePaths) -> str | None:
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
