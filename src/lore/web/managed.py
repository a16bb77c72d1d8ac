"""Sources the service manages (``/v1/sources``), beside the ones lore.toml declares.

They are kept in ``<data dir>/sources.json`` (0600: a table may hold a secret such as an
access token), each validated by its type's own model exactly like a ``[[sources]]``
table. lore.toml stays the operator's file: the API never rewrites it, and its sources
are listed read-only. Only types that read nothing from the server's own disk may be
added over HTTP (a filesystem source would let an admin token index any file the server
can read). Secret fields are write-only: listings say whether one is set, never what.

With no upload or manual source configured, the service adds ``uploads`` and ``notes``
(visible to all viewers), so the page can upload and write notes out of the box.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from lore.config import LoreSettings, SourceConfig
from lore.errors import ConfigError
from lore.models import Visibility
from lore.sources import source_configs, typed_source_config
from lore.sources.stored import write_atomic

SOURCES_FILE = "sources.json"
#: Types an admin may add over HTTP: none of them reads a path on the server.
MANAGEABLE_TYPES = frozenset({"upload", "manual", "git", "confluence"})
DEFAULT_UPLOAD_SOURCE = "uploads"
DEFAULT_NOTES_SOURCE = "notes"
EDITABLE_TYPES = frozenset({"upload", "manual"})


class ManagedSources:
    def __init__(self, settings: LoreSettings) -> None:
        self.settings = settings
        self.path = settings.resolved_data_dir() / SOURCES_FILE
        self._lock = threading.Lock()

    def _tables(self) -> list[dict[str, Any]]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read {self.path}: {err}") from err
        tables = raw.get("sources") if isinstance(raw, dict) else None
        if not isinstance(tables, list):
            raise ConfigError(f'{self.path}: expected {{"sources": [...]}}')
        return [table for table in tables if isinstance(table, dict)]

    def managed(self) -> list[SourceConfig]:
        return [typed_source_config(table, number) for number, table in enumerate(self._tables(), start=1)]

    def all(self) -> list[tuple[SourceConfig, str]]:
        """Every source the service syncs, with where it comes from: ``lore.toml``,
        ``service`` (this file) or ``default``."""
        found = [(config, "lore.toml") for config in self.settings.sources]
        # the built-in playbook pack, unless ``[vault] enabled = false``
        pack = source_configs(self.settings)[len(self.settings.sources) :]
        found += [(config, "built-in") for config in pack]
        found += [(config, "service") for config in self.managed()]
        types = {config.type for config, _ in found}
        names = {config.name for config, _ in found}
        for kind, name in (("upload", DEFAULT_UPLOAD_SOURCE), ("manual", DEFAULT_NOTES_SOURCE)):
            if kind not in types and name not in names:
                table = {"name": name, "type": kind, "visibility": Visibility.ALL_VIEWERS.value}
                found.append((typed_source_config(table), "default"))
        return found

    def add(self, table: Mapping[str, Any]) -> SourceConfig:
        with self._lock:
            config = typed_source_config(dict(table))
            if config.type not in MANAGEABLE_TYPES:
                allowed = ", ".join(sorted(MANAGEABLE_TYPES))
                raise PermissionError(
                    f"{config.type} sources read the server's own disk; declare them in lore.toml "
                    f"(sources managed here: {allowed})"
                )
            if any(existing.name == config.name for existing, _ in self.all()):
                raise ValueError(f"a source named {config.name!r} exists")
            self._save([*self._tables(), dict(table)])
            return config

    def update(self, name: str, changes: Mapping[str, Any]) -> SourceConfig:
        with self._lock:
            tables = self._tables()
            for number, table in enumerate(tables):
                if table.get("name") == name:
                    if ("name" in changes and changes["name"] != name) or (
                        "type" in changes and changes["type"] != table.get("type")
                    ):
                        raise ValueError("a source's name and type cannot change; add a new source instead")
                    merged = {**table, **changes}
                    config = typed_source_config(merged, number + 1)
                    tables[number] = merged
                    self._save(tables)
                    return config
        raise KeyError(name)

    def remove(self, name: str) -> None:
        with self._lock:
            tables = self._tables()
            kept = [table for table in tables if table.get("name") != name]
            if len(kept) == len(tables):
                raise KeyError(name)
            self._save(kept)

    def _save(self, tables: list[dict[str, Any]]) -> None:
        write_atomic(self.path, json.dumps({"sources": tables}, indent=2).encode("utf-8") + b"\n", mode=0o600)


def public_view(config: SourceConfig, origin: str, settings: LoreSettings) -> dict[str, Any]:
    """A source as ``GET /v1/sources`` shows it: secrets as ``{"set": true}``, never their value."""
    shown: dict[str, Any] = {}
    for key, value in config.model_dump(mode="python").items():
        if isinstance(value, SecretStr):
            shown[key] = {"set": bool(value.get_secret_value())}
        elif isinstance(value, Path):
            shown[key] = str(value)
        else:
            shown[key] = value
    return {
        **shown,
        "origin": origin,
        "managed": origin == "service",
        "editable": config.type in EDITABLE_TYPES,
        "location": config.location(settings),
    }
